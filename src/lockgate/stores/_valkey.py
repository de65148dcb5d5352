"""ValkeyStore: the whole store interface on a Valkey (or Redis) server, shared by worker
processes on many hosts. Every state change is one Lua script (see ``stores/lua``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from lockgate._clock import iso
from lockgate._errors import RunNotFoundError
from lockgate.journal._events import RunEvent
from lockgate.stores._gates import Gates, WaitReason, wait_reason
from lockgate.stores._records import Submit
from lockgate.stores._types import ClaimedRun, RunControls, RunInfo
from lockgate.stores._valkey_core import (
    ValkeyCore,
    _text,
    event_args,
    event_from,
)

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


def _controls(cancel_at: Any, pause_at: Any, updates: Any) -> RunControls:
    return RunControls(
        _text(cancel_at) or None if cancel_at is not None else None,
        _text(pause_at) or None if pause_at is not None else None,
        int(updates) > 0,
    )


class ValkeyLifecycle(ValkeyCore):
    """The lifecycle and event-log roles on Valkey."""

    def _now(self) -> float:
        return self._server_now()

    def _submit(
        self,
        submit: Submit,
        run_id: str,
        headers: dict[str, str] | None,
        *,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        keep_seconds: float = 0.0,
    ) -> str:
        from lockgate.stores._gates import fair_bucket

        now = self._now()
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
        result = self._script(
            "submit",
            submit.name,
            run_id,
            json.dumps(run_fields(submit, fair_bucket(submit.owner, submit.gates))),
            event_args(submit.opening_events(run_id, now, headers)),
            wait,
            due,
            idempotency_key or "",
            idempotency_body_hash or "",
            repr(float(keep_seconds)),
        )
        return _text(result)

    def submit_run(
        self,
        name: str,
        run_id: str,
        params: dict[str, Any],
        *,
        metadata: dict[str, Any] | None = None,
        owner: str | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
        version: str = "",
        version_behavior: str = "pinned",
        concurrency_key: str | None = None,
        concurrency_max: int | None = None,
        rate_key: str | None = None,
        rate_per_second: float | None = None,
        rate_burst: int | None = None,
        provenance: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        start_at: float | None = None,
        gates_unknown: bool = False,
    ) -> str:
        submit = Submit(
            name,
            params,
            metadata,
            owner,
            version,
            version_behavior,
            concurrency_key,
            concurrency_max,
            rate_key,
            rate_per_second,
            rate_burst,
            provenance,
            start_at,
            gates_unknown,
        )
        now = self._now()
        delay = max(0.0, (start_at or now) - now)
        return self._submit(
            submit,
            run_id,
            headers,
            idempotency_key=idempotency_key,
            idempotency_body_hash=idempotency_body_hash,
            keep_seconds=idempotency_ttl + delay,
        )

    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> str | None:
        claimed = self._script("claim_next", name, worker_id, worker_version or "", CLAIM_SCAN)
        return _text(claimed) if claimed else None

    def claim_next_run_loaded(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> ClaimedRun | None:
        """The claim, the journal and the controls in one script: one round trip."""
        answer = self._script(
            "claim_next", name, worker_id, worker_version or "", CLAIM_SCAN, "load"
        )
        if not answer:
            return None
        run_id, entries, cancel_at, pause_at, updates = answer
        run_id = _text(run_id)
        return ClaimedRun(
            run_id,
            [event_from(name, run_id, entry_id, fields) for entry_id, fields in entries],
            _controls(cancel_at, pause_at, updates),
        )

    def claim_run(self, name: str, run_id: str, worker_id: str) -> None:
        self._script("claim_run", name, run_id, worker_id)

    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        self._script("release", name, run_id, worker_id or "", "")

    def requeue_run(
        self, name: str, run_id: str, worker_id: str | None = None, *, reason: str = "owner_gone"
    ) -> None:
        self._script("requeue", name, run_id, worker_id or "", reason)

    def recover_pending_runs(self, name: str, now: float | None = None) -> list[str]:
        recovered = self._script("recover", name, "" if now is None else repr(float(now)))
        return [_text(r) for r in recovered]

    def explain_wait(self, name: str, run_id: str) -> WaitReason | None:
        fields = self._fields(name, run_id)
        answer = self._script("explain_wait", name, run_id)
        if not answer or fields is None:
            return None
        position, holding, tokens = answer
        gates = Gates(
            fields.get("ckey") or None,
            int(fields["cmax"]) if fields.get("cmax") else None,
            fields.get("rkey") or None,
            float(fields["rps"]) if fields.get("rps") else None,
            int(fields["rburst"]) if fields.get("rburst") else None,
        )
        counted = _text(tokens)
        return wait_reason(gates, int(position), int(holding), float(counted) if counted else None)

    def get_pending_count(self, name: str) -> int:
        buckets = self._cmd("SMEMBERS", self._key("qb", name))
        return sum(int(self._cmd("ZCARD", self._key("q", name, _text(b)))) for b in buckets)

    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        cancel_at, pause_at = self._script("heartbeat", name, run_id, worker_id)
        return (_text(cancel_at) or None, _text(pause_at) or None)

    def lock_holder(self, name: str, run_id: str) -> str | None:
        fields = self._fields(name, run_id)
        if fields is None or not fields.get("lock"):
            return None
        return fields["lock"] if float(fields.get("lock_expires") or 0) > self._now() else None

    def request_cancel(
        self, name: str, run_id: str, *, detail: dict[str, Any] | None = None
    ) -> str:
        at = iso(self._now())
        return _text(
            self._script("request_cancel", name, run_id, at, json.dumps(dict(detail or {})))
        )

    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        controls = self.poll_run(name, run_id)
        return controls.cancel_requested_at, controls.pause_requested_at

    def poll_run(self, name: str, run_id: str) -> RunControls:
        key = self._key("r", name, run_id)
        (cancel_at, pause_at, exists), updates = self._io(
            lambda: self._pipeline(
                ("HMGET", key, "cancel_at", "pause_at", "submitted_at"),
                ("HLEN", self._key("upd", name, run_id)),
            ),
            "poll_run",
        )
        if exists is None:
            raise RunNotFoundError(name, run_id)
        return _controls(cancel_at, pause_at, updates)

    def _pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Commands sent together: one round trip, no atomicity (reads only)."""
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return list(pipe.execute())

    def get_run(self, name: str, run_id: str) -> RunInfo | None:
        fields = self._fields(name, run_id)
        if fields is None:
            return None
        return self._info(name, run_id, fields, self._now())

    def list_runs(
        self, name: str, *, limit: int = 50, cursor: str | None = None, owner: str | None = None
    ) -> tuple[list[RunInfo], str | None]:
        top = f"({cursor}" if cursor else "+inf"
        now = self._now()
        found: list[tuple[int, RunInfo]] = []
        offset, page_size = 0, max(limit * 2, 64)
        while len(found) <= limit:
            page: list[tuple[Any, float]] = self._io(
                functools.partial(
                    self._redis.zrevrangebyscore,
                    self._key("runs", name),
                    top,
                    "-inf",
                    start=offset,
                    num=page_size,
                    withscores=True,
                ),
                "list_runs",
            )
            if not page:
                break
            for member, score in page:
                run_id = _text(member)
                fields = self._fields(name, run_id)
                if fields is None or (owner is not None and fields.get("owner") != owner):
                    continue
                found.append((int(score), self._info(name, run_id, fields, now)))
            offset += len(page)
        more = len(found) > limit
        shown = found[:limit]
        return [info for _, info in shown], (str(shown[-1][0]) if more else None)

    def ping(self) -> None:
        self._cmd("PING")

    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> None:
        self._script("append", name, run_id, event_args(events), fence or "")

    def append_and_poll(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> RunControls:
        """The fenced append and the controls read in one script: one round trip."""
        cancel_at, pause_at, updates = self._script(
            "append", name, run_id, event_args(events), fence, "poll"
        )
        return _controls(cancel_at, pause_at, updates)

    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> list[RunEvent]:
        key = self._key("e", name, run_id)
        if max_events is not None and max_events <= 0:
            return []
        if max_events is None:
            entries = self._cmd("XRANGE", key, "-", "+")
        else:
            entries = self._cmd("XRANGE", key, "-", "+", "COUNT", max_events)
        return [event_from(name, run_id, entry_id, fields) for entry_id, fields in entries]

    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        entries = self._cmd("XREVRANGE", self._key("e", name, run_id), "+", "-", "COUNT", 1)
        if not entries:
            return None
        entry_id, fields = entries[0]
        return event_from(name, run_id, entry_id, fields)
