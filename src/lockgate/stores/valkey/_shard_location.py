"""Where a Valkey store keeps a run: its shard, and the keys of each shard.

A namespace's runs are split over ``shard_count`` shards. Every key of shard ``i``
carries the hash tag ``{<namespace>:<i>}`` (``lg:{<namespace>:<i>}:...``), and what is not one
shard's (idempotency records, version ranks, recorded policies, shard leases, the run -> shard
index, controls held for ids no shard holds yet) carries ``{<namespace>}``. With one shard the
two coincide: every key is ``lg:{<namespace>}:...``, the layout of an unsharded store. Every
script touches the keys of one prefix only, so one slot, and the store works unchanged on a
Valkey cluster. What follows the prefix (a kind, then each name or id length-prefixed) is in
``valkey._keys``; a store refuses a namespace written with another layout at connect.

A run's shard is that of its *shard key* (:func:`shard_for`): its ``Limit``'s concurrency key,
else its ``Rate``'s key, so that everything one gate key counts (its slots, its token bucket,
its queued runs) is in one shard and every claim checks it exactly. A run with both gates keyed
differently has its Rate bucket counted in its Limit key's shard: runs that share that rate key
but not the concurrency key may count it in other shards. An ungated run's shard key is its run
id; one a trigger fires, its trigger key (its buffer's shard, where the fire creates it).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from lockgate._errors import RunNotFoundError
from lockgate.stores._shards import shard_for
from lockgate.stores.valkey._keys import key, member
from lockgate.stores.valkey._loop import Commands, Op, Script, command, operation
from lockgate.stores.valkey._requests import ValkeyRequests

#: Runs whose shard one process remembers; past it the memory starts over.
LOCATED_CACHE = 100_000


class ValkeyShards(ValkeyRequests):
    """Each run's shard (remembered, indexed, else looked for), and keys by shard."""

    #: The namespace's shard count: the one asked for, else the one it recorded.
    shard_count: int
    _located_runs: dict[str, int]
    _claim_turn: itertools.count[int]

    def _key(self, kind: str, *parts: str, shard: int | None = None) -> str:
        """The key of ``kind`` for ``parts`` (names, ids, ...: see ``valkey._keys``) in
        ``shard`` (None: a namespace-wide one)."""
        return key(self.prefix if shard is None else self._prefixes[shard], kind, *parts)

    def _home(self, key: str) -> int:
        return shard_for(key, self.shard_count)

    def _located_op(self, name: str, run_id: str) -> Op[int | None]:
        """The shard holding the run, or None when none does: remembered, else the index
        (``shardof``: ``name SEP run_id`` -> shard, written before every submit), else every
        shard asked (a fired run whose index entry was lost with its process)."""
        if self.shard_count == 1:
            return 0
        entry = member(name, run_id)
        shard = self._located_runs.get(entry)
        if shard is not None:
            return shard
        [indexed] = yield command("HGET", self._key("shardof"), entry)
        if indexed is not None:
            shard = int(indexed)
        else:
            found = yield Commands(
                tuple(("EXISTS", self._key("r", name, run_id, shard=s)) for s in self._shards()),
                "locating a run",
            )
            shard = next((s for s, hit in enumerate(found) if int(hit)), None)
            if shard is None:
                return None
            yield command("HSETNX", self._key("shardof"), entry, str(shard))
        self._remember(name, run_id, shard)
        return shard

    _located = operation(_located_op)

    def _remember(self, name: str, run_id: str, shard: int) -> None:
        """Remember the run's shard (a run never changes shards)."""
        if self.shard_count == 1:
            return
        if len(self._located_runs) >= LOCATED_CACHE:
            self._located_runs.clear()
        self._located_runs[member(name, run_id)] = shard

    def _forget(self, name: str, run_id: str) -> None:
        """Forget where the run was thought to be: an index entry whose submit never landed."""
        self._located_runs.pop(member(name, run_id), None)

    def _run_shard_op(self, name: str, run_id: str) -> Op[int]:
        """The shard to address the run in: where it is, else the one its id hashes to (where
        a script finds it missing and answers so)."""
        located = yield from self._located_op(name, run_id)
        return located if located is not None else self._home(run_id)

    _run_shard = operation(_run_shard_op)

    def _on_run_op(self, script: str, name: str, run_id: str, *args: Any) -> Op[Any]:
        """Script ``script`` for the run (``name``, ``run_id``, ``*args``) in its shard."""
        shard = yield from self._run_shard_op(name, run_id)
        try:
            return (yield Script(script, (name, run_id, *args), shard))
        except RunNotFoundError:
            self._forget(name, run_id)
            raise

    _on_run = operation(_on_run_op)

    def _shards(self) -> range:
        return range(self.shard_count)

    def _claim_order_op(self, name: str, prefer: Sequence[int]) -> Op[list[int]]:
        """The shards a claim of ``name`` tries, in order: ``prefer``'s (as given), then the
        others from a place that moves on with every claim, so none is always last. Shards
        with nothing queued are left out (asked in one round trip)."""
        if self.shard_count == 1:
            return [0]
        first = list(dict.fromkeys(s for s in prefer if 0 <= s < self.shard_count))
        start = next(self._claim_turn) % self.shard_count
        rest = [s for s in (*range(start, self.shard_count), *range(start)) if s not in first]
        order = first + rest
        queued = yield Commands(
            tuple(("EXISTS", self._key("qb", name, shard=s)) for s in order), "claim"
        )
        return [s for s, hit in zip(order, queued, strict=True) if int(hit)]
