"""Leases whose worker saw its own event loop blocked while holding them (the loop watchdog
notes them, from its thread). An attempt that comes back from such a block with its lease
lapsed does not put its run back as ``store_unavailable`` (the store was never away): it
leaves the lapse to the orphan scan, which counts it as a loop-blocked lapse (see
``stores/_poison.py``). One lease is kept per blocked episode of an attempt (leases are
never reused), which is what a worker whose loop blocks often has to remember."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_leases: set[str] = set()


def note(lease: str) -> None:
    with _lock:
        _leases.add(lease)


def was_blocked(lease: str | None) -> bool:
    with _lock:
        return lease in _leases
