"""What any caller does to a run through the store, below both the client and the attempt
runtime: functions of a store (and a clock) that return ids, not handles.

- ``_chains.py``: following any id of a chain to its live run;
- ``_family.py``: the family of a run (its open children, the terminate cascade, the notice
  a child's end sends its parent).

``client/`` wraps these in handles; ``attempt/`` calls them from a body. Nothing here imports
either. The package exports no names of its own: its public values (``CloseResult``,
``resolve_continuation``) are exported by ``lockgate.client``.
"""

from __future__ import annotations

__all__: list[str] = []
