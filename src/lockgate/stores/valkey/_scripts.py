"""The Lua scripts' text as the server runs it: each script from ``lua/`` with the parts of
``lua/_lib.lua`` it uses in front (:func:`script_text`), read from the package's resources when
a script is first called."""

from __future__ import annotations

import functools
import re


def _lua(name: str) -> str:
    from importlib import resources  # here: a store that runs no script reads none

    return (resources.files("lockgate.stores.valkey") / "lua" / f"{name}.lua").read_text()


_MAIN_THEN_FLUSH = """local ok, result = pcall(main)
flush()
if ok then return result end
if type(result) == 'table' and result.err then return redis.error_reply(result.err) end
return redis.error_reply(tostring(result))
"""
_DEFINED = re.compile(r"^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.cache
def script_text(name: str) -> str:
    """Script ``name`` as the server runs it: the definitions of ``lua/_lib.lua`` it uses
    (directly or through one another), in the lib's order, then its own text as a function
    whose run ends with ``flush()`` (which writes the run fields ``set()`` kept back).

    The lib is split at its top-level ``local`` lines, each part defining one name. Only the
    parts a script needs go in front of it: Lua runs every top-level definition at every call,
    and the whole lib made each call tens of microseconds slower on the server."""
    lib = _lua("_lib")
    starts = [m.start() for m in _DEFINED.finditer(lib)]
    parts = {
        m.group(1): lib[start:end]
        for m, start, end in zip(
            _DEFINED.finditer(lib), starts, [*starts[1:], len(lib)], strict=True
        )
    }
    # The script runs as a function, so that set()'s writes are flushed however it ends: by
    # a return, a refusal (an error reply it returns) or a Lua error (raised again after).
    own = "local function main()\n" + _lua(name) + "\nend\n" + _MAIN_THEN_FLUSH
    needed: set[str] = set()
    pending = [word for word in _NAME.findall(own) if word in parts]
    while pending:
        word = pending.pop()
        if word not in needed:
            needed.add(word)
            pending.extend(w for w in _NAME.findall(parts[word]) if w in parts and w != word)
    return "".join(part for word, part in parts.items() if word in needed) + "\n" + own
