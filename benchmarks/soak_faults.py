"""The soak's clusters and faults other than a plain kill.

Three topologies:

``local``
    ``LocalCluster(processes=True, n_workers=3, threads_per_worker=1)`` on 127.0.0.1, plus
    (for the ``disk`` fault) one more nanny-run worker started with the ``dask worker`` CLI
    whose local directory is a small tmpfs.
``hosts``
    Test hosts (network namespaces on a bridge, ``distributed/tests/hosts.py`` loaded by
    path): the scheduler on the first host, started with the ``dask scheduler`` CLI, and one
    nanny-run ``dask worker`` on each of three more hosts (the last one's local directory on
    the tmpfs when the ``disk`` fault is on).  This process moves itself into the
    scheduler's host (``setns``) so that its client reaches the scheduler; it moves back
    at the end.  Needed by the ``cut`` fault.
``cli``
    A scheduler started with the ``dask scheduler`` CLI with a journal (``--journal``) and
    three nanny-run ``dask worker`` processes, on 127.0.0.1.  Needed by the ``scheduler``
    fault.

The faults (besides ``kill``, in ``soak.py``):

``freeze``
    SIGSTOP one worker process (a child of its nanny) for longer than the scheduler's
    worker TTL, then SIGCONT.
``cut``
    Cut one worker host's link at the bridge for longer than the TTL, then restore it.
``disk``
    Fill the tmpfs under the disk worker's local directory with a filler file, push more
    data onto that worker than its memory target holds (so it must spill into the full
    disk), check the result, then delete the filler.
``scheduler``
    SIGKILL the scheduler and start another on its journal at the same address (its own
    cadence, ``--scheduler-kill-every``); recovered once every worker is listed again and
    answers.  Not among the default faults: it needs the ``cli`` topology.

Everything made here (namespaces, the mount, processes, the filler file, a stopped process,
a cut link) is undone by the ``ExitStack`` callbacks, also on Ctrl-C or an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Every fault the soak knows, in the order they rotate (``kill`` and ``scheduler`` have cadences of their own).
FAULTS = ("kill", "freeze", "cut", "disk", "scheduler")
#: The faults a soak injects when none are named: ``scheduler`` runs on a cluster of its own (``cli``).
DEFAULT_FAULTS = ("kill", "freeze", "cut", "disk")
#: The name of the worker whose local directory is on the tmpfs.
DISK_WORKER = "soak-disk"
#: Its memory limit and memory target (fraction): it starts spilling past about 100 MB.
DISK_WORKER_MEMORY = "1GiB"
DISK_WORKER_TARGET = "0.1"
_CLONE_NEWNET = 0x40000000
_REPO = Path(__file__).resolve().parents[1]


def _test_hosts_module() -> Any:
    from benchmarks.workloads import _test_hosts_module as load

    return load()


def unavailable(wanted: list[str]) -> dict[str, str]:
    """``{fault: why it cannot run here}`` for the wanted faults this machine cannot do."""
    out: dict[str, str] = {}
    if ("kill" in wanted or "freeze" in wanted) and not hasattr(signal, "SIGSTOP"):
        for f in ("kill", "freeze"):
            if f in wanted:
                out[f] = "needs POSIX signals"
    if "scheduler" in wanted and not hasattr(signal, "SIGKILL"):
        out["scheduler"] = "needs POSIX signals"
    if "cut" in wanted:
        why = _test_hosts_module().hosts_available()
        if why is not None:
            out["cut"] = f"needs test hosts (network namespaces): {why}"
    if "disk" in wanted:
        if not sys.platform.startswith("linux"):
            out["disk"] = "needs Linux (a tmpfs mount)"
        elif os.geteuid() != 0:
            out["disk"] = "mounting a tmpfs needs root"
        elif shutil.which("mount") is None or shutil.which("umount") is None:
            out["disk"] = "no 'mount'/'umount' command"
    return out


def _env() -> dict[str, str]:
    """The environment of the processes started here: this repository importable."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(_REPO) + (os.pathsep + path if path else "")}


def _end_group(proc: subprocess.Popen[Any], grace: float = 10) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def _mount_tmpfs(stack: contextlib.ExitStack, path: Path, size_mb: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "soak-disk", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )

    def unmount() -> None:
        done = subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
        if done.returncode != 0:  # still busy: detach it now, freed when the last user goes
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
        with contextlib.suppress(OSError):
            path.rmdir()

    stack.callback(unmount)


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass
class SoakCluster:
    """A running cluster and what the faults need to know about it."""

    topology: str
    client: Any
    n_workers: int
    #: Worker name -> the test host it runs on (``hosts`` topology).
    host_of_name: dict[str, Any] = field(default_factory=dict)
    #: The tmpfs under the disk worker's local directory (``disk`` fault).
    disk_dir: Path | None = None
    scheduler_pid: int | None = None
    notes: list[str] = field(default_factory=list)
    #: Kill the scheduler (SIGKILL) and start another on its journal at its address (``cli`` topology).
    restart_scheduler: Callable[[], None] | None = None
    #: The log of the scheduler running now (``cli`` topology).
    scheduler_log: Callable[[], Path] | None = None


def start_cluster(
    stack: contextlib.ExitStack, topology: str, disk: bool, ttl: float, workdir: Path, disk_mb: int
) -> SoakCluster:
    """Start the cluster of ``topology`` (``local`` or ``hosts``); ``stack`` takes it down."""
    disk_dir = workdir / "disk" if disk else None
    if disk_dir is not None:
        _mount_tmpfs(stack, disk_dir, disk_mb)
    if topology == "hosts":
        return _start_hosts(stack, disk_dir, ttl, workdir)
    if topology == "cli":
        return _start_cli(stack, ttl, workdir)
    return _start_local(stack, disk_dir, ttl)


def _start_cli(stack: contextlib.ExitStack, ttl: float, workdir: Path) -> SoakCluster:
    """A scheduler from its command line with a journal, and three nanny-run workers, all on 127.0.0.1."""
    from benchmarks.clusters import CliCluster

    env = {"DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": f"{ttl}s", "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "3"}
    journal = ["--journal", str(workdir / "journal.db")]
    cluster = CliCluster(nworkers=3, nthreads=1, dashboard=False, scheduler_args=journal, env=env)
    stack.enter_context(cluster)

    def restart_scheduler() -> None:
        cluster.kill_scheduler()
        cluster.restart_scheduler()

    return SoakCluster(
        "cli",
        cluster.client,
        cluster.nworkers,
        scheduler_pid=cluster.scheduler_pid,
        restart_scheduler=restart_scheduler,
        scheduler_log=lambda: cluster.scheduler_log,
    )


def _disk_worker_env() -> dict[str, str]:
    return {"DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": DISK_WORKER_TARGET}


def _start_local(stack: contextlib.ExitStack, disk_dir: Path | None, ttl: float) -> SoakCluster:
    import dask

    from distributed import Client, LocalCluster

    # The scheduler runs in this process: it reads the configuration now.
    cfg = stack.enter_context(
        dask.config.set({"distributed.scheduler.allowed-failures": 3, "distributed.scheduler.worker-ttl": f"{ttl}s"})
    )
    del cfg
    cluster = LocalCluster(processes=True, n_workers=3, threads_per_worker=1, host="127.0.0.1", dashboard_address=None)
    stack.callback(cluster.close, timeout=30)
    n = 3
    if disk_dir is not None:
        log = open(disk_dir.parent / "disk-worker.log", "w")  # noqa: SIM115  # closed by the stack
        stack.callback(log.close)
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dask-worker"),
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--name",
                DISK_WORKER,
                "--local-directory",
                str(disk_dir),
                "--memory-limit",
                DISK_WORKER_MEMORY,
            ],
            env={**os.environ, **_env(), **_disk_worker_env()},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(_end_group, proc)
        n += 1
    client = Client(cluster)
    stack.callback(client.close, timeout=30)
    client.wait_for_workers(n, timeout=120)
    return SoakCluster("local", client, n, disk_dir=disk_dir, scheduler_pid=os.getpid())


def _start_hosts(stack: contextlib.ExitStack, disk_dir: Path | None, ttl: float, workdir: Path) -> SoakCluster:
    mod = _test_hosts_module()
    hosts = stack.enter_context(mod.TestHosts(4, workdir / "hosts"))
    env = {
        **_env(),
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": f"{ttl}s",
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "3",
    }
    scheduler_file = workdir / "scheduler.json"
    sched = hosts[0].scheduler("--scheduler-file", str(scheduler_file), "--no-dashboard", "--port", "0", env=env)
    host_of_name: dict[str, Any] = {}
    for i, host in enumerate(hosts.hosts[1:]):
        name = DISK_WORKER if disk_dir is not None and i == 2 else f"soak-w{i + 1}"
        args = ["--scheduler-file", str(scheduler_file), "--nthreads", "1", "--no-dashboard", "--name", name]
        wenv = dict(env)
        if name == DISK_WORKER:
            args += ["--local-directory", str(disk_dir), "--memory-limit", DISK_WORKER_MEMORY]
            wenv.update(_disk_worker_env())
        host.worker(*args, env=wenv)
        host_of_name[name] = host
    # The client must be where it can reach the scheduler: this process joins its host's network.
    if threading.active_count() != 1:
        raise RuntimeError("the hosts topology must move this process into a namespace before any thread starts")
    own = os.open("/proc/self/ns/net", os.O_RDONLY)

    def back() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.setns(own, _CLONE_NEWNET)
        os.close(own)

    stack.callback(back)
    _setns(f"/run/netns/{hosts[0].netns}")

    from distributed import Client

    deadline = time.monotonic() + 60
    while not scheduler_file.exists():
        if time.monotonic() > deadline or sched.poll() is not None:
            raise RuntimeError(f"the scheduler did not start:\n{hosts.logs()}")
        time.sleep(0.1)
    client = Client(scheduler_file=str(scheduler_file), timeout=60)
    stack.callback(client.close, timeout=30)
    client.wait_for_workers(3, timeout=120)
    return SoakCluster("hosts", client, 3, host_of_name=host_of_name, disk_dir=disk_dir, scheduler_pid=sched.pid)


# -- faults ---------------------------------------------------------------------------------
class Undo:
    """What a fault in progress must undo if the soak stops in its middle (Ctrl-C, an error)."""

    def __init__(self) -> None:
        self.stopped: set[int] = set()
        self.cut: list[Any] = []
        self.files: list[Path] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        with self.lock:
            for pid in self.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self.stopped.clear()
            for host in self.cut:
                with contextlib.suppress(Exception):
                    host.restore()
            self.cut.clear()
            for path in self.files:
                with contextlib.suppress(OSError):
                    path.unlink()
            self.files.clear()


def fill_disk(directory: Path, chunk: int = 1 << 20) -> tuple[Path, int]:
    """Write a filler file in ``directory`` until the file system is full; its path and size."""
    path = directory / "soak-filler"
    written = 0
    block = b"\0" * chunk
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                n = os.write(fd, block)
            except OSError:  # ENOSPC: full
                break
            if n == 0:
                break
            written += n
    finally:
        os.close(fd)
    return path, written


# -- helpers that never wait longer than they are told ----------------------------------------
class CallTimeout(TimeoutError):
    """A call outlived the time it was given (it goes on in its thread, abandoned)."""


def call(fn: Any, timeout: float, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a daemon thread; :class:`CallTimeout` when it outlives ``timeout``."""
    out: list[Any] = []
    err: list[BaseException] = []

    def target() -> None:
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as e:
            err.append(e)

    t = threading.Thread(target=target, name="soak-call", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise CallTimeout(f"{getattr(fn, '__name__', fn)} outlived {timeout} s")
    if err:
        raise err[0]
    return out[0]


def _scheduler_workers(dask_scheduler: Any) -> dict[str, Any]:
    return {addr: ws.name for addr, ws in dask_scheduler.workers.items()}


def workers_now(client: Any, timeout: float = 10.0) -> dict[str, Any] | None:
    """``{address: name}`` of the workers the scheduler lists; ``None`` when it does not answer."""
    try:
        res: dict[str, Any] = call(client.run_on_scheduler, timeout, _scheduler_workers)
    except Exception:
        return None
    return res


def descendants() -> set[int]:
    """The PIDs of every process below this one."""
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def worker_pids(client: Any, timeout: float = 10.0, workers: list[str] | None = None) -> dict[str, int]:
    """``{address: pid}`` of the workers that answer ``os.getpid`` within ``timeout``."""
    try:
        res = call(client.run, timeout, os.getpid, workers=workers, on_error="return")
    except Exception:
        return {}
    return {addr: pid for addr, pid in res.items() if isinstance(pid, int)}


def own_worker_pids(client: Any) -> dict[str, int]:
    """Worker PIDs that are descendants of this process (the only ones a fault may touch)."""
    pids = worker_pids(client)
    mine = descendants()
    return {a: p for a, p in pids.items() if p in mine and p != os.getpid()}


def wait_recovered(client: Any, n: int, gone: set[str], timeout: float) -> float | None:
    """Seconds until the scheduler lists ``n`` workers, none of ``gone``, and all of them answer; ``None`` after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        ws = workers_now(client)
        if ws is not None and len(ws) >= n and not gone & set(ws):
            answered = worker_pids(client, timeout=5.0, workers=sorted(ws))
            if set(answered) >= set(ws):
                return round(time.monotonic() - t0, 2)
        time.sleep(0.5)
    return None


# -- task functions for the disk fault ----------------------------------------------------------
def make_block(seed: int, nbytes: int) -> Any:
    """``nbytes`` of seeded random bytes as a NumPy array."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def block_crcs(blocks: list[Any]) -> list[int]:
    """The CRC-32 of each block."""
    import zlib

    return [zlib.crc32(memoryview(b)) for b in blocks]


def probe(x: int) -> int:
    """``x + 1``, to see a worker run a task."""
    return x + 1


# -- the faults -------------------------------------------------------------------------------
@dataclass
class FaultContext:
    """What every fault needs."""

    cluster: SoakCluster
    undo: Undo
    stop: threading.Event
    hold: float
    recover_timeout: float
    timeout: float
    disk_burst_mb: int


def _hold(ctx: FaultContext, seconds: float) -> None:
    ctx.stop.wait(seconds)


def fault_kill(ctx: FaultContext, rng: Any) -> dict[str, Any]:
    """SIGKILL one random worker process; recovered when the nanny's new worker is in."""
    client = ctx.cluster.client
    pids = own_worker_pids(client)
    if not pids:
        return {"skipped": "no worker process found"}
    addr = rng.choice(sorted(pids))
    try:
        os.kill(pids[addr], signal.SIGKILL)
    except ProcessLookupError:
        return {"skipped": "already gone"}
    rec = wait_recovered(client, ctx.cluster.n_workers, {addr}, ctx.recover_timeout)
    return {"target": addr, "pid": pids[addr], "recovery_s": rec}


def fault_freeze(ctx: FaultContext, rng: Any) -> dict[str, Any]:
    """SIGSTOP one worker process for ``hold`` seconds (past the TTL), then SIGCONT."""
    import psutil

    client = ctx.cluster.client
    pids = own_worker_pids(client)
    if not pids:
        return {"skipped": "no worker process found"}
    addr = rng.choice(sorted(pids))
    pid = pids[addr]
    with ctx.undo.lock:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return {"skipped": "already gone"}
        ctx.undo.stopped.add(pid)
    _hold(ctx, ctx.hold)
    ws = workers_now(client) or {}
    with ctx.undo.lock:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        ctx.undo.stopped.discard(pid)
    rec = wait_recovered(client, ctx.cluster.n_workers, set(), ctx.recover_timeout)
    after = workers_now(client) or {}
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    if addr in after and alive:
        how = "the same worker is back" if addr not in ws else "never removed"
    elif alive:
        how = "process alive but not a worker of the scheduler"
    else:
        how = "process ended; the nanny started a new worker" if rec is not None else "process ended"
    return {"target": addr, "pid": pid, "removed_during": addr not in ws, "recovery_s": rec, "outcome": how}


def fault_cut(ctx: FaultContext, rng: Any) -> dict[str, Any]:
    """Cut one worker host's link for ``hold`` seconds (past the TTL), then restore it."""
    client = ctx.cluster.client
    names = sorted(ctx.cluster.host_of_name)
    if not names:
        return {"skipped": "no test hosts (local topology)"}
    name = rng.choice(names)
    host = ctx.cluster.host_of_name[name]
    before = workers_now(client) or {}
    addrs = {a for a, n in before.items() if n == name}
    with ctx.undo.lock:
        host.cut()
        ctx.undo.cut.append(host)
    _hold(ctx, ctx.hold)
    during = workers_now(client) or {}
    with ctx.undo.lock:
        host.restore()
        ctx.undo.cut.remove(host)
    rec = wait_recovered(client, ctx.cluster.n_workers, set(), ctx.recover_timeout)
    after = workers_now(client) or {}
    back = {a for a, n in after.items() if n == name}
    if not back:
        how = "no worker of that host is back"
    elif back == addrs:
        how = "the same worker is back" if not addrs & set(during) else "never removed"
    else:
        how = "a new worker of that host is back"
    return {
        "target": f"{name} on {host.ip}",
        "addresses": sorted(addrs),
        "removed_during": not addrs & set(during),
        "recovery_s": rec,
        "outcome": how,
    }


def _worker_metrics(address: str, dask_scheduler: Any = None) -> dict[str, Any]:
    ws = dask_scheduler.workers.get(address)
    return dict(ws.metrics) if ws is not None else {}


def _metrics_of(client: Any, address: str) -> dict[str, Any]:
    try:
        res: dict[str, Any] = call(client.run_on_scheduler, 10.0, _worker_metrics, address)
    except Exception:
        return {}
    return res


def fault_disk(ctx: FaultContext, rng: Any) -> dict[str, Any]:
    """Fill the disk worker's tmpfs, make that worker spill into it, check the result, free it."""
    client = ctx.cluster.client
    directory = ctx.cluster.disk_dir
    if directory is None:
        return {"skipped": "no disk worker"}
    ws = workers_now(client) or {}
    addr = next((a for a, n in ws.items() if n == DISK_WORKER), None)
    if addr is None:
        return {"skipped": "the disk worker is not connected"}
    t0 = time.monotonic()
    with ctx.undo.lock:
        path, filled = fill_disk(directory)
        ctx.undo.files.append(path)
    # More than the worker's memory target holds: some of it must go to the full disk.
    block = 4 << 20
    n = max(1, ctx.disk_burst_mb * (1 << 20) // block)
    seed = rng.randrange(2**31)
    expected = block_crcs([make_block(seed + i, block) for i in range(n)])
    blocks = client.map(make_block, [seed + i for i in range(n)], [block] * n, workers=[addr], pure=False)
    check = client.submit(block_crcs, blocks, workers=[addr], pure=False)
    try:
        got = check.result(timeout=ctx.timeout)
    except TimeoutError:
        result = "hung (no result within the timeout)"
    except Exception as e:
        result = f"error: {type(e).__name__}: {str(e)[:200]}"
    else:
        result = "correct" if got == expected else "wrong"
    # What the worker's heartbeats say of its spilling while the disk stays full.
    spilled_mb, disk_error = 0.0, None
    while True:
        metrics = _metrics_of(client, addr)
        spilled_mb = max(spilled_mb, (metrics.get("spilled_bytes") or {}).get("disk", 0) / 2**20)
        disk_error = metrics.get("spill_disk_error") or disk_error
        left = ctx.hold - (time.monotonic() - t0)
        if left <= 0 or ctx.stop.wait(min(1.0, left)):
            break
    with ctx.undo.lock:
        with contextlib.suppress(OSError):
            path.unlink()
        ctx.undo.files.remove(path)
    t_free = time.monotonic()
    del blocks, check
    rec = wait_recovered(client, ctx.cluster.n_workers, set(), ctx.recover_timeout)
    probe_ok = False
    if rec is not None:
        ws = workers_now(client) or {}
        now = next((a for a, n in ws.items() if n == DISK_WORKER), None)
        if now is not None:
            try:
                probe_ok = client.submit(probe, 1, workers=[now], pure=False).result(timeout=30) == 2
            except Exception:
                probe_ok = False
        rec = round(time.monotonic() - t_free, 2) if probe_ok else None
    return {
        "target": addr,
        "filled_mb": round(filled / 2**20, 1),
        "spill_burst_mb": n * block // 2**20,
        "burst_result": result,
        "spilled_to_disk_mb_max": round(spilled_mb, 1),
        "spill_disk_error": disk_error,
        "recovery_s": rec,
        "outcome": result,
    }


def fault_scheduler(ctx: FaultContext, rng: Any) -> dict[str, Any]:
    """SIGKILL the scheduler and start another on its journal; recovered when every worker is back and answers."""
    restart = ctx.cluster.restart_scheduler
    if restart is None:
        return {"skipped": "needs the cli topology"}
    t0 = time.monotonic()
    restart()
    listening = round(time.monotonic() - t0, 2)
    rec = wait_recovered(ctx.cluster.client, ctx.cluster.n_workers, set(), ctx.recover_timeout)
    return {"listening_s": listening, "recovery_s": rec, **_takeover_figures(ctx.cluster)}


def _takeover_figures(cluster: SoakCluster, timeout: float = 30.0) -> dict[str, Any]:
    """The new scheduler's own account of its takeover: seconds, and messages of the journal replayed."""
    if cluster.scheduler_log is None:
        return {}
    log = cluster.scheduler_log()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"Took over from the journal in ([0-9.]+) s: (\d+) messages replayed", log.read_text())
        if found:
            return {"takeover_s": float(found.group(1)), "replayed": int(found.group(2))}
        time.sleep(0.1)
    return {"takeover_s": None, "replayed": None}


FAULT_FUNCTIONS = {
    "kill": fault_kill,
    "freeze": fault_freeze,
    "cut": fault_cut,
    "disk": fault_disk,
    "scheduler": fault_scheduler,
}
