"""The ``@workflow`` decorator, the declarations it records, and the process registry."""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from lockgate._errors import (
    ConfigurationError,
    InvalidParamsError,
    PayloadTooLarge,
)
from lockgate._names import check_name

# Re-exported: these lived here; `lockgate._text` has them now so that a reader (the CLI's
# printing) needs none of what this module imports.
from lockgate._text import check_text as check_text
from lockgate._text import json_ready as json_ready
from lockgate._text import readable as readable
from lockgate._text import readable_text as readable_text
from lockgate.flow import Collect, Debounce, Limit, Rate
from lockgate.journal._events import payload_size
from lockgate.stores._gates import Gates
from lockgate.stores._triggers import TriggerPolicy
from lockgate.workflow._binding import VALUE_PARAM, KafkaTopic, as_binding

VersionBehavior = Literal["pinned", "auto_upgrade"]
DEFAULT_PAYLOAD_CAP = 1_000_000
TRIGGER_PARAMS = ("key", "events", "count")

WorkflowFn = Callable[..., Awaitable[Any]]
F = TypeVar("F", bound=WorkflowFn)


class DuplicateWorkflowWarning(UserWarning):
    """A different function was registered under a workflow name already in use."""


@dataclass(frozen=True)
class WorkflowSpec:
    """A workflow's declaration, as the decorator validated and recorded it."""

    name: str
    timeout: float = 300.0
    max_event_count_per_run: int | None = 50_000
    max_event_payload_bytes: int | None = DEFAULT_PAYLOAD_CAP
    max_attempt_wall_seconds: float | None = None
    version: str = ""
    version_behavior: VersionBehavior = "pinned"
    concurrency: Limit | None = None
    rate_limit: Rate | None = None
    trigger: Collect | Debounce | None = None
    #: The Kafka topic the workflow is bound to: one run per record.
    topic: KafkaTopic | None = None
    fn: WorkflowFn | None = field(default=None, compare=False, repr=False)

    @property
    def attempt_deadline(self) -> float:
        """Seconds one attempt may run: ``timeout``, lowered by ``max_attempt_wall_seconds``."""
        if self.max_attempt_wall_seconds is None:
            return self.timeout
        return min(self.timeout, self.max_attempt_wall_seconds)

    @property
    def worker_cap(self) -> int | None:
        """The most runs of this workflow one worker executes at once (a bound workflow's
        ``max_concurrency``); None when only the worker's own slots bound it."""
        return self.topic.max_concurrency if self.topic is not None else None

    @property
    def body(self) -> WorkflowFn:
        if self.fn is None:
            raise ConfigurationError(f"workflow {self.name!r} has no body in this process")
        return self.fn

    def validate_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``params`` against the body's signature, its annotations (see ``_params``)
        and the payload cap. Returns them as given: a check never converts a value.

        Raises :class:`InvalidParamsError` naming the first parameter that does not fit, and
        :class:`PayloadTooLarge` when the params are over ``max_event_payload_bytes``.
        """
        if not isinstance(params, Mapping):
            raise InvalidParamsError(
                f"params for {self.name!r} must be a mapping of "
                f"parameter names to values, not {type(params).__name__}",
                workflow=self.name,
            )
        params = dict(params)
        for key in params:
            if not isinstance(key, str):
                raise InvalidParamsError(
                    f"parameter names of {self.name!r} must be strings, got {key!r}",
                    workflow=self.name,
                    parameter=str(key),
                )
        check_text(params, f"params of {self.name!r}")
        if self.fn is not None:
            # pydantic, imported on the first check rather than with this module: a process
            # reading runs (the CLI's `--help`, `runs list`) checks no params.
            from lockgate.workflow._params import check_params

            check_params(self.name, self.fn, params)
        try:
            size = payload_size(params)
        except (TypeError, ValueError) as exc:
            raise InvalidParamsError(
                f"params for {self.name!r} are not JSON-serializable: {exc}", workflow=self.name
            ) from exc
        self.check_payload(size, f"params of {self.name!r}")
        return params

    def check_payload(self, size: int, what: str) -> None:
        cap = self.max_event_payload_bytes
        if cap is not None and size > cap:
            raise PayloadTooLarge(
                f"{what} is {size} bytes, over max_event_payload_bytes={cap}",
                what=what,
                size=size,
                limit=cap,
            )


_REGISTRY: dict[str, WorkflowSpec] = {}


def get_workflow(name: str) -> WorkflowSpec | None:
    """The spec registered under ``name`` in this process, or None."""
    return _REGISTRY.get(name)


def spec_of(fn: object) -> WorkflowSpec:
    """The spec of a function decorated with ``@workflow``."""
    spec = getattr(fn, "__lockgate_workflow__", None)
    if not isinstance(spec, WorkflowSpec):
        raise ConfigurationError(f"{fn!r} is not decorated with @workflow")
    return spec


def body_hash(fn: Callable[..., Any]) -> str:
    """A short hash of a function's source (its bytecode when the source is not at hand)."""
    try:
        material = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        material = fn.__code__.co_code
    return hashlib.sha256(material).hexdigest()[:16]


def _number(
    field_name: str, value: object, *, allow_none: bool, minimum: float = 0.0, integer: bool = False
) -> None:
    if value is None and allow_none:
        return
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = None if integer and not isinstance(value, int) else float(value)
    if number is None or not math.isfinite(number) or number <= minimum:
        raise ConfigurationError(
            f"@workflow({field_name}=...) must be a "
            f"{'whole ' if integer else ''}number > {minimum:g}"
            f"{' or None' if allow_none else ''}, got {value!r}"
        )


def _validate(
    fn: object,
    *,
    name: str,
    timeout: float,
    max_event_count_per_run: int | None,
    max_event_payload_bytes: int | None,
    max_attempt_wall_seconds: float | None,
    version: str | None,
    version_behavior: str | None,
    concurrency: object,
    rate_limit: object,
    trigger: object,
    topic: KafkaTopic | None = None,
) -> None:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@workflow needs an 'async def' body; {name!r} is a plain function")
    assert callable(fn)
    parameters = list(inspect.signature(fn).parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(f"workflow {name!r} must take the context as its first parameter")
    for parameter in parameters[1:]:
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL):
            raise TypeError(
                f"workflow {name!r}: parameter {parameter.name!r} must be passable "
                f"by name, since params arrive as keyword arguments"
            )
    check_name("workflow name", name)  # InvalidNameError: the naming rules in lockgate._names
    _number("timeout", timeout, allow_none=False)
    _number(
        "max_event_count_per_run", max_event_count_per_run, allow_none=True, minimum=1, integer=True
    )
    _number("max_event_payload_bytes", max_event_payload_bytes, allow_none=True, integer=True)
    _number("max_attempt_wall_seconds", max_attempt_wall_seconds, allow_none=True)
    if version is not None and (not isinstance(version, str) or not version):
        raise ConfigurationError("@workflow(version=...) must be a non-empty string")
    if version_behavior not in (None, "pinned", "auto_upgrade"):
        raise ConfigurationError(
            "@workflow(version_behavior=...) must be 'pinned' or "
            f"'auto_upgrade', got {version_behavior!r}"
        )
    names = {p.name for p in parameters[1:]}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    if topic is not None:
        _check_bound(name, topic, parameters[1:], concurrency, rate_limit, trigger)
    for field_name, value, kind in (
        ("concurrency", concurrency, Limit),
        ("rate_limit", rate_limit, Rate),
    ):
        if value is not None and not isinstance(value, kind):
            raise ConfigurationError(
                f"@workflow({field_name}=...) must be a {kind.__name__}, got {type(value).__name__}"
            )
        key = getattr(value, "key", None)
        if isinstance(key, str) and key not in names and not takes_any:
            raise ConfigurationError(
                f"@workflow({field_name}=...) keys on parameter {key!r}, which {name!r} does "
                f"not take (it takes: {', '.join(sorted(names)) or 'none'})"
            )
    if trigger is not None:
        if not isinstance(trigger, Collect | Debounce):
            raise ConfigurationError(
                "@workflow(trigger=...) must be a Collect or Debounce, "
                f"got {type(trigger).__name__}"
            )
        names = {p.name for p in parameters[1:]}
        has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        missing = [p for p in TRIGGER_PARAMS if p not in names]
        if missing and not has_var_kw:
            raise ConfigurationError(
                f"triggered workflow {name!r} must accept the parameters "
                f"{', '.join(TRIGGER_PARAMS)}; missing {', '.join(missing)}"
            )


def _check_bound(
    name: str,
    topic: KafkaTopic,
    parameters: list[inspect.Parameter],
    concurrency: object,
    rate_limit: object,
    trigger: object,
) -> None:
    """A bound workflow runs each record as it is consumed: no gate or trigger of its own, and
    a body that takes the record's value."""
    for field_name, value in (
        ("concurrency", concurrency),
        ("rate_limit", rate_limit),
        ("trigger", trigger),
    ):
        if value is not None:
            raise ConfigurationError(
                f"workflow {name!r} is bound to Kafka topic {topic.name!r}, so it cannot take "
                f"{field_name}=: its records are run as they are consumed. Throttle it with "
                f"KafkaTopic(max_concurrency=N) (runs of this binding in flight per worker, "
                f"now {topic.max_concurrency}) and the topic's partition count (one worker "
                f"reads a partition)"
            )
    names = {p.name for p in parameters}
    if VALUE_PARAM not in names and not any(p.kind is p.VAR_KEYWORD for p in parameters):
        raise ConfigurationError(
            f"workflow {name!r} is bound to Kafka topic {topic.name!r} and must take the "
            f"parameter {VALUE_PARAM!r}: each run receives its record's decoded value there "
            f"(ctx.record has the key, partition, offset, timestamp and headers)"
        )
    required = [
        p.name
        for p in parameters
        if p.name != VALUE_PARAM
        and p.default is p.empty
        and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if required:
        raise ConfigurationError(
            f"workflow {name!r} is bound to Kafka topic {topic.name!r}, whose runs receive only "
            f"{VALUE_PARAM!r}: give {', '.join(map(repr, required))} a default or drop it"
        )


@overload
def workflow(fn: F, /) -> F: ...


@overload
def workflow(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    timeout: float = 300.0,
    max_event_count_per_run: int | None = 50_000,
    max_event_payload_bytes: int | None = DEFAULT_PAYLOAD_CAP,
    max_attempt_wall_seconds: float | None = None,
    version: str | None = None,
    version_behavior: VersionBehavior | None = None,
    concurrency: Limit | None = None,
    rate_limit: Rate | None = None,
    trigger: Collect | Debounce | None = None,
    topic: KafkaTopic | str | None = None,
) -> Callable[[F], F]: ...


def workflow(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    timeout: float = 300.0,
    max_event_count_per_run: int | None = 50_000,
    max_event_payload_bytes: int | None = DEFAULT_PAYLOAD_CAP,
    max_attempt_wall_seconds: float | None = None,
    version: str | None = None,
    version_behavior: VersionBehavior | None = None,
    concurrency: Limit | None = None,
    rate_limit: Rate | None = None,
    trigger: Collect | Debounce | None = None,
    topic: KafkaTopic | str | None = None,
) -> F | Callable[[F], F]:
    """Declare a durable workflow.

    The body must be ``async def`` and take the run context first; a run's params arrive as
    keyword arguments after it. Without ``version`` the version is a hash of the body and runs
    follow new code (``auto_upgrade``); with one they stay on it (``pinned``). The declaration is
    validated here, so a mistake fails at import rather than when a run starts.

    ``topic`` binds the workflow to a Kafka topic (a name, or a :class:`KafkaTopic` with its
    options): each record becomes one run of it, whose ``value`` parameter is the record's
    decoded value. A bound workflow takes no ``concurrency``, ``rate_limit`` or ``trigger``.
    """
    binding = as_binding(topic)

    def register(body: F, stacklevel: int = 2) -> F:
        wf_name = name if name is not None else getattr(body, "__name__", "")
        _validate(
            body,
            name=wf_name,
            timeout=timeout,
            max_event_count_per_run=max_event_count_per_run,
            max_event_payload_bytes=max_event_payload_bytes,
            max_attempt_wall_seconds=max_attempt_wall_seconds,
            version=version,
            version_behavior=version_behavior,
            concurrency=concurrency,
            rate_limit=rate_limit,
            trigger=trigger,
            topic=binding,
        )
        behavior: VersionBehavior = version_behavior or (
            "pinned" if version is not None else "auto_upgrade"
        )
        spec = WorkflowSpec(
            name=wf_name,
            timeout=float(timeout),
            max_event_count_per_run=max_event_count_per_run,
            max_event_payload_bytes=max_event_payload_bytes,
            max_attempt_wall_seconds=max_attempt_wall_seconds,
            version=version if version is not None else body_hash(body),
            version_behavior=behavior,
            concurrency=concurrency,
            rate_limit=rate_limit,
            trigger=trigger,
            topic=binding,
            fn=body,
        )
        previous = _REGISTRY.get(wf_name)
        if (
            previous is not None
            and previous.fn is not body
            and (
                previous.fn is None
                or previous.fn.__qualname__ != body.__qualname__
                or previous.fn.__module__ != body.__module__
            )
        ):
            warnings.warn(
                f"workflow name {wf_name!r} was already registered by "
                f"{previous.fn!r}; {body!r} replaces it",
                DuplicateWorkflowWarning,
                stacklevel=stacklevel,
            )
        _REGISTRY[wf_name] = spec
        body.__lockgate_workflow__ = spec  # type: ignore[attr-defined]
        return body

    if fn is not None:
        return register(fn, stacklevel=3)
    return register


def policy_stamp(spec: WorkflowSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The flow-control gates a run of ``spec`` with ``params`` is stamped with at submit."""
    stamp: dict[str, Any] = {}
    if spec.concurrency is not None:
        stamp["concurrency_key"] = _resolved(spec, "concurrency", spec.concurrency, params)
        stamp["concurrency_max"] = spec.concurrency.max
    if spec.rate_limit is not None:
        stamp["rate_key"] = _resolved(spec, "rate_limit", spec.rate_limit, params)
        stamp["rate_per_second"] = float(spec.rate_limit.per_second)
        stamp["rate_burst"] = spec.rate_limit.capacity
    return stamp


_EMPTY_KEY_WARNED: set[tuple[str, str]] = set()
log = logging.getLogger("lockgate.flow")


def _warn_empty_key(workflow_name: str, field_name: str, param: str) -> None:
    """The first run of a workflow whose gate key parameter is missing shares the ``""``
    bucket with every other such run: say so once, naming the parameter."""
    if (workflow_name, field_name) in _EMPTY_KEY_WARNED:
        return
    _EMPTY_KEY_WARNED.add((workflow_name, field_name))
    log.warning(
        'workflow %r: a run was submitted without parameter %r, so its %s key is "" and it '
        "shares one bucket with every other run missing it",
        workflow_name,
        param,
        field_name,
    )


def _resolved(
    spec: WorkflowSpec, field_name: str, policy: Limit | Rate, params: Mapping[str, Any]
) -> str:
    if isinstance(policy.key, str) and params.get(policy.key) is None:
        _warn_empty_key(spec.name, field_name, policy.key)
    try:
        return policy.resolve(params)
    except Exception as exc:
        raise InvalidParamsError(
            f"the {field_name} key of {spec.name!r} could not be resolved from these params: "
            f"{exc}; nothing was queued",
            workflow=spec.name,
        ) from exc


def trigger_policy(spec: WorkflowSpec, key: str) -> TriggerPolicy:
    """How ``spec``'s trigger buffers the events of ``key``, and what a fire stamps: the
    workflow's version, and its gates resolved for the run's params (``key`` is known when
    the event is buffered; ``events`` and ``count`` are not, so a gate keyed on them sees
    only ``key``)."""
    trigger = spec.trigger
    if trigger is None:
        raise ConfigurationError(f"workflow {spec.name!r} has no Collect or Debounce trigger")
    stamp = policy_stamp(spec, {"key": key})
    if isinstance(trigger, Collect):
        mode, max_events, max_wait = "collect", trigger.max_events, None
    else:
        mode, max_events, max_wait = "debounce", None, trigger.max_wait_seconds
    return TriggerPolicy(
        mode=mode,  # type: ignore[arg-type]
        window_seconds=float(trigger.window_seconds),
        max_events=max_events,
        max_wait_seconds=max_wait,
        version=spec.version,
        version_behavior=spec.version_behavior,
        gates=Gates(**stamp),
    )
