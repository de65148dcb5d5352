"""The members of a child or fan-out call, as its journal records them.

A ``ctx.run_child`` call is one member (index 0); a ``ctx.fan_out`` call has one member per
item. A ``step:*`` event of such a call whose payload holds ``members`` is a batch of member
facts, folded here into :attr:`CallRecord.members` instead of the call's own outcome:

- ``step:pending`` ``{"members": [{"i", "name", "run_id", "parent_close", ...}]}``: the child
  runs named are about to be submitted (journaled, fenced, before the submit);
- ``step:done`` ``{"members": [{"i", "result"}]}``: those members completed;
- ``step:error`` ``{"members": [{"i", "status", "error"}]}``: those members ended otherwise.

The call's own ``step:done`` or final ``step:error`` (without ``members``) ends the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockgate.journal._events import EventKind, StepKind

if TYPE_CHECKING:
    from lockgate.journal._replay import CallRecord

#: Step kinds whose call waits on other runs; a timer ending their wait is only a backstop.
WAITS_ON_RUNS: frozenset[str] = frozenset({StepKind.CHILD.value, StepKind.FANOUT.value})


def fold_members(record: CallRecord, kind: str, facts: Any) -> None:
    """Fold one batch of member facts into ``record``."""
    if not isinstance(facts, list):
        return
    for fact in facts:
        if not isinstance(fact, dict) or "i" not in fact:
            continue
        entry = record.members.setdefault(int(fact["i"]), {"state": "started"})
        if kind == EventKind.STEP_PENDING:
            entry.update({k: v for k, v in fact.items() if k != "i"})
        elif kind == EventKind.STEP_DONE:
            entry["state"], entry["result"] = "done", fact.get("result")
        else:
            entry["state"] = "failed"
            entry["status"] = fact.get("status")
            entry["error"] = fact.get("error")
