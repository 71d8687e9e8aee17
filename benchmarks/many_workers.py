"""The ``many_workers`` workload: what a scheduler pays per task, and at rest, as its workers grow in number.

A scheduler started from its command line gets ``workers`` real workers,
packed ``per_process`` to a process (:mod:`benchmarks.worker_pack`), all on
this machine; with ``light=True``, light workers instead
(:mod:`benchmarks.light_workers`: the scheduler's side of real workers,
without their own work), which is how 10,000 fit on two cores. Measured, on
the scheduler process (psutil):

- ``register_s``: from starting the worker processes to the scheduler
  knowing them all;
- ``idle_cpu_pct``: its CPU over ``idle_s`` seconds with every worker
  connected and no work (heartbeats only), as a percentage of one core;
- ``scheduler_info_all``: a client's ``scheduler_info`` listing every worker;
- ``cpu_per_task``: its CPU per task over a ``map`` of ``n`` no-op tasks
  spread over all the workers, each run after the last one's tasks are
  forgotten (their release counted); gated, against the floor of
  :func:`benchmarks.workloads.cpu_per_task_floors`;
- ``cpu_per_task_beyond_idle``: the same, less what the scheduler spends
  idle over the same wall time (``idle_cpu_pct``: heartbeats and periodic
  work, a cost per second of the workers, not per task);
- ``map_wall``: the wall time of that ``map``.

A per-task cost that grows with ``workers`` (comparing cases) is something
the scheduler does per task over all its workers.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from benchmarks import tasks
from benchmarks.clusters import CliCluster, settle

if TYPE_CHECKING:
    from benchmarks.workloads import Metric

__all__ = ["many_workers"]


def many_workers(p: dict[str, Any], repeat: int) -> list[Metric]:
    """Registration time, idle CPU and CPU per task of a scheduler with ``workers`` workers."""
    from benchmarks.workloads import cpu_per_task_floors, metric
    from distributed import wait

    nworkers = int(p.get("workers", 1000))
    per_process = int(p.get("per_process", 250))
    n = int(p.get("n", 20_000))
    idle_s = float(p.get("idle_s", 5.0))
    light = bool(p.get("light", False))
    with CliCluster(nworkers=0, dashboard=False) as cluster:
        client = cluster.client
        t0 = time.monotonic()
        for i, first in enumerate(range(0, nworkers, per_process)):
            count = min(per_process, nworkers - first)
            if light:
                args = ["-m", "benchmarks.light_workers", cluster.address, str(count), f"light{i}"]
            else:
                args = ["-m", "benchmarks.worker_pack", cluster.address, str(count), "1", f"pack{i}"]
            cluster.spawn(args, f"pack-{i}.log")
        client.wait_for_workers(nworkers, timeout=max(120.0, nworkers / 10))
        register_s = time.monotonic() - t0
        settle(client, timeout=120)
        time.sleep(min(idle_s, 2.0))  # the last registrations' follow-ups (first heartbeats) pass
        c0, w0 = cluster.scheduler_cpu(), time.monotonic()
        time.sleep(idle_s)
        idle_pct = 100 * (cluster.scheduler_cpu() - c0) / (time.monotonic() - w0)
        info_s: list[float] = []
        for _ in range(3):
            t0 = time.perf_counter()
            info = client.scheduler_info(n_workers=-1)
            info_s.append(time.perf_counter() - t0)
            assert len(info["workers"]) == nworkers, len(info["workers"])
        per_task: list[float] = []
        beyond_idle: list[float] = []
        walls: list[float] = []
        for i in range(repeat + 1):
            settle(client, timeout=120)
            c0, w0 = cluster.scheduler_cpu(), time.perf_counter()
            wait(client.map(tasks.noop, range(n), pure=False))
            wall = time.perf_counter() - w0
            settle(client, timeout=120)
            if i > 0:  # the first is a warm-up
                cpu = cluster.scheduler_cpu() - c0
                per_task.append(cpu / n)
                # What the same time would have cost idle (heartbeats, periodic work) taken out.
                beyond_idle.append((cpu - idle_pct / 100 * (time.perf_counter() - w0)) / n)
                walls.append(wall)
    note = f"{nworkers} {'light ' if light else ''}workers, {per_process} to a process"
    return [
        metric("register_s", "s", [register_s], note=note),
        metric("idle_cpu_pct", "%", [idle_pct], note=f"scheduler CPU over {idle_s:g} s idle, % of one core"),
        metric("scheduler_info_all", "s", info_s, note="client.scheduler_info(n_workers=-1): every worker"),
        metric(
            "cpu_per_task",
            "s",
            per_task,
            cpu_per_task_floors(n, repeat),
            gate=True,
            note=f"scheduler CPU / tasks of a {n}-task map over {nworkers} workers; floor: whole-process CPU / tasks",
        ),
        metric(
            "cpu_per_task_beyond_idle",
            "s",
            beyond_idle,
            note="cpu_per_task less the idle CPU rate over the same wall time (what the workers cost per second)",
        ),
        metric("map_wall", "s", walls),
    ]
