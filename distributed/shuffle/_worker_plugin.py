"""A worker's side of P2P shuffles: its runs, the shards it sends and receives.

Every worker has one :class:`ShuffleWorkerExtension` (``worker.shuffle``).  It
learns of a shuffle run from the scheduler (when one of its transfer tasks
starts, or when shards of a run it does not know yet arrive), makes the run
from the spec the scheduler passes on, sends shards to peers with a bound on
concurrent messages (``distributed.p2p.comm.concurrency``) and on bytes in
flight (``distributed.p2p.comm.buffer``), and stores the shards it receives
(see :class:`~distributed.shuffle._disk.ShardStore`).

Shards of a run older than the one a worker knows are refused: a restarted
shuffle never mixes shards of two attempts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import dask.config
from dask.utils import parse_bytes

from distributed.comm import CommClosedError
from distributed.core import Route, Status
from distributed.exceptions import Reschedule
from distributed.protocol import messages as m
from distributed.protocol.pickle import loads
from distributed.protocol.serialize import Serialize, unwrap
from distributed.shuffle._core import (
    PartitionId,
    RunContext,
    Shard,
    ShuffleId,
    ShuffleRun,
    ShuffleSpec,
    as_partition_id,
)
from distributed.shuffle._disk import ShardStore
from distributed.shuffle._exceptions import ShuffleRunRefused
from distributed.utils_comm import retry, retry_settings

if TYPE_CHECKING:
    from distributed.worker import Worker

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["ShuffleWorkerExtension"]


class _ByteBudget:
    """At most ``limit`` bytes in flight (one message larger than it may go alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._cond: asyncio.Condition | None = None

    async def acquire(self, n: int) -> None:
        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            await self._cond.wait_for(lambda: self.used == 0 or self.used + n <= self.limit)
            self.used += n

    async def release(self, n: int) -> None:
        assert self._cond is not None
        async with self._cond:
            self.used -= n
            self._cond.notify_all()


class ShuffleWorkerExtension:
    """The shuffle runs of one worker.

    Transfer, barrier and unpack tasks reach it through ``get_worker().shuffle``
    (see :func:`~distributed.shuffle._core.transfer_partition`).
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        #: The current run of each shuffle this worker takes part in.
        self.runs: dict[ShuffleId, ShuffleRun] = {}
        #: The newest run of each shuffle dropped here: shards of it or older are refused.
        self.forgotten: dict[ShuffleId, int] = {}
        self._creating: dict[ShuffleId, asyncio.Future[ShuffleRun]] = {}
        self.comm_buffer = parse_bytes(dask.config.get("distributed.p2p.comm.buffer"))
        self.concurrency = int(dask.config.get("distributed.p2p.comm.concurrency"))
        self.message_bytes_limit = parse_bytes(dask.config.get("distributed.p2p.comm.message-bytes-limit"))
        self.storage_buffer = parse_bytes(dask.config.get("distributed.p2p.storage.buffer"))
        self.disk_allowed = bool(dask.config.get("distributed.p2p.storage.disk"))
        #: How sending shards to a peer is retried (``distributed.p2p.comm.retry.*``).
        self.comm_retry = retry_settings("distributed.p2p.comm.retry")
        threads = dask.config.get("distributed.p2p.threads")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise ValueError(
                f"distributed.p2p.threads must be a number of threads (1 or more) or null, got {threads!r}"
            )
        #: Threads that write shards to disk and read them back (``distributed.p2p.threads``; null: one per
        #: thread of the worker).
        self.threads = int(threads) if threads is not None else max(1, worker.nthreads)
        self.executor = ThreadPoolExecutor(self.threads, thread_name_prefix="Dask-P2P")
        if self.concurrency < 1:
            raise ValueError(f"distributed.p2p.comm.concurrency must be at least 1, got {self.concurrency}")
        self._budget = _ByteBudget(self.comm_buffer)
        self._slots: asyncio.Semaphore | None = None
        #: Totals over this worker's runs (closed ones included).
        self.bytes_sent = 0
        self.bytes_received = 0
        self.disk_bytes_written = 0
        self.files_written = 0
        self._closed_disk_bytes = 0
        self._closed_files = 0
        self._closed_peak = 0

    def routes(self) -> dict[str, Route[Any]]:
        """The requests the worker answers for shuffles."""
        return {
            "shuffle_receive": Route(m.ShuffleReceive, self.handle_receive),
            "shuffle_inputs_done": Route(m.ShuffleInputsDone, self.handle_inputs_done),
            "shuffle_forget": Route(m.ShuffleForget, self.handle_forget),
        }

    # -- called from task threads ------------------------------------------------------
    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.worker.loop
        assert loop is not None
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def add_partition(self, shuffle_id: ShuffleId, data: Any, input_partition: PartitionId) -> int:
        """Send the shards of one input partition (in a transfer task); return the run id.

        Raises :class:`~distributed.Reschedule` when the run is refused or
        dropped before every shard is stored, or a receiver is gone: the
        scheduler restarts the shuffle, and the task runs again in the new run.
        """
        run: ShuffleRun | None = None
        try:
            run = self._sync(self._get_or_create(shuffle_id))
            run_id = run.add_partition(data, input_partition)
            if self.forgotten.get(shuffle_id, 0) >= run_id:
                # Dropped while we sent: the scheduler has moved on.  (Should
                # this check pass and the drop come just after, the barrier
                # catches the stale run id and the scheduler restarts the shuffle.)
                raise ShuffleRunRefused(f"Shuffle {shuffle_id!r} run {run_id} was dropped during the transfer")
            return run_id
        except (ShuffleRunRefused, CommClosedError, OSError) as e:
            logger.info(
                "Shuffle %s run %s: transfer of %r is rescheduled: %r",
                shuffle_id,
                None if run is None else run.run_id,
                input_partition,
                e,
            )
            raise Reschedule() from e

    def barrier(self, shuffle_id: ShuffleId, run_ids: Sequence[int]) -> int:
        """All transfers are done (in the barrier task): tell the participants; return the run id.

        The scheduler checks the run ids against its current run and, when a
        transfer reported another one, restarts the shuffle (see
        ``ShuffleSchedulerExtension.handle_barrier``); this task then gives way.
        """
        ids = sorted(set(run_ids))
        try:
            self._sync(
                self.worker.rpc.call(
                    self.worker.scheduler_addr,
                    m.ShuffleBarrierRequest(
                        op="shuffle_barrier", id=shuffle_id, run_ids=ids, worker=self.worker.address
                    ),
                )
            )
        except (ShuffleRunRefused, CommClosedError, OSError) as e:
            logger.info("Shuffle %s runs %s: barrier is rescheduled: %r", shuffle_id, ids, e)
            raise Reschedule() from e
        (run_id,) = ids
        return run_id

    def get_output_partition(self, shuffle_id: ShuffleId, run_id: int, partition: Any) -> Any:
        """One output partition of run ``run_id`` (in an unpack task)."""
        part = as_partition_id(partition)
        run = self.runs.get(shuffle_id)
        if run is None or run.run_id < run_id:
            raise RuntimeError(
                f"Shuffle {shuffle_id!r} run {run_id}: this worker ({self.worker.address}) holds no data of it"
            )
        if run.run_id > run_id:
            raise Reschedule()  # a newer run started: this task will be released anyway
        if run.worker_for.get(part) != self.worker.address:
            raise RuntimeError(
                f"Shuffle {shuffle_id!r} run {run_id}: output partition {part!r} belongs to "
                f"{run.worker_for.get(part)}, not to {self.worker.address}"
            )
        return run.get_output_partition(part)

    # -- runs ---------------------------------------------------------------------------
    async def _get_or_create(self, shuffle_id: ShuffleId) -> ShuffleRun:
        pending = self._creating.get(shuffle_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[ShuffleRun] = asyncio.get_running_loop().create_future()
        self._creating[shuffle_id] = fut
        try:
            info: m.ShuffleRunInfo = await self.worker.rpc.call(
                self.worker.scheduler_addr,
                m.ShuffleGetOrCreate(op="shuffle_get_or_create", id=shuffle_id, worker=self.worker.address),
            )
            run = self._run_from(info)
            fut.set_result(run)
            return run
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: other waiters get it, nobody else must
            raise
        finally:
            del self._creating[shuffle_id]

    def _run_from(self, info: m.ShuffleRunInfo) -> ShuffleRun:
        """The run ``info`` describes: the one here if it is current, else a new one (the old one dropped)."""
        shuffle_id = ShuffleId(info["id"])
        run_id = info["run_id"]
        current = self.runs.get(shuffle_id)
        if current is not None and current.run_id == run_id:
            return current
        if self.forgotten.get(shuffle_id, 0) >= run_id or (current is not None and current.run_id > run_id):
            raise ShuffleRunRefused(f"Shuffle {shuffle_id!r} run {run_id} is stale")
        spec = loads(info["spec"])
        if not isinstance(spec, ShuffleSpec):
            raise TypeError(f"Shuffle {shuffle_id!r}: the spec is a {type(spec).__name__}, not a ShuffleSpec")
        partitions = list(spec.output_partitions())
        if len(partitions) != len(info["worker_for"]):
            raise ValueError(
                f"Shuffle {shuffle_id!r}: {len(info['worker_for'])} workers for {len(partitions)} partitions"
            )
        worker_for = dict(zip(partitions, info["worker_for"]))
        directory = os.path.join(self.worker.local_directory, "p2p", f"{shuffle_id}-{run_id}")
        store = ShardStore(
            directory, self.storage_buffer, spec.disk and self.disk_allowed, partitions, executor=self.executor
        )
        loop = self.worker.loop
        assert loop is not None
        context = RunContext(
            id=shuffle_id,
            run_id=run_id,
            worker_for=worker_for,
            address=self.worker.address,
            loop=loop,
            send=lambda addr, shards: self._send(shuffle_id, run_id, addr, shards),
            store=store,
            message_bytes_limit=self.message_bytes_limit,
        )
        run = spec.create_run(context)
        if current is not None:
            self._drop(current)
        self.runs[shuffle_id] = run
        return run

    async def _current_run(self, shuffle_id: ShuffleId, run_id: int) -> ShuffleRun:
        """Run ``run_id`` of a shuffle, learnt from the scheduler if need be; refused when stale."""
        run = self.runs.get(shuffle_id)
        if run is not None and run.run_id == run_id:
            return run
        if (run is not None and run.run_id > run_id) or self.forgotten.get(shuffle_id, 0) >= run_id:
            raise ShuffleRunRefused(f"Shuffle {shuffle_id!r} run {run_id} is stale on {self.worker.address}")
        pending = self._creating.get(shuffle_id)
        if pending is not None:
            await asyncio.shield(pending)
            return await self._current_run(shuffle_id, run_id)
        info: m.ShuffleRunInfo | None = await self.worker.rpc.call(
            self.worker.scheduler_addr, m.ShuffleGet(op="shuffle_get", id=shuffle_id)
        )
        if info is None or info["run_id"] != run_id:
            raise ShuffleRunRefused(f"Shuffle {shuffle_id!r} run {run_id} is not the current run")
        return self._run_from(info)

    def _drop(self, run: ShuffleRun) -> None:
        store = run.context.store
        self._closed_disk_bytes += store.disk_bytes_written
        self._closed_files += len(store.files_written)
        self._closed_peak = max(self._closed_peak, store.peak_memory_bytes)
        self.bytes_received += store.bytes_received
        store.close()
        if self.runs.get(run.id) is run:
            del self.runs[run.id]
        self.forgotten[run.id] = max(self.forgotten.get(run.id, 0), run.run_id)

    def stats(self) -> dict[str, int]:
        """Bytes sent, received and written to disk, files written, and the most bytes of shards held in memory.

        Totals over every run so far; the peak is that of the run that held most.
        """
        live = [r.context.store for r in self.runs.values()]
        return {
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received + sum(s.bytes_received for s in live),
            "disk_bytes_written": self._closed_disk_bytes + sum(s.disk_bytes_written for s in live),
            "files_written": self._closed_files + sum(len(s.files_written) for s in live),
            "peak_memory_bytes": max([self._closed_peak, *(s.peak_memory_bytes for s in live)]),
        }

    def close(self) -> None:
        """Drop every run (the worker closes)."""
        for run in list(self.runs.values()):
            self._drop(run)
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- sending ---------------------------------------------------------------------------
    async def _send(
        self, shuffle_id: ShuffleId, run_id: int, address: str, shards: list[tuple[PartitionId, PartitionId, Shard]]
    ) -> None:
        nbytes = sum(len(s[2]) for s in shards)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        await self._budget.acquire(nbytes)
        try:
            async with self._slots:
                if address == self.worker.address:
                    run = await self._current_run(shuffle_id, run_id)
                    await run.context.store.put(shards)
                else:
                    request = m.ShuffleReceive(
                        op="shuffle_receive",
                        id=shuffle_id,
                        run_id=run_id,
                        shards=[[inp, out, _out_of_band(payload)] for inp, out, payload in shards],
                    )
                    await retry(
                        lambda: self.worker.rpc.call(address, request),
                        *self.comm_retry,
                        name=f"shuffle {shuffle_id} run {run_id}: sending shards to {address}",
                        abandon=lambda: self._dropped(shuffle_id, run_id),
                    )
            self.bytes_sent += nbytes
        finally:
            await self._budget.release(nbytes)

    def _dropped(self, shuffle_id: ShuffleId, run_id: int) -> ShuffleRunRefused | None:
        """Why sending for run ``run_id`` is pointless now (dropped here, or the worker closes), else None."""
        if self.worker.status in (Status.closing, Status.closed):
            return ShuffleRunRefused(f"Shuffle {shuffle_id!r} run {run_id}: the worker is closing")
        run = self.runs.get(shuffle_id)
        if run is None or run.run_id != run_id:
            return ShuffleRunRefused(f"Shuffle {shuffle_id!r} run {run_id} was dropped while its shards travelled")
        return None

    # -- request handlers --------------------------------------------------------------------
    async def handle_receive(self, comm: Any, msg: m.ShuffleReceive) -> None:
        """Store shards sent by a peer; answer once they are stored (memory within its limit)."""
        run = await self._current_run(ShuffleId(msg["id"]), msg["run_id"])
        shards = [(as_partition_id(s[0]), as_partition_id(s[1]), _received(s[2])) for s in msg["shards"]]
        await run.context.store.put(shards)

    async def handle_inputs_done(self, comm: Any, msg: m.ShuffleInputsDone) -> None:
        """No more shards will come for this run: make sure it exists here (it may have received none)."""
        run = await self._current_run(ShuffleId(msg["id"]), msg["run_id"])
        await run.context.store.flush_pending()

    def handle_forget(self, comm: Any, msg: m.ShuffleForget) -> None:
        """Drop a shuffle's runs up to ``run_id``.

        It comes by RPC, in no order with the task stream: a forget that
        arrives after this worker joined a newer run leaves that run alone
        (runs are dropped by id, and ids only grow).
        """
        shuffle_id = ShuffleId(msg["id"])
        run = self.runs.get(shuffle_id)
        if run is not None and run.run_id <= msg["run_id"]:
            self._drop(run)
        self.forgotten[shuffle_id] = max(self.forgotten.get(shuffle_id, 0), msg["run_id"])


#: Shards at least this large travel as frames of their own rather than inside the message.
OUT_OF_BAND_BYTES = 64 * 1024


def _out_of_band(payload: Shard) -> Shard | Serialize:
    """A shard as sent: a large one as an out-of-band pickle buffer, so its bytes are never copied into the message.

    The receiver gets a read-only view of the frame that carried it.
    """
    if len(payload) >= OUT_OF_BAND_BYTES:
        return Serialize(pickle.PickleBuffer(payload))
    return payload


def _received(value: Any) -> Shard:
    """A shard's bytes as received: a large one is a view of the frame that carried it (no copy)."""
    value = unwrap(value)
    if isinstance(value, pickle.PickleBuffer):  # in process, nothing was framed
        return value.raw()
    if isinstance(value, (bytes, memoryview)):
        return value
    return bytes(value)
