"""The parts of a P2P shuffle that every kind of shuffle shares.

A P2P shuffle is three groups of tasks in one graph:

1. **transfer** tasks, one per input partition.  Each cuts its input into
   shards, one per output partition, and sends every shard straight to the
   worker that will own that output partition.  It returns the run id of the
   shuffle run it contributed to.
2. one **barrier** task, a :class:`P2PBarrierTask` with key
   :func:`barrier_key` ``(id)``, depending on every transfer.  Its task
   function :func:`p2p_barrier` checks that all transfers contributed to the
   same run, tells every participating worker that no more shards will come,
   and returns the run id.
3. **unpack** tasks, one per output partition, depending on the barrier.  The
   scheduler pins each to the worker owning its output partition; it reads the
   shards received there and builds the output partition.

How a kind of shuffle plugs in
------------------------------
Subclass two classes:

- :class:`ShuffleSpec`: what the shuffle is (pickled into the barrier task;
  only workers ever unpickle it, the scheduler gets it as opaque bytes).  It
  lists the output partition ids (:meth:`ShuffleSpec.output_partitions`),
  says which output partition an unpack task reads
  (:meth:`ShuffleSpec.output_partition_of`, evaluated by the client on the
  graph it submits, so that the scheduler can pin unpack tasks without
  opening them), and makes the per-worker run (:meth:`ShuffleSpec.create_run`).
- :class:`ShuffleRun`: one worker's part of one attempt (run) of a shuffle.
  It implements :meth:`ShuffleRun.split` (input partition -> shards as bytes,
  by output partition) and :meth:`ShuffleRun.assemble` (the shards received
  for one output partition -> the output partition).  Sending, buffering,
  spilling to disk, back-pressure and run ids are handled by the base class
  and the worker's shuffle extension.

The task functions of a new kind of shuffle then call :func:`transfer_partition`
(in its transfer tasks) and :func:`unpack_partition` (in its unpack tasks), and
the graph builds its barrier as ``P2PBarrierTask(barrier_key(id), p2p_barrier,
id, *transfer_refs, spec=MySpec(...))``.

Partition ids (input and output) are ``int`` or tuples of ``int``: they travel
in msgpack messages, which turn tuples into lists; the receiving side turns
them back with :func:`as_partition_id`.
"""

from __future__ import annotations

import abc
import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NewType, Protocol

from dask._task_spec import GraphNode, Task

from distributed.protocol import messages as m
from distributed.protocol.pickle import dumps
from distributed.task_context import current_worker

if TYPE_CHECKING:
    from distributed.shuffle._disk import ShardStore

__all__ = [
    "BARRIER_PREFIX",
    "P2PBarrierTask",
    "PartitionId",
    "RunContext",
    "Shard",
    "ShuffleId",
    "ShuffleRun",
    "ShuffleSpec",
    "as_partition_id",
    "barrier_key",
    "describe_shuffles",
    "id_from_key",
    "p2p_barrier",
    "transfer_partition",
    "unpack_partition",
]

#: The id of one shuffle in a graph (dask passes the token of its expression).
ShuffleId = NewType("ShuffleId", str)

#: An input or output partition: an int (dataframes) or a tuple of ints (array chunks).
PartitionId = int | tuple[int, ...]

#: A shard's bytes: what a run's ``split`` makes, or a view of bytes received or read back from disk.
Shard = bytes | bytearray | memoryview

#: What the key of a shuffle's barrier task starts with.
BARRIER_PREFIX = "shuffle-barrier-"


def barrier_key(shuffle_id: ShuffleId) -> str:
    """The key of the barrier task of shuffle ``shuffle_id``.

    Examples
    --------
    >>> barrier_key(ShuffleId("abc"))
    'shuffle-barrier-abc'
    """
    return BARRIER_PREFIX + shuffle_id


def id_from_key(key: Any) -> ShuffleId | None:
    """The shuffle id in a barrier key (the inverse of :func:`barrier_key`); None for any other key.

    Examples
    --------
    >>> id_from_key("shuffle-barrier-abc")
    'abc'
    >>> id_from_key(("x", 0)) is None
    True
    """
    if not isinstance(key, str) or not key.startswith(BARRIER_PREFIX):
        return None
    return ShuffleId(key[len(BARRIER_PREFIX) :])


def as_partition_id(value: Any) -> PartitionId:
    """A partition id as it arrived over msgpack (lists for tuples), made hashable again."""
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    raise TypeError(f"A partition id is an int or a tuple of ints, got {type(value).__name__}")


class ShuffleSpec(abc.ABC):
    """What one shuffle is: the base class of every kind of P2P shuffle's description.

    Subclasses are usually frozen dataclasses with at least the fields ``id``
    (a :data:`ShuffleId`) and ``disk`` (spill shards to disk past the memory
    buffer).  A spec is pickled into the barrier task: the client sends it to
    the scheduler as opaque bytes, and only workers unpickle it.
    """

    id: ShuffleId
    disk: bool
    #: How the scheduler spreads output partitions over workers: ``"round-robin"``
    #: (partition ``i`` of the list to worker ``i % n``), or ``"contiguous"`` (in
    #: blocks, ``i * n // npartitions``: neighbouring partitions, e.g. array chunks
    #: read together downstream, share a worker).
    output_assignment: ClassVar[Literal["round-robin", "contiguous"]] = "round-robin"

    @abc.abstractmethod
    def output_partitions(self) -> Sequence[PartitionId]:
        """The output partitions, in order.

        Workers are assigned by position in this list (see ``output_assignment``).
        """

    @abc.abstractmethod
    def output_partition_of(self, node: GraphNode) -> PartitionId | None:
        """The output partition that ``node``, a task depending on the barrier, reads.

        Evaluated by the client on the graph it submits: the scheduler pins
        each unpack task to the worker owning its output partition.  None
        when ``node`` is not an unpack task of this shuffle (it is then not
        pinned).
        """

    @abc.abstractmethod
    def create_run(self, context: RunContext) -> ShuffleRun:
        """This worker's part of one run of this shuffle."""


@dataclass(frozen=True)
class RunContext:
    """What a worker gives a :class:`ShuffleRun` it makes.

    Attributes
    ----------
    id, run_id
        The shuffle and the attempt (a restarted shuffle gets a new run id).
    worker_for
        The address of the worker owning each output partition.
    address
        This worker's address.
    loop
        The worker's event loop (transfer and unpack tasks run in threads).
    send
        Coroutine function sending shards ``[(input, output, bytes), ...]`` of
        this run to a worker (this one included); it returns once the receiver
        stored them, which is what makes senders wait for full receivers.
    store
        Where the shards received for this run are kept (memory, then disk).
    message_bytes_limit
        Largest payload of one shard message.
    """

    id: ShuffleId
    run_id: int
    worker_for: Mapping[PartitionId, str]
    address: str
    loop: asyncio.AbstractEventLoop
    send: Callable[[str, list[tuple[PartitionId, PartitionId, Shard]]], Awaitable[None]]
    store: ShardStore
    message_bytes_limit: int


class ShuffleRun(abc.ABC):
    """One worker's part of one run of a shuffle.

    Subclasses implement :meth:`split` and :meth:`assemble`; the rest is here.
    Both are called in worker threads (inside transfer and unpack tasks).
    """

    def __init__(self, spec: ShuffleSpec, context: RunContext) -> None:
        self.spec = spec
        self.context = context
        self.id = context.id
        self.run_id = context.run_id
        self.worker_for = context.worker_for

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r} run {self.run_id} on {self.context.address}>"

    @abc.abstractmethod
    def split(self, data: Any, input_partition: PartitionId) -> Mapping[PartitionId, Shard]:
        """Cut one input partition into shards: the bytes each output partition gets of it.

        Output partitions that get nothing of it may be left out.
        """

    @abc.abstractmethod
    def assemble(self, output_partition: PartitionId, shards: Sequence[tuple[PartitionId, Shard]]) -> Any:
        """Build one output partition from its shards, as ``(input partition, bytes)`` sorted by input partition."""

    def add_partition(self, data: Any, input_partition: PartitionId) -> int:
        """Send the shards of one input partition to their workers; return the run id.

        Returns once every receiver stored its shards.  Call it from a worker
        thread, never from the event loop.
        """
        shards = self.split(data, input_partition)
        by_worker: dict[str, list[tuple[PartitionId, PartitionId, Shard]]] = defaultdict(list)
        for part, payload in shards.items():
            by_worker[self.worker_for[part]].append((input_partition, part, payload))
        asyncio.run_coroutine_threadsafe(self._send(by_worker), self.context.loop).result()
        return self.run_id

    async def _send(self, by_worker: Mapping[str, list[tuple[PartitionId, PartitionId, Shard]]]) -> None:
        limit = self.context.message_bytes_limit
        sends: list[Awaitable[None]] = []
        for addr, shards in by_worker.items():
            batch: list[tuple[PartitionId, PartitionId, Shard]] = []
            size = 0
            for shard in shards:
                if batch and size + len(shard[2]) > limit:
                    sends.append(self.context.send(addr, batch))
                    batch, size = [], 0
                batch.append(shard)
                size += len(shard[2])
            if batch:
                sends.append(self.context.send(addr, batch))
        await asyncio.gather(*sends)

    def get_output_partition(self, output_partition: PartitionId) -> Any:
        """The output partition built from the shards received here."""
        shards = self.context.store.read(output_partition)
        return self.assemble(output_partition, shards)


class P2PBarrierTask(Task):
    """The barrier task of a P2P shuffle: a Task that carries the shuffle's spec.

    The spec travels inside the pickled task, and alongside the graph as a
    short description the client makes for the scheduler (see
    :func:`distributed.shuffle.describe_shuffles`).  It is never fused with
    other tasks: the scheduler must see its key.
    """

    spec: ShuffleSpec
    __slots__ = ("spec",)

    def __init__(self, key: Any, func: Callable[..., Any], /, *args: Any, spec: ShuffleSpec, **kwargs: Any) -> None:
        self.spec = spec
        super().__init__(key, func, *args, **kwargs)

    @property
    def block_fusion(self) -> bool:
        """Always True: the barrier stays a task of its own."""
        return True

    def copy(self) -> P2PBarrierTask:
        """A copy of this task, spec included."""
        return type(self)(self.key, self.func, *self.args, spec=self.spec, **self.kwargs)


class WorkerShuffles(Protocol):
    """What the task bodies below use of their worker's shuffle extension (``Worker.shuffle``)."""

    def add_partition(self, shuffle_id: ShuffleId, data: Any, input_partition: PartitionId) -> int:
        """Send the shards of one input partition; return the run id."""

    def barrier(self, shuffle_id: ShuffleId, run_ids: Sequence[int]) -> int:
        """All transfers are done; return the run id."""

    def get_output_partition(self, shuffle_id: ShuffleId, run_id: int, partition: Any) -> Any:
        """One output partition of run ``run_id``."""


def _extension() -> WorkerShuffles:
    """The shuffle extension of the worker running this task (the worker sits above this module)."""
    extension: WorkerShuffles | None = getattr(current_worker(), "shuffle", None)
    if extension is None:
        raise RuntimeError("P2P shuffle tasks run only on a worker")
    return extension


def transfer_partition(shuffle_id: ShuffleId, data: Any, input_partition: PartitionId) -> int:
    """Body of a transfer task: send ``data``'s shards to their workers; return the run id.

    Called in a task on a worker.  Raises :class:`~distributed.Reschedule`
    when the run it joined was restarted meanwhile (the task then runs again).
    """
    ext = _extension()
    return int(ext.add_partition(ShuffleId(shuffle_id), data, input_partition))


def unpack_partition(shuffle_id: ShuffleId, output_partition: PartitionId, run_id: int) -> Any:
    """Body of an unpack task: the output partition built from the shards received here in run ``run_id``."""
    ext = _extension()
    return ext.get_output_partition(ShuffleId(shuffle_id), run_id, output_partition)


def p2p_barrier(shuffle_id: ShuffleId, *run_ids: int) -> int:
    """Body of the barrier task: all transfers are done; return the run id they share.

    Raises :class:`~distributed.Reschedule` when transfers ran in different
    runs (the shuffle was restarted meanwhile).
    """
    ext = _extension()
    return int(ext.barrier(ShuffleId(shuffle_id), run_ids))


def describe_shuffles(graph: Mapping[Any, GraphNode]) -> list[m.ShuffleDescription]:
    """What the scheduler must know of the P2P shuffles in ``graph`` (empty when there are none).

    The client calls this on the graph it submits: it holds the task
    objects, so it can read each barrier's spec, which the scheduler never
    unpickles.  The spec travels pickled, for the workers.
    """
    barriers = {key: node for key, node in graph.items() if isinstance(node, P2PBarrierTask)}
    if not barriers:
        return []
    positions: dict[Any, dict[PartitionId, int]] = {}
    outputs: dict[Any, list[list[Any]]] = {}
    for bkey, barrier in barriers.items():
        positions[bkey] = {p: i for i, p in enumerate(barrier.spec.output_partitions())}
        outputs[bkey] = []
    for key, node in graph.items():
        deps = node.dependencies
        if not deps:
            continue
        for bkey, barrier in barriers.items():
            if bkey in deps:
                part = barrier.spec.output_partition_of(node)
                if part is not None:
                    outputs[bkey].append([_wire_key(key), positions[bkey][part]])
    return [
        m.ShuffleDescription(
            id=str(barrier.spec.id),
            barrier=key,
            npartitions=len(positions[key]),
            outputs=outputs[key],
            disk=bool(barrier.spec.disk),
            assignment=barrier.spec.output_assignment,
            spec=dumps(barrier.spec),
        )
        for key, barrier in barriers.items()
    ]


def _wire_key(key: Any) -> Any:
    return [_wire_key(k) for k in key] if isinstance(key, tuple) else key
