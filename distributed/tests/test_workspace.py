"""Work directories of dead processes are removed; those of live ones never are.

Owners are real child processes, killed with SIGKILL by PID (nothing of theirs
runs at exit), on the same machine as the process that purges.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distributed import Client, LocalCluster, Scheduler, Worker
from distributed.tests.logs import caught_logs
from distributed.utils_test import gen_cluster, poll_for
from distributed.workspace import LOCK_SUFFIX, WorkSpace

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="work directories are locked with fcntl.flock")

REPO_ROOT = str(Path(__file__).resolve().parents[2])

OWNER = textwrap.dedent(
    """
    import sys, time
    from distributed.workspace import WorkSpace
    d = WorkSpace(sys.argv[1]).new_work_dir(sys.argv[2])
    with open(d.path + "/spilled", "wb") as f:
        f.write(b"x" * 1000)
    print(d.path, flush=True)
    time.sleep(60)
    """
)

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from distributed import Worker

    async def main():
        async with Worker(
            sys.argv[1],
            nthreads=1,
            local_directory=sys.argv[2],
            memory_limit="1GB",
            memory_target_fraction=0.01,  # 10 MB of results in memory, the rest spilled
            memory_spill_fraction=False,
            memory_pause_fraction=False,
        ) as w:
            print(w.local_directory, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)


PURGER = textwrap.dedent(
    """
    import json, sys
    from distributed.workspace import WorkSpace
    print("ready", flush=True)
    for line in sys.stdin:  # one purge per line, all purgers told at once
        print(json.dumps(WorkSpace(sys.argv[1]).purge()), flush=True)
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def children() -> Iterator[Callable[..., tuple[subprocess.Popen[str], str]]]:
    """Start Python children that print one line (a directory) when ready; all are killed at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(script: str, *args: str) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=_env(),
            cwd=REPO_ROOT,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # pytest-timeout bounds a child that never says
        assert line, f"child exited with {proc.wait()} before it was ready"
        return proc, line

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()


def sigkill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.timeout(60)
def test_directory_of_a_killed_process_is_purged_and_live_ones_stay(
    tmp_path: Path, children: Callable[..., tuple[subprocess.Popen[str], str]]
) -> None:
    base = str(tmp_path / "space")
    victim, victim_dir = children(OWNER, base, "victim")
    _, alive_dir = children(OWNER, base, "alive")
    own = WorkSpace(base).new_work_dir("own")  # this process's: live too
    unlocked = tmp_path / "space" / "not-ours"
    unlocked.mkdir()  # no lock file: never touched
    assert WorkSpace(base).purge() == []  # everyone alive

    sigkill(victim)
    assert os.path.isdir(victim_dir) and os.path.exists(victim_dir + LOCK_SUFFIX)  # left behind
    assert WorkSpace(base).purge() == [victim_dir]
    assert not os.path.exists(victim_dir) and not os.path.exists(victim_dir + LOCK_SUFFIX)
    assert os.path.exists(os.path.join(alive_dir, "spilled")) and os.path.isdir(own.path) and unlocked.is_dir()

    own.release()
    assert not os.path.exists(own.path) and not os.path.exists(own.path + LOCK_SUFFIX)
    own.release()  # idempotent
    assert WorkSpace(base).purge() == []


def test_forgotten_work_dir_is_released(tmp_path: Path) -> None:
    d = WorkSpace(str(tmp_path)).new_work_dir("w")
    path = d.path
    assert os.path.isdir(path)
    del d
    gc.collect()
    assert not os.path.exists(path) and os.listdir(tmp_path) == []


def test_a_name_in_use_is_refused(tmp_path: Path) -> None:
    ws = WorkSpace(str(tmp_path))
    d = ws.new_work_dir("w")
    with pytest.raises(FileExistsError):
        ws.new_work_dir("w")
    assert ws.purge() == [] and os.path.isdir(d.path)
    d.release()


def block(i: int) -> np.ndarray[Any, Any]:
    return np.full(4_000_000 // 8, i, dtype="f8")


@pytest.mark.timeout(90)
def test_next_worker_removes_a_killed_workers_spill_directory(
    tmp_path: Path, children: Callable[..., tuple[subprocess.Popen[str], str]]
) -> None:
    with (
        LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        victim, victim_dir = children(WORKER, cluster.scheduler_address, str(tmp_path))
        _, alive_dir = children(WORKER, cluster.scheduler_address, str(tmp_path))
        c.wait_for_workers(2, timeout=30)
        victim_addr = next(a for a, w in c.scheduler_info()["workers"].items() if w["pid"] == victim.pid)
        futs = c.map(block, range(8), workers=[victim_addr])
        c.gather(futs)
        storage = os.path.join(victim_dir, "storage")
        assert len(os.listdir(storage)) >= 4  # spilled results on disk

        sigkill(victim)
        assert os.listdir(storage)  # left behind: nothing of the killed worker ran
        _, new_dir = children(WORKER, cluster.scheduler_address, str(tmp_path))
        # The new worker has started: it removed the dead worker's directory, and only that.
        assert not os.path.exists(victim_dir) and not os.path.exists(victim_dir + LOCK_SUFFIX)
        assert os.path.isdir(alive_dir) and os.path.isdir(new_dir)
        del futs


@pytest.mark.timeout(90)
def test_nanny_restart_removes_the_killed_workers_directory(tmp_path: Path) -> None:
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, local_directory=str(tmp_path), dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        c.wait_for_workers(1, timeout=30)

        def leave_a_file(dask_worker: Any) -> tuple[int, str]:
            with open(os.path.join(dask_worker.local_directory, "scratch"), "wb") as f:
                f.write(b"x" * 1000)
            return os.getpid(), str(dask_worker.local_directory)

        ((pid, old_dir),) = c.run(leave_a_file).values()
        assert old_dir.startswith(str(tmp_path))
        os.kill(pid, signal.SIGKILL)

        def new_worker() -> bool:
            pids = [w["pid"] for w in c.scheduler_info()["workers"].values()]
            return len(pids) == 1 and pids[0] != pid

        poll_for(new_worker, timeout=30, what="the nanny to start a new worker")
        (new_dir,) = c.run(lambda dask_worker: str(dask_worker.local_directory)).values()
        assert new_dir != old_dir and os.path.isdir(new_dir)
        assert not os.path.exists(old_dir) and not os.path.exists(old_dir + LOCK_SUFFIX)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_exiting_leaves_its_parents_directory(tmp_path: Path) -> None:
    d = WorkSpace(str(tmp_path)).new_work_dir("w")
    pid = os.fork()
    if pid == 0:  # the child: what its exit handlers would run (it inherited the finalizer)
        try:
            d.release()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.isdir(d.path) and os.path.exists(d.path + LOCK_SUFFIX)
    assert WorkSpace(str(tmp_path)).purge() == []  # still ours, still locked
    d.release()


def test_new_work_dir_waits_out_a_purge_that_took_its_fresh_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge in another process may lock our lock file before we do, then remove it: we make a new one."""
    import fcntl
    import threading

    real_flock = fcntl.flock
    purger: list[int] = []

    def purge_first(fd: int, op: int) -> None:
        if not purger:
            # As a purge elsewhere would: it opens and locks the fresh file, then removes it a moment later.
            lock_path = str(tmp_path / ("w1" + LOCK_SUFFIX))
            pfd = os.open(lock_path, os.O_RDWR)
            real_flock(pfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            purger.append(pfd)

            def finish_purge() -> None:
                os.unlink(lock_path)
                os.close(pfd)

            threading.Timer(0.02, finish_purge).start()
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", purge_first)
    d = WorkSpace(str(tmp_path)).new_work_dir("w1")
    try:
        assert purger, "the purge was not simulated"
        assert os.path.isdir(d.path)
        assert os.path.exists(d.path + LOCK_SUFFIX)
    finally:
        d.release()


def _make_stale(base: Path, n: int, prefix: str = "stale") -> set[str]:
    """``n`` work directories with files in them, and lock files nobody holds: their owners are gone."""
    made = set()
    for i in range(n):
        d = base / f"{prefix}-{i}"
        (d / "storage").mkdir(parents=True)
        for j in range(3):
            (d / "storage" / str(j)).write_bytes(b"x" * 100)
        (base / (d.name + LOCK_SUFFIX)).write_text("12345\n")
        made.add(str(d))
    return made


@pytest.mark.timeout(120)
def test_concurrent_purges_of_one_workspace_never_fail_and_remove_each_directory_once(tmp_path: Path) -> None:
    base = tmp_path / "space"
    base.mkdir()
    live = WorkSpace(str(base)).new_work_dir("live")  # held by this process: every purge leaves it
    errs = [tmp_path / f"purger-{i}.err" for i in range(6)]
    procs = []
    for err in errs:
        with err.open("w") as stderr:  # the child has its own copy of the descriptor
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", PURGER, str(base)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=_env(),
                    cwd=REPO_ROOT,
                    text=True,
                )
            )
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for round_ in range(5):
            stale = _make_stale(base, 150, prefix=f"stale{round_}")
            for p in procs:  # all at once: each has the line before any has finished
                assert p.stdin is not None
                p.stdin.write("purge\n")
                p.stdin.flush()
            removed: list[list[str]] = []
            for p, err in zip(procs, errs):
                assert p.stdout is not None
                line = p.stdout.readline()
                assert line, f"a purger failed (exit code {p.wait()}):\n{err.read_text()}"
                removed.append(json.loads(line))
            everything = [path for r in removed for path in r]
            assert sorted(everything) == sorted(stale)  # each stale directory removed, by exactly one purger
            assert set(os.listdir(base)) == {"live", "live" + LOCK_SUFFIX}
        assert os.path.isdir(live.path)
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()  # ends the purger's loop
        for p in procs:
            try:
                assert p.wait(timeout=30) == 0
            finally:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
                if p.stdout is not None:
                    p.stdout.close()
        live.release()


def test_a_lock_file_removed_by_someone_else_during_a_purge_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (say an older worker's cleanup) removes the lock file while we remove its directory."""
    stale = _make_stale(tmp_path, 3)
    real_rmtree = shutil.rmtree

    def rmtree_then_lock_file_vanishes(path: str, ignore_errors: bool = False) -> None:
        real_rmtree(path, ignore_errors=ignore_errors)
        os.unlink(path + LOCK_SUFFIX)

    monkeypatch.setattr(shutil, "rmtree", rmtree_then_lock_file_vanishes)
    assert sorted(WorkSpace(str(tmp_path)).purge()) == sorted(stale)
    assert os.listdir(tmp_path) == []


def test_an_entry_the_file_system_fails_on_is_left_and_the_purge_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import distributed.workspace as workspace

    stale = _make_stale(tmp_path, 4)
    real_try_lock = workspace._try_lock
    calls = []

    def no_locks_once(fd: int) -> bool:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.ENOLCK, "No locks available")
        return real_try_lock(fd)

    monkeypatch.setattr(workspace, "_try_lock", no_locks_once)
    with caught_logs("distributed.workspace") as logged:
        removed = WorkSpace(str(tmp_path)).purge()
    assert len(removed) == 3 and set(removed) < stale
    (left,) = stale - set(removed)
    assert os.path.isdir(left) and os.path.exists(left + LOCK_SUFFIX)  # tried again by the next purge
    assert any("Could not remove" in r.getMessage() and "No locks available" in r.getMessage() for r in logged)
    monkeypatch.setattr(workspace, "_try_lock", real_try_lock)
    assert WorkSpace(str(tmp_path)).purge() == [left]


@pytest.mark.timeout(120)
def test_two_workers_started_at_once_on_one_directory_with_stale_directories(tmp_path: Path) -> None:
    scratch = tmp_path / "dask-scratch-space"
    scratch.mkdir()
    stale = _make_stale(scratch, 200, prefix="worker-stale")
    with (
        LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        errs = [tmp_path / f"worker-{i}.err" for i in range(2)]
        procs = []
        try:
            for err in errs:
                with err.open("w") as stderr:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-c", WORKER, cluster.scheduler_address, str(tmp_path)],
                            stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL,
                            stderr=stderr,
                            env=_env(),
                            cwd=REPO_ROOT,
                            text=True,
                        )
                    )
            dirs = []
            for p, err in zip(procs, errs):  # both started before either is read: they purge together
                assert p.stdout is not None
                line = p.stdout.readline().strip()
                assert line, f"a worker failed to start (exit code {p.wait()}):\n{err.read_text()}"
                dirs.append(line)
            c.wait_for_workers(2, timeout=30)
            assert not any(os.path.exists(d) or os.path.exists(d + LOCK_SUFFIX) for d in stale)
            assert all(os.path.isdir(d) for d in dirs)
            assert set(os.listdir(scratch)) == {os.path.basename(d) + x for d in dirs for x in ("", LOCK_SUFFIX)}
        finally:
            for p in procs:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
                if p.stdout is not None:
                    p.stdout.close()


def test_without_locking_no_lock_files_and_no_purge(tmp_path: Path) -> None:
    ws = WorkSpace(str(tmp_path), locking=False)
    d = ws.new_work_dir("worker-x")
    assert os.path.isdir(d.path) and d.lock_path is None
    assert not [n for n in os.listdir(tmp_path) if n.endswith(LOCK_SUFFIX)]
    # Another workspace's purge leaves it alone: nothing says its owner ended.
    assert WorkSpace(str(tmp_path)).purge() == []
    assert ws.purge() == []
    assert os.path.isdir(d.path)
    d.release()
    assert not os.path.exists(d.path)


@gen_cluster(nthreads=[("127.0.0.1", 1)], config={"distributed.worker.use-file-locking": False})
async def test_a_worker_without_file_locking(s: Scheduler, a: Worker) -> None:
    assert os.path.isdir(a.local_directory)
    assert not os.path.exists(a.local_directory + LOCK_SUFFIX)
