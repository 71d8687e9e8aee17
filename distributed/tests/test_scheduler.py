"""Scheduler behaviour with real workers and comms."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from distributed import Client, SchedulerPlugin, wait
from distributed.comm import CommClosedError, connect, listen
from distributed.core import send_recv
from distributed.protocol import messages as m
from distributed.protocol.wire_types import Key
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc, slowinc
from distributed.worker import Worker


@gen_cluster()
async def test_malformed_requests_get_clear_errors(s: Scheduler, a: Worker, b: Worker) -> None:
    comm = await connect(s.address)
    try:
        with pytest.raises(ValueError, match="Unknown operation 'no-such-op'"):
            await send_recv(comm, {"op": "no-such-op"})
        with pytest.raises(ValueError, match="who_has"):
            await send_recv(comm, {"op": "who_has", "keys": 123})
        with pytest.raises(ValueError, match="mapping with a string 'op'"):
            await send_recv(comm, {"no-op": 1})
        # The same comm still works.
        assert await send_recv(comm, {"op": "who_has", "keys": []}) == {}
    finally:
        comm.abort()


@gen_cluster(client=True)
async def test_malformed_stream_messages_are_dropped(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    assert c.scheduler_comm is not None
    c.scheduler_comm.send({"op": "update-graph", "client": c.id, "tasks": "nonsense", "keys": []})
    c.scheduler_comm.send({"op": "not-an-op"})
    c.scheduler_comm.send("not even a dict")
    # Good messages after the bad ones are handled, and state is intact.
    assert await c.submit(inc, 1) == 2
    s.validate_state()


@gen_cluster(client=True)
async def test_malformed_run_spec_errs_its_task_only(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    from distributed import Future
    from distributed.protocol.serialize import SerializationError, Serialized

    assert c.scheduler_comm is not None
    bad = Future("bad-spec", c)
    # The scheduler forwards run specs unopened; the worker reports the task erred.
    spec = {"run_spec": Serialized.from_packed(b"\xc1junk"), "dependencies": [], "order": 0}
    c.scheduler_comm.send({"op": "update-graph", "client": c.id, "tasks": [("bad-spec", spec)], "keys": ["bad-spec"]})
    with pytest.raises(SerializationError, match="Malformed serialized object"):
        await bad
    assert await c.submit(inc, 1) == 2
    s.validate_state()


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_root_tasks_are_queued(c: Client, s: Scheduler, a: Worker) -> None:
    futures = c.map(slowinc, range(20), delay=0.02)
    await async_poll_for(lambda: s.n_queued > 0, 5)
    # Never more than the saturation allows on the worker at once.
    assert all(len(ws.processing) <= 2 for ws in s.workers.values())
    assert await c.gather(futures) == list(range(1, 21))
    assert s.n_queued == 0


@gen_cluster(client=True, nthreads=[])
async def test_tasks_wait_for_a_worker(c: Client, s: Scheduler) -> None:
    x = c.submit(inc, 1)
    y = c.submit(inc, x)
    await async_poll_for(lambda: x.key in s.tasks and s.tasks[x.key].state in ("queued", "no-worker"), 5)
    async with Worker(s.address, nthreads=1, validate=True):
        assert await y == 3


@gen_cluster(client=True, nthreads=[])
async def test_wait_for_workers_returns_when_enough_joined(c: Client, s: Scheduler) -> None:
    waiting = asyncio.ensure_future(c.wait_for_workers(2, asynchronous=True))
    scheduler_side = asyncio.ensure_future(s.wait_for_workers(1))
    async with Worker(s.address, nthreads=1, name=0):
        await asyncio.wait_for(scheduler_side, 5)
        assert not waiting.done()
        assert s.worker_by_name(0) is s.worker_by_name("0") is not None
        async with Worker(s.address, nthreads=1):
            await asyncio.wait_for(waiting, 5)
    assert s.worker_by_name(0) is None


@gen_cluster(client=True)
async def test_worker_leaving_reruns_its_tasks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address], allow_other_workers=True)
    await x
    assert s.tasks[x.key].who_has == {s.workers[a.address]}
    y = c.submit(slowinc, x, delay=0.2, workers=[a.address], allow_other_workers=True)
    await async_poll_for(lambda: y.key in s.tasks and s.tasks[y.key].state == "processing", 5)
    await a.close()
    # x lived only on a: it is recomputed on b, then y runs there.
    assert await y == 3
    assert s.tasks[y.key].who_has == {s.workers[b.address]}
    assert await x == 2


class Recorder(SchedulerPlugin):
    def __init__(self) -> None:
        self.graphs: list[set[Any]] = []
        self.transitions: list[tuple[Any, str, str]] = []
        self.workers_added: list[str] = []

    def update_graph(self, scheduler: Scheduler, *, keys: set[Any], **kwargs: Any) -> None:
        self.graphs.append(set(keys))

    def transition(self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any) -> None:
        self.transitions.append((key, start, finish))

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.workers_added.append(worker)


@gen_cluster(client=True)
async def test_scheduler_plugin_hooks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    plugin = Recorder()
    await s.add_plugin(plugin, name="recorder")
    x = c.submit(inc, 1)
    await x
    assert plugin.graphs == [{x.key}]
    assert (x.key, "processing", "memory") in plugin.transitions
    async with Worker(s.address, nthreads=1) as w:
        assert plugin.workers_added == [w.address]


@gen_cluster(client=True)
async def test_validation_catches_broken_invariants(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1)
    await x
    ts = s.tasks[x.key]
    ws = next(iter(ts.who_has))
    saved = ts.who_has
    ts.who_has = set()  # break an invariant on purpose
    with pytest.raises(AssertionError, match="memory without who_has"):
        s.validate_state()
    ts.who_has = saved
    assert ws in saved
    s.validate_state()


@gen_cluster(client=True)
async def test_many_tasks_and_release(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(1000))
    total = c.submit(sum, futures)
    assert await total == sum(range(1, 1001))
    keys = [f.key for f in futures]
    del futures
    # Released (their data freed) but remembered while a dependent exists.
    await async_poll_for(lambda: all(s.tasks[k].state == "released" for k in keys), 5)
    await async_poll_for(lambda: len(a.data) + len(b.data) == 1, 5)
    del total
    await async_poll_for(lambda: not s.tasks, 5)


async def _held_frees(s: Scheduler, c: Client, keys: list[str], held: set[str]) -> None:
    """Release ``keys`` for ``c`` with their free-keys held in ``held``; check none was written meanwhile."""
    streams = {addr: s.stream_comms[addr] for addr in s.workers}
    writes = {addr: bs.batch_count for addr, bs in streams.items()}
    with s.holding_frees(held):
        for key in keys:  # a stimulus each, as from several messages
            s.send_all(s.client_releases_keys(c.id, [key], f"test-release-{key}"))
    # Longer than a lazy message waits for a write: were the free-keys not held, they would be out by now.
    await asyncio.sleep(20 * max(bs.interval for bs in streams.values()))
    assert {addr: bs.batch_count for addr, bs in streams.items()} == writes


@gen_cluster(client=True)
async def test_held_frees_go_in_one_write_when_sent(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(40))
    await wait(futures)
    keys = [str(f.key) for f in futures]
    writes = {addr: bs.batch_count for addr, bs in s.stream_comms.items()}
    held: set[str] = set()
    await _held_frees(s, c, keys[:20], held)
    await _held_frees(s, c, keys[20:], held)
    assert held == {a.address, b.address}
    assert len(a.data) + len(b.data) == 40
    # Forty stimuli, one free-keys a worker, holding all that worker's keys.
    for w in (a, b):
        queued = [msg for msg in s.stream_comms[w.address].buffer if msg["op"] == "free-keys"]
        assert [sorted(msg["keys"]) for msg in queued] == [sorted(w.data)]
    s.send_held_frees(held)
    assert not held
    await async_poll_for(lambda: not a.data and not b.data, 5)
    assert {addr: bs.batch_count - writes[addr] for addr, bs in s.stream_comms.items()} == {a.address: 1, b.address: 1}


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_held_frees_are_not_joined_across_another_message(c: Client, s: Scheduler, a: Worker) -> None:
    futures = c.map(inc, range(3), workers=[a.address])
    await wait(futures)
    x, y, z = (str(f.key) for f in futures)
    bs = s.stream_comms[a.address]
    held: set[str] = set()
    await _held_frees(s, c, [x], held)
    bs.hold(m.FreeKeys(op="free-keys", keys=["unknown"]))  # another's, after x's: y's may not join x's
    await _held_frees(s, c, [y], held)
    await _held_frees(s, c, [z], held)
    assert [msg["keys"] for msg in bs.buffer] == [[x], ["unknown"], [y, z]]
    s.send_held_frees(held)
    await async_poll_for(lambda: not a.data, 5)


@gen_cluster(client=True)
async def test_held_frees_ride_along_with_the_next_message(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address])
    await wait(x)
    held: set[str] = set()
    await _held_frees(s, c, [str(x.key)], held)
    assert str(x.key) in a.data
    # A task for the same worker: its compute-task takes the held free-keys along, before it.
    assert await c.submit(inc, 2, workers=[a.address]) == 3
    assert str(x.key) not in a.data
    s.send_held_frees(held)


_gate = threading.Event()


def wait_for_gate(x: int) -> int:
    _gate.wait(10)
    return x


@gen_cluster(client=True)
async def test_two_clients_share_keys(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    async with Client(s.address, asynchronous=True) as c2:
        x = c.submit(inc, 10)
        y = c2.submit(inc, 10)
        assert x.key == y.key
        assert await x == await y == 11
        del x
        await asyncio.sleep(0)
        assert await y == 11
    await async_poll_for(lambda: not s.tasks, 5)
    await wait([])


def test_large_state_gc_freezes_while_large_and_unfreezes_after() -> None:
    import gc

    from distributed.gc_tending import LargeStateGC

    assert gc.get_freeze_count() == 0
    policy = LargeStateGC(step=10)
    try:
        policy.tend(5, 0)
        assert gc.get_freeze_count() == 0 and policy.frozen_at == 0
        policy.tend(10, 0)
        assert gc.get_freeze_count() > 0 and policy.frozen_at == 10
        policy.tend(15, 0)  # less than a step since the last freeze
        assert policy.frozen_at == 10
        policy.tend(25, 0)
        assert policy.frozen_at == 25
        policy.tend(9, 0)  # shrank below one step: back into view
        assert gc.get_freeze_count() == 0 and policy.frozen_at == 0
    finally:
        gc.unfreeze()


@gen_test()
async def test_a_scheduler_closing_with_a_frozen_view_unfreezes_it() -> None:
    import gc

    async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as s:
        s.streams.gc.tend(s.streams.gc.step, 0)  # as if it held a step's worth of tasks
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_large_state_gc_keeps_the_start_out_of_view_across_a_thaw() -> None:
    import gc

    from distributed.gc_tending import LargeStateGC

    assert gc.get_freeze_count() == 0
    policy = LargeStateGC(step=10)
    try:
        policy.freeze_startup()
        at_start = gc.get_freeze_count()
        assert at_start > 0 and policy.startup_frozen
        policy.tend(10, 0)
        policy.tend(5, 0)  # below a step: the state goes back into view, the start's objects do not
        assert policy.frozen_at == 0 and gc.get_freeze_count() > 0
        policy.release()  # the scheduler closes: everything back into view
        assert gc.get_freeze_count() == 0 and not policy.startup_frozen
    finally:
        gc.unfreeze()


class _Cycle:
    """An object in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_large_state_gc_with_the_start_frozen_collects_in_full_at_a_thaw_only_after_enough_work() -> None:
    import gc
    import weakref

    from distributed.gc_tending import FULL_PASS_STEPS, LargeStateGC

    assert gc.get_freeze_count() == 0
    policy = LargeStateGC(step=10)
    try:
        policy.freeze_startup()
        made = 0
        rounds = 0
        held = [_Cycle() for _ in range(3)]
        alive = [weakref.ref(x) for x in held]
        while all(r() is not None for r in alive):
            # A graph of two steps' worth of tasks comes, is frozen while held, then is forgotten.
            policy.tend(20, forgotten=made)
            del held[:]
            made += 20
            policy.tend(0, forgotten=made)
            assert policy.frozen_at == 0 and gc.get_freeze_count() > 0  # the start stays out of view
            rounds += 1
            assert rounds * 20 <= FULL_PASS_STEPS * policy.step + 20
        # The cycles frozen alive were freed by the first thaw after enough tasks were made, not before.
        assert made >= FULL_PASS_STEPS * policy.step and policy.made_at_full_pass == made
    finally:
        policy.release()
        gc.unfreeze()


def test_large_state_gc_frees_cycles_frozen_alive_once_work_has_flowed_through() -> None:
    import gc
    import weakref

    from distributed.gc_tending import LargeStateGC

    assert gc.get_freeze_count() == 0
    policy = LargeStateGC(step=10)
    try:
        held = [_Cycle() for _ in range(5)]
        alive = [weakref.ref(x) for x in held]
        policy.tend(10, forgotten=0)  # frozen while alive, like the records of tasks held then
        del held
        gc.collect()
        assert all(r() is not None for r in alive)  # out of the collector's view: kept
        policy.tend(12, forgotten=4)  # 6 tasks made since the freeze: less than a step
        assert policy.refreezes == 0 and all(r() is not None for r in alive)
        policy.tend(11, forgotten=9)  # 10 made since: a step, with the state steady
        assert policy.refreezes == 1 and gc.get_freeze_count() > 0 and policy.frozen_at == 11
        assert all(r() is None for r in alive)
    finally:
        gc.unfreeze()


def test_large_state_gc_only_draining_runs_no_full_collection() -> None:
    import gc

    from distributed.gc_tending import LargeStateGC

    policy = LargeStateGC(step=10)
    try:
        policy.tend(100, forgotten=0)
        for forgotten in range(10, 91, 10):  # forgotten, none made: nothing new was frozen to die
            policy.tend(100 - forgotten, forgotten)
        assert policy.refreezes == 0 and policy.frozen_at == 100
        policy.tend(5, 95)  # below a step: back into view
        assert policy.refreezes == 0 and policy.frozen_at == 0 and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_large_state_gc_collects_the_young_less_often_while_frozen_and_puts_the_threshold_back() -> None:
    import gc

    from distributed.gc_tending import LARGE_STATE_GEN0, LargeStateGC

    before = gc.get_threshold()
    policy = LargeStateGC(step=10)
    try:
        policy.tend(10, 0)
        assert gc.get_threshold() == (LARGE_STATE_GEN0, *before[1:])
        policy.tend(25, 0)  # frozen again: the threshold of the process is still the one saved
        policy.tend(5, 0)
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@gen_test()
async def test_workers_count_toward_the_large_state_gc() -> None:
    """Thousands of workers are as many objects as a large graph: joining workers freeze the collector's view."""
    import gc

    from distributed.gc_tending import LargeStateGC
    from distributed.scheduler.streams import WORKER_AS_TASKS

    before = gc.get_threshold()
    async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as s:
        s.streams.gc = LargeStateGC(step=2 * WORKER_AS_TASKS)
        async with Worker(s.address, nthreads=1, dashboard=False):
            assert s.streams.gc.frozen_at == 0 and gc.get_freeze_count() == 0
            async with Worker(s.address, nthreads=1, dashboard=False):
                assert s.streams.gc.frozen_at == 2 * WORKER_AS_TASKS and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_scheduler_builds_declared_messages() -> None:
    """No ``{"op": ...}`` literal in the scheduler's modules: each message is built as its declared type."""

    import importlib
    import pkgutil

    import distributed.scheduler as package

    modules = [
        importlib.import_module(f"{package.__name__}.{info.name}") for info in pkgutil.iter_modules(package.__path__)
    ]
    assert len(modules) >= 10
    for mod in modules:
        for node in ast.walk(ast.parse(inspect.getsource(mod))):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                assert "op" not in keys, (mod.__name__, node.lineno)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"services": {"bokeh": (object, 0)}}, "services"),
        ({"http_prefix": "/dask"}, "http_prefix"),
        ({"jupyter": True}, "jupyter"),
    ],
)
def test_unsupported_parameters_are_refused_by_name(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(NotImplementedError, match=rf"Scheduler\({name}="):
        Scheduler(**kwargs)


def test_default_parameters_are_accepted() -> None:
    Scheduler(security=None, services={}, http_prefix="/", jupyter=False)
    Scheduler(services=None, http_prefix=None)


def test_unknown_keyword_raises_type_error() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        Scheduler(no_such_option=1)  # type: ignore[call-arg]  # the point of the test


def _loopback_interface() -> str:
    import socket

    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    pytest.skip("no interface with 127.0.0.1")


@gen_test()
async def test_interface_listens_on_that_interface() -> None:
    async with Scheduler(interface=_loopback_interface(), dashboard=False) as s:
        assert s.address.startswith("tcp://127.0.0.1:")
        comm = await connect(s.address)
        try:
            assert await send_recv(comm, {"op": "who_has", "keys": []}) == {}
        finally:
            comm.abort()


def test_interface_errors() -> None:
    with pytest.raises(ValueError, match="No network interface 'no-such-if0'"):
        Scheduler(interface="no-such-if0")
    with pytest.raises(ValueError, match="give host= or interface=, not both"):
        Scheduler(host="127.0.0.1", interface=_loopback_interface())


async def _map_in_slices(
    c: Client, s: Scheduler, monkeypatch: pytest.MonkeyPatch, on_slice: Callable[[list[Any]], None]
) -> list[Any]:
    """Map three slices' worth of tasks in one graph, ``on_slice`` called with each slice's tasks as it is added.

    The loop turns after every slice, however fast this machine adds them.
    """
    from distributed.scheduler import streams
    from distributed.scheduler.graph import INGEST_SLICE

    monkeypatch.setattr(streams, "STEP_BUDGET", 0.0)

    class Watch(SchedulerPlugin):
        def update_graph(self, scheduler: Scheduler, *, tasks: list[Any], **kwargs: Any) -> None:
            on_slice(tasks)

    await s.add_plugin(Watch(), name="watch")
    n = 3 * INGEST_SLICE
    futures = c.map(inc, range(n), batch_size=n, pure=False)
    await wait(futures)
    return futures


@gen_cluster(client=True)
async def test_large_graph_is_added_in_slices_with_the_loop_running_between(
    c: Client, s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed.scheduler.graph import INGEST_SLICE

    events: list[str] = []
    loop = asyncio.get_running_loop()

    def on_slice(tasks: list[Any]) -> None:
        if not events:
            loop.call_soon(events.append, "loop")
        events.append(f"slice of {len(tasks)}")

    futures = await _map_in_slices(c, s, monkeypatch, on_slice)
    slice_ = f"slice of {INGEST_SLICE}"
    assert events == [slice_, "loop", slice_, slice_]
    assert sum(await c.gather(futures)) == sum(range(1, len(futures) + 1))


@contextlib.asynccontextmanager
async def _identity_requests(s: Scheduler, events: list[str]) -> AsyncIterator[Callable[[], None]]:
    """A plain connection to ``s``, whose ``identity`` requests add "answered" to ``events`` as they are handled.

    Yields what sends one more request.  The connection's first request is
    answered (and its event cleared) before this yields.
    """
    from distributed.core import Route
    from distributed.protocol.framing import dumps

    identity = s.handlers["identity"]

    def answering(comm: Any, msg: Any) -> Any:
        events.append("answered")
        return identity.func(comm, msg)

    s.handlers["identity"] = Route(identity.schema, answering)
    frames = dumps({"op": "identity", "reply": False})
    request = struct.pack(f"<{len(frames) + 1}Q", len(frames), *map(len, frames)) + b"".join(frames)
    host, port = s.address.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request)  # the scheduler takes the connection and waits for what follows
        await async_poll_for(lambda: events == ["answered"], timeout=10)
        events.clear()
        yield lambda: sock.sendall(request)


@gen_cluster(client=True)
async def test_a_request_that_comes_during_a_slice_is_answered_before_the_next(
    c: Client, s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, it waited for two more slices: the next slice ran ahead of the turn's reads."""
    events: list[str] = []
    async with _identity_requests(s, events) as send_request:

        def on_slice(tasks: list[Any]) -> None:
            events.append("slice")
            if len(events) == 1:
                send_request()  # in the scheduler's socket before the slice ends

        await _map_in_slices(c, s, monkeypatch, on_slice)
        assert events == ["slice", "answered", "slice", "slice"]


async def _stream_events(s: Scheduler, a: Worker, batches: list[int]) -> list[str]:
    """What the scheduler did, in order, with keep-alive messages from ``a`` and a request that came meanwhile.

    One write per entry of ``batches`` (that many messages each), all written
    at once, so the scheduler reads them in one go; the request reaches the
    scheduler's socket while the first message is handled.
    """
    from distributed.core import StreamRoute

    events: list[str] = []
    async with _identity_requests(s, events) as send_request:

        def on_keep_alive(msg: Any) -> None:
            events.append("stream")
            if len(events) == 1:
                send_request()  # in the scheduler's socket before this message's handling ends

        s.stream_handlers["keep-alive"] = StreamRoute(m.KeepAlive, on_keep_alive)
        assert a.batched_stream is not None and a.batched_stream.comm is not None
        comm = a.batched_stream.comm
        for n in batches:
            written = comm.write_nowait([m.KeepAlive(op="keep-alive") for _ in range(n)])
            if not isinstance(written, int):
                await written
        await async_poll_for(lambda: len(events) == sum(batches) + 1, timeout=10)
    return events


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_a_worker_stream_past_its_turn_budget_lets_a_request_in_before_its_next_message(
    c: Client, s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every message of one read from a worker's stream was handled before anything else."""
    from distributed.scheduler import streams

    monkeypatch.setattr(streams, "WORKER_TURN_BUDGET", 0.0)
    events = await _stream_events(s, a, [1, 1])
    assert events == ["stream", "answered", "stream"]
    assert await c.submit(inc, 1) == 2


async def _batch_events(s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch, large: bool) -> list[str]:
    """Six messages of a worker's stream in one batch; a request comes during the first.

    A small state's long batches go in slices of 6 (the whole batch), a large one's in slices of 2;
    ``large``: the scheduler's state counts as large.
    """
    from distributed.scheduler import streams

    monkeypatch.setattr(streams, "_BATCH_SLICE", 6)
    monkeypatch.setattr(streams, "_LARGE_STATE_BATCH_SLICE", 2)
    monkeypatch.setattr(streams, "LARGE_STATE_TASKS", -1 if large else 10**9)
    return await _stream_events(s, a, [6])


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_a_large_state_handles_a_long_batch_in_shorter_slices(
    c: Client, s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a batch went in slices of the same length whatever the scheduler held."""
    events = await _batch_events(s, a, monkeypatch, large=True)
    assert events == ["stream", "stream", "answered", "stream", "stream", "stream", "stream"]
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_a_small_state_handles_a_batch_of_one_slice_in_one_go(
    c: Client, s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = await _batch_events(s, a, monkeypatch, large=False)
    assert events == ["stream"] * 6 + ["answered"]
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True)
async def test_results_handled_a_turn_budget_at_a_time_all_arrive_in_order(
    c: Client, s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every message of a worker's stream waits for a turn of the loop: none is lost or reordered."""
    from distributed.scheduler import streams

    monkeypatch.setattr(streams, "WORKER_TURN_BUDGET", 0.0)
    monkeypatch.setattr(streams, "_BATCH_SLICE", 3)
    futures = c.map(inc, range(300), pure=False)
    assert await c.gather(futures) == list(range(1, 301))
    total = c.submit(sum, futures)
    assert await total == sum(range(1, 301))


@gen_cluster(client=True)
async def test_result_type_names_are_one_string_per_type(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(20), pure=False)
    await wait(futures)
    types = [s.tasks[f.key].type for f in futures]
    assert types == ["int"] * 20
    assert len({id(t) for t in types}) == 1


@gen_cluster(client=True, config={"distributed.scheduler.no-workers-timeout": "200ms"})
async def test_a_task_no_worker_can_run_errs_after_the_no_workers_timeout(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    from distributed.exceptions import NoValidWorkerError

    future = c.submit(inc, 1, workers=["tcp://127.0.0.9:1"], allow_other_workers=False)
    with pytest.raises(NoValidWorkerError, match="no-workers-timeout"):
        await future
    assert await c.submit(inc, 2) == 3  # the cluster goes on


def raises_value_error(x: int) -> int:
    raise ValueError(f"bad {x}")


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.diagnostics.erred-tasks.max-history": 2})
async def test_the_latest_erred_tasks_are_kept(c: Client, s: Scheduler, a: Worker) -> None:
    for i in range(3):
        with pytest.raises(ValueError, match=f"bad {i}"):
            await c.submit(raises_value_error, i, key=f"bad-{i}")
    assert [e.key for e in s.erred_tasks] == ["bad-2", "bad-1"]  # newest first, at most 2
    latest = s.erred_tasks[0]
    assert latest.erred_on == {a.address} and "ValueError: bad 2" in latest.exception_text
    assert "raises_value_error" in latest.traceback_text


class _MemoryOrder(SchedulerPlugin):
    """The keys that reached memory, in order; and how many had when the loop first turned after the first."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.at_first_turn: list[int] = []

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "memory":
            self.order.append(key)
            if len(self.order) == 1:
                asyncio.get_running_loop().call_soon(lambda: self.at_first_turn.append(len(self.order)))


@pytest.mark.timeout(60)
@gen_cluster(client=True, nthreads=[])
async def test_a_long_batch_from_a_worker_is_handled_in_slices_before_its_next_message(c: Client, s: Scheduler) -> None:
    # A worker of our own over TCP, so that we choose how its messages are batched.
    async def serve(comm: Any) -> None:
        with contextlib.suppress(CommClosedError):
            while True:
                await comm.read()

    listener = listen("tcp://127.0.0.1:0", serve)
    await listener.start()
    comm = await connect(s.address)
    try:
        await comm.write(
            {
                "op": "register-worker",
                "address": listener.contact_address,
                "nthreads": 2000,
                "name": "raw",
                "memory_limit": 0,
            }
        )
        assert (await asyncio.wait_for(comm.read(), 5))["status"] == "OK"
        keys: list[Key] = [f"k-{i}" for i in range(1501)]
        futures = c.map(inc, range(1501), key=keys)
        run_ids: dict[Key, int] = {}
        while len(run_ids) < len(keys):
            msgs = await asyncio.wait_for(comm.read(), 10)
            for msg in msgs if isinstance(msgs, (list, tuple)) else [msgs]:
                if msg.get("op") == "compute-task":
                    run_ids[msg["key"]] = msg["run_id"]
        plugin = _MemoryOrder()
        await s.add_plugin(plugin, name="memory-order")

        def finished(key: Key) -> dict[str, Any]:
            now = time.time()
            return {
                "op": "task-finished",
                "key": key,
                "run_id": run_ids[key],
                "nbytes": 28,
                "type": "int",
                "start": now,
                "stop": now,
            }

        # 1,500 results in one batch (more than a slice), then the last in a batch of its own.
        await comm.write([finished(k) for k in keys[:1500]])
        await comm.write([finished(keys[1500])])
        await wait(futures)
        assert plugin.order == keys  # the batch after the long one waited for all of it
        assert plugin.at_first_turn and plugin.at_first_turn[0] <= 1000  # the loop turned between slices
    finally:
        comm.abort()
        listener.stop()
