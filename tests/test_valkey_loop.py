"""The event loop's Valkey client, on a real server: commands asked for at once go as
pipelines, each asker gets its own reply or error, one client per event loop, and store
methods a subclass overrides keep their override."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockgate import ValkeyStore
from lockgate.stores._calls import call_store
from lockgate.stores.valkey._loop import LoopClient
from valkey_server import shared_url


class CountingLoopClient(LoopClient):
    """Counts the pipelines it sends and the commands in each."""

    def __init__(self, client: Any) -> None:
        super().__init__(client, pipelined=True)
        self.batches: list[int] = []

    async def _send_batch(self, batch: Any) -> None:
        self.batches.append(len(batch))
        await super()._send_batch(batch)


async def test_commands_asked_at_once_go_as_one_pipeline_each_with_its_own_reply() -> None:
    client = CountingLoopClient(Redis.from_url(shared_url()))
    key = f"loop:{uuid.uuid4().hex}"
    try:
        await client.send("SET", f"{key}:text", "not a number")
        replies = await asyncio.gather(
            *(client.send("INCRBY", f"{key}:{n}", n) for n in range(50)),
            client.send("INCR", f"{key}:text"),  # refused: only its asker sees the error
            return_exceptions=True,
        )
        assert replies[:50] == list(range(50))
        assert isinstance(replies[50], ResponseError)
        # The SET alone, then everything asked at once, in pipelines of at most
        # pipeline_size (8) commands, sent side by side.
        assert client.batches == [1, 8, 8, 8, 8, 8, 8, 3]
        # A group of commands (one request) gets its replies in order, in the same pipeline
        # as whatever else was asked meanwhile.
        group, single = await asyncio.gather(
            client.send_all((("GET", f"{key}:7"), ("GET", f"{key}:8"))),
            client.send("GET", f"{key}:9"),
        )
        assert group == [b"7", b"8"]
        assert single == b"9"
        assert client.batches[-1] == 3
        with pytest.raises(ResponseError):
            await client.send_all((("GET", f"{key}:1"), ("INCR", f"{key}:text")))
    finally:
        await client.aclose()


async def test_a_pipeline_that_cannot_be_sent_fails_every_asker() -> None:
    # Nothing listens on port 1: the whole pipeline fails, and each asker gets the error
    # (each then retries its own command, as it would have alone).
    client = LoopClient(Redis(port=1, socket_connect_timeout=0.5, retry=None), pipelined=True)
    try:
        replies = await asyncio.gather(
            *(client.send("PING") for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(reply, RedisConnectionError) for reply in replies), replies
    finally:
        await client.aclose()


async def test_a_reply_that_arrived_is_its_askers_even_when_a_later_one_times_out() -> None:
    # Replies are read one by one: the INCR's comes back and is answered; the BLPOP behind
    # it blocks past the socket timeout, and only its asker gets the error (the INCR ran
    # once and is not sent again).
    key = f"loop:{uuid.uuid4().hex}"
    client = LoopClient(Redis.from_url(shared_url(), socket_timeout=0.3), pipelined=True)
    try:
        counted, blocked = await asyncio.gather(
            client.send("INCR", f"{key}:n"),
            client.send("BLPOP", f"{key}:empty", 2),
            return_exceptions=True,
        )
        assert counted == 1
        assert isinstance(blocked, RedisTimeoutError)
        assert await client.send("GET", f"{key}:n") == b"1"
    finally:
        await client.aclose()


def test_each_event_loop_gets_its_client_and_gives_it_up_when_it_shuts_down() -> None:
    store = ValkeyStore(shared_url(), namespace=f"l{uuid.uuid4().hex[:10]}")
    try:
        store.submit_run("wf", "r1", {})
        for _ in range(3):
            info = asyncio.run(call_store(store, store.get_run, "wf", "r1"))
            assert info is not None
            assert store._loop_clients._clients == {}  # closed with its loop, not held
    finally:
        store.close()


def test_an_override_of_a_native_method_is_called_not_bypassed() -> None:
    class Counting(ValkeyStore):
        beats = 0

        def heartbeat(self, name: str, run_id: str, worker_id: str) -> Any:
            Counting.beats += 1
            return super().heartbeat(name, run_id, worker_id)

    store = Counting(shared_url(), namespace=f"o{uuid.uuid4().hex[:10]}")
    try:
        assert store.coroutine_for(store.heartbeat) is None  # the override runs, on a thread
        assert store.coroutine_for(store.append_events) is not None
        store.submit_run("wf", "r1", {})
        store.claim_run("wf", "r1", "lease")
        asyncio.run(call_store(store, store.heartbeat, "wf", "r1", "lease"))
        assert Counting.beats == 1
    finally:
        store.close()
