"""Every metric lockgate's workers export: its name, type, labels and help, in one place.

Imported only when prometheus-client is installed (``lockgate[metrics]``): the metrics live in
prometheus-client's default ``REGISTRY``, which the worker's endpoints and the HTTP API's
``/metrics`` expose. ``docs/metrics.md`` describes each one with example queries.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

#: Claim round trips: from well under a millisecond (memory) to a store retrying its server.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Attempts: from a body of no step to a long one (a run parked on a wait ends its attempt).
ATTEMPT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: How late a trigger buffer fires after it fell due.
FIRE_DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

RUNS_CLAIMED = Counter(
    "lockgate_runs_claimed_total",
    "Runs a worker claimed (took the lease of) to run an attempt.",
    ["workflow"],
)
RUNS_ENDED = Counter(
    "lockgate_runs_ended_total",
    "Runs whose attempt on this worker ended them: outcome completed, failed or cancelled.",
    ["workflow", "outcome"],
)
ATTEMPTS = Counter(
    "lockgate_attempts_total",
    "Attempts that ended, by outcome (completed, failed, cancelled, suspended, handed_back, "
    "handed_on, continued, abandoned, already_ended, store_unavailable, crashed, "
    "store_file_gone).",
    ["workflow", "outcome"],
)
RUNS_REQUEUED = Counter(
    "lockgate_runs_requeued_total",
    "Runs a worker put back in the queue, by reason: owner_gone (a lapsed lease found by the "
    "orphan scan, or an engine fault in an attempt), store_unavailable (the attempt lost the "
    "store), handed_back (a stopping worker returned it unrun).",
    ["workflow", "reason"],
)
ATTEMPTS_RUNNING = Gauge(
    "lockgate_attempts_running",
    "Attempts running now in this process.",
    ["workflow"],
)
CLAIM_LATENCY = Histogram(
    "lockgate_claim_latency_seconds",
    "Seconds from a claim call's start to the store's answer (hit or empty).",
    ["workflow"],
    buckets=CLAIM_BUCKETS,
)
ATTEMPT_DURATION = Histogram(
    "lockgate_run_attempt_duration_seconds",
    "Seconds one attempt of a run took, from its launch to its end, whatever the outcome.",
    ["workflow"],
    buckets=ATTEMPT_BUCKETS,
)
RUNS_QUEUED = Gauge(
    "lockgate_runs_queued",
    "Queued runs, sampled from the store: behind a Limit whose slots are taken (gate=limit), "
    "behind a Rate whose bucket is empty (gate=rate), or waiting for a worker (gate=none).",
    ["workflow", "gate"],
)
TRIGGER_BUFFERS_OPEN = Gauge(
    "lockgate_trigger_buffers_open",
    "Collect windows and Debounce quiet periods open now (buffered events not fired yet): in "
    "the store (source=store), or in this process's trigger topic consumer (source=topic).",
    ["workflow", "source"],
)
TRIGGER_FIRE_DELAY = Histogram(
    "lockgate_trigger_fire_delay_seconds",
    "Seconds from when a trigger buffer fell due to when it fired.",
    ["workflow"],
    buckets=FIRE_DELAY_BUCKETS,
)
CONSUMER_LAG = Gauge(
    "lockgate_consumer_lag",
    "Records of a Kafka partition past its consumer group's commit (trigger and bound topics).",
    ["topic", "partition", "group"],
)
STORE_ERRORS = Counter(
    "lockgate_store_errors_total",
    "Store calls that got no answer (the store unavailable, or its file gone), by the store "
    "method a worker called, or http:ROUTE for a request the API answered 503.",
    ["operation"],
)
STORE_RETRIES = Counter(
    "lockgate_store_retries_total",
    "Store calls tried again inside a store after its server did not answer, by backend.",
    ["backend"],
)
JOURNAL_RECORDS_DROPPED = Counter(
    "lockgate_journal_records_dropped_total",
    "Journal topic records a read did not believe, by reason: epoch (an epoch above the highest "
    "the lifecycle store issued for the run), mac (no lg-mac, or one that does not verify, with "
    "a journal key set).",
    ["workflow", "reason"],
)
