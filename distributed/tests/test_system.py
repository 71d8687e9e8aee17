"""distributed.system and distributed.metrics: what downstream code imports from them."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from distributed import metrics, system


def test_memory_limit_is_at_most_the_machines() -> None:
    assert 0 < system.MEMORY_LIMIT <= psutil.virtual_memory().total
    assert system.memory_limit() == system.MEMORY_LIMIT
    assert system.CPU_COUNT >= 1


def test_a_cgroup_limit_is_read_from_v2_then_v1(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("max\n")  # cgroup v2 without a limit
    v1.write_text("1073741824\n")
    assert system._cgroup_limit((str(v2), str(v1))) == 2**30
    v2.write_text("536870912\n")
    assert system._cgroup_limit((str(v2), str(v1))) == 2**29
    assert system._cgroup_limit((str(tmp_path / "absent"),)) is None


def test_clocks() -> None:
    assert abs(metrics.time() - time.time()) < 5
    first = metrics.monotonic()
    assert metrics.monotonic() >= first
    assert metrics.thread_time() >= 0 and metrics.process_time() >= 0
