"""A full or read-only disk under a worker: spilling stops, nothing is lost, nobody waits forever.

Every test here runs on a real tmpfs (see :mod:`distributed.tests.tmpfs`), so
that writes fail the way they fail on a full disk: ``ENOSPC`` part-way through
a file.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distributed.spill import SpillBuffer
from distributed.tests.tmpfs import mounted_tmpfs, remount

MB = 2**20


def block(i: int, nbytes: int = MB) -> np.ndarray[Any, Any]:
    return np.full(nbytes // 8, i, dtype="f8")


def used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", size="4m") as path:
        yield path


# -- the buffer itself ----------------------------------------------------------------
def test_full_disk_keeps_values_in_memory_and_stops_spilling(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    buf = SpillBuffer(str(small_disk / "storage"), target=2 * MB)
    caplog.set_level(logging.ERROR, logger="distributed.spill")
    try:
        for i in range(12):  # 12 MB through a 2 MB target onto a 4 MB disk
            buf[f"x-{i}"] = block(i)
        assert isinstance(buf.disk_error, OSError) and buf.disk_error.errno == errno.ENOSPC
        # Nothing lost: what fit on disk is there, the rest stayed in memory.
        assert len(buf) == 12
        assert 1 <= len(buf.disk) <= 4
        assert len(buf.disk) + len(buf.fast) == 12
        # The failed write left no partial file to take the room of others.
        assert len(os.listdir(buf.directory)) == len(buf.disk)
        assert used_bytes(small_disk) <= buf.spilled.disk + 256 * 1024
        spilled = list(buf.disk)
        # Spilling is off from then on: eviction declines, at once, and says so once.
        assert buf.evict() == -1
        buf["more"] = block(99)
        assert "more" in buf.fast
        records = [r for r in caplog.records if "failed" in r.getMessage()]
        assert len(records) == 1, [r.getMessage() for r in caplog.records]
        assert "No space left on device" in records[0].getMessage()
        assert str(small_disk) in records[0].getMessage()
        # Values spilled before the error stay readable (back into memory) and can be deleted.
        for i in range(12):
            assert (buf[f"x-{i}"] == i).all()
        assert not buf.disk and os.listdir(buf.directory) == []
        del buf[spilled[0]]
        assert spilled[0] not in buf and len(buf) == 12
    finally:
        buf.close()
    assert not os.path.exists(buf.directory)


def test_read_only_disk_stops_spilling(small_disk: Path) -> None:
    buf = SpillBuffer(str(small_disk / "storage"), target=2 * MB)
    try:
        buf["a"] = block(1)
        buf["b"] = block(2)
        buf["c"] = block(3)  # spills "a"
        assert "a" in buf.disk and buf.disk_error is None
        remount(small_disk, "ro")
        try:
            buf["d"] = block(4)
            assert isinstance(buf.disk_error, OSError) and buf.disk_error.errno == errno.EROFS
            assert set(buf.fast) == {"b", "c", "d"}
            assert (buf["a"] == 1).all()  # read back from the read-only disk
        finally:
            remount(small_disk, "rw")
    finally:
        buf.close()


def test_working_disk_has_no_error(small_disk: Path) -> None:
    # Without the failure the buffer spills as usual: the checks above are not vacuous.
    buf = SpillBuffer(str(small_disk / "storage"), target=2 * MB)
    try:
        for i in range(3):
            buf[f"x-{i}"] = block(i)
        assert buf.disk_error is None
        assert len(buf.disk) == 1
        assert buf.evict() > 0
    finally:
        buf.close()
