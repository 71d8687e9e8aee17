"""Small task functions the workloads run.

They live in their own importable module so workers started as separate
processes (``dask worker`` or spawned ``LocalCluster`` workers) can unpickle
them by reference.
"""

from __future__ import annotations

from typing import Any


def noop(x: Any) -> Any:
    """Return the argument unchanged."""
    return x


def started_at(x: Any) -> float:
    """The wall-clock time the task ran at (the argument is ignored)."""
    import time

    return time.time()


def inc(x: int) -> int:
    return x + 1


def add(x: int, y: int) -> int:
    return x + y


def make_array(nbytes: int) -> Any:
    """A float64 NumPy array of about ``nbytes`` bytes, filled with ones."""
    import numpy as np

    return np.ones(max(nbytes // 8, 1), dtype="f8")


def array_nbytes(x: Any) -> int:
    return int(x.nbytes)


def make_partition(i: int, rows: int) -> Any:
    """One pandas partition for the shuffle workload: an int key and a float value."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    return pd.DataFrame({"k": rng.integers(0, 1_000_000, size=rows), "v": rng.random(rows)})


def wide_partition(i: int, rows: int) -> Any:
    """A partition of an int key and four float columns (40 bytes a row) for the large shuffle."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    columns = {f"v{j}": rng.random(rows) for j in range(4)}
    return pd.DataFrame({"k": rng.integers(0, 1_000_000, size=rows), **columns})


def block_corner(block: Any) -> Any:
    """The top-left element of a block, as a 1x1 array (so a rechunk's output must be built)."""
    return block[:1, :1].copy()


def partition_rows(df: Any) -> int:
    """Rows in a partition (computed after the shuffle, so it cannot be optimised away)."""
    return int(df["k"].to_numpy().size)


def scheduler_task_count(dask_scheduler: Any = None) -> int:
    """How many tasks the scheduler still tracks (run with ``Client.run_on_scheduler``)."""
    return len(getattr(dask_scheduler, "tasks", ()))


def scheduler_tasks_made(dask_scheduler: Any = None) -> int:
    """Tasks the scheduler made so far: held now plus forgotten (held now where it does not count the forgotten)."""
    return len(getattr(dask_scheduler, "tasks", ())) + int(getattr(dask_scheduler, "tasks_forgotten", 0))


def scheduler_longest_tick(dask_scheduler: Any = None) -> float:
    """The scheduler's longest event-loop tick since the last call, in seconds (NaN where it keeps none)."""
    health = getattr(dask_scheduler, "loop_health", None)
    return float(health.take_maximum()) if health is not None else float("nan")


def dashboard_session_count(dask_scheduler: Any = None) -> int:
    """How many page sessions the scheduler's dashboard holds (0 without a dashboard)."""
    board = getattr(dask_scheduler, "dashboard_server", None)
    return int(board.session_count()) if board is not None else 0


def dashboard_update_durations(
    paths: list[str], cpu: bool = False, dask_scheduler: Any = None
) -> dict[str, list[float]] | None:
    """Seconds each periodic update of the pages at ``paths`` took (the last ones kept), by path.

    Wall-clock time, or with ``cpu`` the CPU time of the scheduler's loop.
    None when the scheduler does not record them (another ``distributed``).
    """
    board = getattr(dask_scheduler, "dashboard_server", None)
    ticks = getattr(board, "tick_durations", None)
    return {path: list(ticks(path, cpu=cpu)) for path in paths} if ticks is not None else None


def sleep_slower_on(x: Any, slow_worker: str, seconds: float, factor: float) -> Any:
    """Sleep ``seconds`` (``factor`` times longer on the worker at ``slow_worker``); return ``x``."""
    import time

    from distributed import get_worker

    time.sleep(seconds * factor if get_worker().address == slow_worker else seconds)
    return x


def process_cpu(dask_scheduler: Any = None) -> float:
    """CPU seconds the calling process has used so far, all its threads (run with ``Client.run_on_scheduler``)."""
    import time

    return time.process_time()
