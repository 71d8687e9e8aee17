"""BatchedSend over TCP and in process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from distributed.batched import BatchedSend
from distributed.comm import Comm, CommClosedError, connect, listen
from distributed.utils_test import async_poll_for, run_async

SCHEMES = ["tcp", "inproc"]


@asynccontextmanager
async def comm_pair(scheme: str) -> AsyncIterator[tuple[Comm, Comm]]:
    accepted: asyncio.Queue[Comm] = asyncio.Queue()

    async def handler(comm: Comm) -> None:
        await accepted.put(comm)

    listener = listen("tcp://127.0.0.1:0" if scheme == "tcp" else "inproc://", handler)
    await listener.start()
    client = await connect(listener.contact_address, timeout=5)
    server: Comm | None = None
    try:
        server = await asyncio.wait_for(accepted.get(), 5)
        yield client, server
    finally:
        listener.stop()
        client.abort()
        if server is not None:
            server.abort()


class Receiver:
    """Reads batches from a comm until it closes."""

    def __init__(self, comm: Comm) -> None:
        self.comm = comm
        self.batches: list[Any] = []
        self.messages: list[Any] = []
        self.closed = False
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                batch = await self.comm.read()
                self.batches.append(batch)
                self.messages.extend(batch)
        except CommClosedError:
            self.closed = True


@pytest.mark.parametrize("scheme", SCHEMES)
def test_delivers_all_messages_in_order_in_lists(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=0.005, name="test")
            bs.start(client)
            n = 500
            for i in range(n):
                bs.send({"op": "x", "i": i, "key": ("k", i)})
                if i % 7 == 0:
                    await asyncio.sleep(0)
            await async_poll_for(lambda: len(recv.messages) >= n)
            assert [m["i"] for m in recv.messages] == list(range(n))
            assert all(tuple(m["key"]) == ("k", m["i"]) for m in recv.messages)
            assert all(isinstance(b, (list, tuple)) and b for b in recv.batches)
            assert bs.message_count == n
            await async_poll_for(lambda: bs.batch_count == len(recv.batches))
            if scheme == "tcp":
                assert bs.byte_count > 0
            await bs.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_coalesces_tight_loop(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=0.01)
            bs.start(client)
            n = 2000
            for i in range(n):
                bs.send(i)
                if i % 10 == 0:
                    await asyncio.sleep(0)  # let the writer run as often as it wants
            await async_poll_for(lambda: len(recv.messages) >= n)
            assert recv.messages == list(range(n))
            assert len(recv.batches) <= n // 20, len(recv.batches)
            await bs.close()

    run_async(main)


async def second_message_held_back(client: Comm, recv: Receiver) -> BatchedSend:
    """A stream with a long interval that sent "first" at once and holds "second" back."""
    # A long interval: only the very first message may go out before it.
    bs = BatchedSend(interval=10)
    bs.start(client)
    bs.send("first")
    await async_poll_for(lambda: recv.messages == ["first"], timeout=5)
    bs.send("second")
    for _ in range(20):
        await asyncio.sleep(0)
    assert recv.messages == ["first"]
    return bs


@pytest.mark.parametrize("scheme", SCHEMES)
def test_first_message_after_quiet_spell_goes_out_at_once(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = await second_message_held_back(client, recv)
            # close() flushes it at once.
            assert bs.batch_count == 1
            await asyncio.wait_for(bs.close(), 5)
            await async_poll_for(lambda: recv.closed)
            assert recv.messages == ["first", "second"]

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_send_now_does_not_wait_out_the_interval(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = await second_message_held_back(client, recv)
            # "third" goes at once and takes "second" along.
            bs.send_now("third")
            await async_poll_for(lambda: recv.messages == ["first", "second", "third"], timeout=5)
            assert bs.batch_count == 2
            # The interval holds again for plain sends after it.
            bs.send("fourth")
            for _ in range(20):
                await asyncio.sleep(0)
            assert recv.messages == ["first", "second", "third"]
            await asyncio.wait_for(bs.close(), 5)

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_close_flushes(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=0.05)
            bs.start(client)
            for i in range(300):
                bs.send(i)
            await bs.close()
            assert bs.closed()
            assert client.closed()
            await asyncio.wait_for(recv.task, 5)
            assert recv.closed
            assert recv.messages == list(range(300))

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_send_after_close_raises(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            bs = BatchedSend(interval=0.001)
            bs.start(client)
            bs.send(1)
            await bs.close()
            with pytest.raises(CommClosedError):
                bs.send(2)
            assert (await asyncio.wait_for(server.read(), 5)) in ([1], (1,))
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(server.read(), 5)

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_send_after_peer_closed_raises(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            bs = BatchedSend(interval=0.001)
            bs.start(client)
            await server.close()
            # Reading tells the client end that the peer is gone.
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(client.read(), 5)
            await async_poll_for(bs.closed)
            with pytest.raises(CommClosedError):
                bs.send("late")
            bs.abort()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_messages_sent_before_start_are_delivered(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=0.001)
            bs.send("a", "b")
            bs.send("c")
            bs.start(client)
            await async_poll_for(lambda: len(recv.messages) >= 3)
            assert recv.messages == ["a", "b", "c"]
            await bs.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_messages_held_or_lazy_before_start_go_at_start(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=10)  # nothing may wait out the interval here
            bs.hold("held")
            bs.send_lazy("lazy")
            bs.start(client)
            await async_poll_for(lambda: recv.messages == ["held", "lazy"], timeout=5)
            await bs.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_held_messages_wait_for_a_write_and_lazy_ones_make_one(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=0.05)
            bs.start(client)
            bs.send("first")
            await async_poll_for(lambda: recv.messages == ["first"], timeout=5)
            bs.hold("held")
            for _ in range(20):
                await asyncio.sleep(0)
            assert recv.messages == ["first"]
            bs.send_lazy("lazy")
            await async_poll_for(lambda: recv.messages == ["first", "held", "lazy"], timeout=5)
            assert bs.batch_count == 2
            await bs.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_abort_drops_queue_and_closes(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=10)
            bs.start(client)
            bs.send("first")
            await async_poll_for(lambda: recv.messages == ["first"])
            bs.send("dropped")
            bs.abort()
            assert bs.closed() and client.closed()
            await asyncio.wait_for(recv.task, 5)
            assert recv.messages == ["first"]
            with pytest.raises(CommClosedError):
                bs.send("x")

    run_async(main)


def test_close_without_start() -> None:
    async def main() -> None:
        bs = BatchedSend()
        bs.send(1)
        await bs.close()
        assert bs.closed()
        with pytest.raises(CommClosedError):
            bs.send(2)

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_large_message_ends_its_write(scheme: str) -> None:
    # Graph parts piled up behind a slow comm go out one per write, so that the peer decodes
    # one at a time; the small messages between them keep their places.
    async def main() -> None:
        async with comm_pair(scheme) as (client, server):
            recv = Receiver(server)
            bs = BatchedSend(interval=0.005, name="test")
            bs.send({"op": "s", "i": 0}, {"op": "s", "i": 1})
            bs.send_large({"op": "L", "i": 2})
            bs.send({"op": "s", "i": 3})
            bs.send_large({"op": "L", "i": 4})
            bs.send_large({"op": "L", "i": 5})
            bs.send({"op": "s", "i": 6})
            bs.start(client)
            await async_poll_for(lambda: len(recv.messages) >= 7)
            assert [[m["i"] for m in batch] for batch in recv.batches] == [[0, 1, 2], [3, 4], [5], [6]]
            # Later sends batch as before.
            bs.send({"op": "s", "i": 7}, {"op": "s", "i": 8})
            await async_poll_for(lambda: len(recv.messages) >= 9)
            assert [m["i"] for m in recv.batches[-1]] == [7, 8]
            await bs.close()

    run_async(main)
