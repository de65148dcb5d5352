"""ValkeyStore: the whole store interface on a Valkey (or Redis) server, shared by worker
processes on many hosts. Every state change is one Lua script (see ``stores/valkey/lua``)."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Sequence
from typing import Any

from lockgate._clock import iso
from lockgate._errors import DuplicateRunError, InvalidCursorError, RunNotFoundError
from lockgate._names import check_new_run
from lockgate.journal._events import RunEvent, RunStatus
from lockgate.stores._gates import Gates, WaitReason, fair_bucket, sooner, wait_reason
from lockgate.stores._poison import NO_POLICY_ARGS, PoisonPolicy
from lockgate.stores._records import Submit, derive_status
from lockgate.stores._shards import shard_key
from lockgate.stores._types import (
    ClaimedRun,
    Claims,
    RunControls,
    RunInfo,
    WaitSpec,
    Written,
    list_cursor,
)
from lockgate.stores.valkey._connection import ValkeyConnection
from lockgate.stores.valkey._events import event_args, event_from
from lockgate.stores.valkey._keys import SEP
from lockgate.stores.valkey._loop import Commands, Op, Script, command, operation
from lockgate.stores.valkey._replies import as_text, decode_hash, scored

#: Held or other-version runs a claim looks past in one fairness bucket.
CLAIM_SCAN = 64


def run_fields(submit: Submit, bucket: str) -> list[Any]:
    """A new run's hash fields, as the ``submit`` script takes them (a flat list)."""
    fields: dict[str, Any] = {
        "params": json.dumps(submit.params, separators=(",", ":")),
        "metadata": json.dumps(submit.metadata or {}, separators=(",", ":")),
        "owner": submit.owner or "",
        "version": submit.version,
        "version_behavior": submit.version_behavior,
        "bucket": bucket,
        "ckey": submit.concurrency_key if submit.concurrency_key is not None else "",
        "cmax": submit.concurrency_max if submit.concurrency_max is not None else "",
        "rkey": submit.rate_key if submit.rate_key is not None else "",
        "rps": repr(float(submit.rate_per_second)) if submit.rate_per_second is not None else "",
        "rburst": submit.rate_burst if submit.rate_burst is not None else "",
    }
    flat: list[Any] = []
    for key, value in fields.items():
        flat.extend([key, value])
    return flat


#: The ``run:init`` headers naming a run's idempotency key, its request's body hash and when
#: the key's record expires (epoch seconds), where the journal keeps them.
IDEMPOTENCY_KEY_HEADER = "lg-idempotency-key"
IDEMPOTENCY_HASH_HEADER = "lg-idempotency-hash"
IDEMPOTENCY_UNTIL_HEADER = "lg-idempotency-until"


def idempotency_headers(
    headers: dict[str, str] | None, key: str, body_hash: str, until: float
) -> dict[str, str]:
    """``headers`` with the run's idempotency record added."""
    return {
        **(headers or {}),
        IDEMPOTENCY_KEY_HEADER: key,
        IDEMPOTENCY_HASH_HEADER: body_hash,
        IDEMPOTENCY_UNTIL_HEADER: repr(float(until)),
    }


def soonest_op(keys: Sequence[str], after: float) -> Op[float | None]:
    """The lowest score above ``after`` in the sorted sets ``keys`` (one round trip), or
    None: the next deadline of a timer or trigger index, over its shards."""
    bound = f"({float(after)!r}"
    replies = yield Commands(
        tuple(("ZRANGEBYSCORE", key, bound, "+inf", "WITHSCORES", "LIMIT", 0, 1) for key in keys),
        "due",
    )
    return min((at for reply in replies for at in scored(reply).values()), default=None)


def _position(kept: Any) -> tuple[int, int] | None:
    """A run's ``journal_at`` field (``partition:offset``, see ``keep_journal_position``)."""
    partition, _, offset = as_text(kept).partition(":")
    return (int(partition), int(offset)) if offset else None


def _created(answer: Any, opening: list[RunEvent]) -> tuple[str, list[RunEvent] | None]:
    """The ``submit`` script's answer: the run id, and ``opening`` when the script made the
    run with those events alone (its last ``run_seq`` is their count)."""
    if not isinstance(answer, list):
        return as_text(answer), None  # the run was there before
    made = int(answer[1]) == len(opening)
    return as_text(answer[0]), opening if made else None


def _written(last_seq: Any, epoch: Any) -> Written:
    return Written(int(last_seq), as_text(epoch) or None)


def _controls(cancel_at: Any, pause_at: Any, updates: Any) -> RunControls:
    return RunControls(
        as_text(cancel_at) or None if cancel_at is not None else None,
        as_text(pause_at) or None if pause_at is not None else None,
        int(updates) > 0,
    )


class ValkeyLifecycle(ValkeyConnection):
    """The lifecycle and event-log roles on Valkey."""

    #: Whether a run's idempotency key goes into its ``run:init`` headers
    #: (:func:`idempotency_headers`): set where the journal outlives Valkey, so that
    #: ``lockgate store rebuild`` can keep the key again.
    journal_idempotency: bool = False

    #: Events per reply when a journal is read (the store's ``replay_page_size``).
    replay_page_size: int = 1_000
    #: The most bytes of events per reply when a journal is read (bar one larger event).
    replay_page_bytes: int = 8 * 1024 * 1024

    def _now(self) -> float:
        return self._server_now()

    def _fields_op(self, name: str, run_id: str) -> Op[dict[str, str] | None]:
        """The run's hash, or None when no shard holds the run."""
        shard = yield from self._located_op(name, run_id)
        if shard is None:
            return None
        [raw] = yield command("HGETALL", self._key("r", name, run_id, shard=shard))
        if not raw:
            self._forget(name, run_id)
            return None
        return decode_hash(raw)

    _fields = operation(_fields_op)

    def _info(self, name: str, run_id: str, fields: dict[str, str], now: float) -> RunInfo:
        wait = WaitSpec.from_dict(json.loads(fields["wait"])) if fields.get("wait") else None
        lock = fields.get("lock") or None
        live = lock is not None and float(fields.get("lock_expires") or 0) > now
        terminal = fields.get("terminal") or None
        return RunInfo(
            name=name,
            run_id=run_id,
            status=derive_status(
                terminal=RunStatus(terminal) if terminal else None,
                lock_live=live,
                lock_set=lock is not None,
                wait_kind=wait.kind if wait is not None else None,
                queued=bool(fields.get("queued")),
            ),
            submitted_at=float(fields["submitted_at"]),
            params=json.loads(fields["params"]),
            owner=fields.get("owner") or None,
            metadata=json.loads(fields.get("metadata") or "{}"),
            version=fields.get("version", ""),
            version_behavior=fields.get("version_behavior", "pinned"),
            lock_holder=lock if live else None,
            wait=wait,
            cancel_requested_at=fields.get("cancel_at") or None,
            ended_at=float(fields["ended_at"]) if fields.get("ended_at") else None,
        )

    def _submit_args(self, submit: Submit, opening: list[RunEvent], now: float) -> list[str]:
        """The ``submit`` script's run fields, opening events and delayed start (A(3)..A(6)),
        as of ``now``."""
        wait = ""
        due = ""
        if submit.delayed(now):
            assert submit.start_at is not None
            wait = json.dumps(
                {
                    "kind": "start",
                    "wait_id": "start",
                    "call_index": -1,
                    "due_at": submit.start_at,
                    "signal": None,
                }
            )
            due = repr(float(submit.start_at))
        return [
            json.dumps(run_fields(submit, fair_bucket(submit.owner, submit.gates))),
            event_args(opening),
            wait,
            due,
        ]

    @operation
    def create_run(
        self,
        submit: Submit,
        run_id: str,
        *,
        headers: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
    ) -> Op[str]:
        """Create the run, as of the store's time (read once). With one shard, one script.
        With more, two steps: ``g_route`` (namespace-wide: the idempotency key, the run ->
        shard index, held controls), then ``submit`` in the run's shard; a submit that fails
        after the first leaves an index entry naming a shard without the run, which reads take
        for a missing run. Names and ids are checked first: members join them with ``SEP``,
        which the naming rules keep out of them."""
        created, _ = yield from self._create_op(
            submit, run_id, headers, idempotency_key, idempotency_body_hash, idempotency_ttl
        )
        return created

    def _create_op(
        self,
        submit: Submit,
        run_id: str,
        headers: dict[str, str] | None,
        idempotency_key: str | None,
        idempotency_body_hash: str | None,
        idempotency_ttl: int,
    ) -> Op[tuple[str, list[RunEvent] | None]]:
        """:meth:`create_run`, with the events it journaled when this call made the run and
        they are all the run has (None when the run was there before, or a control held for
        the id was latched beside them)."""
        check_new_run(submit.name, run_id, idempotency_key)
        now = yield from self._server_now_op()
        keep = repr(submit.keep_key_for(idempotency_ttl, now))
        key, body = idempotency_key or "", idempotency_body_hash or ""
        if key and self.journal_idempotency:
            headers = idempotency_headers(headers, key, body, now + float(keep))
        opening = submit.opening_events(run_id, now, headers)
        args = self._submit_args(submit, opening, now)
        if self.shard_count == 1:
            answer = yield Script("submit", (submit.name, run_id, *args, key, body, keep, ""))
            return _created(answer, opening)
        shard = self._submit_shard(submit, run_id)
        kind, value = yield from self._route_op(submit.name, run_id, shard, key, body, keep)
        if kind == "existing":
            return (yield from self._finish_first_op(submit, value, headers, key)), None
        try:
            answer = yield Script(
                "submit", (submit.name, run_id, *args, key, body, keep, value), shard
            )
        except DuplicateRunError:
            if key:
                yield Script("g_unroute", (submit.name, key, run_id))
            raise
        yield from self._routed_op(submit.name, run_id, shard, value)
        return run_id, _created(answer, opening)[1]

    def _submit_shard(self, submit: Submit, run_id: str) -> int:
        return self._home(
            shard_key(submit.concurrency_key, submit.rate_key, submit.shard_key or run_id)
        )

    def _route_op(
        self, name: str, run_id: str, shard: int, key: str = "", body: str = "", keep: str = "0"
    ) -> Op[tuple[str, str]]:
        """``g_route`` for a run about to be created in ``shard``: ``("existing", run id)``
        for a live idempotency key, else ``("routed", held controls as JSON)``. Raises
        :class:`DuplicateRunError` when the id is a run of another shard."""
        answer = yield Script("g_route", (name, run_id, str(shard), key, body, keep, ""))
        if as_text(answer[0]) == "elsewhere":
            other = int(answer[1])
            [exists] = yield command("EXISTS", self._key("r", name, run_id, shard=other))
            if int(exists):
                raise DuplicateRunError(name, run_id)
            # A submit routed there never created the run: the id is free to route here.
            answer = yield Script("g_route", (name, run_id, str(shard), key, body, keep, "1"))
        return as_text(answer[0]), as_text(answer[1])

    def _routed_op(self, name: str, run_id: str, shard: int, held: str) -> Op[None]:
        """After the run was created in ``shard``: remember it, and drop the controls held
        namespace-wide that its submit applied."""
        self._remember(name, run_id, shard)
        if held != "{}":
            yield command("DEL", self._key("held", name, run_id))

    def _finish_first_op(
        self, submit: Submit, first_id: str, headers: dict[str, str] | None, key: str
    ) -> Op[str]:
        """The run a live idempotency key names. When its submit kept the key but did not
        create the run (its process died between the two steps), this repeat of the request
        creates it; a race with that submit creates it once (the run carries the key)."""
        if (yield from self._fields_op(submit.name, first_id)) is not None:
            return first_id
        shard = self._submit_shard(submit, first_id)
        _, held = yield from self._route_op(submit.name, first_id, shard)
        now = yield from self._server_now_op()
        args = self._submit_args(submit, submit.opening_events(first_id, now, headers), now)
        yield Script("submit", (submit.name, first_id, *args, key, "", "0", held), shard)
        yield from self._routed_op(submit.name, first_id, shard, held)
        return first_id

    @operation
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Op[str | None]:
        claimed, _ = yield from self._claim_op(name, [worker_id], worker_version, prefer, "")
        return as_text(claimed[0]) if claimed else None

    @operation
    def claim_next_run_loaded(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Op[ClaimedRun | None]:
        claimed = yield from self._claims_loaded_op(name, [worker_id], worker_version, prefer)
        return claimed[0] if claimed else None

    @operation
    def claim_next_runs_loaded(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Op[Claims]:
        return (yield from self._claims_loaded_op(name, leases, worker_version, prefer))

    def _claims_loaded_op(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None,
        prefer: Sequence[int],
    ) -> Op[Claims]:
        """The claims, each with its run's journal and controls, in one script per shard
        tried: one round trip when the first shard has enough."""
        answers, next_token_in = yield from self._claim_op(
            name, leases, worker_version, prefer, "load"
        )
        claimed = Claims(next_token_in=next_token_in)
        for run_id, entries, cancel_at, pause_at, updates, journal_at in answers:
            run_id = as_text(run_id)
            events: list[RunEvent] | None = None
            if entries is not None:
                events = [event_from(name, run_id, entry, fields) for entry, fields in entries]
            else:  # more than one page: read page by page, else left to the attempt to load
                with contextlib.suppress(Exception):
                    events = yield from self._journal_op(name, run_id, 0)
            controls = _controls(cancel_at, pause_at, updates)
            claimed.append(ClaimedRun(run_id, events, controls, _position(journal_at)))
        return claimed

    def _claim_op(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None,
        prefer: Sequence[int],
        load: str,
    ) -> Op[tuple[list[Any], float | None]]:
        """``claim_next`` in each shard with queued runs, ``prefer``'s first, until every
        lease has a run: the claims still reach every shard, so no run is stranded. With the
        claims, when they came short, the soonest token of a bucket a Rate refused."""
        if any(not lease or SEP in lease for lease in leases):
            raise ValueError(f"a lease must be non-empty, without {SEP!r}: {list(leases)!r}")
        claimed: list[Any] = []
        next_token_in: float | None = None
        for shard in (yield from self._claim_order_op(name, prefer)):
            if len(claimed) == len(leases):
                break
            remaining = SEP.join(leases[len(claimed) :])
            page = (self.replay_page_size, self.replay_page_bytes)
            try:
                answer, token_in = yield Script(
                    "claim_next",
                    (name, remaining, worker_version or "", CLAIM_SCAN, load, *page),
                    shard,
                )
            except Exception:
                if claimed:
                    return claimed, None  # the runs claimed so far are the caller's
                raise
            for claim in answer:
                self._remember(name, as_text(claim[0] if load else claim), shard)
            claimed.extend(answer)
            if as_text(token_in):
                next_token_in = sooner(next_token_in, float(as_text(token_in)))
        return claimed, (next_token_in if len(claimed) < len(leases) else None)

    def claim_run(
        self, name: str, run_id: str, worker_id: str, *, poison: PoisonPolicy | None = None
    ) -> None:
        policy = poison.script_args() if poison is not None else NO_POLICY_ARGS
        self._on_run("claim_run", name, run_id, worker_id, *policy)

    @operation
    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> Op[None]:
        yield from self._on_run_op("release", name, run_id, worker_id or "", "")

    @operation
    def requeue_run(
        self, name: str, run_id: str, worker_id: str | None = None, *, reason: str = "owner_gone"
    ) -> Op[None]:
        yield from self._on_run_op("requeue", name, run_id, worker_id or "", reason)

    def recover_pending_runs(
        self, name: str, now: float | None = None, *, poison: PoisonPolicy | None = None
    ) -> list[str]:
        at = "" if now is None else repr(float(now))
        policy = poison.script_args() if poison is not None else NO_POLICY_ARGS
        recovered: list[str] = []
        for shard in self._shards():
            answer = self._script("recover", name, at, *policy, shard=shard)
            recovered.extend(as_text(r) for r in answer)
        return recovered

    def recover_lapsed_holders(
        self, name: str, *, keep: Sequence[str] = (), poison: PoisonPolicy | None = None
    ) -> list[str]:
        # Two steps: the presence records are namespace-wide and each shard's runs live in
        # their own hash slot, which no one script may span on a cluster. A worker read as
        # lapsed here that writes its record again before a shard's script runs has been
        # silent past its presence TTL already, which is what takeover judges.
        kept = set(keep)
        lapsed = [w for w in map(as_text, self._script("i_lapsed_workers")) if w not in kept]
        if not lapsed:
            return []
        policy = poison.script_args() if poison is not None else NO_POLICY_ARGS
        recovered: list[str] = []
        for shard in self._shards():
            answer = self._script("takeover", name, *policy, *lapsed, shard=shard)
            recovered.extend(as_text(r) for r in answer)
        return recovered

    def note_loop_blocked(self, name: str, run_id: str, lease: str) -> bool:
        try:
            return bool(self._on_run("note_blocked", name, run_id, lease))
        except RunNotFoundError:
            return False

    def explain_wait(self, name: str, run_id: str) -> WaitReason | None:
        fields = self._fields(name, run_id)
        if fields is None:
            self._on_run("explain_wait", name, run_id)  # raises RunNotFoundError
            return None
        answer = self._on_run("explain_wait", name, run_id)
        if not answer:
            return None
        position, holding, tokens = answer
        gates = Gates(
            fields.get("ckey") or None,
            int(fields["cmax"]) if fields.get("cmax") else None,
            fields.get("rkey") or None,
            float(fields["rps"]) if fields.get("rps") else None,
            int(fields["rburst"]) if fields.get("rburst") else None,
        )
        counted = as_text(tokens)
        return wait_reason(gates, int(position), int(holding), float(counted) if counted else None)

    def get_pending_count(self, name: str) -> int:
        pending = 0
        for shard in self._shards():
            buckets = self._cmd("SMEMBERS", self._key("qb", name, shard=shard))
            for bucket in buckets:
                pending += int(
                    self._cmd("ZCARD", self._key("q", name, as_text(bucket), shard=shard))
                )
        return pending

    @operation
    def heartbeat(
        self, name: str, run_id: str, worker_id: str
    ) -> Op[tuple[str | None, str | None]]:
        cancel_at, pause_at = yield from self._on_run_op("heartbeat", name, run_id, worker_id)
        return (as_text(cancel_at) or None, as_text(pause_at) or None)

    def lock_holder(self, name: str, run_id: str) -> str | None:
        fields = self._fields(name, run_id)
        if fields is None or not fields.get("lock"):
            return None
        return fields["lock"] if float(fields.get("lock_expires") or 0) > self._now() else None

    def request_cancel(
        self, name: str, run_id: str, *, detail: dict[str, Any] | None = None
    ) -> str:
        at = iso(self._now())
        return as_text(self._control("request_cancel", name, run_id, at, json.dumps(detail or {})))

    def _control(self, script: str, name: str, run_id: str, *args: str) -> Any:
        """A cancel or pause (``script``): latched on the run in its shard, or held for an id
        no shard holds yet. Held namespace-wide unless the id was routed to a shard meanwhile
        (the script answers which, writing nothing): then held in that shard, where its
        submit takes it in the same step that creates the run."""
        shard = self._located(name, run_id)
        if shard is not None:
            return self._script(script, name, run_id, *args, "", shard=shard)
        answer = self._script(script, name, run_id, *args, "route")
        if isinstance(answer, list):
            shard = int(answer[1])
            answer = self._script(script, name, run_id, *args, "", shard=shard)
        return answer

    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        controls = self.poll_run(name, run_id)
        return controls.cancel_requested_at, controls.pause_requested_at

    @operation
    def poll_run(self, name: str, run_id: str) -> Op[RunControls]:
        shard = yield from self._located_op(name, run_id)
        if shard is None:
            raise RunNotFoundError(name, run_id)
        key = self._key("r", name, run_id, shard=shard)
        (cancel_at, pause_at, exists), updates = yield Commands(
            (
                ("HMGET", key, "cancel_at", "pause_at", "submitted_at"),
                ("HLEN", self._key("upd", name, run_id, shard=shard)),
            ),
            "poll_run",
        )
        if exists is None:
            self._forget(name, run_id)
            raise RunNotFoundError(name, run_id)
        return _controls(cancel_at, pause_at, updates)

    @operation
    def get_run(self, name: str, run_id: str) -> Op[RunInfo | None]:
        fields = yield from self._fields_op(name, run_id)
        if fields is None:
            return None
        now = yield from self._server_now_op()
        return self._info(name, run_id, fields, now)

    def list_runs(
        self, name: str, *, limit: int = 50, cursor: str | None = None, owner: str | None = None
    ) -> tuple[list[RunInfo], str | None]:
        """Newest first, merged over the shards. The cursor holds, per shard, the ``ord``
        (that shard's submit order) below which its runs are not shown yet."""
        bounds = cursor.split(",") if cursor else [""] * self.shard_count
        if cursor and len(bounds) != self.shard_count:
            raise InvalidCursorError(
                f"list_runs cursor {cursor[:40]!r} is not one of this store's", cursor=cursor
            )
        for bound in bounds:
            if bound:
                list_cursor(bound)  # each shard's bound: an order the store could hold
        now = self._now()
        found: list[tuple[float, int, int, RunInfo]] = []
        for shard in self._shards():
            bounds[shard], newest = self._newest(name, shard, bounds[shard], limit + 1, owner, now)
            found.extend(newest)
        # One shard: its submit order. More: submit times, which every shard shares.
        found.sort(key=lambda f: (f[0] if self.shard_count > 1 else 0.0, f[1], f[2]))
        found.reverse()
        shown = found[:limit]
        for _, order, shard, _ in shown:
            bounds[shard] = str(order)
        more = len(found) > limit
        return [info for *_, info in shown], (",".join(bounds) if more else None)

    def _newest(
        self, name: str, shard: int, bound: str, want: int, owner: str | None, now: float
    ) -> tuple[str, list[tuple[float, int, int, RunInfo]]]:
        """Up to ``want`` runs of ``shard`` with an ``ord`` below ``bound``, newest first, of
        ``owner`` when given: (submitted at, ord, shard, info) each. An empty ``bound`` (a
        first page) becomes one above the shard's newest run, so runs submitted later stay
        out of the pages that follow; the bound used comes back with the runs."""
        if not bound:
            bound = str(int(self._cmd("GET", self._key("ord", name, shard=shard)) or 0) + 1)
        found: list[tuple[float, int, int, RunInfo]] = []
        offset, page_size = 0, max(want * 2, 64)
        while len(found) < want:
            page: list[tuple[Any, float]] = self._io(
                functools.partial(
                    self._redis.zrevrangebyscore,
                    self._key("runs", name, shard=shard),
                    f"({bound}",
                    "-inf",
                    start=offset,
                    num=page_size,
                    withscores=True,
                ),
                "list_runs",
            )
            if not page:
                break
            run_ids = [as_text(member) for member, _ in page]
            # The page's runs read in one round trip (their keys share the shard's slot), not
            # one each (a page of fifty runs took fifty-one round trips).
            hashes = self._io(
                functools.partial(
                    self._pipeline,
                    *(("HGETALL", self._key("r", name, run_id, shard=shard)) for run_id in run_ids),
                ),
                "list_runs",
            )
            for run_id, (_, score), raw in zip(run_ids, page, hashes, strict=True):
                fields = decode_hash(raw) if raw else None
                if fields is None or (owner is not None and fields.get("owner") != owner):
                    continue
                info = self._info(name, run_id, fields, now)
                found.append((float(fields["submitted_at"]), int(score), shard, info))
            offset += len(page)
        return bound, found

    def ping(self) -> None:
        self._cmd("PING")

    @operation
    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> Op[None]:
        yield from self._append_op(name, run_id, events, fence or "")

    @operation
    def append_and_poll(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> Op[RunControls]:
        """The fenced append and the controls read in one script: one round trip."""
        controls, _ = yield from self._append_and_poll_op(name, run_id, events, fence)
        return controls

    @operation
    def finish_if_quiet(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> Op[RunControls | None]:
        """The conditional terminal in one script: one round trip."""
        controls, _ = yield from self._finish_if_quiet_op(name, run_id, events, fence)
        return controls

    def _append_op(self, name: str, run_id: str, events: list[RunEvent], fence: str) -> Op[Written]:
        last_seq, epoch = yield from self._on_run_op(
            "append", name, run_id, event_args(events), fence
        )
        return _written(last_seq, epoch)

    def _append_and_poll_op(
        self, name: str, run_id: str, events: list[RunEvent], fence: str
    ) -> Op[tuple[RunControls, Written]]:
        last_seq, epoch, cancel_at, pause_at, updates = yield from self._on_run_op(
            "append", name, run_id, event_args(events), fence, "poll"
        )
        return _controls(cancel_at, pause_at, updates), _written(last_seq, epoch)

    def _finish_if_quiet_op(
        self, name: str, run_id: str, events: list[RunEvent], fence: str
    ) -> Op[tuple[RunControls | None, Written]]:
        """The terminal appended (None) or, when something waits for the attempt first, the
        run's controls, with the events appended all but the terminal."""
        last_seq, epoch, *rest = yield from self._on_run_op(
            "finish", name, run_id, event_args(events), fence
        )
        controls = None if len(rest) == 1 and as_text(rest[0]) == "ENDED" else _controls(*rest)
        return controls, _written(last_seq, epoch)

    @operation
    def load_run(
        self, name: str, run_id: str, *, max_events: int | None = None
    ) -> Op[list[RunEvent]]:
        return (yield from self._journal_op(name, run_id, 0, max_events))

    def _journal_op(
        self, name: str, run_id: str, after_seq: int, max_events: int | None = None
    ) -> Op[list[RunEvent]]:
        """The run's events after ``run_seq`` ``after_seq`` (up to ``max_events``), read a
        page at a time: at most ``replay_page_size`` events and ``replay_page_bytes`` bytes per
        reply (bar one larger event), so no one reply holds a whole long journal."""
        shard = yield from self._located_op(name, run_id)
        events: list[RunEvent] = []
        if shard is None:
            return events
        while max_events is None or len(events) < max_events:
            page = self.replay_page_size
            if max_events is not None:
                page = min(page, max_events - len(events))
            entries, more = yield Script(
                "read_page",
                (name, run_id, after_seq, page, self.replay_page_bytes),
                shard,
            )
            events.extend(event_from(name, run_id, entry, fields) for entry, fields in entries)
            if not entries or not int(more):
                break
            after_seq = int(as_text(entries[-1][0]).split("-", 1)[1])
        return events

    @operation
    def get_last_event(self, name: str, run_id: str) -> Op[RunEvent | None]:
        shard = yield from self._located_op(name, run_id)
        if shard is None:
            return None
        [entries] = yield command(
            "XREVRANGE", self._key("e", name, run_id, shard=shard), "+", "-", "COUNT", 1
        )
        if not entries:
            return None
        entry_id, fields = entries[0]
        return event_from(name, run_id, entry_id, fields)
