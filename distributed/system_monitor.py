"""What a server's process and host are doing, sampled every ``distributed.admin.system-monitor.interval``.

Every scheduler, worker and nanny keeps a :class:`SystemMonitor` as
``server.monitor`` and calls :meth:`SystemMonitor.update` from its loop: the
process's CPU percent, memory (RSS) and open file descriptors, the host's
network and (``system-monitor.disk``) disk throughput, and (``host-cpu``) the
host's CPU time split, each kept over the last ``system-monitor.log-length``
samples.  ``system-monitor.gil.enabled`` adds the share of time the GIL was
contended, measured by the ``gilknocker`` package where it is installed (as in
dask.distributed, nothing is measured without it).

The servers of one process read the same counters: a monitor takes the
reading another monitor of the process took less than
:data:`SHARED_READING_AGE` ago, and computes its own rates from it (against
its own previous reading).  A process of 250 workers read them 500 times a
second, idle, each worker's monitor twice a second on its own: a tenth of a
core.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Any, NamedTuple

import dask.config
import psutil

from distributed.config import get_interval

__all__ = ["SHARED_READING_AGE", "SystemMonitor"]

logger = logging.getLogger("distributed.system_monitor")


#: Host CPU times, in psutil's names (each platform reports some of them).
_HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


#: Seconds for which one monitor's reading of the counters serves the other monitors of the process.
SHARED_READING_AGE = 0.05


def _config_flag(key: str, given: bool | None) -> bool:
    return bool(dask.config.get(key)) if given is None else given


class _Reading(NamedTuple):
    """The counters at one moment; rates come from two readings."""

    pid: int
    wall: float
    monotonic: float
    #: The process's CPU time (user + system), seconds.
    cpu: float
    rss: float
    num_fds: int | None
    net: Any
    #: None where not read (the monitor that took the reading did not sample it).
    disk: Any
    host_cpu: Any


_latest: _Reading | None = None
_latest_lock = threading.Lock()


def _num_fds(proc: psutil.Process) -> int:
    """Open file descriptors of this process.

    Linux 6.2 and later give the count as the size of ``/proc/self/fd``;
    psutil lists the directory, which with 10,000 connections took a
    twentieth of an idle scheduler's time (sampled twice a second).
    """
    try:
        count = os.stat(f"/proc/{proc.pid}/fd").st_size
    except OSError:
        count = 0
    return count if count > 0 else int(proc.num_fds())


def _read(proc: psutil.Process, fds: bool, disk: bool, host_cpu: bool, not_before: float) -> _Reading:
    """The newest reading of the process: another monitor's if taken at ``not_before`` or later and
    within :data:`SHARED_READING_AGE`, with what is asked for; else a new one."""
    global _latest
    now = time.monotonic()
    latest = _latest
    if (
        latest is not None
        and latest.pid == proc.pid
        and latest.monotonic > not_before
        and now - latest.monotonic < SHARED_READING_AGE
        and (latest.num_fds is not None or not fds)
        and (latest.disk is not None or not disk)
        and (latest.host_cpu is not None or not host_cpu)
    ):
        return latest
    with proc.oneshot():
        times = proc.cpu_times()
        rss = float(proc.memory_info().rss)
        num_fds = _num_fds(proc) if fds else None
    reading = _Reading(
        pid=proc.pid,
        wall=time.time(),
        monotonic=time.monotonic(),
        cpu=times.user + times.system,
        rss=rss,
        num_fds=num_fds,
        net=psutil.net_io_counters(),
        disk=psutil.disk_io_counters() if disk else None,
        host_cpu=psutil.cpu_times() if host_cpu else None,
    )
    with _latest_lock:
        _latest = reading
    return reading


class SystemMonitor:
    """Samples of this process and its host; the newest last.

    Parameters
    ----------
    maxlen
        Samples kept per quantity (default ``distributed.admin.system-monitor.log-length``;
        None keeps all).
    monitor_disk_io
        Sample the host's disk throughput (default ``...system-monitor.disk``).
    monitor_host_cpu
        Sample the host's CPU time split (default ``...system-monitor.host-cpu``).
    monitor_gil_contention
        Sample the GIL's contention (default ``...system-monitor.gil.enabled``;
        needs ``gilknocker``).
    """

    def __init__(
        self,
        maxlen: int | bool | None = True,
        monitor_disk_io: bool | None = None,
        monitor_host_cpu: bool | None = None,
        monitor_gil_contention: bool | None = None,
    ) -> None:
        if maxlen is True:
            configured = dask.config.get("distributed.admin.system-monitor.log-length")
            maxlen = None if configured is None else int(configured)
        if maxlen is not None and (isinstance(maxlen, bool) or maxlen < 1):
            raise ValueError(f"distributed.admin.system-monitor.log-length must be a positive number, got {maxlen!r}")
        self.maxlen: int | None = maxlen
        self.proc = psutil.Process()
        self.count = 0
        self.quantities: dict[str, deque[float]] = {}
        for name in ("cpu", "memory", "time", "host_net_io.read_bps", "host_net_io.write_bps"):
            self.quantities[name] = deque(maxlen=maxlen)
        if hasattr(self.proc, "num_fds"):
            self.quantities["num_fds"] = deque(maxlen=maxlen)
        self.last_time = time.time()
        #: This monitor's previous reading (None before the first sample).
        self._last: _Reading | None = None

        self.monitor_disk_io = _config_flag("distributed.admin.system-monitor.disk", monitor_disk_io)
        if self.monitor_disk_io:
            try:
                disk_counters = psutil.disk_io_counters()
            except Exception:
                disk_counters = None
            if disk_counters is None:
                # No disks to read (a container without /proc/diskstats): nothing to sample.
                self.monitor_disk_io = False
            else:
                self.quantities["host_disk_io.read_bps"] = deque(maxlen=maxlen)
                self.quantities["host_disk_io.write_bps"] = deque(maxlen=maxlen)

        self.monitor_host_cpu = _config_flag("distributed.admin.system-monitor.host-cpu", monitor_host_cpu)
        #: The host CPU times this platform's psutil reports.
        self._host_cpu_fields: tuple[str, ...] = ()
        if self.monitor_host_cpu:
            host_times = psutil.cpu_times()
            self._host_cpu_fields = tuple(f for f in _HOST_CPU_FIELDS if hasattr(host_times, f))
            for field in self._host_cpu_fields:
                self.quantities[f"host_cpu.{field}"] = deque(maxlen=maxlen)

        self._gilknocker: Any = None
        if _config_flag("distributed.admin.system-monitor.gil.enabled", monitor_gil_contention):
            self._start_gil_knocker()
        self.update()

    def _start_gil_knocker(self) -> None:
        try:
            import gilknocker  # type: ignore[import-not-found,unused-ignore]  # optional, not typed
        except ImportError:
            logger.debug("gilknocker is not installed: GIL contention is not measured")
            return
        interval = get_interval("distributed.admin.system-monitor.gil.interval", 0.001)
        self._gilknocker = gilknocker.KnockKnock(polling_interval_micros=int(interval * 1e6))
        self._gilknocker.start()
        self.quantities["gil_contention"] = deque(maxlen=self.maxlen)

    @property
    def monitor_gil_contention(self) -> bool:
        """Whether the GIL's contention is sampled (asked for, and ``gilknocker`` is installed)."""
        return self._gilknocker is not None

    def get_process_memory(self) -> int:
        """This process's resident memory in bytes, now."""
        return int(self.proc.memory_info().rss)

    def recent(self) -> dict[str, float]:
        """The newest sample of each quantity."""
        return {name: values[-1] for name, values in self.quantities.items() if values}

    def update(self) -> dict[str, float]:
        """Take one sample of every quantity; returns it.

        The first sample has no rates yet: they are 0 (the CPU percent too, as
        psutil's first ``cpu_percent()``).
        """
        last = self._last
        reading = _read(
            self.proc,
            "num_fds" in self.quantities,
            self.monitor_disk_io,
            self.monitor_host_cpu,
            -1.0 if last is None else last.monotonic,
        )
        elapsed = 0.0 if last is None else max(reading.monotonic - last.monotonic, 1e-6)
        sample: dict[str, float] = {
            "cpu": round(100 * max(reading.cpu - last.cpu, 0.0) / elapsed, 1) if last is not None else 0.0,
            "memory": reading.rss,
            "time": reading.wall,
        }
        if reading.num_fds is not None:
            sample["num_fds"] = float(reading.num_fds)
        sample["host_net_io.read_bps"] = self._rate(reading.net, last and last.net, "bytes_recv", elapsed)
        sample["host_net_io.write_bps"] = self._rate(reading.net, last and last.net, "bytes_sent", elapsed)
        if self.monitor_disk_io and reading.disk is not None:
            sample["host_disk_io.read_bps"] = self._rate(reading.disk, last and last.disk, "read_bytes", elapsed)
            sample["host_disk_io.write_bps"] = self._rate(reading.disk, last and last.disk, "write_bytes", elapsed)
        if self.monitor_host_cpu:
            for field in self._host_cpu_fields:
                sample[f"host_cpu.{field}"] = self._rate(reading.host_cpu, last and last.host_cpu, field, elapsed)
        if self._gilknocker is not None:
            sample["gil_contention"] = float(self._gilknocker.contention_metric)
            self._gilknocker.reset_contention_metric()
        for name, value in sample.items():
            self.quantities[name].append(value)
        self._last = reading
        self.last_time = reading.wall
        self.count += 1
        return sample

    @staticmethod
    def _rate(now: Any, before: Any, field: str, elapsed: float) -> float:
        """The growth per second of the counter ``field`` from ``before`` to ``now`` (0 without both)."""
        if now is None or before is None or not elapsed:
            return 0.0
        return float(max(getattr(now, field) - getattr(before, field), 0) / elapsed)

    def range_query(self, start: int) -> dict[str, list[float | None]]:
        """Each quantity's samples from sample number ``start`` on (None where older ones were dropped).

        ``count`` is the number of samples taken so far: a caller passes the
        count it saw last time to get only what is new.
        """
        if start >= self.count:
            return {name: [] for name in self.quantities}
        wanted = self.count - start
        out: dict[str, list[float | None]] = {}
        for name, values in self.quantities.items():
            kept = list(values)[-wanted:] if wanted <= len(values) else list(values)
            out[name] = [None] * (wanted - len(kept)) + list(kept)
        return out

    def close(self) -> None:
        """Stop what samples in the background (the GIL knocker)."""
        if self._gilknocker is not None:
            self._gilknocker.stop()
            self._gilknocker = None

    def __repr__(self) -> str:
        recent = self.recent()
        return f"<SystemMonitor: cpu: {recent.get('cpu', 0):.0f} memory: {int(recent.get('memory', 0))} fds: " + (
            f"{int(recent['num_fds'])}>" if "num_fds" in recent else "n/a>"
        )
