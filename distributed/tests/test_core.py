"""Server, routes, rpc and ConnectionPool over TCP and in process."""

from __future__ import annotations

import asyncio
import threading
import traceback
from typing import Any, Literal, NotRequired, TypedDict

import pytest

from distributed.comm import Comm, CommClosedError, connect
from distributed.core import (
    ConnectionPool,
    RemoteError,
    Route,
    Server,
    Status,
    StreamRoute,
    error_message,
    rebuild_exception,
    rpc,
    send_recv,
)
from distributed.utils_test import async_poll_for, run_async

SCHEMES = ["tcp", "inproc"]


def status_of(server: Server) -> Status:
    return server.status


def listen_address(scheme: str) -> str:
    return "tcp://127.0.0.1:0" if scheme == "tcp" else "inproc://"


# -- a server under test ---------------------------------------------------------


class CustomError(Exception):
    """Raised by a handler; must come back to the caller as itself."""


class UnpicklableError(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.lock = threading.Lock()


def _refuse_to_rebuild(text: str) -> BaseException:
    raise TypeError(f"cannot rebuild {text}")


class BadReconstructError(Exception):
    """Pickles, but unpickling fails."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")

    def __reduce__(self) -> Any:
        return (_refuse_to_rebuild, (str(self),))


class TwoArgumentError(Exception):
    """A custom ``__init__`` without ``__reduce__``: plain pickling would call ``__init__`` with one argument."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")
        self.b = b


class AddMsg(TypedDict):
    x: int
    y: int
    reply: NotRequired[bool]


class EchoMsg(TypedDict):
    data: Any
    delay: NotRequired[float]


class FailMsg(TypedDict):
    kind: str


class HoldMsg(TypedDict):
    pass


class StreamMsg(TypedDict):
    value: int


class ModeMsg(TypedDict):
    mode: Literal["fast", "slow"]


class MyServer(Server):
    def __init__(self, address: str | None = None, **kwargs: Any) -> None:
        super().__init__(
            handlers={
                "add": Route(AddMsg, self.add),
                "echo": Route(EchoMsg, self.echo),
                "fail": Route(FailMsg, self.remote_failing_handler),
                "hold": Route(HoldMsg, self.hold),
                "stream": Route(HoldMsg, self.stream, takes_comm=True),
                "peer": Route(HoldMsg, self.peer),
                "mode": Route(ModeMsg, self.mode),
            },
            stream_handlers={"value": StreamRoute(StreamMsg, self.on_value)},
            **kwargs,
        )
        self.listen_on = address
        self.adds = 0
        self.peers: list[str] = []
        self.active = 0
        self.max_active = 0
        self.gate = asyncio.Event()
        self.values: list[int] = []

    async def start_unsafe(self) -> None:
        if self.listen_on is not None:
            await self.listen(self.listen_on)

    def add(self, comm: Comm, msg: AddMsg) -> int:
        self.adds += 1
        return msg["x"] + msg["y"]

    async def echo(self, comm: Comm, msg: EchoMsg) -> Any:
        await asyncio.sleep(msg.get("delay", 0))
        return msg["data"]

    def remote_failing_handler(self, comm: Comm, msg: FailMsg) -> None:
        if msg["kind"] == "custom":
            raise CustomError("boom 42")
        if msg["kind"] == "unpicklable":
            raise UnpicklableError("cannot travel")
        if msg["kind"] == "reconstruct":
            raise BadReconstructError("a", "b")
        if msg["kind"] == "two-arguments":
            raise TwoArgumentError("a", "b")
        raise KeyError(msg["kind"])

    async def hold(self, comm: Comm, msg: HoldMsg) -> int:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await self.gate.wait()
        finally:
            self.active -= 1
        return 1

    def mode(self, comm: Comm, msg: ModeMsg) -> str:
        return msg["mode"].upper()

    def peer(self, comm: Comm, msg: HoldMsg) -> str:
        self.peers.append(comm.peer_address)
        return comm.peer_address

    async def stream(self, comm: Comm, msg: HoldMsg) -> None:
        try:
            while True:
                self.dispatch_stream(await comm.read(), origin=comm.peer_address)
        except CommClosedError:
            pass

    def on_value(self, msg: StreamMsg) -> None:
        self.values.append(msg["value"])


# -- requests --------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_rpc_sync_and_async_handlers(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            assert server.status == Status.running
            async with rpc(server.address, timeout=5) as r:
                assert await r.call("add", x=1, y=2) == 3
                assert await r.call("echo", data={"k": ("x", 0)}) == {"k": ("x", 0)}
                assert await r.call("echo", data=b"bytes", delay=0.001) == b"bytes"
                assert await r.call("add", x=-5, y=5) == 0
            assert server.adds == 2

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_call(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=4, timeout=5)
            try:
                assert await pool.call(server.address, {"op": "add", "x": 40, "y": 2}) == 42
                results = await asyncio.gather(
                    *(pool.call(server.address, {"op": "add", "x": i, "y": i}) for i in range(10))
                )
                assert results == [2 * i for i in range(10)]
                assert pool.open <= 4
            finally:
                await pool.close()
            assert pool.open == 0
            with pytest.raises(CommClosedError):
                await pool.call(server.address, {"op": "add", "x": 1, "y": 1})

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_remote_exception_keeps_type_message_and_traceback(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server, rpc(server.address, timeout=5) as r:
            with pytest.raises(CustomError, match="boom 42") as info:
                await r.call("fail", kind="custom")
            assert type(info.value) is CustomError
            tb_text = "".join(traceback.format_tb(info.value.__traceback__))
            assert "remote_failing_handler" in tb_text
            with pytest.raises(KeyError, match="nope"):
                await r.call("fail", kind="nope")
            # still serving on the same comm
            assert await r.call("add", x=1, y=1) == 2

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_unknown_op(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server, rpc(server.address, timeout=5) as r:
            with pytest.raises(ValueError, match="no-such-op"):
                await r.call("no-such-op", x=1)
            assert await r.call("add", x=2, y=2) == 4

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_malformed_message_names_field(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            async with rpc(server.address, timeout=5) as r:
                with pytest.raises(ValueError, match=r"AddMsg\.x: expected int, got str"):
                    await r.call("add", x="one", y=2)
                assert await r.call("add", x=2, y=3) == 5
                with pytest.raises(ValueError, match=r"missing field 'y'"):
                    await r.call("add", x=1)
                assert await r.call("add", x=2, y=3) == 5
                with pytest.raises(ValueError, match=r"FailMsg\.kind"):
                    await r.call("fail", kind={"not": "a string"})
                assert await r.call("add", x=2, y=3) == 5
                assert await r.call("mode", mode="fast") == "FAST"
                # Unhashable values where a Literal is declared are malformed, too.
                for bad in (["fast"], {"m": "fast"}, "medium"):
                    with pytest.raises(ValueError, match=r"ModeMsg\.mode: expected one of"):
                        await r.call("mode", mode=bad)
                assert await r.call("add", x=2, y=3) == 5
            assert server.adds == 4

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_non_mapping_request(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            comm = await connect(server.address, timeout=5)
            try:
                for bad in (["op", "add"], {"op": 5}, "add"):
                    await comm.write(bad)
                    reply = await asyncio.wait_for(comm.read(), 5)
                    assert reply["status"] == "error"
                    with pytest.raises(ValueError, match="string 'op'"):
                        raise rebuild_exception(reply)
                assert await send_recv(comm, {"op": "add", "x": 1, "y": 2}) == 3
            finally:
                await comm.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(
    "kind, cls_name", [("unpicklable", "UnpicklableError"), ("reconstruct", "BadReconstructError")]
)
def test_exception_that_cannot_travel(scheme: str, kind: str, cls_name: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server, rpc(server.address, timeout=5) as r:
            with pytest.raises(RuntimeError) as info:
                await r.call("fail", kind=kind)
            assert type(info.value) is RuntimeError
            assert cls_name in str(info.value)
            if kind == "unpicklable":
                assert "cannot travel" in str(info.value)
            else:
                assert "a/b" in str(info.value)
            assert await r.call("add", x=1, y=1) == 2

    run_async(main)


def test_exception_with_custom_init_travels_as_itself() -> None:
    async def main() -> None:
        async with MyServer(listen_address("tcp")) as server, rpc(server.address, timeout=5) as r:
            with pytest.raises(TwoArgumentError) as info:
                await r.call("fail", kind="two-arguments")
            assert str(info.value) == "a/b" and info.value.b == "b"

    run_async(main)


def test_error_message_and_rebuild() -> None:
    try:
        raise CustomError("local")
    except CustomError as e:
        msg = error_message(e)
    assert msg["status"] == "error"
    assert msg["type"] == "CustomError"
    assert msg["text"] == "CustomError: local"
    exc = rebuild_exception(msg)
    assert type(exc) is CustomError and exc.args == ("local",)
    assert "test_error_message_and_rebuild" in "".join(traceback.format_tb(exc.__traceback__))
    # An unreadable exception payload becomes a RemoteError with the text.
    broken = dict(msg, exception=b"garbage")
    exc2 = rebuild_exception(broken)
    assert type(exc2) is RemoteError and "CustomError: local" in str(exc2)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_no_reply_requests(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            comm = await connect(server.address, timeout=5)
            try:
                assert await send_recv(comm, {"op": "add", "x": 1, "y": 1, "reply": False}) is None
                # The next reply on the comm belongs to the next request.
                assert await send_recv(comm, {"op": "add", "x": 2, "y": 2}) == 4
                assert server.adds == 2
            finally:
                await comm.close()

    run_async(main)


# -- the pool ----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_reuses_comms(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=5, timeout=5)
            try:
                for _i in range(10):
                    await pool.call(server.address, {"op": "peer"})
                    assert pool.open == 1
                assert len(set(server.peers)) == 1
                # A remote error does not cost the comm either.
                with pytest.raises(CustomError):
                    await pool.call(server.address, {"op": "fail", "kind": "custom"})
                assert pool.open == 1
                await pool.call(server.address, {"op": "peer"})
                assert len(set(server.peers)) == 1
            finally:
                await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_respects_limit(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=2, timeout=5)
            try:
                calls = [asyncio.create_task(pool.call(server.address, {"op": "hold"})) for _ in range(6)]
                await async_poll_for(lambda: server.active == 2)
                assert pool.open == 2
                server.gate.set()
                results = await asyncio.wait_for(asyncio.gather(*calls), 10)
                assert results == [1] * 6
                assert server.max_active == 2
                assert pool.open <= 2
            finally:
                await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_limit_shared_between_addresses(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as a, MyServer(listen_address(scheme)) as b:
            pool = ConnectionPool(limit=1, timeout=5)
            try:
                for _ in range(3):
                    assert await asyncio.wait_for(pool.call(a.address, {"op": "add", "x": 1, "y": 0}), 5) == 1
                    assert await asyncio.wait_for(pool.call(b.address, {"op": "add", "x": 2, "y": 0}), 5) == 2
                    assert pool.open == 1
            finally:
                await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_replaces_comms_closed_while_idle(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=1, timeout=5)
            try:
                for _ in range(3):
                    assert await asyncio.wait_for(pool.call(server.address, {"op": "add", "x": 1, "y": 1}), 5) == 2
                    (idle,) = pool.available[server.address]
                    idle.abort()  # e.g. the peer went away while the comm sat idle
            finally:
                await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_keeps_no_entry_for_an_address_without_comms(scheme: str) -> None:
    # A scheduler's pool sees every worker that ever joined: what it keeps per address must go with the comms.
    async def main() -> None:
        pool = ConnectionPool(limit=1, timeout=5)
        try:
            for _ in range(3):  # servers that come and go, one after the other
                async with MyServer(listen_address(scheme)) as server:
                    assert await asyncio.wait_for(pool.call(server.address, {"op": "add", "x": 1, "y": 1}), 5) == 2
                    assert set(pool.available) == {server.address} and not pool.occupied
                    pool.remove(server.address)
                assert not pool.available and not pool.occupied
            async with MyServer(listen_address(scheme)) as a, MyServer(listen_address(scheme)) as b:
                # At the limit, the idle comm to ``a`` is closed to make room for ``b``: ``a`` leaves no entry.
                assert await asyncio.wait_for(pool.call(a.address, {"op": "add", "x": 1, "y": 0}), 5) == 1
                assert await asyncio.wait_for(pool.call(b.address, {"op": "add", "x": 2, "y": 0}), 5) == 2
                assert set(pool.available) == {b.address} and not pool.occupied
                (idle,) = pool.available[b.address]
                idle.abort()
                assert await asyncio.wait_for(pool.call(b.address, {"op": "add", "x": 3, "y": 0}), 5) == 3
                assert set(pool.available) == {b.address} and pool.open == 1
        finally:
            await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_comm_broken_mid_call_is_not_reused(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=1, timeout=5)
            try:
                call = asyncio.create_task(pool.call(server.address, {"op": "hold"}))
                await async_poll_for(lambda: server.active == 1)
                (comm,) = pool.occupied[server.address]
                comm.abort()
                with pytest.raises(CommClosedError):
                    await asyncio.wait_for(call, 5)
                assert pool.open == 0
                server.gate.set()
                assert await asyncio.wait_for(pool.call(server.address, {"op": "add", "x": 3, "y": 4}), 5) == 7
                assert pool.open == 1
            finally:
                await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_borrowed_comm_goes_back_in_step_and_is_closed_out_of_step(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=1, timeout=5)
            try:
                async with pool.borrowed(server.address) as comm:
                    assert await comm.request({"op": "add", "x": 1, "y": 2}) == 3
                    with pytest.raises(CustomError):  # an error reply: still between two messages
                        await comm.request({"op": "fail", "kind": "custom"})
                    assert comm.in_step
                    assert await comm.request({"op": "add", "x": 2, "y": 2}) == 4
                assert pool.open == 1 and len(pool.available[server.address]) == 1
                # A request cut off after its write (here by a timeout) leaves the comm out of step.
                with pytest.raises(TimeoutError):
                    async with pool.borrowed(server.address) as comm:
                        await asyncio.wait_for(comm.request({"op": "hold"}), 0.2)
                assert not comm.in_step and comm.comm.closed()
                assert pool.open == 0
                server.gate.set()
                assert await asyncio.wait_for(pool.call(server.address, {"op": "add", "x": 3, "y": 4}), 5) == 7
            finally:
                await pool.close()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pool_close_wakes_waiters(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            pool = ConnectionPool(limit=1, timeout=5)
            busy = asyncio.create_task(pool.call(server.address, {"op": "hold"}))
            await async_poll_for(lambda: server.active == 1)
            waiting = asyncio.create_task(pool.call(server.address, {"op": "add", "x": 1, "y": 1}))
            await asyncio.sleep(0)
            assert not waiting.done()
            await pool.close()
            for task in (busy, waiting):
                with pytest.raises(CommClosedError):
                    await asyncio.wait_for(task, 5)
            assert pool.open == 0

    run_async(main)


def test_pool_connect_failure_frees_its_slot() -> None:
    async def main() -> None:
        pool = ConnectionPool(limit=1, timeout=0.2)
        try:
            for _ in range(3):
                with pytest.raises(OSError):
                    await pool.call("inproc://nobody", {"op": "x"})
            async with MyServer("inproc://") as server:
                assert await asyncio.wait_for(pool.call(server.address, {"op": "add", "x": 1, "y": 2}), 5) == 3
        finally:
            await pool.close()

    run_async(main)


# -- life cycle --------------------------------------------------------------------


def test_close_cancels_background_tasks() -> None:
    async def main() -> None:
        server = MyServer("inproc://")
        await server.start()
        ticks = 0
        cleaned_up = False

        def tick() -> None:
            nonlocal ticks
            ticks += 1

        async def forever() -> None:
            nonlocal cleaned_up
            try:
                await asyncio.Event().wait()
            finally:
                cleaned_up = True

        background = server.spawn(forever(), name="forever")
        periodic = server.periodic(0.001, tick, name="ticker")
        assert server.periodic_callbacks["ticker"] is periodic and periodic.callback_time == 1
        await async_poll_for(lambda: ticks >= 3)
        assert not background.done() and periodic.is_running()
        # Stopped and started again, as dask's users do with tornado's callbacks.
        periodic.stop()
        assert not periodic.is_running()
        stopped_at = ticks
        periodic.start()
        await async_poll_for(lambda: ticks >= stopped_at + 3)
        await server.close()
        assert server.status == Status.closed
        assert background.cancelled() and not periodic.is_running()
        assert cleaned_up
        assert not server._background
        # Closing again is a no-op; starting again is refused.
        await server.close()
        with pytest.raises(RuntimeError, match="closed"):
            await server.start()

    run_async(main)


def test_periodic_survives_failing_callback() -> None:
    async def main() -> None:
        async with MyServer("inproc://") as server:
            calls = 0

            async def flaky() -> None:
                nonlocal calls
                calls += 1
                if calls % 2:
                    raise CustomError("transient")

            callback = server.periodic(0.001, flaky)
            await async_poll_for(lambda: calls >= 4)
            assert callback.is_running()

    run_async(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_async_with_server(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            assert isinstance(server, MyServer)
            assert server.status == Status.running
            address = server.address
            comm = await connect(address, timeout=5)
            assert await send_recv(comm, {"op": "add", "x": 1, "y": 1}) == 2
        assert status_of(server) == Status.closed
        # Comms the server was answering on are closed.
        with pytest.raises(CommClosedError):
            await asyncio.wait_for(comm.read(), 5)
        with pytest.raises(OSError):
            await connect(address, timeout=0.2)
        await server.finished()

    run_async(main)


def test_server_await_and_addresses() -> None:
    async def main() -> None:
        server = MyServer()
        with pytest.raises(ValueError, match="not listening"):
            server.address
        started = await server
        assert started is server and server.status == Status.running
        await server.listen("tcp://127.0.0.1:0")
        await server.listen("inproc://")
        assert server.address.startswith("tcp://127.0.0.1:")
        assert server.port == int(server.address.rsplit(":", 1)[1]) > 0
        assert server.listen_address == server.address
        async with rpc(server.listeners[1].contact_address, timeout=5) as r:
            assert await r.call("add", x=1, y=1) == 2
        await server.close()

    run_async(main)


@pytest.mark.timeout(30)
def test_close_cancels_again_a_task_that_swallowed_its_cancellation() -> None:
    async def main() -> None:
        server = MyServer("inproc://")
        await server.start()
        started, swallowed = asyncio.Event(), asyncio.Event()

        async def stubborn() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                swallowed.set()  # as a racing wait_for can: the cancellation is lost
            await asyncio.Event().wait()

        task = server.spawn(stubborn(), name="stubborn")
        await started.wait()
        await asyncio.wait_for(server.close(), 10)
        assert swallowed.is_set() and task.cancelled()
        assert server.status == Status.closed

    run_async(main)


def test_failed_start_closes() -> None:
    class Broken(MyServer):
        async def start_unsafe(self) -> None:
            await self.listen("inproc://")
            self.spawn(asyncio.Event().wait())
            raise CustomError("cannot start")

    async def main() -> None:
        server = Broken()
        with pytest.raises(CustomError):
            await server.start()
        assert server.status == Status.closed
        assert not server._background

    run_async(main)


# -- streams -------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_takes_comm_and_dispatch_stream(scheme: str) -> None:
    async def main() -> None:
        async with MyServer(listen_address(scheme)) as server:
            comm = await connect(server.address, timeout=5)
            try:
                await comm.write({"op": "stream", "reply": False})
                await comm.write([{"op": "value", "value": 1}, {"op": "value", "value": 2}])
                # Malformed and unknown messages are dropped; the rest of the batch runs.
                await comm.write([{"op": "value", "value": "x"}, {"op": "nope"}, "junk", {"op": "value", "value": 3}])
                await comm.write({"op": "value", "value": 4})
                await comm.write("not a batch")
                await comm.write([{"op": "value", "value": 5}])
                await async_poll_for(lambda: server.values == [1, 2, 3, 4, 5])
            finally:
                await comm.close()

    run_async(main)


def test_stream_messages_from_this_process_may_skip_the_schema_check() -> None:
    from distributed.comm.inproc import InprocComm
    from distributed.comm.tcp import TCPComm

    assert InprocComm.same_process and not TCPComm.same_process
    server = MyServer()
    bad: Any = {"op": "value", "value": "not an int"}
    server.dispatch_stream([bad], "test")
    assert server.values == []  # checked: dropped
    server.dispatch_stream([bad], "test", check=False)
    handled: list[Any] = list(server.values)
    assert handled == ["not an int"]  # trusted: handled as it is


def test_scheduler_without_host_listens_on_one_port_and_advertises_it() -> None:
    """A Scheduler with no host listens on all interfaces on one port; its address answers."""
    from distributed.comm.tcp import TCPListener
    from distributed.scheduler import Scheduler

    async def main() -> None:
        async with Scheduler(dashboard=False) as s:
            (listener,) = s.listeners
            assert isinstance(listener, TCPListener) and listener.server is not None
            assert {sock.getsockname()[1] for sock in listener.server.sockets} == {s.port}
            async with rpc(s.address, timeout=2) as r:
                assert (await r.call("identity"))["id"] == s.id
            async with rpc(f"tcp://127.0.0.1:{s.port}", timeout=2) as r:
                assert (await r.call("identity"))["id"] == s.id

    run_async(main)
