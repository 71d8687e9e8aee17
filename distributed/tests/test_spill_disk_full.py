"""A full or read-only disk under a worker: spilling stops, nothing is lost, nobody waits forever.

Every test here runs on a real tmpfs (see :mod:`distributed.tests.tmpfs`), so
that writes fail the way they fail on a full disk: ``ENOSPC`` part-way through
a file.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask.config
import numpy as np
import pytest

from distributed import Client, Nanny, Scheduler, as_completed
from distributed.core import Status
from distributed.dashboard.components.scheduler import worker_rows
from distributed.spill import SpillBuffer
from distributed.tests.logs import caught_logs, messages
from distributed.tests.machines import check, client_ops, finish, state
from distributed.tests.machines import task_spec as spec
from distributed.tests.test_cli import WORKER, Proc, poll_with_proc, procs, start_scheduler
from distributed.tests.tmpfs import mounted_tmpfs, remount
from distributed.utils_test import async_poll_for, gen_test
from distributed.worker import Worker

__all__ = ["procs"]  # a fixture: imported to be used, not re-exported


@pytest.fixture(autouse=True)
def no_spill_compression(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Spill uncompressed, here and in worker processes started by the CLI: these tests fill a disk
    with blocks that compress to almost nothing; with lz4 installed, ``auto`` would compress them."""
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__MEMORY__SPILL_COMPRESSION", "False")
    with dask.config.set({"distributed.worker.memory.spill-compression": False}):
        yield


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
def test_full_disk_keeps_values_in_memory_and_stops_spilling(small_disk: Path) -> None:
    buf = SpillBuffer(str(small_disk / "storage"), target=2 * MB)
    try:
        with caught_logs("distributed.spill", logging.ERROR) as logged:
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
        records = [r for r in logged if "failed" in r.getMessage()]
        assert len(records) == 1, messages(logged)
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


# -- a nanny'd worker on a real full disk -------------------------------------------------
def make(i: int) -> np.ndarray[Any, Any]:
    return np.full(40 * MB // 8, i, dtype="f8")


def disk_error_of(dask_worker: Any) -> str | None:
    data = dask_worker.data
    return str(data.disk_error) if isinstance(data, SpillBuffer) and data.disk_error is not None else None


@pytest.fixture
def disk64(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", size="64m") as path:
        yield path


# 640 MB of results for a 400 MB worker on a 64 MB disk: neither holds them.
FULL_DISK_CONFIG = {"distributed.worker.memory.monitor-interval": "20ms"}


#: Pausing well below the kill threshold: a task already running when the worker pauses still adds its
#: 40 MB, and on a busy machine the pause can come late; from 60 % that stays far from 95 %.
EARLY_PAUSE_CONFIG = {
    **FULL_DISK_CONFIG,
    "distributed.worker.memory.target": 0.4,
    "distributed.worker.memory.spill": 0.5,
    "distributed.worker.memory.pause": 0.6,
}


@gen_test(timeout=60, config=EARLY_PAUSE_CONFIG)
async def test_worker_on_full_disk_pauses_and_is_not_killed(disk64: Path) -> None:
    async with Scheduler(dashboard_address=":0") as s:
        async with Nanny(
            s.address, nthreads=1, memory_limit="600MiB", local_directory=str(disk64), dashboard_address=":0"
        ) as nanny:
            async with Client(s.address, asynchronous=True) as c:
                futures = [c.submit(make, i, pure=False) for i in range(16)]
                addr = nanny.worker_address
                assert addr is not None
                # The disk fills, spilling turns off, the worker pauses (it is not killed and restarted).
                await async_poll_for(lambda: s.workers[addr].status == Status.paused, timeout=60)
                errors = await c.run(disk_error_of)
                assert errors[addr] is not None and "No space left on device" in errors[addr]
                done = [f for f in futures if f.status == "finished"]
                assert 4 <= len(done) < 16
                # What finished is intact, whether it was spilled before the disk filled or not.
                for f in done:
                    x = await f
                    assert x.shape == (40 * MB // 8,) and x[0] == x[-1] == futures.index(f)
                # The scheduler's dashboard and the worker's /metrics say spilling is off.
                await async_poll_for(lambda: "spill_disk_error" in s.workers[addr].metrics, timeout=10)
                rows = worker_rows(s)
                assert rows["spilling"][rows["address"].index(addr)].startswith("off: [Errno 28]")
                port = (await c.run(lambda dask_worker: dask_worker.http_server.port))[addr]
                host = addr.split("://")[1].rsplit(":", 1)[0]
                text = await _get(f"http://{host}:{port}/metrics")
                assert "dask_worker_spill_disk_errors 1.0" in text
                # Consuming results lets the rest run: every future ends in its result.
                n = len(done)
                for f in done:
                    del futures[futures.index(f)]
                del done, f, x
                async for f in as_completed(futures):
                    x = await f
                    assert x[0] == x[-1]
                    n += 1
                    del futures[futures.index(f)], f, x
                assert n == 16
                assert nanny.restarts == 0


# -- the scheduler ends what would wait forever ----------------------------------------
A = "tcp://10.0.0.1:1234"
B = "tcp://10.0.0.2:1234"


def paused_on_a_failed_disk(s: Scheduler, address: str) -> None:
    ws = s.workers[address]
    ws.status = Status.paused
    ws.metrics["spill_disk_error"] = "[Errno 28] No space left on device"


def test_tasks_waiting_on_workers_paused_on_failed_disks_err_with_memory_error() -> None:
    s = Scheduler(validate=True)
    check(s, s.add_worker_state(A, 1, memory_limit=400 * MB))
    check(s, s.add_worker_state(B, 1, memory_limit=400 * MB))
    check(
        s,
        s.update_graph(
            "c1", {f"x-{i}": spec(order=i) for i in range(8)}, [f"x-{i}" for i in range(8)], stimulus_id="g"
        ),
    )
    check(s, s.update_graph("c1", {"y": spec(["x-0"], order=9)}, ["y"], stimulus_id="g2"))
    finish(s, "x-0")
    assert not s.workers_stuck_on_full_disks()  # both run
    paused_on_a_failed_disk(s, A)
    assert not s.workers_stuck_on_full_disks()  # B still runs
    s.workers[B].status = Status.paused
    assert not s.workers_stuck_on_full_disks()  # B may spill its way out
    paused_on_a_failed_disk(s, B)
    assert s.workers_stuck_on_full_disks()
    out = check(s, s.fail_tasks_stuck_on_full_disks(stimulus_id="stuck"))
    erred = {msg["key"]: msg["text"] for msg in client_ops(out, "c1", "task-erred")}
    assert set(erred) == {f"x-{i}" for i in range(1, 8)} | {"y"}
    assert "MemoryError" not in erred["x-1"] and "cannot run: every worker has been paused" in erred["x-1"]
    assert "No space left on device" in erred["x-1"] and "full-disk-timeout" in erred["x-1"]
    assert state(s, "x-0") == "memory"  # what is done stays
    assert not s.workers_stuck_on_full_disks()  # nothing waits any more


@gen_test(timeout=90, config={**EARLY_PAUSE_CONFIG, "distributed.scheduler.full-disk-timeout": "2s"})
async def test_futures_of_a_client_holding_every_result_end_on_a_full_disk(disk64: Path) -> None:
    # The client holds all 640 MB of results; the worker holds 600 MiB (pausing at 60 %) and its disk 64 MB:
    # the worker pauses, and the futures it cannot compute err instead of waiting forever.
    async with Scheduler(dashboard_address=":0") as s:
        async with Nanny(s.address, nthreads=1, memory_limit="600MiB", local_directory=str(disk64)) as nanny:
            async with Client(s.address, asynchronous=True) as c:
                futures = [c.submit(make, i, pure=False) for i in range(16)]
                await async_poll_for(lambda: all(f.status in ("finished", "error") for f in futures), timeout=60)
                done = [i for i, f in enumerate(futures) if f.status == "finished"]
                failed = [f for f in futures if f.status == "error"]
                assert 4 <= len(done) < 16 and len(done) + len(failed) == 16
                for f in failed:
                    with pytest.raises(MemoryError, match="No space left on device"):
                        await f
                for i in done:
                    x = await futures[i]
                    assert x[0] == x[-1] == i
                # Released, the results go; the worker resumes and computes again.
                futures.clear()
                del failed, f, x
                await async_poll_for(lambda: all(ws.status == Status.running for ws in s.workers.values()), timeout=30)
                assert await c.submit(sum, [1, 2, 3]) == 6
                assert nanny.restarts == 0


async def _get(url: str) -> str:
    from tornado.httpclient import AsyncHTTPClient

    response = await AsyncHTTPClient().fetch(url, request_timeout=10)
    return response.body.decode()


@gen_test(timeout=60, config=FULL_DISK_CONFIG)
async def test_worker_killed_on_a_disk_it_filled_starts_again(disk64: Path) -> None:
    async with Scheduler(dashboard_address=":0") as s:
        async with Nanny(s.address, nthreads=1, memory_limit="400MiB", local_directory=str(disk64)) as nanny:
            async with Client(s.address, asynchronous=True) as c:
                futures = [c.submit(make, i, pure=False) for i in range(6)]
                await async_poll_for(lambda: sum(f.status == "finished" for f in futures) == 6, timeout=60)
                first = nanny.worker_address
                assert first is not None
                assert (await c.run(disk_error_of))[first] is not None
                # The room its failed write left goes too, to files in its directory (as a worker
                # killed part-way through a write leaves them): the disk is full of the dead worker's files.
                workdir = (await c.run(lambda dask_worker: dask_worker.local_directory))[first]
                fill(Path(workdir))
                assert nanny.pid is not None
                os.kill(nanny.pid, signal.SIGKILL)
                # The new worker removes the dead one's files before it needs room of its own.
                await async_poll_for(
                    lambda: nanny.restarts == 1 and nanny.worker_address in s.workers and first not in s.workers,
                    timeout=60,
                )
                # Lost results are computed again, and spilled on the freed disk.
                assert all(x[0] == i for i, x in enumerate(await c.gather(futures)))
                second = nanny.worker_address
                written = await c.run(lambda dask_worker: dask_worker.data.activity.write_count)
                assert written[second] > 0
                assert nanny.status == Status.running


def fill(path: Path) -> None:
    with open(path / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * MB)
        except OSError as e:
            assert e.errno == errno.ENOSPC


@gen_test(timeout=60)
async def test_nanny_start_on_full_disk_fails_naming_the_directory(small_disk: Path) -> None:
    fill(small_disk)
    async with Scheduler(dashboard_address=":0") as s:
        with pytest.raises(RuntimeError, match="failed to start") as info:
            await Nanny(s.address, local_directory=str(small_disk)).start()
        assert f"Worker cannot use its local directory {small_disk}" in str(info.value)
        assert "No space left on device" in str(info.value)
        assert not s.workers
    # Nothing left behind by the failed start: no lock file, no directory.
    assert os.listdir(small_disk / "dask-scratch-space") == []


@gen_test(timeout=60)
async def test_worker_start_on_read_only_disk_fails_naming_the_directory(small_disk: Path) -> None:
    remount(small_disk, "ro")
    try:
        async with Scheduler(dashboard_address=":0") as s:
            with pytest.raises(OSError, match=f"Worker cannot use its local directory {small_disk}") as info:
                await Worker(s.address, local_directory=str(small_disk)).start()
            assert info.value.errno == errno.EROFS
    finally:
        remount(small_disk, "rw")


def test_cli_worker_on_full_disk_exits_with_the_error(
    small_disk: Path, tmp_path: Path, procs: Callable[..., Proc]
) -> None:
    fill(small_disk)
    _, address, _ = start_scheduler(procs, tmp_path)
    for nanny in ("--nanny", "--no-nanny"):
        worker = procs([*WORKER, address, nanny, "--local-directory", str(small_disk), "--no-dashboard"], name="w")
        assert worker.wait(60) == 1
        assert f"Worker cannot use its local directory {small_disk}" in worker.stderr()


def test_cli_nanny_whose_worker_cannot_start_again_exits_with_the_error(
    tmp_path: Path, procs: Callable[..., Proc]
) -> None:
    _, address, _ = start_scheduler(procs, tmp_path)
    local = tmp_path / "local"
    worker = procs([*WORKER, address, "--nanny", "--local-directory", str(local), "--no-dashboard"], name="w")
    pid = poll_with_proc(lambda: _worker_pid(address), 60, "the worker", worker)
    # The live worker keeps its files; a new one finds a read-only disk where its directory goes.
    scratch = local / "dask-scratch-space"
    with mounted_tmpfs(scratch, size="1m"):
        remount(scratch, "ro")
        os.kill(pid, signal.SIGKILL)
        assert worker.wait(60) == 1
    err = worker.stderr()
    assert "its worker could not be started again" in err
    assert f"Worker cannot use its local directory {scratch}" in err
    assert "Read-only file system" in err


def _worker_pid(address: str) -> int | None:
    from distributed import Client

    with Client(address, timeout=10) as c:
        pids = c.run(os.getpid)
    return next(iter(pids.values()), None)
