"""``Client.benchmark_hardware``: every worker measures memory, disk and network; the scheduler averages."""

from __future__ import annotations

import os
from typing import Literal

import pytest

from distributed import Client
from distributed.core import ConnectionPool
from distributed.scheduler import Scheduler
from distributed.scheduler.hardware import mean_by_size
from distributed.utils_test import gen_cluster
from distributed.worker import Worker
from distributed.worker.hardware import (
    DISK_SIZES,
    MEMORY_SIZES,
    NETWORK_SIZES,
    benchmark_disk,
    benchmark_memory,
    benchmark_network,
)

pytestmark = pytest.mark.timeout(120)


@gen_cluster(client=True)
async def test_benchmark_hardware_measures_every_size(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    result = await c.benchmark_hardware(duration=0.01)
    assert set(result) == {"disk", "memory", "network"}
    assert list(result["disk"]) == list(DISK_SIZES)
    assert list(result["memory"]) == list(MEMORY_SIZES)
    assert list(result["network"]) == list(NETWORK_SIZES)
    assert all(v > 0 for measure in result.values() for v in measure.values())
    # The disk measure cleans up after itself.
    for w in (a, b):
        assert not [name for name in os.listdir(w.local_directory) if name.startswith("benchmark-disk-")]
    # The cluster goes on.
    assert await c.submit(sum, [1, 2]) == 3


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_one_worker_measures_no_network(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    result = await c.benchmark_hardware(duration=0.01)
    assert result["network"] == {}
    assert result["memory"] and result["disk"]


@gen_cluster(client=True, nthreads=[])
async def test_no_workers_is_an_error(c: Client[Literal[True]], s: Scheduler) -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        await c.benchmark_hardware()
    with pytest.raises(ValueError, match="duration"):
        await c.benchmark_hardware(duration=0)


def test_memory_and_disk_measure_what_they_move(tmp_path: os.PathLike[str]) -> None:
    memory = benchmark_memory(sizes=("1 kiB", "1 MiB"), duration=0.01)
    assert list(memory) == ["1 kiB", "1 MiB"] and all(v > 0 for v in memory.values())
    disk = benchmark_disk(str(tmp_path), sizes=("1 kiB",), duration=0.01)
    assert disk["1 kiB"] > 0
    assert os.listdir(tmp_path) == []


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_network_bounces_blocks_off_a_peer(s: Scheduler, a: Worker) -> None:
    pool = ConnectionPool()
    try:
        result = await benchmark_network(a.address, pool, sizes=("10 kiB",), duration=0.01)
        assert result["10 kiB"] > 0
    finally:
        await pool.close()


def test_mean_by_size() -> None:
    assert mean_by_size([{"1 kiB": 1.0, "1 MiB": 4.0}, {"1 kiB": 3.0}]) == {"1 kiB": 2.0, "1 MiB": 4.0}
    assert mean_by_size([]) == {}
