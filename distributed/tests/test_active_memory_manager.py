"""The active memory manager: ReduceReplicas, RetireWorker, policies from config, and ``Client.amm``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import dask.config
import pytest

from distributed import Client, Event, Scheduler, Worker, wait
from distributed.active_memory_manager import (
    ActiveMemoryManagerExtension,
    ActiveMemoryManagerPolicy,
    ReduceReplicas,
    RetireWorker,
    Suggestion,
)
from distributed.utils_test import async_poll_for, gen_cluster, inc

NTHREADS3 = [("127.0.0.1", 1)] * 3
#: The manager only runs when a test says so.
MANUAL = {"distributed.scheduler.active-memory-manager.start": False}


def holders(s: Scheduler, key: Any) -> set[str]:
    return {ws.address for ws in s.tasks[key].who_has}


def wait_on(ev: Event, x: int) -> int:
    ev.wait()
    return x


@gen_cluster(client=True, nthreads=NTHREADS3, config=MANUAL)
async def test_reduce_replicas_drops_all_but_one(c: Client[Literal[True]], s: Scheduler, *workers: Worker) -> None:
    amm = s.extensions["amm"]
    assert isinstance(amm, ActiveMemoryManagerExtension) and not amm.running
    assert [type(p) for p in amm.policies] == [ReduceReplicas]
    x = c.submit(inc, 1, key="x")
    await wait(x)
    await c.replicate([x], n=3)
    assert len(holders(s, "x")) == 3 and s.tasks["x"] in s.replicated_tasks
    await c.amm.run_once()
    await async_poll_for(lambda: sum("x" in w.data for w in workers) == 1, 10)
    assert len(holders(s, "x")) == 1
    assert await x == 2
    # A second pass has nothing to do, and forgets the task from its walk list.
    await c.amm.run_once()
    assert len(holders(s, "x")) == 1 and s.tasks["x"] not in s.replicated_tasks


@gen_cluster(client=True, nthreads=NTHREADS3, config=MANUAL)
async def test_reduce_replicas_keeps_the_copy_a_running_task_reads(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, w3: Worker
) -> None:
    ev = Event()
    x = c.submit(inc, 1, key="x", workers=[a.address])
    await wait(x)
    y = c.submit(wait_on, ev, x, key="y", workers=[b.address])
    await async_poll_for(lambda: "x" in b.data and s.tasks["y"].state == "processing", 10)
    await c.replicate([x], n=3)
    assert len(holders(s, "x")) == 3
    await c.amm.run_once()
    await async_poll_for(lambda: "x" not in a.data and "x" not in w3.data, 10)
    assert holders(s, "x") == {b.address}
    await ev.set()
    assert await y == 2


@gen_cluster(client=True, nthreads=NTHREADS3, config=MANUAL)
async def test_retire_worker_policy_moves_unique_keys(c: Client[Literal[True]], s: Scheduler, *workers: Worker) -> None:
    a = workers[0]
    futures = c.map(inc, range(5), workers=[a.address])
    await wait(futures)
    keys = [f.key for f in futures]
    assert all(holders(s, k) == {a.address} for k in keys)
    amm = s.extensions["amm"]
    policy = RetireWorker(a.address)
    amm.add_policy(policy)
    assert not policy.done()
    amm.run_once()
    await async_poll_for(policy.done, 10)
    assert all(len(holders(s, k)) == 2 for k in keys)
    amm.run_once()  # nothing left to move: the policy leaves
    assert policy not in amm.policies
    # ReduceReplicas would now drop one of two copies: the retiring worker's is as good as any.
    assert await c.gather(futures) == list(range(1, 6))


@gen_cluster(
    client=True,
    nthreads=NTHREADS3,
    config={"distributed.scheduler.active-memory-manager.interval": "50ms"},
)
async def test_runs_by_default_and_client_controls(c: Client[Literal[True]], s: Scheduler, *workers: Worker) -> None:
    assert await c.amm.running() is True
    x = c.submit(inc, 1, key="x")
    await wait(x)
    await c.replicate([x], n=3)
    # Every 50 ms the manager drops the extra copies.
    await async_poll_for(lambda: len(holders(s, "x")) == 1, 10)
    await c.amm.stop()
    assert await c.amm.running() is False
    await c.amm.start()
    assert await c.amm.running() is True


class Replicate(ActiveMemoryManagerPolicy):
    """A test policy: one more replica of each key named, once; records what the manager chose."""

    def __init__(self, keys: list[str], times: int = 1) -> None:
        self.keys = keys
        self.times = times
        self.chosen: list[Any] = []

    def run(self) -> Iterator[Any]:  # type: ignore[override]  # a plain iterator is what a generator is
        for key in self.keys:
            ts = self.manager.scheduler.tasks.get(key)
            if ts is None:
                continue
            for _ in range(self.times):
                self.chosen.append((yield ("replicate", ts)))


@gen_cluster(client=True, nthreads=NTHREADS3, config=MANUAL)
async def test_suggestions_spread_and_stop_at_the_cluster(
    c: Client[Literal[True]], s: Scheduler, *workers: Worker
) -> None:
    x = c.submit(inc, 1, key="x", workers=[workers[0].address])
    await wait(x)
    amm = ActiveMemoryManagerExtension(s, [Replicate(["x"], times=3)], register=False, start=False)
    (policy,) = amm.policies
    assert isinstance(policy, Replicate)
    amm.run_once()
    # Two workers lack x: the third suggestion finds no one.
    assert len({ws for ws in policy.chosen if ws is not None}) == 2 and policy.chosen[2] is None
    await async_poll_for(lambda: all("x" in w.data for w in workers), 10)
    assert s.extensions["amm"] is not amm  # register=False leaves the scheduler's own in place


def test_policies_from_config_and_refusals() -> None:
    from distributed.scheduler.amm import _policies_from_config

    spec = [{"class": "distributed.active_memory_manager.RetireWorker", "address": "tcp://1.2.3.4:5"}]
    (policy,) = _policies_from_config(spec)
    assert isinstance(policy, RetireWorker) and policy.address == "tcp://1.2.3.4:5"
    with pytest.raises(TypeError, match="ActiveMemoryManagerPolicy"):
        _policies_from_config([{"class": "collections.OrderedDict"}])
    with pytest.raises(TypeError, match="'class'"):
        _policies_from_config([{"klass": "x"}])
    assert Suggestion("drop", None).candidates is None  # type: ignore[arg-type]  # the tuple's shape only


@gen_cluster(client=True, nthreads=[])
async def test_bad_measure_is_refused_by_name(c: Client[Literal[True]], s: Scheduler) -> None:
    with dask.config.set({"distributed.scheduler.active-memory-manager.measure": "heaviest"}):
        with pytest.raises(ValueError, match="active-memory-manager.measure"):
            ActiveMemoryManagerExtension(s, register=False)
    with pytest.raises(ValueError, match="interval must be positive"):
        ActiveMemoryManagerExtension(s, register=False, interval=0)


@gen_cluster(client=True, nthreads=[], scheduler_kwargs={"extensions": {}})
async def test_client_amm_without_the_extension(c: Client[Literal[True]], s: Scheduler) -> None:
    assert "amm" not in s.extensions
    with pytest.raises(Exception, match="amm_running"):
        await c.amm.running()
