"""One conformance suite that the TCP and the in-process comms both pass, plus
transport-specific checks (connect timeouts, frame limits, threads)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import dask.config
import numpy as np
import pytest

from distributed.comm import (
    Comm,
    CommClosedError,
    Listener,
    connect,
    listen,
    normalize_address,
    parse_address,
    parse_host_port,
    unparse_address,
)
from distributed.comm.tcp import TCPListener
from distributed.protocol import Serialize, Serialized, to_serialize, unwrap
from distributed.protocol.framing import dumps
from distributed.utils import LoopRunner
from distributed.utils_test import async_poll_for, run_async

SCHEMES = ["tcp", "inproc"]


# -- helpers -----------------------------------------------------------------


def listen_address(scheme: str) -> str:
    return "tcp://127.0.0.1:0" if scheme == "tcp" else "inproc://"


@asynccontextmanager
async def accepting(scheme: str) -> AsyncIterator[tuple[Listener, asyncio.Queue[Comm]]]:
    """A listener that puts every accepted comm in a queue; all closed on exit."""
    accepted: asyncio.Queue[Comm] = asyncio.Queue()
    seen: list[Comm] = []

    async def handler(comm: Comm) -> None:
        seen.append(comm)
        await accepted.put(comm)

    listener = listen(listen_address(scheme), handler)
    await listener.start()
    try:
        yield listener, accepted
    finally:
        listener.stop()
        for c in seen:
            c.abort()


@asynccontextmanager
async def comm_pair(scheme: str) -> AsyncIterator[tuple[Comm, Comm, Listener]]:
    """(client end, server end, listener)."""
    async with accepting(scheme) as (listener, accepted):
        client = await connect(listener.contact_address, timeout=5)
        try:
            server = await asyncio.wait_for(accepted.get(), 5)
            yield client, server, listener
        finally:
            client.abort()


def payload_of(value: Any) -> Any:
    """The object a comm delivered (Serialized over TCP, Serialize in process)."""
    assert isinstance(value, (Serialized, Serialize))
    return unwrap(value)


@contextmanager
def unused_port() -> Iterator[int]:
    """A port nobody listens on.

    The socket stays bound (not listening) meanwhile, so no other process can
    take the port; SO_REUSEADDR still lets a listener of ours bind it.
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        yield port


# -- addresses -----------------------------------------------------------------


def test_address_helpers() -> None:
    assert parse_address("tcp://127.0.0.1:8786") == ("tcp", "127.0.0.1:8786")
    assert parse_address("inproc://123/4") == ("inproc", "123/4")
    assert parse_address("127.0.0.1:1") == ("tcp", "127.0.0.1:1")
    with dask.config.set({"distributed.comm.default-scheme": "inproc"}):
        assert parse_address("x") == ("inproc", "x")
    assert unparse_address("tcp", "h:1") == "tcp://h:1"
    assert normalize_address("h:1") == "tcp://h:1"
    assert parse_host_port("h:12") == ("h", 12)
    assert parse_host_port("[::1]:12") == ("::1", 12)
    assert parse_host_port("h", default_port=5) == ("h", 5)
    with pytest.raises(ValueError, match="No port"):
        parse_host_port("h")
    with pytest.raises(ValueError, match="Invalid port"):
        parse_host_port("h:x")
    with pytest.raises(TypeError):
        parse_address(5)  # type: ignore[arg-type]


def test_unknown_scheme() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="Unknown comm scheme"):
            await connect("udp://127.0.0.1:1", timeout=1)

        async def handler(comm: Comm) -> None:
            pass

        with pytest.raises(ValueError, match="Unknown comm scheme"):
            listen("udp://127.0.0.1:1", handler)

    run_async(main)


# -- conformance ---------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_round_trip(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            msg = {"op": "ping", "key": ("x", 0), "data": b"abc", "n": [1, 2, {"a": None}]}
            await client.write(msg)
            got = await asyncio.wait_for(server.read(), 5)
            assert got["op"] == "ping"
            assert tuple(got["key"]) == ("x", 0)
            assert got["data"] == b"abc"
            assert list(got["n"]) == [1, 2, {"a": None}]
            await server.write({"status": "OK", "result": 42})
            assert await asyncio.wait_for(client.read(), 5) == {"status": "OK", "result": 42}
            assert not client.closed() and not server.closed()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_addresses(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, listener):
            assert client.peer_address == listener.contact_address
            assert server.peer_address == client.local_address
            assert client.peer_address == server.local_address
            assert client.local_address != client.peer_address
            for addr in (client.local_address, client.peer_address):
                assert addr.startswith(f"{scheme}://")
            if scheme == "tcp":
                host, port = parse_host_port(parse_address(client.local_address)[1])
                assert host == "127.0.0.1" and port > 0
                assert listener.listen_address == listener.contact_address
            assert "open" in repr(client)
            client.abort()
            assert "closed" in repr(client)

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_many_messages_in_order(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            n = 2000

            async def reader() -> list[int]:
                return [(await server.read())["i"] for _ in range(n)]

            task = asyncio.create_task(reader())
            for i in range(n):
                await client.write({"i": i, "pad": "x" * (i % 50)})
            assert await asyncio.wait_for(task, 10) == list(range(n))

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_concurrent_writers(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            writers, per_writer = 6, 150
            big = b"B" * 200_000  # above the size where frames are written separately

            async def write_all(w: int) -> None:
                for j in range(per_writer):
                    msg: dict[str, Any] = {"w": w, "j": j}
                    if j % 25 == 0:
                        msg["blob"] = to_serialize(big)
                    await client.write(msg)
                    await asyncio.sleep(0)

            tasks = [asyncio.create_task(write_all(w)) for w in range(writers)]
            seen: dict[int, list[int]] = {w: [] for w in range(writers)}
            for _ in range(writers * per_writer):
                msg = await asyncio.wait_for(server.read(), 10)
                seen[msg["w"]].append(msg["j"])
                if msg["j"] % 25 == 0:
                    assert payload_of(msg["blob"]) == big
                else:
                    assert "blob" not in msg
            await asyncio.gather(*tasks)
            assert seen == {w: list(range(per_writer)) for w in range(writers)}

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_concurrent_writers_with_large_messages(scheme: str) -> None:
    # A large message is sent over several turns of the event loop; small
    # messages written meanwhile must wait for it, not land inside it.
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            big = np.arange(3 * 2**20 // 8, dtype="i8")  # above the size sent straight from memory

            async def large(i: int) -> None:
                await client.write({"big": i, "x": to_serialize(big)})

            async def small(i: int) -> None:
                for j in range(20):
                    await client.write({"small": i, "j": j})

            tasks = [asyncio.create_task(large(i)) for i in range(4)]
            tasks += [asyncio.create_task(small(i)) for i in range(4)]
            bigs, smalls = [], []
            for _ in range(4 + 4 * 20):
                msg = await asyncio.wait_for(server.read(), 20)
                if "big" in msg:
                    assert np.array_equal(payload_of(msg["x"]), big)
                    bigs.append(msg["big"])
                else:
                    smalls.append((msg["small"], msg["j"]))
            await asyncio.gather(*tasks)
            assert sorted(bigs) == list(range(4))
            for i in range(4):
                assert [j for k, j in smalls if k == i] == list(range(20))

    run_async(main)


def test_tcp_abort_during_large_write_ends_it() -> None:
    # The peer reads nothing, so the write waits on a full socket; aborting the
    # comm must end the write and the connection, not leave them open.
    async def main() -> None:
        with socket.create_server(("127.0.0.1", 0)) as lsock:
            port = lsock.getsockname()[1]
            client = await connect(f"tcp://127.0.0.1:{port}", timeout=5)
            peer, _ = lsock.accept()
            with peer:
                write = asyncio.create_task(client.write({"x": to_serialize(np.ones(64 * 2**20 // 8))}))
                await asyncio.sleep(0)  # one turn: the write runs until the socket is full
                assert not write.done()
                client.abort()
                with pytest.raises(CommClosedError):
                    await asyncio.wait_for(write, 5)
                # The peer sees the connection end after what was sent.
                peer.settimeout(5)
                try:
                    while peer.recv(2**20):
                        pass
                except ConnectionResetError:
                    pass

    run_async(main)


def test_tcp_large_message_with_more_frames_than_one_sendmsg_takes() -> None:
    # 1500 frames of 20 kB (each above the inline limit): several sendmsg calls
    # of at most 1024 buffers, and partial sends that end inside a frame.
    async def main() -> None:
        async with comm_pair("tcp") as (client, server, _):
            blobs = [bytes([i % 251]) * 20_000 + i.to_bytes(4, "little") for i in range(1500)]
            read = asyncio.create_task(server.read())
            await client.write({"blobs": [to_serialize(b) for b in blobs]})
            msg = await asyncio.wait_for(read, 20)
            assert [payload_of(b) for b in msg["blobs"]] == blobs
            await client.write({"after": 1})
            assert await asyncio.wait_for(server.read(), 5) == {"after": 1}

    run_async(main)


def test_tcp_large_write_without_a_spare_descriptor(monkeypatch: pytest.MonkeyPatch) -> None:
    # Out of file descriptors, the socket cannot be duplicated: the message goes
    # through the transport instead, whole and in order.
    def no_dup(self: socket.socket) -> socket.socket:
        raise OSError(24, "Too many open files")

    async def main() -> None:
        async with comm_pair("tcp") as (client, server, _):
            big = np.arange(4 * 2**20 // 8, dtype="i8")
            monkeypatch.setattr(socket.socket, "dup", no_dup)
            read = asyncio.create_task(server.read())
            await client.write({"x": to_serialize(big)})
            await client.write({"after": 1})
            msg = await asyncio.wait_for(read, 20)
            assert np.array_equal(payload_of(msg["x"]), big)
            assert await asyncio.wait_for(server.read(), 5) == {"after": 1}

    run_async(main)


def test_tcp_large_write_takes_no_buffer_of_its_own() -> None:
    # A large frame goes to the socket from the array's memory: the sender
    # allocates nothing near the frame's size (asyncio's transport would copy
    # what the socket does not take at once).
    async def main() -> None:
        async with comm_pair("tcp") as (client, server, _):
            big = np.ones(32 * 2**20 // 8)
            read = asyncio.create_task(server.read())
            tracemalloc.start()
            try:
                await client.write({"x": to_serialize(big)})
                msg = await asyncio.wait_for(read, 20)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # The receiver's buffer for the frame, and little else.
            assert peak < big.nbytes + 2**20
            out = payload_of(msg["x"])
            assert np.array_equal(out, big)
            # The array is made on the buffer the frame was received into, not copied out of it.
            frame = msg["x"].frames[-1]
            assert np.shares_memory(out, np.frombuffer(frame, dtype=np.uint8))
            assert out.flags.writeable

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("closer", ["peer", "self"])
def test_close_wakes_pending_read(scheme: str, closer: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            pending = asyncio.create_task(client.read())
            await asyncio.sleep(0)  # let the read start waiting
            assert not pending.done()
            if closer == "peer":
                await server.close()
            else:
                await client.close()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(pending, 5)
            await async_poll_for(client.closed)
            with pytest.raises(CommClosedError):
                await client.write({"x": 1})
            with pytest.raises(CommClosedError):
                await client.read()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_messages_before_close_are_delivered(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            for i in range(20):
                await client.write({"i": i})
            await client.close()
            got = [(await asyncio.wait_for(server.read(), 5))["i"] for _ in range(20)]
            assert got == list(range(20))
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(server.read(), 5)

    run_async(main)


class Numbered:
    """A ``read_each`` handler keeping each message's ``"i"``: it may stop after, hold at or raise at one of them."""

    def __init__(
        self, comm: Comm, *, stop_after: int | None = None, hold_at: int | None = None, fail_at: int | None = None
    ) -> None:
        self.comm = comm
        self.stop_after = stop_after
        self.hold_at = hold_at
        self.fail_at = fail_at
        self.got: list[int] = []
        self.holding = asyncio.Event()

    def __call__(self, msg: Any) -> bool:
        i: int = msg["i"]
        self.got.append(i)
        if i == self.fail_at:
            raise ValueError(f"bad message {i}")
        if i == self.hold_at:
            self.comm.hold_messages()
            self.holding.set()
        return i != self.stop_after


@pytest.mark.parametrize("scheme", SCHEMES)
def test_read_each_gives_every_message_in_order_until_the_comm_closes(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            for i in range(5):  # queued before anyone reads: given first
                await client.write({"i": i})
            handle = Numbered(server)
            reading = asyncio.create_task(server.read_each(handle))
            for i in range(5, 300):
                await client.write({"i": i})
            await client.close()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(reading, 5)
            assert handle.got == list(range(300))

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_read_each_stops_when_told_and_the_rest_can_be_read(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            for i in range(10):
                await client.write({"i": i})
            handle = Numbered(server, stop_after=3)
            await asyncio.wait_for(server.read_each(handle), 5)
            assert handle.got == [0, 1, 2, 3]
            assert [(await asyncio.wait_for(server.read(), 5))["i"] for _ in range(6)] == list(range(4, 10))

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_read_each_holds_messages_back_while_asked_even_past_a_close(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            handle = Numbered(server, hold_at=2)
            reading = asyncio.create_task(server.read_each(handle))
            for i in range(50):
                await client.write({"i": i})
            await client.close()
            await asyncio.wait_for(handle.holding.wait(), 5)
            if scheme == "tcp":
                await async_poll_for(server.closed)  # every message before the close was received
            # (In process, a write puts the message into the reader's queue at once.)
            # Held: nothing more is given, and the close does not end the reading before the rest is given.
            for _ in range(3):
                await asyncio.sleep(0)  # turns of the loop, in which nothing may be given
            assert handle.got == [0, 1, 2] and not reading.done()
            server.release_messages()
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(reading, 5)
            assert handle.got == list(range(50))

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_read_each_raises_what_the_handler_raised_and_gives_no_more(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            handle = Numbered(server, fail_at=4)
            for i in range(10):
                await client.write({"i": i})
            with pytest.raises(ValueError, match="bad message 4"):
                await asyncio.wait_for(server.read_each(handle), 5)
            assert handle.got == list(range(5))

    run_async(main)


def test_tcp_read_each_on_a_malformed_message_raises_and_closes() -> None:
    async def main() -> None:
        with dask.config.set({"distributed.comm.max-frames": 10}):
            async with accepting("tcp") as (listener, accepted):
                host, port = parse_host_port(parse_address(listener.contact_address)[1])
                reader, writer = await asyncio.open_connection(host, port)
                server_comm = await asyncio.wait_for(accepted.get(), 5)
                got: list[Any] = []

                def handle(msg: Any) -> bool:
                    got.append(msg)
                    return True

                reading = asyncio.create_task(server_comm.read_each(handle))
                frames = [bytes(f) for f in dumps({"op": "fine"})]
                header = struct.pack(f"<{len(frames) + 1}Q", len(frames), *map(len, frames))
                writer.write(header + b"".join(frames) + struct.pack("<Q", 11))
                with pytest.raises(CommClosedError, match="frames"):
                    await asyncio.wait_for(reading, 5)
                assert got == [{"op": "fine"}]
                await _expect_dropped(reader)
                writer.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_write_after_close(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            await client.close()
            assert client.closed()
            with pytest.raises(CommClosedError):
                await client.write({"x": 1})
            # close and abort are idempotent
            await client.close()
            client.abort()
            # The other end learns about it and refuses writes too.
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(server.read(), 5)
            await async_poll_for(server.closed)
            with pytest.raises(CommClosedError):
                await server.write({"x": 1})

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_large_numpy_payload(scheme: str) -> None:
    async def main() -> None:
        async with comm_pair(scheme) as (client, server, _):
            arr = np.random.default_rng(0).integers(0, 2**31, size=50 * 2**20 // 8, dtype="i8")
            read = asyncio.create_task(server.read())
            n = await client.write({"op": "put", "x": to_serialize(arr), "tail": "end"})
            msg = await asyncio.wait_for(read, 20)
            assert msg["tail"] == "end"
            out = payload_of(msg["x"])
            assert out.dtype == arr.dtype and out.shape == arr.shape
            assert np.array_equal(out, arr)
            # Received into writable memory (sent in slices of a few MB).
            out[0] = -1
            if scheme == "tcp":
                assert n >= arr.nbytes
                assert isinstance(msg["x"], Serialized)
                assert msg["x"].nbytes >= arr.nbytes
            # The comm is still usable afterwards.
            await server.write({"ok": True})
            assert await asyncio.wait_for(client.read(), 5) == {"ok": True}

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_many_comms_to_one_listener(scheme: str) -> None:
    async def main() -> None:
        async with accepting(scheme) as (listener, accepted):
            clients = [await connect(listener.contact_address, timeout=5) for _ in range(10)]
            try:
                servers = [await asyncio.wait_for(accepted.get(), 5) for _ in clients]
                by_peer = {s.peer_address: s for s in servers}
                assert set(by_peer) == {c.local_address for c in clients}
                for i, c in enumerate(clients):
                    await c.write({"i": i})
                for i, c in enumerate(clients):
                    assert (await asyncio.wait_for(by_peer[c.local_address].read(), 5)) == {"i": i}
            finally:
                for c in clients:
                    c.abort()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_stopped_listener_refuses(scheme: str) -> None:
    async def main() -> None:
        async with accepting(scheme) as (listener, _):
            addr = listener.contact_address
            listener.stop()
            with pytest.raises(OSError):
                await connect(addr, timeout=0.3)

    run_async(main)


# -- TCP specifics -------------------------------------------------------------


def test_tcp_connect_to_closed_port_times_out() -> None:
    async def main() -> None:
        timeout = 0.5
        with unused_port() as port:
            start = time.monotonic()
            with pytest.raises(OSError, match="Timed out"):
                await connect(f"tcp://127.0.0.1:{port}", timeout=timeout)
            elapsed = time.monotonic() - start
        assert elapsed < timeout + 1.0

    run_async(main)


def test_tcp_connect_retries_until_listener_appears() -> None:
    async def main() -> None:
        accepted: asyncio.Queue[Comm] = asyncio.Queue()

        async def handler(comm: Comm) -> None:
            await accepted.put(comm)

        with unused_port() as port:
            attempt = asyncio.create_task(connect(f"tcp://127.0.0.1:{port}", timeout=10))
            # The first attempts are refused: nothing connects while no one listens.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(attempt), 0.05)
            listener = listen(f"tcp://127.0.0.1:{port}", handler)
            await listener.start()
        try:
            comm = await asyncio.wait_for(attempt, 10)
            server = await asyncio.wait_for(accepted.get(), 5)
            await comm.write("hi")
            assert await asyncio.wait_for(server.read(), 5) == "hi"
            comm.abort()
            server.abort()
        finally:
            listener.stop()

    run_async(main)


async def _expect_dropped(reader: asyncio.StreamReader, timeout: float = 5.0) -> None:
    try:
        data = await asyncio.wait_for(reader.read(), timeout)
    except (ConnectionResetError, BrokenPipeError):
        return
    assert data == b""


@pytest.mark.parametrize(
    "limit, announced",
    [
        (None, 2**62),  # above the default limit
        ("1MiB", 512 * 2**20),  # fine by default, too big by configuration
    ],
)
def test_tcp_oversized_frame_disconnects_without_allocating(limit: str | None, announced: int) -> None:
    async def main() -> None:
        config = {"distributed.comm.max-frame-size": limit} if limit else {}
        with dask.config.set(config):
            async with accepting("tcp") as (listener, accepted):
                host, port = parse_host_port(parse_address(listener.contact_address)[1])
                tracemalloc.start()
                try:
                    reader, writer = await asyncio.open_connection(host, port)
                    server_comm = await asyncio.wait_for(accepted.get(), 5)
                    writer.write(struct.pack("<QQ", 1, announced) + b"x" * 70_000)
                    with pytest.raises(CommClosedError, match="exceeds the limit"):
                        await asyncio.wait_for(server_comm.read(), 5)
                    await _expect_dropped(reader)
                    writer.close()
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                assert peak < 64 * 2**20
                assert server_comm.closed()
                # The listener keeps accepting and serving.
                comm = await connect(listener.contact_address, timeout=5)
                server2 = await asyncio.wait_for(accepted.get(), 5)
                await comm.write({"after": True, "blob": b"y" * 100_000})
                assert await asyncio.wait_for(server2.read(), 5) == {"after": True, "blob": b"y" * 100_000}
                comm.abort()

    run_async(main)


def test_tcp_too_many_frames_disconnects() -> None:
    async def main() -> None:
        with dask.config.set({"distributed.comm.max-frames": 10}):
            async with accepting("tcp") as (listener, accepted):
                host, port = parse_host_port(parse_address(listener.contact_address)[1])
                reader, writer = await asyncio.open_connection(host, port)
                server_comm = await asyncio.wait_for(accepted.get(), 5)
                writer.write(struct.pack("<Q", 11))
                with pytest.raises(CommClosedError, match="frames"):
                    await asyncio.wait_for(server_comm.read(), 5)
                await _expect_dropped(reader)
                writer.close()

    run_async(main)


def test_tcp_message_with_many_frames() -> None:
    # The frame-length header alone is larger than the receive buffer.
    async def main() -> None:
        async with comm_pair("tcp") as (client, server, _):
            n = 40_000
            items = [Serialized({"s": "pickle"}, [b"\x80\x05K\x01."]) for _ in range(n)]
            await client.write({"items": items})
            msg = await asyncio.wait_for(server.read(), 10)
            assert len(msg["items"]) == n
            assert all(unwrap(x) == 1 for x in msg["items"][:10])
            await client.write({"after": 1})
            assert await asyncio.wait_for(server.read(), 5) == {"after": 1}

    run_async(main)


def test_tcp_mixed_frame_sizes_stream() -> None:
    # Frames around the scratch-buffer and large-frame boundaries, back to back.
    async def main() -> None:
        async with comm_pair("tcp") as (client, server, _):
            sizes = [0, 1, 4095, 4096, 65_535, 65_536, 65_537, 256 * 1024 - 7, 256 * 1024 + 9, 1_000_003]
            msgs = [{"i": i, "b": to_serialize(bytes([i % 256]) * s)} for i, s in enumerate(sizes * 3)]

            async def send() -> None:
                for m in msgs:
                    await client.write(m)

            sender = asyncio.create_task(send())
            for i, s in enumerate(sizes * 3):
                got = await asyncio.wait_for(server.read(), 10)
                assert got["i"] == i
                assert payload_of(got["b"]) == bytes([i % 256]) * s
            await sender

    run_async(main)


def _valid_message_bytes() -> bytes:
    import msgpack

    body: bytes = msgpack.packb({"hello": 1})
    return struct.pack("<QQ", 1, len(body)) + body


@pytest.mark.parametrize(
    "partial",
    [
        struct.pack("<Q", 1)[:5],  # part of the frame count
        struct.pack("<Q", 2) + struct.pack("<Q", 10),  # count, one of two lengths
        struct.pack("<QQ", 1, 100) + b"x" * 10,  # a small frame, partly sent
        struct.pack("<QQ", 1, 10 * 2**20) + b"x" * 200_000,  # a large frame, partly sent
    ],
    ids=["count", "lengths", "small-frame", "large-frame"],
)
def test_tcp_peer_stalling_mid_message_is_disconnected(partial: bytes) -> None:
    async def main() -> None:
        with dask.config.set({"distributed.comm.timeouts.tcp": "0.3s"}):
            async with accepting("tcp") as (listener, accepted):
                host, port = parse_host_port(parse_address(listener.contact_address)[1])
                reader, writer = await asyncio.open_connection(host, port)
                server_comm = await asyncio.wait_for(accepted.get(), 5)
                # Spoke once (past the first-message timeout's concern), then stalls mid-message.
                writer.write(_valid_message_bytes() + partial)
                assert await asyncio.wait_for(server_comm.read(), 5) == {"hello": 1}
                with pytest.raises(CommClosedError, match="No progress"):
                    await asyncio.wait_for(server_comm.read(), 5)
                await _expect_dropped(reader)
                writer.close()
                # The listener keeps serving.
                comm = await connect(listener.contact_address, timeout=5)
                server2 = await asyncio.wait_for(accepted.get(), 5)
                await comm.write({"after": True})
                assert await asyncio.wait_for(server2.read(), 5) == {"after": True}
                comm.abort()

    run_async(main)


def test_tcp_slow_message_that_keeps_moving_is_not_cut() -> None:
    async def main() -> None:
        with dask.config.set({"distributed.comm.timeouts.tcp": "0.5s"}):
            async with accepting("tcp") as (listener, accepted):
                host, port = parse_host_port(parse_address(listener.contact_address)[1])
                reader, writer = await asyncio.open_connection(host, port)
                server_comm = await asyncio.wait_for(accepted.get(), 5)
                blob = bytes(range(256)) * 4096  # 1 MiB: a large frame, received in place
                frames = [bytes(f) for f in dumps({"blob": to_serialize(blob)})]
                header = struct.pack(f"<{len(frames) + 1}Q", len(frames), *map(len, frames))
                body = header + b"".join(frames)
                read = asyncio.ensure_future(server_comm.read())
                # Twelve pieces, 0.1 s apart: the whole takes more than twice the timeout,
                # yet every interval between pieces is well within it.
                step = len(body) // 12 + 1
                for start in range(0, len(body), step):
                    writer.write(body[start : start + step])
                    await writer.drain()
                    await asyncio.sleep(0.1)  # a slow peer, not a wait for the server
                got = await asyncio.wait_for(read, 5)
                assert payload_of(got["blob"]) == blob
                assert not server_comm.closed()
                writer.close()

    run_async(main)


# -- in process, across threads ------------------------------------------------


def test_inproc_across_event_loops_in_two_threads() -> None:
    runner = LoopRunner(name="inproc-server-loop")
    runner.start()
    listeners: list[Listener] = []
    handled_on: list[int] = []
    try:

        async def echo(comm: Comm) -> None:
            try:
                while True:
                    msg = await comm.read()
                    handled_on.append(threading.get_ident())
                    await comm.write({"echo": msg, "thread": threading.get_ident()})
            except CommClosedError:
                pass

        async def start_listener() -> str:
            listener = listen("inproc://", echo)
            await listener.start()
            listeners.append(listener)
            return listener.contact_address

        addr = runner.run_sync(start_listener)
        assert runner.thread is not None
        server_thread = runner.thread.ident

        async def client() -> None:
            comm = await connect(addr, timeout=5)
            try:
                for i in range(100):
                    await comm.write({"i": i})
                for i in range(100):
                    reply = await asyncio.wait_for(comm.read(), 5)
                    assert reply["echo"] == {"i": i}
                    assert reply["thread"] == server_thread
                # A pending read is woken when the other thread's end closes.
                await comm.write({"i": "last"})
                assert (await asyncio.wait_for(comm.read(), 5))["echo"] == {"i": "last"}
            finally:
                await comm.close()

        run_async(client)
        assert set(handled_on) == {server_thread}
        assert threading.get_ident() != server_thread
    finally:

        async def stop() -> None:
            for listener in listeners:
                listener.stop()

        runner.run_sync(stop)
        runner.stop()


def test_inproc_peer_in_other_thread_closes() -> None:
    runner = LoopRunner(name="inproc-closer-loop")
    runner.start()
    try:
        closed_by_server = threading.Event()
        listeners: list[Listener] = []

        async def close_soon(comm: Comm) -> None:
            await comm.read()
            closed_by_server.set()  # before closing: the client may wake at once
            await comm.close()

        async def start_listener() -> str:
            listener = listen("inproc://", close_soon)
            await listener.start()
            listeners.append(listener)
            return listener.contact_address

        addr = runner.run_sync(start_listener)

        async def client() -> None:
            comm = await connect(addr, timeout=5)
            pending = asyncio.create_task(comm.read())
            await comm.write("go")
            with pytest.raises(CommClosedError):
                await asyncio.wait_for(pending, 5)
            assert closed_by_server.is_set()
            with pytest.raises(CommClosedError):
                await comm.write("again")

        run_async(client)

        async def stop() -> None:
            for listener in listeners:
                listener.stop()

        runner.run_sync(stop)
    finally:
        runner.stop()


def test_inproc_no_listener() -> None:
    async def main() -> None:
        with pytest.raises(OSError, match="No in-process listener"):
            await connect("inproc://nobody-here", timeout=0.1)

    run_async(main)


def test_inproc_address_in_use() -> None:
    async def main() -> None:
        async def handler(comm: Comm) -> None:
            pass

        first = listen("inproc://taken-address", handler)
        await first.start()
        try:
            with pytest.raises(OSError, match="already in use"):
                await listen("inproc://taken-address", handler).start()
        finally:
            first.stop()
        again = listen("inproc://taken-address", handler)
        await again.start()
        again.stop()

    run_async(main)


# -- listening on every interface --------------------------------------------------------------
def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("host", ["", "[::]"])
def test_listening_on_all_interfaces_uses_one_port(host: str) -> None:
    """Every socket of the listener has one port, and both families reach it at the advertised port."""

    async def main() -> None:
        async def handler(comm: Comm) -> None:
            msg = await comm.read()
            await comm.write(msg)
            await comm.close()

        listener = listen(f"tcp://{host}:0", handler)
        await listener.start()
        try:
            assert isinstance(listener, TCPListener) and listener.server is not None
            ports = {sock.getsockname()[1] for sock in listener.server.sockets}
            assert ports == {listener.port}, ports
            assert listener.contact_address.endswith(f":{listener.port}")
            targets = [listener.contact_address, f"tcp://127.0.0.1:{listener.port}"]
            if socket.has_dualstack_ipv6() and _ipv6_loopback():
                targets.append(f"tcp://[::1]:{listener.port}")
            for addr in targets:
                comm = await connect(addr, timeout=2)
                try:
                    await comm.write({"to": addr})
                    assert await comm.read() == {"to": addr}
                finally:
                    comm.abort()
        finally:
            listener.stop()

    run_async(main)


def test_listening_on_all_interfaces_without_ipv6(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no dual-stack socket can be made, the listener falls back to IPv4 on one port."""

    def no_ipv6(*args: Any, **kwargs: Any) -> socket.socket:
        raise OSError("IPv6 is off")

    monkeypatch.setattr(socket, "create_server", no_ipv6)

    async def main() -> None:
        async def handler(comm: Comm) -> None:
            await comm.write(await comm.read())

        listener = listen("tcp://:0", handler)
        await listener.start()
        try:
            assert isinstance(listener, TCPListener) and listener.server is not None
            assert [sock.getsockname()[:2] for sock in listener.server.sockets] == [("0.0.0.0", listener.port)]
            comm = await connect(listener.contact_address, timeout=2)
            try:
                await comm.write("ping")
                assert await comm.read() == "ping"
            finally:
                comm.abort()
        finally:
            listener.stop()

    run_async(main)


def test_reading_pauses_once_unread_messages_hold_many_bytes() -> None:
    # A few large messages the reader has not taken yet: the rest waits in the kernel,
    # not in this process's memory (a count of messages alone would let 256 of them in).
    async def main() -> None:
        async with comm_pair("tcp") as (client, server, _):
            blob = np.arange(1 << 20, dtype="u8")  # 8 MiB each
            writer = asyncio.gather(*(client.write(to_serialize(blob)) for _ in range(4)))
            protocol = server._protocol  # type: ignore[attr-defined]  # the TCP comm's reader state
            await async_poll_for(lambda: protocol._reading_paused, timeout=10)
            assert len(protocol._messages) < 4
            for _ in range(4):
                assert np.array_equal(payload_of(await server.read()), blob)
            await asyncio.wait_for(writer, 10)
            assert not protocol._reading_paused

    run_async(main)
