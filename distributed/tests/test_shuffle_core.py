"""The shared pieces of P2P shuffles, without a cluster: ids, the barrier task, the shard store, descriptions."""

from __future__ import annotations

import asyncio
import os
import pickle
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dask._task_spec import GraphNode, Task, TaskRef

from distributed.protocol.pickle import loads
from distributed.shuffle import (
    P2PBarrierTask,
    PartitionId,
    RunContext,
    Shard,
    ShuffleId,
    ShuffleRun,
    ShuffleRunRefused,
    ShuffleSpec,
    barrier_key,
    describe_shuffles,
    id_from_key,
    p2p_barrier,
)
from distributed.shuffle._disk import ShardStore


def unpack(shuffle_id: str, part: int, run_id: int) -> int:
    return part


@dataclass(frozen=True)
class ToySpec(ShuffleSpec):
    id: ShuffleId
    n: int
    disk: bool = True

    def output_partitions(self) -> Sequence[PartitionId]:
        return range(self.n)

    def output_partition_of(self, node: GraphNode) -> PartitionId | None:
        if isinstance(node, Task) and node.func is unpack:
            return int(node.args[1])
        return None

    def create_run(self, context: RunContext) -> ShuffleRun:
        return ToyRun(self, context)


class ToyRun(ShuffleRun):
    def split(self, data: Any, input_partition: PartitionId) -> Mapping[PartitionId, bytes]:
        return {}

    def assemble(self, output_partition: PartitionId, shards: Sequence[tuple[PartitionId, Shard]]) -> Any:
        return shards


def test_barrier_key_round_trip() -> None:
    key = barrier_key(ShuffleId("abc"))
    assert key == "shuffle-barrier-abc"
    assert id_from_key(key) == "abc"
    assert id_from_key(("shuffle-barrier-abc", 0)) is None
    assert id_from_key("shuffle-transfer-abc") is None


def test_barrier_task_keeps_its_spec() -> None:
    spec = ToySpec(ShuffleId("s"), 3)
    task = P2PBarrierTask(barrier_key(spec.id), p2p_barrier, "s", TaskRef("t-0"), TaskRef("t-1"), spec=spec)
    assert task.block_fusion
    assert task.dependencies == {"t-0", "t-1"}
    back = pickle.loads(pickle.dumps(task))
    assert isinstance(back, P2PBarrierTask) and back.spec == spec
    assert task.copy().spec == spec
    sub = task.substitute({"t-0": "u-0"})
    assert isinstance(sub, P2PBarrierTask) and sub.spec == spec and sub.dependencies == {"u-0", "t-1"}


def test_describe_shuffles() -> None:
    spec = ToySpec(ShuffleId("s"), 3)
    bkey = barrier_key(spec.id)
    graph: dict[Any, GraphNode] = {
        ("t", 0): Task(("t", 0), int, 1),
        bkey: P2PBarrierTask(bkey, p2p_barrier, "s", TaskRef(("t", 0)), spec=spec),
        **{("out", i): Task(("out", i), unpack, "s", 2 - i, TaskRef(bkey)) for i in range(3)},
        "other": Task("other", sum, [TaskRef(("out", 0))]),
    }
    (desc,) = describe_shuffles(graph)
    assert desc["id"] == "s" and desc["barrier"] == bkey and desc["npartitions"] == 3 and desc["disk"]
    assert sorted(map(tuple, desc["outputs"])) == [(["out", 0], 2), (["out", 1], 1), (["out", 2], 0)]
    assert loads(desc["spec"]) == spec
    assert desc["assignment"] == "round-robin"
    assert describe_shuffles({("t", 0): graph[("t", 0)]}) == []


def test_rechunk_outputs_go_to_workers_in_contiguous_blocks_and_dataframes_round_robin() -> None:
    import dask.array as da

    from distributed.shuffle._scheduler_plugin import assign_workers

    y = da.ones((6, 4), chunks=(1, 4)).rechunk((6, 1), method="p2p")
    (desc,) = describe_shuffles(dict(y.__dask_graph__()))
    assert desc["assignment"] == "contiguous"
    assert assign_workers(["a", "b", "c"], 8, "contiguous") == ["a", "a", "a", "b", "b", "b", "c", "c"]
    assert assign_workers(["a", "b", "c"], 8, "round-robin") == ["a", "b", "c", "a", "b", "c", "a", "b"]
    assert assign_workers(["a", "b", "c"], 2, "contiguous") == ["a", "b"]
    # every worker gets a block of the same size, to within one partition
    sizes = Counter(assign_workers([str(w) for w in range(7)], 100, "contiguous")).values()
    assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="Unknown assignment"):
        assign_workers(["a"], 1, "random")


def test_shard_store_spills_past_its_limit_and_ignores_duplicates(tmp_path: Path) -> None:
    directory = str(tmp_path / "run")
    store = ShardStore(directory, memory_limit=10, disk=True, partitions=[0, 1])

    async def fill() -> None:
        await store.put([(0, 0, b"aaaa"), (0, 1, b"bb")])
        assert store.disk_bytes_written == 0
        await store.put([(1, 0, b"cccccccc")])  # past 10 bytes: everything goes to disk
        await store.put([(1, 0, b"xxxxxxxx")])  # a duplicate: ignored
        await store.put([((2, 3), 1, b"d")])

    asyncio.run(fill())
    assert store.disk_bytes_written == 14
    assert sorted(os.listdir(directory)) == ["0.shards", "1.shards"]
    assert store.read(0) == [(0, b"aaaa"), (1, b"cccccccc")]
    assert store.read(1) == [(0, b"bb"), ((2, 3), b"d")]
    assert store.read(0) == [(0, b"aaaa"), (1, b"cccccccc")]  # reads leave the shards
    store.close()
    assert not os.path.exists(directory)
    with pytest.raises(ShuffleRunRefused, match="dropped shuffle run"):
        asyncio.run(store.put([(5, 0, b"late")]))


def test_shard_store_without_disk_stays_in_memory(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path / "run"), memory_limit=1, disk=False, partitions=[0])
    asyncio.run(store.put([(0, 0, b"abc"), (1, 0, b"de")]))
    assert store.disk_bytes_written == 0 and store.memory_bytes == 5
    assert store.read(0) == [(0, b"abc"), (1, b"de")]
    assert not os.path.exists(tmp_path / "run")


def test_restart_drops_transfer_results_before_running_the_transfers_again() -> None:
    # A worker asked again for a transfer whose result it holds answers with that
    # result (of the old run): the restart must make it drop the result first.
    from distributed.protocol import messages as m
    from distributed.scheduler import Scheduler
    from distributed.shuffle import ShuffleSchedulerExtension
    from distributed.tests.machines import A, RecordingStream, finish
    from distributed.tests.machines import task_spec as spec

    class Recorder(RecordingStream):
        send_lazy = RecordingStream.send

    s = Scheduler(validate=True)
    s.add_worker_state(A, 2)
    stream = Recorder()
    s.stream_comms[A] = stream  # type: ignore[assignment]  # records what the scheduler sends
    s.update_graph("c1", {"t0": spec(), "t1": spec(), "bar": spec(["t0", "t1"]), "u": spec(["bar"])}, ["u"])
    ext = ShuffleSchedulerExtension(s)
    ext.add_descriptions(
        [
            m.ShuffleDescription(
                id="sh",
                barrier="bar",
                npartitions=1,
                outputs=[["u", 0]],
                disk=False,
                assignment="round-robin",
                spec=b"",
            )
        ]
    )
    assert ext.handle_get_or_create(None, m.ShuffleGetOrCreate(op="shuffle_get_or_create", id="sh", worker=A))
    finish(s, "t0")
    finish(s, "t1")
    barrier = s.tasks["bar"]
    assert barrier.state == "processing"
    stream.sent.clear()

    async def stale_barrier() -> None:
        request = m.ShuffleBarrierRequest(op="shuffle_barrier", id="sh", run_ids=[0, 1], worker=A)
        with pytest.raises(ShuffleRunRefused, match=r"reported runs \[0, 1\]"):
            await ext.handle_barrier(None, request)

    asyncio.run(stale_barrier())
    assert s.tasks["bar"] is barrier and str(barrier.state) == "waiting"
    ops = [(msg["op"], msg.get("key"), sorted(msg.get("keys") or ())) for msg in stream.sent]
    assert ops[0] == ("free-keys", None, ["t0", "t1"]), ops
    assert {key for op, key, _ in ops if op == "compute-task"} == {"t0", "t1"}, ops
