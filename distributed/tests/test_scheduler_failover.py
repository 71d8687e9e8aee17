"""A scheduler process SIGKILLed mid-computation, and another started on its journal at the same address.

Real processes: a ``dask scheduler`` with ``--journal``, ``dask worker``
processes (with and without nannies), and a client in the test's process.
Each task appends its argument to a ledger file as it ends, so that a test
can count how many times each ran: a task whose result a live worker held
when the scheduler died must not run again.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from distributed import Client, wait
from distributed.utils import open_port

REPO_ROOT = str(Path(__file__).resolve().parents[2])
THREADS = 2
NWORKERS = 2


class Cluster:
    """A scheduler and workers as processes, each logging to a file; every process killed at the end."""

    def __init__(self, tmp: Path, nanny: bool) -> None:
        self.tmp = tmp
        self.port = open_port("127.0.0.1")
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.journal = str(tmp / "journal.db")
        self.nanny = nanny
        self.procs: list[subprocess.Popen[bytes]] = []
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p),
            "DASK_DISTRIBUTED__SCHEDULER__RECOVERY_TIMEOUT": "5s",
            "DASK_DISTRIBUTED__WORKER__RECONNECT_TIMEOUT": "60s",
        }

    def _start(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=str(self.tmp)
            )
        self.procs.append(proc)
        return proc

    def start_scheduler(self) -> None:
        self.scheduler = self._start(
            [
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-dashboard",
                "--journal",
                self.journal,
            ],
            "scheduler",
        )

    def start_workers(self) -> None:
        for i in range(NWORKERS):
            self._start(
                [
                    "distributed.cli.dask_worker",
                    self.address,
                    "--nthreads",
                    str(THREADS),
                    "--nanny" if self.nanny else "--no-nanny",
                    "--name",
                    f"w{i}",
                ],
                f"worker-{i}",
            )

    def kill_scheduler(self) -> None:
        assert self.scheduler is not None
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait(10)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.tmp.glob("*.log"))

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path, nanny=getattr(request, "param", False))
    try:
        yield c
    finally:
        c.close()


def _poll(predicate: Callable[[], bool], timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout} s\n{cluster.logs()}")
        time.sleep(0.05)


def ledgered(x: int, ledger: str, delay: float) -> int:
    """Sleep ``delay``, note ``x`` in the ledger (one line per run), return ``2 x``."""
    time.sleep(delay)
    with open(ledger, "a") as f:
        f.write(f"{x}\n")
    return 2 * x


def add_all(*xs: int) -> int:
    """The sum of ``xs``."""
    return sum(xs)


def _runs(ledger: Path) -> Counter[int]:
    return Counter(int(line) for line in ledger.read_text().split()) if ledger.exists() else Counter()


def _start(cluster: Cluster) -> Client:
    cluster.start_scheduler()
    cluster.start_workers()
    client = Client(cluster.address, timeout=60)
    client.wait_for_workers(NWORKERS, timeout=60)
    return client


def _take_over(cluster: Cluster, client: Client, ledger: Path, done_before: int) -> Counter[int]:
    """Kill the scheduler once ``done_before`` tasks ended; start another on its journal. Return the runs then."""
    _poll(lambda: sum(_runs(ledger).values()) >= done_before, 60, f"{done_before} tasks run", cluster)
    cluster.kill_scheduler()
    at_kill = _runs(ledger)
    cluster.start_scheduler()
    return at_kill


def _check_runs(at_kill: Counter[int], after: Counter[int], n: int) -> None:
    assert set(after) == set(range(n))
    again = {x for x, count in after.items() if count > 1}
    # Tasks running when the link died may run again (their result went with the old scheduler's order to
    # run them); none that had ended by then, whose result a live worker kept.
    assert len(again) <= NWORKERS * THREADS, again
    finished_then = {x for x, count in at_kill.items() if count}
    rerun = {x for x in again & finished_then if after[x] > at_kill[x]}
    assert len(rerun) <= NWORKERS * THREADS, rerun


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", [False, True], indirect=True, ids=["no-nanny", "nanny"])
def test_map_survives_the_scheduler_killed(cluster: Cluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    n = 200
    with _start(cluster) as client:
        futures = client.map(ledgered, range(n), ledger=str(ledger), delay=0.02)
        at_kill = _take_over(cluster, client, ledger, n // 3)
        assert client.gather(futures) == [2 * x for x in range(n)]
        _check_runs(at_kill, _runs(ledger), n)
        assert _took_over(cluster), cluster.logs()
        # The cluster carries on: a new graph runs on the same workers.
        assert client.submit(add_all, 1, 2).result(timeout=60) == 3
        info = client.scheduler_info()
        assert isinstance(info, dict) and len(info["workers"]) == NWORKERS


@pytest.mark.timeout(240)
def test_tree_reduction_survives_the_scheduler_killed(cluster: Cluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    n, group = 120, 10
    with _start(cluster) as client:
        leaves = client.map(ledgered, range(n), ledger=str(ledger), delay=0.02)
        parts = [client.submit(add_all, *leaves[i : i + group]) for i in range(0, n, group)]
        total = client.submit(add_all, *parts)
        del leaves, parts
        at_kill = _take_over(cluster, client, ledger, n // 2)
        assert total.result(timeout=120) == 2 * sum(range(n))
        _check_runs(at_kill, _runs(ledger), n)


@pytest.mark.timeout(240)
def test_gather_waiting_when_the_scheduler_is_killed_returns_the_results(cluster: Cluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    n = 100
    with _start(cluster) as client:
        done = client.map(ledgered, range(n), ledger=str(ledger), delay=0.0)
        wait(done, timeout=60)
        slow = client.map(ledgered, range(n, 2 * n), ledger=str(ledger), delay=0.05)
        # A gather under way in another thread when the scheduler dies.
        results: list[object] = []
        gatherer = threading.Thread(target=lambda: results.append(client.gather(slow)))
        gatherer.start()
        at_kill = _take_over(cluster, client, ledger, n + 10)
        gatherer.join(120)
        assert not gatherer.is_alive(), cluster.logs()
        assert results == [[2 * x for x in range(n, 2 * n)]]
        assert client.gather(done) == [2 * x for x in range(n)]
        runs = _runs(ledger)
        assert all(runs[x] == 1 for x in range(n)), runs  # finished before the kill, held: never run again
        _check_runs(at_kill, runs, 2 * n)


def _count(value: object) -> int:
    assert isinstance(value, int)
    return value


def _transfers_done(dask_scheduler: Any) -> int:
    return sum(
        1
        for ts in dask_scheduler.tasks.values()
        if isinstance(ts.key, tuple) and str(ts.key[0]).startswith("shuffle-transfer-") and ts.state == "memory"
    )


@pytest.mark.timeout(240)
def test_p2p_shuffle_survives_the_scheduler_killed(cluster: Cluster) -> None:
    import dask

    from distributed.tests.test_shuffle_p2p import as_dask_gives, frame, ordered, slow_identity, to_dask

    pdf = frame(4000)
    with _start(cluster) as client:
        df = to_dask(pdf, 24).map_partitions(slow_identity)
        with dask.config.set({"dataframe.shuffle.method": "p2p"}):
            future = client.compute(df.shuffle("x", npartitions=6))
        _poll(lambda: _count(client.run_on_scheduler(_transfers_done)) >= 6, 60, "the shuffle under way", cluster)
        cluster.kill_scheduler()
        cluster.start_scheduler()
        result = future.result(timeout=180)
        assert ordered(result).equals(ordered(as_dask_gives(pdf)))
        assert _took_over(cluster), cluster.logs()


def _took_over(cluster: Cluster) -> bool:
    """Whether the second scheduler took over from the journal with results the workers held."""
    log = (cluster.tmp / "scheduler.log").read_text(errors="replace")
    found = re.search(r"Took over from the journal in [0-9.]+ s: \d+ messages replayed, (\d+) results kept", log)
    return found is not None and int(found.group(1)) > 0
