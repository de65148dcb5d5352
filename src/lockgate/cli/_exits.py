"""Exit codes, and which failures are the user's to fix (2) and which are the operation's (1)."""

from __future__ import annotations

import sys

from lockgate._errors import (
    CapabilityMissing,
    ConfigurationError,
    ConsumerDied,
    DuplicateRunError,
    IdempotencyConflict,
    InvalidCursorError,
    InvalidParamsError,
    InvalidTextError,
    JournalRecordUndecodable,
    PayloadTooLarge,
    RetryRefused,
    RunNotFoundError,
    RunNotWaitingError,
    one_line,
)

OK = 0
FAILED = 1
USAGE = 2
#: A worker whose topic consumer died of a bug (sysexits' EX_SOFTWARE).
SOFTWARE = 70
INTERRUPTED = 130
BROKEN_PIPE = 141

#: Errors that say the command was given something that cannot work: fix the command line,
#: the store URL or the environment and run it again.
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    ConfigurationError,
    InvalidCursorError,
    InvalidParamsError,
    InvalidTextError,
    JournalRecordUndecodable,
    PayloadTooLarge,
    RunNotFoundError,
    RunNotWaitingError,
    RetryRefused,
    CapabilityMissing,
    IdempotencyConflict,
    DuplicateRunError,
    ValueError,
    FileExistsError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


class Failure(Exception):
    """A command ending with ``code`` and a one-line message for stderr."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


#: Errors about the data a command read, not its command line: a journal record that is not
#: lockgate's (a ConfigurationError by its class, but no flag or URL mends it) is the
#: operation's failure, 1, as ``store rebuild`` and ``journal replay`` exit when they skip one.
DATA_ERRORS: tuple[type[BaseException], ...] = (JournalRecordUndecodable,)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, Failure):
        return exc.code
    if isinstance(exc, DATA_ERRORS):
        return FAILED
    if isinstance(exc, ConsumerDied):
        return SOFTWARE
    return USAGE if isinstance(exc, USAGE_ERRORS) else FAILED


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line on stderr and return its exit code."""
    message = one_line(exc)
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in message:
        message = f"{message}: {exc.filename}"
    print(f"lockgate: error: {message}", file=sys.stderr, flush=True)
    return exit_code_for(exc)
