"""Memory limits and spilling: results past a worker's limit go to disk and come back intact."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
import zict

from distributed import Client, LocalCluster
from distributed.scheduler import Scheduler
from distributed.spill import SpillBuffer
from distributed.tests.logs import caught_logs
from distributed.utils_test import async_poll_for, gen_cluster, poll_for
from distributed.worker import Worker, parse_memory_limit


@pytest.fixture(autouse=True)
def no_spill_compression() -> Iterator[None]:
    """Spill uncompressed: these tests fill memory and disk with values that compress to almost nothing
    (zeros), and count the bytes spilled; with lz4 installed, ``auto`` would compress them."""
    with dask.config.set({"distributed.worker.memory.spill-compression": False}):
        yield


MB = 1_000_000

# In-process workers share the test process, whose memory says nothing about them:
# these tests spill by the bytes of results held (target) only.
BY_TARGET_ONLY = {"distributed.worker.memory.spill": False, "distributed.worker.memory.pause": False}


def block(i: int, nbytes: int = 4 * MB) -> np.ndarray[Any, Any]:
    return np.full(nbytes // 8, i, dtype="f8")


def check_block(x: np.ndarray[Any, Any], i: int) -> bool:
    return bool(x.shape == (4 * MB // 8,) and (x == i).all())


# -- the buffer itself ----------------------------------------------------------------
def test_buffer_spills_least_recently_used_and_reads_back(tmp_path: Path) -> None:
    buf = SpillBuffer(str(tmp_path / "storage"), target=10 * MB)
    for i in range(6):
        buf[f"x-{i}"] = block(i)
    assert set(buf.fast) == {"x-4", "x-5"}  # 8 MB in memory, under the 10 MB target
    assert buf.memory_bytes <= 10 * MB
    assert buf.spilled.memory >= 16 * MB and buf.spilled.disk >= 16 * MB
    assert len(os.listdir(buf.directory)) == 4
    for i in range(6):
        x = buf[f"x-{i}"]
        assert check_block(x, i)
        x[0] = -1  # read back writeable, as computed
    assert len(buf) == 6
    del buf["x-0"], buf["x-5"]
    assert len(buf) == 4 and "x-0" not in buf
    buf.close()
    assert not os.path.exists(buf.directory)


def test_growth_callback_runs_once_per_step_of_bytes_stored(tmp_path: Path) -> None:
    buf = SpillBuffer(str(tmp_path / "storage"), target=float("inf"))
    calls: list[int] = []
    buf.watch_growth(10 * MB, lambda: calls.append(len(buf)))
    for i in range(5):
        buf.put(f"x-{i}", i, 4 * MB)  # 4, 8, 12 (call), 16, 20 MB stored
    assert calls == [3]
    buf.put("x-5", 5, 4 * MB)  # 8 MB since the call (x-3, x-4) + 4 = 12: the second call
    assert calls == [3, 6]
    buf.put("huge", 0, 50 * MB)  # a single value past the step calls at once
    assert calls == [3, 6, 7]
    with pytest.raises(ValueError, match="step"):
        buf.watch_growth(0, lambda: None)
    buf.close()


def test_put_takes_the_size_its_caller_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import distributed.spill

    buf = SpillBuffer(str(tmp_path / "storage"), target=10 * MB)
    calls: list[Any] = []

    def counting_sizeof(value: Any) -> int:
        calls.append(value)
        return 8

    monkeypatch.setattr(distributed.spill, "sizeof", counting_sizeof)
    buf.put("a", [1, 2, 3], 4 * MB)
    assert calls == [] and buf.memory_bytes == 4 * MB  # no second sizeof of the result
    buf["b"] = [4]  # without a size: measured here
    assert len(calls) == 1 and buf.memory_bytes == 4 * MB + 8
    buf.put("c", [5], 7 * MB)  # past the target: the least recently used goes to disk
    assert "a" in buf.disk and buf["a"] == [1, 2, 3]
    buf.close()


def test_unpicklable_values_stay_in_memory_logged_once(tmp_path: Path) -> None:
    buf = SpillBuffer(str(tmp_path / "storage"), target=5 * MB)
    with caught_logs("distributed.spill") as logged:
        locks = [threading.Lock() for _ in range(3)]
        for i, lock in enumerate(locks):
            buf[f"lock-{i}"] = lock
        for i in range(4):
            buf[f"x-{i}"] = block(i)
        buf.evict_until_below_target(0)
    assert all(buf[f"lock-{i}"] is lock for i, lock in enumerate(locks))
    assert {f"lock-{i}" for i in range(3)} <= set(buf.fast)
    assert all(check_block(buf[f"x-{i}"], i) for i in range(4))
    assert sum("Could not pickle" in r.getMessage() for r in logged) == 1
    buf.close()


def check_books(buf: SpillBuffer) -> None:
    """The in-memory LRU's books agree with each other and with the disk store's."""
    lru = buf.fast
    assert set(lru.d) == set(lru.order) == set(lru.weights)
    assert lru.total_weight == sum(lru.weights.values())
    assert set(lru.heavy) <= set(lru.d)
    assert not set(lru.d) & set(buf.disk)
    assert buf.spilled.memory == sum(mem for mem, _ in buf.disk.sizes.values())
    assert len(buf) == len(lru.d) + len(buf.disk) == len(list(buf))
    assert len(os.listdir(buf.directory)) == len(buf.disk)  # one file per spilled value


def test_target_crossed_exactly_then_back_below(tmp_path: Path) -> None:
    buf = SpillBuffer(str(tmp_path / "storage"), target=100)
    buf.put("a", "A", 60)
    buf.put("b", "B", 40)  # exactly at the target: nothing moves
    assert set(buf.fast) == {"a", "b"} and buf.memory_bytes == 100 and len(buf.disk) == 0
    buf.put("c", "C", 1)  # one byte past it: the least recently used goes
    assert set(buf.fast) == {"b", "c"} and set(buf.disk) == {"a"} and buf.memory_bytes == 41
    assert buf.spilled.memory == 60
    del buf["c"]
    assert buf.memory_bytes == 40
    assert buf["a"] == "A"  # read back: 100 in memory again, exactly the target, nothing spilled
    assert set(buf.fast) == {"a", "b"} and len(buf.disk) == 0 and buf.spilled.memory == buf.spilled.disk == 0
    buf["b"]  # b is now the most recently used: a goes first
    buf.put("d", "D", 1)
    assert set(buf.disk) == {"a"} and set(buf.fast) == {"b", "d"}
    check_books(buf)
    buf.put("b", "B2", 10)  # a new value for a key held: the old bytes stop counting
    assert buf.memory_bytes == 11 and buf["b"] == "B2"
    buf.put("a", "A2", 5)  # a new value for a spilled key: the old file goes
    assert len(buf.disk) == 0 and buf["a"] == "A2" and buf.memory_bytes == 16
    check_books(buf)
    buf.close()


def test_max_spill_keeps_values_in_memory_past_it(tmp_path: Path) -> None:
    buf = SpillBuffer(str(tmp_path / "storage"), target=1000, max_spill=3000)
    with caught_logs("distributed.spill") as records:
        for i in range(5):
            buf.put(f"v{i}", b"x" * 1000, 1000)
    # Each value takes a little over 1000 bytes on disk: two fit under 3000, the rest stay in memory.
    assert set(buf.disk) == {"v0", "v1"} and buf.spilled.disk <= 3000
    assert set(buf.fast) == {"v2", "v3", "v4"} and buf.memory_bytes == 3000
    assert [r.getMessage() for r in records if "max-spill" in r.getMessage()] != [] and len(records) == 1
    del buf["v0"]  # room again: the next eviction spills
    buf.evict()
    assert "v2" in buf.disk and all(buf[f"v{i}"] == b"x" * 1000 for i in range(1, 5))
    check_books(buf)
    buf.close()


@pytest.mark.parametrize("compression", ["zlib", "auto", None])
def test_spilled_values_are_compressed_as_configured(tmp_path: Path, compression: str | None) -> None:
    from distributed.protocol.compression import codec_for

    codec = codec_for(compression, "distributed.worker.memory.spill-compression")
    buf = SpillBuffer(str(tmp_path / "storage"), target=100, codec=codec)
    value = np.zeros(100_000)
    buf.put("zeros", value, value.nbytes)
    assert "zeros" in buf.disk
    if compression == "zlib":
        assert buf.spilled.disk < value.nbytes // 100
    elif codec is None:
        assert buf.spilled.disk > value.nbytes
    assert np.array_equal(buf["zeros"], value)
    buf.close()


def test_worker_reads_max_spill_and_spill_compression() -> None:
    async def main() -> None:
        async with Scheduler(host="127.0.0.1", dashboard=False) as s:
            config = {
                "distributed.worker.memory.max-spill": "1 MiB",
                "distributed.worker.memory.spill-compression": "zlib",
            }
            with dask.config.set(config):
                async with Worker(s.address, nthreads=1, memory_limit="1 GiB") as w:
                    assert isinstance(w.data, SpillBuffer)
                    assert w.data.disk.max_bytes == 2**20 and w.data.disk.codec is not None
                    assert w.data.disk.codec.name == "zlib"
            async with Worker(s.address, nthreads=1, memory_limit="1 GiB", max_spill=1000) as w:
                assert isinstance(w.data, SpillBuffer) and w.data.disk.max_bytes == 1000
                # distributed.worker.memory.transfer: 10 % of the memory limit in flight from peers at once.
                assert w.state is not None and w.state.incoming_bytes_limit == 0.1 * 2**30
        with dask.config.set({"distributed.worker.memory.spill-compression": "brotli"}):
            with pytest.raises(ValueError, match="spill-compression='brotli'"):
                Worker("tcp://127.0.0.1:1")
        with pytest.raises(ValueError, match="max_spill"):
            Worker("tcp://127.0.0.1:1", memory_limit="1 GiB", max_spill=-1)
        with pytest.raises(ValueError, match="max_spill=1000 needs a memory_limit"):
            Worker("tcp://127.0.0.1:1", memory_limit=0, max_spill=1000)

    asyncio.run(main())


def test_values_heavier_than_the_target(tmp_path: Path) -> None:
    buf = SpillBuffer(str(tmp_path / "storage"), target=100)
    buf.put("small", "s", 10)
    buf.put("exact", "e", 100)  # as heavy as the target: kept, the older one goes
    assert set(buf.fast) == {"exact"} and set(buf.disk) == {"small"}
    buf.put("huge", "h", 101)  # heavier than the target: straight to disk
    assert "huge" in buf.disk and "exact" in buf.fast and buf.memory_bytes == 100
    assert buf["huge"] == "h" and "huge" in buf.disk  # read, but left on disk
    assert not buf.fast.heavy
    check_books(buf)
    buf.close()


def test_spilling_and_reading_back_measure_nothing_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import distributed.spill

    buf = SpillBuffer(str(tmp_path / "storage"), target=10 * MB)
    calls: list[Any] = []

    def counting_sizeof(value: Any) -> int:
        calls.append(value)
        return 8

    monkeypatch.setattr(distributed.spill, "sizeof", counting_sizeof)
    buf.put("a", [1], 6 * MB)
    buf.put("b", [2], 6 * MB)  # a spilled, counted at the size given
    assert set(buf.disk) == {"a"} and buf.spilled.memory == 6 * MB
    assert buf["a"] == [1] and set(buf.disk) == {"b"}  # read back at its size: b goes
    assert buf.memory_bytes == 6 * MB and buf.spilled.memory == 6 * MB
    assert calls == []
    check_books(buf)
    buf.close()


def test_clear_drops_spilled_values_without_reading_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import distributed.spill

    buf = SpillBuffer(str(tmp_path / "storage"), target=100)
    for i in range(10):
        buf.put(f"k-{i}", i, 30)
    assert len(buf.disk) == 7

    def no_reading(*args: Any) -> Any:
        raise AssertionError("a spilled value was read")

    monkeypatch.setattr(distributed.spill, "deserialize_bytes", no_reading)
    buf.clear()
    assert len(buf) == 0 and buf.memory_bytes == 0 and os.listdir(buf.directory) == []
    assert buf.spilled.memory == buf.spilled.disk == 0
    check_books(buf)
    buf.put("again", 1, 150)
    assert "again" in buf.disk
    buf.close()


@pytest.mark.parametrize("seed", range(5))
def test_same_choices_as_a_plain_zict_buffer(tmp_path: Path, seed: int) -> None:
    """Random puts, reads, deletes and evictions: the same keys in memory, in the same order, as zict's own Buffer."""
    rng = random.Random(seed)
    target = 1000
    buf = SpillBuffer(str(tmp_path / "storage"), target=target)
    ref: zict.Buffer[str, tuple[int, int]] = zict.Buffer({}, {}, n=target, weight=lambda k, v: v[1])
    keys = [f"k-{i}" for i in range(30)]
    for step in range(2000):
        key = rng.choice(keys)
        op = rng.random()
        if op < 0.45:
            value = (step, rng.choice([1, rng.randint(1, 300), target, target + 1]))
            buf.put(key, value, value[1])
            ref[key] = value
        elif op < 0.75:
            if key in ref:
                assert buf[key] == ref[key]
            else:
                assert key not in buf
                with pytest.raises(KeyError):
                    buf[key]
        elif op < 0.97:
            if key in ref:
                del buf[key], ref[key]
            else:
                with pytest.raises(KeyError):
                    del buf[key]
        else:
            buf.evict()
            try:
                ref.fast.evict()
            except KeyError:
                pass
        assert list(buf.fast.order) == list(ref.fast.order)
        assert set(buf.disk) == set(ref.slow)
        assert buf.fast.total_weight == ref.fast.total_weight
        if step % 100 == 0:
            check_books(buf)
    check_books(buf)
    buf.close()


@pytest.mark.parametrize(
    "given, expected",
    [(None, 0), (0, 0), ("300MB", 300 * MB), (250 * MB, 250 * MB), ("1 GiB", 2**30)],
)
def test_parse_memory_limit(given: Any, expected: int) -> None:
    assert parse_memory_limit(given, 1) == expected


@pytest.mark.parametrize("given", [-1, "-5MB", -0.5, "lots", [1]])
def test_bad_memory_limits_are_refused(given: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="memory_limit"):
        Worker("tcp://127.0.0.1:1", nthreads=1, memory_limit=given)


@pytest.mark.parametrize("processes", [False, True])
def test_local_cluster_refuses_a_negative_memory_limit_up_front(processes: bool) -> None:
    with pytest.raises(ValueError, match="memory_limit=-1 is negative"):
        LocalCluster(processes=processes, n_workers=1, memory_limit=-1, dashboard_address=None)


def test_auto_memory_limit_is_the_share_of_the_machine() -> None:
    from distributed.system import MEMORY_LIMIT

    total = MEMORY_LIMIT  # the machine's, or less in a container
    cores = os.cpu_count() or 1
    assert parse_memory_limit("auto", cores) == total
    assert parse_memory_limit(10 * total, 1) == total  # capped to the machine


# -- workers -----------------------------------------------------------------------
@gen_cluster(client=True, nthreads=[], config=BY_TARGET_ONLY)
async def test_no_memory_limit_keeps_a_plain_dict(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, memory_limit=0) as w:
        assert type(w.data) is dict
    async with Worker(s.address, nthreads=1, memory_limit="100MB") as w:
        assert isinstance(w.data, SpillBuffer)


@gen_cluster(client=True, nthreads=[], config=BY_TARGET_ONLY)
async def test_worker_keywords_override_the_memory_config(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, memory_limit="100MB", memory_target_fraction=0.1) as w:
        assert isinstance(w.data, SpillBuffer) and w.data.n == 10 * MB
        assert w.memory_monitor.spill_fraction is None and w.memory_monitor.pause_fraction is None
    async with Worker(
        s.address,
        nthreads=1,
        memory_limit="100MB",
        memory_target_fraction=False,
        memory_spill_fraction=0.5,
        memory_pause_fraction=0.9,
        memory_monitor_interval="5ms",
    ) as w:
        assert isinstance(w.data, SpillBuffer) and w.data.n == float("inf")  # spills by process memory only
        assert (w.memory_monitor.spill_fraction, w.memory_monitor.pause_fraction) == (0.5, 0.9)
        assert w.memory_monitor_interval == 0.005
    async with Worker(
        s.address, nthreads=1, memory_limit="100MB", memory_target_fraction=False, memory_spill_fraction=False
    ) as w:
        assert type(w.data) is dict
    with pytest.raises(ValueError, match="memory_target_fraction"):
        Worker(s.address, nthreads=1, memory_target_fraction=-0.5)


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)],
    worker_kwargs={"memory_limit": "100MB", "heartbeat_interval": "50ms"},
    config=BY_TARGET_ONLY,
)
async def test_worker_holds_several_times_its_limit_by_spilling(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # 300 MB on a worker limited to 100 MB: 60 MB (target 0.6) stays in memory.
    futs = c.map(block, range(75), workers=[a.address], key=[f"blk-{i}" for i in range(75)])
    await c.gather(futs[-1:])
    await async_poll_for(lambda: all(f.status == "finished" for f in futs), 10)
    assert isinstance(a.data, SpillBuffer)
    assert len(a.data) == 75
    assert a.data.memory_bytes <= 60 * MB
    assert a.data.spilled.disk >= 240 * MB
    storage = a.data.directory
    assert len(os.listdir(storage)) == len(a.data.disk)

    # The scheduler sees managed and spilled bytes in the heartbeats.
    def metrics() -> dict[str, Any]:
        return dict(s.workers[a.address].metrics)

    await async_poll_for(lambda: metrics().get("spilled_bytes", {}).get("disk", 0) >= 240 * MB, 5)
    info = await c.scheduler_info()
    m = info["workers"][a.address]["metrics"]
    assert m["managed_bytes"] >= 300 * MB
    assert 240 * MB <= m["spilled_bytes"]["memory"] <= m["managed_bytes"]
    assert m["memory"] > 0
    mem = s.workers[a.address].memory
    assert mem.spilled >= 240 * MB
    assert mem.managed == m["managed_bytes"] - m["spilled_bytes"]["memory"]
    assert mem.managed <= 60 * MB
    assert mem.unmanaged == max(mem.process - mem.managed, 0) and mem.process == m["memory"]

    # Read back by a task on the same worker, by a peer, and by the client.
    checks = c.map(check_block, futs, range(75), workers=[a.address], key=[f"chk-{i}" for i in range(75)])
    assert all(await c.gather(checks))
    peer = c.map(check_block, futs[:10], range(10), workers=[b.address], key=[f"peer-{i}" for i in range(10)])
    assert all(await c.gather(peer))
    values = await c.gather(futs[:5])
    assert all(check_block(v, i) for i, v in enumerate(values))

    await a.close()
    assert not os.path.exists(storage)


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    worker_kwargs={"memory_limit": "100MB"},
    config={
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": 1e-9,  # any process memory is too much
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.monitor-interval": "10ms",
    },
)
async def test_process_memory_past_spill_moves_results_to_disk(c: Client, s: Scheduler, a: Worker) -> None:
    futs = c.map(block, range(5), key=[f"pm-{i}" for i in range(5)])
    await c.gather(futs[-1:])
    assert isinstance(a.data, SpillBuffer)
    await async_poll_for(lambda: len(a.data.disk) == 5, 5)  # type: ignore[attr-defined]  # checked above
    values = await c.gather(futs)
    assert all(check_block(v, i) for i, v in enumerate(values))


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)],
    worker_kwargs={"memory_limit": "40MB"},
    config=BY_TARGET_ONLY,
)
async def test_reduction_over_more_than_the_cluster_memory(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    n = 20_000_000  # 160 MB of int64 over 80 MB of workers
    x = da.arange(n, chunks=500_000, dtype="i8")
    x = c.persist(x)
    await async_poll_for(lambda: len(a.data) + len(b.data) == 40, 10)
    # How the 40 chunks split between the two workers depends on timing; a worker
    # holding more than its target (60 % of 40 MB) must have spilled.
    for w in (a, b):
        assert isinstance(w.data, SpillBuffer)
        if len(w.data) * 4 * MB > 0.6 * 40e6:
            assert len(w.data.disk) > 0, (w.address, len(w.data))
    total = await c.compute(x.sum())
    assert total == n * (n - 1) // 2
    del x


@contextlib.contextmanager
def client_of_a_300mb_worker() -> Iterator[tuple[Client[Literal[False]], int]]:
    """A client of one worker process (under a nanny) with a 300 MB limit, every threshold at its default; its pid."""
    with (
        LocalCluster(
            processes=True, n_workers=1, threads_per_worker=1, memory_limit="300MB", dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        [pid] = c.run(os.getpid).values()
        yield c, pid


def test_worker_process_holds_several_times_its_limit() -> None:
    # A 300 MB worker process holds 1.3 GB by spilling, with every threshold at its
    # default (terminate included): the nanny never needs to kill it.
    with client_of_a_300mb_worker() as (c, pid):
        futs = c.map(block, range(325), key=[f"big-{i}" for i in range(325)])  # 1.3 GB
        checks = c.map(check_block, futs, range(325), key=[f"ok-{i}" for i in range(325)])
        assert all(c.gather(checks))
        assert all(check_block(v, i) for i, v in enumerate(c.gather(futs[:3])))
        addr = next(iter(c.scheduler_info()["workers"]))

        def spilled() -> int:
            return int(c.scheduler_info()["workers"][addr]["metrics"].get("spilled_bytes", {}).get("disk", 0))

        poll_for(lambda: spilled() >= 700 * MB, 10)
        storage = c.run(lambda dask_worker: dask_worker.data.directory)[addr]
        assert os.path.isdir(storage)
        rss = c.run(lambda dask_worker: dask_worker.memory_monitor.memory())[addr]
        assert rss < 0.95 * 300e6
        assert list(c.run(os.getpid).values()) == [pid]  # the same process all along: never restarted
    poll_for(lambda: not os.path.exists(storage), 10)


def _peak_rss_while(pid: int, stop: threading.Event, peak: list[int]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        try:
            peak[0] = max(peak[0], process.memory_info().rss)
        except psutil.Error:  # gone: the nanny killed it (the test then fails on its pid)
            return
        stop.wait(0.002)


def test_results_larger_than_the_monitor_sees_between_checks_spill_in_time() -> None:
    # Twenty 50 MB results on a 300 MB worker process, then summed: a thread makes one in a few
    # milliseconds, many within one monitor interval.  Stored results are measured as they
    # arrive and spilled; a large result is stored before the next task runs.  The process
    # stays under the nanny's terminate line (95 %) all along, so it is never restarted.
    with client_of_a_300mb_worker() as (c, pid):
        stop, peak = threading.Event(), [0]
        sampler = threading.Thread(target=_peak_rss_while, args=(pid, stop, peak))
        sampler.start()
        try:
            futs = c.map(block, range(20), nbytes=50 * MB, key=[f"fifty-{i}" for i in range(20)])
            sums = c.map(np.sum, futs, key=[f"sum-{i}" for i in range(20)])
            total = c.submit(sum, sums, key="total").result()
        finally:
            stop.set()
            sampler.join()
        assert total == sum(i * (50 * MB // 8) for i in range(20))
        assert list(c.run(os.getpid).values()) == [pid]  # never restarted
        assert peak[0] < 0.95 * 300e6, f"peak {peak[0] / 1e6:.0f} MB"


def test_spill_directory_is_under_local_directory(tmp_path: Path) -> None:
    async def run() -> str:
        async with Scheduler(dashboard_address=None) as s:
            async with Worker(s.address, nthreads=1, memory_limit="100MB", local_directory=str(tmp_path)) as w:
                assert isinstance(w.data, SpillBuffer)
                directory = w.data.directory
                assert directory.startswith(str(tmp_path)) and directory.endswith("storage")
        return directory

    directory = asyncio.run(run())
    assert not os.path.exists(directory)
