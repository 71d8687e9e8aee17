"""Workers the scheduler removes for silence (``worker-ttl``): replaced, or back afresh, not left running unknown.

A worker stopped (SIGSTOP, a paused VM, swapping) past the scheduler's
``worker-ttl`` is removed and its work runs elsewhere.  Its nanny is asked to
replace it; and a worker that wakes up finds its stream closed, or hears from
its heartbeat that the scheduler no longer knows it.  Not asked to close, it
takes that for a lost scheduler: it registers again (within ``death_timeout``,
else ``distributed.worker.reconnect-timeout``) with what it holds, of which
the scheduler keeps what it still counts on and frees the rest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any, Literal

import pytest

from distributed import Client, Status
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, cluster, gen_cluster, inc, poll_for
from distributed.worker import Worker

TTL = 2.0


@pytest.mark.timeout(90)
def test_a_worker_stopped_past_its_ttl_is_replaced_by_its_nanny() -> None:
    # Real processes: the scheduler, two nannies, and their workers.
    with (
        cluster(
            nworkers=2,
            nanny=True,
            scheduler_kwargs={"worker_ttl": f"{TTL}s"},
            # Else the nanny reports its stopped worker first (see test_liveness.py).
            config={"distributed.scheduler.liveness.enabled": False},
        ) as (s, workers),
        Client(s["address"], timeout=30) as c,
    ):
        nannies = {w["nanny"] for w in workers}
        victim = workers[0]["address"]
        pid = c.run(os.getpid)[victim]

        def registered() -> dict[str, Any]:
            return dict(c.scheduler_info()["workers"])

        stopped = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            poll_for(lambda: victim not in registered(), timeout=10 * TTL, what="the scheduler to remove the worker")
            # The work goes on without it.
            assert c.submit(inc, 1, pure=False).result(timeout=30) == 2
            # Stopped a few times its ttl in all (the scenario, not a wait for something to happen).
            time.sleep(max(0.0, stopped + 3 * TTL - time.monotonic()))
        finally:
            with contextlib.suppress(ProcessLookupError):  # its nanny may have killed it meanwhile
                os.kill(pid, signal.SIGCONT)

        def whole() -> bool:
            info = registered()
            return len(info) == 2 and {w["nanny"] for w in info.values()} == nannies and victim not in info

        # Within seconds of waking (about one on an idle machine: the process start; more under load).  The
        # stopped worker may register again for a moment as it wakes, before its nanny's close takes it away
        # (its stream closes): what counts is where the cluster settles.
        poll_for(whole, timeout=15, what="both nannies' workers to be registered again, the stopped one gone")
        assert victim not in registered()
        assert all(w["proc"]().is_alive() for w in workers), "a nanny closed"
        [new] = set(registered()) - {workers[1]["address"]}
        assert c.submit(inc, 2, workers=[new]).result(timeout=30) == 3


def expire(s: Scheduler, w: Worker) -> None:
    """Make the scheduler take ``w`` for silent past its ttl, now."""
    s.workers[w.address].last_seen = time.time() - 3600
    s._check_worker_ttl()
    assert w.address not in s.workers


# An hour: only expire() makes a worker overdue; the heartbeats keep the others fresh.
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2, scheduler_kwargs={"worker_ttl": "1h"})
async def test_a_removed_worker_registers_again_with_what_it_holds(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # Without a nanny or death_timeout: the worker does not close (reconnect-timeout applies).
    both = c.submit(inc, 1, key="both", workers=[a.address])
    await both
    await c.replicate([both])
    assert "both" in a.data and "both" in b.data
    expire(s, a)
    await async_poll_for(lambda: a.address in s.workers, timeout=10)
    assert a.status == Status.running
    # The scheduler still counts on the key (b holds it too): a's copy is counted again, not freed.
    await async_poll_for(lambda: s.workers[a.address] in s.tasks["both"].who_has, timeout=10)
    assert "both" in a.data and a.tasks["both"].state == "memory"
    assert await c.submit(inc, 1, pure=False, workers=[a.address]).result(timeout=10) == 2


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    scheduler_kwargs={"worker_ttl": "1h"},
    worker_kwargs={"death_timeout": 20},
)
async def test_a_removed_worker_reports_what_it_holds_and_frees_what_was_lost(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    x = await c.scatter(1, workers=[a.address])
    reported: list[list[Any]] = []
    add_worker_state = s.add_worker_state

    def recording_add_worker_state(address: str, *args: Any, **kwargs: Any) -> Any:
        reported.append(list(kwargs.get("keys", ())))
        return add_worker_state(address, *args, **kwargs)

    s.add_worker_state = recording_add_worker_state  # type: ignore[method-assign]  # observe the registration
    expire(s, a)
    await async_poll_for(lambda: a.address in s.workers, timeout=10)
    assert a.status == Status.running
    assert reported == [[x.key]]
    # The scatter was lost with the worker's removal: the scheduler has the worker free it.
    await async_poll_for(lambda: not a.data and not a.tasks, timeout=10)
    assert await c.submit(inc, 1, pure=False).result(timeout=10) == 2
    del x


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    scheduler_kwargs={"worker_ttl": "1h"},
    worker_kwargs={"death_timeout": 20},
)
async def test_a_worker_told_by_its_heartbeat_it_is_unknown_registers_again(c: Client, s: Scheduler, a: Worker) -> None:
    # Removed while its stream stays open (no message on it will tell): the heartbeat's reply does.
    s.send_all(s.remove_worker_state(a.address, stimulus_id="test-forget"))
    await async_poll_for(lambda: a.address in s.workers, timeout=10)
    assert a.status == Status.running
    assert await c.submit(inc, 1, pure=False).result(timeout=10) == 2
