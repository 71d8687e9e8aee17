"""The ``failover`` workload: a scheduler SIGKILLed mid-graph, and another started on its journal.

A scheduler started from its command line with ``--journal``, and
``workers`` workers under nannies (one thread each), all from their command
lines (:class:`~benchmarks.clusters.CliCluster`).  A map of ``n`` tasks runs;
once ``kill_at`` of it has ended, the scheduler is SIGKILLed and another is
started at the same address on the same journal.  Each task notes its
argument and the time it ended in a ledger file, so that:

- ``resume_s``: from the new scheduler listening (its scheduler file
  written) to the first task ending after it;
- ``takeover_s``: the scheduler's own figure for waiting for the workers,
  replaying the journal and opening the workers (from its log);
- ``rerun_finished``: tasks that had ended before the kill (their result held
  by a live worker) and ran again (the bar is none); ``rerun``: every task
  that ran twice (those running at the kill may);
- ``total_s``: the whole map, kill and takeover included; every result is checked.

This project only: the released ``distributed`` has no journal.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.clusters import CliCluster

if TYPE_CHECKING:
    from benchmarks.workloads import Metric

__all__ = ["failover", "ledgered"]


def ledgered(x: int, ledger: str) -> int:
    """Note ``x`` and the time in ``ledger`` (a line per run); return ``x``."""
    with open(ledger, "a") as f:
        f.write(f"{x} {time.time()}\n")
    return x


def _ledger(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    runs = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:  # a line being written as it was read is left out
            runs.append((int(parts[0]), float(parts[1])))
    return runs


def _one_round(n: int, workers: int, kill_at: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        ledger = Path(tmp) / "ledger"
        journal = str(Path(tmp) / "journal.db")
        with CliCluster(nworkers=workers, nthreads=1, dashboard=False, scheduler_args=["--journal", journal]) as c:
            client = c.client
            start = time.monotonic()
            futures = client.map(ledgered, range(n), ledger=str(ledger), pure=False)
            deadline = time.monotonic() + 600
            while len(_ledger(ledger)) < kill_at * n:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the map did not reach {kill_at:.0%}\n{c.log_tail()}")
                time.sleep(0.01)
            c.kill_scheduler()
            at_kill = Counter(x for x, _ in _ledger(ledger))
            c.restart_scheduler()
            listening = time.time()
            results = client.gather(futures)
            total = time.monotonic() - start
            if results != list(range(n)):
                raise AssertionError("wrong results after the takeover")
            runs = _ledger(ledger)
            counts = Counter(x for x, _ in runs)
            after = [t for _, t in runs if t >= listening]
            log = (c.dir / "scheduler-2.log").read_text(errors="replace")
            took = re.search(r"Took over from the journal in ([0-9.]+) s", log)
            return {
                "resume_s": (min(after) - listening) if after else float("nan"),
                "takeover_s": float(took.group(1)) if took else float("nan"),
                "rerun": float(sum(1 for k in counts.values() if k > 1)),
                "rerun_finished": float(sum(1 for x, k in counts.items() if k > at_kill.get(x, 0) and at_kill[x])),
                "total_s": total,
            }


def failover(p: dict[str, Any], repeat: int) -> list[Metric]:
    """Run ``repeat`` rounds (see the module's docstring); parameters ``n``, ``workers``, ``kill_at``."""
    from benchmarks.workloads import metric

    n = int(p.get("n", 100_000))
    workers = int(p.get("workers", 4))
    kill_at = float(p.get("kill_at", 0.5))
    rounds = [_one_round(n, workers, kill_at) for _ in range(repeat)]
    return [
        metric("resume_s", "s", [r["resume_s"] for r in rounds]),
        metric("takeover_s", "s", [r["takeover_s"] for r in rounds]),
        metric("rerun_finished", "tasks", [r["rerun_finished"] for r in rounds]),
        metric("rerun", "tasks", [r["rerun"] for r in rounds]),
        metric("total_s", "s", [r["total_s"] for r in rounds]),
    ]
