"""What a body's calls on other runs and streams name, checked where the call is made, before
the context binds it to its attempt: the workflow a ``ctx.run_child``, ``ctx.fan_out`` or
``ctx.signal`` targets, and the stream a ``ctx.consume`` journals under. A bad argument raises
here (``TypeError``, ``ValueError``, :class:`InvalidNameError`) whether or not a run is bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lockgate._names import check_name
from lockgate.workflow._spec import WorkflowSpec, check_text, get_workflow, json_ready, spec_of
from lockgate.workflow._step import step_spec_for


def child_target(what: str, target: object) -> tuple[str, WorkflowSpec | None]:
    """The workflow name ``target`` (a decorated workflow, or its name) and its spec when it
    is imported here."""
    if isinstance(target, str):
        check_name("workflow name", target)
        return target, get_workflow(target)
    spec = getattr(target, "__lockgate_workflow__", None)
    if spec is None:
        raise TypeError(f"{what} takes a @workflow function or a workflow name, not {target!r}")
    spec = spec_of(target)
    return spec.name, spec


def is_workflow(target: object) -> bool:
    """Whether ``target`` names a workflow: a workflow's name, or a ``@workflow`` function."""
    return isinstance(target, str) or hasattr(target, "__lockgate_workflow__")


def target_name(target: object) -> str:
    """The name a fan-out of ``target`` is journaled under: the workflow's, or the step's."""
    if is_workflow(target):
        return child_target("ctx.fan_out", target)[0]
    if not callable(target):
        raise TypeError(
            f"ctx.fan_out takes a @workflow, a workflow name or a callable, not {target!r}"
        )
    return step_spec_for(target).name


def check_signal(
    workflow: Callable[..., Any] | str, run_id: object, signal: object, payload: object
) -> tuple[str, dict[str, Any]]:
    """The target workflow's name and the payload, once the call's arguments are checked
    (:class:`InvalidNameError`, ``TypeError``, ``ValueError``)."""
    name, _ = child_target("ctx.signal", workflow)
    check_name("run id", run_id, length=False)
    check_name("signal name", signal)
    payload = {} if payload is None else payload
    check_text(payload, f"the payload of ctx.signal {signal!r}")
    if not isinstance(payload, dict) or not json_ready(payload):
        raise ValueError("a ctx.signal payload must be a JSON-serializable dict")
    return name, payload


def stream_name(source: Any, name: str | None) -> str:
    """The name a stream's positions are journaled under: ``name``, else the source's id."""
    chosen = name if name is not None else getattr(source, "source_id", None)
    return check_name("stream name", chosen)
