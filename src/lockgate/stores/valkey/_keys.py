"""The Valkey store's key layout, as Python builds it (``K`` in ``lua/_lib.lua`` builds the
same keys inside scripts; the two must agree byte for byte).

A key is a prefix (a shard's, ``lg:{<namespace>:<shard>}:``, or the namespace-wide one,
``lg:{<namespace>}:``), a kind fixed in the code (``r``, ``e``, ``q``, ``slot``, ...), then
each part taken from user input (a workflow name, a run id, an idempotency key, a Limit or
Rate key, a trigger key, a fairness bucket) as ``:<bytes>#<part>``, where ``<bytes>`` is the
length of the part's UTF-8 form in decimal. A reader knows where each part ends whatever it
holds, so no two (kind, parts) give one key: workflow ``billing:eu`` run ``42`` is
``r:10#billing:eu:2#42``, workflow ``billing`` run ``eu:42`` is ``r:7#billing:5#eu:42``.
The hash tag is the prefix's: Valkey hashes the text between a key's first ``{`` and the
first ``}`` after it, both in the prefix (a namespace holds no braces), so a brace in a name
never moves a key to another slot.

A few set and hash members join a name and an id with :data:`SEP` (U+001F): the run -> shard
index, timers, ended runs, buffered signals (``signal name SEP signal id SEP record``). That is
unambiguous because no name or id may hold U+001F (``lockgate._names``): the store's boundary
refuses one before anything is written.

:data:`KEY_LAYOUT` is the layout's generation, recorded in each namespace on first use. The
first generation joined the parts with ``:`` alone; a store refuses a namespace of another
generation (see ``ValkeyConnection._check_namespace``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

#: The key layout generation this store writes and reads.
KEY_LAYOUT = "2"
#: Joins a name and an id (or a worker and an expiry) in one member.
SEP = "\x1f"


def part(text: str) -> str:
    """One user-derived key part, length-prefixed: ``<bytes>#<text>``."""
    return f"{len(text.encode())}#{text}"


def key(prefix: str, kind: str, *parts: str) -> str:
    """The key of ``kind`` for ``parts`` under ``prefix``."""
    return prefix + kind + "".join(":" + part(p) for p in parts)


def parts_of(rest: str) -> list[str]:
    """The parts of a key after its kind (``:<bytes>#<part>...``), as :func:`key` wrote them.
    Raises ``ValueError`` on text it did not write."""
    data = rest.encode()
    found: list[str] = []
    at = 0
    while at < len(data):
        if data[at : at + 1] != b":":
            raise ValueError(f"not a key's parts: {rest!r}")
        mark = data.index(b"#", at)
        size = int(data[at + 1 : mark])
        if mark + 1 + size > len(data):
            raise ValueError(f"not a key's parts: {rest!r}")
        found.append(data[mark + 1 : mark + 1 + size].decode())
        at = mark + 1 + size
    return found


def member(name: str, run_id: str) -> str:
    """A run as one set or hash member: ``name SEP run_id``."""
    return name + SEP + run_id


def split_member(text: str) -> tuple[str, str]:
    """The (name, run id) of a :func:`member`."""
    name, _, run_id = text.partition(SEP)
    return name, run_id


def layout_refusal(namespace: str, layout: str, env: str) -> str:
    """Why a store refuses a namespace of key layout ``layout``, and what to do (``env``:
    the environment variable naming the namespace)."""
    if layout.isdigit() and int(layout) > int(KEY_LAYOUT):
        return (
            f"Valkey namespace {namespace!r} was written by a newer lockgate (key layout "
            f"{layout}; this one reads layout {KEY_LAYOUT}): upgrade lockgate to use it"
        )
    return (
        f"Valkey namespace {namespace!r} was written by an older lockgate (key layout "
        f"{layout}), whose keys could mix up names and ids holding ':'; this one uses key "
        f"layout {KEY_LAYOUT} and does not read it. Let the older lockgate finish its runs, "
        f"then delete the namespace's keys (lg:{{{namespace}}}:* and lg:{{{namespace}:<shard>}}:*)"
        f" or give this store a new namespace (namespace=... or {env})"
    )


def mark_field(source: str, key: str) -> str:
    """The field of ``key``'s fired-through mark in ``source`` (a trigger topic's partition), in
    its workflow's ``tfired`` hash."""
    return f"{source}{SEP}{key}"


#: A key with parts as this layout writes them: a kind, then a length-prefixed part.
_WITH_PARTS = re.compile(r"[a-z_]+:")
_PARTS_NOW = re.compile(r"[a-z_]+:\d+#")
#: Keys of a namespace looked at to tell which layout wrote it, at most.
LAYOUT_SAMPLE = 1_000


def written_now(rests: Iterable[str]) -> bool:
    """Whether a namespace that records no layout was written in this one, as its keys (what
    follows the prefix of each) show: some have parts, and every part is length-prefixed.
    False when one is not (layout 1) or no key has parts (nothing tells).

    A namespace this layout wrote can lose its ``layout`` key with the rest of its data (a
    Valkey restarted without persistence) and then be written again by processes connected
    before the loss: its queue counter comes back without it, which alone looks like layout 1."""
    found = False
    for rest in rests:
        if _WITH_PARTS.match(rest):
            if not _PARTS_NOW.match(rest):
                return False
            found = True
    return found


def under(cmd: Callable[..., Any], prefix: str, most: int = LAYOUT_SAMPLE) -> list[str]:
    """Up to about ``most`` of the keys under ``prefix``, each without it: ``SCAN`` pages
    through ``cmd`` (a store's one-command call), following the cursor until it ends."""
    pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"
    keys: list[str] = []
    cursor = "0"
    while True:
        cursor_raw, page = cmd("SCAN", cursor, "MATCH", pattern, "COUNT", 500)
        cursor = _decoded(cursor_raw)
        keys.extend(_decoded(k).removeprefix(prefix) for k in page)
        if cursor == "0" or len(keys) >= most:
            return keys


def _decoded(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
