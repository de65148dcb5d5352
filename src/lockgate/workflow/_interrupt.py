"""What ``ctx.interrupt`` asks and how it is answered: :class:`InterruptAction`, what a
question ``expects`` and the actions each takes, :class:`InterruptResponse`, the checks of a
question and of an answer (shared by the body and ``client.resume``), and the wait id an
interrupt is known by.

The wait id names the call position and the run (``interrupt:{call_index}@{8 hex digits of
the run id's hash}``): the same on every replay, and never the id of another run's interrupt,
not even a successor's in a ``continue_as_new`` chain, so an answer meant for one interrupt
cannot land on a later one. Asking and waiting is the runtime's (``attempt/_interrupt.py``).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any, Literal, get_args

from lockgate.workflow._spec import json_ready


class InterruptAction(enum.StrEnum):
    """A person's decision on an interrupt. Which ones an interrupt takes depends on what it
    ``expects``: ``approval`` takes APPROVE or REJECT; ``choice``, ``text`` and ``value`` take
    RESPOND, whose value is the answer; ``edit`` (a proposed action the person may change)
    takes APPROVE, REJECT or EDIT, whose value is the edited proposal."""

    APPROVE = "approve"
    REJECT = "reject"
    RESPOND = "respond"
    EDIT = "edit"


_ACTION_NAMES = frozenset(action.value for action in InterruptAction)

#: What an interrupt can ask for (``ctx.interrupt(expects=...)``).
Expects = Literal["approval", "choice", "text", "value", "edit"]

#: The actions each kind of question takes.
ACTIONS: dict[str, frozenset[InterruptAction]] = {
    "approval": frozenset({InterruptAction.APPROVE, InterruptAction.REJECT}),
    "choice": frozenset({InterruptAction.RESPOND}),
    "text": frozenset({InterruptAction.RESPOND}),
    "value": frozenset({InterruptAction.RESPOND}),
    "edit": frozenset({InterruptAction.APPROVE, InterruptAction.REJECT, InterruptAction.EDIT}),
}
assert set(ACTIONS) == set(get_args(Expects))


@dataclass(frozen=True)
class InterruptResponse:
    """An answer to an interrupt: what ``ctx.interrupt`` returns in the body, and what an
    ``on_interrupt`` handler may return to choose the action (any other value it returns is
    the value of a RESPOND). An ``action`` spelled as one of the four strings is kept as its
    :class:`InterruptAction`."""

    action: InterruptAction | str
    value: Any = None

    def __post_init__(self) -> None:
        if self.action in _ACTION_NAMES:
            object.__setattr__(self, "action", InterruptAction(self.action))


def interrupt_wait_id(run_id: str, call_index: int) -> str:
    """The wait id of the interrupt at ``call_index`` of the run ``run_id``."""
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"interrupt:{call_index}@{digest}"


def check_question(payload: object, expects: object) -> dict[str, Any]:
    """The question ``ctx.interrupt`` was given, checked: a JSON object, and an ``expects``
    it knows. Raises ``TypeError`` or ``ValueError`` in the body, before anything is
    journaled."""
    if not isinstance(payload, dict) or not json_ready(payload):
        raise TypeError(
            f"ctx.interrupt needs its question as a JSON-serializable dict, not "
            f"{type(payload).__name__}"
        )
    if not isinstance(expects, str) or expects not in ACTIONS:
        raise ValueError(f"ctx.interrupt expects={expects!r} is not one of {', '.join(ACTIONS)}")
    return payload


def parse_action(action: object) -> InterruptAction:
    """``action`` as an :class:`InterruptAction`, or ``ValueError`` naming the four."""
    if isinstance(action, str) and action in _ACTION_NAMES:
        return InterruptAction(action)
    known = ", ".join(a.value for a in InterruptAction)
    raise ValueError(f"{action!r} is not an interrupt action; give one of {known}")


def check_answer(expects: str, wait_id: str, action: object, value: Any) -> InterruptAction:
    """The action of an answer to the interrupt ``wait_id``, checked against what it
    ``expects`` (see :class:`InterruptAction`), with a JSON ``value``: ``ValueError``
    otherwise, saying what it takes."""
    chosen = parse_action(action)
    takes = ACTIONS.get(expects)
    if takes is not None and chosen not in takes:
        *others, last = sorted(a.value for a in takes)
        named = f"{', '.join(others)} or {last}" if others else last
        raise ValueError(
            f"{wait_id} expects {expects!r}: answer it with {named}, not {chosen.value}"
        )
    if not json_ready(value):
        raise ValueError(f"the value of an answer to {wait_id} must be JSON data")
    if chosen == InterruptAction.EDIT and value is None:
        raise ValueError(f"an edit of {wait_id} needs the edited proposal as its value")
    return chosen
