"""Declarations: what ``@workflow``, ``@step``, ``RetryPolicy`` and the flow-control policies
accept, what they refuse at import time, and what they record."""

from __future__ import annotations

import math
import random
import warnings
from typing import Any

import pytest

from lockgate import (
    Collect,
    ConfigurationError,
    Debounce,
    DuplicateWorkflowWarning,
    EventKind,
    Fatal,
    InvalidNameError,
    Limit,
    Poison,
    Rate,
    RetryPolicy,
    StepResultTypeError,
    Transient,
    WorkflowClient,
    WorkflowContext,
    WorkflowSpec,
    step,
    workflow,
)
from lockgate.workflow import get_workflow

# -- @workflow: the body's shape -------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "nul\x00", "new\nline", "sep\x1f", "n" * 257])
def test_workflow_refuses_a_name_the_naming_rules_refuse(name: str) -> None:
    with pytest.raises(InvalidNameError, match="workflow name") as refused:

        @workflow(name=name)
        async def body(ctx: WorkflowContext) -> None:
            return None

    assert refused.value.code == "invalid_name"
    assert get_workflow(name) is None


@pytest.mark.parametrize("name", ["billing:eu", "a/b", "with space", "café", "{x}", "n" * 256])
def test_workflow_takes_names_with_colons_slashes_spaces_and_accents(name: str) -> None:
    @workflow(name=name)
    async def body(ctx: WorkflowContext) -> None:
        return None

    spec = get_workflow(name)
    assert spec is not None
    assert spec.name == name


def test_workflow_refuses_a_plain_function() -> None:
    def plain(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(TypeError, match="async def"):
        workflow(name="decl_plain_fn")(plain)  # type: ignore[type-var]
    assert get_workflow("decl_plain_fn") is None


def test_workflow_refuses_an_async_generator() -> None:
    async def agen(ctx: WorkflowContext) -> Any:
        yield 1

    with pytest.raises(TypeError):
        workflow(name="decl_async_gen")(agen)
    assert get_workflow("decl_async_gen") is None


def test_workflow_must_take_the_context_first() -> None:
    async def no_params() -> None:
        return None

    async def keyword_only_ctx(*, ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(TypeError, match="context as its first parameter"):
        workflow(name="decl_no_ctx")(no_params)
    with pytest.raises(TypeError, match="context as its first parameter"):
        workflow(name="decl_kwonly_ctx")(keyword_only_ctx)
    assert get_workflow("decl_no_ctx") is None
    assert get_workflow("decl_kwonly_ctx") is None


def test_workflow_refuses_parameters_that_cannot_be_passed_by_name() -> None:
    async def positional_only(ctx: WorkflowContext, order_id: str, /) -> None:
        return None

    async def var_positional(ctx: WorkflowContext, *items: str) -> None:
        return None

    with pytest.raises(TypeError, match="order_id"):
        workflow(name="decl_posonly")(positional_only)
    with pytest.raises(TypeError, match="items"):
        workflow(name="decl_varpos")(var_positional)
    assert get_workflow("decl_posonly") is None
    assert get_workflow("decl_varpos") is None


def test_workflow_accepts_keyword_only_and_var_keyword_params() -> None:
    @workflow(name="decl_kwonly_ok")
    async def body(ctx: WorkflowContext, a: int, *, b: int = 2, **rest: Any) -> int:
        return a + b

    spec = get_workflow("decl_kwonly_ok")
    assert spec is not None
    assert spec.fn is body
    assert body.__lockgate_workflow__ is spec  # type: ignore[attr-defined]


def test_bare_decorator_uses_the_function_name() -> None:
    @workflow
    async def decl_bare_decorated_name(ctx: WorkflowContext) -> None:
        return None

    spec = get_workflow("decl_bare_decorated_name")
    assert spec is not None
    assert spec.fn is decl_bare_decorated_name
    assert spec.timeout == 300.0
    assert spec.max_event_count_per_run == 50_000
    assert spec.max_event_payload_bytes == 1_000_000


def test_duplicate_name_with_a_different_function_warns() -> None:
    @workflow(name="decl_duplicate")
    async def first(ctx: WorkflowContext) -> str:
        return "first"

    async def second(ctx: WorkflowContext) -> str:
        return "second"

    with pytest.warns(DuplicateWorkflowWarning, match="decl_duplicate"):
        workflow(name="decl_duplicate")(second)
    spec = get_workflow("decl_duplicate")
    assert spec is not None
    assert spec.fn is second


def test_the_duplicate_warning_points_at_the_code_that_registered_it() -> None:
    async def first(ctx: WorkflowContext) -> None:
        return None

    async def second(ctx: WorkflowContext) -> None:
        return None

    async def decl_dup_location_bare(ctx: WorkflowContext) -> None:
        return None

    workflow(name="decl_dup_location")(first)
    with pytest.warns(DuplicateWorkflowWarning) as called_form:
        workflow(name="decl_dup_location")(second)
    workflow(name="decl_dup_location_bare")(first)
    with pytest.warns(DuplicateWorkflowWarning) as bare_form:
        workflow(decl_dup_location_bare)
    assert bare_form[0].filename == __file__
    assert called_form[0].filename == __file__


def test_registering_the_same_function_again_does_not_warn() -> None:
    async def body(ctx: WorkflowContext) -> str:
        return "same"

    workflow(name="decl_same_again")(body)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workflow(name="decl_same_again")(body)
    assert not [w for w in caught if issubclass(w.category, DuplicateWorkflowWarning)]


# -- versions ------------------------------------------------------------------------------


def test_version_defaults_to_a_body_hash_and_auto_upgrade() -> None:
    @workflow(name="decl_version_hash_a")
    async def body_a(ctx: WorkflowContext) -> int:
        return 1

    spec = get_workflow("decl_version_hash_a")
    assert spec is not None
    assert spec.version_behavior == "auto_upgrade"
    assert len(spec.version) == 16
    int(spec.version, 16)  # a hex digest


def test_version_hash_changes_when_the_body_changes() -> None:
    async def original(ctx: WorkflowContext) -> int:
        return 1

    async def edited(ctx: WorkflowContext) -> int:
        return 1 + 1

    workflow(name="decl_version_edit")(original)
    before = get_workflow("decl_version_edit")
    assert before is not None
    with pytest.warns(DuplicateWorkflowWarning):
        workflow(name="decl_version_edit")(edited)
    after = get_workflow("decl_version_edit")
    assert after is not None
    assert before.version != after.version
    assert after.version_behavior == "auto_upgrade"
    # The same body registered again keeps its version.
    workflow(name="decl_version_edit")(edited)
    again = get_workflow("decl_version_edit")
    assert again is not None
    assert again.version == after.version


def test_explicit_version_is_pinned() -> None:
    @workflow(name="decl_version_pinned", version="2024-06-01")
    async def body(ctx: WorkflowContext) -> int:
        return 1

    spec = get_workflow("decl_version_pinned")
    assert spec is not None
    assert spec.version == "2024-06-01"
    assert spec.version_behavior == "pinned"


def test_explicit_version_behavior_wins() -> None:
    @workflow(name="decl_version_explicit_auto", version="v3", version_behavior="auto_upgrade")
    async def body(ctx: WorkflowContext) -> int:
        return 1

    spec = get_workflow("decl_version_explicit_auto")
    assert spec is not None
    assert (spec.version, spec.version_behavior) == ("v3", "auto_upgrade")


async def test_version_is_stamped_on_the_run_at_submit(client: WorkflowClient) -> None:
    @workflow(name="decl_version_stamp", version="v7")
    async def body(ctx: WorkflowContext) -> int:
        return 1

    handle = await client.submit("decl_version_stamp")
    init = (await handle.events())[0]
    assert init.kind == EventKind.RUN_INIT
    assert init.payload["version"] == "v7"
    assert init.payload["version_behavior"] == "pinned"


# -- @workflow: option validation ------------------------------------------------------------


async def _noop(ctx: WorkflowContext) -> None:
    return None


async def _triggered(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"timeout": "30"},
        {"timeout": True},
        {"timeout": None},
        {"max_event_count_per_run": 0},
        {"max_event_count_per_run": -5},
        {"max_event_count_per_run": 10.5},
        {"max_event_count_per_run": "100"},
        {"max_event_count_per_run": True},
        {"max_event_payload_bytes": 0},
        {"max_event_payload_bytes": -1},
        {"max_event_payload_bytes": 1024.5},
        {"max_event_payload_bytes": "big"},
        {"max_attempt_wall_seconds": 0},
        {"max_attempt_wall_seconds": math.nan},
        {"version": ""},
        {"version": 3},
        {"version_behavior": "sometimes"},
        {"version_behavior": "PINNED"},
        {"concurrency": 5},
        {"concurrency": Rate("tenant", 1.0)},
        {"rate_limit": 10},
        {"rate_limit": Limit("tenant", 2)},
        {"trigger": "batch"},
        {"trigger": Limit("tenant", 2)},
        {"name": ""},
    ],
    ids=lambda options: "-".join(f"{k}={v!r}" for k, v in options.items()),
)
def test_bad_workflow_options_raise_configuration_error(options: dict[str, Any]) -> None:
    name = options.pop("name", "decl_bad_option")
    with pytest.raises(ConfigurationError):
        workflow(name=name, **options)(_noop)
    assert get_workflow("decl_bad_option") is None


def test_good_workflow_options_are_recorded() -> None:
    @workflow(
        name="decl_options_ok",
        timeout=12.5,
        max_event_count_per_run=None,
        max_event_payload_bytes=None,
        max_attempt_wall_seconds=5,
    )
    async def body(ctx: WorkflowContext) -> None:
        return None

    spec = get_workflow("decl_options_ok")
    assert spec is not None
    assert spec.timeout == 12.5
    assert spec.max_event_count_per_run is None
    assert spec.max_event_payload_bytes is None
    assert spec.attempt_deadline == 5


def test_attempt_deadline_is_the_lower_of_timeout_and_wall_seconds() -> None:
    assert WorkflowSpec(name="x", timeout=10, max_attempt_wall_seconds=60).attempt_deadline == 10
    assert WorkflowSpec(name="x", timeout=10, max_attempt_wall_seconds=3).attempt_deadline == 3
    assert WorkflowSpec(name="x", timeout=10).attempt_deadline == 10


def test_trigger_workflow_must_accept_key_events_and_count() -> None:
    async def missing_count(ctx: WorkflowContext, key: str, events: list[Any]) -> None:
        return None

    with pytest.raises(ConfigurationError, match="count"):
        workflow(name="decl_trigger_missing", trigger=Collect("tenant", 10, 5.0))(missing_count)
    assert get_workflow("decl_trigger_missing") is None


def test_trigger_workflow_with_the_trigger_params_or_var_keyword_is_accepted() -> None:
    collect = Collect("tenant", 10, 5.0)
    workflow(name="decl_trigger_ok", trigger=collect)(_triggered)

    async def takes_any(ctx: WorkflowContext, **params: Any) -> None:
        return None

    debounce = Debounce("tenant", 2.0)
    workflow(name="decl_trigger_kwargs", trigger=debounce)(takes_any)
    ok = get_workflow("decl_trigger_ok")
    kwargs = get_workflow("decl_trigger_kwargs")
    assert ok is not None
    assert ok.trigger is collect
    assert kwargs is not None
    assert kwargs.trigger is debounce


# -- flow-control policies -------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Limit("", 1),
        lambda: Limit(5, 1),  # type: ignore[arg-type]
        lambda: Limit("tenant", 0),
        lambda: Limit("tenant", -1),
        lambda: Limit("tenant", 1.5),  # type: ignore[arg-type]
        lambda: Limit("tenant", True),
        lambda: Rate("", 1.0),
        lambda: Rate(None, 1.0),  # type: ignore[arg-type]
        lambda: Rate("tenant", 0),
        lambda: Rate("tenant", -2),
        lambda: Rate("tenant", math.nan),
        lambda: Rate("tenant", math.inf),
        lambda: Rate("tenant", True),
        lambda: Rate("tenant", 1.0, burst=0),
        lambda: Rate("tenant", 1.0, burst=2.5),  # type: ignore[arg-type]
        lambda: Collect("", 10, 1.0),
        lambda: Collect("tenant", 0, 1.0),
        lambda: Collect("tenant", 10, 0),
        lambda: Collect("tenant", 10, math.inf),
        lambda: Debounce("", 1.0),
        lambda: Debounce("tenant", 0),
        lambda: Debounce("tenant", -1.0),
        lambda: Debounce("tenant", math.nan),
    ],
)
def test_bad_flow_control_policies_raise_configuration_error(make: Any) -> None:
    with pytest.raises(ConfigurationError):
        make()


def test_policy_keys_resolve_by_param_name_callable_or_to_empty() -> None:
    by_name = Limit("tenant", 2)
    assert by_name.resolve({"tenant": "acme", "other": 1}) == "acme"
    assert by_name.resolve({"tenant": 42}) == "42"
    assert by_name.resolve({"other": 1}) == ""
    assert by_name.resolve({"tenant": None}) == ""

    composite = Rate(lambda p: f"{p['region']}/{p['tenant']}", 5.0)
    assert composite.resolve({"region": "eu", "tenant": "acme"}) == "eu/acme"

    assert Collect("user", 5, 1.0).resolve({"user": "u1"}) == "u1"
    assert Debounce(lambda e: e["k"].upper(), 1.0).resolve({"k": "ab"}) == "AB"
    assert Debounce("missing", 1.0).resolve({}) == ""


@pytest.mark.parametrize(
    ("per_second", "burst", "capacity"),
    [(0.25, None, 1), (1.0, None, 1), (2.5, None, 3), (10, None, 10), (10, 4, 4), (0.5, 7, 7)],
)
def test_rate_capacity_defaults_to_ceil_per_second_at_least_one(
    per_second: float, burst: int | None, capacity: int
) -> None:
    assert Rate("k", per_second, burst=burst).capacity == capacity


async def test_flow_control_is_stored_on_the_spec_and_stamped_at_submit(
    client: WorkflowClient,
) -> None:
    limit = Limit("tenant", 2)
    rate = Rate(lambda p: f"{p['tenant']}-api", 2.5)

    @workflow(name="decl_gates", concurrency=limit, rate_limit=rate)
    async def body(ctx: WorkflowContext, tenant: str) -> str:
        return tenant

    spec = get_workflow("decl_gates")
    assert spec is not None
    assert spec.concurrency is limit
    assert spec.rate_limit is rate
    assert spec.trigger is None

    handle = await client.submit("decl_gates", {"tenant": "acme"})
    init = (await handle.events())[0]
    assert init.kind == EventKind.RUN_INIT
    assert init.payload["gates"] == {
        "concurrency": {"key": "acme", "max": 2},
        "rate": {"key": "acme-api", "per_second": 2.5, "burst": 3},
    }


async def test_a_workflow_without_gates_stamps_none(client: WorkflowClient) -> None:
    @workflow(name="decl_no_gates")
    async def body(ctx: WorkflowContext) -> None:
        return None

    handle = await client.submit("decl_no_gates")
    assert (await handle.events())[0].payload["gates"] == {}


# -- @step -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"effect": "delete"},
        {"effect": None},
        {"retry": 3},
        {"retry": {"max_attempts": 3}},
        {"timeout": 0},
        {"timeout": -1.0},
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"timeout": True},
        {"timeout": "5"},
    ],
    ids=lambda options: "-".join(f"{k}={v!r}" for k, v in options.items()),
)
def test_bad_step_options_raise_configuration_error(options: dict[str, Any]) -> None:
    async def effect() -> int:
        return 1

    with pytest.raises(ConfigurationError):
        step(**options)(effect)


def test_step_records_its_declaration() -> None:
    policy = RetryPolicy(max_attempts=5)

    @step(name="decl_step_named", effect="read", retry=policy, timeout=2)
    async def fetch(order_id: str) -> dict[str, int]:
        return {"n": 1}

    spec = fetch.__lockgate_step__  # type: ignore[attr-defined]
    assert spec.name == "decl_step_named"
    assert spec.effect == "read"
    assert spec.retry is policy
    assert spec.timeout == 2
    assert spec.result_type == dict[str, int]
    assert fetch.__name__ == "fetch"

    @step
    def plain(x: int) -> None:
        return None

    plain_spec = plain.__lockgate_step__  # type: ignore[attr-defined]
    assert plain_spec.effect == "write"
    assert plain_spec.retry is None
    assert plain_spec.name.endswith("plain")


# -- RetryPolicy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"max_attempts": 2.0},
        {"max_attempts": True},
        {"initial_backoff": -0.1},
        {"initial_backoff": math.nan},
        {"initial_backoff": math.inf},
        {"initial_backoff": "1"},
        {"max_backoff": -1},
        {"max_backoff": math.inf},
        {"backoff_multiplier": 0.5},
        {"backoff_multiplier": "2"},
        {"backoff_multiplier": math.nan},
        {"jitter": -0.1},
        {"jitter": 1.5},
        {"jitter": math.nan},
        {"retryable": (int,)},
        {"retryable": ("ValueError",)},
    ],
    ids=lambda options: "-".join(f"{k}={v!r}" for k, v in options.items()),
)
def test_bad_retry_policy_raises_configuration_error(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**options)


def test_retry_policy_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.initial_backoff, policy.max_backoff) == (3, 0.1, 30.0)
    assert (policy.backoff_multiplier, policy.retryable, policy.jitter) == (2.0, None, 0.5)


def test_should_retry_counts_the_first_try_and_retries_any_exception_by_default() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert policy.should_retry(1, ValueError("x"))
    assert policy.should_retry(2, RuntimeError("x"))
    assert not policy.should_retry(3, ValueError("x"))
    assert not policy.should_retry(1, KeyboardInterrupt())
    assert not RetryPolicy(max_attempts=1).should_retry(1, ValueError("x"))


def test_should_retry_honours_retryable_and_the_failure_classes() -> None:
    policy = RetryPolicy(max_attempts=5, retryable=(KeyError,))
    assert policy.should_retry(1, KeyError("k"))
    assert policy.should_retry(1, _SubKeyError("k"))
    assert not policy.should_retry(1, ValueError("v"))
    # Transient is retried whatever retryable says, but not past max_attempts.
    assert policy.should_retry(1, Transient("blip"))
    assert not policy.should_retry(5, Transient("blip"))
    # Poison and Fatal never are, even when listed as retryable.
    listed = RetryPolicy(max_attempts=5, retryable=(Poison, Fatal, ValueError))
    assert not listed.should_retry(1, Poison("bad input"))
    assert not listed.should_retry(1, Fatal("broken"))
    assert not RetryPolicy().should_retry(1, StepResultTypeError("s", ValueError("nope")))


class _SubKeyError(KeyError):
    pass


def test_backoff_without_jitter_is_exact_and_capped() -> None:
    policy = RetryPolicy(
        max_attempts=10, initial_backoff=0.5, backoff_multiplier=3.0, max_backoff=10.0, jitter=0
    )
    assert [policy.backoff_seconds(n) for n in (1, 2, 3)] == [0.5, 1.5, 4.5]
    assert policy.backoff_seconds(4) == 10.0  # 13.5 capped
    assert policy.backoff_seconds(9) == 10.0
    assert RetryPolicy(initial_backoff=0, jitter=0).backoff_seconds(3) == 0.0


def test_backoff_jitter_draws_from_the_given_rng_after_the_cap() -> None:
    policy = RetryPolicy(initial_backoff=2.0, backoff_multiplier=2.0, max_backoff=5.0, jitter=0.5)
    draws = random.Random(1234)
    expected = []
    for attempt in (1, 2, 3):
        delay = min(5.0, 2.0 * 2.0 ** (attempt - 1))
        expected.append(delay * 0.5 + draws.random() * delay * 0.5)
    rng = random.Random(1234)
    got = [policy.backoff_seconds(attempt, rng) for attempt in (1, 2, 3)]
    assert got == pytest.approx(expected)
    # The cap applies before the jitter: attempt 3 would be 8s uncapped.
    assert 2.5 <= got[2] <= 5.0
    # The same seed gives the same delays.
    again = random.Random(1234)
    assert [policy.backoff_seconds(a, again) for a in (1, 2, 3)] == got


def test_full_jitter_stays_within_zero_and_the_delay() -> None:
    policy = RetryPolicy(initial_backoff=1.0, backoff_multiplier=2.0, max_backoff=8.0, jitter=1.0)
    rng = random.Random(7)
    for attempt in range(1, 8):
        cap = min(8.0, 2.0 ** (attempt - 1))
        assert 0.0 <= policy.backoff_seconds(attempt, rng) <= cap
