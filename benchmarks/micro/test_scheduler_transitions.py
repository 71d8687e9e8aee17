"""Transitions per second: a 100k-task graph driven straight through ``Scheduler`` methods.

No sockets and no event loop: ``add_worker_state``, ``update_graph`` and then
``task_finished`` for every ``compute-task`` the scheduler hands out, until the
wanted key is in memory.  The figure is scheduler transitions per second of
wall time, as the scheduler's transition counter counts them (every change of
state, processing -> memory and queued -> processing included).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.micro.driving import finish_all

#: Leaves of the binary reduction; the graph has 2 * LEAVES - 1 tasks (~100k).
LEAVES = 50_000
WORKERS = [f"tcp://127.0.0.1:{40000 + i}" for i in range(4)]


def build_graph(leaves: int) -> tuple[dict[str, Any], str]:
    from distributed.protocol import Serialized

    run_spec = Serialized({"s": "pickle"}, [b"x"])
    tasks: dict[str, Any] = {}
    level = [f"leaf-{i}" for i in range(leaves)]
    order = 0
    for k in level:
        tasks[k] = {"run_spec": run_spec, "dependencies": [], "order": order}
        order += 1
    depth = 0
    while len(level) > 1:
        nxt: list[str] = []
        for i in range(0, len(level), 2):
            k = f"sum-{depth}-{i // 2}"
            tasks[k] = {"run_spec": run_spec, "dependencies": level[i : i + 2], "order": order}
            order += 1
            nxt.append(k)
        level = nxt
        depth += 1
    return tasks, level[0]


def drive(tasks: Any, root: str) -> tuple[int, float]:
    """Run the graph to completion; return (transitions, seconds)."""
    from distributed.scheduler import Scheduler

    s = Scheduler(validate=False)
    for addr in WORKERS:
        s.add_worker_state(addr, 2)
    before = s.transition_counter
    t0 = time.perf_counter()
    out = s.update_graph("client-bench", tasks, [root], stimulus_id="bench-graph")
    finished = finish_all(s, out, "bench-finished")
    elapsed = time.perf_counter() - t0
    assert s.tasks[root].state == "memory", s.tasks[root].state
    assert finished == len(tasks)
    return s.transition_counter - before, elapsed


@pytest.mark.timeout(600)
def test_transitions_per_second_100k(benchmark: Any) -> None:
    tasks, root = build_graph(LEAVES)
    results: list[tuple[int, float]] = []

    def run() -> None:
        results.append(drive(tasks, root))

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=0)
    n, secs = min(results, key=lambda r: r[1])
    benchmark.extra_info["tasks"] = len(tasks)
    benchmark.extra_info["transitions"] = n
    benchmark.extra_info["transitions_per_second"] = round(n / secs)
    print(f"\n{len(tasks)} tasks, {n} transitions, best {secs:.2f} s: {n / secs:,.0f} transitions/s")
