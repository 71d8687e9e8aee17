"""Noticing a silent worker in seconds (see :mod:`distributed.liveness`), and never a busy one.

With real processes: a worker process stopped under its nanny is removed
within 2 s and its tasks run elsewhere; workers whose tasks hold the GIL, with
or without a nanny, are never removed.  A host whose link is cut is in
``test_multihost.py``.  In process: links are shared, malformed messages close
a link and nothing else, and the config is read and checked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any, cast

import dask
import pytest

from distributed import Client
from distributed.comm import connect
from distributed.liveness import process_token
from distributed.protocol import liveness_messages as lm
from distributed.scheduler import Scheduler
from distributed.scheduler.liveness import LivenessSettings
from distributed.utils_test import async_poll_for, captured_logger, cluster, gen_cluster, inc, poll_for, slowinc
from distributed.worker import Worker

REMOVALS = {"worker-stopped", "worker-host-unreachable", "worker-ttl-timed-out"}


def hold_gil(seconds: int) -> int:
    """Sleep in C without letting go of the GIL (a ``ctypes.PyDLL`` call keeps it): no other thread runs."""
    import ctypes

    ctypes.PyDLL(None).sleep(seconds)
    return seconds


def removals(c: Client) -> list[tuple[float, dict[str, Any]]]:
    """The scheduler's events that removed a worker for silence, with their times."""
    events = cast(list[tuple[float, Any]], c.get_events("scheduler"))  # a blocking client: the list itself
    return [(t, e) for t, e in events if isinstance(e, dict) and e.get("action") in REMOVALS]


@pytest.mark.timeout(120)
def test_a_stopped_worker_is_removed_within_2_s_and_its_tasks_run_elsewhere() -> None:
    # Real processes: the scheduler, four nannies, each with its worker.
    with cluster(nworkers=4, nanny=True) as (s, workers), Client(s["address"], timeout=30) as c:
        nannies = {w["nanny"] for w in workers}
        futures = c.map(slowinc, range(400), delay=0.05, pure=False)
        poll_for(lambda: sum(f.done() for f in futures) >= 20, timeout=30, what="the map to get going")
        processing = c.processing()
        victim = max(processing, key=lambda w: len(processing[w]))
        assert processing[victim], "the victim runs nothing: the test would show nothing"
        pid = c.run(os.getpid, workers=[victim])[victim]

        stopped_at = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            poll_for(lambda: victim not in c.scheduler_info()["workers"], timeout=10, what="the worker's removal")
            [(removed_at, event)] = removals(c)
        finally:
            with contextlib.suppress(ProcessLookupError):  # its nanny replaces it: it may be gone already
                os.kill(pid, signal.SIGCONT)
        assert event["action"] == "worker-stopped" and list(event["workers"]) == [victim]
        assert "stopped for" in str(event["reason"])
        assert removed_at - stopped_at < 2.0, f"removed {removed_at - stopped_at:.2f} s after SIGSTOP"

        # Its tasks ran elsewhere; every result is right, and its nanny started a new worker.
        assert c.gather(futures) == [i + 1 for i in range(400)]
        poll_for(lambda: len(c.scheduler_info()["workers"]) == 4, timeout=30, what="the replacement worker")
        info = c.scheduler_info()["workers"]
        assert victim not in info and {w["nanny"] for w in info.values()} == nannies


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [True, False])
def test_workers_whose_tasks_hold_the_gil_are_never_removed(nanny: bool) -> None:
    with cluster(nworkers=2, nanny=nanny) as (s, workers), Client(s["address"], timeout=30) as c:
        addresses = sorted(w["address"] for w in workers)
        c.run(lambda: None)  # every worker answers before the GIL is taken
        # Two holds of 4 s in a row on each worker: 8 s during which its event loop and threads are frozen,
        # eight times the liveness timeout.
        holds = [c.submit(hold_gil, 4, workers=[w], pure=False, key=f"hold-{w}-{i}") for w in addresses for i in (0, 1)]
        assert c.gather(holds) == [4] * 4
        assert removals(c) == []
        assert sorted(c.scheduler_info()["workers"]) == addresses
        assert c.submit(inc, 1, pure=False).result(timeout=30) == 2


@pytest.mark.timeout(60)
def test_a_stopped_worker_left_to_its_ttl_when_liveness_is_off() -> None:
    off = {"distributed.scheduler.liveness.enabled": False}
    with (
        cluster(nworkers=1, nanny=True, config=off, scheduler_kwargs={"worker_ttl": "3s"}) as (s, workers),
        Client(s["address"], timeout=30) as c,
    ):
        victim = workers[0]["address"]
        pid = c.run(os.getpid)[victim]
        stopped_at = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            poll_for(lambda: victim not in c.scheduler_info()["workers"], timeout=30, what="the worker's removal")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        [(removed_at, event)] = removals(c)
        # Not the nanny's report (0.5 s): the ttl, counted from the last heartbeat (every 0.5 s) before the stop.
        assert event["action"] == "worker-ttl-timed-out" and removed_at - stopped_at > 2.0


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_workers_of_one_process_share_one_link(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    await async_poll_for(lambda: set(s.liveness.vouched()) == {a.address, b.address}, timeout=10)
    assert len(s.liveness.links) == 1
    await b.close()
    await async_poll_for(lambda: set(s.liveness.vouched()) == {a.address}, timeout=10)
    assert len(s.liveness.links) == 1


@gen_cluster(nthreads=[])
async def test_a_malformed_liveness_message_closes_its_link_only(s: Scheduler) -> None:
    comm = await connect(s.address)
    try:
        await comm.write(lm.LivenessHello(op="liveness", process="another-process"))
        reply = await comm.read()
        assert reply == {"status": "OK", "watch": True, "stopped_timeout": 0.5, "ping_interval": 0.25}
        with captured_logger("distributed.scheduler.liveness") as log:
            await comm.write({"op": "stopped", "workers": ["tcp://127.0.0.1:1"]})  # no seconds
            with pytest.raises(Exception, match="closed"):
                while True:  # pings, then the end
                    assert await comm.read() == {"op": "ping"}
        assert "Closing the liveness link" in log.getvalue() and "'seconds'" in log.getvalue()
    finally:
        comm.abort()
    await async_poll_for(lambda: not s.liveness.links, timeout=10)
    async with Worker(s.address, nthreads=1) as w, Client(s.address, asynchronous=True) as c:
        assert await c.submit(inc, 1) == 2
        await async_poll_for(lambda: w.address in s.liveness.vouched(), timeout=10)


@gen_cluster(nthreads=[], config={"distributed.scheduler.liveness.enabled": False})
async def test_liveness_off_watches_nothing(s: Scheduler) -> None:
    comm = await connect(s.address)
    try:
        await comm.write(lm.LivenessHello(op="liveness", process=process_token()))
        assert (await comm.read())["watch"] is False
    finally:
        comm.abort()
    async with Worker(s.address, nthreads=1) as w:
        await async_poll_for(lambda: w._voucher is not None and w._voucher.watched is False, timeout=10)
        assert not s.liveness.links


def test_liveness_settings_from_config() -> None:
    with dask.config.set(
        {"distributed.scheduler.liveness.timeout": "3s", "distributed.scheduler.liveness.interval": 0.1}
    ):
        assert LivenessSettings.from_config() == LivenessSettings(True, 0.1, 3.0, 0.5)
    with dask.config.set({"distributed.scheduler.liveness.timeout": 0}):
        with pytest.raises(ValueError, match="distributed.scheduler.liveness.timeout"):
            LivenessSettings.from_config()
