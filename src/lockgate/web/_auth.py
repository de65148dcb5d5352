"""Bearer tokens and their scopes.

A token table is read from a file (``--tokens FILE``) or the ``LOCKGATE_HTTP_TOKENS``
environment variable, one entry a line (``;`` also separates entries in the variable)::

    # scopes                 token                                        label (optional)
    read                     sha256:9f86d081884c7d659a2feaa0c55ad015...   dashboards
    read,write,admin         s3cr3t-plain-token                           ops

A token given as ``sha256:<64 hex>`` is the SHA-256 of the token; anything else is the token
itself, hashed as it is loaded. Only hashes are kept in memory, and a presented token is
compared with every entry's hash in constant time (``hmac.compare_digest``)."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lockgate._errors import ConfigurationError

TOKENS_ENV = "LOCKGATE_HTTP_TOKENS"
SCOPES = ("read", "write", "admin")
_HASHED = re.compile(r"sha256:([0-9a-fA-F]{64})")


@dataclass(frozen=True)
class TokenEntry:
    digest: bytes
    scopes: frozenset[str]
    label: str


def hash_token(token: str) -> str:
    """The ``sha256:<hex>`` form of ``token``, as a tokens file may hold it."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class TokenTable:
    """The tokens the API accepts; empty means no authentication."""

    def __init__(self, entries: Iterable[TokenEntry] = ()) -> None:
        self.entries = tuple(entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    @classmethod
    def parse(cls, text: str, *, source: str = "tokens") -> TokenTable:
        """Entries from ``text``; a malformed line raises :class:`ConfigurationError`."""
        entries = []
        for number, raw in enumerate(re.split(r"[\n;]", text), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) not in (2, 3):
                raise ConfigurationError(
                    f"{source}: entry {number} is not 'SCOPE[,SCOPE] TOKEN [LABEL]'"
                )
            scopes = frozenset(s for s in parts[0].split(",") if s)
            unknown = sorted(scopes - set(SCOPES))
            if not scopes or unknown:
                raise ConfigurationError(
                    f"{source}: entry {number} has unknown scope(s) {unknown}; "
                    f"scopes are {', '.join(SCOPES)}"
                )
            hashed = _HASHED.fullmatch(parts[1])
            digest = (
                bytes.fromhex(hashed.group(1))
                if hashed
                else hashlib.sha256(parts[1].encode()).digest()
            )
            label = parts[2] if len(parts) == 3 else f"token{number}"
            entries.append(TokenEntry(digest, scopes, label))
        return cls(entries)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> TokenTable:
        """The table of the file ``path``, else of ``$LOCKGATE_HTTP_TOKENS``, else empty."""
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigurationError(f"cannot read tokens file {path}: {exc}") from exc
            table = cls.parse(text, source=str(path))
            if not table:
                raise ConfigurationError(f"tokens file {path} holds no token")
            return table
        return cls.parse(os.environ.get(TOKENS_ENV, ""), source=TOKENS_ENV)

    def authenticate(self, authorization: str | None) -> TokenEntry | None:
        """The entry of the ``Authorization: Bearer`` token, None when missing or unknown.
        Every entry is compared, so the time taken does not say which one matched."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = hashlib.sha256(token.strip().encode()).digest()
        found = None
        for entry in self.entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        return found
