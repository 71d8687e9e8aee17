"""Which workloads run with which parameters in the ``--quick`` and ``--full`` sets."""

from __future__ import annotations

from typing import Any, TypedDict


class Case(TypedDict):
    workload: str
    params: dict[str, Any]
    #: Seconds the whole case (its own subprocess) may take before it is stopped.
    timeout: float
    #: Repeats for this case when ``--repeat`` is not given.
    repeat: int


def case(workload: str, timeout: float, repeat: int = 3, **params: Any) -> Case:
    return Case(workload=workload, params=params, timeout=timeout, repeat=repeat)


#: Small sizes: the whole set runs in about two minutes on two cores.
QUICK: list[Case] = [
    case("map_noop", 60, n=2000, processes=False),
    case("submit_chain", 60, n=200),
    case("array_sum", 60, size=2000, chunks=200),
    case("delayed_tree", 60, depth=10),
    case("dataframe_shuffle", 60, npartitions=20, rows=2000),
    case("transfer", 90, mb=20),
    case("large_graph", 90, repeat=1, n=10_000),
    case("startup", 60, processes=False),
    case("scheduler_cpu_per_task", 90, n=2000),
    # Gated: a scheduler cost per task that grows with the number of workers.
    case("many_workers", 120, repeat=2, workers=1000, per_process=1000, n=20_000, light=True, idle_s=1.0),
]

#: The sizes of the issue.  The 1M-task graph is last: it may hit its timeout.
FULL: list[Case] = [
    case("map_noop", 300, n=10_000, processes=False),
    case("map_noop", 300, n=10_000, processes=True),
    case("map_noop", 300, n=10_000, processes=True, queuing=False),
    case("map_noop", 600, n=50_000, processes=False),
    case("map_noop", 600, n=50_000, processes=True),
    # The speed toward the floor (``targets --set floor``): the 100k-task map three ways.
    case("map_noop", 900, n=100_000, processes=True),
    case("map_noop", 900, n=100_000, processes=True, queuing=False),
    case("map_noop", 900, n=100_000, processes=False),
    case("submit_chain", 300, n=2000),
    case("array_sum", 600, size=20_000, chunks=200),
    case("delayed_tree", 300, depth=13),
    case("dataframe_shuffle", 600, npartitions=100, rows=10_000),
    case("transfer", 300, mb=200),
    case("transfer", 300, mb=200, tls=True),
    # Across test hosts (network namespaces; needs root), links limited to 200 Mbit/s.
    case("hosts", 300, rate_mbit=200, mb=50),
    # The same map across test hosts and on one of them, side by side (unshaped links).
    case("hosts", 600, kind="map", n=20_000),
    case("p2p", 1200, repeat=2, kind="shuffle", mb=1000, npartitions=100),
    case("p2p", 1200, repeat=2, kind="rechunk", mb=1000, npartitions=100),
    # Past memory: 2 GB through workers of 1.5 GB each (the task-based rechunk must spill).
    case("p2p", 1200, repeat=2, kind="rechunk", mb=2000, npartitions=100, memory_limit="1.5GB"),
    case("startup", 300, processes=False),
    case("startup", 300, processes=True),
    case("scheduler_cpu_per_task", 600, n=10_000),
    case("stealing", 300, n=60),
    case("dashboard_cpu", 600, n=10_000),
    case("dashboard_scale", 1200, repeat=2, n=200_000),
    # The scheduler's cost per task and at rest as its workers grow in number (real workers, 250 to a process).
    case("many_workers", 600, repeat=2, workers=10, per_process=10, n=20_000),
    case("many_workers", 900, repeat=2, workers=1000, per_process=250, n=20_000),
    # Light workers (the scheduler's side of real ones): 10 and 10,000 on a 100k-task map.
    case("many_workers", 600, repeat=2, workers=10, per_process=10, n=100_000, light=True),
    case("many_workers", 900, repeat=2, workers=10_000, per_process=1000, n=100_000, light=True),
    # A stopped worker noticed (20 rounds; the bar is 2 s at p99), and none removed while tasks hold the GIL.
    case("silent_worker", 600, repeat=20, kind="sigstop"),
    case("silent_worker", 900, repeat=1, kind="gil", hold_s=60, duration_s=300),
    case("large_graph", 900, repeat=1, n=100_000),
    case("large_graph", 1800, repeat=1, n=1_000_000),
]

SUITES: dict[str, list[Case]] = {"quick": QUICK, "full": FULL}


def case_name(workload: str, params: dict[str, Any]) -> str:
    """A stable name such as ``map_noop[n=2000,processes=False]``."""
    inner = ",".join(f"{k}={params[k]}" for k in sorted(params))
    return f"{workload}[{inner}]"
