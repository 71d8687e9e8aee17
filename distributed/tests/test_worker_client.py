"""Tasks that launch tasks: ``worker_client``, ``secede`` and ``rejoin`` on real clusters."""

from __future__ import annotations

import asyncio
import threading

import pytest

import distributed
from distributed import Client, LocalCluster, get_worker, worker_client
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker


def double(x: int) -> int:
    return 2 * x


def submit_inc_and_double(x: int) -> int:
    with worker_client() as c:
        y = c.submit(inc, x)
        z = c.submit(double, y)
        return int(y.result()) + int(z.result())


def fib(n: int) -> int:
    if n < 2:
        return n
    with worker_client() as c:
        a = c.submit(fib, n - 1)
        b = c.submit(fib, n - 2)
        return int(a.result()) + int(b.result())


class _Active:
    """Counts the tasks that hold a thread of their worker's pool, and the most at once."""

    def __init__(self, overlap: int = 1) -> None:
        self.changed = threading.Condition()
        self.now = 0
        self.most = 0
        #: How many tasks at once a task holding its thread waits for (until the first time it happens).
        self.overlap = overlap

    def enter(self) -> None:
        with self.changed:
            self.now += 1
            self.most = max(self.most, self.now)
            self.changed.notify_all()

    def leave(self) -> None:
        with self.changed:
            self.now -= 1

    def work(self) -> None:
        """Hold the thread until ``overlap`` tasks held theirs at once (or 10 s), so that an overlap shows."""
        with self.changed:
            self.changed.wait_for(lambda: self.most >= self.overlap, timeout=10)


ACTIVE = _Active()


def counted_fib(n: int) -> int:
    """fib, counting itself active except inside its ``worker_client`` block."""
    ACTIVE.enter()
    try:
        if n < 2:
            # Leaves come many at a time: one holds its thread until another holds one too.
            ACTIVE.work()
            return n
        ACTIVE.leave()
        try:
            with worker_client() as c:
                a = c.submit(counted_fib, n - 1)
                b = c.submit(counted_fib, n - 2)
                result = int(a.result()) + int(b.result())
        finally:
            # After rejoin(): holds a pool thread again.
            ACTIVE.enter()
        return result
    finally:
        ACTIVE.leave()


def test_exported() -> None:
    from distributed import worker_client as from_package
    from distributed.worker_client import worker_client as from_module

    assert from_package is from_module
    assert "worker_client" in distributed.__all__
    assert "local_client" in distributed.__all__


def submit_through_local_client(x: int) -> int:
    with distributed.local_client() as c:
        return int(c.submit(inc, x).result())


@pytest.mark.filterwarnings("ignore:local_client has moved")
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_local_client_is_the_former_name(c: Client, s: Scheduler, a: Worker) -> None:
    with pytest.warns(UserWarning, match="local_client has moved to worker_client"):
        block = distributed.local_client()
    with pytest.raises(ValueError, match="within a task"):
        with block:
            pass
    assert await c.submit(submit_through_local_client, 1) == 2


def test_outside_a_task_raises() -> None:
    with pytest.raises(ValueError, match="within a task"):
        with worker_client():
            pass


@gen_cluster(client=True)
async def test_submit_from_worker(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x, y = c.map(submit_inc_and_double, [10, 20])
    assert await x == 11 + 22
    assert await y == 21 + 42
    # The tasks launched from inside tasks share one client per worker, not one each.
    assert len(s.clients) <= 3


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_recursive_fib_on_one_thread(c: Client, s: Scheduler, a: Worker) -> None:
    assert await c.submit(fib, 10) == 55
    # Every task that launched children told the scheduler it had left its thread.
    assert a.executor.waiting_to_rejoin == 0


@pytest.mark.parametrize("nthreads", [1, 2])
def test_recursive_tasks_never_oversubscribe(nthreads: int) -> None:
    global ACTIVE
    ACTIVE = _Active(overlap=nthreads)

    @gen_cluster(client=True, nthreads=[("127.0.0.1", nthreads)])
    async def run(c: Client, s: Scheduler, a: Worker) -> None:
        assert await c.submit(counted_fib, 9) == 34

    run()
    assert ACTIVE.now == 0
    assert 1 <= ACTIVE.most <= nthreads
    if nthreads == 2:
        assert ACTIVE.most == 2  # both threads were used


GATE = threading.Event()


def wait_for_gate_in_worker_client(separate_thread: bool) -> int:
    with worker_client(separate_thread=separate_thread):
        if not GATE.wait(timeout=20):
            raise TimeoutError("gate never opened")
    return 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_seceded_task_is_long_running_and_frees_its_slot(c: Client, s: Scheduler, a: Worker) -> None:
    GATE.clear()
    try:
        blocked = c.submit(wait_for_gate_in_worker_client, True)
        ws = s.workers[a.address]
        await async_poll_for(lambda: any(ts.key == blocked.key for ts in ws.long_running), timeout=10)
        assert a.state is not None
        assert a.state.tasks[blocked.key].state == "long-running"
        # The worker's one thread is free for other work while the first task waits.
        assert await c.gather(c.map(inc, range(5))) == [1, 2, 3, 4, 5]
        assert not blocked.done()
    finally:
        GATE.set()
    assert await blocked == 1
    assert not ws.long_running


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_separate_thread_false_keeps_the_thread(c: Client, s: Scheduler, a: Worker) -> None:
    GATE.clear()
    try:
        blocked = c.submit(wait_for_gate_in_worker_client, False)
        await async_poll_for(lambda: blocked.key in a.tasks and a.tasks[blocked.key].state == "executing", 10)
        assert await c.submit(inc, 1) == 2
        assert a.tasks[blocked.key].state == "executing"
        assert not s.workers[a.address].long_running
    finally:
        GATE.set()
    assert await blocked == 1


def submit_with_timeout(x: int) -> int:
    with worker_client(timeout="10s") as c:
        return int(c.submit(inc, x).result())


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_timeout_parameter(c: Client, s: Scheduler, a: Worker) -> None:
    assert await c.submit(submit_with_timeout, 1) == 2


async def async_submit(x: int) -> int:
    with worker_client() as c:
        y = c.submit(inc, x)
        return int(await y)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_async_task(c: Client, s: Scheduler, a: Worker) -> None:
    assert await c.submit(async_submit, 1) == 2


def gather_many_levels(depth: int) -> int:
    """A chain: each level submits the next and waits for it."""
    if depth == 0:
        return 0
    with worker_client() as c:
        return int(c.submit(gather_many_levels, depth - 1).result()) + 1


@pytest.mark.timeout(60)
def test_sync_client_in_process_cluster() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            assert c.submit(fib, 8).result(timeout=30) == 21
            assert c.submit(gather_many_levels, 30).result(timeout=30) == 30


@pytest.mark.timeout(90)
def test_worker_processes() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            assert c.submit(fib, 9).result(timeout=60) == 34


def test_secede_outside_a_task_raises_and_rejoin_does_nothing() -> None:
    with pytest.raises(ValueError, match="within a task"):
        distributed.secede()
    distributed.rejoin()


A_GO = threading.Event()
C_GO = threading.Event()


def seceded_then_rejoins() -> str:
    with worker_client():
        if not A_GO.wait(timeout=20):
            raise TimeoutError("A_GO never set")
    ACTIVE.enter()  # rejoined: holds a pool thread again
    ACTIVE.leave()
    return "a"


def holds_the_thread() -> str:
    ACTIVE.enter()
    try:
        if not C_GO.wait(timeout=20):
            raise TimeoutError("C_GO never set")
    finally:
        ACTIVE.leave()
    return "c"


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_rejoin_waits_while_another_task_holds_the_only_thread(c: Client, s: Scheduler, a: Worker) -> None:
    global ACTIVE
    ACTIVE = _Active()
    A_GO.clear()
    C_GO.clear()
    try:
        fa = c.submit(seceded_then_rejoins)
        await async_poll_for(lambda: bool(s.workers[a.address].long_running), timeout=10)
        fc = c.submit(holds_the_thread)
        await async_poll_for(lambda: ACTIVE.now == 1, timeout=10)
        A_GO.set()
        # The first task left its block: it waits for the thread the second holds.
        await async_poll_for(lambda: a.executor.waiting_to_rejoin == 1, timeout=10)
        assert not fa.done()
    finally:
        A_GO.set()
        C_GO.set()
    assert await c.gather([fa, fc]) == ["a", "c"]
    assert ACTIVE.most == 1


def run_then_secede() -> int:
    """Hold the thread until A_GO, then wait in a worker_client block until C_GO."""
    if not A_GO.wait(timeout=20):
        raise TimeoutError("A_GO never set")
    with worker_client():
        if not C_GO.wait(timeout=20):
            raise TimeoutError("C_GO never set")
    return 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_seceded_task_leaves_the_workers_occupancy(c: Client, s: Scheduler, a: Worker) -> None:
    A_GO.clear()
    C_GO.clear()
    try:
        fut = c.submit(run_then_secede)
        ws = s.workers[a.address]
        await async_poll_for(lambda: bool(ws.processing), timeout=10)
        assert ws.occupancy == pytest.approx(s.unknown_duration)  # a task not seen before
        A_GO.set()
        await async_poll_for(lambda: bool(ws.long_running), timeout=10)
        # It holds no thread: new work should not count it as load.
        assert ws.occupancy == 0
    finally:
        A_GO.set()
        C_GO.set()
    assert await fut == 1
    assert ws.occupancy == 0


def nested_blocks(x: int) -> int:
    with worker_client() as outer:
        with worker_client() as inner:
            y = int(inner.submit(inc, x).result())
        # Still inside the outer block: the task must not hold the only thread here.
        return int(outer.submit(inc, y).result())


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], timeout=20)
async def test_nested_blocks_rejoin_only_on_leaving_the_outermost(c: Client, s: Scheduler, a: Worker) -> None:
    assert await c.submit(nested_blocks, 1) == 3
    assert a.executor.waiting_to_rejoin == 0


async def async_block_then_submit(x: int) -> int:
    with worker_client() as c:
        return int(await c.submit(inc, x))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], timeout=20)
async def test_concurrent_coroutine_tasks_each_leave_their_slot(c: Client, s: Scheduler, a: Worker) -> None:
    # Coroutine tasks interleave on the event loop's one thread; each gives its slot up for its block.
    assert await c.gather(c.map(async_block_then_submit, range(4))) == [1, 2, 3, 4]
    # Their task state did not stay behind on the event loop's thread (where this test runs).
    with pytest.raises(ValueError):
        get_worker()


async def where_after_awaiting(i: int) -> str:
    await asyncio.sleep(0.01)  # lets the other coroutine tasks on the loop run meanwhile
    return str(get_worker().address)


@gen_cluster(client=True)
async def test_interleaved_coroutine_tasks_see_their_own_worker(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    on_a = c.map(where_after_awaiting, range(6), workers=[a.address])
    on_b = c.map(where_after_awaiting, range(6, 12), workers=[b.address])
    assert await c.gather(on_a) == [a.address] * 6
    assert await c.gather(on_b) == [b.address] * 6
