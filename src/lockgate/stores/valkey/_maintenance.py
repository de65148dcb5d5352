"""``ValkeyStore.run_maintenance``: expired idempotency records and held controls dropped, and
runs ended longer ago than ``completed_ttl`` forgotten, a batch per script, in every shard."""

from __future__ import annotations

import re
from collections.abc import Iterator

from lockgate.stores.valkey._lifecycle import ValkeyLifecycle
from lockgate.stores.valkey._replies import as_text

#: Records with an ``expires_at`` that maintenance drops once it has passed.
EXPIRING = ("idem", "held")
#: Ended runs one maintenance script forgets.
FORGET_BATCH = 500
#: Keys one maintenance script judges.
MAINTENANCE_BATCH = 500


def glob_escaped(text: str) -> str:
    """``text`` matched literally by a ``SCAN ... MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


class ValkeyMaintenance(ValkeyLifecycle):
    """Maintenance of a Valkey namespace."""

    def run_maintenance(self, now: float | None = None) -> int:
        """Drop expired idempotency records and held controls, namespace-wide and in every
        shard, and forget runs that ended more than ``completed_ttl`` seconds before ``now``
        (the store's time by default). Returns how many records and runs went."""
        at = "" if now is None else repr(float(now))
        removed = 0
        places: list[int | None] = [None] if self.shard_count == 1 else [None, *self._shards()]
        for shard in places:
            for kind in EXPIRING:
                for batch in self._scan(kind, shard):
                    removed += int(self._script("t_expire", at, *batch, shard=shard))
        completed_ttl: float | None = getattr(self, "completed_ttl", None)
        if completed_ttl is not None:
            cutoff = repr((self._server_now() if now is None else now) - completed_ttl)
            for shard in self._shards():
                while True:
                    gone = int(self._script("t_forget_ended", cutoff, FORGET_BATCH, shard=shard))
                    removed += gone
                    if gone < FORGET_BATCH:
                        break
        return removed

    def _scan(self, kind: str, shard: int | None) -> Iterator[list[str]]:
        """The keys of ``kind``'s records in ``shard`` (None: namespace-wide), without the
        prefix, a batch at a time."""
        prefix = self._key("", shard=shard)
        pattern = glob_escaped(self._key(kind, shard=shard) + ":") + "*"
        cursor = "0"
        while True:
            cursor_raw, keys = self._cmd(
                "SCAN", cursor, "MATCH", pattern, "COUNT", MAINTENANCE_BATCH
            )
            cursor = as_text(cursor_raw)
            if keys:
                yield [as_text(k).removeprefix(prefix) for k in keys]
            if cursor == "0":
                return
