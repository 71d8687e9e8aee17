"""P2P dataframe shuffles on real clusters: results, restarts after a worker dies, spilling, errors."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from distributed import Client, LocalCluster, Scheduler, Worker
from distributed.core import rpc
from distributed.shuffle import PartitionId, ShuffleId, ShuffleRunRefused
from distributed.tests.cuts import cut_first
from distributed.utils_test import async_poll_for, captured_logger, gen_cluster, poll_for

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def frame(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.integers(0, 97, n),
            "y": np.arange(n),
            "s": [f"v{i % 13}" for i in range(n)],
            "f": rng.random(n),
            "g": rng.permutation(n) * 0.5,
        }
    )


def to_dask(pdf: pd.DataFrame, npartitions: int) -> Any:
    return dd.from_pandas(pdf, npartitions=npartitions)  # type: ignore[no-untyped-call]  # dask.dataframe is untyped


def as_dask_gives(pdf: pd.DataFrame) -> pd.DataFrame:
    """``pdf`` with the dtypes dask gives it (strings become arrow-backed), computed locally."""
    result: pd.DataFrame = to_dask(pdf, 1).compute(scheduler="sync")
    return result


def ordered(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def compute_with(method: str, collection: Any) -> pd.DataFrame:
    with dask.config.set({"dataframe.shuffle.method": method}):
        result: pd.DataFrame = collection.compute()
    return result


def shuffle_stats(dask_worker: Worker) -> dict[str, int]:
    return dask_worker.shuffle.stats()


def p2p_listing(dask_worker: Worker) -> list[str]:
    root = os.path.join(dask_worker.local_directory, "p2p")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


@pytest.fixture
def process_cluster() -> Iterator[Client[Literal[False]]]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            yield client


@pytest.mark.timeout(180)
def test_p2p_is_the_default_and_matches_tasks_on_worker_processes(process_cluster: Client[Literal[False]]) -> None:
    client = process_cluster
    assert dask.config.get("dataframe.shuffle.method", None) is None  # dask picks P2P with a client
    left = to_dask(frame(), 8)
    right = to_dask(frame(300, seed=1).rename(columns={"y": "z", "f": "h", "g": "i"}), npartitions=3)
    cases = {
        "shuffle": left.shuffle("x", npartitions=5),
        "set_index": left.set_index("f"),
        "sort_values": left.sort_values("g"),
        "merge": left.merge(right, on=["x", "s"]),
    }
    for name, collection in cases.items():
        before = sum(s["bytes_sent"] for s in client.run(shuffle_stats).values())
        # persist: a compute would let dask sort a small frame on one partition, with no shuffle.
        p2p = collection.persist().compute()
        after = sum(s["bytes_sent"] for s in client.run(shuffle_stats).values())
        assert after > before, f"{name} did not go through P2P"
        tasks = compute_with("tasks", collection)
        if name in ("set_index", "sort_values"):
            pd.testing.assert_frame_equal(p2p, tasks)  # order is part of the result
        else:
            pd.testing.assert_frame_equal(ordered(p2p), ordered(tasks))


def slow_identity(df: pd.DataFrame) -> pd.DataFrame:
    time.sleep(0.15)  # work that takes a while, so the shuffle is under way when a worker dies
    return df


def shuffle_progress(dask_scheduler: Scheduler) -> tuple[int, int, int]:
    """(active runs, transfer tasks done, workers holding one)."""
    ext = dask_scheduler.extensions["shuffle"]
    done = [
        ts
        for ts in dask_scheduler.tasks.values()
        if isinstance(ts.key, tuple) and str(ts.key[0]).startswith("shuffle-transfer-") and ts.state == "memory"
    ]
    return len(ext.active), len(done), len({ws.address for ts in done for ws in ts.who_has})


def story_of(dask_scheduler: Scheduler, keys: list[Any]) -> list[Any]:
    return [list(t) for t in dask_scheduler.story(*keys)]


@pytest.mark.timeout(180)
def test_worker_killed_mid_shuffle_restarts_it_with_a_new_run(process_cluster: Client[Literal[False]]) -> None:
    client = process_cluster
    pdf = frame(4000)
    df = to_dask(pdf, 24).map_partitions(slow_identity)
    future = client.compute(df.shuffle("x", npartitions=6))
    poll_for(
        lambda: (lambda p: p[0] == 1 and p[1] >= 3 and p[2] == 2)(client.run_on_scheduler(shuffle_progress)),
        timeout=60,
        what="the shuffle to be under way",
    )
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    os.kill(pids[victim], signal.SIGKILL)
    result = future.result(timeout=120)
    pd.testing.assert_frame_equal(ordered(result), ordered(as_dask_gives(pdf)))

    events = [e for _, e in client.get_events("p2p")]
    starts = [e for e in events if e["action"] == "p2p-run-start"]
    restarts = [e for e in events if e["action"] == "p2p-run-restart"]
    # One restart for the lost worker (and maybe one more, should a transfer running then report its old run).
    assert [r.get("worker") for r in restarts][:1] == [victim] and len(restarts) <= 2, restarts
    assert len(starts) >= 2 and starts[-1]["run_id"] > restarts[0]["run_id"]
    assert victim not in starts[-1]["workers"]
    shuffle_id = starts[0]["id"]
    # Transfers done on the survivors were released by the restart, and ran again.
    keys = [(f"shuffle-transfer-{shuffle_id}", i) for i in range(24)]
    story = client.run_on_scheduler(story_of, keys=keys)
    restarted = [t for t in story if str(t[3]).startswith(f"shuffle-restart-{shuffle_id}")]
    assert any(t[1] == "memory" and t[2] == "released" for t in restarted), story


@pytest.mark.timeout(180)
def test_shuffle_larger_than_the_p2p_buffer_spills_to_disk() -> None:
    pdf = frame(20000)
    with dask.config.set(
        {"distributed.p2p.storage.buffer": "16 kiB", "distributed.p2p.comm.message-bytes-limit": "8 kiB"}
    ):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                df = to_dask(pdf, 10)
                result = df.shuffle("x", npartitions=4).compute()
                pd.testing.assert_frame_equal(ordered(result), ordered(as_dask_gives(pdf)))
                stats = client.run(shuffle_stats)
                assert all(s["disk_bytes_written"] > 16 * 1024 for s in stats.values()), stats
                assert all(s["files_written"] > 0 for s in stats.values()), stats
                # Once the shuffle is done, its runs and their files go away.
                poll_for(lambda: not any(client.run(p2p_listing).values()), timeout=20, what="shuffle files removed")


def numeric_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.integers(0, 1000, n), **{c: rng.random(n) for c in "fghijk"}})


@pytest.mark.timeout(180)
def test_shuffle_of_tens_of_megabytes_past_a_one_megabyte_buffer_completes_by_spilling() -> None:
    pdf = numeric_frame(400_000)  # 22 MB, each worker receives about half of it
    buffer = 2**20
    config = {
        "distributed.p2p.storage.buffer": "1 MiB",
        "distributed.p2p.comm.message-bytes-limit": "256 kiB",
        "distributed.p2p.comm.buffer": "2 MiB",  # back-pressure: at most this much in flight per sender
    }
    with dask.config.set(config):
        with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                result = to_dask(pdf, 16).shuffle("x", npartitions=8).compute()
                stats = client.run(shuffle_stats)
                poll_for(lambda: not any(client.run(p2p_listing).values()), timeout=20, what="shuffle files removed")
    pd.testing.assert_frame_equal(ordered(result), ordered(pdf))
    for s in stats.values():
        assert s["bytes_received"] > 8 * 2**20, stats
        assert s["disk_bytes_written"] > s["bytes_received"] // 2, stats
        # Memory holds the buffer, plus at most what the two senders may have in flight
        # (unacknowledged until stored) while a write is under way.
        assert s["peak_memory_bytes"] <= buffer + 2 * 2 * 2**20, stats
        assert s["peak_memory_bytes"] > buffer // 2, stats


@pytest.mark.timeout(120)
def test_without_disk_shards_stay_in_memory_past_the_buffer() -> None:
    pdf = numeric_frame(40_000)
    config = {"distributed.p2p.storage.buffer": "64 kiB", "distributed.p2p.storage.disk": False}
    with dask.config.set(config):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                result = to_dask(pdf, 6).shuffle("x", npartitions=4).compute()
                stats = client.run(shuffle_stats)
                listing = client.run(p2p_listing)
    pd.testing.assert_frame_equal(ordered(result), ordered(pdf))
    assert not any(listing.values()), listing
    for s in stats.values():
        assert s["disk_bytes_written"] == 0 and s["files_written"] == 0, stats
        assert s["peak_memory_bytes"] == s["bytes_received"] > 64 * 1024, stats


@gen_cluster(client=True)
async def test_unsupported_dtype_is_refused_naming_the_column(
    c: Client[Any], s: Scheduler, a: Worker, b: Worker
) -> None:
    pdf = pd.DataFrame({"x": [1, 2, 3], "z": np.array([1, 2, 3], dtype=np.complex64)})
    df = to_dask(pdf, 2)
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        with pytest.raises(TypeError, match="p2p does not support data of type 'complex64' found in column 'z'"):
            df.shuffle("x")


class Opaque:
    """A Python object arrow cannot carry."""


@gen_cluster(client=True)
async def test_values_arrow_cannot_carry_fail_the_shuffle_naming_the_column(
    c: Client[Any], s: Scheduler, a: Worker, b: Worker
) -> None:
    # The dtype (object) is fine: the values are found out when a transfer converts them.
    pdf = pd.DataFrame({"x": [1, 2, 3, 4], "z": [Opaque() for _ in range(4)]})
    with dask.config.set({"dataframe.convert-string": False, "dataframe.shuffle.method": "p2p"}):
        shuffled = to_dask(pdf, 2).shuffle("x", npartitions=2)
    with pytest.raises(TypeError, match="p2p does not support data of type 'object' found in column 'z'"):
        await c.compute(shuffled)


@gen_cluster(client=True)
async def test_shards_of_an_old_run_are_refused(c: Client[Any], s: Scheduler, a: Worker, b: Worker) -> None:
    pdf = frame(200)
    df = to_dask(pdf, 4)
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        shuffled = df.shuffle("x", npartitions=4)
    first = await c.compute(shuffled)
    await async_poll_for(lambda: not s.tasks, timeout=10)
    second = await c.compute(shuffled)  # the same shuffle again: a new run
    pd.testing.assert_frame_equal(ordered(first), ordered(second))
    events: Any = s.get_events("p2p")
    starts = [e for _, e in events if e["action"] == "p2p-run-start"]
    first_run, second_run = (e["run_id"] for e in starts)
    assert second_run == first_run + 1
    shuffle_id = starts[0]["id"]
    before = a.shuffle.stats()["bytes_received"]
    async with rpc(a.address) as r:
        with pytest.raises(ShuffleRunRefused, match="stale"):
            await r.call("shuffle_receive", id=shuffle_id, run_id=first_run, shards=[[0, 0, b"old"]])
    assert a.shuffle.stats()["bytes_received"] == before


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_a_transfer_reporting_a_restarted_run_restarts_the_shuffle_again(
    c: Client[Any], s: Scheduler, a: Worker, b: Worker
) -> None:
    # A transfer still running on ``a`` when the shuffle restarts is asked of ``a``
    # again and, running already, reports its first run: the barrier sees two runs.
    pdf = frame(400)
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        shuffled = to_dask(pdf, 6).shuffle("x", npartitions=4)
    sent = a.shuffle.add_partition
    held: list[PartitionId] = []
    started, release = threading.Event(), threading.Event()

    def held_back(shuffle_id: ShuffleId, data: Any, input_partition: PartitionId) -> int:
        run_id = sent(shuffle_id, data, input_partition)
        if not held:
            held.append(input_partition)
            started.set()
            release.wait(30)  # released by the test below, once the shuffle restarted
        return run_id

    a.shuffle.add_partition = held_back  # type: ignore[method-assign]  # hold one transfer back
    future = c.compute(shuffled)
    await async_poll_for(started.is_set, timeout=20)
    shuffle_id = next(iter(s.extensions["shuffle"].active))
    key = (f"shuffle-transfer-{shuffle_id}", held[0])
    await b.close()

    def asked_again() -> bool:
        ts, wts = s.tasks.get(key), a.state.tasks.get(key) if a.state is not None else None
        return ts is not None and wts is not None and ts.state == "processing" and wts.run_id == ts.run_id

    await async_poll_for(asked_again, timeout=20)
    release.set()
    result = await asyncio.wait_for(future, 30)
    pd.testing.assert_frame_equal(ordered(result), ordered(as_dask_gives(pdf)))
    events: Any = s.get_events("p2p")
    restarts = [e for _, e in events if e["action"] == "p2p-run-restart"]
    assert [r.get("worker") for r in restarts] == [b.address, None], restarts
    first_run = next(e["run_id"] for _, e in events if e["action"] == "p2p-run-start")
    assert restarts[1]["stale"] == [first_run, first_run + 1]


P2P_RETRY_FAST = {
    "distributed.p2p.comm.retry.count": 3,
    "distributed.p2p.comm.retry.delay.min": "10ms",
    "distributed.p2p.threads": 1,
}


@pytest.mark.timeout(120)
@gen_cluster(client=True, config=P2P_RETRY_FAST)
async def test_a_cut_shard_batch_is_sent_again(c: Client[Any], s: Scheduler, a: Worker, b: Worker) -> None:
    calls = cut_first(b, "shuffle_receive")
    pdf = frame(400)
    with captured_logger("distributed.shuffle", level=logging.INFO) as log:
        with dask.config.set({"dataframe.shuffle.method": "p2p"}):
            result = await c.compute(to_dask(pdf, 4).shuffle("x"))
    assert len(result) == len(pdf)
    assert sorted(result["y"]) == list(range(400))
    assert len(calls) >= 2
    # The batch went again: no transfer had to be rescheduled.
    assert "rescheduled" not in log.getvalue()
    assert a.shuffle.threads == b.shuffle.threads == 1


@pytest.mark.timeout(120)
@gen_cluster(client=True, config={"distributed.p2p.comm.retry.count": 0})
async def test_without_retries_a_cut_batch_reschedules_the_transfer(
    c: Client[Any], s: Scheduler, a: Worker, b: Worker
) -> None:
    cut_first(b, "shuffle_receive")
    pdf = frame(400)
    with captured_logger("distributed.shuffle", level=logging.INFO) as log:
        with dask.config.set({"dataframe.shuffle.method": "p2p"}):
            result = await c.compute(to_dask(pdf, 4).shuffle("x"))
    assert sorted(result["y"]) == list(range(400))
    assert "rescheduled" in log.getvalue()
