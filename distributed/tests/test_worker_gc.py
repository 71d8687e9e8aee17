"""A worker alone in its process tends the garbage collector as its state grows; one sharing a process does not."""

from __future__ import annotations

import gc
from typing import Any

from distributed import Client, LocalCluster, Scheduler, Worker, wait
from distributed.gc_tending import GC_FREEZE_STEP
from distributed.utils_test import gen_test, inc


def _gc_view(dask_worker: Any) -> dict[str, Any]:
    tending = dask_worker.gc_tending
    return {
        "tending": tending is not None,
        "frozen_at": tending.frozen_at if tending is not None else None,
        "frozen": gc.get_freeze_count(),
        "tasks": len(dask_worker.state.tasks),
    }


def test_a_worker_in_its_own_process_freezes_the_collectors_view_as_it_grows() -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        [view] = client.run(_gc_view).values()
        assert view["tending"] and view["frozen"] > 0  # the start's objects, out of view
        assert view["frozen_at"] == 0
        futures = client.map(inc, range(GC_FREEZE_STEP + 500), pure=False)
        wait(futures)
        [view] = client.run(_gc_view).values()
        assert view["tasks"] >= GC_FREEZE_STEP
        assert view["frozen_at"] >= GC_FREEZE_STEP  # frozen once the held tasks grew by a step
        assert client.gather(futures[:3]) == [1, 2, 3]


@gen_test()
async def test_a_worker_sharing_its_process_leaves_the_collector_alone() -> None:
    before = (gc.get_threshold(), gc.get_freeze_count())
    async with Scheduler(port=0, dashboard=False) as s, Worker(s.address, nthreads=1, dashboard=False) as w:
        async with Client(s.address, asynchronous=True) as c:
            await wait(c.map(inc, range(100)))
        assert w.gc_tending is None
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
