"""ValkeyStore's Collect and Debounce buffers, and the fired-through marks of batches buffered
outside the store.

A trigger fire builds its run inside its script, since the batch lives in Valkey: this side
gives it the run as :class:`TriggerPolicy` makes it, with slots for what only the script knows
(the batch, its sequence numbers, the time), and the script fills them in by joining JSON text,
so the buffered events are journaled exactly as they were buffered.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from lockgate._names import check_name
from lockgate.journal._events import RunEvent, as_stored
from lockgate.stores._gates import fair_bucket
from lockgate.stores._shards import shard_key
from lockgate.stores._triggers import BatchToFire, FiredBatch, TriggerPolicy, batch_submit
from lockgate.stores.valkey._events import event_args
from lockgate.stores.valkey._keys import mark_field, member
from lockgate.stores.valkey._lifecycle import ValkeyLifecycle, run_fields, soonest_op
from lockgate.stores.valkey._loop import Op, Script, command, operation
from lockgate.stores.valkey._replies import as_text, scored

#: Marks a slot in a template. Random per process, so no user string can pass for one.
SLOT_MARK = f"\x1elg-slot-{uuid.uuid4().hex}:"
#: A slot as ``json.dumps`` writes it: the mark's control character escaped.
_SLOT_JSON = re.compile(re.escape(json.dumps(SLOT_MARK)[:-1]) + r'(\w+)"')


def slot(name: str) -> str:
    """A value the trigger script fills in: ``events``, ``count``, ``first``, ``last``,
    ``now`` or ``params``."""
    return SLOT_MARK + name


def template(value: Any) -> list[str]:
    """``value`` as JSON text split around its slots: literal text at even indexes, a slot's
    name at odd ones, for the script to join with the slots filled in."""
    return _SLOT_JSON.split(json.dumps(value, allow_nan=False, separators=(",", ":")))


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def fired_run(policy: TriggerPolicy, name: str, key: str) -> list[str]:
    """The run a fire of ``key``'s buffer submits, as the trigger script takes it: its hash
    fields, its params and its ``run:init``, each with slots for the batch and the time."""
    _, submit = policy.submit(name, key, [], 0, 0)
    params = dict(submit.params, events=slot("events"), count=slot("count"))
    provenance = dict(submit.provenance or {})
    provenance["trigger"] = dict(provenance["trigger"], first=slot("first"), last=slot("last"))
    init = submit.opening_events("", 0.0, None)[0]
    payload = dict(init.payload, params=slot("params"), submitted_at=slot("now"))
    payload["provenance"] = provenance
    return [
        dumps(run_fields(submit, fair_bucket(submit.owner, submit.gates))),
        dumps(template(params)),
        dumps([init.kind, template(payload), init.schema_version, dumps(dict(init.headers))]),
    ]


def kept(event: RunEvent, run_seq: int) -> RunEvent:
    """``event`` as a fire's script keeps it in a new run's outbox at ``run_seq`` (no fence,
    so no epoch header): what reading the outbox back would give."""
    payload = as_stored(event.payload)
    return RunEvent(
        event.kind, payload, event.run_id, event.schema_version, run_seq, dict(event.headers)
    )


def policy_args(policy: TriggerPolicy) -> list[str]:
    """How a buffer of ``policy`` comes due and fills, as the trigger script takes it."""
    return [
        policy.mode,
        repr(float(policy.window_seconds)),
        "" if policy.max_events is None else str(policy.max_events),
        "" if policy.max_wait_seconds is None else repr(float(policy.max_wait_seconds)),
    ]


class ValkeyTriggers(ValkeyLifecycle):
    """Collect/Debounce buffers and fired-through marks on Valkey."""

    #: Per workflow, the shard the last :meth:`due_triggers` found each due buffer in.
    _buffers: dict[str, dict[str, int]]

    # -- trigger buffers -------------------------------------------------------------------------

    def _trigger(
        self, name: str, key: str, event: str, due_by: str, policy: TriggerPolicy
    ) -> str | None:
        """Buffer ``event`` (unless "") and fire the buffer if that fills it or it is due by
        ``due_by`` (unless ""): one script, in the buffer's shard. The fired run's id, or
        None."""
        shard = self._buffer_shard(name, key, policy)
        fired = self._script(
            "t_trigger",
            name,
            key,
            event,
            due_by,
            *policy_args(policy),
            *fired_run(policy, name, key),
            shard=shard,
        )
        if not fired:
            return None
        run_id = as_text(fired)
        if self.shard_count > 1:
            # The fire made the run in this step; its index entry follows (a reader that
            # finds none looks in every shard).
            self._cmd("HSET", self._key("shardof"), member(name, run_id), str(shard))
            self._remember(name, run_id, shard)
        return run_id

    def _buffer_shard(self, name: str, key: str, policy: TriggerPolicy) -> int:
        """The shard of ``key``'s buffer: that of the runs it fires (their gate key, else the
        trigger key), so a fire creates its run where the run's gates count it. A buffer that
        :meth:`due_triggers` found elsewhere (the gates changed while it filled) is fired
        where it is."""
        found = self._buffers.get(name, {}).get(key)
        if found is not None:
            return found
        gates = policy.gates
        return self._home(shard_key(gates.concurrency_key, gates.rate_key, key))

    def trigger_event(
        self, name: str, key: str, event: dict[str, Any], *, policy: TriggerPolicy
    ) -> str | None:
        check_name("workflow name", name)  # the fired run's name, in members joined by SEP
        return self._trigger(name, key, dumps(event), "", policy)

    def due_triggers(self, name: str, before: float, limit: int = 100) -> list[str]:
        due: list[tuple[float, int, str]] = []
        for shard in self._shards():
            found = self._cmd(
                "ZRANGEBYSCORE",
                self._key("tdue", name, shard=shard),
                "-inf",
                repr(float(before)),
                "WITHSCORES",
                "LIMIT",
                0,
                limit,
            )
            due.extend((at, shard, key) for key, at in scored(found).items())
        due.sort()
        if self.shard_count > 1:
            self._buffers[name] = {key: shard for _, shard, key in due[:limit]}
        return [key for *_, key in due[:limit]]

    def fire_trigger(
        self, name: str, key: str, *, policy: TriggerPolicy, due_by: float
    ) -> str | None:
        return self._trigger(name, key, "", repr(float(due_by)), policy)

    @operation
    def fire_batch(
        self,
        name: str,
        key: str,
        events: list[dict[str, Any]],
        *,
        policy: TriggerPolicy,
        source: str,
        first: int,
        last: int,
    ) -> Op[FiredBatch]:
        run_id, submit = batch_submit(
            name, key, events, policy, source=source, first=first, last=last
        )
        shard = self._mark_shard(key, policy)
        now = yield from self._server_now_op()
        fired_id, mark = yield Script(
            "t_fire_batch",
            (
                name,
                run_id,
                mark_field(source, key),
                str(first),
                str(last),
                dumps(run_fields(submit, fair_bucket(submit.owner, submit.gates))),
                event_args(submit.opening_events(run_id, now, None)),
            ),
            shard,
        )
        fired = as_text(fired_id) or None
        if fired is not None and self.shard_count > 1:
            # As for a buffer's fire: the run's index entry follows its creation.
            yield command("HSET", self._key("shardof"), member(name, fired), str(shard))
            self._remember(name, fired, shard)
        return FiredBatch(fired, int(mark))

    @operation
    def fire_batches(self, name: str, batches: Sequence[BatchToFire]) -> Op[list[FiredBatch]]:
        # One script per shard for its batches (in their order), one index write for every
        # run made: a pass of a consumer firing many windows costs a few requests, not a few
        # per window.
        if not batches:
            return []
        now = yield from self._server_now_op()
        by_shard: dict[int, list[int]] = {}
        args: list[tuple[str, ...]] = []
        opening: list[list[RunEvent]] = []
        for at, batch in enumerate(batches):
            run_id, submit = batch_submit(
                name,
                batch.key,
                list(batch.events),
                batch.policy,
                source=batch.source,
                first=batch.first,
                last=batch.last,
            )
            by_shard.setdefault(self._mark_shard(batch.key, batch.policy), []).append(at)
            opening.append(submit.opening_events(run_id, now, None))
            args.append(
                (
                    run_id,
                    mark_field(batch.source, batch.key),
                    str(batch.first),
                    str(batch.last),
                    dumps(run_fields(submit, fair_bucket(submit.owner, submit.gates))),
                    event_args(opening[-1]),
                )
            )
        answers: list[FiredBatch | None] = [None] * len(batches)
        index: list[str] = []
        for shard, ats in by_shard.items():
            flat = [arg for at in ats for arg in args[at]]
            reply = yield Script("t_fire_batches", (name, str(len(ats)), *flat), shard)
            for n, at in enumerate(ats):
                fired = as_text(reply[3 * n]) or None
                made = as_text(reply[3 * n + 2]) == "1"
                opened = tuple(kept(e, seq) for seq, e in enumerate(opening[at], 1)) if made else ()
                answers[at] = FiredBatch(fired, int(reply[3 * n + 1]), opened)
                if fired is not None and self.shard_count > 1:
                    index += [member(name, fired), str(shard)]
                    self._remember(name, fired, shard)
        if index:
            # As for one batch's fire: the runs' index entries follow their creation.
            yield command("HSET", self._key("shardof"), *index)
        return [answer for answer in answers if answer is not None]

    @operation
    def fired_through(
        self, name: str, source: str, keys: Mapping[str, TriggerPolicy]
    ) -> Op[dict[str, int]]:
        # Every shard, the highest mark of each: a key's marks live in the shard of its runs,
        # which moves when the workflow's gates change (a deploy adding a Limit).
        wanted = list(keys)
        found: dict[str, int] = {}
        if not wanted:
            return found
        fields = [mark_field(source, key) for key in wanted]
        for shard in self._shards():
            [marks] = yield command("HMGET", self._key("tfired", name, shard=shard), *fields)
            for key, mark in zip(wanted, marks, strict=True):
                if mark is not None:
                    found[key] = max(found.get(key, -1), int(mark))
        return found

    def forget_marks(self, name: str, source: str, below: int) -> int:
        prefix = mark_field(source, "")
        gone = 0
        for shard in self._shards():
            cursor = "0"
            while True:
                answer = self._script(
                    "t_forget_marks", name, prefix, str(below), cursor, shard=shard
                )
                cursor, gone = as_text(answer[0]), gone + int(answer[1])
                if cursor == "0":
                    break
        return gone

    def _mark_shard(self, key: str, policy: TriggerPolicy) -> int:
        """The shard of a batch's run, and so of its key's fired-through marks: that of the
        run's gate key, else of the trigger key, as for a buffer (:meth:`_buffer_shard`)."""
        gates = policy.gates
        return self._home(shard_key(gates.concurrency_key, gates.rate_key, key))

    @operation
    def next_trigger_due(self, name: str, after: float) -> Op[float | None]:
        keys = [self._key("tdue", name, shard=s) for s in self._shards()]
        return (yield from soonest_op(keys, after))
