"""SystemMonitor: what every server samples of its process and host, as its config says."""

from __future__ import annotations

import importlib.util
import os

import dask.config
import psutil
import pytest

from distributed import Scheduler, Worker, system_monitor
from distributed.system_monitor import SystemMonitor
from distributed.utils_test import async_poll_for, gen_cluster


def test_samples_are_kept_up_to_maxlen_and_queried_by_count() -> None:
    monitor = SystemMonitor(maxlen=3)
    for _ in range(5):
        monitor.update()
    assert monitor.count == 6  # one sample as it is made
    assert all(len(values) == 3 for values in monitor.quantities.values())
    assert monitor.recent()["memory"] == monitor.quantities["memory"][-1] > 10_000_000
    newest = monitor.range_query(monitor.count - 2)
    assert newest["time"] == list(monitor.quantities["time"])[-2:]
    everything = monitor.range_query(0)
    assert everything["cpu"][:3] == [None] * 3 and len(everything["cpu"]) == 6
    assert monitor.range_query(monitor.count) == {name: [] for name in monitor.quantities}


@pytest.mark.skipif(not hasattr(psutil.Process(), "num_fds"), reason="no descriptor count on this platform")
def test_open_descriptors_are_counted() -> None:
    monitor = SystemMonitor()
    before = monitor.update()["num_fds"]
    files = [open(os.devnull) for _ in range(25)]  # held open on purpose, closed below
    try:
        assert monitor.update()["num_fds"] - before == 25
    finally:
        for f in files:
            f.close()
    assert monitor.update()["num_fds"] == before


def test_config_decides_what_is_sampled() -> None:
    with dask.config.set(
        {
            "distributed.admin.system-monitor.log-length": 4,
            "distributed.admin.system-monitor.disk": False,
            "distributed.admin.system-monitor.host-cpu": True,
        }
    ):
        monitor = SystemMonitor()
    assert monitor.maxlen == 4
    assert not any(name.startswith("host_disk_io") for name in monitor.quantities)
    assert monitor.quantities.get("host_cpu.user")
    # The GIL is measured only where gilknocker is installed, as in dask.distributed.
    with dask.config.set({"distributed.admin.system-monitor.gil.enabled": True}):
        gil = SystemMonitor(monitor_disk_io=False)
    try:
        assert gil.monitor_gil_contention == (importlib.util.find_spec("gilknocker") is not None)
    finally:
        gil.close()
    with dask.config.set({"distributed.admin.system-monitor.log-length": 0}):
        with pytest.raises(ValueError, match="system-monitor.log-length"):
            SystemMonitor()


@gen_cluster(nthreads=[("127.0.0.1", 1)], config={"distributed.admin.system-monitor.interval": "10ms"})
async def test_every_server_samples_at_the_configured_interval(s: Scheduler, a: Worker) -> None:
    start = (s.monitor.count, a.monitor.count)
    await async_poll_for(lambda: s.monitor.count >= start[0] + 5 and a.monitor.count >= start[1] + 5, 10)
    assert s.periodic_callbacks["monitor"].interval == 0.01
    assert s.monitor.recent()["memory"] > 10_000_000


def test_monitors_of_one_process_share_a_fresh_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    # 250 workers' monitors read the counters 500 times a second in one process: a tenth of a core.
    monkeypatch.setattr(system_monitor, "SHARED_READING_AGE", 60.0)  # however slow the machine
    first, second = SystemMonitor(), SystemMonitor()
    a = first.update()
    b = second.update()
    assert b["time"] == a["time"] and b["memory"] == a["memory"]
    # A monitor's own next sample is never its previous reading: it reads afresh (or takes a newer one).
    again = first.update()
    assert again["time"] > a["time"]
    assert all(value >= 0 for name, value in again.items() if name != "time")
