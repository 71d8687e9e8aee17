"""The ``hosts`` workload's map: one no-op map across test hosts and on one of them, side by side.

The issue's bar for the multi-host harness is a ratio: the same graph keeps
its speed within 1.5x when its processes sit on different hosts. Both
clusters have the same shape (a ``dask scheduler``, two one-thread workers
under nannies, a client in a process of its own) and the same code; one is
spread over four test hosts, the other runs all on the first. Rounds of the
two alternate, so that both see the machine as it is at the time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["map_rates"]

_CLIENT = """
    import gc, json, time
    from distributed import Client, wait
    from benchmarks import tasks

    def settle(c):
        gc.collect()
        deadline = time.monotonic() + 30
        while c.run_on_scheduler(tasks.scheduler_task_count) and time.monotonic() < deadline:
            time.sleep(0.02)

    with Client(scheduler_file={scheduler_file!r}, timeout=60) as c:
        c.wait_for_workers(2, timeout=60)
        walls, cpus = [], []
        for i in range({repeat} + 1):
            settle(c)
            c0 = c.run_on_scheduler(tasks.process_cpu)
            t0 = time.perf_counter()
            wait(c.map(tasks.noop, range({n}), pure=False))
            t1 = time.perf_counter()
            settle(c)
            c1 = c.run_on_scheduler(tasks.process_cpu)
            if i:  # the first map warms up
                walls.append(t1 - t0)
                cpus.append((c1 - c0) / {n})
    print(json.dumps({{"walls": walls, "cpus": cpus}}))
"""


def map_rates(hosts: Any, n: int, repeat: int, root: Path, rounds: int = 2) -> dict[str, list[float]]:
    """Tasks a second and scheduler CPU seconds per task of ``n``-task maps, on four hosts and on one.

    ``hosts`` needs four test hosts (``distributed/tests/hosts.py``): spread,
    the scheduler is on the first, the workers on the second and third and
    the client on the fourth; together, all four processes are on the first.
    ``root`` goes on every process's path, for :mod:`benchmarks.tasks`. Each
    of ``rounds`` rounds runs ``repeat`` maps (after one warm-up) on each
    cluster in turn.
    """
    env = {"PYTHONPATH": str(root)}
    s, a, b, c = hosts[0], hosts[1], hosts[2], hosts[3]
    files = {"hosts": hosts.directory / "spread.json", "one_host": hosts.directory / "together.json"}
    placement = {"hosts": (s, (a, b), c), "one_host": (s, (s, s), s)}
    for name, (sched, workers, _) in placement.items():
        sched.scheduler("--scheduler-file", str(files[name]), "--port", "0", "--no-dashboard", env=env)
        for w in workers:
            w.worker("--scheduler-file", str(files[name]), "--nthreads", "1", "--no-dashboard", env=env)
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, (_, _, client) in placement.items():
            code = _CLIENT.format(scheduler_file=str(files[name]), repeat=repeat, n=n)
            got = client.python(code, timeout=600, env=env)
            out.setdefault(f"tasks_per_s_{name}", []).extend(n / w for w in got["walls"])
            out.setdefault(f"cpu_per_task_{name}", []).extend(got["cpus"])
    return out
