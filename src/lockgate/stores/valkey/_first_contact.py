"""Reaching a Valkey server for the first time: what its URL may say, how it is shown (its
password as ``***``), and what a failed first contact means.

Before a client is made, :func:`check_server_url` refuses a URL whose database is not one
number or whose query has names the connection does not take, and for a TLS URL
:func:`refuse_plain_server` asks whether the port answers in plain text (a TLS handshake with
a plain server would otherwise wait out the whole socket timeout and end as a bare
"Timeout"). When the first contact fails, :func:`first_contact_error` turns the client's
exception into the lockgate error that names the cause: credentials refused, not a Valkey
server, TLS refused, no such database; None leaves the failure to the caller.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from lockgate._errors import (
    ConfigurationError,
    LockgateError,
    StoreAuthenticationError,
    StoreProtocolError,
)

try:
    from redis.exceptions import AuthenticationError, InvalidResponse, ResponseError
except ImportError:  # pragma: no cover - the extra is missing; the store refuses to start
    AuthenticationError = InvalidResponse = ResponseError = ()  # type: ignore[assignment,misc]

#: The query names of a server URL: the connection's own. Every other name is a store option,
#: given to ``ValkeyStore`` as a keyword (``open_store`` does that for a URL's query).
SERVER_QUERY = ("db", "password", "username")
DEFAULT_PORT = 6379
#: How long the plain-text probe of a TLS port waits for its answer.
PROBE_TIMEOUT = 1.0
_DATABASES = "a server has databases 0 to 15 unless its `databases` setting allows more"


def check_server_url(url: str, shown: str) -> None:
    """Refuse ``url`` (shown as ``shown``, its password hidden) when its database is not one
    whole number, given once, or its query has a name other than :data:`SERVER_QUERY`."""
    parts = urlsplit(url)
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise ConfigurationError(f"Valkey URL {shown!r} has a malformed query: {exc}") from exc
    for key, _ in query:
        if key not in SERVER_QUERY:
            raise ConfigurationError(
                f"Valkey URL {shown!r} has no query option {key!r}: a server URL takes "
                f"{', '.join(SERVER_QUERY)}; give store options (namespace, lock_ttl, ...) as "
                f"keyword arguments, or pass the URL to open_store, which reads them from it"
            )
    databases = [value for key, value in query if key == "db"]
    if parts.scheme != "unix" and parts.path.strip("/"):
        databases.insert(0, parts.path.strip("/"))
    if len(databases) > 1:
        raise ConfigurationError(
            f"Valkey URL {shown!r} names the database twice ({', '.join(databases)}); give it "
            f"once, as the path (valkey://HOST:PORT/DB) or, for unix://, as ?db=DB"
        )
    for database in databases:
        if not database.isascii() or not database.isdigit():
            raise ConfigurationError(
                f"Valkey URL {shown!r}: database {database!r} is not a number; "
                f"{_DATABASES} (valkey://HOST:PORT/0)"
            )


def refuse_plain_server(url: str, shown: str, connect_timeout: float) -> None:
    """For a TLS URL, raise :class:`StoreProtocolError` when the server answers a plain-text
    ``PING``: it does not speak TLS. A TLS server answers that with an alert or by closing, and
    one that cannot be reached is left for the client to report."""
    parts = urlsplit(url)
    if parts.scheme != "rediss" or not parts.hostname:
        return
    port = parts.port or DEFAULT_PORT
    try:
        with socket.create_connection((parts.hostname, port), timeout=connect_timeout) as probe:
            probe.settimeout(PROBE_TIMEOUT)
            probe.sendall(b"PING\r\n")
            answer = probe.recv(16)
    except OSError:
        return
    if answer[:1] in (b"+", b"-"):  # a RESP reply: +PONG, or -NOAUTH when it has a password
        raise StoreProtocolError(
            f"Valkey at {shown} does not speak TLS: {parts.hostname}:{port} answered in plain "
            f"text. Use valkey:// (or redis://) for this server, or turn TLS on in it"
        )


def first_contact_error(
    exc: BaseException, url: str, shown: str, scrub: Callable[[object], str]
) -> LockgateError | None:
    """The lockgate error a failed first contact with the server at ``url`` stands for, or
    None when ``exc`` is none of the causes named here. ``scrub`` hides the password."""
    parts = urlsplit(url)
    where = f"{parts.hostname}:{parts.port or DEFAULT_PORT}" if parts.hostname else shown
    if isinstance(exc, AuthenticationError):
        return _credentials_refused(parts.username, parts.password, url, shown, scrub(exc))
    if isinstance(exc, InvalidResponse):
        return StoreProtocolError(
            f"what answers at {where} is not a Valkey server (its reply is not the Valkey "
            f"protocol: {scrub(exc)}); check the host and port of {shown}"
        )
    if isinstance(exc, ResponseError) and "db index" in str(exc).lower():
        database = _database(url)
        return ConfigurationError(
            f"Valkey at {shown} has no database {database} (the server says: {scrub(exc)}); "
            f"{_DATABASES}"
        )
    tls = _ssl_error(exc)
    if tls is not None:
        return StoreProtocolError(
            f"the TLS handshake with {where} failed ({scrub(tls)}); for a server without TLS "
            f"use valkey:// (or redis://)"
        )
    return None


def redacted_url(url: str) -> str:
    """``url`` with its password (``user:password@`` or ``?password=``) shown as ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, hashmark, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    slash = rest.find("/")
    netloc, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if colon else netloc
    if query:
        query = "&".join(
            f"{key}=***" if unquote(key).lower() == "password" and eq else f"{key}{eq}{value}"
            for key, eq, value in (part.partition("=") for part in query.split("&"))
        )
    return f"{scheme}://{netloc}{path}{question}{query}{hashmark}{fragment}"


def secrets_of(url: str) -> list[str]:
    """The password(s) in ``url``, as written and decoded, longest first."""
    found: set[str] = set()
    try:
        parts = urlsplit(url)
        if parts.password:
            found.update({parts.password, unquote(parts.password)})
        for key, value in parse_qsl(parts.query, keep_blank_values=False):
            if key.lower() == "password" and value:
                found.update({value, quote(value, safe="")})
    except ValueError:
        pass
    return sorted(found, key=len, reverse=True)


def _credentials_refused(
    username: str | None, password: str | None, url: str, shown: str, said: str
) -> StoreAuthenticationError:
    if password is None and not any(k == "password" for k, _ in _query(url)):
        return StoreAuthenticationError(
            f"Valkey at {shown} needs a password and the URL gives none (the server says: "
            f"{said}); put it in the URL: valkey://:PASSWORD@HOST:PORT/DB, or "
            f"valkey://USER:PASSWORD@HOST:PORT/DB for an ACL user"
        )
    what, them = ("the user and password", "them") if username else ("the password", "it")
    return StoreAuthenticationError(
        f"Valkey at {shown} refused {what} in the URL (the server says: {said}); check {them}"
    )


def _query(url: str) -> list[tuple[str, str]]:
    try:
        return parse_qsl(urlsplit(url).query, keep_blank_values=True)
    except ValueError:
        return []


def _database(url: str) -> str:
    given = [value for key, value in _query(url) if key == "db"]
    path = urlsplit(url).path.strip("/")
    return given[0] if given else (path or "0")


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS failure behind ``exc`` (the client wraps it in its own connection error), if
    that is what ``exc`` is; a handshake that timed out is not one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return current
        current = current.__cause__ or current.__context__
    return None
