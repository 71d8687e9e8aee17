"""``/metrics`` of a real scheduler and real workers, read over HTTP on 127.0.0.1 and parsed with prometheus_client."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections import Counter
from typing import Any

import dask
import dask.array as da
import pytest
from dask.utils import key_split
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import AsyncHTTPClient

from distributed import Client, Scheduler, Worker, futures_of, wait
from distributed.loop_health import LoopHealth
from distributed.spill import SpillBuffer
from distributed.tests.logs import caught_logs, messages
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc

HTTP: dict[str, Any] = {"dashboard": True, "dashboard_address": "127.0.0.1:0"}

#: ``{(sample name, sorted label items): value}`` of one scrape.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(port: int) -> tuple[Samples, dict[str, str], str]:
    """The samples, the family types by name, and the Content-Type of ``/metrics`` at ``port``."""
    r = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/metrics", request_timeout=10)
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(r.body.decode()):
        types.setdefault(family.name, family.type)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types, r.headers["Content-Type"]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def labelled(samples: Samples, name: str, label: str) -> dict[str, float]:
    """The samples of ``name`` by the value of ``label`` (other labels summed over)."""
    out: dict[str, float] = {}
    for (n, items), v in samples.items():
        if n == name:
            key = dict(items)[label]
            out[key] = out.get(key, 0.0) + v
    return out


def port_of(node: Scheduler | Worker) -> int:
    assert node.http_server is not None
    return node.http_server.port


def double(x: Any) -> Any:
    return x * 2


@gen_cluster(client=True, scheduler_kwargs=HTTP, worker_kwargs=HTTP)
async def test_metrics_after_a_computation_with_a_transfer(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    # Results of a dask array held on ``a``, then reduced on ``b``: ``b`` must fetch them from ``a``.
    x = c.persist(da.arange(40_000, chunks=10_000) + 1, workers=[a.address])
    await wait(x)
    held = Counter(key_split(f.key) for f in futures_of(x))
    total = c.compute(x.sum(), workers=[b.address])
    assert await total == sum(range(1, 40_001))

    # The scheduler.
    samples, types, content_type = await scrape(port_of(s))
    assert content_type == CONTENT_TYPE_LATEST
    assert sum(labelled(samples, "dask_scheduler_workers", "state").values()) == 2
    assert value(samples, "dask_scheduler_clients") == 1
    tasks = labelled(samples, "dask_scheduler_tasks", "state")
    assert {"released", "waiting", "no-worker", "queued", "processing", "memory", "erred"} <= set(tasks)
    assert tasks["memory"] >= sum(held.values()) + 1
    for prefix, n in held.items():
        assert value(samples, "dask_scheduler_prefix_tasks", task_prefix_name=prefix, state="memory") == n
        assert value(samples, "dask_scheduler_tasks_compute_seconds_total", task_prefix_name=prefix) > 0
        assert value(samples, "dask_scheduler_tasks_output_bytes_total", task_prefix_name=prefix) >= 4 * 10_000 * n
    assert types["dask_scheduler_prefix_tasks"] == "gauge"
    assert types["dask_scheduler_tasks_compute_seconds"] == "counter"
    assert set(labelled(samples, "dask_scheduler_memory_bytes", "type")) == {"managed", "unmanaged", "spilled"}
    assert value(samples, "dask_scheduler_tick_count_total") > 0
    assert value(samples, "dask_scheduler_tick_duration_maximum_seconds") > 0
    assert "python_info" in types  # prometheus_client's own collectors too
    assert types["python_gc_objects_collected"] == "counter"

    # The worker that fetched, and the one that served.
    b_samples, b_types, _ = await scrape(port_of(b))
    a_samples, _, _ = await scrape(port_of(a))
    fetched = value(b_samples, "dask_worker_transfer_incoming_bytes_total")
    assert fetched >= 4 * 40_000  # four int64 chunks of 10_000, by sizeof
    assert value(b_samples, "dask_worker_transfer_incoming_count_total") >= 1
    assert value(a_samples, "dask_worker_transfer_outgoing_bytes_total") == fetched
    assert value(a_samples, "dask_worker_transfer_outgoing_count_total") >= 1
    # ``b`` sent only the sum to the client (get_data answers clients and workers alike).
    assert 0 < value(b_samples, "dask_worker_transfer_outgoing_bytes_total") < 1000
    assert value(a_samples, "dask_worker_tasks", state="memory") == sum(held.values())
    assert value(b_samples, "dask_worker_threads") == b.nthreads
    memory = labelled(a_samples, "dask_worker_memory_bytes", "type")
    assert memory["managed"] >= 4 * 40_000
    assert memory["unmanaged"] > 0
    assert memory["spilled"] == 0
    assert b_types["dask_worker_transfer_incoming_bytes"] in ("gauge", "counter")

    # The heartbeat carries the transfer totals to the scheduler.
    await a.heartbeat()
    await b.heartbeat()
    samples, _, _ = await scrape(port_of(s))
    assert value(samples, "dask_scheduler_transfer_incoming_bytes_total") == fetched
    sent = value(a_samples, "dask_worker_transfer_outgoing_bytes_total")
    sent += value(b_samples, "dask_worker_transfer_outgoing_bytes_total")
    assert value(samples, "dask_scheduler_transfer_outgoing_bytes_total") == sent
    assert labelled(samples, "dask_scheduler_memory_bytes", "type")["unmanaged"] > 0

    # Released results leave the memory count and are forgotten.
    del x, total
    await async_poll_for(lambda: not s.tasks, 10)
    samples, _, _ = await scrape(port_of(s))
    assert labelled(samples, "dask_scheduler_tasks", "state")["memory"] == 0
    assert value(samples, "dask_scheduler_tasks_forgotten_total") >= sum(held.values()) + 1
    assert not any(n == "dask_scheduler_prefix_tasks" for n, _ in samples)


@gen_cluster(client=True, nthreads=[], scheduler_kwargs=HTTP)
async def test_tick_count_rises(c: Client, s: Scheduler) -> None:
    first = value((await scrape(port_of(s)))[0], "dask_scheduler_tick_count_total")

    async def risen() -> bool:
        return value((await scrape(port_of(s)))[0], "dask_scheduler_tick_count_total") > first

    deadline = time.monotonic() + 10
    while not await risen():
        assert time.monotonic() < deadline, "the tick count did not rise"
        await asyncio.sleep(0.01)
    assert s.loop_health.count > 0
    assert s.loop_health.interval == pytest.approx(0.02)
    assert s.loop_health.cycle == pytest.approx(1.0)


@gen_test()
async def test_a_blocked_loop_is_measured_and_logged() -> None:
    with dask.config.set({"distributed.admin.tick.interval": "10ms", "distributed.admin.tick.limit": "100ms"}):
        async with Scheduler(host="127.0.0.1", port=0, **HTTP) as s:
            await async_poll_for(lambda: s.loop_health.count > 0, 10)
            samples, _, _ = await scrape(port_of(s))
            blocked_before = value(samples, "dask_scheduler_event_loop_blocked_time_seconds_total")
            count = s.loop_health.count
            with caught_logs("distributed.core", logging.INFO) as logged:
                time.sleep(0.3)  # holds the event loop: the stimulus measured here
                await async_poll_for(lambda: s.loop_health.count > count, 10)
            assert any("Event loop was unresponsive in Scheduler for 0.3" in msg for msg in messages(logged))
            samples, _, _ = await scrape(port_of(s))
            assert value(samples, "dask_scheduler_tick_duration_maximum_seconds") >= 0.3
            assert value(samples, "dask_scheduler_event_loop_blocked_time_seconds_total") >= blocked_before + 0.25
            # The maximum is per scrape: the next one no longer sees the blocked tick.
            samples, _, _ = await scrape(port_of(s))
            assert value(samples, "dask_scheduler_tick_duration_maximum_seconds") < 0.3
        assert not s.loop_health.armed


@gen_test()
async def test_each_server_has_its_own_metrics() -> None:
    async with Scheduler(host="127.0.0.1", port=0, **HTTP) as s1, Scheduler(host="127.0.0.1", port=0, **HTTP) as s2:
        async with Worker(s1.address, nthreads=1, **HTTP) as w:
            await async_poll_for(lambda: len(s1.workers) == 1, 10)
            one = labelled((await scrape(port_of(s1)))[0], "dask_scheduler_workers", "state")
            two = labelled((await scrape(port_of(s2)))[0], "dask_scheduler_workers", "state")
            assert sum(one.values()) == 1
            assert sum(two.values()) == 0
            samples, _, _ = await scrape(port_of(w))
            assert value(samples, "dask_worker_threads") == 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], worker_kwargs={**HTTP, "memory_limit": "1 GiB"})
async def test_worker_spill_metrics(c: Client, s: Scheduler, a: Worker) -> None:
    assert isinstance(a.data, SpillBuffer)
    x = c.submit(inc, 1, key="x")
    y = c.submit(inc, 2, key="y")
    await wait([x, y])
    assert a.data.evict() > 0  # spill the least recently used result
    samples, _, _ = await scrape(port_of(a))
    assert value(samples, "dask_worker_spill_count_total", activity="disk_write") == 1
    assert value(samples, "dask_worker_spill_bytes_total", activity="disk_write") > 0
    assert value(samples, "dask_worker_tasks", state="disk") == 1
    assert value(samples, "dask_worker_tasks", state="memory") == 1
    assert labelled(samples, "dask_worker_memory_bytes", "type")["spilled"] > 0
    assert await c.gather([x, y]) == [2, 3]  # reads the spilled one back
    samples, _, _ = await scrape(port_of(a))
    assert value(samples, "dask_worker_spill_count_total", activity="disk_read") >= 1
    assert value(samples, "dask_worker_spill_bytes_total", activity="disk_read") > 0


def test_loop_health_counts_lateness() -> None:
    h = LoopHealth("Test", interval=0.02, limit=1.0, cycle=10.0)
    start = h.last_tick
    assert h.tick(start + 0.02) == pytest.approx(0.02)
    assert h.tick(start + 0.52) == pytest.approx(0.5)
    assert h.count == 2
    assert h.last_duration == pytest.approx(0.5)
    assert h.blocked_total == pytest.approx(0.48)
    assert h.take_maximum() == pytest.approx(0.5)  # not armed: nothing under way
    assert h.take_maximum() == 0.0
    with pytest.raises(ValueError, match="tick.interval"):
        LoopHealth("Test", interval=0.0)
    with pytest.raises(ValueError, match="tick.cycle"):
        LoopHealth("Test", cycle=-1.0)


def test_loop_health_observed_interval_per_cycle() -> None:
    h = LoopHealth("Test", interval=0.1, limit=10.0, cycle=1.0)
    start = h.last_tick
    assert h.interval_observed == 0.1
    for i in range(1, 5):
        h.tick(start + 0.25 * i)  # four ticks of 250 ms fill the cycle
    assert h.interval_observed == pytest.approx(0.25)
    h.tick(start + 1.5)
    assert h.interval_observed == pytest.approx(0.25)  # the next cycle is not over yet
    h.tick(start + 2.0)
    assert h.interval_observed == pytest.approx(0.5)


@pytest.mark.timeout(30)
def test_servers_on_one_loop_share_one_tick_timer() -> None:
    # Each LoopHealth ticking on a timer of its own: a process of 250 workers ran 12,500 timer callbacks a second.
    async def body() -> None:
        loop = asyncio.get_running_loop()
        timers: list[float] = []  # the interval of each tick timer made (asyncio.sleep makes timers too)
        real_call_later = loop.call_later

        def counting_call_later(delay: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            if "Tick" in getattr(callback, "__qualname__", ""):
                timers.append(callback.__self__.interval)
            return real_call_later(delay, callback, *args, **kwargs)

        # Counting the loop's timers: an instance attribute shadows the method.
        loop.call_later = counting_call_later  # type: ignore[method-assign,assignment]
        healths = [LoopHealth(f"Server-{i}", interval=0.01, limit=10.0, cycle=1.0) for i in range(50)]
        try:
            for h in healths:
                h.arm(loop)
            await async_poll_for(lambda: all(h.count >= 5 for h in healths), 10)
            # One timer per tick for all fifty (and a tick or so made while the last ones were checked).
            assert len(timers) <= max(h.count for h in healths) + 2
            assert all(h.armed for h in healths)
        finally:
            for h in healths:
                h.disarm()
        counts = [h.count for h in healths]
        timers.clear()
        # A witness on a timer of its own: five of its ticks are more than five of the stopped timer's.
        witness = LoopHealth("Witness", interval=0.011, limit=10.0, cycle=1.0)
        witness.arm(loop)
        try:
            await async_poll_for(lambda: witness.count >= 5, 10)
        finally:
            witness.disarm()
        assert set(timers) == {0.011} and [h.count for h in healths] == counts  # the last one out stops the timer
        # A server armed again gets a timer again.
        healths[0].arm(loop)
        try:
            await async_poll_for(lambda: healths[0].count > counts[0], 10)
        finally:
            healths[0].disarm()

    asyncio.run(body())


def test_a_loop_whose_servers_never_disarmed_is_freed() -> None:
    # The shared tick timers are kept per loop: the registry may not keep a loop alive.
    loop = asyncio.new_event_loop()
    healths = [LoopHealth(f"Server-{i}", interval=0.01, limit=10.0, cycle=1.0) for i in range(3)]
    for h in healths:
        h.arm(loop)
    freed = weakref.ref(loop)
    loop.close()
    del loop, healths, h
    gc.collect()
    assert freed() is None
