"""Hostile input and peers that misbehave: silent connections, garbage bytes,
malformed messages.  Everything stays on loopback and is bounded in count and time."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import psutil
import pytest

from distributed import Client, Future
from distributed.comm import CommClosedError, connect
from distributed.core import send_recv
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc
from distributed.worker import Worker


def _open_silent(address: str, n: int) -> list[socket.socket]:
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)))
        sock.setblocking(False)
        socks.append(sock)
    return socks


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset: aborted by the peer
        return True


@gen_test(config={"distributed.comm.timeouts.tcp": "1s"})
async def test_silent_connections_cost_little_and_are_closed() -> None:
    async with Scheduler(port=0, host="127.0.0.1", dashboard=False) as s:
        # A connection that spoke once and then idles is not one of the silent ones.
        talker = await connect(s.address)
        assert (await send_recv(talker, {"op": "identity"}))["address"] == s.address
        proc = psutil.Process()
        before = proc.memory_info().rss
        socks = _open_silent(s.address, 300)
        try:
            # Every connection is accepted (the scheduler sees it) ...
            await async_poll_for(lambda: len(s._comms) >= 300, timeout=10)
            grown = proc.memory_info().rss - before
            # ... at a few KiB each, not a 256 KiB buffer each (75 MB).
            assert grown < 20 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB for 300 silent connections"
            # Silent past distributed.comm.timeouts.tcp: closed by the scheduler.
            await async_poll_for(lambda: all(_closed_by_peer(x) for x in socks), timeout=10)
            await async_poll_for(lambda: len(s._comms) == 1, timeout=5)
            assert (await send_recv(talker, {"op": "identity"}))["address"] == s.address
        finally:
            talker.abort()
            for sock in socks:
                sock.close()


_GOOD_REGISTRATION = {
    "op": "register-worker",
    "address": "tcp://127.0.0.1:1",
    "nthreads": 1,
    "name": "w",
    "memory_limit": 0,
}


@pytest.mark.parametrize(
    "bad",
    [
        {"name": ["un", {"hash": "able"}]},
        {"name": {"a": 1}},
        {"nthreads": -5},
        {"nthreads": 0},
        {"memory_limit": -1},
        {"address": "garbage"},
        {"address": "tcp://127.0.0.1:notaport"},
        {"address": "tcp://127.0.0.1:0"},
        {"address": "nosuch://x"},
    ],
)
@gen_test()
async def test_bad_worker_registration_is_answered_and_closed(bad: dict[str, Any]) -> None:
    async with Scheduler(port=0, host="127.0.0.1", dashboard=False, validate=True) as s:
        comm = await connect(s.address)
        try:
            await comm.write({**_GOOD_REGISTRATION, **bad})
            reply = await asyncio.wait_for(comm.read(), 5)
            assert reply["status"] == "error"
            field = next(iter(bad))
            assert (
                field in reply["message"]
                or field.replace("_", " ") in reply["message"]
                or "address" in reply["message"]
            )
            # Then closed by the scheduler.
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(comm.read(), 5)
        finally:
            comm.abort()
        assert not s.workers and not s.aliases
        s.validate_state()


def _spec(*deps: Any) -> dict[str, Any]:
    return {"run_spec": None, "dependencies": list(deps), "order": 0}


@pytest.mark.parametrize(
    "tasks, problem",
    [
        ({"a": _spec("b"), "b": _spec("c"), "c": _spec("a"), "out": _spec("a")}, "cycle between the keys"),
        ({float("nan"): _spec(), "out": _spec()}, "NaN"),
        ({("x", float("nan")): _spec(), "out": _spec()}, "NaN"),
    ],
)
@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_graph_that_cannot_run_is_refused_and_leaves_nothing(
    s: Scheduler, a: Worker, tasks: dict[Any, Any], problem: str
) -> None:
    async with Client(s.address, asynchronous=True) as c:
        assert c.scheduler_comm is not None
        out = Future("out", c)
        c.scheduler_comm.send({"op": "update-graph", "client": c.id, "tasks": tasks, "keys": ["out"]})
        with pytest.raises(ValueError, match=problem):
            await asyncio.wait_for(out, 5)
        del out
        # The cluster keeps working for this client.
        assert await c.submit(inc, 1) == 2
    await async_poll_for(lambda: not s.tasks, timeout=5)
    s.validate_state()
