"""The tuning knobs of a worker, checked once when they are built."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from lockgate._errors import ConfigurationError
from lockgate.stores._poison import PoisonPolicy


def _refuse(field_name: str, wanted: str, value: object) -> ConfigurationError:
    return ConfigurationError(f"WorkerOptions({field_name}=...) must be {wanted}, got {value!r}")


def _check_count(field_name: str, value: object, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _refuse(field_name, f"an integer >= {minimum}", value)


def _check_seconds(field_name: str, value: object, *, allow_zero: bool = False) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        bound = ">= 0" if allow_zero else "> 0"
        raise _refuse(field_name, f"a finite number of seconds {bound}", value)


class StrandedPolicy(enum.StrEnum):
    """What a worker does with a queued run no live worker can run: a ``pinned`` run whose
    version no worker serving its workflow has (see ``WorkerOptions.stranded_timeout``)."""

    #: Leave it queued until a worker of its version comes (a rollback, a canary).
    WAIT = "wait"
    #: End it with ``run:error`` code ``stranded`` once it has waited ``stranded_timeout``.
    FAIL = "fail"


@dataclass(frozen=True)
class WorkerOptions:
    """How a :class:`WorkflowWorker` paces itself. Every interval is in seconds.

    ``max_concurrent_runs`` bounds the attempts one worker runs at once, across all of its
    workflows. A claim takes up to ``claim_batch_size`` runs at once when that many slots are
    free (one store round trip on Valkey). An idle claim loop polls every
    ``claim_poll_interval``, backing off up to ten times that while the queue stays empty; a
    claim a ``Rate`` refused waits exactly until the next token instead (never longer than
    that backoff). The timer and trigger loops sleep until the store's next deadline (a
    sleep's end, a signal wait's timeout, a delayed start, a Collect window's or Debounce
    quiet period's end) and then end or fire, up to ``timer_max_batch`` at a time, what is
    due; a deadline set in this process wakes them at once, and they ask the store again at
    least every ``timer_poll_interval_s`` to see deadlines other processes set. (A store that
    cannot say when its next deadline is gets polled that often.) Every
    ``orphan_scan_interval`` the worker requeues runs whose holder's lease
    lapsed.

    Presence and takeover (see ``docs/workers.md``): every ``presence_interval`` the worker
    writes a record of itself that lives ``presence_ttl`` (from a thread of its own, so a
    blocked event loop does not stop it), and every ``takeover_interval`` it requeues the runs
    held by any worker whose record lapsed, whatever their leases say: a worker killed or
    frozen whole loses its runs about ``presence_ttl`` after its last write, where its leases
    alone would hold them ``lock_ttl`` plus an orphan scan. A worker silent for less than
    ``presence_ttl`` (a GC pause, a loaded machine) keeps them.

    Every ``maintenance_interval`` it asks the store to clean up; on a store with
    shards, every ``shard_lease_interval`` it renews its lease on its share of them, which its
    claims try first. On stop, running attempts get ``shutdown_grace`` to reach a boundary and
    hand their run back; any still running then are cancelled and handed back.

    ``event_buffer_size`` and ``step_boundary_durability`` go to every attempt: with
    durability on, a step's outcome is in the store before the body's next durable call or its
    end; off, up to
    ``event_buffer_size`` events are batched into one append, and a crash may run again a step
    whose outcome was still buffered. ``health_port`` (0 picks a free port) serves
    ``/livez`` and ``/readyz`` on ``health_host``; None serves nothing.

    Metrics (``lockgate[metrics]``, see ``docs/metrics.md``): the health endpoint also serves
    ``/metrics``, and ``metrics_port`` (0 picks a free port) serves them from a
    prometheus-client server of their own on ``health_host``. While either serves, every
    ``metrics_interval`` the worker samples from the store how many runs wait behind each
    kind of gate and how many trigger buffers are open.

    Poison runs: a run whose worker dies or freezes under it (its presence or its lease
    lapses) is requeued by the next takeover pass, orphan scan or claim, and each such lapse is
    a crash of the run. The crash number
    ``poison_max_retries + 1`` within ``poison_retry_ttl_s`` seconds (older ones are forgotten;
    progress forgets none) quarantines the run instead: it ends with status ``quarantined``
    and ``lockgate runs retry`` starts it again from its journal. A worker whose own event
    loop stays blocked (a body that never awaits) notes it on the runs it holds before their
    leases can lapse; ``poison_counts_loop_blocked=False`` requeues such lapses without
    counting them. ``cancel_timeout``: after a cancel reaches a running attempt, a body that
    has not reached a boundary within that many seconds has its task cancelled and the run
    ends cancelled. ``stranded_policy`` (:class:`StrandedPolicy`) says what becomes of a
    queued ``pinned`` run no live worker's version serves: ``WAIT`` leaves it queued, ``FAIL``
    ends it with code ``stranded`` once it has waited ``stranded_timeout`` seconds. The
    stranded scan runs with the orphan scan.
    """

    max_concurrent_runs: int = 50
    claim_batch_size: int = 8
    claim_poll_interval: float = 0.1
    timer_poll_interval_s: float = 0.25
    timer_max_batch: int = 100
    orphan_scan_interval: float = 60.0
    presence_ttl: float = 5.0
    presence_interval: float = 1.0
    takeover_interval: float = 1.0
    shutdown_grace: float = 30.0
    maintenance_interval: float = 300.0
    shard_lease_interval: float = 10.0
    event_buffer_size: int = 64
    step_boundary_durability: bool = True
    health_port: int | None = None
    health_host: str = "127.0.0.1"
    metrics_port: int | None = None
    metrics_interval: float = 15.0
    cancel_timeout: float = 5.0
    poison_max_retries: int = 3
    poison_retry_ttl_s: float = 3600.0
    poison_counts_loop_blocked: bool = True
    stranded_policy: StrandedPolicy = StrandedPolicy.WAIT
    stranded_timeout: float = 0.0

    @property
    def exports_metrics(self) -> bool:
        """Whether a worker with these options serves metrics (and samples its gauges)."""
        from lockgate.metrics import _hooks as metrics

        return metrics.enabled() and (self.health_port is not None or self.metrics_port is not None)

    @property
    def poison_policy(self) -> PoisonPolicy:
        """The poison knobs as the store calls that count a lapsed lease take them."""
        return PoisonPolicy(
            self.poison_max_retries, self.poison_retry_ttl_s, self.poison_counts_loop_blocked
        )

    def __post_init__(self) -> None:
        self._check_poison()
        for count in (
            "max_concurrent_runs",
            "claim_batch_size",
            "timer_max_batch",
            "event_buffer_size",
        ):
            _check_count(count, getattr(self, count))
        for interval in (
            "claim_poll_interval",
            "timer_poll_interval_s",
            "orphan_scan_interval",
            "presence_ttl",
            "presence_interval",
            "takeover_interval",
            "maintenance_interval",
            "shard_lease_interval",
        ):
            _check_seconds(interval, getattr(self, interval))
        _check_seconds("shutdown_grace", self.shutdown_grace, allow_zero=True)
        if self.presence_interval >= self.presence_ttl:
            # A record that lapses before the next write would make a live worker look dead.
            raise _refuse(
                "presence_interval",
                f"shorter than presence_ttl ({self.presence_ttl:g}s)",
                self.presence_interval,
            )
        if not isinstance(self.step_boundary_durability, bool):
            raise _refuse(
                "step_boundary_durability", "True or False", self.step_boundary_durability
            )
        for field_name in ("health_port", "metrics_port"):
            port = getattr(self, field_name)
            if port is not None and (
                isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65_535
            ):
                raise _refuse(field_name, "None or a port number from 0 to 65535", port)
        # Imported here: `lockgate worker --help` reads these options' defaults, and the
        # hooks import prometheus-client when it is installed.
        from lockgate.metrics import _hooks as metrics

        if self.metrics_port is not None and not metrics.enabled():
            raise ConfigurationError(
                "WorkerOptions(metrics_port=...) needs prometheus-client: "
                "pip install 'lockgate[metrics]'"
            )
        _check_seconds("metrics_interval", self.metrics_interval)
        if not isinstance(self.health_host, str) or not self.health_host:
            raise _refuse("health_host", "a host name or address", self.health_host)

    def _check_poison(self) -> None:
        _check_count("poison_max_retries", self.poison_max_retries, minimum=0)
        _check_seconds("poison_retry_ttl_s", self.poison_retry_ttl_s)
        _check_seconds("cancel_timeout", self.cancel_timeout, allow_zero=True)
        _check_seconds("stranded_timeout", self.stranded_timeout, allow_zero=True)
        if not isinstance(self.poison_counts_loop_blocked, bool):
            raise _refuse(
                "poison_counts_loop_blocked", "True or False", self.poison_counts_loop_blocked
            )
        policy = self.stranded_policy
        if not isinstance(policy, StrandedPolicy):
            if policy not in {p.value for p in StrandedPolicy}:
                raise _refuse("stranded_policy", "a StrandedPolicy ('wait' or 'fail')", policy)
            object.__setattr__(self, "stranded_policy", StrandedPolicy(policy))
