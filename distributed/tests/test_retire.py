"""Leaving gracefully: workers retired, scaled down or SIGTERMed hand their only copies over first.

In-process tests drive the scheduler's ``retire_workers``; the others use real
worker processes (``LocalCluster(processes=True)`` with nannies, and the
``dask worker`` command line, signalled by PID).
"""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import dask
import dask.array as da
import psutil
import pytest

from distributed import Client, LocalCluster, Nanny, Scheduler, Worker, WorkerPlugin, wait
from distributed.core import Status, rpc
from distributed.exceptions import NoValidWorkerError
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize
from distributed.scheduler import requests as scheduler_requests
from distributed.tests.test_cli import WORKER, Proc, poll_with_proc, procs, start_scheduler
from distributed.utils import yield_after_io
from distributed.utils_test import async_poll_for, gen_cluster, inc, poll_for, slowinc

__all__ = ["procs"]  # the fixture, imported for the command-line tests


#: Holds a task on its worker thread (workers here run in this process).
_GATE = threading.Event()


def _wait_gate() -> bool:
    return _GATE.wait(10)


def _only_on(s: Scheduler, key: Key, address: str) -> bool:
    return {ws.address for ws in s.tasks[key].who_has} == {address}


# -- Client.retire_workers, in process ---------------------------------------------------
@gen_cluster(client=True)
async def test_retire_hands_off_scattered_and_computed(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([123], workers=[a.address])
    y = c.submit(inc, 1, key="y", workers=[a.address])
    arr = da.arange(40, chunks=10) + 1
    z = c.compute(arr.sum(), workers=[a.address])
    await y
    await z
    assert _only_on(s, x.key, a.address) and _only_on(s, "y", a.address)
    retired = await c.retire_workers([a.address])
    assert list(retired) == [a.address]
    assert a.address not in s.workers
    # The client knows where its keys are now (else it would first try the worker that left).
    assert x.state.workers == [b.address] and y.state.workers == [b.address]
    # Moved, not recomputed: b fetched them (scattered data cannot be recomputed at all).
    assert _only_on(s, x.key, b.address) and _only_on(s, "y", b.address)
    assert "executing" not in _states(b, "y")
    assert await x == 123
    assert await y == 2
    assert await z == sum(range(1, 41))
    assert await c.submit(inc, x) == 124
    await async_poll_for(lambda: a.status.name == "closed", 10)


@gen_cluster(client=True)
async def test_the_client_knows_the_new_holders_when_retire_workers_returns(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    futures = c.map(inc, range(50), workers=[a.address], pure=False)
    await wait(futures)
    await c.retire_workers([a.address])
    # A gather right away goes to the worker holding the data now, not to the one that left.
    assert all(f.state.workers == [b.address] for f in futures)
    assert await c.gather(futures) == list(range(1, 51))


@gen_cluster(client=True)
async def test_retire_with_many_keys_plans_and_waits_in_slices(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slices of 7 keys: planning the copies and waiting for them yield to the event loop many
    # times, while the client releases some of the keys.
    monkeypatch.setattr(scheduler_requests, "COPY_CHECK_SLICE", 7)
    futures = c.map(inc, range(300), workers=[a.address], pure=False)
    await wait(futures)
    kept = futures[20:]
    dropped_keys = {f.key for f in futures[:20]}
    retiring = asyncio.ensure_future(c.retire_workers([a.address]))
    del futures
    retired = await retiring
    assert list(retired) == [a.address]
    assert all(_only_on(s, f.key, b.address) for f in kept)
    assert all(f.state.workers == [b.address] for f in kept)
    assert await c.gather(kept) == list(range(21, 301))
    await async_poll_for(lambda: not dropped_keys & set(s.tasks), 10)


@gen_cluster(client=True)
async def test_retire_passes_over_the_keys_in_slices_before_it_asks_for_copies(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Finding the keys only the retiring worker holds, placing them and sizing each copy are each a
    # pass over all its keys (500,000 held one worker's retirement up for most of a second): each
    # lets the loop turn every COPY_CHECK_SLICE keys before the copies are asked for.
    monkeypatch.setattr(scheduler_requests, "COPY_CHECK_SLICE", 7)
    turns = 0

    async def counting_yield() -> None:
        nonlocal turns
        turns += 1
        await yield_after_io()

    monkeypatch.setattr(scheduler_requests, "yield_after_io", counting_yield)
    futures = c.map(inc, range(300), workers=[a.address], pure=False)
    await wait(futures)
    stream = s.stream_comms[b.address]
    real_send = stream.send
    turns_at_ask: list[int] = []

    def spying_send(*msgs: Any) -> None:
        if any(isinstance(msg, dict) and msg.get("op") == "acquire-replicas" for msg in msgs):
            turns_at_ask.append(turns)
        real_send(*msgs)

    monkeypatch.setattr(stream, "send", spying_send)
    assert list(await c.retire_workers([a.address])) == [a.address]
    assert turns_at_ask and turns_at_ask[0] >= 3 * (300 // 7 - 1)
    assert await c.gather(futures) == list(range(1, 301))


@gen_cluster(client=True)
async def test_retire_without_closing_keeps_the_worker_up(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    retired = await c.retire_workers([a.address], close_workers=False)
    assert list(retired) == [a.address]
    assert a.address not in s.workers
    assert _only_on(s, x.key, b.address)
    assert a.status.name == "running"
    assert await x == 1


@gen_cluster(client=True)
async def test_retire_remove_false_keeps_the_worker_known_but_idle(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    retired = await c.retire_workers([a.address], close_workers=False, remove=False)
    assert list(retired) == [a.address]
    assert s.workers[a.address].status == Status.closing_gracefully
    assert b.address in {ws.address for ws in s.tasks[x.key].who_has}
    # It takes no new tasks.
    futures = c.map(inc, range(20))
    await c.gather(futures)
    assert all(s.tasks[f.key].who_has == {s.workers[b.address]} for f in futures)


@gen_cluster(client=True)
async def test_retire_by_name_and_by_count(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    retired = await c.retire_workers(names=[a.name], close_workers=False)
    assert list(retired) == [a.address]
    assert _only_on(s, x.key, b.address)
    with pytest.raises(TypeError, match="workers= or names="):
        await c.retire_workers([b.address], names=[b.name])
    with pytest.raises(TypeError, match="cannot be combined"):
        await c.retire_workers([b.address], n=1)
    with pytest.raises(TypeError, match="key"):
        await c.retire_workers([b.address], key=lambda ws: ws.host)
    with pytest.raises(TypeError, match="key="):
        await c.retire_workers(key="host")
    with pytest.raises(TypeError, match="attribute"):
        await c.retire_workers(attribute="name")
    with pytest.raises(TypeError, match="bogus"):
        await c.retire_workers(bogus=1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 3)
async def test_retire_n_and_minimum(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, w3: Worker) -> None:
    data = await c.scatter(list(range(6)), broadcast=False)
    # n=2 but minimum=2 of 3: only one goes.
    retired = await c.retire_workers(n=2, minimum=2, close_workers=False)
    assert len(retired) == 1
    assert len(s.workers) == 2
    assert await c.gather(data) == list(range(6))
    # target=1: down to one worker, every value still there.
    retired = await c.retire_workers(target=1, close_workers=False)
    assert len(retired) == 1
    assert len(s.workers) == 1
    assert await c.gather(data) == list(range(6))
    with pytest.raises(ValueError, match="n=-1"):
        await c.retire_workers(n=-1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 3)
async def test_scheduler_retire_workers_and_workers_to_close(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, w3: Worker
) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    # a holds data: the emptier workers are chosen first.
    assert sorted(s.workers_to_close(n=2, attribute="name")) == sorted([b.name, w3.name])
    assert s.workers_to_close(n=1, minimum=3) == []
    with pytest.raises(TypeError, match="key="):
        s.workers_to_close(key="host")  # type: ignore[arg-type]  # a wrong type, refused at run time
    with pytest.raises(ValueError, match="attribute='_secret'"):
        s.workers_to_close(attribute="_secret")
    with pytest.raises(ValueError, match="attribute='bogus'"):
        s.workers_to_close(attribute="bogus")
    with pytest.raises(TypeError, match="attribute"):
        await s.retire_workers(attribute="name")
    with pytest.raises(TypeError, match="bogus"):
        await s.retire_workers(bogus=True)
    _GATE.clear()
    gated = c.submit(_wait_gate, key="gated", workers=[a.address], allow_other_workers=True)
    await async_poll_for(lambda: "gated" in s.tasks and s.tasks["gated"].state == "processing", 10)
    retired = await s.retire_workers(workers=[a.address], stimulus_id="test-retire")
    assert list(retired) == [a.address]
    # close_workers defaults to False on the scheduler, as in dask.
    assert a.status.name == "running"
    assert await x == 1
    # What a was running runs elsewhere, under the caller's stimulus id.
    assert ("gated", "processing", "released", "test-retire") in [e[:4] for e in s.story("gated")]
    _GATE.set()
    assert await gated is True


def _pair_of(ws: Any) -> int:
    """Workers 0 and 1 are one group, 2 and 3 another (a job running two workers)."""
    return int(ws.name) // 2


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_workers_to_close_key_closes_whole_groups(c: Client[Literal[True]], s: Scheduler, *ws: Worker) -> None:
    w0, w1, w2, w3 = ws
    assert [w.name for w in ws] == [0, 1, 2, 3]
    big = await c.scatter([b"x" * 100_000], workers=[w0.address])
    small = await c.scatter([1], workers=[w2.address])
    # One by one, the two empty workers go; by pairs, the pair holding less.
    assert sorted(s.workers_to_close(n=2, attribute="name")) == [1, 3]
    assert sorted(s.workers_to_close(n=2, key=_pair_of, attribute="name")) == [2, 3]
    # n=1 cannot take a whole pair; minimum=3 neither.
    assert s.workers_to_close(n=1, key=_pair_of) == []
    assert s.workers_to_close(n=2, minimum=3, key=_pair_of) == []
    assert sorted(s.workers_to_close(target=2, key=_pair_of)) == sorted([w2.address, w3.address])
    assert sorted(s.workers_to_close(n=2, key=_pair_of, attribute="host")) == ["127.0.0.1"] * 2
    # Over the wire, as a cluster asks it: the callable travels pickled, the attribute as text.
    request = m.WorkersToClose(op="workers_to_close", n=2, key=Serialize(_pair_of), attribute="name")
    async with rpc(s.address) as r:
        assert sorted(await r.call(**request)) == [2, 3]
        assert sorted(await r.call("workers_to_close", n=2, attribute="name")) == [1, 3]
        with pytest.raises(ValueError, match="attribute='_"):
            await r.call("workers_to_close", attribute="__class__")
        # The scheduler's own objects stay in it.
        with pytest.raises(TypeError, match="attribute='has_what'.*only plain values"):
            await r.call("workers_to_close", n=1, attribute="has_what")
        with pytest.raises(TypeError, match="workers_to_close\\(key='host'\\)"):
            await r.call("workers_to_close", key=Serialize("host"))
        with pytest.raises(TypeError, match="retire_workers\\(key='host'\\)"):
            await r.call("retire_workers", key=Serialize("host"))
    # The client's retire_workers(key=...) retires whole groups, their data moved to the others.
    retired = await c.retire_workers(n=2, key=_pair_of, close_workers=False)
    assert sorted(retired) == sorted([w2.address, w3.address])
    assert set(s.workers) == {w0.address, w1.address}
    assert await c.gather(small) == [1]
    assert await c.gather(big) == [b"x" * 100_000]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_scheduler_retire_workers_key_in_process(c: Client[Literal[True]], s: Scheduler, *ws: Worker) -> None:
    futures = await c.scatter(list(range(8)), broadcast=False)
    retired = await s.retire_workers(target=2, key=_pair_of)
    assert sorted(info["name"] for info in retired.values()) in ([0, 1], [2, 3])
    assert len(s.workers) == 2
    assert await c.gather(futures) == list(range(8))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_retire_default_keeps_enough_memory(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # No arguments: idle workers go while the rest keep twice the memory the data needs.
    await c.scatter(list(range(4)))
    retired = await c.retire_workers(close_workers=False)
    assert len(retired) == 1
    assert len(s.workers) == 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_retire_the_last_worker_is_refused_and_it_stays(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    [x] = await c.scatter([42])
    retired = await c.retire_workers([a.address])
    assert retired == {}
    assert s.workers[a.address].status == Status.running
    assert a.status.name == "running"
    assert await x == 42
    # It takes tasks again.
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_retire_with_only_paused_workers_left_is_refused(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    [x] = await c.scatter([42], workers=[a.address])
    # Any process is past 1% of 1 GiB: this worker pauses at its first memory check.
    async with Worker(
        s.address,
        nthreads=1,
        memory_limit="1 GiB",
        memory_pause_fraction=0.01,
        memory_target_fraction=False,
        memory_spill_fraction=False,
        memory_monitor_interval="10ms",
    ) as w:
        await async_poll_for(lambda: w.address in s.workers and s.workers[w.address].status == Status.paused, 10)
        # A paused worker gets no new tasks.
        assert await c.submit(inc, 1, key="on-a") == 2
        assert s.tasks["on-a"].who_has == {s.workers[a.address]}
        retired = await c.retire_workers([a.address])
        assert retired == {}
        assert s.workers[a.address].status == Status.running
        assert _only_on(s, x.key, a.address)
        # Resumed, it can take a's data: a retires.
        w.memory_monitor.pause_fraction = 0.99
        await async_poll_for(lambda: s.workers[w.address].status == Status.running, 10)
        retired = await c.retire_workers([a.address])
        assert list(retired) == [a.address]
        assert _only_on(s, x.key, w.address)
        assert await x == 42


@gen_cluster(client=True)
async def test_retire_all_workers_keeps_those_holding_only_copies(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    retired = await c.retire_workers([a.address, b.address])
    # b holds nothing only it has: it goes; a has nowhere to put x: it stays.
    assert list(retired) == [b.address]
    assert list(s.workers) == [a.address]
    assert await x == 1


@gen_cluster(client=True)
async def test_retire_with_no_data_is_immediate(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    retired = await c.retire_workers([b.address])
    assert list(retired) == [b.address]
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True)
async def test_tasks_restricted_to_the_retired_worker_err(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # One task runs on a (restricted to it), another waits behind it for a thread.
    _GATE.clear()
    running = c.submit(_wait_gate, key="running", workers=[a.address], allow_other_workers=False)
    strict = c.submit(inc, 1, key="strict", workers=[a.address], allow_other_workers=False)
    loose = c.submit(inc, 2, key="loose", workers=[a.address], allow_other_workers=True)
    await async_poll_for(lambda: "running" in s.tasks and s.tasks["running"].state == "processing", 10)
    await c.retire_workers([a.address])
    _GATE.set()
    for fut in (running, strict):
        with pytest.raises(NoValidWorkerError, match=a.address.replace(".", r"\.")):
            await asyncio.wait_for(fut, 10)
    assert await asyncio.wait_for(loose, 10) == 3
    # The cluster keeps computing.
    assert await c.submit(inc, 10) == 11


@gen_cluster(client=True)
async def test_close_gracefully_tells_tasks_waiting_for_it(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    _GATE.clear()
    gate = c.submit(_wait_gate, key="gate", workers=[b.address])
    strict = c.submit(inc, gate, key="after-gate", workers=[a.address], allow_other_workers=False)
    [x] = await c.scatter([3], workers=[a.address])
    await async_poll_for(lambda: "after-gate" in s.tasks and s.tasks["after-gate"].state == "waiting", 10)
    await a.close_gracefully()
    _GATE.set()
    with pytest.raises(NoValidWorkerError, match="no such worker is left"):
        await asyncio.wait_for(strict, 10)
    assert await gate is True
    assert await x == 3
    assert _only_on(s, x.key, b.address)


@gen_cluster(client=True)
async def test_retire_while_computing_loses_nothing(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([5], workers=[a.address])
    futures = c.map(slowinc, range(40), delay=0.01)
    total = c.submit(sum, futures)
    await async_poll_for(lambda: any(f.key in s.tasks and s.tasks[f.key].state == "memory" for f in futures), 10)
    await c.retire_workers([a.address])
    assert await asyncio.wait_for(total, 20) == sum(range(1, 41))
    assert await x == 5


# -- LocalCluster.scale down ----------------------------------------------------------
@pytest.mark.parametrize("processes", [False, True])
@pytest.mark.timeout(120)
def test_scale_down_keeps_data(processes: bool) -> None:
    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        LocalCluster(
            n_workers=3, threads_per_worker=1, processes=processes, dashboard_address=None, memory_limit=0
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(3, timeout=60)
        info = client.scheduler_info()["workers"]
        by_name = {w["name"]: addr for addr, w in info.items()}
        pids = {w["name"]: w["pid"] for w in info.values()}
        leaving = [by_name[1], by_name[2]]
        scattered = client.scatter(list(range(10)), workers=leaving)
        computed = client.map(inc, range(10), workers=leaving, pure=False)
        arr = client.compute((da.ones(100, chunks=10) * 2).sum(), workers=leaving)
        wait(scattered + computed + [arr])
        who = client.who_has(scattered + computed)
        assert all(set(v) <= set(leaving) for v in who.values())

        handles = dict(cluster.workers)
        cluster.scale(1)
        poll_for(lambda: len(client.scheduler_info()["workers"]) == 1, 60)
        assert list(cluster.workers) == [0]
        assert client.gather(scattered) == list(range(10))
        assert client.gather(computed) == list(range(1, 11))
        assert arr.result() == 200
        # The data moved to the remaining worker rather than being recomputed there.
        assert all(list(v) == [by_name[0]] for v in client.who_has(scattered + computed).values())
        keys = [f.key for f in computed]
        ran = client.run(lambda dask_worker: [k for k in keys if "executing" in _states(dask_worker, k)])
        assert ran == {by_name[0]: []}
        if processes:
            # The removed worker processes are gone, and their nannies closed (nothing starts them again).
            for name in (1, 2):
                nanny = handles[name]
                assert isinstance(nanny, Nanny)
                assert nanny.status.name == "closed" and nanny.process is None
            poll_for(lambda: not any(_alive(pids[n]) for n in (1, 2)), 30)
            children = {p.pid for p in psutil.Process().children(recursive=True)}
            assert pids[0] in children and not children & {pids[1], pids[2]}
            assert [w["pid"] for w in client.scheduler_info()["workers"].values()] == [pids[0]]
        assert client.submit(operator.add, 1, 2).result(timeout=30) == 3


def _states(worker: Worker, key: Key) -> list[str]:
    """The states ``key`` went through on ``worker``."""
    assert worker.state is not None
    return [str(e[2]) for e in worker.state.story(key)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(60)
def test_scale_from_a_client_asynchronously() -> None:
    async def main() -> None:
        async with (
            LocalCluster(n_workers=2, processes=False, dashboard_address=None, asynchronous=True) as cluster,
            Client(cluster, asynchronous=True) as client,
        ):
            await client.wait_for_workers(2)
            workers = (await client.scheduler_info())["workers"]
            last = next(a for a, w in workers.items() if w["name"] == 1)
            [x] = await client.scatter([7], workers=[last])
            assert client.cluster is cluster
            await client.cluster.scale(1)
            assert last not in (await client.scheduler_info())["workers"]
            assert list(cluster.workers) == [0]
            assert await x == 7
            assert await client.submit(inc, x) == 8

    asyncio.run(main())


# -- SIGTERM / SIGINT of dask worker ----------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "nanny,sig",
    [(True, signal.SIGTERM), (False, signal.SIGTERM), (True, signal.SIGINT), (False, signal.SIGINT)],
)
def test_signal_retires_dask_worker(
    procs: Callable[..., Proc], tmp_path: Path, nanny: bool, sig: signal.Signals
) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    flags = ["--nthreads", "1"] + ([] if nanny else ["--no-nanny"])
    leaving = procs([*WORKER, address, *flags, "--name", "leaving"], name="leaving")
    staying = procs([*WORKER, address, *flags, "--name", "staying"], name="staying")
    with Client(address, timeout=30) as client:

        def names() -> dict[Any, str]:
            return {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}

        poll_with_proc(lambda: len(names()) == 2, 60, "two workers", leaving)
        addr = names()["leaving"]
        pid = next(w["pid"] for w in client.scheduler_info()["workers"].values() if w["name"] == "leaving")
        [x] = client.scatter([b"scattered" * 100], workers=[addr])
        y = client.submit(inc, 41, key="computed-y", workers=[addr])
        assert y.result(timeout=30) == 42
        assert all(list(v) == [addr] for v in client.who_has([x, y]).values())
        assert leaving.signal_and_wait(sig, timeout=30) == 0, leaving.stderr()
        assert "Traceback" not in leaving.stderr()
        poll_for(lambda: list(names()) == ["staying"], 30)
        assert x.result(timeout=10) == b"scattered" * 100
        assert y.result(timeout=10) == 42
        other = names()["staying"]
        assert all(list(v) == [other] for v in client.who_has([x, y]).values())
        # Moved, not recomputed: the staying worker never ran y.
        story = client.run(lambda dask_worker: [e[2] for e in dask_worker.state.story("computed-y")], workers=[other])
        assert "executing" not in story[other]
        poll_for(lambda: not _alive(pid), 10)
    assert staying.signal_and_wait(signal.SIGTERM, timeout=30) == 0, staying.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
def test_ctrl_c_reaching_the_worker_process_too_still_hands_off(procs: Callable[..., Proc], tmp_path: Path) -> None:
    # A terminal's Ctrl-C sends SIGINT to the whole process group: the nanny's
    # worker process gets it as well as `dask worker`; the data must still move.
    sched, address, _ = start_scheduler(procs, tmp_path)
    leaving = procs([*WORKER, address, "--nthreads", "1", "--name", "leaving"], name="leaving")
    staying = procs([*WORKER, address, "--nthreads", "1", "--name", "staying"], name="staying")
    with Client(address, timeout=30) as client:

        def names() -> dict[Any, str]:
            return {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}

        poll_with_proc(lambda: len(names()) == 2, 60, "two workers", leaving)
        addr = names()["leaving"]
        pid = next(w["pid"] for w in client.scheduler_info()["workers"].values() if w["name"] == "leaving")
        [x] = client.scatter([b"only here" * 100], workers=[addr])
        os.kill(pid, signal.SIGINT)  # the worker process first: it must not close on its own
        assert leaving.signal_and_wait(signal.SIGINT, timeout=30) == 0, leaving.stderr()
        poll_for(lambda: list(names()) == ["staying"], 30)
        assert x.result(timeout=10) == b"only here" * 100
        assert [list(v) for v in client.who_has([x]).values()] == [[names()["staying"]]]
        poll_for(lambda: not _alive(pid), 10)
    assert staying.signal_and_wait(signal.SIGTERM, timeout=30) == 0, staying.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
def test_sigterm_of_the_last_worker_still_exits(procs: Callable[..., Proc], tmp_path: Path) -> None:
    # No other worker to take its data: it exits anyway, within the bound.
    sched, address, _ = start_scheduler(procs, tmp_path)
    worker = procs([*WORKER, address, "--nthreads", "1"], name="worker")
    with Client(address, timeout=30) as client:
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 1, 60, "the worker", worker)
        kept = client.scatter([1])
        assert worker.signal_and_wait(signal.SIGTERM, timeout=30) == 0, worker.stderr()
        assert "No other worker could take the data" in worker.stderr(), worker.stderr()
        # Lost with the worker: it could not be moved anywhere.
        poll_for(lambda: kept[0].status == "error", 10)
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
def test_sigterm_mid_computation_loses_nothing(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    leaving = procs([*WORKER, address, "--nthreads", "2", "--name", "leaving"], name="leaving")
    staying = procs([*WORKER, address, "--nthreads", "2", "--name", "staying"], name="staying")
    with Client(address, timeout=30) as client:
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 2, 60, "two workers", leaving)
        addr = next(a for a, w in client.scheduler_info()["workers"].items() if w["name"] == "leaving")
        scattered = client.scatter(list(range(20)), workers=[addr])
        futures = client.map(slowinc, range(200), delay=0.02)
        total = client.submit(sum, futures)
        poll_for(lambda: sum(f.done() for f in futures) >= 20, 30)
        assert not total.done()
        assert leaving.signal_and_wait(signal.SIGTERM, timeout=30) == 0, leaving.stderr()
        assert total.result(timeout=60) == sum(range(1, 201))
        assert client.gather(futures) == list(range(1, 201))
        assert client.gather(scattered) == list(range(20))
    assert staying.signal_and_wait(signal.SIGTERM, timeout=30) == 0, staying.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


class HoldStart(WorkerPlugin):
    """Holds the start of the worker named ``leaving`` (after it joined the scheduler) until ``path`` exists."""

    name = "hold-start"

    def __init__(self, path: str) -> None:
        self.path = path

    async def setup(self, worker: Worker) -> None:
        # Not a wait for something to happen: the test never writes the file, so the start stays held until SIGTERM.
        while worker.name == "leaving" and not os.path.exists(self.path):
            await asyncio.sleep(0.02)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [True, False])
def test_sigterm_while_starting_still_retires(procs: Callable[..., Proc], tmp_path: Path, nanny: bool) -> None:
    # The worker joined and was given data, but the command has not finished starting it.
    sched, address, _ = start_scheduler(procs, tmp_path)
    flags = ["--nthreads", "1"] + ([] if nanny else ["--no-nanny"])
    staying = procs([*WORKER, address, *flags, "--name", "staying"], name="staying")
    with Client(address, timeout=30) as client:
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 1, 60, "a worker", staying)
        client.register_plugin(HoldStart(str(tmp_path / "go")))
        leaving = procs([*WORKER, address, *flags, "--name", "leaving"], name="leaving")

        def joined() -> str | None:
            return next((a for a, w in client.scheduler_info()["workers"].items() if w["name"] == "leaving"), None)

        addr = poll_with_proc(joined, 60, "the leaving worker to join", leaving)
        [x] = client.scatter([b"early"], workers=[addr])
        assert "at:" not in leaving.stderr()  # the command is still starting it
        assert leaving.signal_and_wait(signal.SIGTERM, timeout=30) == 0, leaving.stderr()
        assert x.result(timeout=10) == b"early"
        assert all(list(v) != [addr] for v in client.who_has([x]).values())
    assert staying.signal_and_wait(signal.SIGTERM, timeout=30) == 0, staying.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
def test_sigterm_exits_in_bounded_time_when_the_scheduler_hangs(
    procs: Callable[..., Proc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    # The worker's bound on retiring: distributed.comm.timeouts.tcp.
    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP", "2s")
    worker = procs([*WORKER, address, "--nthreads", "1", "--no-nanny"], name="worker")
    with Client(address, timeout=30) as client:
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 1, 60, "the worker", worker)
    os.kill(sched.pid, signal.SIGSTOP)
    try:
        assert worker.signal_and_wait(signal.SIGTERM, timeout=20) == 0, worker.stderr()
        assert "Could not retire the worker(s) gracefully" in worker.stderr(), worker.stderr()
    finally:
        os.kill(sched.pid, signal.SIGCONT)
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
