"""The error tree is as drawn in ``lockgate._errors``' docstring (and docs/concepts.md): each
class under its drawn parent, the store failures in one branch, and ``retriable`` True exactly
for the errors worth retrying (the ones the drawing marks ``(retriable)``)."""

from __future__ import annotations

import re

import pytest

import lockgate
from lockgate import _errors

#: One line of the drawing: its lead (``│   `` or four spaces per level above), the branch mark,
#: the class name, what it says.
_LINE = re.compile(r"^    (?P<lead>(?:[│ ]   )*)(?:[├└]── )?(?P<name>[A-Z]\w+) *(?P<rest>.*)$")


def _drawn() -> dict[str, tuple[str | None, bool]]:
    """Each class of the docstring's tree: its drawn parent, and whether it is marked
    ``(retriable)``."""
    doc = _errors.__doc__ or ""
    tree = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    drawn: dict[str, tuple[str | None, bool]] = {}
    stack: list[str] = []
    for line in tree.splitlines():
        found = _LINE.match(line)
        assert found is not None, line
        depth = 0 if found["name"] == "LockgateError" else len(found["lead"]) // 4 + 1
        del stack[depth:]
        drawn[found["name"]] = (stack[-1] if stack else None, "(retriable)" in found["rest"])
        stack.append(found["name"])
    return drawn


DRAWN = _drawn()
STORE_FAILURES = {
    "StoreError",
    "StoreFault",
    "StoreUnavailable",
    "StoreFileGone",
    "LockLost",
    "EventAfterTerminal",
    "CapabilityMissing",
}


def test_the_drawing_holds_the_tree() -> None:
    assert DRAWN["LockgateError"] == (None, False)
    assert len(DRAWN) > 50
    assert set(DRAWN) >= STORE_FAILURES


@pytest.mark.parametrize("name", sorted(set(DRAWN) - {"LockgateError"}))
def test_each_error_derives_from_its_drawn_parent(name: str) -> None:
    parent, _ = DRAWN[name]
    assert parent is not None
    cls, base = getattr(_errors, name), getattr(_errors, parent)
    assert base in cls.__bases__, (name, parent, cls.__bases__)


@pytest.mark.parametrize("name", sorted(DRAWN))
def test_retriable_is_true_exactly_where_the_drawing_says(name: str) -> None:
    _, retriable = DRAWN[name]
    assert getattr(_errors, name).retriable is retriable, name


def test_the_store_failures_share_one_branch_and_only_they_do() -> None:
    public = {
        name: getattr(lockgate, name)
        for name in lockgate.__all__
        if isinstance(getattr(lockgate, name), type)
        and issubclass(getattr(lockgate, name), lockgate.LockgateError)
    }
    assert {name for name, cls in public.items() if issubclass(cls, lockgate.StoreError)} == (
        STORE_FAILURES
    )
    for failure in (
        lockgate.StoreUnavailable("down"),
        lockgate.StoreFileGone("gone", path="/x", reason="deleted"),
        lockgate.LockLost("lost"),
        lockgate.EventAfterTerminal("ended"),
        lockgate.CapabilityMissing("MemoryStore", "terminate"),
    ):
        assert isinstance(failure, lockgate.StoreError)
        assert isinstance(failure, lockgate.LockgateError)
    # The store's own faults, as opposed to its refusals (a lease that lost the run, a
    # capability it lacks): what the attempt unwinds on, and what the API answers with a 503.
    assert issubclass(lockgate.StoreUnavailable, lockgate.StoreFault)
    assert issubclass(lockgate.StoreFileGone, lockgate.StoreFault)
    assert not issubclass(lockgate.LockLost, lockgate.StoreFault)
    assert not issubclass(lockgate.CapabilityMissing, lockgate.StoreFault)
    # StoreFileGone is no StoreUnavailable: waiting does not bring the file back.
    assert not issubclass(lockgate.StoreFileGone, lockgate.StoreUnavailable)


def test_worth_retrying_is_the_store_answering_again_and_a_passing_condition() -> None:
    retried = {
        name
        for name in lockgate.__all__
        if isinstance(getattr(lockgate, name), type)
        and issubclass(getattr(lockgate, name), lockgate.LockgateError)
        and getattr(lockgate, name).retriable
    }
    assert retried == {"StoreUnavailable", "Transient"}
    assert lockgate.StoreUnavailable("down").retriable
    for refusal in (
        lockgate.StoreFileGone("gone", path="/x", reason="deleted"),
        lockgate.LockLost("lost"),
        lockgate.CapabilityMissing("MemoryStore", "terminate"),
    ):
        assert not refusal.retriable


def test_the_branches_have_a_stable_code() -> None:
    assert lockgate.StoreError.code is lockgate.ErrorCode.STORE_ERROR
    assert lockgate.StoreFault.code is lockgate.ErrorCode.STORE_ERROR
    assert lockgate.StoreUnavailable.code is lockgate.ErrorCode.STORE_UNAVAILABLE
    assert lockgate.StoreFileGone.code is lockgate.ErrorCode.STORE_FILE_GONE
