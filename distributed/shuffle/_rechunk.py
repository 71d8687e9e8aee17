"""Peer-to-peer rechunking of dask arrays.

Theory of operation
-------------------
A rechunk from ``old`` to ``new`` chunks is a shuffle whose input partitions are the
input chunks and whose output partitions are the output chunks.  Every input chunk
is cut into the pieces that fall into each output chunk it overlaps; each piece
travels to the worker that will build that output chunk; once every input chunk
has been cut (the barrier), each output chunk is assembled from its pieces.

The plan is made axis by axis (:class:`RechunkPlan`).  Along one axis, input chunk
``i`` overlaps output chunks ``j`` at intervals, and output chunk ``j`` is the
concatenation of its overlaps in order; the *position* of a piece is its rank in
that order.  An n-dimensional piece is the product of one axis piece per axis, so
its destination is the tuple of the axes' ``j`` and its place inside the output
chunk is the tuple of their positions.

Invariants the plan keeps:

* every output chunk receives at least one piece along every axis, so every output
  chunk receives at least one n-dimensional piece, and the pieces it receives tile
  it exactly: a grid whose extent along each axis is the axis' piece count.  A
  zero-length output chunk takes an empty piece of the input chunk at its position,
  which carries the dtype and chunk type across;
* an axis whose chunks do not change maps every chunk onto itself whole, which
  also works when its sizes are unknown (NaN).

The shuffle (:func:`rechunk_p2p`) is built on :mod:`distributed.shuffle._core`:
one transfer task per input chunk, one :class:`P2PBarrierTask` carrying an
:class:`ArrayRechunkSpec`, one unpack task per output chunk.  Partitions are
chunk indices (tuples of ints).  A NumPy piece travels as its dtype and shape
and its raw bytes, copied once from the strided view into the shard and read
back without a copy; anything else travels pickled.  A worker places a
received piece by the input chunk it came from (:meth:`RechunkPlan.position`).
"""

from __future__ import annotations

import bisect
import itertools
import math
import pickle
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import dask.config
import msgpack
from dask._task_spec import GraphNode, Task, TaskRef

from distributed.shuffle._core import (
    P2PBarrierTask,
    PartitionId,
    RunContext,
    Shard,
    ShuffleId,
    ShuffleRun,
    ShuffleSpec,
    barrier_key,
    p2p_barrier,
    transfer_partition,
    unpack_partition,
)

ChunkIndex = tuple[int, ...]
Chunks = tuple[tuple[float, ...], ...]


@dataclass(frozen=True, slots=True)
class AxisPiece:
    """The part of one input chunk that lands in one output chunk, along one axis.

    Attributes
    ----------
    old_index, new_index
        Index of the input and of the output chunk along the axis.
    start, stop
        The piece inside the input chunk; both ``None`` for a whole chunk of an axis
        whose chunks do not change (its size may be unknown).
    position
        Rank of the piece among the pieces of output chunk ``new_index``.
    """

    old_index: int
    new_index: int
    start: int | None
    stop: int | None
    position: int

    def as_slice(self) -> slice:
        return slice(self.start, self.stop)


def _same_axis(old: Sequence[float], new: Sequence[float]) -> bool:
    """Whether two chunkings of an axis are equal, NaN (unknown) sizes included (NaN != NaN)."""
    return len(old) == len(new) and all(o == n or (math.isnan(o) and math.isnan(n)) for o, n in zip(old, new))


def _axis_pieces(old: Sequence[float], new: Sequence[float]) -> list[AxisPiece]:
    """The pieces of one axis, ordered by output chunk then position."""
    if _same_axis(old, new):
        return [AxisPiece(i, i, None, None, 0) for i in range(len(old))]
    if any(math.isnan(c) for c in itertools.chain(old, new)):
        raise ValueError(
            f"p2p rechunk cannot change an axis with unknown chunk sizes: {tuple(old)} -> {tuple(new)}; "
            "compute the chunk sizes first (x.compute_chunk_sizes())"
        )
    old_sizes = [int(c) for c in old]
    new_sizes = [int(c) for c in new]
    if sum(old_sizes) != sum(new_sizes):
        raise ValueError(f"chunks {tuple(new)} do not cover the same length as {tuple(old)}")
    old_starts = list(itertools.accumulate(old_sizes, initial=0))[:-1]
    pieces: list[AxisPiece] = []
    new_start = 0
    for j, size in enumerate(new_sizes):
        new_stop = new_start + size
        if size == 0:
            # An empty output chunk still needs one piece: an empty slice of the input
            # chunk at its position, to carry the dtype and chunk type across.
            i = max(bisect.bisect_right(old_starts, new_start) - 1, 0)
            offset = new_start - old_starts[i]
            pieces.append(AxisPiece(i, j, offset, offset, 0))
        else:
            i = bisect.bisect_right(old_starts, new_start) - 1
            position = 0
            while i < len(old_sizes) and old_starts[i] < new_stop:
                lo = max(new_start, old_starts[i])
                hi = min(new_stop, old_starts[i] + old_sizes[i])
                if hi > lo:
                    pieces.append(AxisPiece(i, j, lo - old_starts[i], hi - old_starts[i], position))
                    position += 1
                i += 1
        new_start = new_stop
    return pieces


@dataclass(frozen=True)
class RechunkPlan:
    """Which piece of which input chunk goes where in which output chunk.

    Build it with :meth:`from_chunks`.  Pure: it holds no array data and does no I/O.
    """

    old: Chunks
    new: Chunks
    #: ``by_old[axis][old_index]``: the pieces of that input chunk along the axis.
    by_old: tuple[tuple[tuple[AxisPiece, ...], ...], ...]
    #: ``grid[axis][new_index]``: how many pieces make up that output chunk along the axis.
    grid: tuple[tuple[int, ...], ...]
    #: ``sources[axis][new_index]``: the input chunks of those pieces along the axis, in order.
    sources: tuple[tuple[tuple[int, ...], ...], ...]

    @classmethod
    def from_chunks(cls, old: Chunks, new: Chunks) -> RechunkPlan:
        """Plan a rechunk from ``old`` to ``new`` chunks (tuples of tuples, one per axis)."""
        old = tuple(tuple(axis) for axis in old)
        new = tuple(tuple(axis) for axis in new)
        if len(old) != len(new):
            raise ValueError(f"chunks {new} do not have the {len(old)} dimensions of {old}")
        by_old: list[tuple[tuple[AxisPiece, ...], ...]] = []
        sources: list[tuple[tuple[int, ...], ...]] = []
        for old_axis, new_axis in zip(old, new):
            pieces = _axis_pieces(old_axis, new_axis)
            per_old: list[list[AxisPiece]] = [[] for _ in old_axis]
            per_new: list[list[int]] = [[] for _ in new_axis]
            for p in pieces:
                per_old[p.old_index].append(p)
                per_new[p.new_index].append(p.old_index)
            by_old.append(tuple(tuple(ps) for ps in per_old))
            sources.append(tuple(tuple(olds) for olds in per_new))
        grid = tuple(tuple(len(olds) for olds in axis) for axis in sources)
        return cls(old, new, tuple(by_old), grid, tuple(sources))

    @property
    def ndim(self) -> int:
        return len(self.old)

    @property
    def old_shape(self) -> tuple[int, ...]:
        """Number of input chunks along each axis."""
        return tuple(len(axis) for axis in self.old)

    @property
    def new_shape(self) -> tuple[int, ...]:
        """Number of output chunks along each axis."""
        return tuple(len(axis) for axis in self.new)

    @property
    def n_inputs(self) -> int:
        return math.prod(self.old_shape)

    @property
    def n_outputs(self) -> int:
        return math.prod(self.new_shape)

    def old_indices(self) -> Iterator[ChunkIndex]:
        """Input chunk indices in C order."""
        return itertools.product(*(range(n) for n in self.old_shape))

    def new_indices(self) -> Iterator[ChunkIndex]:
        """Output chunk indices in C order."""
        return itertools.product(*(range(n) for n in self.new_shape))

    def destinations(self, old_index: ChunkIndex) -> Iterator[ChunkIndex]:
        """The output chunks that input chunk ``old_index`` contributes to."""
        per_axis = [[p.new_index for p in self.by_old[axis][i]] for axis, i in enumerate(old_index)]
        return itertools.product(*per_axis)

    def pieces_of(self, new_index: ChunkIndex) -> int:
        """How many pieces output chunk ``new_index`` is assembled from."""
        return math.prod(self.grid[axis][j] for axis, j in enumerate(new_index))

    def position(self, new_index: ChunkIndex, old_index: ChunkIndex) -> ChunkIndex:
        """Where the piece of input chunk ``old_index`` sits in output chunk ``new_index``'s grid of pieces."""
        try:
            return tuple(self.sources[axis][j].index(i) for axis, (j, i) in enumerate(zip(new_index, old_index)))
        except ValueError:
            raise ValueError(f"input chunk {old_index} has no piece in output chunk {new_index}") from None

    def split(self, chunk: Any, old_index: ChunkIndex) -> Iterator[tuple[ChunkIndex, ChunkIndex, Any]]:
        """Cut input chunk ``old_index`` into its pieces.

        Yields ``(new_index, position, piece)``: the output chunk a piece belongs to,
        its place in that chunk's grid of pieces, and the piece (a view of ``chunk``).
        """
        expected = tuple(self.old[axis][i] for axis, i in enumerate(old_index))
        shape = getattr(chunk, "shape", None)
        if shape is None or len(shape) != self.ndim:
            raise ValueError(f"input chunk {old_index} is not a {self.ndim}-dimensional array: {type(chunk).__name__}")
        for axis, (got, want) in enumerate(zip(shape, expected)):
            if not math.isnan(want) and got != want:
                raise ValueError(f"input chunk {old_index} has shape {tuple(shape)}, expected {expected} (axis {axis})")
        per_axis = [self.by_old[axis][i] for axis, i in enumerate(old_index)]
        for combo in itertools.product(*per_axis):
            new_index = tuple(p.new_index for p in combo)
            position = tuple(p.position for p in combo)
            yield new_index, position, chunk[tuple(p.as_slice() for p in combo)]

    def assemble(
        self, new_index: ChunkIndex, pieces: Mapping[ChunkIndex, Any] | Iterable[tuple[ChunkIndex, Any]]
    ) -> Any:
        """Build output chunk ``new_index`` from its pieces, keyed by position."""
        by_position = dict(pieces.items() if isinstance(pieces, Mapping) else pieces)
        grid = tuple(self.grid[axis][j] for axis, j in enumerate(new_index))
        expected = math.prod(grid)
        if len(by_position) != expected or any(
            len(pos) != self.ndim or not all(0 <= p < n for p, n in zip(pos, grid)) for pos in by_position
        ):
            raise RuntimeError(
                f"output chunk {new_index} expects pieces at a {grid} grid, got positions {sorted(by_position)}"
            )
        if expected == 1:
            (only,) = by_position.values()
            return only
        return _concatenate_grid(by_position, grid)


def _concatenate_grid(by_position: Mapping[ChunkIndex, Any], grid: tuple[int, ...]) -> Any:
    """Join a full grid of pieces into one array."""
    from dask.array.core import concatenate3

    def nest(prefix: ChunkIndex) -> Any:
        if len(prefix) == len(grid):
            return by_position[prefix]
        return [nest((*prefix, k)) for k in range(grid[len(prefix)])]

    return concatenate3(nest(()))  # type: ignore[no-untyped-call]  # dask.array is untyped


def _merged_axis(old: tuple[float, ...], new: tuple[float, ...], cap: float) -> tuple[float, ...]:
    """Merge neighbouring chunks of ``old`` where their boundary is not one of ``new``, up to ``cap`` long.

    Joining two chunks at a point inside an output chunk joins the two pieces that
    meet there into one: the shuffle gets fewer pieces and fewer transfer tasks.  A
    boundary that ``new`` shares is kept, since joining there would save nothing.
    """
    new_stops = set(itertools.accumulate(int(c) for c in new))
    out: list[float] = []
    run = 0
    position = 0
    for size in (int(c) for c in old):
        start, position = position, position + size
        if run and (start in new_stops or run + size > cap):
            out.append(run)
            run = 0
        run += size
    if run or not out:
        out.append(run)
    return tuple(out)


def prechunk(old: Chunks, new: Chunks, itemsize: int, block_size_limit: float) -> Chunks:
    """Input chunks to rechunk to (by tasks) before a P2P rechunk from ``old`` to ``new``.

    Many small input chunks make many transfer tasks and many small pieces.  Input
    chunks that meet inside an output chunk are merged first, as far as blocks stay
    within ``block_size_limit`` bytes (or the largest input block, when
    that is larger already).  Returns ``old`` when nothing is worth merging.
    """
    known = [
        a
        for a, (o, n) in enumerate(zip(old, new))
        if not _same_axis(o, n) and not any(math.isnan(c) for c in itertools.chain(o, n)) and len(o) > 1
    ]
    if not known:
        return old

    def block_bytes(chunks: Chunks) -> float:
        return math.prod(max(axis, default=0) for axis in chunks) * itemsize

    limit = max(block_size_limit, block_bytes(old))

    def candidate(factor: float) -> Chunks:
        out = list(old)
        for a in known:
            out[a] = _merged_axis(old[a], new[a], max(old[a]) * factor)
        return tuple(out)

    # The block size grows with the factor: find the largest factor within the limit.
    lo, hi = 1.0, float(max(sum(int(c) for c in old[a]) for a in known))
    if block_bytes(candidate(hi)) <= limit:
        best = candidate(hi)
    else:
        for _ in range(40):
            mid = (lo + hi) / 2
            if block_bytes(candidate(mid)) <= limit:
                lo = mid
            else:
                hi = mid
        best = candidate(lo)
    return best if best != old else old


# -- The shuffle: spec, per-worker run, task functions and graph -----------------------------------


@dataclass(frozen=True)
class ArrayRechunkSpec(ShuffleSpec):
    """A P2P rechunk of an array from chunks ``old`` to ``new``.

    Input and output partitions are chunk indices (tuples of ints).
    """

    id: ShuffleId
    old: Chunks
    new: Chunks
    disk: bool
    #: Output chunks in C order, in blocks per worker: neighbours share a worker.
    output_assignment: ClassVar[Literal["round-robin", "contiguous"]] = "contiguous"

    def output_partitions(self) -> Sequence[PartitionId]:
        """Every output chunk index, in C order."""
        return list(itertools.product(*(range(len(axis)) for axis in self.new)))

    def output_partition_of(self, node: GraphNode) -> PartitionId | None:
        """The output chunk that ``node`` unpacks, when it is (or contains, fused) an unpack task of this rechunk."""
        task = _find_unpack(node, self.id)
        if task is None:
            return None
        return tuple(int(i) for i in task.args[1])

    def create_run(self, context: RunContext) -> ShuffleRun:
        """This worker's part of one run of this rechunk."""
        return ArrayRechunkRun(self, context)


def _find_unpack(node: Any, shuffle_id: str) -> Task | None:
    """The unpack task of shuffle ``shuffle_id`` in ``node``, also when fused into a larger task."""
    if isinstance(node, Task):
        if node.func is rechunk_unpack and node.args and node.args[0] == shuffle_id:
            return node
        for arg in node.args:
            # A fused task carries its subgraph as a dict of key -> task.
            if isinstance(arg, dict):
                for inner in arg.values():
                    found = _find_unpack(inner, shuffle_id)
                    if found is not None:
                        return found
    return None


class ArrayRechunkRun(ShuffleRun):
    """One worker's part of one run of a P2P rechunk: cuts input chunks, assembles output chunks."""

    spec: ArrayRechunkSpec

    def __init__(self, spec: ArrayRechunkSpec, context: RunContext) -> None:
        super().__init__(spec, context)
        self.plan = RechunkPlan.from_chunks(spec.old, spec.new)

    def split(self, data: Any, input_partition: PartitionId) -> Mapping[PartitionId, Shard]:
        old_index = _index(input_partition)
        # One piece per output chunk: an input chunk overlaps an output chunk in one box.
        return {new_index: encode_piece(piece) for new_index, _, piece in self.plan.split(data, old_index)}

    def assemble(self, output_partition: PartitionId, shards: Sequence[tuple[PartitionId, Shard]]) -> Any:
        new_index = _index(output_partition)
        pieces = {self.plan.position(new_index, _index(source)): decode_piece(payload) for source, payload in shards}
        chunk = self.plan.assemble(new_index, pieces)
        if getattr(chunk, "flags", None) is not None and not chunk.flags.writeable:
            chunk = chunk.copy()  # a lone piece read in place from the shard's bytes
        return chunk


#: First byte of an encoded piece: raw NumPy data, or a pickle.
_RAW, _PICKLED = 0, 1
_HEADER_SIZE = struct.Struct("!BI")


def encode_piece(piece: Any) -> bytes | bytearray:
    """One piece of an input chunk as bytes: a NumPy array's dtype, shape and data; else a pickle."""
    import numpy as np

    # Exactly ndarray: subclasses (masked arrays) keep what makes them so only through pickle.
    if type(piece) is np.ndarray and not piece.dtype.hasobject and piece.dtype.fields is None:
        header = msgpack.packb((piece.dtype.str, list(piece.shape)))
        start = _HEADER_SIZE.size + len(header)
        out = bytearray(start + piece.nbytes)
        _HEADER_SIZE.pack_into(out, 0, _RAW, len(header))
        out[_HEADER_SIZE.size : start] = header
        # One copy, from the (often strided) view straight into the shard.
        np.copyto(np.frombuffer(out, dtype=piece.dtype, offset=start, count=piece.size).reshape(piece.shape), piece)
        return out
    return bytes([_PICKLED]) + pickle.dumps(piece, protocol=pickle.HIGHEST_PROTOCOL)


def decode_piece(payload: bytes | bytearray | memoryview) -> Any:
    """The piece :func:`encode_piece` made; a NumPy piece reads the payload's memory in place (read-only)."""
    import numpy as np

    view = memoryview(payload)
    if view[0] == _RAW:
        _, n = _HEADER_SIZE.unpack_from(view, 0)
        start = _HEADER_SIZE.size + n
        dtype, shape = msgpack.unpackb(view[_HEADER_SIZE.size : start])
        count = math.prod(shape)
        return np.frombuffer(view, dtype=np.dtype(dtype), offset=start, count=count).reshape(shape)
    return pickle.loads(view[1:])


def _index(partition: PartitionId) -> ChunkIndex:
    if isinstance(partition, int):
        return (partition,)
    return tuple(partition)


def rechunk_transfer(input: Any, id: ShuffleId, input_chunk: ChunkIndex) -> int:
    """Transfer task: send the pieces of input chunk ``input_chunk`` to their output chunks' workers."""
    return transfer_partition(id, input, tuple(input_chunk))


def rechunk_unpack(id: ShuffleId, output_chunk: ChunkIndex, barrier_run_id: int) -> Any:
    """Unpack task: output chunk ``output_chunk``, assembled from the pieces received in run ``barrier_run_id``."""
    return unpack_partition(id, tuple(output_chunk), barrier_run_id)


def rechunk_name(token: str) -> str:
    """The name of the output array of the P2P rechunk with token ``token``."""
    return f"rechunk-p2p-{token}"


def rechunk_p2p(
    x: Any,
    chunks: Chunks,
    *,
    threshold: int | None = None,
    block_size_limit: float | None = None,
    balance: bool = False,
) -> Any:
    """Rechunk dask array ``x`` to ``chunks`` with a P2P shuffle.

    Called by :func:`dask.array.rechunk` with ``method="p2p"`` (its default with a
    client, for large rechunks), with ``chunks`` normalised to a tuple of tuples.

    Parameters
    ----------
    x : dask.array.Array
        The array to rechunk.
    chunks : tuple of tuples of int
        The new chunks, one tuple per axis.
    threshold, block_size_limit, balance
        As in :func:`dask.array.rechunk`, for the task-based rechunk that first
        merges small input chunks (see :func:`prechunk`); ``block_size_limit``
        (default: config ``array.chunk-size``) also bounds those merged chunks.

    Returns
    -------
    dask.array.Array
        An array with chunks ``chunks``: one transfer task per input chunk, one
        barrier task, one unpack task per output chunk.
    """
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
    from dask.utils import parse_bytes

    chunks = tuple(tuple(axis) for axis in chunks)
    if x.size == 0:
        # Nothing to move: every chunk is empty.
        return da.empty(x.shape, chunks=chunks, dtype=x.dtype)

    limit = parse_bytes(block_size_limit if block_size_limit is not None else dask.config.get("array.chunk-size"))
    merged = prechunk(x.chunks, chunks, x.dtype.itemsize, limit)
    if merged != x.chunks:
        x = x.rechunk(merged, threshold=threshold, block_size_limit=block_size_limit, balance=balance, method="tasks")

    plan = RechunkPlan.from_chunks(x.chunks, chunks)
    token = tokenize(x, chunks)
    shuffle_id = ShuffleId(token)
    transfer_name = f"rechunk-transfer-{token}"
    name = rechunk_name(token)
    disk = bool(dask.config.get("distributed.p2p.storage.disk"))

    dsk: dict[Any, GraphNode] = {}
    transfers: list[TaskRef] = []
    for old_index in plan.old_indices():
        transfer = Task((transfer_name, *old_index), rechunk_transfer, TaskRef((x.name, *old_index)), token, old_index)
        dsk[transfer.key] = transfer
        transfers.append(TaskRef(transfer.key))
    spec = ArrayRechunkSpec(id=shuffle_id, old=plan.old, new=plan.new, disk=disk)
    barrier = P2PBarrierTask(barrier_key(shuffle_id), p2p_barrier, token, *transfers, spec=spec)
    dsk[barrier.key] = barrier
    for new_index in plan.new_indices():
        unpack = Task((name, *new_index), rechunk_unpack, token, new_index, TaskRef(barrier.key))
        dsk[unpack.key] = unpack

    graph = HighLevelGraph.from_collections(name, MaterializedLayer(dsk), dependencies=[x])
    # dask.array is untyped
    return da.Array(graph, name, chunks, meta=x, dtype=x.dtype)  # type: ignore[no-untyped-call]
