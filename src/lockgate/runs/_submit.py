"""The checked and stamped submit, made in one place for every caller: the client's
``submit`` and ``retry``, a parent's ``ctx.run_child`` and ``ctx.fan_out``.

What a submit knows of its workflow is decided once, by :func:`known`: the declaration when
the workflow is imported here, else the policy its workers recorded in the store
(``runs/_recorded.py``), else nothing (the run is stamped with no gates and the default cap).
The version, the gates and the payload cap a submit, signal, update or trigger is held to
all come from that one answer.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Unpack

from lockgate._clock import Clock
from lockgate._errors import ConfigurationError, InvalidParamsError
from lockgate._names import check_name, check_optional
from lockgate.journal._events import payload_size
from lockgate.runs._grouping import SubmitGroup
from lockgate.runs._recorded import recorded_cap, recorded_spec, recorded_stamp
from lockgate.stores import _notices as notices
from lockgate.stores._base import Store
from lockgate.stores._batch import SubmitOptions, new_run
from lockgate.stores._calls import call_store
from lockgate.workflow._spec import (
    WorkflowSpec,
    check_text,
    get_workflow,
    json_ready,
    policy_stamp,
)

MAX_START_DELAY = 365 * 86_400.0


@dataclass(frozen=True)
class Known:
    """What this process knows of the workflow ``name``: ``spec`` when it is imported here,
    else ``record``, the policy its workers recorded (None: none was, or the store keeps
    none)."""

    name: str
    spec: WorkflowSpec | None
    record: dict[str, Any] | None = None

    @property
    def versioned(self) -> dict[str, Any] | None:
        """The record when it names the version a run is stamped with: only such a record
        stamps a submit's version, gates and cap."""
        record = self.record
        return record if record is not None and isinstance(record.get("version"), str) else None

    def version(self) -> tuple[str, str]:
        """The version a run is stamped with, and its behaviour: the imported workflow's,
        else the one its workers recorded, else none (any worker may take it)."""
        if self.spec is not None:
            return self.spec.version, self.spec.version_behavior
        record = self.versioned
        if record is not None:
            return record["version"], str(record.get("version_behavior") or "auto_upgrade")
        return "", "auto_upgrade"

    def stamp(self, params: dict[str, Any]) -> dict[str, Any]:
        """The gates a run with ``params`` is stamped with."""
        if self.spec is not None:
            return policy_stamp(self.spec, params)
        return recorded_stamp(self.name, self.versioned, params)

    def check_payload(self, payload: Any, what: str, *, submit: bool = False) -> None:
        """Refuse a payload the run would have to journal over its workflow's cap: the
        imported workflow's cap, else the one its workers recorded, else the default. A
        submit's params are held to a record only when it names a version (see
        :attr:`versioned`)."""
        spec = self.spec
        if spec is None:
            record = self.versioned if submit else self.record
            spec = WorkflowSpec(
                name=self.name, max_event_payload_bytes=recorded_cap(self.name, record)
            )
        spec.check_payload(payload_size(payload), what)

    def trigger_spec(self) -> WorkflowSpec | None:
        """The declaration a trigger is checked against: the imported one, else the one
        the record describes, else None."""
        if self.spec is not None:
            return self.spec
        return recorded_spec(self.name, self.record) if self.record is not None else None


async def known(store: Store, name: str, spec: WorkflowSpec | None) -> Known:
    """What is known of ``name``: ``spec`` (the imported workflow) when given, else the
    policy its workers recorded, read from a store that keeps policies."""
    if spec is not None:
        return Known(name, spec)
    record = None
    if "policies" in store.capabilities():
        record = await call_store(store, store.get_workflow_policy, name)
    return Known(name, None, record)


def check_unregistered(name: str, params: Any) -> None:
    """Params of a workflow not imported here: a JSON object with string keys."""
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise InvalidParamsError(
            f"params for {name!r} must be a dict with string keys", workflow=name
        )
    check_text(params, f"params of {name!r}")
    if not json_ready(params):
        raise InvalidParamsError(f"params for {name!r} are not JSON-serializable", workflow=name)


def check_params(name: str, spec: WorkflowSpec | None, params: Any) -> dict[str, Any]:
    """``params`` checked against the imported workflow's signature, else as JSON
    (:class:`InvalidParamsError`)."""
    if spec is not None:
        return spec.validate_params(params)
    check_unregistered(name, params)
    assert isinstance(params, dict)
    return dict(params)


async def check_cap(store: Store, name: str, payload: Any, what: str) -> None:
    """Refuse a payload (a signal's, an update's, an answer's) the run would have to journal
    over its workflow's cap, before anything is sent."""
    (await known(store, name, get_workflow(name))).check_payload(payload, what)


async def queue_run(
    store: Store,
    name: str,
    run_id: str,
    params: dict[str, Any],
    spec: WorkflowSpec | None,
    *,
    group: SubmitGroup | None = None,
    **submit: Unpack[SubmitOptions],
) -> str:
    """Submit checked ``params`` as the run ``run_id``, stamped with the version and gates
    of ``spec`` (else those its workers recorded), through ``group`` when given; ``submit``
    is the rest of ``Store.submit_run``'s keywords but the stamp's. Returns the run's id
    (the first run's, for a repeated idempotency key)."""
    workflow = await known(store, name, spec)
    if spec is None:
        # Not imported here: hold the params to the cap the workers recorded, as their
        # attempt would hold its own journal.
        workflow.check_payload(params, f"params of {name!r}", submit=True)
    version, behavior = workflow.version()
    fields = {
        "version": version,
        "version_behavior": behavior,
        **submit,
        **workflow.stamp(params),
    }
    if group is not None:
        submitted = await group.create(new_run(name, run_id, params, **fields))
    else:
        submitted = await call_store(store, store.submit_run, name, run_id, params, **fields)
    if submit.get("start_at") is not None:
        notices.post(store, notices.WAITS)  # parked until then: a timer to arm
    return str(submitted)


async def submit_run(
    store: Store,
    clock: Clock,
    name: str,
    params: dict[str, Any] | None = None,
    *,
    idempotency_key: str | None = None,
    owner: str | None = None,
    metadata: dict[str, Any] | None = None,
    allow_unregistered: bool = True,
    start_at: datetime | None = None,
    delay: float | timedelta | None = None,
    run_id: str | None = None,
    group: SubmitGroup | None = None,
) -> str:
    """:meth:`WorkflowClient.submit <lockgate.WorkflowClient.submit>`: the request checked
    (names, params, metadata, timing, idempotency key), then queued; returns the run's id."""
    check_name("workflow name", name)
    check_optional("run id", run_id)
    check_optional("idempotency key", idempotency_key)
    spec = get_workflow(name)
    if spec is None and not allow_unregistered:
        raise ConfigurationError(f"workflow {name!r} is not imported in this process")
    params = dict(params or {}) if params is None or isinstance(params, dict) else params
    params = check_params(name, spec, params)
    check_text(metadata, f"metadata of a run of {name!r}")
    if metadata is not None and (not isinstance(metadata, dict) or not json_ready(metadata)):
        raise ValueError("metadata must be a JSON-serializable dict")
    when, timing = start_time(clock(), start_at, delay)
    body_hash = None
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise ValueError("idempotency_key must be a non-empty string")
        body_hash = hashlib.sha256(
            json.dumps({"params": params, "timing": timing}, sort_keys=True).encode()
        ).hexdigest()
    return await queue_run(
        store,
        name,
        run_id or uuid.uuid4().hex,
        params,
        spec,
        group=group,
        metadata=metadata,
        owner=owner,
        idempotency_key=idempotency_key,
        idempotency_body_hash=body_hash,
        start_at=when,
    )


def delay_seconds(delay: float | timedelta) -> float:
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise ValueError(f"delay must be seconds or a timedelta, not {delay!r}")
    return float(delay)


def start_time(
    now: float, start_at: datetime | None, delay: float | timedelta | None
) -> tuple[float | None, Any]:
    """When the body may start (None: now) and the timing as spelled, for idempotency."""
    if start_at is not None and delay is not None:
        raise ValueError("give start_at or delay, not both")
    if start_at is not None:
        if not isinstance(start_at, datetime) or start_at.tzinfo is None:
            raise ValueError("start_at must be a timezone-aware datetime")
        when = start_at.timestamp()
        spelled: Any = {"start_at": start_at.isoformat()}
    elif delay is not None:
        seconds = delay_seconds(delay)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        when, spelled = now + seconds, {"delay": seconds}
    else:
        return None, None
    if when - now > MAX_START_DELAY:
        raise ValueError("a run can be started at most 365 days ahead")
    return (when if when > now else None), spelled
