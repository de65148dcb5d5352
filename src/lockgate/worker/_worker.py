"""The worker: runs the claimed runs of its workflows against a shared store until stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from lockgate import _failpoints as failpoints
from lockgate._clock import Clock, as_clock
from lockgate._errors import (
    ConfigurationError,
    ConsumerDied,
    LockgateError,
    StoreUnavailable,
)
from lockgate._names import check_name
from lockgate.client._client import WorkflowClient
from lockgate.metrics._exposition import MetricsServer
from lockgate.stores._base import Store
from lockgate.streams._topics import kafka_journal
from lockgate.worker._attempts import AttemptPool
from lockgate.worker._bound_topics import check_bindings, check_bound_topics, serve_bound_topics
from lockgate.worker._deadlines import timer_loop, trigger_loop
from lockgate.worker._gauges import sample_gauges
from lockgate.worker._health import HealthServer
from lockgate.worker._loops import (
    claim_loop,
    claim_some,
    every,
    fire_due_timers,
    fire_due_triggers,
    lease_shards,
    maintain,
    recover_orphans,
    sharded,
    take_over_lapsed,
    take_over_when_present,
    takes_over,
)
from lockgate.worker._marker import mark_store, watch_marker
from lockgate.worker._options import StrandedPolicy, WorkerOptions
from lockgate.worker._poison import fail_stranded, watch_loop
from lockgate.worker._presence import drop_presence, presence_loop, publishes_presence
from lockgate.worker._registration import register_workflows
from lockgate.worker._runtime import Runtime, wait_all
from lockgate.worker._status import backoff, describe_store, runs, status_log
from lockgate.worker._trigger_topics import serve_trigger_topics
from lockgate.workflow._spec import WorkflowSpec, spec_of

log = logging.getLogger("lockgate.worker")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: Seconds between tries to record the workflows at start while the store does not answer:
#: doubling from the first to the most, jittered (each try also waits out the store's own
#: retries).
START_RETRY_FIRST = 0.25
START_RETRY_MOST = 5.0

_PRESENCE_LOOP = "lockgate-presence"


def served_specs(workflows: Iterable[Callable[..., Any]]) -> dict[str, WorkflowSpec]:
    if isinstance(workflows, str | bytes) or not isinstance(workflows, Iterable):
        raise ConfigurationError("WorkflowWorker(workflows=...) takes @workflow functions")
    specs: dict[str, WorkflowSpec] = {}
    for fn in workflows:
        spec = spec_of(fn)
        known = specs.get(spec.name)
        if known is not None and known.fn is not spec.fn:
            raise ConfigurationError(
                f"WorkflowWorker got two different workflows named {spec.name!r}"
            )
        specs[spec.name] = spec
    if not specs:
        raise ConfigurationError("WorkflowWorker(workflows=...) needs at least one workflow")
    return specs


def worker_id_or_default(worker_id: str | None) -> str:
    if worker_id is None:
        return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    if not isinstance(worker_id, str) or not worker_id or any(c in worker_id for c in "/ \t\n"):
        # A lease is "<worker_id>/<suffix>": a slash or blank in the id would blur which part
        # names the worker.
        raise ConfigurationError(
            f"WorkflowWorker(worker_id=...) must be a non-empty string without '/' or spaces, "
            f"got {worker_id!r}"
        )
    # Leases go where run ids go (a run's lock holder, members of the store's sets): the
    # naming rule holds for them too.
    check_name("worker id", worker_id)
    return worker_id


def handle_stop_signals(handler: Callable[[signal.Signals], None]) -> list[signal.Signals]:
    """Call ``handler`` on SIGTERM and SIGINT, when running in the main thread (the only
    place the event loop can take signals). Returns the signals handled, to remove later
    (:func:`unhandle_signals`)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    loop = asyncio.get_running_loop()
    handled = []
    for sig in _STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, handler, sig)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # an event loop without signal support (e.g. on Windows)
        handled.append(sig)
    return handled


def unhandle_signals(handled: list[signal.Signals]) -> None:
    loop = asyncio.get_running_loop()
    for sig in handled:
        loop.remove_signal_handler(sig)


def _ignore_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class WorkflowWorker:
    """Runs the workflows it is given: claims their queued runs from ``store`` and executes
    each attempt, alongside the duties that keep runs moving.

    :meth:`run` serves until :meth:`stop` (or SIGTERM/SIGINT when it runs in the main thread):
    one claim loop per workflow, at most ``options.max_concurrent_runs`` attempts at once, a
    timer loop that wakes due sleeps and times out due signal waits, its presence record
    (written from a thread, kept until its attempts are drained), a takeover pass that requeues
    the runs of workers whose presence lapsed, an orphan scan that requeues runs whose lease
    lapsed, and store maintenance. At start it records each
    workflow's version and flow-control policy in the store; while the store does not answer,
    it waits for it (trying again with backoff) rather than fail, and ``/readyz`` says it is
    not ready.

    Stopping is graceful: claiming stops at once; running attempts hand their run back to the
    queue at their next boundary, within ``options.shutdown_grace``; any still running then
    are cancelled and handed back. A second signal (or :meth:`stop_now`) cuts the grace short.
    A handed-back run counts no retry and another worker resumes it from its journal. A worker
    that has stopped stays stopped.

    :meth:`run_until_idle` is burst mode: drain what is runnable now, then return.
    """

    def __init__(
        self,
        *,
        workflows: Iterable[Callable[..., Any]],
        store: Store,
        worker_id: str | None = None,
        options: WorkerOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        options = options if options is not None else WorkerOptions()
        if not isinstance(options, WorkerOptions):
            raise ConfigurationError(
                f"WorkflowWorker(options=...) must be a WorkerOptions, not {type(options).__name__}"
            )
        self.store = store
        self.options = options
        self.worker_id = worker_id_or_default(worker_id)
        self.clock = as_clock(clock)
        self._rt = Runtime(
            store=store,
            clock=self.clock,
            options=options,
            worker_id=self.worker_id,
            specs=served_specs(workflows),
        )
        check_bindings(self._rt, kafka_journal(store))
        self._pool = AttemptPool(self._rt)
        #: A client over the worker's store, on the worker's clock.
        self.client = WorkflowClient(store, clock=self.clock)
        self._health: HealthServer | None = None
        self._metrics: MetricsServer | None = None
        self._failure: BaseException | None = None
        self._active = False
        self._serving = False

    @property
    def workflows(self) -> list[str]:
        """The names of the workflows this worker serves."""
        return list(self._rt.specs)

    @property
    def stopping(self) -> bool:
        """True from the moment a stop was asked for (it stays True)."""
        return self._rt.stop.is_set

    @property
    def running_attempts(self) -> int:
        """How many attempts are running now."""
        return self._pool.running

    @property
    def health_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the health endpoint once it listens, else None."""
        return self._health.address if self._health is not None else None

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the metrics server (``metrics_port``) once it listens, else
        None."""
        return self._metrics.address if self._metrics is not None else None

    def stop(self) -> None:
        """Ask the worker to stop. Idempotent; safe from any thread and from a signal handler.
        :meth:`run` returns once the shutdown is done."""
        self._rt.stop.set()

    def stop_now(self) -> None:
        """Ask the worker to stop without the shutdown grace: running attempts are cancelled
        and their runs handed back at once. Safe from any thread and from a signal handler."""
        self._rt.stop.set()
        self._rt.hurry.set()

    # -- serving -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until :meth:`stop`, then shut down gracefully and return.

        While the store is unavailable at start, it waits for it: the health endpoint (when
        asked for) listens from the start and ``/readyz`` answers 503 until the workflows are
        recorded. Raises what a background loop failed with (after shutting down), and any
        other error the store raised while the worker recorded its workflows at start. A
        workflow bound to a topic the brokers do not have is a :class:`ConfigurationError`
        before anything starts."""
        await check_bound_topics(self._rt, kafka_journal(self.store))
        self._enter()
        failpoints.check()
        handled = self._install_signal_handlers()
        loops: list[asyncio.Task[None]] = []
        grace = self.options.shutdown_grace
        try:
            await self._start_health()
            if await self._register():
                loops = self._start_loops()
                self._serving = True
                status_log.info("%s", self._serving_line(bool(handled)))
                await self._rt.stop.wait()
        except asyncio.CancelledError:
            grace = 0.0  # cancelled from outside: hand everything back now
            raise
        finally:
            self.stop()
            await self._shut_down(loops, grace)
            unhandle_signals(handled)
            self._active = False
        if self._failure is not None:
            raise self._failure

    async def run_until_idle(self) -> int:
        """Burst mode: end due waits, fire due triggers and run every runnable run, until
        nothing is claimable and nothing is running; return how many attempts ran.

        Runs parked on a wait not yet due (a sleep, a signal) are left parked. Attempts run
        concurrently, bounded by ``max_concurrent_runs``, as under :meth:`run`. A store error
        is raised to the caller once the attempts already running have ended."""
        self._enter()
        started = self._pool.started
        grace = self.options.shutdown_grace
        try:
            await register_workflows(self._rt)
            await mark_store(self._rt)
            await recover_orphans(self._rt)
            if takes_over(self._rt):
                await take_over_lapsed(self._rt)
            await fail_stranded(self._rt)
            await self._drain_runnable()
        except asyncio.CancelledError:
            grace = 0.0
            raise
        finally:
            await self._pool.drain(grace)
            self._active = False
        return self._pool.started - started

    def _serving_line(self, on_signals: bool) -> str:
        """The start-up line: who serves what, from where, how it is watched and stopped."""
        health = f", health on {self._health.url}" if self._health is not None else ""
        if self._metrics is not None:
            health += f", metrics on {self._metrics.url}"
        stop = "; stop with Ctrl-C or SIGTERM" if on_signals else ""
        created = ", a new store it created" if getattr(self.store, "created", False) else ""
        return (
            f"worker {self.worker_id} serving {', '.join(self._rt.specs)} on "
            f"{describe_store(self.store)}{created}, up to "
            f"{self.options.max_concurrent_runs} runs at once{health}{stop}"
        )

    def _enter(self) -> None:
        if self._active:
            raise RuntimeError(f"worker {self.worker_id} is already running")
        self._active = True
        self._rt.stop.bind()
        self._rt.hurry.bind()

    def adopt_health(self, health: HealthServer) -> None:
        """Serve readiness on ``health``, an endpoint already listening (started while the
        store was being opened), instead of starting one."""
        health.store, health.not_ready = self.store, self._not_ready
        self._health = health

    async def _start_health(self) -> None:
        if self._health is None and self.options.health_port is not None:
            self._health = HealthServer(
                worker_id=self.worker_id, not_ready=self._not_ready, store=self.store
            )
            await self._health.start(self.options.health_host, self.options.health_port)
        if self._metrics is None and self.options.metrics_port is not None:
            host, port = self.options.health_host, self.options.metrics_port
            try:
                self._metrics = MetricsServer(host, port)
            except OSError as exc:
                raise ConfigurationError(
                    f"the metrics server cannot listen on {host}:{port}: {exc}"
                ) from exc

    def _not_ready(self) -> dict[str, str] | None:
        if self.stopping:
            return {"status": "stopping"}
        if not self._serving:
            error = self._rt.store_state.error
            return {"status": "starting", **({"error": error} if error else {})}
        if self._rt.marker.lost:
            return {"status": "store_lost", "error": self._rt.marker.error}
        return None

    async def _register(self) -> bool:
        """Record the workflows' versions and policies in the store, trying again with backoff
        while it is unavailable (the store state tells that once); False when the worker is
        stopped first. Any other error of the store is raised."""
        for delay in backoff(START_RETRY_FIRST, START_RETRY_MOST):
            registering = asyncio.ensure_future(self._record_at_start())
            if await self._rt.stop.race(registering):
                # Stopped while a call may still be waiting on the store: leave it (recording
                # is idempotent), its outcome unread.
                registering.add_done_callback(_ignore_outcome)
                registering.cancel()
                return False
            try:
                registering.result()
                return True
            except StoreUnavailable:
                pass
            if await self._rt.stop.sleep(self.clock, delay):
                return False
        raise AssertionError("backoff() never ends")

    async def _record_at_start(self) -> None:
        """Record the served workflows in the store, and mark it (a new one)."""
        await register_workflows(self._rt)
        await mark_store(self._rt)

    async def _drain_runnable(self) -> None:
        rt, pool = self._rt, self._pool
        timers = "timers" in self.store.capabilities()
        triggers = "triggers" in self.store.capabilities()
        while not rt.stop.is_set:
            while timers and await fire_due_timers(rt):
                pass
            while triggers and await fire_due_triggers(rt):
                pass
            launched = 0
            for spec in rt.specs.values():
                while await pool.try_reserve():
                    count = 1 + await pool.reserve_more(self.options.claim_batch_size - 1)
                    if not await claim_some(rt, pool, spec, count):
                        break
                    launched += 1
            if launched:
                continue
            if not pool.running:
                return
            await pool.wait_any()

    def _start_loops(self) -> list[asyncio.Task[None]]:
        rt, options = self._rt, self.options
        loops = [
            asyncio.create_task(claim_loop(rt, self._pool, spec), name=f"lockgate-claim:{name}")
            for name, spec in rt.specs.items()
        ]
        if "timers" in self.store.capabilities():
            loops.append(asyncio.create_task(timer_loop(rt), name="lockgate-timers"))
        triggered = any(spec.trigger is not None for spec in rt.specs.values())
        if "triggers" in self.store.capabilities() and triggered:
            loops.append(asyncio.create_task(trigger_loop(rt), name="lockgate-triggers"))
        journal = kafka_journal(self.store)
        if journal is not None and triggered:
            loops.append(
                asyncio.create_task(
                    serve_trigger_topics(rt, journal), name="lockgate-trigger-topics"
                )
            )
        if journal is not None and any(spec.topic is not None for spec in rt.specs.values()):
            loops.append(
                asyncio.create_task(serve_bound_topics(rt, journal), name="lockgate-bound-topics")
            )
        loops.append(
            asyncio.create_task(
                every(rt, recover_orphans, options.orphan_scan_interval),
                name="lockgate-orphans",
            )
        )
        if sharded(self.store):
            loops.append(
                asyncio.create_task(
                    every(rt, lease_shards, options.shard_lease_interval), name="lockgate-shards"
                )
            )
        loops.append(
            asyncio.create_task(
                every(rt, maintain, options.maintenance_interval, at_start=False),
                name="lockgate-maintenance",
            )
        )
        loops.append(asyncio.create_task(watch_loop(rt, self._pool), name="lockgate-watchdog"))
        loops.append(asyncio.create_task(watch_marker(rt), name="lockgate-marker"))
        if publishes_presence(rt):
            loops.append(
                asyncio.create_task(
                    presence_loop(rt, self._pool, self.clock()), name=_PRESENCE_LOOP
                )
            )
            if takes_over(rt):
                loops.append(
                    asyncio.create_task(
                        every(rt, take_over_when_present, options.takeover_interval),
                        name="lockgate-takeover",
                    )
                )
        if options.exports_metrics:
            loops.append(
                asyncio.create_task(
                    every(rt, sample_gauges, options.metrics_interval), name="lockgate-gauges"
                )
            )
        if options.stranded_policy == StrandedPolicy.FAIL:
            loops.append(
                asyncio.create_task(
                    every(rt, fail_stranded, options.orphan_scan_interval),
                    name="lockgate-stranded",
                )
            )
        for task in loops:
            task.add_done_callback(self._loop_ended)
        return loops

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        """A loop returns only once the worker stops; one that raised takes the worker down
        with it, and :meth:`run` raises its error after shutting down."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        if self._failure is not None:
            # Said once: the other loops meeting the same failure add nothing.
            log.debug("worker %s: %s failed too: %s", self.worker_id, task.get_name(), error)
            return
        self._failure = error
        # A lockgate error (a store file gone, a refused URL) says what went wrong in its
        # message; anything else is a bug, whose traceback is wanted.
        log.error(
            "worker %s: %s failed; stopping: %s",
            self.worker_id,
            task.get_name(),
            error,
            exc_info=None if isinstance(error, LockgateError) else error,
        )
        if isinstance(error, ConsumerDied):
            # A worker serving on without it would look healthy while its topic is read by
            # nobody here: stop at once, handing the runs back, so that a supervisor
            # restarts it (or the group's other members take the partitions).
            self.stop_now()
        else:
            self.stop()

    async def _shut_down(self, loops: list[asyncio.Task[None]], grace: float) -> None:
        deadline = self.clock() + grace
        claimers = [t for t in loops if t.get_name().startswith("lockgate-claim:")]
        # Presence goes on until the attempts are drained: a worker still finishing its runs
        # is alive, and others would take them over once its record lapsed.
        present = [t for t in loops if t.get_name() == _PRESENCE_LOOP]
        for task in loops:
            if task not in claimers and task not in present:
                task.cancel()
        # A claim loop is left to return by itself: cancelled in the middle of a claim, it
        # would leave a run claimed by nobody until its lease lapsed (which a stop at once
        # accepts).
        await wait_all(claimers, self.clock, grace, until=self._rt.hurry)
        for task in claimers:
            task.cancel()
        await asyncio.gather(*(t for t in loops if t not in present), return_exceptions=True)
        if sharded(self.store):
            # Claims have stopped: let the other workers take these shards at once.
            try:
                await self._rt.io(self.store.release_shards, self.worker_id)  # type: ignore[attr-defined]
            except StoreUnavailable as exc:
                log.warning("worker %s: releasing its shards failed: %s", self.worker_id, exc)
            self._rt.shards = []
        handed = await self._pool.drain(max(0.0, deadline - self.clock()))
        for task in present:
            task.cancel()
        await asyncio.gather(*present, return_exceptions=True)
        if loops:
            await drop_presence(self._rt)
        if self._health is not None:
            await self._health.close()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        status_log.info(
            "worker stopped (%s)%s",
            self.worker_id,
            f"; {runs(len(handed))} cancelled and handed back" if handed else "",
        )

    # -- signals -------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> list[signal.Signals]:
        return handle_stop_signals(self._on_signal)

    def _on_signal(self, sig: signal.Signals) -> None:
        """The first signal drains (the graceful stop); a second one stops at once."""
        running = self.running_attempts
        if not self.stopping:
            status_log.info(
                "worker %s: %s received; draining: finishing %s, for up to %gs "
                "(Ctrl-C again to stop now)",
                self.worker_id,
                sig.name,
                runs(running),
                self.options.shutdown_grace,
            )
            self.stop()
        elif not self._rt.hurry.is_set:
            status_log.info(
                "worker %s: %s again; stopping now: handing back %s unfinished",
                self.worker_id,
                sig.name,
                runs(running),
            )
            self.stop_now()
