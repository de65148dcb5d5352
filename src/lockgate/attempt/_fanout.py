"""``ctx.fan_out``: one target run for many items, gathered in item order, bounded in flight.

The call takes one call position (``StepKind.FANOUT``). Its members are journaled in batches
(``members`` facts, see ``journal/_members.py``):

- a workflow target starts one child run per item, ``{run id}.fan{call position}.{item}``:
  each batch of starts is journaled (fenced, flushed) before its submits, and the outcomes
  found in one look are journaled together. The run is parked between looks, holding no
  worker slot, on the signal ``lockgate.fanout:{call position}`` its children send as they end
  (with the backstop timer of ``_children``);
- a step target runs one step per item in this attempt, at most ``max_in_flight`` at once,
  each outcome journaled as it comes.

A replay after a crash restarts nothing that started or finished: started children are read
(and submitted if their submit never landed), finished members are served from the journal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from lockgate._errors import ChildWorkflowError, StepResultTypeError
from lockgate.attempt._children import (
    MISSING,
    ChildOutcome,
    book,
    cancel_child,
    check_policy,
    child_error,
    child_params,
    describe_child_error,
    drain_notices,
    park_on_children,
    provenance,
    read_child,
    rebuild_child_error,
    submit_child,
)
from lockgate.attempt._unwind import describe_with_args, rebuild_error
from lockgate.journal._events import EventKind, StepKind, payload_size
from lockgate.runs._family import ChildRef
from lockgate.workflow._retry import DEFAULT_RETRY
from lockgate.workflow._runtime import StepContext
from lockgate.workflow._step import StepSpec, step_spec_for
from lockgate.workflow._targets import child_target, is_workflow

if TYPE_CHECKING:
    from lockgate.attempt._attempt_core import AttemptCore
    from lockgate.journal._replay import CallRecord
    from lockgate.workflow._spec import WorkflowSpec

#: The reserved signal a fan-out's children tell their end by (``+ call position``).
FANOUT_NOTICE = "lockgate.fanout:"


async def fan_out(
    core: AttemptCore,
    target: Callable[..., Any] | str,
    items: Iterable[Any],
    *,
    max_in_flight: int,
    parent_close: str,
) -> list[Any]:
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ValueError(f"ctx.fan_out max_in_flight must be an int >= 1, not {max_in_flight!r}")
    policy = check_policy("ctx.fan_out", parent_close)
    listed = list(items)
    if is_workflow(target):
        name, spec = child_target("ctx.fan_out", target)
        params = [child_params(name, spec, item) for item in listed]
        index, record = core.next_call(StepKind.FANOUT, name)
        await core.before_call(index, record)
        if record is not None and record.failed:
            raise rebuild_child_error(record.errors[-1])
        if record is not None and record.done:
            return [record.members[i].get("result") for i in range(len(listed))]
        return await _children(core, index, record, name, spec, params, max_in_flight, policy)
    step = step_spec_for(target)  # type: ignore[arg-type]
    index, record = core.next_call(StepKind.FANOUT, step.name)
    await core.before_call(index, record)
    if record is not None and record.failed:
        raise rebuild_error(record.errors[-1], step.name)
    if record is not None and record.done:
        return [step.from_journal(record.members[i].get("result")) for i in range(len(listed))]
    return await _steps(core, index, record, step, listed, max_in_flight)


def _base(index: int, name: str) -> dict[str, Any]:
    return {"call_index": index, "step_id": name, "kind": StepKind.FANOUT.value}


def _record_facts(core: AttemptCore, kind: str, base: dict[str, Any], facts: list[Any]) -> None:
    """Buffer ``facts`` as few events of ``kind`` as the payload cap allows."""
    cap = core.spec.max_event_payload_bytes
    room = (cap // 2) if cap is not None else None
    batch: list[Any] = []
    size = 0
    for fact in facts:
        fact_size = payload_size(fact) if room is not None else 0
        if batch and room is not None and size + fact_size > room:
            core.record_event(kind, {**base, "members": batch})
            batch, size = [], 0
        batch.append(fact)
        size += fact_size
    if batch:
        core.record_event(kind, {**base, "members": batch})


# -- children ---------------------------------------------------------------------------------


async def _children(
    core: AttemptCore,
    index: int,
    record: CallRecord | None,
    name: str,
    spec: WorkflowSpec | None,
    params: list[dict[str, Any]],
    max_in_flight: int,
    policy: str,
) -> list[Any]:
    base = _base(index, name)
    count = len(params)
    members: dict[int, dict[str, Any]] = dict(record.members) if record is not None else {}
    notify = FANOUT_NOTICE + str(index)
    started_at = float(members.get(0, {}).get("started_at") or core.clock())
    refs = {
        i: ChildRef(
            name,
            # The id journaled when the member started (a retry's seed keeps its first run's),
            # else the one this run gives it.
            str(members.get(i, {}).get("run_id") or f"{core.run_id}.fan{index}.{i}"),
            str(members.get(i, {}).get("parent_close") or policy),
        )
        for i in range(count)
    }
    prov = {i: provenance(core, index, notify, refs[i].parent_close) for i in range(count)}
    in_flight = {i for i, entry in members.items() if entry.get("state") == "started"}
    for i in in_flight:
        book(core).open[refs[i].run_id] = refs[i]
    waiting = sorted(i for i in range(count) if i not in members)
    while True:
        failed = sorted(i for i, e in members.items() if e.get("state") == "failed")
        if failed:
            return await _children_failed(core, base, refs, members, in_flight, failed[0])
        if all(members.get(i, {}).get("state") == "done" for i in range(count)):
            core.record_event(EventKind.STEP_DONE, {**base, "result": None, "count": count})
            await core.flush()
            return [members[i].get("result") for i in range(count)]
        room = max_in_flight - len(in_flight)
        starting, waiting = waiting[:room], waiting[room:]
        if starting:
            facts = [
                {"i": i, "name": name, "run_id": refs[i].run_id, "parent_close": policy}
                for i in starting
            ]
            facts[0].setdefault("started_at", started_at)
            _record_facts(core, EventKind.STEP_PENDING, base, facts)
            await core.flush()
            await asyncio.gather(
                *(submit_child(core, refs[i], params[i], spec, prov[i]) for i in starting)
            )
            for i, fact in zip(starting, facts, strict=True):
                members[i] = {**fact, "state": "started"}
                book(core).open[refs[i].run_id] = refs[i]
            in_flight.update(starting)
        await drain_notices(core, notify)
        looked = sorted(in_flight)
        outcomes: list[ChildOutcome | None] = list(
            await asyncio.gather(*(read_child(core, refs[i]) for i in looked))
        )
        ended = []
        for i, outcome in zip(looked, outcomes, strict=True):
            if outcome is MISSING:
                await submit_child(core, refs[i], params[i], spec, prov[i])  # never landed
            elif outcome is not None:
                ended.append((i, outcome))
        if ended:
            done = [o.member_fact(i) for i, o in ended if o.ok]
            errors = [o.member_fact(i) for i, o in ended if not o.ok]
            if done:
                _record_facts(core, EventKind.STEP_DONE, base, done)
            if errors:
                _record_facts(core, EventKind.STEP_ERROR, base, errors)
            for i, outcome in ended:
                members[i] = {**members[i], **outcome.member_fact(i)}
                members[i]["state"] = "done" if outcome.ok else "failed"
                in_flight.discard(i)
                book(core).open.pop(refs[i].run_id, None)
            continue
        await park_on_children(core, index, notify, started_at, None)


async def _children_failed(
    core: AttemptCore,
    base: dict[str, Any],
    refs: dict[int, ChildRef],
    members: dict[int, dict[str, Any]],
    in_flight: set[int],
    first: int,
) -> list[Any]:
    """Member ``first`` failed: cancel the members still running (``cancel`` policy), journal
    the fan-out's failure and raise it."""
    for i in sorted(in_flight):
        ref = refs[i]
        if ref.parent_close == "cancel":
            await cancel_child(
                core,
                ref,
                {"reason": f"fan-out member {first} failed", "requested_by": core.run_id},
            )
        book(core).open.pop(ref.run_id, None)
    entry = members[first]
    recorded = entry.get("error")
    outcome = ChildOutcome(
        str(entry.get("status") or "error"), error=recorded if isinstance(recorded, dict) else {}
    )
    error: ChildWorkflowError = child_error(refs[first], outcome)
    described = describe_child_error(error)
    described["member"] = first
    core.record_event(
        EventKind.STEP_ERROR, {**base, "attempt": 1, "final": True, "error": described}
    )
    await core.flush()
    raise error


# -- steps ------------------------------------------------------------------------------------


async def _steps(
    core: AttemptCore,
    index: int,
    record: CallRecord | None,
    step: StepSpec,
    items: list[Any],
    max_in_flight: int,
) -> list[Any]:
    base = _base(index, step.name)
    members: dict[int, dict[str, Any]] = dict(record.members) if record is not None else {}
    results: dict[int, Any] = {
        i: e.get("result") for i, e in members.items() if e.get("state") == "done"
    }
    slots = asyncio.Semaphore(max_in_flight)
    writing = asyncio.Lock()
    policy = step.retry or DEFAULT_RETRY

    async def one(i: int) -> None:
        async with slots:
            tries = 0
            while True:
                tries += 1
                step_ctx = StepContext(
                    run_id=core.run_id,
                    run_name=core.spec.name,
                    step_id=f"{step.name}[{i}]",
                    call_index=index,
                    attempt=tries,
                    metadata=core.metadata,
                )

                async def effect(step_ctx: StepContext = step_ctx) -> Any:
                    call = step.invoke((items[i],), {}, step_ctx)
                    value = await (asyncio.wait_for(call, step.timeout) if step.timeout else call)
                    journaled = step.to_journal(value)
                    try:
                        payload_size(journaled)
                    except (TypeError, ValueError) as exc:
                        raise StepResultTypeError(
                            step.name,
                            TypeError(f"{type(journaled).__name__} is not JSON-serializable"),
                        ) from exc
                    return journaled

                journaled, failure = await core.step_effect(step.name, effect)
                if failure is None:
                    break
                if not policy.should_retry(tries, failure):
                    async with writing:
                        _record_facts(
                            core,
                            EventKind.STEP_ERROR,
                            base,
                            [{"i": i, "status": "error", "error": describe_with_args(failure)}],
                        )
                        described = describe_with_args(failure)
                        described["member"] = i
                        core.record_event(
                            EventKind.STEP_ERROR,
                            {**base, "attempt": tries, "final": True, "error": described},
                        )
                        await core.flush()
                    raise failure
                await core.clock.sleep(policy.backoff_seconds(tries))
            async with writing:
                _record_facts(core, EventKind.STEP_DONE, base, [{"i": i, "result": journaled}])
                results[i] = journaled
                await core.step_boundary()

    tasks = [asyncio.ensure_future(one(i)) for i in range(len(items)) if i not in results]
    try:
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    core.record_event(EventKind.STEP_DONE, {**base, "result": None, "count": len(items)})
    await core.flush()
    return [step.from_journal(results[i]) for i in range(len(items))]
