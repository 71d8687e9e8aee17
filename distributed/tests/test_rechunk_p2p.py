"""P2P rechunking: the pure plan (cutting input chunks, assembling output chunks) and
the rechunk on a real cluster."""

from __future__ import annotations

import itertools
import math
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, Literal

import dask.array as da
import dask.config
import dask.core
import numpy as np
import pytest

from distributed import Client, LocalCluster, futures_of, wait
from distributed.shuffle import P2PBarrierTask, describe_shuffles, rechunk_p2p
from distributed.shuffle._rechunk import ChunkIndex, Chunks, RechunkPlan, prechunk
from distributed.utils_test import poll_for


def blocks(x: np.ndarray, chunks: Chunks) -> dict[ChunkIndex, np.ndarray]:
    """The chunks of ``x`` by index, cut directly with numpy."""
    starts = [list(itertools.accumulate((int(c) for c in axis), initial=0)) for axis in chunks]
    out = {}
    for index in itertools.product(*(range(len(axis)) for axis in chunks)):
        out[index] = x[tuple(slice(starts[a][i], starts[a][i + 1]) for a, i in enumerate(index))]
    return out


def rechunk_through_plan(x: np.ndarray, old: Chunks, new: Chunks) -> dict[ChunkIndex, Any]:
    """Cut every input chunk, route the pieces, and assemble every output chunk."""
    plan = RechunkPlan.from_chunks(old, new)
    received: dict[ChunkIndex, dict[ChunkIndex, Any]] = defaultdict(dict)
    for old_index, chunk in blocks(x, old).items():
        assert set(plan.destinations(old_index)) == {d for d, _, _ in plan.split(chunk, old_index)}
        for new_index, position, piece in plan.split(chunk, old_index):
            assert position not in received[new_index], "two pieces at one position"
            assert plan.position(new_index, old_index) == position
            received[new_index][position] = piece
    out = {}
    for new_index in plan.new_indices():
        assert len(received[new_index]) == plan.pieces_of(new_index)
        out[new_index] = plan.assemble(new_index, received[new_index])
    return out


def random_chunks(rng: random.Random, length: int, allow_zero: bool) -> tuple[int, ...]:
    if length == 0:
        return (0,)
    cuts = sorted(rng.sample(range(1, length), rng.randint(0, min(length - 1, 5)))) if length > 1 else []
    bounds = [0, *cuts, length]
    chunks = [b - a for a, b in itertools.pairwise(bounds)]
    if allow_zero and rng.random() < 0.3:
        chunks.insert(rng.randint(0, len(chunks)), 0)
    return tuple(chunks)


def check(x: np.ndarray, old: Chunks, new: Chunks) -> None:
    got = rechunk_through_plan(x, old, new)
    want = blocks(x, new)
    assert got.keys() == want.keys()
    for index, expected in want.items():
        assert got[index].shape == expected.shape, index
        assert got[index].dtype == x.dtype
        np.testing.assert_array_equal(got[index], expected)


@pytest.mark.parametrize("seed", range(60))
def test_plan_random_shapes_and_chunks(seed: int) -> None:
    rng = random.Random(seed)
    ndim = rng.randint(1, 4)
    shape = tuple(rng.randint(0 if rng.random() < 0.1 else 1, 9) for _ in range(ndim))
    old = tuple(random_chunks(rng, n, allow_zero=True) for n in shape)
    new = tuple(random_chunks(rng, n, allow_zero=True) for n in shape)
    x = np.random.default_rng(seed).integers(0, 1000, size=shape)
    check(x, old, new)


def test_plan_partial_overlaps_2d() -> None:
    x = np.arange(70).reshape(7, 10)
    check(x, ((3, 4), (5, 5)), ((2, 2, 3), (1, 3, 4, 2)))


def test_plan_every_axis_changes_3d() -> None:
    x = np.arange(5 * 6 * 7, dtype="f8").reshape(5, 6, 7)
    check(x, ((2, 3), (6,), (1, 1, 5)), ((5,), (1, 2, 3), (4, 3)))


def test_plan_counts_and_indices() -> None:
    plan = RechunkPlan.from_chunks(((3, 4), (5, 5)), ((2, 2, 3), (10,)))
    assert plan.old_shape == (2, 2)
    assert plan.new_shape == (3, 1)
    # input (0, *) covers rows 0..2, which touch output rows 0 and 1
    assert sorted(plan.destinations((0, 1))) == [(0, 0), (1, 0)]
    assert sorted(plan.destinations((1, 0))) == [(1, 0), (2, 0)]
    # output row 1 (rows 2..3) takes one row from each input row and both input columns
    assert plan.pieces_of((1, 0)) == 4
    assert plan.pieces_of((0, 0)) == 2
    assert list(plan.new_indices()) == [(0, 0), (1, 0), (2, 0)]
    assert list(plan.old_indices()) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_position_of_a_source_that_does_not_contribute() -> None:
    plan = RechunkPlan.from_chunks(((3, 4),), ((2, 5),))
    assert plan.position((1,), (1,)) == (1,)
    with pytest.raises(ValueError, match="no piece"):
        plan.position((0,), (1,))


def test_plan_empty_output_chunk_keeps_dtype() -> None:
    x = np.arange(6, dtype="i2")
    got = rechunk_through_plan(x, ((6,),), ((3, 0, 3, 0),))
    assert [c.shape for c in got.values()] == [(3,), (0,), (3,), (0,)]
    assert all(c.dtype == np.dtype("i2") for c in got.values())


def test_plan_unchanged_axis_with_unknown_sizes() -> None:
    # distinct NaN objects, as after pickling: NaN != NaN, yet the axis is unchanged
    plan = RechunkPlan.from_chunks(((math.nan, float("nan")), (2, 2)), ((float("nan"), float("nan")), (4,)))
    x = np.arange(5 * 4).reshape(5, 4)
    top, bottom = x[:3], x[3:]
    received: dict[ChunkIndex, dict[ChunkIndex, Any]] = defaultdict(dict)
    for row, part in enumerate((top, bottom)):
        for col in range(2):
            for new_index, position, piece in plan.split(part[:, 2 * col : 2 * col + 2], (row, col)):
                received[new_index][position] = piece
    np.testing.assert_array_equal(plan.assemble((0, 0), received[(0, 0)]), top)
    np.testing.assert_array_equal(plan.assemble((1, 0), received[(1, 0)]), bottom)


def test_plan_refuses_changing_an_axis_of_unknown_size() -> None:
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        RechunkPlan.from_chunks(((math.nan, math.nan),), ((math.nan,),))


def test_plan_refuses_mismatched_lengths_and_dims() -> None:
    with pytest.raises(ValueError, match="same length"):
        RechunkPlan.from_chunks(((3, 3),), ((5,),))
    with pytest.raises(ValueError, match="dimensions"):
        RechunkPlan.from_chunks(((3, 3),), ((6,), (1,)))


def test_split_checks_the_chunk_shape() -> None:
    plan = RechunkPlan.from_chunks(((3, 3),), ((6,),))
    with pytest.raises(ValueError, match="expected"):
        list(plan.split(np.zeros(4), (0,)))
    with pytest.raises(ValueError, match="1-dimensional"):
        list(plan.split(np.zeros((3, 1)), (0,)))


def test_assemble_refuses_a_missing_piece() -> None:
    plan = RechunkPlan.from_chunks(((3, 3),), ((6,),))
    only_first: dict[ChunkIndex, Any] = {(0,): np.zeros(3)}
    with pytest.raises(RuntimeError, match="grid"):
        plan.assemble((0,), only_first)


def test_assemble_keeps_masked_arrays() -> None:
    x = np.ma.masked_array(np.arange(6), mask=np.array([0, 1, 0, 0, 1, 0], dtype=bool))
    got = rechunk_through_plan(x, ((2, 4),), ((3, 3),))
    assert isinstance(got[(0,)], np.ma.MaskedArray)
    np.testing.assert_array_equal(np.ma.getmaskarray(got[(0,)]), [False, True, False])
    np.testing.assert_array_equal(np.ma.getmaskarray(got[(1,)]), [False, True, False])


def boundaries(axis: tuple[float, ...]) -> set[int]:
    return set(itertools.accumulate((int(c) for c in axis), initial=0))


@pytest.mark.parametrize("seed", range(40))
def test_prechunk_only_merges_inside_output_chunks(seed: int) -> None:
    rng = random.Random(seed)
    ndim = rng.randint(1, 3)
    shape = tuple(rng.randint(1, 40) for _ in range(ndim))
    old = tuple(random_chunks(rng, n, allow_zero=False) for n in shape)
    new = tuple(random_chunks(rng, n, allow_zero=False) for n in shape)
    limit = rng.choice([8, 64, 800, 10**9])
    got = prechunk(old, new, 8, limit)
    old_block = math.prod(max(a) for a in old) * 8
    assert math.prod(max(a) for a in got) * 8 <= max(limit, old_block)
    for o, n, g in zip(old, new, got):
        assert sum(g) == sum(o)
        # only merges: every boundary is an old one, and every old or new boundary shared by both stays
        assert boundaries(g) <= boundaries(o)
        assert boundaries(o) & boundaries(n) <= boundaries(g)
    x = np.arange(math.prod(shape)).reshape(shape)
    check(x, got, new)


def test_prechunk_merges_small_input_chunks() -> None:
    # ten columns of width 1 going to rows: the columns can be joined first
    assert prechunk(((10,), (1,) * 10), ((1,) * 10, (10,)), 8, 2**20) == ((10,), (10,))
    # within the limit only: at most 4 columns of 10 float64 per block
    got = prechunk(((10,), (1,) * 10), ((1,) * 10, (10,)), 8, 320)
    assert max(got[1]) == 4
    # joining at a point that is no output boundary joins two pieces into one
    assert prechunk(((3, 3, 3),), ((2, 2, 2, 3),), 8, 2**20) == ((6, 3),)
    # nothing to merge when every input boundary is an output boundary
    old = ((3, 3, 3),)
    assert prechunk(old, ((1, 2, 1, 2, 3),), 8, 2**20) is old


# -- The rechunk on a cluster of worker processes ---------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[Client[Literal[False]]]:
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            yield c


def from_array(a: Any, chunks: Any, **kwargs: Any) -> Any:
    return da.from_array(a, chunks=chunks, **kwargs)  # type: ignore[no-untyped-call]  # dask.array is untyped


def barriers(y: da.Array) -> list[P2PBarrierTask]:
    return [t for t in dict(y.__dask_graph__()).values() if isinstance(t, P2PBarrierTask)]


def computed_blocks(client: Client[Literal[False]], y: da.Array) -> dict[ChunkIndex, np.ndarray]:
    delayed = y.to_delayed()  # type: ignore[no-untyped-call]  # dask.array is untyped
    indices = list(np.ndindex(delayed.shape))
    values = client.compute([delayed[i] for i in indices], sync=True)
    return {tuple(int(k) for k in i): v for i, v in zip(indices, values)}


CASES = [
    pytest.param((40, 30), (7, 11), ((15, 25), (3, 3, 24)), id="2d-uneven"),
    pytest.param((40, 30), (40, 1), (1, 30), id="2d-columns-to-rows"),
    pytest.param((12, 10, 9), (5, 4, 2), ((2, 10), (7, 3), (9,)), id="3d-every-axis"),
    pytest.param((12, 10, 9), ((12,), (10,), (9,)), (3, 5, 2), id="3d-one-chunk-to-many"),
    pytest.param((50,), (7,), ((1, 0, 20, 29),), id="1d-empty-chunk"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("shape", "old", "new"), CASES)
def test_rechunk_p2p_equals_numpy(client: Client[Literal[False]], shape: tuple[int, ...], old: Any, new: Any) -> None:
    a = np.random.default_rng(len(shape)).random(shape)
    x = from_array(a, old)
    y = x.rechunk(new, method="p2p")
    expected = from_array(a, new)
    assert y.chunks == expected.chunks
    assert len(barriers(y)) == 1
    got = computed_blocks(client, y)
    for index, block in blocks(a, expected.chunks).items():
        assert got[index].shape == block.shape, index
        np.testing.assert_array_equal(got[index], block)
    np.testing.assert_array_equal(client.compute(y, sync=True), a)


@pytest.mark.timeout(120)
def test_rechunk_p2p_of_a_computed_array_and_downstream(client: Client[Literal[False]]) -> None:
    x = da.random.default_rng(1).random((60, 50), chunks=(60, 1))  # type: ignore[no-untyped-call]  # dask.array is untyped
    y = (x + 1).rechunk((6, 50), method="p2p")
    result = client.compute((y * 2).sum(axis=0), sync=True)
    np.testing.assert_allclose(result, ((x + 1) * 2).sum(axis=0).compute(scheduler="sync"))


@pytest.mark.timeout(120)
def test_rechunk_p2p_keeps_masked_chunks(client: Client[Literal[False]]) -> None:
    a = np.ma.masked_array(np.arange(24.0).reshape(4, 6), mask=np.arange(24).reshape(4, 6) % 5 == 0)
    y = from_array(a, (1, 6), asarray=False).rechunk((4, 2), method="p2p")
    result = client.compute(y, sync=True)
    assert isinstance(result, np.ma.MaskedArray)
    np.testing.assert_array_equal(np.ma.getmaskarray(result), np.ma.getmaskarray(a))
    np.testing.assert_array_equal(result.filled(-1), a.filled(-1))


def test_rechunk_p2p_of_an_empty_array_needs_no_shuffle() -> None:
    x = da.zeros((0, 6), chunks=(1, 3))
    y = rechunk_p2p(x, ((0,), (2, 2, 2)))
    assert y.chunks == ((0,), (2, 2, 2))
    assert barriers(y) == []


@pytest.mark.timeout(120)
def test_rechunk_p2p_keeps_unknown_sizes_on_unchanged_axes(client: Client[Literal[False]]) -> None:
    x = from_array(np.arange(20).reshape(10, 2), (5, 1))
    x = x[x[:, 0] % 3 != 0]  # unknown row counts
    assert any(math.isnan(c) for c in x.chunks[0])
    y = x.rechunk({1: 2}, method="p2p")
    assert y.chunks[1] == (2,)
    assert len(barriers(y)) == 1
    np.testing.assert_array_equal(client.compute(y, sync=True), x.compute(scheduler="sync"))


@pytest.mark.timeout(120)
def test_a_large_rechunk_goes_p2p_by_default_with_a_client(client: Client[Literal[False]]) -> None:
    a = np.random.default_rng(5).random((120, 120))
    x = from_array(a, (120, 1))
    assert barriers(x.rechunk((1, 120))) != [], "dask picks P2P for an all-to-all rechunk"
    assert barriers(x.rechunk((120, 2))) == [], "and tasks for a small one"
    np.testing.assert_array_equal(client.compute(x.rechunk((1, 120)), sync=True), a)


@pytest.mark.timeout(120)
def test_rechunk_p2p_output_chunks_go_to_workers_in_contiguous_blocks(client: Client[Literal[False]]) -> None:
    a = np.arange(64.0)
    y = from_array(a, 16).rechunk(8, method="p2p")
    persisted = client.persist(y)
    try:
        wait(persisted)
        who_has = client.who_has(futures_of(persisted))
        holders = [tuple(who_has[(y.name, i)]) for i in range(8)]
        workers = sorted(client.scheduler_info()["workers"])
        assert holders == [(workers[0],)] * 4 + [(workers[1],)] * 4, holders
        np.testing.assert_array_equal(client.compute(persisted, sync=True), a)
    finally:
        del persisted


def slow_copy(block: np.ndarray) -> np.ndarray:
    time.sleep(0.1)  # the task's own work: slow inputs keep the shuffle under way when a worker is killed
    return block.copy()


def transfers_done(dask_scheduler: Any) -> int:
    return sum(1 for ts in dask_scheduler.tasks.values() if ts.state == "memory" and "rechunk-transfer" in str(ts.key))


@pytest.mark.timeout(120)
def test_rechunk_p2p_survives_a_worker_killed_mid_transfer() -> None:
    a = np.random.default_rng(7).random((40, 30))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            x = from_array(a, (2, 30)).map_blocks(slow_copy, dtype=a.dtype)
            # a block size limit of one input chunk keeps the 20 input chunks (and transfer tasks) apart
            y = x.rechunk((40, 3), method="p2p", block_size_limit=a[:2].nbytes)
            assert len(barriers(y)) == 1
            assert len(barriers(y)[0].dependencies) == 20
            future = client.compute(y)
            poll_for(lambda: client.run_on_scheduler(transfers_done) >= 12, timeout=30, what="most pieces to be sent")
            assert client.run_on_scheduler(transfers_done) < 20, "killed too late to interrupt the shuffle"
            victim = next(iter(client.run(os.getpid).values()))
            os.kill(victim, signal.SIGKILL)
            np.testing.assert_array_equal(future.result(timeout=60), a)
            actions = [event["action"] for _, event in client.get_events("p2p")]
            assert "p2p-run-restart" in actions, actions


def test_every_unpack_task_is_described_also_when_fused() -> None:
    a = np.arange(24.0).reshape(4, 6)
    y = from_array(a, (1, 6)).rechunk((4, 2), method="p2p") + 1
    keys = list(dask.core.flatten(y.__dask_keys__()))  # type: ignore[no-untyped-call]  # dask.core is untyped
    graph = dict(y.__dask_optimize__(y.__dask_graph__(), keys))
    (barrier,) = [t for t in graph.values() if isinstance(t, P2PBarrierTask)]
    # the unpack tasks were fused with the "+ 1" that follows each of them
    assert not any(t.key[0].startswith("rechunk-p2p-") for t in graph.values() if barrier.key in t.dependencies)
    (desc,) = describe_shuffles(graph)
    assert desc["npartitions"] == 3
    assert sorted(position for _, position in desc["outputs"]) == [0, 1, 2]
    assert barrier.spec.output_partitions() == [(0, 0), (0, 1), (0, 2)]
    # a task of another shuffle, or no unpack at all, is not claimed
    assert barrier.spec.output_partition_of(barrier) is None


@pytest.mark.timeout(60)
def test_rechunk_p2p_past_the_memory_buffer_spills_pieces_to_disk() -> None:
    arr = np.random.default_rng(3).random((200, 120))  # 192 kB, far past each worker's 16 kiB buffer
    with dask.config.set({"distributed.p2p.storage.buffer": "16 kiB"}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                y = from_array(arr, (200, 10)).rechunk((10, 120), method="p2p")
                np.testing.assert_array_equal(client.compute(y, sync=True), arr)
                stats = client.run(lambda dask_worker: dask_worker.shuffle.stats()["disk_bytes_written"])
                assert sum(stats.values()) > 0


@pytest.mark.parametrize(
    "piece",
    [
        np.arange(24, dtype="f8").reshape(4, 6)[::2, 1::2],  # a strided view
        np.arange(12, dtype=">i4").reshape(3, 4),  # big-endian
        np.array([[True, False]]),
        np.array(["2020-01-01", "2021-06-30"], dtype="datetime64[D]"),
        np.zeros((0, 3), dtype="c16"),
        np.array([(1, 2.5)], dtype=[("a", "i4"), ("b", "f8")]),  # structured: pickled
        np.array([{"x": 1}, None], dtype=object),  # objects: pickled
        np.ma.masked_array([1.0, 2.0], mask=[False, True]),  # a subclass: pickled
    ],
)
def test_pieces_round_trip_through_their_encoding(piece: Any) -> None:
    from distributed.shuffle._rechunk import decode_piece, encode_piece

    payload = encode_piece(piece)
    back = decode_piece(memoryview(bytes(payload)))
    assert type(back) is type(piece)
    assert back.dtype == piece.dtype and back.shape == piece.shape
    if isinstance(piece, np.ma.MaskedArray):
        assert (back.mask == piece.mask).all()
    assert [repr(x) for x in back.ravel().tolist()] == [repr(x) for x in piece.ravel().tolist()]
