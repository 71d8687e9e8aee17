"""The ``silent_worker`` workload: how soon a scheduler notices a stopped worker; that it never takes a busy one for it.

A scheduler and four workers, each under a nanny, all started from their
command lines (:class:`~benchmarks.clusters.CliCluster`), one thread each.

- ``kind="sigstop"``: ``repeat`` times, a map of slow tasks runs; once it is
  going, the worker process running the most of it is sent SIGSTOP.
  ``noticed_s`` is the time from the signal to the scheduler no longer
  listing that worker (``scheduler_info``, read every 10 ms); ``give_up_s``
  when it is still listed then.  The map must still give every result right
  (the stopped worker's tasks run elsewhere), and the cluster is back to four
  workers before the next round (the process is sent SIGCONT after).
- ``kind="gil"``: tasks that hold the GIL for ``hold_s`` seconds each (a C
  sleep through ``ctypes.PyDLL``, so no other thread of the worker runs) keep
  every worker busy for ``duration_s``; ``false_removals`` counts the workers
  the scheduler removed meanwhile (the bar is none).

Only the public API is used: a released ``distributed`` runs it too.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Any

from benchmarks.clusters import CliCluster

if TYPE_CHECKING:
    from benchmarks.workloads import Metric

__all__ = ["hold_gil", "silent_worker", "slow_square"]


def slow_square(i: int) -> int:
    """``i * i`` after 50 ms."""
    time.sleep(0.05)
    return i * i


def hold_gil(seconds: int) -> int:
    """Sleep ``seconds`` in C without letting go of the GIL (``ctypes.PyDLL`` keeps it through the call)."""
    import ctypes

    ctypes.PyDLL(None).sleep(seconds)
    return seconds


def _workers(client: Any) -> set[str]:
    return set(client.scheduler_info()["workers"])


def _stop_one(cluster: CliCluster, n: int, give_up_s: float) -> float:
    """One round of ``kind="sigstop"``: seconds from SIGSTOP to the worker's removal (``give_up_s``: not seen)."""
    client = cluster.client
    futures = client.map(slow_square, range(n), pure=False)
    deadline = time.monotonic() + 60
    while sum(f.done() for f in futures) < n // 20:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the map did not get going\n{cluster.log_tail()}")
        time.sleep(0.01)
    processing = client.processing()
    victim = max(processing, key=lambda w: len(processing[w]))
    pid = client.run(os.getpid, workers=[victim])[victim]
    stopped = time.perf_counter()
    os.kill(pid, signal.SIGSTOP)
    try:
        noticed = give_up_s
        while time.perf_counter() - stopped < give_up_s:
            if victim not in _workers(client):
                noticed = time.perf_counter() - stopped
                break
            time.sleep(0.01)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # its nanny ended it
    if client.gather(futures) != [i * i for i in range(n)]:
        raise AssertionError("wrong results after a worker was stopped")
    # Back to four workers: the stopped one's replacement (a worker never noticed is simply woken up).
    client.wait_for_workers(cluster.nworkers, timeout=120)
    return noticed


def _hold_everywhere(cluster: CliCluster, hold_s: int, duration_s: float) -> tuple[int, float]:
    """``kind="gil"``: the workers removed while tasks held the GIL for ``duration_s``, and the seconds held."""
    client = cluster.client
    before = _workers(client)
    rounds = max(1, round(duration_s / hold_s))
    t0 = time.perf_counter()
    futures = [
        client.submit(hold_gil, hold_s, workers=[w], allow_other_workers=False, pure=False)
        for _ in range(rounds)
        for w in sorted(before)
    ]
    removed: set[str] = set()
    while not all(f.done() for f in futures):
        removed |= before - _workers(client)
        time.sleep(0.5)
    held = time.perf_counter() - t0
    removed |= before - _workers(client)
    if client.gather(futures) != [hold_s] * len(futures):
        raise AssertionError("a GIL-holding task gave a wrong result")
    return len(removed), held


def silent_worker(p: dict[str, Any], repeat: int) -> list[Metric]:
    """Seconds to notice a stopped worker (``sigstop``), or workers wrongly removed while busy (``gil``)."""
    from benchmarks.workloads import metric

    kind = str(p.get("kind", "sigstop"))
    with CliCluster(nworkers=4, nthreads=1, dashboard=False) as cluster:
        if kind == "sigstop":
            give_up_s = float(p.get("give_up_s", 30.0))
            n = int(p.get("n", 400))
            noticed = [_stop_one(cluster, n, give_up_s) for _ in range(repeat)]
            missed = sum(t >= give_up_s for t in noticed)
            return [
                metric(
                    "noticed_s",
                    "s",
                    noticed,
                    note=f"SIGSTOP of 1 of 4 workers to its removal; max {max(noticed):.2f} s"
                    + (f", {missed} not noticed within {give_up_s:g} s" if missed else ""),
                )
            ]
        if kind == "gil":
            hold_s = int(p.get("hold_s", 60))
            duration_s = float(p.get("duration_s", 300.0))
            removed, held = _hold_everywhere(cluster, hold_s, duration_s)
            return [
                metric(
                    "false_removals",
                    "workers",
                    [float(removed)],
                    note=f"workers removed while {hold_s} s GIL-holding tasks ran on all 4 for {held:.0f} s",
                )
            ]
    raise ValueError(f"silent_worker: unknown kind {kind!r} (sigstop or gil)")
