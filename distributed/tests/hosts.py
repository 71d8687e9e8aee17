"""Several hosts on one machine, for tests of what crosses a network.

Each test host is a Linux network namespace with one interface, ``eth0``, the
end of a veth pair whose other end hangs on a bridge.  The bridge lives in a
namespace of its own with no uplink, so the hosts reach one another and
nothing else.  Every host has an address on a private ``/24`` and one on a
unique-local IPv6 ``/64``, both existing only inside these namespaces, and
default routes to its link: a server there that
asks which interface routes outward (without sending anything) finds its own
``eth0`` address, as on a real machine.

A link is cut (``ip link set DEV down``) and shaped (``tc ... tbf``) at its
bridge end, so the host itself sees a silent network, not an error: its
connections stall as they would when a cable is pulled.

Creating namespaces needs root (``CAP_SYS_ADMIN``) and ``ip`` from iproute2.
Without them the :func:`hosts` fixture skips its test with the reason, except
under ``CI=true``, where it fails: there the multi-host tests must run.

:meth:`TestHosts.close` ends the processes started on the hosts first (by
PID: their process groups, then anything else left in a host's namespace),
then deletes the namespaces, and runs even when the test failed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

__all__ = ["TestHost", "TestHosts", "hosts_available", "require_hosts", "wait_for"]

#: The directory of this interpreter's scripts (``dask-scheduler``, ``dask-worker``).
BIN = Path(sys.executable).parent

_subnets = itertools.count(1)


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=check)


def hosts_available() -> str | None:
    """``None`` when this process can make test hosts, else why not."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if shutil.which("ip") is None:
        return "no 'ip' command (iproute2)"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"dtprobe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


def require_hosts() -> None:
    """Skip the calling test when test hosts cannot be made; under ``CI=true``, fail instead."""
    why = hosts_available()
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"The multi-host tests must run in CI, but: {why}")
    pytest.skip(f"needs test hosts (network namespaces): {why}")


class TestHost:
    """One host: a network namespace with an address on the test network."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, hosts: TestHosts, index: int, netns: str, ip: str, bridge_port: str, ip6: str) -> None:
        self.hosts = hosts
        self.index = index
        #: The namespace's name (``ip netns exec NAME ...``).
        self.netns = netns
        #: This host's addresses on the test network, IPv4 and IPv6.
        self.ip = ip
        self.ip6 = ip6
        #: The link's end on the bridge, in the bridge's namespace: cut and shaped there.
        self.bridge_port = bridge_port
        self.procs: list[subprocess.Popen[str]] = []
        #: The log file of each process started with its output to a log, by PID.
        self.log_paths: dict[int, Path] = {}

    def __repr__(self) -> str:
        return f"<TestHost {self.index} {self.ip}>"

    def popen(self, args: Sequence[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``args`` on this host, in a process group of its own; :meth:`TestHosts.close` ends it.

        Output goes to a log file in the hosts' directory unless ``stdout`` is given.
        """
        log = self.hosts.directory / f"h{self.index}-{len(self.procs)}-{Path(args[0]).name}.log"
        if "stdout" not in kwargs:
            kwargs["stdout"] = open(log, "w")  # closed with the process, by close()
        kwargs.setdefault("stderr", subprocess.STDOUT)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, *args],
            env={**os.environ, **(env or {})},
            start_new_session=True,
            text=True,
            **kwargs,
        )
        if kwargs["stdout"] is not subprocess.PIPE:
            self.log_paths[proc.pid] = log
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[str]) -> str:
        """What ``proc`` (started by :meth:`popen` with its output to a log) has written so far."""
        return self.log_paths[proc.pid].read_text(errors="replace")

    def run(self, args: Sequence[str], timeout: float = 120, env: dict[str, str] | None = None) -> str:
        """Run ``args`` on this host to its end; its standard output.

        Raises
        ------
        AssertionError
            When it exits with an error (with its output), or outlives ``timeout``.
        """
        proc = self.popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            out, err = proc.communicate()
            raise AssertionError(f"{list(args)} on {self} outlived {timeout} s:\n{out}\n{err}") from None
        assert proc.returncode == 0, f"{list(args)} on {self} exited {proc.returncode}:\n{out}\n{err}"
        return out

    def python(self, code: str, timeout: float = 120, env: dict[str, str] | None = None) -> Any:
        """Run Python ``code`` on this host; the JSON it prints on its last line, decoded."""
        out = self.run([sys.executable, "-c", textwrap.dedent(code)], timeout=timeout, env=env)
        lines = out.strip().splitlines()
        assert lines, f"no output from the code run on {self}"
        return json.loads(lines[-1])

    def scheduler(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``dask-scheduler ARGS`` on this host."""
        return self.popen([str(BIN / "dask-scheduler"), *args], env=env)

    def worker(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``dask-worker ARGS`` on this host (nannies by default, as the CLI)."""
        return self.popen([str(BIN / "dask-worker"), *args], env=env)

    def cut(self) -> None:
        """Cut this host's link: its packets go nowhere until :meth:`restore`, and it is not told."""
        _ip("link", "set", self.bridge_port, "down", ns=self.hosts.bridge_ns)

    def restore(self) -> None:
        """Join the link cut by :meth:`cut` again."""
        _ip("link", "set", self.bridge_port, "up", ns=self.hosts.bridge_ns)

    def shape(self, rate: str, direction: Literal["in", "out", "both"] = "both") -> None:
        """Limit this host's link to ``rate`` (``"200mbit"``) with a token bucket filter.

        ``"in"`` shapes what the host receives (at the bridge end), ``"out"``
        what it sends (at its own ``eth0``).
        """
        spec = ["root", "tbf", "rate", rate, "burst", "256kb", "latency", "100ms"]
        if direction in ("in", "both"):
            _tc(self.hosts.bridge_ns, "qdisc", "replace", "dev", self.bridge_port, *spec)
        if direction in ("out", "both"):
            _tc(self.netns, "qdisc", "replace", "dev", "eth0", *spec)


def _tc(ns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True, text=True, timeout=30, check=True)


def _end_group(proc: subprocess.Popen[str], grace: float = 10) -> None:
    """End ``proc``'s process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived their parent, too
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


class TestHosts:
    """``n`` test hosts joined by a bridge; a context manager that takes everything down on exit.

    Parameters
    ----------
    n
        How many hosts.
    directory
        Where the logs of the processes started on the hosts go.

    Examples
    --------
    >>> with TestHosts(2, tmp_path) as hosts:  # doctest: +SKIP
    ...     a, b = hosts
    ...     b.run(["ping", "-c1", a.ip])
    """

    __test__ = False

    def __init__(self, n: int, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        tag = uuid.uuid4().hex[:6]
        self.tag = tag
        self.bridge_ns = f"dt{tag}-br"
        # A /24 of 10.(200..249).x.0 per set of hosts: it exists only inside these namespaces.
        k = next(_subnets) + os.getpid()
        self.subnet = f"10.{200 + k % 50}.{k // 50 % 256}"
        #: A unique-local IPv6 /64 (fd00::/8) of these hosts.
        self.subnet6 = f"fd00:{int(tag[:4], 16):x}:{int(tag[4:], 16):x}"
        self.hosts: list[TestHost] = []
        self._made: list[str] = []
        try:
            self._build(n)
        except BaseException:
            self.close()
            raise

    def _build(self, n: int) -> None:
        subprocess.run(["ip", "netns", "add", self.bridge_ns], check=True, capture_output=True, timeout=30)
        self._made.append(self.bridge_ns)
        _ip("link", "add", "br0", "type", "bridge", ns=self.bridge_ns)
        _ip("link", "set", "br0", "up", ns=self.bridge_ns)
        for i in range(n):
            netns = f"dt{self.tag}-h{i}"
            subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True, timeout=30)
            self._made.append(netns)
            port = f"p{i}"
            # Made in the bridge's namespace, the host's end then moved into the host's.
            _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns, ns=self.bridge_ns)
            _ip("link", "set", port, "master", "br0", ns=self.bridge_ns)
            _ip("link", "set", port, "up", ns=self.bridge_ns)
            ip = f"{self.subnet}.{i + 1}"
            _ip("addr", "add", f"{ip}/24", "dev", "eth0", ns=netns)
            # nodad: usable at once, without waiting for duplicate address detection.
            _ip("addr", "add", f"{self.subnet6}::{i + 1}/64", "dev", "eth0", "nodad", ns=netns)
            _ip("link", "set", "eth0", "up", ns=netns)
            _ip("link", "set", "lo", "up", ns=netns)
            _ip("route", "add", "default", "dev", "eth0", ns=netns)
            _ip("-6", "route", "add", "default", "dev", "eth0", ns=netns)
            self.hosts.append(TestHost(self, i, netns, ip, port, f"{self.subnet6}::{i + 1}"))

    def __enter__(self) -> TestHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[TestHost]:
        return iter(self.hosts)

    def __getitem__(self, i: int) -> TestHost:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def close(self) -> None:
        """End every process started on the hosts, then delete the namespaces (safe to call twice)."""
        for host in self.hosts:
            for proc in host.procs:
                _end_group(proc)
                if proc.stdout is not None and not proc.stdout.closed:
                    proc.stdout.close()
        for netns in self._made:
            # Anything still in the namespace was started from these hosts' processes.
            pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for netns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
        self._made.clear()

    def logs(self) -> str:
        """The output of every process started on the hosts (for a failing test's report)."""
        parts = []
        for path in sorted(self.directory.glob("h*.log")):
            parts.append(f"---- {path.name}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Wait until ``predicate()`` holds, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def shaped_transfer_rates(hosts: TestHosts, rate_mbit: float, mb: float, repeat: int = 3) -> dict[str, list[float]]:
    """Bytes per second of a gather and of a worker-to-worker transfer over links shaped to ``rate_mbit``.

    ``hosts`` needs four hosts: a scheduler on the first, a nanny-run worker
    on the second and third, and the client on the fourth.  Every link is
    limited to ``rate_mbit`` both ways by a token bucket filter.  Each of
    ``repeat`` rounds (after one warm-up) times ``client.gather`` of ``mb`` MB
    held by a worker, and a task on one worker that needs ``mb`` MB held by
    the other.  Both are returned as fractions of the link's rate.
    """
    s, a, b, client = hosts[0], hosts[1], hosts[2], hosts[3]
    for host in (s, a, b, client):
        host.shape(f"{rate_mbit}mbit")
    scheduler_file = hosts.directory / "scheduler.json"
    s.scheduler("--scheduler-file", str(scheduler_file), "--no-dashboard")
    for host in (a, b):
        host.worker("--scheduler-file", str(scheduler_file), "--nthreads", "1", "--no-dashboard")
    code = f"""
        import json, time
        import numpy as np
        from distributed import Client, wait
        nbytes = int({mb} * 1e6)
        with Client(scheduler_file={str(scheduler_file)!r}, timeout=60) as c:
            c.wait_for_workers(2, timeout=60)
            wa, wb = sorted(c.scheduler_info()["workers"])
            gather, w2w = [], []
            for i in range({repeat} + 1):
                src = c.submit(np.random.bytes, nbytes, workers=[wa], pure=False)
                wait(src)
                t0 = time.perf_counter()
                assert len(c.gather(src)) == nbytes
                t1 = time.perf_counter()
                dst = c.submit(len, src, workers=[wb], pure=False)
                assert dst.result() == nbytes
                t2 = time.perf_counter()
                del src, dst
                if i:
                    gather.append(t1 - t0)
                    w2w.append(t2 - t1)
        print(json.dumps({{"gather": gather, "worker_to_worker": w2w}}))
    """
    times = client.python(code, timeout=600)
    link = rate_mbit * 1e6 / 8
    return {name: [mb * 1e6 / t / link for t in values] for name, values in times.items()}
