"""Closing a Scheduler, Worker or Client leaves no task of theirs behind.

Every background coroutine of a server is owned by something its ``close()``
cancels and awaits.  A task that is dropped instead (its owner forgets it
while it waits) is collected by the garbage collector while still pending,
and asyncio reports "Task was destroyed but it is pending!".
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from distributed import Client, Scheduler, Worker
from distributed.batched import BatchedSend
from distributed.comm import Comm, CommClosedError, connect, listen
from distributed.core import Route, Server
from distributed.protocol import messages as m
from distributed.utils_test import async_poll_for, inc, run_async


def _pending_named(name: str) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()]


def _leftovers(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t not in before and t is not current and not t.done()]


async def _checked(body: Any) -> None:
    """Run ``body()``; then no task it started may be pending or destroyed while pending."""
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: reports.append(ctx))
    before = asyncio.all_tasks()
    try:
        await body()
        # What close() dropped is collectable now; collecting it reports it.
        gc.collect()
        # Reports from tasks destroyed while pending, and whatever is still pending.
        destroyed = [r for r in reports if "destroyed but it is pending" in str(r.get("message"))]
        assert not destroyed, [str(r.get("task")) for r in destroyed]
        left = _leftovers(before)
        assert not left, left
    finally:
        loop.set_exception_handler(None)


def test_scheduler_worker_client_close_leaves_no_task() -> None:
    async def body() -> None:
        for _ in range(3):
            async with Scheduler(dashboard_address=None) as s:
                async with Worker(s.address), Client(s.address, asynchronous=True) as c:
                    assert await c.submit(inc, 1) == 2
            gc.collect()

    run_async(lambda: _checked(body))


def test_scheduler_closing_first_leaves_no_task() -> None:
    async def body() -> None:
        s = await Scheduler(dashboard_address=None)
        w = await Worker(s.address)
        async with Client(s.address, asynchronous=True) as c:
            assert await c.submit(inc, 2) == 3
            await s.close()
            await async_poll_for(lambda: w.status.name == "closed", timeout=10)
        await w.close()

    run_async(lambda: _checked(body))


def test_worker_leaving_closes_the_schedulers_stream_to_it() -> None:
    async def body() -> None:
        async with Scheduler(dashboard_address=None) as s:
            w = await Worker(s.address)
            await async_poll_for(lambda: w.address in s.stream_comms, timeout=10)
            bs = s.stream_comms[w.address]
            await w.close()
            await async_poll_for(lambda: w.address not in s.workers, timeout=10)
            # The stream's writer ends with the worker, not with the scheduler.
            await async_poll_for(lambda: bs.closed(), timeout=10)
            await async_poll_for(lambda: not _pending_named(f"batched-send-scheduler->{w.address}"), timeout=10)

    run_async(lambda: _checked(body))


def test_server_close_awaits_comm_handlers() -> None:
    """A handler that holds its comm (a stream) is cancelled and awaited by close()."""
    started = asyncio.Event()
    ended: list[str] = []

    async def hold(comm: Comm, msg: m.Empty) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("held")

    async def body() -> None:
        server = Server(handlers={"hold": Route(m.Empty, hold, takes_comm=True)})
        await server.start()
        await server.listen("tcp://127.0.0.1:0")
        comm = await connect(server.address, timeout=5)
        try:
            await comm.write({"op": "hold"})
            await asyncio.wait_for(started.wait(), 5)
            await server.close()
            # Awaited by close(), not merely cancelled.
            assert ended == ["held"]
        finally:
            comm.abort()

    run_async(lambda: _checked(body))


@pytest.mark.parametrize("scheme", ["tcp", "inproc"])
def test_batched_send_close_timeout_ends_its_task(scheme: str) -> None:
    """close(timeout) that gives up on flushing still ends the writer task."""

    async def body() -> None:
        accepted: asyncio.Queue[Comm] = asyncio.Queue()

        async def handler(comm: Comm) -> None:
            await accepted.put(comm)

        listener = listen("tcp://127.0.0.1:0" if scheme == "tcp" else "inproc://", handler)
        await listener.start()
        comm = await connect(listener.contact_address, timeout=5)
        other = await asyncio.wait_for(accepted.get(), 5)
        try:
            bs = BatchedSend(interval=0.01, name="test")
            bs.start(comm)
            blocked = asyncio.Event()
            real_write = comm.write

            async def stuck_write(msg: Any) -> int:
                blocked.set()
                await asyncio.Event().wait()
                return await real_write(msg)

            # A peer that never reads: no write is taken at once, and none ends.
            comm.write = stuck_write  # type: ignore[method-assign]
            comm.write_nowait = stuck_write  # type: ignore[method-assign]
            bs.send("x")
            await asyncio.wait_for(blocked.wait(), 5)
            await bs.close(timeout=0.05)
            assert not _pending_named("batched-send-test")
            with pytest.raises(CommClosedError):
                bs.send("y")
        finally:
            listener.stop()
            comm.abort()
            other.abort()

    run_async(lambda: _checked(body))


def test_scheduler_close_ends_open_dashboard_connections() -> None:
    """A keep-alive HTTP connection to the dashboard does not outlive the scheduler."""

    async def body() -> None:
        s = await Scheduler(dashboard_address="127.0.0.1:0")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", s.http_server.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n")
            await writer.drain()
            assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
        finally:
            await s.close()
        writer.close()
        await writer.wait_closed()

    run_async(lambda: _checked(body))
