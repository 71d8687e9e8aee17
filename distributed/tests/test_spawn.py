"""ServerProcess: schedulers and workers in child processes, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import dask.config
import psutil
import pytest

from distributed.client import Client
from distributed.spawn import ServerProcess, config_snapshot
from distributed.utils_test import async_poll_for, poll_for

pytestmark = pytest.mark.timeout(120)


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (exited, or a zombie nobody reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def our_children() -> list[psutil.Process]:
    """Live child processes of this test process, minus multiprocessing helpers."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                out.append(p)  # a zombie is a leak too
                continue
            cmd = " ".join(p.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "resource_tracker" in cmd or "forkserver" in cmd:
            continue
        out.append(p)
    return out


@pytest.fixture
def procs() -> Iterator[list[ServerProcess]]:
    """ServerProcesses a test starts; killed (by PID, via their handle) afterwards."""
    started: list[ServerProcess] = []
    try:
        yield started
    finally:
        for p in started:
            p.kill()
        poll_for(lambda: all(p.pid is None or gone(p.pid) for p in started), what="children to exit")


def start_scheduler(procs: list[ServerProcess]) -> ServerProcess:
    s = ServerProcess(
        "scheduler",
        {"host": "127.0.0.1", "dashboard": False},
        name="test-scheduler",
        config={"distributed.scheduler.validate": True},
    )
    procs.append(s)
    s.start_sync(timeout=60)
    return s


def start_worker(procs: list[ServerProcess], addr: str, **kwargs: object) -> ServerProcess:
    w = ServerProcess(
        "worker",
        {"scheduler_ip": addr, "nthreads": 1, "host": "127.0.0.1", **kwargs},
        name="test-worker",
        config={"distributed.worker.validate": True},
    )
    procs.append(w)
    w.start_sync(timeout=60)
    return w


def test_scheduler_and_worker_processes_compute(procs: list[ServerProcess]) -> None:
    s = start_scheduler(procs)
    assert s.address.startswith("tcp://127.0.0.1:")
    assert s.pid is not None and s.pid != os.getpid() and s.is_alive()
    w = start_worker(procs, s.address)
    assert w.address.startswith("tcp://127.0.0.1:") and w.address != s.address
    with Client(s.address, set_as_default=False) as c:
        assert c.submit(operator.add, 1, 2).result() == 3
        # The config reached the child before its worker was built.
        assert c.submit(dask.config.get, "distributed.worker.validate", pure=False).result() is True
        assert c.scheduler_info()["n_workers"] == 1
    w.close_sync(timeout=20)
    s.close_sync(timeout=20)
    assert w.exitcode == 0
    assert s.exitcode == 0
    assert not w.is_alive() and not s.is_alive()
    assert gone(w.pid or 0) and gone(s.pid or 0)
    assert not [p for p in our_children() if p.pid in (w.pid, s.pid)]


def test_async_start_and_close(procs: list[ServerProcess]) -> None:
    async def main() -> tuple[int | None, int | None]:
        s = ServerProcess("scheduler", {"host": "127.0.0.1", "dashboard": False})
        procs.append(s)
        addr = await s.start(timeout=60)
        w = ServerProcess("worker", {"scheduler_ip": addr, "nthreads": 1, "host": "127.0.0.1"})
        procs.append(w)
        await w.start(timeout=60)
        async with Client(addr, asynchronous=True, set_as_default=False) as c:
            assert await c.submit(operator.mul, 6, 7) == 42
        await w.close(timeout=20)
        await s.close(timeout=20)
        return w.exitcode, s.exitcode

    assert asyncio.run(main()) == (0, 0)


def test_kill(procs: list[ServerProcess]) -> None:
    s = start_scheduler(procs)
    pid = s.pid
    assert pid is not None and psutil.pid_exists(pid)
    s.kill()
    assert not s.is_alive()
    assert s.exitcode == -signal.SIGKILL
    assert gone(pid)
    s.kill()  # idempotent
    s.close_sync()  # closing a dead child is fine


def test_worker_exits_when_scheduler_closes(procs: list[ServerProcess]) -> None:
    s = start_scheduler(procs)
    w = start_worker(procs, s.address)
    s.close_sync(timeout=20)
    assert s.exitcode == 0
    # Nobody signals the worker: it notices the scheduler went away.
    poll_for(lambda: not w.is_alive(), timeout=30, what="the worker to exit")
    assert w.exitcode == 0


def test_sigterm_closes_cleanly(procs: list[ServerProcess]) -> None:
    s = start_scheduler(procs)
    assert s.pid is not None
    os.kill(s.pid, signal.SIGTERM)
    poll_for(lambda: not s.is_alive(), what="the scheduler to exit")
    assert s.exitcode == 0


def test_start_failure_is_reported(procs: list[ServerProcess]) -> None:
    # Nothing listens on port 1: the worker cannot register and says so.
    w = ServerProcess("worker", {"scheduler_ip": "tcp://127.0.0.1:1", "death_timeout": 0.5, "host": "127.0.0.1"})
    procs.append(w)
    with pytest.raises(RuntimeError, match="failed to start|exited with code"):
        w.start_sync(timeout=60)
    assert not w.is_alive()
    assert w.pid is not None and gone(w.pid)


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="plain, picklable"):
        ServerProcess("worker", {"scheduler_ip": "tcp://127.0.0.1:1", "bad": lambda: None})
    with pytest.raises(ValueError, match="kind"):
        ServerProcess("nanny", {})  # type: ignore[arg-type]
    p = ServerProcess("scheduler", {})
    assert p.pid is None and not p.is_alive()
    with pytest.raises(ValueError, match="address"):
        p.address
    p.kill()  # never started: nothing to do
    p.close_sync()


def test_start_twice_refused(procs: list[ServerProcess]) -> None:
    s = start_scheduler(procs)
    with pytest.raises(RuntimeError, match="started already"):
        s.start_sync()


def test_env_reaches_child(procs: list[ServerProcess]) -> None:
    s = start_scheduler(procs)
    w = ServerProcess(
        "worker",
        {"scheduler_ip": s.address, "nthreads": 1, "host": "127.0.0.1"},
        env={"DISTRIBUTED_TEST_MARKER": "hello"},
    )
    procs.append(w)
    w.start_sync(timeout=60)
    with Client(s.address, set_as_default=False) as c:
        assert c.submit(os.getenv, "DISTRIBUTED_TEST_MARKER", pure=False).result() == "hello"


def test_child_exits_when_parent_dies() -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from distributed.spawn import ServerProcess

        if __name__ == "__main__":
            s = ServerProcess("scheduler", {"host": "127.0.0.1", "dashboard": False})
            s.start_sync(timeout=60)
            print(s.pid, flush=True)
            time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        child_pid = int(line.strip())
        assert not gone(child_pid)
        parent.kill()
        parent.wait(timeout=20)
        # The orphan polls its parent pid and closes itself.
        poll_for(lambda: gone(child_pid or 0), timeout=20, what="the orphaned scheduler to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=20)
        if parent.stdout is not None:
            parent.stdout.close()
        if child_pid is not None and not gone(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_config_snapshot_is_plain_data() -> None:
    import pickle

    with dask.config.set({"distributed.scheduler.validate": True, "unpicklable-test-key": lambda: None}):
        snap = config_snapshot()
    assert snap["distributed"]["scheduler"]["validate"] is True
    assert "unpicklable-test-key" not in snap
    pickle.dumps(snap)


SLOW_PRELOAD = """
import time

LOG = {log!r}


def dask_setup(worker):
    with open(LOG, "a") as f:
        f.write("setup\\n")
    time.sleep(1)  # still starting when the start is cancelled


def dask_teardown(worker):
    with open(LOG, "a") as f:
        f.write("teardown\\n")
"""


def test_a_cancelled_start_stops_the_child_cleanly(procs: list[ServerProcess], tmp_path: Path) -> None:
    """Cancelled while the child starts (a Ctrl-C, a close), the child is asked to stop, not killed:
    what it set up is torn down (a nanny's worker lost its preload teardown this way)."""
    log = tmp_path / "events.log"
    preload = tmp_path / "slow_preload.py"
    preload.write_text(SLOW_PRELOAD.format(log=str(log)))

    async def main() -> int | None:
        s = ServerProcess("scheduler", {"host": "127.0.0.1", "dashboard": False})
        procs.append(s)
        addr = await s.start(timeout=60)
        w = ServerProcess(
            "worker", {"scheduler_ip": addr, "nthreads": 1, "host": "127.0.0.1", "preload": [str(preload)]}
        )
        procs.append(w)
        starting = asyncio.ensure_future(w.start(timeout=60))
        await async_poll_for(lambda: log.exists() and "setup" in log.read_text(), 30)
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        await s.close(timeout=20)
        return w.exitcode

    assert asyncio.run(main()) == 0  # it stopped by itself
    assert log.read_text().split() == ["setup", "teardown"]
