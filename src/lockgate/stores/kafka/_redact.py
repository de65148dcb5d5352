"""A journal URL as messages quote it: its ``journal_key`` shown as ``***``.

The key signs the journal's records (see docs/kafka.md); an error line, a log line or a
traceback that quotes the URL must not carry it to wherever logs go. Kept apart from the rest
of the package so the CLI and ``open_store`` can use it without importing Kafka's client.
"""

from __future__ import annotations

from urllib.parse import unquote

#: The URL options whose values are secrets.
SECRET_OPTIONS = frozenset({"journal_key"})


def redacted_journal_url(url: object) -> str:
    """``url`` with the value of each ``journal_key`` option (however it is spelled in
    percent-encoding or case) shown as ``***``; anything that is not text comes back as its
    ``str``. The rest of the URL stays as it was written, so the message still says which
    option or host is wrong."""
    text = url if isinstance(url, str) else str(url)
    rest, hashmark, fragment = text.partition("#")
    base, question, query = rest.partition("?")
    if not question:
        return text
    parts = []
    for part in query.split("&"):
        key, eq, _value = part.partition("=")
        secret = eq and unquote(key).strip().lower() in SECRET_OPTIONS
        parts.append(f"{key}=***" if secret else part)
    return f"{base}?{'&'.join(parts)}{hashmark}{fragment}"
