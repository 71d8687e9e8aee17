"""What a server's process and host are doing, sampled every ``distributed.admin.system-monitor.interval``.

Every scheduler, worker and nanny keeps a :class:`SystemMonitor` as
``server.monitor`` and calls :meth:`SystemMonitor.update` from its loop: the
process's CPU percent, memory (RSS) and open file descriptors, the host's
network and (``system-monitor.disk``) disk throughput, and (``host-cpu``) the
host's CPU time split, each kept over the last ``system-monitor.log-length``
samples.  ``system-monitor.gil.enabled`` adds the share of time the GIL was
contended, measured by the ``gilknocker`` package where it is installed (as in
dask.distributed, nothing is measured without it).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import Any

import dask.config
import psutil

from distributed.config import get_interval

__all__ = ["SystemMonitor"]

logger = logging.getLogger("distributed.system_monitor")


#: Host CPU times, in psutil's names (each platform reports some of them).
_HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def _config_flag(key: str, given: bool | None) -> bool:
    return bool(dask.config.get(key)) if given is None else given


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
        self._last_net = psutil.net_io_counters()

        self.monitor_disk_io = _config_flag("distributed.admin.system-monitor.disk", monitor_disk_io)
        self._last_disk: Any = None
        if self.monitor_disk_io:
            try:
                self._last_disk = psutil.disk_io_counters()
            except Exception:
                self._last_disk = None
            if self._last_disk is None:
                # No disks to read (a container without /proc/diskstats): nothing to sample.
                self.monitor_disk_io = False
            else:
                self.quantities["host_disk_io.read_bps"] = deque(maxlen=maxlen)
                self.quantities["host_disk_io.write_bps"] = deque(maxlen=maxlen)

        self.monitor_host_cpu = _config_flag("distributed.admin.system-monitor.host-cpu", monitor_host_cpu)
        self._last_host_cpu: Any = None
        #: The host CPU times this platform's psutil reports.
        self._host_cpu_fields: tuple[str, ...] = ()
        if self.monitor_host_cpu:
            self._last_host_cpu = psutil.cpu_times()
            self._host_cpu_fields = tuple(f for f in _HOST_CPU_FIELDS if hasattr(self._last_host_cpu, f))
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

    def _num_fds(self) -> int:
        """Open file descriptors of this process.

        Linux 6.2 and later give the count as the size of ``/proc/self/fd``;
        psutil lists the directory, which with 10,000 connections took a
        twentieth of an idle scheduler's time (sampled twice a second).
        """
        try:
            count = os.stat(f"/proc/{self.proc.pid}/fd").st_size
        except OSError:
            count = 0
        return count if count > 0 else self.proc.num_fds()

    def update(self) -> dict[str, float]:
        """Take one sample of every quantity; returns it."""
        now = time.time()
        elapsed = max(now - self.last_time, 1e-6)
        with self.proc.oneshot():
            sample: dict[str, float] = {
                "cpu": self.proc.cpu_percent(),
                "memory": float(self.proc.memory_info().rss),
                "time": now,
            }
            if "num_fds" in self.quantities:
                sample["num_fds"] = float(self._num_fds())
        net = psutil.net_io_counters()
        if net is not None and self._last_net is not None:
            sample["host_net_io.read_bps"] = max(net.bytes_recv - self._last_net.bytes_recv, 0) / elapsed
            sample["host_net_io.write_bps"] = max(net.bytes_sent - self._last_net.bytes_sent, 0) / elapsed
        else:
            sample["host_net_io.read_bps"] = sample["host_net_io.write_bps"] = 0.0
        self._last_net = net
        if self.monitor_disk_io:
            disk = psutil.disk_io_counters()
            if disk is not None:
                sample["host_disk_io.read_bps"] = max(disk.read_bytes - self._last_disk.read_bytes, 0) / elapsed
                sample["host_disk_io.write_bps"] = max(disk.write_bytes - self._last_disk.write_bytes, 0) / elapsed
                self._last_disk = disk
        if self.monitor_host_cpu:
            times = psutil.cpu_times()
            for field in self._host_cpu_fields:
                spent = getattr(times, field) - getattr(self._last_host_cpu, field)
                sample[f"host_cpu.{field}"] = max(spent, 0.0) / elapsed
            self._last_host_cpu = times
        if self._gilknocker is not None:
            sample["gil_contention"] = float(self._gilknocker.contention_metric)
            self._gilknocker.reset_contention_metric()
        for name, value in sample.items():
            self.quantities[name].append(value)
        self.last_time = now
        self.count += 1
        return sample

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
