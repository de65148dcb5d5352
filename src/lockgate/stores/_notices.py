"""Notices, within one process, that a store's deadlines moved: a run parked on a timer, an
event went into a trigger buffer.

A worker's timer and trigger loops sleep until the soonest deadline the store reports. A
deadline this process sets while they sleep may come sooner than the one they sleep towards;
the code that sets it posts a notice, and the loops listening on that store ask again at once.
Deadlines other processes set are seen when a loop next asks the store (every
``WorkerOptions.timer_poll_interval_s`` at the latest).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

#: A run parked on a wait with a deadline (a sleep, a signal wait's timeout, a delayed start).
WAITS = "waits"
#: An event was buffered for a Collect or Debounce trigger.
TRIGGERS = "triggers"

Listener = Callable[[], None]

_lock = threading.Lock()
_listeners: weakref.WeakKeyDictionary[object, dict[str, set[Listener]]] = (
    weakref.WeakKeyDictionary()
)


def listen(store: object, topic: str, listener: Listener) -> Callable[[], None]:
    """Call ``listener`` (from the posting thread) on every notice of ``topic`` about
    ``store``, the store object itself; returns the function that stops it."""
    with _lock:
        _listeners.setdefault(store, {}).setdefault(topic, set()).add(listener)

    def stop() -> None:
        with _lock:
            _listeners.get(store, {}).get(topic, set()).discard(listener)

    return stop


def post(store: object, topic: str) -> None:
    """Tell whoever listens on ``store`` that its ``topic`` deadlines moved."""
    with _lock:
        listeners = list(_listeners.get(store, {}).get(topic, ()))
    for listener in listeners:
        listener()
