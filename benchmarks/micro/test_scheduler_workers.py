"""Scheduler CPU per task of a map, with 10 workers and with 10,000: its state machine alone, no sockets.

The ``many_workers`` benchmark measures a scheduler process with real
connections, where each worker's messages (a ``compute-task`` write, a
``task-finished`` read, a ``free-keys`` write) add a cost per worker.  This one
drives the same map through ``update_graph``, ``task_finished`` and
``client_releases_keys`` only: a per-task cost that grows with the number of
workers here is the scheduler's own choice of worker, queuing, stealing or
occupancy bookkeeping, not the messages'.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.micro.driving import finish_all

#: Tasks in the map; each worker runs ten of them at 10,000 workers, as in the ``many_workers`` case.
TASKS = 100_000


def run_map(s: Any, tasks: dict[str, Any], keys: list[str], stimulus: str) -> tuple[float, float]:
    """Run the map to completion and release it; (CPU seconds of the map, of the release)."""
    t0 = time.process_time()
    out = s.update_graph("client-bench", tasks, keys, stimulus_id=f"graph-{stimulus}")
    finished = finish_all(s, out, f"finished-{stimulus}")
    t1 = time.process_time()
    out = s.client_releases_keys("client-bench", keys, f"release-{stimulus}")
    t2 = time.process_time()
    assert finished == len(keys), finished
    assert sum(len(k) for k in out.free.values()) == len(keys)
    assert not s.tasks
    return t1 - t0, t2 - t1


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [10, 10_000])
def test_cpu_per_task_of_a_map_by_workers(benchmark: Any, workers: int) -> None:
    from distributed.protocol import Serialized
    from distributed.scheduler import Scheduler

    s = Scheduler(validate=False)
    for i in range(workers):
        s.add_worker_state(f"tcp://10.{i // 65536}.{(i // 256) % 256}.{i % 256}:40000", 1)
    spec = Serialized({"s": "pickle"}, [b"x" * 20])
    runs: list[tuple[float, float]] = []

    def run() -> None:
        n = len(runs)
        keys = [f"noop-{n}-{i:08d}" for i in range(TASKS)]
        tasks = {k: {"run_spec": spec, "dependencies": [], "order": i} for i, k in enumerate(keys)}
        runs.append(run_map(s, tasks, keys, str(n)))

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    map_s, release_s = min(runs, key=sum)
    benchmark.extra_info["workers"] = workers
    benchmark.extra_info["map_us_per_task"] = round(1e6 * map_s / TASKS, 2)
    benchmark.extra_info["release_us_per_task"] = round(1e6 * release_s / TASKS, 2)
    print(f"\n{workers} workers: map {1e6 * map_s / TASKS:.1f} us/task, release {1e6 * release_s / TASKS:.1f} us/task")
