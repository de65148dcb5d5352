"""What the names and ids users give lockgate may hold.

The rules cover workflow names, run ids, idempotency keys, signal names and ids, update names
and ids, and query names. Such a name or id is a string of 1 to :data:`MAX_NAME_LENGTH`
characters, none of them

- a control character: U+0000-U+001F (NUL, tab, newline, the unit separator U+001F, ...),
  U+007F (DEL) or U+0080-U+009F (the C1 controls, NEL among them);
- a line or paragraph separator (U+2028, U+2029);
- a lone surrogate (U+D800-U+DFFF), which has no UTF-8 form.

Everything else is kept exactly as given: ``:``, ``/``, ``#``, braces, spaces, and any
non-ASCII letter or symbol (``billing:eu``, ``a/b``, ``with space``, ``café``). Every store
keeps names and ids that read alike apart whatever they hold (the Valkey store length-prefixes
each one in its keys), so these rules are not what keeps runs apart, with one exception: the
Valkey store joins a name and an id with U+001F in a few set members, which no name or id can
hold. They keep names and ids printable on one line (the CLI's messages, logs, tables).

What is refused raises :class:`InvalidNameError` before anything is written: at submit (the
client and the store), in the ``@workflow`` decorator, when a signal or update is sent, and in
the CLI. The length is checked where a name or id is first given; a lookup of an existing run
checks the characters only, as a run handed on carries its predecessor's id plus ``.g``.
"""

from __future__ import annotations

import re

from lockgate._errors import InvalidNameError

#: The most characters (code points) a name or id may hold.
MAX_NAME_LENGTH = 256

_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
#: How much of a refused value its error message shows.
_SHOWN = 40


def check_name(what: str, value: object, *, length: bool = True) -> str:
    """``value`` when it is a name or id the rules allow, else raise :class:`InvalidNameError`
    naming ``what`` it is (``"run id"``, ...). ``length=False`` leaves the length unchecked
    (a lookup of an existing run)."""
    if not isinstance(value, str):
        raise InvalidNameError(
            f"{what} must be a string, not {type(value).__name__}", what=what, value=value
        )
    if not value:
        raise InvalidNameError(f"{what} must not be empty", what=what, value=value)
    bad = _REFUSED.search(value)
    if bad is not None:
        raise InvalidNameError(
            f"{what} {_shown(value)} holds {_describe(bad.group())} at position {bad.start()}: "
            f"names and ids may not hold control characters, line breaks or lone surrogates",
            what=what,
            value=value,
        )
    if length and len(value) > MAX_NAME_LENGTH:
        raise InvalidNameError(
            f"{what} {_shown(value)} is {len(value)} characters long; names and ids hold at "
            f"most {MAX_NAME_LENGTH}",
            what=what,
            value=value,
        )
    return value


def check_optional(what: str, value: object, *, length: bool = True) -> None:
    """:func:`check_name` for a value that may be None (not given)."""
    if value is not None:
        check_name(what, value, length=length)


def check_new_run(name: object, run_id: object, idempotency_key: object = None) -> None:
    """The names and ids of a run about to be created, checked (:func:`check_name`)."""
    check_name("workflow name", name)
    check_name("run id", run_id)
    check_optional("idempotency key", idempotency_key)


def _shown(value: str) -> str:
    """``value`` quoted on one line (``repr`` escapes what is not printable), cut short."""
    return repr(value) if len(value) <= _SHOWN else repr(value[:_SHOWN]) + "..."


def _describe(char: str) -> str:
    return f"U+{ord(char):04X}"
