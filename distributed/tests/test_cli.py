"""``dask scheduler`` / ``dask worker``, run as real subprocesses on 127.0.0.1.

Readiness is always polled with a deadline (scheduler file, registered
workers); every process started here is killed by PID in a ``finally``.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest

import distributed
from distributed.cli.dask_worker import nworkers_nthreads, parse_port_range
from distributed.cli.utils import DurationType, MemoryLimitType, parse_resources

REPO_ROOT = str(Path(__file__).resolve().parents[2])
SCHEDULER = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]
EXIT_TIMEOUT = 10.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proc:
    """A subprocess whose stderr goes to a file (no pipe to fill up and block it)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self._log_file = open(log, "wb")
        self.popen = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            stdin=subprocess.DEVNULL,
            env={**_env(), **(env or {})},
            cwd=REPO_ROOT,
        )
        self.pid = self.popen.pid

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def poll(self) -> int | None:
        return self.popen.poll()

    def signal_and_wait(self, sig: signal.Signals, timeout: float = EXIT_TIMEOUT) -> int:
        os.kill(self.pid, sig)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.args} did not exit within {timeout} s of {sig.name}:\n{self.stderr()}")

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.args} did not exit within {timeout} s:\n{self.stderr()}")

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        self._log_file.close()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start subprocesses; all are killed (by PID) at the end of the test."""
    started: list[Proc] = []

    def start(args: list[str], name: str = "proc", env: dict[str, str] | None = None) -> Proc:
        p = Proc(args, tmp_path / f"{name}-{len(started)}.log", env)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            p.kill()


def poll_with_proc(predicate: Callable[[], Any], timeout: float, what: str, proc: Proc | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``timeout``.

    Unlike ``utils_test.poll_for`` it fails at once, with the process's stderr,
    when ``proc`` exits first.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        result = predicate()
        if result:
            return result
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: process exited with {proc.poll()}:\n{proc.stderr()}")
        if time.monotonic() > deadline:
            extra = f":\n{proc.stderr()}" if proc is not None else ""
            pytest.fail(f"Timed out waiting for {what}{extra}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def read_scheduler_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not there yet, or half written
    return data if isinstance(data, dict) and data.get("address") else None


def start_scheduler(
    procs: Callable[..., Proc], tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[Proc, str, dict[str, Any]]:
    sched_file = tmp_path / "scheduler.json"
    args = [*SCHEDULER, "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(sched_file)]
    if "--dashboard-address" not in extra:
        args.append("--no-dashboard")
    proc = procs(args + list(extra), name="scheduler", env=env)
    info = poll_with_proc(lambda: read_scheduler_file(sched_file), 30, "the scheduler file", proc)
    return proc, str(info["address"]), info


def n_workers(address: str) -> int:
    from distributed import Client

    with Client(address, timeout=10) as c:
        return len(c.scheduler_info()["workers"])


def run_cli(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO_ROOT)


# -- option parsing, no servers ------------------------------------------------------
@pytest.mark.parametrize("cmd", [SCHEDULER, WORKER])
def test_help(cmd: list[str]) -> None:
    r = run_cli([*cmd, "--help"])
    assert r.returncode == 0, r.stderr
    assert "--scheduler-file" in r.stdout
    assert "--pid-file" in r.stdout


@pytest.mark.parametrize("cmd", [SCHEDULER, WORKER])
def test_version(cmd: list[str]) -> None:
    from distributed import __version__

    r = run_cli([*cmd, "--version"])
    assert r.returncode == 0, r.stderr
    assert __version__ in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        ([*SCHEDULER, "--port", "notanumber"], "notanumber"),
        ([*SCHEDULER, "--port", "70000"], "--port"),
        ([*SCHEDULER, "--idle-timeout", "soon"], "soon"),
        ([*SCHEDULER, "--no-such-option"], "--no-such-option"),
        # Extra arguments need a --preload whose dask_setup is a click command to take them.
        ([*SCHEDULER, "stray"], "unexpected extra argument"),
        ([*SCHEDULER, "--preload", "no_such_preload_module", "--flag"], "no_such_preload_module"),
        ([*SCHEDULER, "--preload", "json", "--flag"], "no --preload has a click command"),
        # Options the scheduler cannot honour yet are refused, not ignored.
        ([*SCHEDULER, "--jupyter"], "--jupyter is not supported"),
        ([*WORKER, "tcp://127.0.0.1:1", "--nthreads", "abc"], "abc"),
        ([*WORKER, "tcp://127.0.0.1:1", "--memory-limit", "lots"], "lots"),
        ([*WORKER, "tcp://127.0.0.1:1", "--resources", "GPU"], "--resources"),
        ([*WORKER, "tcp://127.0.0.1:1", "--nworkers", "0"], "--nworkers"),
        ([*WORKER, "tcp://127.0.0.1:1", "--nworkers", "2", "--worker-port", "9000"], "--worker-port"),
        ([*WORKER, "tcp://127.0.0.1:1", "--death-timeout", "never"], "never"),
        ([*WORKER, "tcp://127.0.0.1:1", "--dashboard-address", "127.0.0.1:port"], "--dashboard-address"),
        ([*WORKER, "tcp://127.0.0.1:1", "--nworkers", "2", "--dashboard-address", ":8799"], "--dashboard-address"),
        ([*WORKER, "tcp://127.0.0.1:1", "--nprocs", "1"], "No such option"),
        ([*WORKER, "tcp://127.0.0.1:1", "--preload", "json", "--flag"], "no --preload has a click command"),
        ([*WORKER, "tcp://127.0.0.1:1", "--no-nanny", "--preload-nanny", "json"], "--preload-nanny"),
        ([*WORKER, "tcp://127.0.0.1:1", "--no-nanny", "--nanny-port", "9000"], "--nanny-port"),
        ([*WORKER, "tcp://127.0.0.1:1", "--no-nanny", "--lifetime", "1s", "--lifetime-restart"], "--lifetime-restart"),
        ([*WORKER, "tcp://127.0.0.1:1", "--lifetime-restart"], "--lifetime"),
    ],
)
def test_bad_option(args: list[str], needle: str) -> None:
    r = run_cli(args)
    assert r.returncode != 0
    assert "Error" in r.stderr
    assert needle in r.stderr


def test_worker_needs_an_address() -> None:
    r = run_cli([*WORKER, "--nthreads", "1"])
    assert r.returncode != 0
    assert "SCHEDULER" in r.stderr or "--scheduler-file" in r.stderr


@pytest.mark.parametrize("command, option", [("scheduler", "--dashboard-address"), ("worker", "--nthreads")])
def test_dask_cli_entry_points(command: str, option: str) -> None:
    # The `dask` command finds ours through the `dask_cli` entry-point group.
    r = run_cli([sys.executable, "-m", "dask", command, "--help"])
    assert r.returncode == 0, r.stderr
    assert option in r.stdout


def test_parse_resources() -> None:
    assert parse_resources("GPU=2 MEM=10e9") == {"GPU": 2.0, "MEM": 10e9}
    assert parse_resources("GPU=2,MEM=1") == {"GPU": 2.0, "MEM": 1.0}
    assert parse_resources("") == {}
    assert parse_resources(None) == {}
    for bad in ("GPU", "=2", "GPU=two"):
        with pytest.raises(ValueError):
            parse_resources(bad)


def test_nworkers_nthreads() -> None:
    assert nworkers_nthreads("1", 0, cpu_count=8) == (1, 8)
    assert nworkers_nthreads("2", 0, cpu_count=8) == (2, 4)
    assert nworkers_nthreads("3", 0, cpu_count=2) == (3, 1)
    assert nworkers_nthreads("2", 3, cpu_count=8) == (2, 3)
    assert nworkers_nthreads("-1", 0, cpu_count=4) == (4, 1)
    assert nworkers_nthreads("auto", 0, cpu_count=4) == (4, 1)
    assert nworkers_nthreads("auto", 0, cpu_count=8) == (4, 2)
    assert nworkers_nthreads("auto", 0, cpu_count=16) == (4, 4)
    for bad in ("0", "-9", "many"):
        with pytest.raises(ValueError):
            nworkers_nthreads(bad, 0, cpu_count=8)


def test_parse_port_range() -> None:
    assert parse_port_range(None, 2) == [0, 0]
    assert parse_port_range("0", 1) == [0]
    assert parse_port_range("9000", 1) == [9000]
    assert parse_port_range("9000:9010", 3) == ["9000:9010", "9001:9010", "9002:9010"]
    for bad, n in (("9000", 2), ("9000:9001", 3), ("x", 1), ("9010:9000", 1), ("70000", 1)):
        with pytest.raises(ValueError):
            parse_port_range(bad, n)


def test_param_types() -> None:
    d = DurationType()
    assert d.convert("2s", None, None) == 2.0
    assert d.convert("1 minute", None, None) == 60.0
    assert d.convert("5", None, None) == 5.0
    with pytest.raises(click.BadParameter):
        d.convert("soon", None, None)
    m = MemoryLimitType()
    assert m.convert("auto", None, None) == "auto"
    assert m.convert("0", None, None) == 0
    assert m.convert("0.5", None, None) == 0.5
    assert m.convert("4e9", None, None) == 4_000_000_000
    assert m.convert("2GiB", None, None) == 2 * 2**30
    with pytest.raises(click.BadParameter):
        m.convert("lots", None, None)


# -- real clusters ---------------------------------------------------------------------
@pytest.mark.timeout(120)
def _start_out_of_view(dask_scheduler: Any) -> tuple[bool, int]:
    import gc

    return dask_scheduler.streams.gc.startup_frozen, gc.get_freeze_count()


def test_scheduler_and_workers(procs: Callable[..., Proc], tmp_path: Path) -> None:
    from distributed import Client

    sched, address, info = start_scheduler(procs, tmp_path)
    assert address.startswith("tcp://127.0.0.1:")
    assert not address.endswith(":0")  # port 0 was resolved to the real port
    assert info["services"] == {}
    sched_file = tmp_path / "scheduler.json"

    w1 = procs([*WORKER, "--scheduler-file", str(sched_file), "--nthreads", "1", "--no-nanny"], name="worker-file")
    w2 = procs([*WORKER, address, "--nthreads", "1", "--no-nanny", "--name", "by-address"], name="worker-addr")
    with Client(address, timeout=30) as client:
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 2, 60, "two workers", w1)
        assert client.submit(operator.add, 1, 2).result(timeout=30) == 3
        names = {w["name"] for w in client.scheduler_info()["workers"].values()}
        assert "by-address" in names
        # The scheduler's own process keeps what it made to start out of the collector's view.
        startup_frozen, frozen = client.run_on_scheduler(_start_out_of_view)
        assert startup_frozen and frozen > 10_000

        assert w1.signal_and_wait(signal.SIGTERM) == 0, w1.stderr()
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 1, 30, "worker removal")
        assert w2.signal_and_wait(signal.SIGTERM) == 0, w2.stderr()

    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
    err = sched.stderr()
    assert f"Scheduler at:   {address}" in err
    assert "Traceback" not in err
    assert not sched_file.exists()


@pytest.mark.timeout(120)
def test_startup_lines_say_memory_directory_and_versions(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    w = procs([*WORKER, address, "--nthreads", "1", "--no-nanny", "--memory-limit", "1GiB"], name="worker")
    poll_with_proc(lambda: "Registered to:" in w.stderr(), 60, "the worker's registration", w)
    assert w.signal_and_wait(signal.SIGTERM) == 0, w.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
    versions = f"distributed {distributed.__version__}, dask "
    assert f"Versions:       {versions}" in sched.stderr()
    err = w.stderr()
    assert f"Versions:       {versions}" in err
    assert "Memory:         1.00 GiB" in err
    assert "Local directory: " in err and "dask-scratch-space" in err


@pytest.mark.timeout(120)
def test_cli_logs_at_the_levels_of_the_logging_config(procs: Callable[..., Proc], tmp_path: Path) -> None:
    # As in dask, the logging: config decides; the CLI no longer forces INFO on distributed.*.
    config = tmp_path / "quiet.yaml"
    config.write_text("logging:\n  distributed: warning\n")
    env = {"DASK_CONFIG": str(config)}
    sched, address, _ = start_scheduler(procs, tmp_path, env=env)
    w = procs([*WORKER, address, "--nthreads", "1", "--no-nanny"], name="worker", env=env)
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", w)
    assert w.signal_and_wait(signal.SIGTERM) == 0, w.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
    for err in (sched.stderr(), w.stderr()):
        assert " - INFO - " not in err, err
    assert "Scheduler at:" not in sched.stderr()


@pytest.mark.timeout(120)
def test_sigint(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    worker = procs([*WORKER, address, "--nthreads", "1", "--no-nanny"], name="worker")
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", worker)
    assert worker.signal_and_wait(signal.SIGINT) == 0, worker.stderr()
    assert sched.signal_and_wait(signal.SIGINT) == 0, sched.stderr()
    for p in (worker, sched):
        assert "KeyboardInterrupt" not in p.stderr()
        assert "Traceback" not in p.stderr()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [True, False])
def test_nworkers(procs: Callable[..., Proc], tmp_path: Path, nanny: bool) -> None:
    """By default each worker runs under a nanny, in a process of its own that comes back when killed."""
    import psutil

    from distributed import Client

    sched, address, _ = start_scheduler(procs, tmp_path)
    args = [*WORKER, address, "--nworkers", "2", "--nthreads", "1", "--name", "w", "--resources", "GPU=2 MEM=10e9"]
    worker = procs(args if nanny else [*args, "--no-nanny"], name="worker")
    with Client(address, timeout=30) as client:

        def two_workers(not_pids: set[int] = set()) -> dict[str, Any] | None:  # noqa: B006
            ws: dict[str, Any] = client.scheduler_info()["workers"]
            return ws if len(ws) == 2 and not ({w["pid"] for w in ws.values()} & not_pids) else None

        workers = poll_with_proc(two_workers, 60, "two workers", worker)
        assert sorted(w["name"] for w in workers.values()) == ["w-0", "w-1"]
        assert {w["nthreads"] for w in workers.values()} == {1}
        assert all(w["resources"] == {"GPU": 2.0, "MEM": 10e9} for w in workers.values())
        futures = client.map(operator.mul, range(10), range(10))
        assert client.gather(futures) == [i * i for i in range(10)]
        pids = {w["pid"] for w in workers.values()}
        if not nanny:
            assert pids == {worker.pid}
            assert all(w["nanny"] is None for w in workers.values())
        else:
            assert len(pids) == 2 and worker.pid not in pids
            assert all(w["nanny"] for w in workers.values())
            victim = next(iter(pids))
            os.kill(victim, signal.SIGKILL)
            back = poll_with_proc(lambda: two_workers({victim}), 30, "the killed worker to come back", worker)
            assert sorted(w["name"] for w in back.values()) == ["w-0", "w-1"]
            pids = {w["pid"] for w in back.values()}
            assert client.submit(operator.add, 1, 2).result() == 3
    assert worker.signal_and_wait(signal.SIGTERM) == 0, worker.stderr()
    assert "Traceback" not in worker.stderr()
    # SIGTERM reached the worker processes through their nannies: they closed.
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
def test_lifetime_restart(procs: Callable[..., Proc], tmp_path: Path) -> None:
    """With --lifetime --lifetime-restart each worker is replaced every lifetime; the data stays."""
    from distributed import Client

    sched, address, _ = start_scheduler(procs, tmp_path)
    steady = procs([*WORKER, address, "--nthreads", "1", "--name", "steady"], name="steady")
    args = [*WORKER, address, "--nthreads", "1", "--name", "mortal", "--lifetime", "1s", "--lifetime-restart"]
    mortal = procs(args, name="mortal")
    with Client(address, timeout=30) as client:

        def mortal_pid(not_pid: int | None = None) -> int | None:
            ws = client.scheduler_info()["workers"].values()
            pids = [w["pid"] for w in ws if w["name"] == "mortal" and w["pid"] != not_pid]
            return pids[0] if len(ws) == 2 and pids else None

        first = poll_with_proc(mortal_pid, 60, "the mortal worker", mortal)
        mortal_addr = next(a for a, w in client.scheduler_info()["workers"].items() if w["pid"] == first)
        futures = client.scatter(list(range(10)), workers=[mortal_addr])
        second = poll_with_proc(lambda: mortal_pid(first), 30, "a new mortal worker", mortal)
        assert second != first and mortal.poll() is None and steady.poll() is None
        assert client.gather(futures) == list(range(10))
        poll_with_proc(lambda: mortal_pid(second), 30, "another new mortal worker", mortal)
        assert client.gather(futures) == list(range(10))
    assert mortal.signal_and_wait(signal.SIGTERM) == 0, mortal.stderr()
    assert steady.signal_and_wait(signal.SIGTERM) == 0, steady.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
def test_worker_exits_when_scheduler_goes_away(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    worker = procs([*WORKER, address, "--nthreads", "1", "--no-nanny"], name="worker")
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", worker)
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
    worker.wait(timeout=EXIT_TIMEOUT)


@pytest.mark.timeout(120)
def test_worker_exits_when_scheduler_is_killed(procs: Callable[..., Proc], tmp_path: Path) -> None:
    """Once its reconnect timeout is over without a scheduler at the address, the worker exits."""
    sched, address, _ = start_scheduler(procs, tmp_path)
    env = {"DASK_DISTRIBUTED__WORKER__RECONNECT_TIMEOUT": "2s"}
    worker = procs([*WORKER, address, "--nthreads", "1", "--no-nanny"], name="worker", env=env)
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", worker)
    sched.kill()
    worker.wait(timeout=30)
    assert "tries to register again for 2 s" in worker.stderr(), worker.stderr()


@pytest.mark.timeout(120)
def test_worker_waits_for_scheduler_file(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched_file = tmp_path / "scheduler.json"
    worker = procs([*WORKER, "--scheduler-file", str(sched_file), "--nthreads", "1"], name="worker")
    sched, address, _ = start_scheduler(procs, tmp_path)
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", worker)
    assert worker.signal_and_wait(signal.SIGTERM) == 0, worker.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(60)
def test_worker_gives_up_on_missing_scheduler_file(procs: Callable[..., Proc], tmp_path: Path) -> None:
    missing = tmp_path / "never.json"
    worker = procs([*WORKER, "--scheduler-file", str(missing), "--death-timeout", "1s"], name="worker")
    assert worker.wait(timeout=30) != 0
    assert "never.json" in worker.stderr()


@pytest.mark.timeout(60)
def test_sigterm_while_waiting_for_scheduler_file(procs: Callable[..., Proc], tmp_path: Path) -> None:
    worker = procs([*WORKER, "--scheduler-file", str(tmp_path / "later.json")], name="worker")
    # Logged once the signal handlers are in place.
    poll_with_proc(lambda: "Waiting for the scheduler's address" in worker.stderr(), 30, "the worker to wait", worker)
    assert worker.signal_and_wait(signal.SIGTERM) == 0, worker.stderr()


@pytest.mark.timeout(60)
def test_worker_cannot_reach_scheduler(procs: Callable[..., Proc], tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    worker = procs([*WORKER, f"tcp://127.0.0.1:{port}", "--death-timeout", "1s"], name="worker")
    assert worker.wait(timeout=30) != 0
    assert "Could not start" in worker.stderr()


#: A preload whose setup is a click command: it records the --value it got, and its teardown.
CLICK_PRELOAD = """
import os

import click

LOG = {log!r}


@click.command()
@click.option("--value", default="default")
def dask_setup(server, value):
    with open(LOG, "a") as f:
        f.write(f"setup {{type(server).__name__}} {{os.getpid()}} {{value}}\\n")


def dask_teardown(server):
    with open(LOG, "a") as f:
        f.write(f"teardown {{type(server).__name__}} {{os.getpid()}}\\n")
"""


def preload_events(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.timeout(120)
def test_scheduler_preload_with_arguments(procs: Callable[..., Proc], tmp_path: Path) -> None:
    log = tmp_path / "scheduler-events.log"
    path = tmp_path / "cli_scheduler_preload.py"
    path.write_text(CLICK_PRELOAD.format(log=str(log)))
    sched, address, _ = start_scheduler(procs, tmp_path, "--preload", str(path), "--value", "foobar")
    poll_with_proc(lambda: preload_events(log), 30, "the preload's setup", sched)
    assert preload_events(log) == [["setup", "Scheduler", str(sched.pid), "foobar"]]
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
    assert preload_events(log)[1:] == [["teardown", "Scheduler", str(sched.pid)]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [True, False])
def test_worker_preload_with_arguments(procs: Callable[..., Proc], tmp_path: Path, nanny: bool) -> None:
    """--preload runs in each worker process (with the extra arguments), --preload-nanny in the nanny."""
    log = tmp_path / "worker-events.log"
    path = tmp_path / "cli_worker_preload.py"
    path.write_text(CLICK_PRELOAD.format(log=str(log)))
    nanny_log = tmp_path / "nanny-events.log"
    nanny_path = tmp_path / "cli_nanny_preload.py"
    nanny_path.write_text(CLICK_PRELOAD.format(log=str(nanny_log)))
    sched, address, _ = start_scheduler(procs, tmp_path)
    args = [*WORKER, address, "--nthreads", "1", "--preload", str(path), "--value", "3"]
    args += ["--preload-nanny", str(nanny_path)] if nanny else ["--no-nanny"]
    worker = procs(args, name="worker")
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", worker)
    [setup] = preload_events(log)
    assert setup[:2] == ["setup", "Worker"] and setup[3] == "3"
    # Under a nanny the worker runs in a process of its own; the nanny's preload in the nanny's.
    assert (setup[2] != str(worker.pid)) == nanny
    if nanny:
        assert preload_events(nanny_log) == [["setup", "Nanny", str(worker.pid), "default"]]
    assert worker.signal_and_wait(signal.SIGTERM) == 0, worker.stderr()
    assert preload_events(log)[1:] == [["teardown", "Worker", setup[2]]], worker.stderr()
    if nanny:
        assert preload_events(nanny_log)[1:] == [["teardown", "Nanny", str(worker.pid)]]
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [True, False])
def test_worker_preload_that_cannot_be_imported(procs: Callable[..., Proc], tmp_path: Path, nanny: bool) -> None:
    broken = tmp_path / "cli_broken_preload.py"
    broken.write_text("raise RuntimeError('preload refuses to load')\n")
    sched, address, _ = start_scheduler(procs, tmp_path)
    args = [*WORKER, address, "--nthreads", "1", "--preload", str(broken), *([] if nanny else ["--no-nanny"])]
    worker = procs(args, name="worker")
    assert worker.wait(timeout=60) == 1
    err = worker.stderr()
    assert "cli_broken_preload.py" in err and "preload refuses to load" in err
    assert n_workers(address) == 0
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(60)
def test_scheduler_preload_that_cannot_be_imported(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched = procs([*SCHEDULER, "--port", "0", "--no-dashboard", "--preload", "no_such_preload_mod"], name="scheduler")
    assert sched.wait(timeout=30) == 1
    assert "Could not import preload 'no_such_preload_mod'" in sched.stderr()


#: Nothing listens on port 1 of loopback (binding it needs root).
NO_SCHEDULER = "tcp://127.0.0.1:1"
#: How soon a worker that has no scheduler must exit after SIGINT/SIGTERM.
PROMPT_EXIT = 5.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("nanny", [True, False])
def test_signal_while_connecting(procs: Callable[..., Proc], tmp_path: Path, sig: signal.Signals, nanny: bool) -> None:
    """Ctrl-C (or SIGTERM) stops a worker still trying to reach its scheduler at once, not after the connect timeout."""
    worker = procs([*WORKER, NO_SCHEDULER, *([] if nanny else ["--no-nanny"])], name="worker")
    poll_with_proc(lambda: "Waiting to connect to the scheduler" in worker.stderr(), 30, "the first try", worker)
    start = time.monotonic()
    assert worker.signal_and_wait(sig, timeout=PROMPT_EXIT) == 0, worker.stderr()
    assert time.monotonic() - start < PROMPT_EXIT
    assert "Traceback" not in worker.stderr()


@pytest.mark.timeout(120)
def test_signal_after_scheduler_lost(procs: Callable[..., Proc], tmp_path: Path) -> None:
    """A nanny whose worker waits for a scheduler that died exits at once on SIGINT (no retirement to wait for)."""
    sched, address, _ = start_scheduler(procs, tmp_path)
    worker = procs([*WORKER, address, "--nthreads", "1"], name="worker")
    poll_with_proc(lambda: n_workers(address) == 1, 60, "the worker", worker)
    waiting = worker.stderr().count("Waiting to connect to the scheduler")
    sched.kill()
    poll_with_proc(
        lambda: worker.stderr().count("Waiting to connect to the scheduler") > waiting,
        60,
        "the worker to wait for the scheduler to come back",
        worker,
    )
    start = time.monotonic()
    assert worker.signal_and_wait(signal.SIGINT, timeout=PROMPT_EXIT) == 0, worker.stderr()
    assert time.monotonic() - start < PROMPT_EXIT
    assert "Traceback" not in worker.stderr()


@pytest.mark.timeout(60)
def test_port_in_use(procs: Callable[..., Proc], tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        sched = procs([*SCHEDULER, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], name="scheduler")
        assert sched.wait(timeout=30) != 0
    assert "already in use" in sched.stderr()


@pytest.mark.timeout(60)
def test_pid_file(procs: Callable[..., Proc], tmp_path: Path) -> None:
    pid_path = tmp_path / "scheduler.pid"
    sched, _, _ = start_scheduler(procs, tmp_path, "--pid-file", str(pid_path))
    assert pid_path.read_text().strip() == str(sched.pid)
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
    assert not pid_path.exists()


@pytest.mark.timeout(60)
def test_idle_timeout(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched, _, _ = start_scheduler(procs, tmp_path, "--idle-timeout", "500ms")
    assert sched.wait(timeout=30) == 0, sched.stderr()


@pytest.mark.timeout(60)
def test_scheduler_dashboard(procs: Callable[..., Proc], tmp_path: Path) -> None:
    import urllib.request

    sched, address, info = start_scheduler(procs, tmp_path, "--dashboard-address", "127.0.0.1:0")
    port = info["services"]["dashboard"]
    assert isinstance(port, int) and port > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        assert r.read() == b"ok"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=10) as r:
        assert json.loads(r.read())["address"] == address
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
        assert b"/static/js/bokeh" in r.read()  # the bokeh dashboard, not a plain summary
    assert f"dashboard at:   http://127.0.0.1:{port}/status" in sched.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(60)
def test_worker_dashboard_address(procs: Callable[..., Proc], tmp_path: Path) -> None:
    import re
    import urllib.request

    sched, address, _ = start_scheduler(procs, tmp_path)
    worker = procs(
        [*WORKER, address, "--nthreads", "1", "--no-nanny", "--dashboard-address", "127.0.0.1:0"], name="worker"
    )
    line = poll_with_proc(
        lambda: re.search(r"dashboard at:   http://127\.0\.0\.1:(\d+)/health", worker.stderr()), 30, "the URL", worker
    )
    port = int(line.group(1))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        assert r.read() == b"ok"
    assert worker.signal_and_wait(signal.SIGTERM) == 0, worker.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()


@pytest.mark.timeout(60)
def test_worker_no_dashboard(procs: Callable[..., Proc], tmp_path: Path) -> None:
    sched, address, _ = start_scheduler(procs, tmp_path)
    worker = procs([*WORKER, address, "--nthreads", "1", "--no-nanny", "--no-dashboard"], name="worker")
    poll_with_proc(lambda: "Worker at:" in worker.stderr(), 30, "the worker", worker)
    assert "dashboard at:" not in worker.stderr()
    assert worker.signal_and_wait(signal.SIGTERM) == 0, worker.stderr()
    assert sched.signal_and_wait(signal.SIGTERM) == 0, sched.stderr()
