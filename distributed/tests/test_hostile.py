"""Hostile input and peers that misbehave: silent connections, garbage bytes,
malformed messages.  Everything stays on loopback and is bounded in count and time."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import sys
import threading
import time
import typing
from functools import partial
from typing import Any

import msgpack
import psutil
import pytest

from distributed import Client, Future, LocalCluster, Nanny
from distributed.client import base as client_base
from distributed.comm import CommClosedError, connect
from distributed.core import Server, Status, send_recv
from distributed.exceptions import FutureCancelledError
from distributed.protocol.serialize import SerializationError
from distributed.scheduler import Scheduler
from distributed.tests.logs import caught_logs
from distributed.utils import open_port
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc, scheduler_process
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


_CAP = 40


def _refused_at_least(socks: list[socket.socket], count: int) -> bool:
    """Whether the peer closed at least ``count`` of ``socks``."""
    return sum(map(_closed_by_peer, socks)) >= count


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    config={"distributed.comm.max-accepted-connections": _CAP},
    timeout=60,
)
async def test_connections_past_the_limit_are_closed_at_once(c: Client, s: Scheduler, a: Worker) -> None:
    # The client's pooled connection to the worker exists before the flood.
    assert await c.submit(inc, 1) == 2
    talker = await connect(s.address)
    assert (await send_recv(talker, {"op": "identity"}))["address"] == s.address
    proc = psutil.Process()
    before = proc.memory_info().rss
    n = 300  # per server, several times the limit
    with caught_logs("distributed.core") as logged:
        floods: dict[Server, list[socket.socket]] = {}
        try:
            for server in (s, a):
                floods[server] = _open_silent(server.address, n)
            for flooded, socks in floods.items():
                # Silent sockets are only closed after distributed.comm.timeouts.tcp (30 s):
                # those closed now were refused at the limit.
                await async_poll_for(partial(_refused_at_least, socks, n - _CAP), timeout=20)
                assert flooded._accepted <= _CAP
                assert sum(not _closed_by_peer(x) for x in socks) <= _CAP
            grown = proc.memory_info().rss - before
            assert grown < 20 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB for {2 * n} connections"
            # One log line per server for the whole flood.
            refusals = [r for r in logged if "max-accepted-connections" in r.getMessage()]
            assert len(refusals) == 2, [r.getMessage() for r in refusals]
            # Connections open before the flood keep working, and so does the cluster.
            assert (await send_recv(talker, {"op": "identity"}))["address"] == s.address
            futures = c.map(inc, range(20))
            assert sum(await c.gather(futures)) == sum(range(1, 21))
        finally:
            for socks in floods.values():
                for sock in socks:
                    sock.close()
        talker.abort()
    # Once the flood is gone, new connections are served again.
    await async_poll_for(lambda: s._accepted < _CAP and a._accepted < _CAP, timeout=10)
    for server in (s, a):
        comm = await connect(server.address)
        try:
            assert (await send_recv(comm, {"op": "identity"}))["type"] == type(server).__name__
        finally:
            comm.abort()
    assert await c.submit(sum, futures) == sum(range(1, 21))


def test_max_accepted_connections_must_be_a_positive_integer() -> None:
    import dask.config

    for bad in (0, -1, "many", 2.5):
        with dask.config.set({"distributed.comm.max-accepted-connections": bad}):
            with pytest.raises(ValueError, match="max-accepted-connections"):
                Server()


async def _read_until_closed(reader: asyncio.StreamReader) -> int:
    """Bytes read until the peer closes (or resets) the connection."""
    total = 0
    try:
        while data := await reader.read(65536):
            total += len(data)
    except ConnectionResetError:
        pass
    return total


def _identity_frames() -> bytes:
    body: bytes = msgpack.packb({"op": "identity"})
    return struct.pack("<QQ", 1, len(body)) + body


@gen_test(config={"distributed.comm.timeouts.tcp": "1s"}, timeout=60)
async def test_silent_and_stalling_peers_are_disconnected_by_every_server() -> None:
    async with (
        Scheduler(port=0, host="127.0.0.1", dashboard=False) as s,
        Worker(s.address, nthreads=1) as w,
        Nanny(s.address, nthreads=1) as n,
        Client(s.address, asynchronous=True) as c,
    ):
        await c.wait_for_workers(2)
        silent = {server: _open_silent(server.address, 20) for server in (s, w, n)}
        try:
            for socks in silent.values():
                await async_poll_for(partial(_refused_at_least, socks, len(socks)), timeout=10)
        finally:
            for socks in silent.values():
                for sock in socks:
                    sock.close()
        for server in (s, w, n):
            host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                # A request answered, then a frame announced and partly sent, then silence:
                # the server closes the connection (the identity reply is read on the way).
                writer.write(_identity_frames() + struct.pack("<QQ", 1, 1000) + b"x" * 100)
                assert await asyncio.wait_for(_read_until_closed(reader), 10) > 0
            finally:
                writer.close()
        for server in (s, w, n):
            comm = await connect(server.address)
            try:
                assert (await send_recv(comm, {"op": "identity"}))["type"] == type(server).__name__
            finally:
                comm.abort()
        assert n.worker_address is not None
        futures = c.map(inc, range(10), workers=[n.worker_address]) + c.map(inc, range(10), workers=[w.address])
        assert await c.gather(futures) == list(range(1, 11)) * 2


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
        # Not announced to the scheduler (client-desires-keys goes through the client's outbox, which
        # could overtake the graph sent straight to the stream here): the graph's keys= asks for it.
        out = Future("out", c, inform=False)
        c.scheduler_comm.send({"op": "update-graph", "client": c.id, "tasks": list(tasks.items()), "keys": ["out"]})
        with pytest.raises(ValueError, match=problem):
            await asyncio.wait_for(out, 5)
        del out
        # The cluster keeps working for this client.
        assert await c.submit(inc, 1) == 2
    await async_poll_for(lambda: not s.tasks, timeout=5)
    s.validate_state()


# -- fuzzing ------------------------------------------------------------------------------------

_ODD_VALUES: list[Any] = [None, 1.5, -3, "x", "", [1, {}], {"a": []}, {"k": {"n": None}}, b"\x00\xff", True, [], ()]


def _u64(*xs: int) -> bytes:
    return b"".join(struct.pack("<Q", x) for x in xs)


def _raw_case(rng: random.Random) -> bytes:
    """Bytes that are not a well-formed message."""
    kind = rng.randrange(6)
    if kind == 0:  # garbage
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:  # a frame announcing a huge length
        return _u64(1, rng.choice([2**40, 2**63, 2**64 - 1])) + b"abc"
    if kind == 2:  # a huge frame count
        return _u64(rng.choice([0, 2**31, 2**64 - 1]), 1)
    if kind == 3:  # truncated: fewer bytes than the header says
        body = rng.randbytes(rng.randrange(0, 50))
        return _u64(1, len(body) + rng.randrange(1, 1000)) + body
    if kind == 4:  # valid framing, garbage msgpack inside
        body = rng.randbytes(rng.randrange(1, 100))
        return _u64(1, len(body)) + body
    # a valid message followed by more bytes than its header says
    valid: bytes = msgpack.packb({"op": "identity"})
    return _u64(1, len(valid)) + valid + rng.randbytes(rng.randrange(1, 40))


def _bad_message(rng: random.Random, routes: dict[str, Any]) -> dict[str, Any]:
    """A request with an unknown op, or a known op whose fields do not match its declaration."""
    if rng.random() < 0.2:
        return {"op": rng.choice(["", "nope", "register_worker", "a" * 300]), "x": rng.choice(_ODD_VALUES)}
    while True:
        op = rng.choice(sorted(routes))
        fields = [f for f in typing.get_type_hints(routes[op].schema) if f != "op"]
        if not fields:
            continue
        msg = {"op": op, **{f: rng.choice(_ODD_VALUES) for f in fields if rng.random() < 0.8}}
        if routes[op].check(msg) is not None:  # refused before any handler runs
            return msg


async def _throw_raw(address: str, data: bytes) -> int:
    """Send ``data`` on a new connection, read until the server closes it; the local port."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    local_port: int = writer.get_extra_info("sockname")[1]
    try:
        writer.write(data)
        writer.write_eof()
        # The server answers or not, and closes: read until it does.
        while await asyncio.wait_for(reader.read(65536), 5):
            pass
    except ConnectionResetError:
        pass
    finally:
        writer.close()
    return local_port


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _snapshot(s: Scheduler, w: Worker) -> Any:
    assert w.state is not None
    return (sorted(map(str, s.tasks)), sorted(s.workers), sorted(s.clients), sorted(map(str, w.state.tasks)))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], timeout=60)
async def test_fuzzed_input_leaves_scheduler_worker_and_nanny_working(c: Client, s: Scheduler, a: Worker) -> None:
    async with Nanny(s.address, nthreads=1) as n:
        await _fuzz(c, s, a, n)


async def _fuzz(c: Client, s: Scheduler, a: Worker, n: Nanny) -> None:
    await async_poll_for(lambda: len(s.workers) == 2, timeout=20)
    rng = random.Random(8)
    before = _snapshot(s, a)
    nanny_before = (n.worker_address, n.pid, n.restarts)
    # (local port, server address) of the connections thrown at the servers: the port alone is not enough,
    # since the kernel may hand a port of ours, once closed, to a connection of the cluster to another server.
    used: set[tuple[int, str]] = set()
    targets = [(s.address, s.handlers), (a.address, a.handlers), (n.address, n.handlers)]
    for i in range(300):
        address, routes = targets[i % 3]
        if rng.random() < 0.5:
            used.add((await _throw_raw(address, _raw_case(rng)), address))
            continue
        comm = await connect(address)
        used.add((_port(comm.local_address), address))
        try:
            msg = _bad_message(rng, routes)
            with pytest.raises(ValueError):
                await asyncio.wait_for(send_recv(comm, msg), 5)
        finally:
            comm.abort()

    def left() -> list[str]:
        # The cluster's own connections come and go (pooled); none of ours may stay.
        return [
            f"{x.peer_address} -> {server.address}"
            for server in (s, a, n)
            for x in server._comms
            if (_port(x.peer_address), server.address) in used
        ]

    deadline = time.monotonic() + 10
    while left() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not left(), f"connections thrown at the servers still open: {left()}"
    assert _snapshot(s, a) == before
    assert (n.worker_address, n.pid, n.restarts) == nanny_before
    # And they still compute, on the nanny's worker too.
    futures = c.map(inc, range(20))
    assert sum(await c.gather(futures)) == sum(range(1, 21))
    assert await c.submit(sum, futures) == sum(range(1, 21))
    assert n.worker_address is not None
    assert await c.submit(inc, 1, workers=[n.worker_address]) == 2


# -- peers that vanish ------------------------------------------------------------------------


@gen_test(timeout=60)
async def test_worker_rejoins_a_scheduler_restarted_at_the_same_address() -> None:
    port = open_port("127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    with scheduler_process(port) as proc:
        async with Worker(address, nthreads=1, death_timeout=30) as w:
            proc.kill()  # no goodbye: the worker just loses its stream
            proc.wait()
            async with Scheduler(host="127.0.0.1", port=port, dashboard=False, validate=True) as s:
                await async_poll_for(lambda: w.address in s.workers, timeout=20)
                async with Client(s.address, asynchronous=True) as c:
                    assert await c.submit(inc, 1) == 2
                    assert await c.gather(c.map(inc, range(10))) == list(range(1, 11))


@gen_test(timeout=60)
async def test_worker_closes_when_no_scheduler_returns_within_death_timeout() -> None:
    port = open_port("127.0.0.1")
    with scheduler_process(port) as proc:
        # Registering under load may take longer than the one second the test is about.
        async with Worker(f"tcp://127.0.0.1:{port}", nthreads=1, death_timeout=30) as w:
            w.death_timeout = 1
            proc.kill()
            proc.wait()
            start = time.monotonic()
            await async_poll_for(lambda: w.status == Status.closed, timeout=15)
            assert time.monotonic() - start > 0.9  # it did try for death_timeout


@gen_test()
async def test_client_to_nothing_fails_within_its_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(OSError, match="Timed out"):
        await Client(f"tcp://127.0.0.1:{open_port('127.0.0.1')}", timeout=1, asynchronous=True)
    assert time.monotonic() - start < 5


@gen_test()
async def test_client_waits_for_its_scheduler_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "scheduler.json")
    looks: list[str | None] = []
    read = client_base._read_scheduler_file

    def counted_read(p: str) -> str | None:
        looks.append(read(p))
        return looks[-1]

    monkeypatch.setattr(client_base, "_read_scheduler_file", counted_read)

    async def make_client() -> Client:
        return await Client(scheduler_file=path, timeout=20, asynchronous=True)

    pending = asyncio.ensure_future(make_client())
    # The client is waiting: it looked for the file when made, and again while it waits, and found none.
    await async_poll_for(lambda: len(looks) >= 2 or pending.done(), timeout=10)
    assert not pending.done()
    assert looks[:2] == [None, None]
    async with Scheduler(host="127.0.0.1", port=0, dashboard=False, scheduler_file=path) as s:
        async with Worker(s.address, nthreads=1):
            c = await asyncio.wait_for(pending, 20)
            try:
                assert c.scheduler_address == s.address
                assert await c.submit(inc, 1) == 2
            finally:
                await c.close(asynchronous=True)


@gen_test()
async def test_client_gives_up_on_a_scheduler_file_after_its_timeout(tmp_path: Any) -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not appear"):
        await Client(scheduler_file=str(tmp_path / "never.json"), timeout=0.5, asynchronous=True)
    assert time.monotonic() - start < 5


@gen_test(timeout=60)
async def test_client_whose_scheduler_dies_gives_up_after_its_timeout() -> None:
    port = open_port("127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    with scheduler_process(port) as proc:
        async with Worker(address, nthreads=1, death_timeout=30):
            # The scheduler is up (the worker registered): two seconds are enough to connect, and
            # they bound the reconnection below.
            async with Client(address, asynchronous=True, timeout=2) as c:
                done = c.submit(inc, 1)
                assert await done == 2
                pending = c.submit(inc, 2, resources={"GPU": 1})  # no worker can run it
                proc.kill()
                proc.wait()
                start = time.monotonic()
                # It tries to connect again for its timeout, the futures kept meanwhile ...
                await async_poll_for(lambda: c.status != "running", timeout=10)
                assert c.status == "connecting" or time.monotonic() - start > 1.5
                assert not pending.done() or time.monotonic() - start > 1.5
                # ... then gives up: no hang.
                with pytest.raises(FutureCancelledError, match="scheduler-connection-lost"):
                    await asyncio.wait_for(pending, 10)
                assert c.status == "closed"
                # The finished result was held by that scheduler's workers: out of reach now.
                with pytest.raises(FutureCancelledError):
                    await asyncio.wait_for(done.result(timeout=30), 5)
                with pytest.raises(CommClosedError, match="lost its connection"):
                    await asyncio.wait_for(c.scheduler_info(), 5)
                with pytest.raises(CommClosedError, match="lost its connection"):
                    await asyncio.wait_for(c.who_has(), 5)
                with pytest.raises(RuntimeError, match="not running"):
                    c.submit(inc, 3)


_CLIENT_SCRIPT = """
import sys, time
from distributed import Client
c = Client(sys.argv[1], timeout=20)
held = [c.scatter(list(range(1000))), c.submit(sum, [1, 2, 3]), c.submit(abs, -1, resources={"GPU": 1})]
held[1].result()
print("ready", flush=True)
time.sleep(120)
"""


# A client gone without a word keeps its keys for its grace (it may connect again): a short one here.
@gen_cluster(nthreads=[("127.0.0.1", 2)], timeout=60, config={"distributed.scheduler.client-reconnect-grace": "0.5s"})
async def test_keys_of_a_killed_client_process_are_released(s: Scheduler, a: Worker) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CLIENT_SCRIPT, s.address, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert (await asyncio.wait_for(proc.stdout.readline(), 30)).strip() == b"ready"
        assert s.tasks and any(cs.wants_what for cs in s.clients.values())
        proc.kill()  # SIGKILL: no goodbye from the client
        await proc.wait()
        await async_poll_for(lambda: not s.tasks, timeout=10)
        await async_poll_for(lambda: not a.data, timeout=10)
        assert not any(cs.wants_what for cs in s.clients.values())
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- results and errors that do not travel ------------------------------------------------


def _two_mib(x: int) -> bytes:
    return b"x" * (2 * 2**20 + x)


@gen_cluster(client=True, config={"distributed.comm.max-frame-size": "1MiB"})
async def test_result_over_the_frame_limit_errs_its_future_only(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    big = c.submit(_two_mib, 1, workers=[a.address])
    with pytest.raises(ValueError, match="max-frame-size"):
        await asyncio.wait_for(big, 10)  # gathered from a: refused, not retried forever
    # A dependent on the other worker cannot fetch it either, and is told so.
    dependent = c.submit(len, big, workers=[b.address])
    with pytest.raises(ValueError, match="max-frame-size"):
        await asyncio.wait_for(dependent, 10)
    assert await c.submit(sum, [1, 2]) == 3


class _RebuiltBadly(Exception):
    """Pickles, but unpickling calls __init__ with the wrong arguments."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"bad {a} {b}")


def _raise_rebuilt_badly(x: int) -> None:
    raise _RebuiltBadly(x, x)


def _make_lock(x: int) -> Any:
    return threading.Lock()


def _raise_type_only_on_worker(x: int) -> None:
    import types

    mod = types.ModuleType("only_on_this_worker")
    exec("class OnlyHere(Exception):\n    pass\n", mod.__dict__)
    sys.modules["only_on_this_worker"] = mod
    raise mod.OnlyHere("the text of an error only the worker can build")


@gen_test(timeout=60)
async def test_values_and_errors_that_do_not_travel_err_their_futures() -> None:
    async with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, asynchronous=True, dashboard_address=None
        ) as cluster,
        Client(cluster, asynchronous=True) as c,
    ):
        with pytest.raises(SerializationError, match="cannot pickle"):
            await asyncio.wait_for(c.submit(_make_lock, 1), 10)
        with pytest.raises(SerializationError, match="cannot pickle"):
            await asyncio.wait_for(c.submit(len, threading.Lock()), 10)
        # Its type is kept, though unpickling it as it was pickled fails.
        with pytest.raises(_RebuiltBadly, match="bad 1 1"):
            await asyncio.wait_for(c.submit(_raise_rebuilt_badly, 1), 10)
        # A type that exists only on the worker: its text arrives.
        with pytest.raises(Exception, match="OnlyHere: the text of an error only the worker can build"):
            await asyncio.wait_for(c.submit(_raise_type_only_on_worker, 1), 10)
        assert await c.submit(sum, [1, 2]) == 3
