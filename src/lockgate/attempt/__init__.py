"""One attempt at a run: the runtime a body runs on, below the client and beside the worker.

- ``_attempt.py``: :class:`Attempt`, the durable operations, the heartbeat, replay and
  queries; ``_attempt_core.py``, its journal-facing half; ``_unwind.py``, how an attempt
  ends; ``_cancel_timeout.py`` and ``_blocked.py``, a body that ignores its cancel;
- the in-body calls that touch other runs: ``_children.py`` and ``_fanout.py`` (children),
  ``_chain.py`` (``continue_as_new``), ``_handon.py`` (a run re-gated before its body ran),
  ``_signal_send.py`` (``ctx.signal``), ``_stream.py`` (``ctx.consume``) and
  ``_interrupt.py`` (``ctx.interrupt``).

It implements the runtime protocol the body's context (``workflow/``) is written against, and
acts on other runs through ``runs/``, never through the client. The package exports no names
of its own: ``check_replay`` is exported by ``lockgate.workflow``.
"""

from __future__ import annotations

__all__: list[str] = []
