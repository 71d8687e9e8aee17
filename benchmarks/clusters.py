"""Clusters for the workloads, started only through public entry points.

* :func:`local_cluster`: ``LocalCluster`` + ``Client`` (in-process or worker processes).
* :class:`CliCluster`: the scheduler and workers as separate processes started
  with ``python -m distributed.cli.dask_scheduler`` / ``dask_worker``, so the
  scheduler's own CPU time and memory can be read with psutil.
* :class:`StallProbe`: a separate process that times ``Client.scheduler_info()``
  round trips, to see how long the scheduler's event loop stops answering.
* :class:`HeadlessBrowser`: headless Chromium showing a dashboard page, so the
  scheduler's cost of serving it can be measured.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Workers per cluster and threads per worker (the benchmarks target 2 cores).
NWORKERS = 2
THREADS_PER_WORKER = 1
#: Threads the local ``threads`` floor uses: the same as the cluster has.
NTHREADS = NWORKERS * THREADS_PER_WORKER

#: Directory that holds the ``benchmarks`` package; children need it on their path.
BENCH_ROOT = Path(__file__).resolve().parent.parent


def child_env(root: Path = BENCH_ROOT) -> dict[str, str]:
    """Environment for child processes: ``benchmarks`` importable from ``root``, nothing else changed."""
    env = dict(os.environ)
    parts = [str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def check_no_shadowing() -> None:
    """Refuse to start child processes that would import a different ``distributed``.

    Children get ``BENCH_ROOT`` on their path; if a ``distributed`` package sits
    there but this interpreter imported another one, they would silently run
    that source tree instead.
    """
    import distributed

    here = Path(distributed.__file__).resolve().parent
    beside = BENCH_ROOT / "distributed"
    if beside.is_dir() and beside.resolve() != here:
        raise RuntimeError(
            f"a 'distributed' package next to benchmarks/ would shadow the one under test ({here}); "
            "copy benchmarks/ to a directory of its own (see benchmarks/README.md)"
        )


@contextmanager
def local_cluster(processes: bool, tls: bool = False, memory_limit: str | None = None) -> Iterator[Any]:
    """A ``LocalCluster`` of :data:`NWORKERS` single-threaded workers and a client to it.

    With ``tls``, every connection is mutual TLS with throw-away certificates
    (``LocalCluster(security=True)``, as both projects spell it); ``memory_limit``
    is each worker's (the default: the machine's memory shared among them).
    """
    from distributed import Client, LocalCluster

    extra: dict[str, Any] = {"security": True} if tls else {}
    if memory_limit is not None:
        extra["memory_limit"] = memory_limit
    cluster = LocalCluster(
        n_workers=NWORKERS,
        threads_per_worker=THREADS_PER_WORKER,
        processes=processes,
        **extra,
        # The dashboard is on by default in both projects; a free port keeps runs apart.
        dashboard_address="127.0.0.1:0",
    )
    try:
        client = Client(cluster)
        try:
            client.wait_for_workers(NWORKERS, timeout=60)
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def worker_peak_rss(client: Any) -> list[int]:
    """Peak RSS (``VmHWM``) of each worker process of ``client``'s cluster, in bytes."""
    pids = client.run(os.getpid)
    return [peak for peak in (rss_peak_bytes(pid) for pid in pids.values()) if peak is not None]


def settle(client: Any, timeout: float = 30.0) -> None:
    """Wait until the scheduler has forgotten every task (released futures reach it)."""
    from benchmarks.tasks import scheduler_task_count

    gc.collect()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.run_on_scheduler(scheduler_task_count) == 0:
            return
        time.sleep(0.02)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far, all its threads (those gone too).

    Read from the kernel's CPU clock of the process (Linux), to the
    nanosecond: the tick counts psutil reads step by 10 ms, 5 µs a task over
    a 2,000-task map, so that one step was a 20 % change of a gated figure.
    Elsewhere, psutil's.
    """
    try:
        # The clock id clock_getcpuclockid(pid) gives: ~pid << 3, with CPUCLOCK_SCHED (2), process-wide.
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, OverflowError):
        import psutil

        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` now, or None where unknown."""
    import psutil

    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


def rss_peak_bytes(pid: int) -> int | None:
    """Peak resident set size of ``pid`` (Linux ``VmHWM``), or None where unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class CliCluster:
    """Scheduler and workers as separate processes, started from their command lines."""

    def __init__(
        self,
        nworkers: int = NWORKERS,
        nthreads: int = THREADS_PER_WORKER,
        dashboard: bool = True,
        scheduler_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.nworkers = nworkers
        self.nthreads = nthreads
        #: More arguments for ``dask scheduler`` (``--journal FILE``, say).
        self.scheduler_args = list(scheduler_args)
        #: More environment for every process (``DASK_*`` config, say).
        self.env = dict(env or {})
        self._scheduler_starts = 0
        #: Serve the scheduler's dashboard on a free port of 127.0.0.1 (see :attr:`dashboard_port`).
        self.dashboard = dashboard
        self.dashboard_port: int | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-cluster-")
        self.dir = Path(self._tmp.name)
        self.scheduler_file = self.dir / "scheduler.json"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.client: Any = None

    def spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        """Start ``python <args>`` in the cluster's directory, its output to ``log``; closed with the cluster."""
        return self._spawn(args, log)

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.dir / log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**child_env(), **self.env},
                cwd=str(self.dir),
            )
        self.procs.append(proc)
        return proc

    def log_tail(self, n: int = 2000) -> str:
        text = []
        for p in sorted(self.dir.glob("*.log")):
            text.append(f"--- {p.name}\n{p.read_text(errors='replace')[-n:]}")
        return "\n".join(text)

    def start(self, timeout: float = 60.0) -> CliCluster:
        from distributed import Client

        check_no_shadowing()
        self.start_scheduler(0, timeout)
        for i in range(self.nworkers):
            self._spawn(
                [
                    "-m",
                    "distributed.cli.dask_worker",
                    self.address,
                    "--nthreads",
                    str(self.nthreads),
                    # Defaults kept: each worker under a nanny, with its own HTTP endpoints.
                    "--dashboard-address",
                    "127.0.0.1:0",
                    "--host",
                    "127.0.0.1",
                    "--name",
                    f"bench-{i}",
                ],
                f"worker-{i}.log",
            )
        self.client = Client(self.address, timeout=timeout)
        if self.nworkers:
            self.client.wait_for_workers(self.nworkers, timeout=timeout)
        return self

    def start_scheduler(self, port: int, timeout: float = 60.0) -> None:
        """Start ``dask scheduler`` on ``port`` (0: any) and wait until it has written its file (it listens)."""
        self.scheduler_file.unlink(missing_ok=True)
        self._scheduler_starts += 1
        log = "scheduler.log" if self._scheduler_starts == 1 else f"scheduler-{self._scheduler_starts}.log"
        self.scheduler_log = self.dir / log
        self.scheduler = self._spawn(
            [
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *(["--dashboard-address", "127.0.0.1:0"] if self.dashboard else ["--no-dashboard"]),
                "--scheduler-file",
                str(self.scheduler_file),
                *self.scheduler_args,
            ],
            log,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"scheduler exited with {self.scheduler.returncode}\n{self.log_tail()}")
            try:
                identity = json.loads(self.scheduler_file.read_text())
                self.address = identity["address"]
                if self.dashboard:
                    self.dashboard_port = int(identity["services"]["dashboard"])
                break
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"scheduler did not write its file\n{self.log_tail()}")
            time.sleep(0.01)

    def kill_scheduler(self) -> None:
        """SIGKILL the scheduler and wait for its end (start another with :meth:`restart_scheduler`)."""
        assert self.scheduler is not None
        self.scheduler.kill()
        self.scheduler.wait(10)

    def restart_scheduler(self, timeout: float = 60.0) -> None:
        """Start another scheduler at the address of the last one; return once it listens."""
        self.start_scheduler(int(self.address.rsplit(":", 1)[1]), timeout)

    @property
    def scheduler_pid(self) -> int:
        assert self.scheduler is not None
        return self.scheduler.pid

    def scheduler_cpu(self) -> float:
        """User + system CPU seconds the scheduler process has used so far (see :func:`process_cpu_seconds`)."""
        return process_cpu_seconds(self.scheduler_pid)

    def scheduler_rss(self) -> int:
        rss = rss_bytes(self.scheduler_pid)
        if rss is None:
            raise RuntimeError(f"the scheduler's process {self.scheduler_pid} is gone")
        return rss

    def scheduler_peak_rss(self) -> int | None:
        return rss_peak_bytes(self.scheduler_pid)

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close(timeout=10)
            except Exception:
                pass
            self.client = None
        # Workers first, then the scheduler: each by its own PID.
        for proc in [p for p in self.procs if p is not self.scheduler] + ([self.scheduler] if self.scheduler else []):
            _stop(proc)
        self.procs.clear()
        self._tmp.cleanup()

    def __enter__(self) -> CliCluster:
        try:
            return self.start()
        except BaseException:
            self.close()  # what did start (the scheduler, some workers) must not outlive the failure
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)
    except ProcessLookupError:
        pass


class StallProbe:
    """Time ``scheduler_info()`` round trips from a separate process.

    The longest round trip while the scheduler ingests a graph bounds how long
    its event loop was busy without answering anyone.
    """

    def __init__(self, address: str, interval: float = 0.005) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-probe-")
        d = Path(self._tmp.name)
        self.out, self.stop_file, self.ready = d / "samples.json", d / "stop", d / "ready"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks",
                "_probe",
                address,
                str(self.out),
                str(self.stop_file),
                str(self.ready),
                str(interval),
            ],
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=open(d / "probe.log", "wb"),  # noqa: SIM115 - closed with the directory
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("stall probe did not start")
            time.sleep(0.02)

    def finish(self, timeout: float = 60.0) -> list[tuple[float, float]]:
        """Stop the probe; return ``(wall time sent, round-trip seconds)`` samples."""
        self.stop_file.touch()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(self.proc)
        try:
            samples = [(float(a), float(b)) for a, b in json.loads(self.out.read_text())]
        except (OSError, ValueError):
            samples = []
        self._tmp.cleanup()
        return samples


def run_probe(address: str, out: str, stop: str, ready: str, interval: float, limit: float = 3600.0) -> None:
    """Body of ``python -m benchmarks _probe``."""
    from distributed import Client

    samples: list[tuple[float, float]] = []
    deadline = time.monotonic() + limit
    # The probe is the instrument: on a machine as busy as the cluster makes it, its own wait for a
    # CPU would count as the scheduler's stall.  Ahead of the cluster's processes where allowed.
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except (OSError, AttributeError):
        pass
    with Client(address, timeout=30) as client:
        client.scheduler_info()
        Path(ready).touch()
        while not os.path.exists(stop) and time.monotonic() < deadline:
            sent = time.time()
            t0 = time.perf_counter()
            client.scheduler_info()
            samples.append((sent, time.perf_counter() - t0))
            time.sleep(interval)
    Path(out).write_text(json.dumps(samples))


@contextmanager
def cluster_on_first_cpu() -> Iterator[set[int] | None]:
    """Keep this process, and the cluster it starts, on the first CPU; yield the others for a browser.

    A viewer's browser runs on another machine; here it shares this one.  So
    that its drawing does not take the cluster's CPU (and count as the
    dashboard's cost), the cluster runs on the first CPU and the browser on the
    others.  With one CPU nothing changes and None is yielded.
    """
    own = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(own) < 2:
        yield None
        return
    first = min(own)
    os.sched_setaffinity(0, {first})  # the cluster's processes inherit it
    try:
        yield own - {first}
    finally:
        os.sched_setaffinity(0, own)


def find_chromium() -> str | None:
    """A Chromium executable on PATH (Debian's ``chromium`` first), or None."""
    import shutil

    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


class HeadlessBrowser:
    """Headless Chromium showing ``url``, with no network beyond 127.0.0.1; killed by its PID on close."""

    def __init__(self, url: str, executable: str, cpus: set[int] | None = None) -> None:
        """``cpus``: the CPUs the browser and its child processes may run on (all when None)."""
        self.url = url
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-browser-")
        profile = Path(self._tmp.name)
        with open(profile / "chromium.log", "wb") as log:
            self.proc = subprocess.Popen(
                [
                    executable,
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--remote-debugging-port=0",
                    "--remote-debugging-address=127.0.0.1",
                    f"--user-data-dir={profile / 'profile'}",
                    "--window-size=1400,1000",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-extensions",
                    "--disable-sync",
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                    url,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
            )
        self._port_file = profile / "profile" / "DevToolsActivePort"

    def _devtools(self, path: str, method: str = "GET") -> Any:
        """A request to the browser's DevTools HTTP endpoint (``/json/...``), its JSON answer."""
        import urllib.request

        port = int(self._port_file.read_text().split()[0])
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as r:
            body = r.read()
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")

    def wait_loaded(self, title: str, timeout: float = 60.0, tab: str | None = None) -> None:
        """Wait until the page's title (of the tab with id ``tab``, or of any) contains ``title``.

        The title is set once the page's HTML arrived.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the browser exited")
            try:
                pages = self._devtools("/json/list")
                if any(title in t.get("title", "") and (tab is None or t.get("id") == tab) for t in pages):
                    return
            except (OSError, ValueError, IndexError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"no page titled {title!r} loaded in the browser within {timeout:.0f} s")

    def open_tab(self, url: str, title: str, timeout: float = 60.0) -> str:
        """Open ``url`` in a new tab and wait until its title contains ``title``; the tab's id."""
        import urllib.parse

        deadline = time.monotonic() + timeout
        while True:  # the DevTools endpoint answers once the browser is up
            try:
                tab = self._devtools("/json/new?" + urllib.parse.quote(url, safe=":/"), method="PUT")
                break
            except (OSError, ValueError, IndexError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        tab_id = str(tab["id"])
        self.wait_loaded(title, timeout=max(deadline - time.monotonic(), 1.0), tab=tab_id)
        return tab_id

    def close_tab(self, tab_id: str) -> None:
        """Close the tab ``tab_id`` (its page's websocket closes with it)."""
        self._devtools(f"/json/close/{tab_id}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)
        self._tmp.cleanup()
