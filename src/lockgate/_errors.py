"""The one error tree of lockgate.

Every error lockgate raises on purpose derives from :class:`LockgateError` and carries a stable
``code`` (an :class:`ErrorCode`), so callers, logs and the journal can name a failure without
parsing messages::

    LockgateError
    ├── ConfigurationError              a declaration or option that cannot work
    │   ├── InvalidNameError            a workflow name or id that breaks the naming rules
    │   ├── StoreFileError              a file that cannot serve as an SQLite store
    │   ├── StoreAuthenticationError    the store's server refused the URL's credentials
    │   ├── StoreProtocolError          what answers at the store's address speaks otherwise
    │   │   └── JournalRecordUndecodable  a journal topic record of a run that is no RunEvent
    │   ├── JournalPositionError        a replay position the journal topic does not have
    │   ├── JournalTopicMismatch        a journal topic with another partition count
    │   ├── JournalTopicUnsafe          a journal topic that would delete records runs need
    │   ├── ShardCountMismatch          a shard_count other than the one its namespace recorded
    │   └── TriggerTopicMismatch        a trigger topic with another partition count
    ├── InvalidParamsError              submit params that do not fit the workflow body
    ├── InvalidTextError                a string holding a lone surrogate (no UTF-8 form)
    ├── InvalidCursorError              a page cursor this store never gave out
    ├── PayloadTooLarge                 an event payload over max_event_payload_bytes
    ├── RunNotFoundError                no run with this name and id
    ├── DuplicateRunError               a run id already taken by another run
    ├── IdempotencyConflict             an idempotency key reused for a different request
    ├── RunFinishedError                the run ended; it takes no more signals or updates
    ├── RunNotStartedError              an update for a run whose start is still ahead
    ├── ContinuationChainError          a run:continued link that cannot be followed
    ├── QueryError                      a query that cannot be served
    ├── UpdateRejected                  a validator refused an update
    ├── UpdateError                     an update handler failed, or none is registered
    ├── UpdateTimeout                   no worker applied an update in time
    ├── StepResultTypeError             a step result that does not fit its return annotation
    ├── StepFailedError                 a step failure replayed from the journal
    ├── NonDeterminismError             a body that no longer matches its journal
    ├── UnboundContextError             a durable API used outside a run
    ├── NestedDurableOperationError     a durable API used inside a step
    ├── WaitTimeout                     a signal wait or interrupt reached its deadline
    ├── RunNotWaitingError              a resume of an interrupt the run does not wait on
    ├── InterruptHandlerFailed          an on_interrupt handler could not answer the question
    ├── StoreError                      a store failure: the store, not the request, stopped it
    │   ├── StoreFault                  the store itself failed under an operation
    │   │   ├── StoreUnavailable        the store failed under an operation (retriable)
    │   │   └── StoreFileGone           an SQLite store's path no longer names its file
    │   ├── LockLost                    a fenced write by a lease that no longer holds the run
    │   │   └── EventAfterTerminal      an append behind a terminal event
    │   └── CapabilityMissing           a store asked for an optional group it lacks
    ├── RunOwnedError                   another live lease holds the run
    ├── RunGatedError                   a concurrency or rate gate kept the run waiting too long
    ├── ConsumerDied                    a worker's topic consumer ended while it served
    ├── JournalNeedsNewerRuntime        a journal with facts this runtime cannot read
    │   └── SchemaVersionMismatch       an event schema major newer than this runtime
    ├── DurableInvocationError          a run awaited by a caller ended in error
    │   ├── DurableInvocationCancelled  ... because it was cancelled or terminated
    │   └── DurableInvocationTimeout    ... or did not end within the caller's timeout
    ├── DurableInterrupt                an awaited run asks a question no handler answers
    └── UserFailure                     failures a step raises to steer retries
        ├── Transient                   always retried, up to max_attempts (retriable)
        ├── Poison                      bad input: never retried
        └── Fatal                       broken invariant: never retried

Whether an error is worth retrying is an attribute of its class, ``retriable`` (False unless
the class says otherwise), so a caller asks the error rather than list types: when it is True,
the same call may succeed later with nothing changed (the store answering again, a passing
condition). The store failures share one branch, :class:`StoreError`; the store's own faults
(it did not answer, its file is gone), as opposed to its refusals, share :class:`StoreFault`.

Context fields are keyword-only. Errors the engine writes into the journal are described by
:func:`describe_error`, which is plain JSON and round-trips through every store.

The signals the engine uses to unwind a workflow body (suspend, cancel, lost lease) are not in
this tree: they derive from ``BaseException`` so that a body's ``except Exception`` cannot
swallow them. They live in the executor and never reach a caller.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar


class ErrorCode(enum.StrEnum):
    """Stable identifiers for failures. New codes may be added; existing ones never change."""

    CONFIGURATION = "configuration"
    INVALID_PARAMS = "invalid_params"
    INVALID_NAME = "invalid_name"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    NOT_FOUND = "not_found"
    DUPLICATE_RUN = "duplicate_run"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    INVALID_REQUEST = "invalid_request"
    UPDATE_REJECTED = "update_rejected"
    UPDATE_FAILED = "update_failed"
    UPDATE_TIMEOUT = "update_timeout"
    STEP_RESULT_TYPE = "step_result_type"
    STEP_FAILED = "step_failed"
    NONDETERMINISM = "nondeterminism"
    UNBOUND_CONTEXT = "unbound_context"
    NESTED_DURABLE_OPERATION = "nested_durable_operation"
    WAIT_TIMEOUT = "wait_timeout"
    LOCK_LOST = "lock_lost"
    EVENT_AFTER_TERMINAL = "event_after_terminal"
    RUN_OWNED = "run_owned"
    RUN_GATED = "run_gated"
    CAPABILITY_MISSING = "capability_missing"
    CONSUMER_DIED = "consumer_died"
    STORE_UNAVAILABLE = "store_unavailable"
    STORE_FILE_GONE = "store_file_gone"
    JOURNAL_NEEDS_NEWER_RUNTIME = "journal_needs_newer_runtime"
    SCHEMA_VERSION_MISMATCH = "schema_version_mismatch"
    RUN_FAILED = "run_failed"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"
    RUN_TIMEOUT = "run_timeout"
    USER_ERROR = "user_error"
    TRANSIENT = "transient"
    POISON = "poison"
    FATAL = "fatal"
    STREAM_OVERFLOW = "stream_overflow"
    MAX_RETRIES = "max_retries"
    CONTINUATION_CHAIN = "continuation_chain"
    STORE_AUTHENTICATION = "store_authentication"
    STORE_PROTOCOL = "store_protocol"
    JOURNAL_POSITION = "journal_position"
    JOURNAL_RECORD_UNDECODABLE = "journal_record_undecodable"
    CHILD_FAILED = "child_failed"
    RUN_NOT_WAITING = "run_not_waiting"
    SUSPEND = "suspend"
    QUARANTINED = "quarantined"
    #: A queued pinned run that no live worker's version served in time (``StrandedPolicy``).
    STRANDED = "stranded"
    INTERRUPT_HANDLER_FAILED = "interrupt_handler_failed"
    INVALID_TEXT = "invalid_text"
    INVALID_CURSOR = "invalid_cursor"
    #: The branch of the store failures (:class:`StoreError`, :class:`StoreFault`).
    STORE_ERROR = "store_error"


class LockgateError(Exception):
    """Root of every error lockgate raises on purpose."""

    code: ErrorCode = ErrorCode.INVALID_REQUEST
    #: Whether the same call may succeed when tried again with nothing changed.
    retriable: ClassVar[bool] = False


class ConfigurationError(LockgateError):
    """A declaration, option or environment setting that cannot work as given."""

    code = ErrorCode.CONFIGURATION


class InvalidNameError(ConfigurationError, ValueError):
    """A workflow name, run id, or another name or id given to lockgate (signal, update and
    query names and ids, idempotency keys) that breaks the naming rules (see
    ``lockgate._names``); nothing was written. ``what`` says which it was
    (``"run id"``, ...), ``value`` is the value refused.

    A :class:`ConfigurationError`, as ``@workflow`` raises for every other declaration it
    refuses, and a ``ValueError``, as ``submit`` raises for other arguments it refuses."""

    code = ErrorCode.INVALID_NAME

    def __init__(self, message: str, *, what: str, value: object) -> None:
        super().__init__(message)
        self.what = what
        self.value = value


class StoreFileError(ConfigurationError):
    """The SQLite file cannot be used as a lockgate store (missing, not asked to be created, of
    another application, damaged, newer, on a network filesystem); it was left untouched."""


class StoreAuthenticationError(ConfigurationError):
    """The store's server refused to let this client in: the URL gives no password where one
    is needed, or a wrong one (or a user that is disabled). Fix the URL; retrying cannot help."""

    code = ErrorCode.STORE_AUTHENTICATION


class StoreProtocolError(ConfigurationError):
    """What answers at the store URL's address does not speak what the URL says: not a Valkey
    server at all (an HTTP server on that port), or a plain server asked for TLS."""

    code = ErrorCode.STORE_PROTOCOL


class InvalidParamsError(LockgateError, ValueError):
    """Params given at submit do not fit the workflow body; nothing was queued."""

    code = ErrorCode.INVALID_PARAMS

    def __init__(self, message: str, *, workflow: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.workflow = workflow
        self.parameter = parameter


class InvalidTextError(LockgateError, ValueError):
    """A string in params, a payload, an event or metadata holds a lone surrogate
    (U+D800-U+DFFF, which JSON can spell as an escape such as ``"\\ud800"``). UTF-8 has no form
    for it, so no strict JSON reader could read the value back; nothing was written. ``what``
    names the value, ``path`` where in it the string is (``$.items[0]``; a key is named as
    the place it stands)."""

    code = ErrorCode.INVALID_TEXT

    def __init__(self, message: str, *, what: str, path: str) -> None:
        super().__init__(message)
        self.what = what
        self.path = path


class InvalidCursorError(LockgateError, ValueError):
    """A cursor of ``list_runs`` that no page of this store gave out (not a number, or one
    out of the store's range)."""

    code = ErrorCode.INVALID_CURSOR

    def __init__(self, message: str, *, cursor: str) -> None:
        super().__init__(message)
        self.cursor = cursor


class PayloadTooLarge(LockgateError):
    """One event's JSON payload is over the workflow's ``max_event_payload_bytes``."""

    code = ErrorCode.PAYLOAD_TOO_LARGE

    def __init__(self, message: str, *, what: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.what = what
        self.size = size
        self.limit = limit


class RunNotFoundError(LockgateError):
    """No run with this name and id exists in the store."""

    code = ErrorCode.NOT_FOUND

    def __init__(self, name: str, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} of workflow {name!r} in this store")
        self.name = name
        self.run_id = run_id


class DuplicateRunError(LockgateError):
    """The run id is already taken by a run submitted without this idempotency key."""

    code = ErrorCode.DUPLICATE_RUN

    def __init__(self, name: str, run_id: str) -> None:
        super().__init__(f"run id {run_id!r} of workflow {name!r} is already taken")
        self.name = name
        self.run_id = run_id


class IdempotencyConflict(LockgateError):
    """An idempotency key was reused for a different request; the first run is unchanged."""

    code = ErrorCode.IDEMPOTENCY_CONFLICT


class RunFinishedError(LockgateError):
    """The run has ended (or a cancel is latched), so it takes no more signals or updates."""

    code = ErrorCode.INVALID_REQUEST


class RetryRefused(LockgateError):
    """A run that cannot be retried (still going, completed, or handed on to a successor),
    with the stable ``code`` saying why. Raised before anything is written."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or f"the run cannot be retried ({code})")
        self.code = code


class RunNotStartedError(LockgateError):
    """An update named a run whose delayed start is still ahead: no handler exists yet."""

    code = ErrorCode.INVALID_REQUEST


class ContinuationChainError(LockgateError):
    """A run ended ``run:continued``, but its successor cannot be followed: the link is
    unreadable, or the chain is longer than any hand-on makes. ``reason`` says which."""

    code = ErrorCode.CONTINUATION_CHAIN

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class RunNotWaitingError(LockgateError):
    """A resume named an interrupt the run is not waiting on (answered already, or another
    one than the run waits on now)."""

    code = ErrorCode.RUN_NOT_WAITING


class InterruptHandlerFailed(LockgateError):
    """What ``ctx.interrupt`` raises in the body when the ``on_interrupt`` handler of the
    caller awaiting the run (``client.result``, ``run_and_await``) raised or answered with an
    action the question does not take. Uncaught, the run ends in error with this code.
    ``error`` describes the handler's failure as the journal recorded it."""

    code = ErrorCode.INTERRUPT_HANDLER_FAILED

    def __init__(self, message: str, *, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error = error or {}


class ChildWorkflowError(LockgateError):
    """A child run started with ``ctx.run_child`` ended in error, was cancelled, or timed
    out. ``status`` is how it ended; ``error`` the child's recorded error."""

    code = ErrorCode.CHILD_FAILED

    def __init__(
        self,
        name: str,
        run_id: str,
        status: str,
        message: str,
        *,
        error: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"child run {run_id!r} of {name!r} ended {status}: {message}")
        self.name = name
        self.run_id = run_id
        self.status = status
        self.error = error or {}


class QueryError(LockgateError):
    """A query failed: unknown query name, or the journal could not be replayed to serve it."""

    code = ErrorCode.INVALID_REQUEST


class UpdateRejected(LockgateError):
    """The update's validator refused it before it entered the journal."""

    code = ErrorCode.UPDATE_REJECTED


class UpdateError(LockgateError):
    """The update could not be applied: no handler of that name, or the handler raised."""

    code = ErrorCode.UPDATE_FAILED


class UpdateTimeout(LockgateError):
    """No worker applied the update in time. It stays queued; retry with the same update_id."""

    code = ErrorCode.UPDATE_TIMEOUT


class StepResultTypeError(LockgateError):
    """A step returned a value that does not fit its declared return annotation."""

    code = ErrorCode.STEP_RESULT_TYPE

    def __init__(self, step_id: str, validation_error: Exception) -> None:
        super().__init__(
            f"step {step_id!r} returned a value that does not fit its return type: "
            f"{validation_error}"
        )
        self.step_id = step_id
        self.validation_error = validation_error


class StepFailedError(LockgateError):
    """A step's final failure, replayed from the journal when its exception type is not
    importable or cannot be rebuilt from its recorded arguments."""

    code = ErrorCode.STEP_FAILED

    def __init__(
        self, message: str, *, step_id: str, error_type: str, user_code: str | None = None
    ) -> None:
        super().__init__(message)
        self.step_id = step_id
        self.error_type = error_type
        self.user_code = user_code


class NonDeterminismError(LockgateError):
    """The body made a different durable call than its journal records at the same position."""

    code = ErrorCode.NONDETERMINISM

    def __init__(self, message: str, *, call_index: int, expected: str, actual: str) -> None:
        super().__init__(message)
        self.call_index = call_index
        self.expected = expected
        self.actual = actual


class UnboundContextError(LockgateError):
    """A step or ``ctx`` API was called outside a running workflow."""

    code = ErrorCode.UNBOUND_CONTEXT


class NestedDurableOperationError(LockgateError):
    """A durable operation was attempted inside a step, which is atomic."""

    code = ErrorCode.NESTED_DURABLE_OPERATION

    def __init__(
        self, operation: str, operation_name: str, boundary_kind: str, boundary_name: str
    ) -> None:
        super().__init__(
            f"{operation} {operation_name!r} called inside {boundary_kind} "
            f"{boundary_name!r}: a step is atomic; call it from the workflow body"
        )
        self.operation = operation
        self.operation_name = operation_name
        self.boundary_kind = boundary_kind
        self.boundary_name = boundary_name


class WaitTimeout(LockgateError):
    """A ``wait_for_signal`` or ``interrupt`` reached its deadline with no signal or answer.

    An ordinary exception: the body may catch it and carry on. Uncaught, the run ends in error
    with code ``wait_timeout``."""

    code = ErrorCode.WAIT_TIMEOUT

    def __init__(
        self,
        wait_kind: str,
        name: str,
        call_index: int | None = None,
        deadline: datetime | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(message or f"{wait_kind} wait for {name!r} reached its deadline")
        self.wait_kind = wait_kind
        self.name = name
        self.call_index = call_index
        self.deadline = deadline


class StoreError(LockgateError):
    """The branch of the store failures: the store failed under a call, or refused one it
    cannot take (a lease that lost the run, a capability it lacks). See ``retriable``."""

    code = ErrorCode.STORE_ERROR


class StoreFault(StoreError):
    """The store itself failed under an operation (it did not answer, or its file is gone):
    neither the request's doing nor a refusal. ``retriable`` tells the two apart."""


class LockLost(StoreError):
    """A fenced write by a lease that no longer holds the run; nothing was written."""

    code = ErrorCode.LOCK_LOST


class EventAfterTerminal(LockLost):
    """An append behind a terminal event was refused whole; nothing was written."""

    code = ErrorCode.EVENT_AFTER_TERMINAL


class RunOwnedError(LockgateError):
    """Another live lease holds the run."""

    code = ErrorCode.RUN_OWNED


class RunGatedError(LockgateError):
    """A run's ``Limit`` or ``Rate`` refused it: at once from a store's ``claim_run``, or
    after ``gate_timeout`` from ``InlineWorkflowRunner.run``. The run stays queued."""

    code = ErrorCode.RUN_GATED


class CapabilityMissing(StoreError):
    """The store was asked for an optional capability group it does not provide."""

    code = ErrorCode.CAPABILITY_MISSING

    def __init__(self, store: str, capability: str) -> None:
        super().__init__(f"{store} does not provide the {capability!r} capability")
        self.store = store
        self.capability = capability

    @classmethod
    def of(cls, store: object, capability: str) -> CapabilityMissing:
        """The error ``store`` (an instance) raises for a group it lacks."""
        return cls(type(store).__name__, capability)


class ConsumerDied(LockgateError):
    """A worker's consumer of a bound or trigger topic ended while the worker served, by an
    error no record explains (a bug: what one record holds is dead-lettered instead), or by
    returning early. The worker stops with it rather than serve on without the consumer.
    ``topic`` is the consumer's topic, ``role`` its kind (``"bound"``, ``"trigger"``)."""

    code = ErrorCode.CONSUMER_DIED

    def __init__(self, message: str, *, topic: str, role: str) -> None:
        super().__init__(message)
        self.topic = topic
        self.role = role


class StoreUnavailable(StoreFault):
    """The store failed under an operation; the run is left as it was. Worth retrying: the
    store may answer again."""

    code = ErrorCode.STORE_UNAVAILABLE
    retriable = True


class JournalTopicMismatch(ConfigurationError):
    """The Kafka journal topic exists with another partition count than the lifecycle store
    has shards. Repartitioning would move runs' records to other partitions, so the store
    refuses to start instead; nothing was written. ``topic`` is the topic, ``partitions`` its
    partition count, ``expected`` the shard count."""

    def __init__(self, topic: str, partitions: int, expected: int) -> None:
        super().__init__(
            f"the journal topic {topic!r} has {partitions} partition(s) but the lifecycle "
            f"store has {expected} shard(s); a journal topic is never repartitioned: use "
            f"another topic_prefix, or the shard count the topic was made for"
        )
        self.topic = topic
        self.partitions = partitions
        self.expected = expected


class ShardCountMismatch(ConfigurationError):
    """A store was opened with a ``shard_count`` other than the one its namespace recorded
    when it was made. Runs live in the shard their key hashes to among that many shards, so a
    store counting otherwise would look for them in the wrong places: it refuses to start
    instead; nothing was written. ``namespace`` is the namespace, ``recorded`` its shard
    count, ``given`` the one asked for. Leaving ``shard_count`` out takes the recorded one."""

    def __init__(self, namespace: str, recorded: int, given: int) -> None:
        super().__init__(
            f"namespace {namespace!r} was made with shard_count={recorded}, not {given}: "
            f"leave shard_count out to use the recorded {recorded}, or use another namespace "
            f"for {given} shards (a namespace is never re-sharded)"
        )
        self.namespace = namespace
        self.recorded = recorded
        self.given = given


class TriggerTopicMismatch(ConfigurationError):
    """A trigger topic exists with another partition count than the store has shards: its
    keys' records would not sit on the partitions of their shards. Workers and producers
    refuse it; nothing was written. ``topic``, ``partitions`` and ``expected`` as for
    :class:`JournalTopicMismatch`."""

    def __init__(self, topic: str, partitions: int, expected: int) -> None:
        super().__init__(
            f"the trigger topic {topic!r} has {partitions} partition(s) but the store has "
            f"{expected} shard(s); a trigger topic needs one partition per shard: name "
            f"another topic on the Collect/Debounce (topic=...)"
        )
        self.topic = topic
        self.partitions = partitions
        self.expected = expected


class JournalTopicUnsafe(ConfigurationError):
    """The Kafka journal topic exists with a setting that would delete journal records a run
    still needs: a ``cleanup.policy`` with ``compact`` keeps one record per gate key, so every
    other event of those runs would go. The store refuses to start; nothing was written.
    ``topic`` is the topic, ``setting`` and ``value`` the setting that is unsafe."""

    def __init__(self, topic: str, setting: str, value: str) -> None:
        super().__init__(
            f"the journal topic {topic!r} has {setting}={value}, which deletes journal records "
            f"runs still need; set {setting}=delete with a retention longer than your runs "
            f"live (kafka-configs --alter --add-config), or use another topic_prefix"
        )
        self.topic = topic
        self.setting = setting
        self.value = value


class JournalPositionError(ConfigurationError):
    """A replay was asked to read from where the journal topic has nothing: the topic does not
    exist, the partition is not one of its partitions, an offset is below the partition's low
    watermark (its oldest record kept, past retention), or the end offset is before the start.
    Nothing was read. ``topic`` is the topic; ``partition``, ``offset`` and ``low`` (the low
    watermark) are set when the refusal is about them."""

    code = ErrorCode.JOURNAL_POSITION

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int | None = None,
        offset: int | None = None,
        low: int | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.low = low


class JournalRecordUndecodable(StoreProtocolError):
    """A record of the Kafka journal topic carries a run's headers (``lg-workflow``,
    ``lg-run-id``) but is not a lockgate journal event: its value is not Avro of
    ``run_event.avsc``, or its headers are missing or disagree with its value. Something other
    than lockgate wrote it. Not an outage (waiting does not mend it): the run's journal is not
    read past it, and nothing is written. ``topic``, ``partition`` and ``offset`` name the
    record, ``reason`` says what is wrong with it."""

    code = ErrorCode.JOURNAL_RECORD_UNDECODABLE

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(
            f"the record at {topic!r} partition {partition} offset {offset} is not a lockgate "
            f"journal event ({reason}): only lockgate may write records with its lg-* headers "
            f"to {topic!r}; keep other producers off the topic (records without them are "
            f"skipped)"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class StoreFileGone(StoreFault):
    """The path of an open SQLite store no longer names the file it opened, or its ``-wal`` or
    ``-shm`` companion: deleted, moved or replaced. Whatever the store did next would go to a
    file no other process can see, so it refuses every call from then on. Not
    :class:`StoreUnavailable`: waiting does not bring the file back, so a worker stops.
    ``path`` is the file that is gone, ``reason`` says how (``"deleted"``, ``"replaced"``)."""

    code = ErrorCode.STORE_FILE_GONE

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class JournalNeedsNewerRuntime(LockgateError):
    """The journal holds facts this runtime cannot read, so it refuses to replay it.

    ``missing`` names each unreadable fact so an operator knows what to upgrade for."""

    code = ErrorCode.JOURNAL_NEEDS_NEWER_RUNTIME

    def __init__(self, message: str | None = None, *, missing: Sequence[str] = ()) -> None:
        self.missing = tuple(missing)
        super().__init__(message or "journal needs a newer lockgate: " + ", ".join(self.missing))


class SchemaVersionMismatch(JournalNeedsNewerRuntime):
    """An event's schema_version major is newer than this runtime understands."""

    code = ErrorCode.SCHEMA_VERSION_MISMATCH


class DurableInvocationError(LockgateError):
    """A run awaited by a caller ended in error."""

    code = ErrorCode.RUN_FAILED

    def __init__(
        self, name: str, run_id: str, detail: str, *, error: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"run {run_id!r} of {name!r}: {detail}")
        self.name = name
        self.run_id = run_id
        self.detail = detail
        self.error = error or {}

    @property
    def user_code(self) -> str | None:
        value = self.error.get("user_code")
        return value if isinstance(value, str) else None


class DurableInvocationCancelled(DurableInvocationError):
    """A run awaited by a caller was cancelled or terminated rather than failing."""

    code = ErrorCode.CANCELLED


class DurableInvocationTimeout(DurableInvocationError):
    """A run awaited by a caller did not end within the caller's timeout."""

    code = ErrorCode.RUN_TIMEOUT


class DurableInterrupt(LockgateError):
    """An awaited run is parked on ``ctx.interrupt`` and no ``on_interrupt`` handler was given
    to answer it. ``payload`` is what the interrupt asks; pass ``wait_id`` to
    ``client.resume`` so the answer lands on this interrupt and no later one."""

    code = ErrorCode.SUSPEND

    def __init__(
        self,
        name: str,
        run_id: str,
        event_id: str | None,
        payload: dict[str, Any],
        *,
        wait_id: str | None = None,
    ) -> None:
        super().__init__(f"run {run_id!r} of {name!r} waits on an interrupt ({wait_id})")
        self.name = name
        self.run_id = run_id
        self.event_id = event_id
        self.payload = payload
        self.wait_id = wait_id


class UserFailure(LockgateError):
    """Base of the failure classes a step raises to steer its retry policy.

    ``code`` is the caller's own identifier for the failure; it is recorded as ``user_code`` on
    the run's error, so keep it an identifier, never data."""

    code = ErrorCode.USER_ERROR

    def __init__(self, *args: object, code: str | None = None) -> None:
        super().__init__(*args)
        self.user_code = code


class Transient(UserFailure):
    """A passing condition (a network blip, contention): retried up to max_attempts."""

    code = ErrorCode.TRANSIENT
    retriable = True


class Poison(UserFailure):
    """Bad input or data: retrying cannot help, so it is never retried."""

    code = ErrorCode.POISON


class Fatal(UserFailure):
    """A broken invariant or missing configuration: never retried, the run aborts."""

    code = ErrorCode.FATAL


def describe_error(exc: BaseException) -> dict[str, Any]:
    """A JSON description of ``exc`` for the journal: type, message, code and user code."""
    cls = type(exc)
    described: dict[str, Any] = {
        "type": f"{cls.__module__}:{cls.__qualname__}",
        "message": str(exc),
    }
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        described["code"] = str(code)
    user_code = getattr(exc, "user_code", None)
    if isinstance(user_code, str):
        described["user_code"] = user_code
    return described


def one_line(error: BaseException) -> str:
    """``error``'s message folded onto one line (its lines joined by ``"; "``), or its class
    name when it has none: how the CLI's stderr and the worker's status lines show a failure."""
    text = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__
