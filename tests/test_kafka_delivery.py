"""The delivery reports of Kafka appends, without a broker: reports served on another thread
settle every append awaiting them on the loop, and an append whose reports never come fails
at its deadline instead of waiting for ever."""

from __future__ import annotations

import asyncio
import threading

import pytest

from lockgate import StoreUnavailable
from lockgate.stores.kafka import _delivery
from lockgate.stores.kafka._delivery import Delivery, inbox_of


class _Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def _gone(delivery: Delivery) -> BaseException:
    return StoreUnavailable(f"{delivery.left} record(s) not acknowledged")


async def test_reports_served_on_another_thread_settle_every_append_with_its_offsets() -> None:
    inbox = inbox_of(asyncio.get_running_loop())
    deliveries = [inbox.delivery(3, 30.0, _gone) for _ in range(200)]

    def serve() -> None:  # as the producer's reports thread does, all at once
        for n, delivery in enumerate(deliveries):
            for k in range(3):
                delivery.report(None, _Record(n * 3 + k))

    thread = threading.Thread(target=serve)
    thread.start()
    await asyncio.wait_for(asyncio.gather(*(d.settled for d in deliveries if d.settled)), 5)
    thread.join()
    assert [sorted(d.offsets) for d in deliveries[:2]] == [[0, 1, 2], [3, 4, 5]]
    assert all(d.left == 0 and not d.errors for d in deliveries)


async def test_a_failed_record_is_reported_with_the_append() -> None:
    inbox = inbox_of(asyncio.get_running_loop())
    delivery = inbox.delivery(2, 30.0, _gone)
    delivery.report(None, _Record(7))
    delivery.report("broker said no", None)
    assert delivery.settled is not None
    await asyncio.wait_for(delivery.settled, 5)
    assert delivery.errors == ["broker said no"]
    assert delivery.offsets == [7]


async def test_an_append_whose_reports_never_come_fails_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_delivery, "SWEEP_EVERY", 0.01)
    loop = asyncio.get_running_loop()
    inbox = _delivery.Inbox(loop)
    late = inbox.delivery(1, 0.05, _gone)
    kept = inbox.delivery(1, 30.0, _gone)
    assert late.settled is not None
    assert kept.settled is not None
    with pytest.raises(StoreUnavailable, match="1 record"):
        await asyncio.wait_for(late.settled, 5)
    assert not kept.settled.done()  # its deadline is far: still waiting for its report
    kept.report(None, _Record(1))
    await asyncio.wait_for(kept.settled, 5)


def test_a_delivery_waited_on_from_a_thread_is_done_when_its_last_record_is_reported() -> None:
    delivery = Delivery(2)
    delivery.report(None, _Record(1))
    assert not delivery.wait(0.01)
    threading.Thread(target=delivery.report, args=(None, _Record(2))).start()
    assert delivery.wait(5)
    assert sorted(delivery.offsets) == [1, 2]
