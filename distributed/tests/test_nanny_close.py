"""Whether a nanny closes with its worker or starts a new one, on real worker processes.

``Worker.close(nanny=True)`` (the default, so retirement, a lost scheduler and
``close_gracefully()`` too) closes the nanny as well; ``nanny=False``,
``close_gracefully(restart=True)`` and ``lifetime_restart`` leave it running
and it starts a new worker; a crash is still followed by a new worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import dask
import pytest

from distributed import Client, Nanny, Scheduler, Status, Worker
from distributed.spawn import ServerProcess
from distributed.utils_test import async_poll_for, cluster, gen_test, poll_for


async def close_worker(dask_worker: Any, close_nanny: bool) -> None:
    # Spawned: the worker closes after answering the run request.
    dask_worker.spawn(dask_worker.close(nanny=close_nanny, reason="test"))


async def close_gracefully(dask_worker: Any, restart: bool) -> None:
    dask_worker.spawn(dask_worker.close_gracefully(restart=restart, reason="test"))


def own_pid() -> int:
    return os.getpid()


async def new_worker_of(s: Scheduler, nanny: Nanny, old_pid: int | None) -> None:
    """Wait until ``nanny``'s worker is a new process, registered with ``s``."""

    def ready() -> bool:
        addr = nanny.worker_address
        return nanny.pid != old_pid and addr is not None and addr in s.workers and s.workers[addr].pid == nanny.pid

    await async_poll_for(ready, timeout=30)


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_close_nanny_false_starts_a_new_worker_and_true_closes_the_nanny() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        await async_poll_for(lambda: len(s.workers) == 1, timeout=30)
        old = a.pid
        await c.run(close_worker, close_nanny=False)
        await new_worker_of(s, a, old)
        assert a.status == Status.running and a.restarts == 1
        assert await c.submit(own_pid).result() == a.pid
        proc = a.process
        await c.run(close_worker, close_nanny=True)
        await async_poll_for(lambda: a.status == Status.closed, timeout=30)
        assert proc is not None and proc.exitcode == 0 and a.restarts == 1
        await async_poll_for(lambda: not s.workers, timeout=30)


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_close_gracefully_restart_keeps_the_data_and_the_nanny() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Nanny(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        await async_poll_for(lambda: len(s.workers) == 2, timeout=30)
        futures = await c.scatter(list(range(20)), workers=[a.worker_address])
        old = a.pid
        await c.run(close_gracefully, restart=True, workers=[a.worker_address])
        await new_worker_of(s, a, old)
        assert a.status == Status.running and b.status == Status.running
        assert await c.gather(futures) == list(range(20))
        # Without restart, the nanny closes with its worker (and the data stays, on b).
        await c.run(close_gracefully, restart=False, workers=[a.worker_address])
        await async_poll_for(lambda: a.status == Status.closed, timeout=30)
        assert await c.gather(futures) == list(range(20))


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_lifetime_restart_replaces_the_worker_and_keeps_the_data() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1, name="steady") as b,
        Nanny(s.address, nthreads=1, name="mortal", lifetime="1s", lifetime_restart=True) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        await async_poll_for(lambda: len(s.workers) == 2, timeout=30)
        futures = await c.scatter(list(range(20)), workers=[a.worker_address])
        first = a.pid
        await new_worker_of(s, a, first)
        second = a.pid
        assert a.status == Status.running and a.restarts >= 1
        assert await c.gather(futures) == list(range(20))
        # And again: every lifetime, a new worker.
        await new_worker_of(s, a, second)
        assert a.status == Status.running and b.status == Status.running
        assert await c.gather(futures) == list(range(20))


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_lifetime_from_config() -> None:
    lifetime = {"distributed.worker.lifetime.duration": "1s", "distributed.worker.lifetime.restart": True}
    with dask.config.set(lifetime):
        async with (
            Scheduler(host="127.0.0.1", dashboard=False) as s,
            Nanny(s.address, nthreads=1, name="mortal") as a,
            Client(s.address, asynchronous=True) as c,
        ):
            await async_poll_for(lambda: len(s.workers) == 1, timeout=30)
            await new_worker_of(s, a, a.pid)
            assert a.status == Status.running and a.restarts >= 1
            assert await c.submit(sum, [1, 2]) == 3
    # Without a nanny the worker closes at the end of its lifetime (nothing could start it again).
    staggered = {"distributed.worker.lifetime.duration": "1s", "distributed.worker.lifetime.stagger": "0.5s"}
    with dask.config.set(staggered):
        async with Scheduler(host="127.0.0.1", dashboard=False) as s:
            w = await Worker(s.address, nthreads=1)
            assert w.lifetime is not None and 0.5 <= w.lifetime <= 1.5 and not w.lifetime_restart
            await async_poll_for(lambda: w.status == Status.closed, timeout=30)
            await w.close()


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_lost_scheduler_and_shutdown_close_the_nanny() -> None:
    # A scheduler that dies without a word (SIGKILL).
    sched = ServerProcess("scheduler", {"host": "127.0.0.1", "dashboard": False})
    address = await sched.start()
    try:
        a = await Nanny(address, nthreads=1, death_timeout="1s")
        try:
            proc = a.process
            sched.kill()
            # The worker gave up reconnecting after death_timeout: it closed, and its nanny with it.
            await async_poll_for(lambda: a.status == Status.closed, timeout=30)
            assert proc is not None and proc.exitcode == 0 and a.restarts == 0
        finally:
            await a.close()
    finally:
        sched.kill()
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        a = await Nanny(s.address, nthreads=1)
        try:
            async with Client(s.address, asynchronous=True) as c:
                await async_poll_for(lambda: len(s.workers) == 1, timeout=30)
                await c.shutdown()
            await async_poll_for(lambda: a.status == Status.closed, timeout=30)
            assert a.restarts == 0
        finally:
            await a.close()


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_a_crash_with_exit_code_zero_is_restarted() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
    ):
        await async_poll_for(lambda: len(s.workers) == 1, timeout=30)
        old = a.pid
        assert old is not None
        # SIGTERM from outside: the worker closes cleanly (code 0) without closing its nanny.
        os.kill(old, signal.SIGTERM)
        await new_worker_of(s, a, old)
        assert a.status == Status.running
        old = a.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        await new_worker_of(s, a, old)
        assert a.status == Status.running and a.restarts == 2


def test_restart_without_a_nanny_or_a_lifetime_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="lifetime_restart"):
        Worker("tcp://127.0.0.1:8786", lifetime="1s", lifetime_restart=True)
    with pytest.raises(ValueError, match="lifetime_restart.*lifetime="):
        Worker("tcp://127.0.0.1:8786", nanny="tcp://127.0.0.1:8787", lifetime_restart=True)
    with pytest.raises(ValueError, match="lifetime_restart.*lifetime="):
        Nanny("tcp://127.0.0.1:8786", lifetime_restart=True)

    async def main() -> None:
        async with Scheduler(host="127.0.0.1", dashboard=False) as s, Worker(s.address, nthreads=1) as w:
            with pytest.raises(NotImplementedError, match="restart"):
                await w.close_gracefully(restart=True)
            assert w.status == Status.running

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_cluster_with_nannies() -> None:
    with cluster(nworkers=2, nanny=True) as (s, workers), Client(s["address"]) as c:
        assert all(w["nanny"] != w["address"] for w in workers)
        pids = c.run(own_pid)
        assert set(pids) == {w["address"] for w in workers}
        # The nannies run in processes of their own (not this one, not the workers').
        nanny_pids = c.run(own_pid, nanny=True)
        assert os.getpid() not in nanny_pids.values()
        assert not set(nanny_pids.values()) & set(pids.values())
        victim = workers[0]["address"]
        os.kill(pids[victim], signal.SIGKILL)

        def back() -> bool:
            now = {w["pid"] for w in c.scheduler_info()["workers"].values()}
            return len(now) == 2 and pids[victim] not in now

        poll_for(back, timeout=30, what="a new worker process")
        assert c.submit(own_pid).result() in c.run(own_pid).values()
