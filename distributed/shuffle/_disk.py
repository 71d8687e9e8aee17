"""Where a worker keeps the shards it receives for one shuffle run: memory, then disk.

Shards are kept in memory up to a limit (``distributed.p2p.storage.buffer``);
past it, everything in memory is appended to one file per output partition in
the run's directory (when the shuffle allows disk).  A receiver waits for that
write before it acknowledges the shards, which is what makes senders wait for
a full receiver.

A shard is identified by (input partition, output partition): one sent twice
(a transfer task that ran again within the same run) is stored once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor

import msgpack

from distributed.shuffle._core import PartitionId, Shard, as_partition_id
from distributed.shuffle._exceptions import ShuffleRunRefused

__all__ = ["ShardStore"]

_HEADER = struct.Struct("!IQ")


class ShardStore:
    """The shards one worker received for one shuffle run.

    Parameters
    ----------
    directory
        Where spilled shards go (made when first needed, removed by :meth:`close`).
    memory_limit
        Bytes of shards kept in memory before spilling.
    disk
        Whether spilling is allowed (if not, everything stays in memory).
    partitions
        The output partitions (file names come from positions in it).
    """

    def __init__(
        self,
        directory: str,
        memory_limit: int,
        disk: bool,
        partitions: Sequence[PartitionId],
        executor: Executor | None = None,
    ) -> None:
        #: The threads that write to disk (None: the event loop's default ones).
        self.executor = executor
        self.directory = directory
        self.memory_limit = memory_limit
        self.disk = disk
        self._position = {p: i for i, p in enumerate(partitions)}
        self._memory: dict[PartitionId, dict[PartitionId, Shard]] = {}
        #: Shards being written to disk now: still read from here until the write is done.
        self._writing: dict[PartitionId, dict[PartitionId, Shard]] = {}
        #: File -> bytes of it that are completely written (readers stop there).
        self._committed: dict[str, int] = {}
        self._seen: set[tuple[PartitionId, PartitionId]] = set()
        self._lock = threading.Lock()
        self._spill_lock = asyncio.Lock()
        self._closed = False
        #: Bytes of shards in memory now, and the most there ever was.
        self.memory_bytes = 0
        self.peak_memory_bytes = 0
        #: Bytes written to disk in total, and the files written.
        self.disk_bytes_written = 0
        self.files_written: set[str] = set()
        #: Bytes received in total (duplicates not counted).
        self.bytes_received = 0

    async def put(self, shards: Iterable[tuple[PartitionId, PartitionId, Shard]]) -> None:
        """Keep ``shards`` ``(input, output, bytes)``; returns once memory is within the limit again."""
        with self._lock:
            if self._closed:
                # The run was dropped (restarted) while the shards travelled.
                raise ShuffleRunRefused(f"Shards arrived for a dropped shuffle run in {self.directory}")
            for inp, out, payload in shards:
                ident = (inp, out)
                if ident in self._seen:
                    continue
                self._seen.add(ident)
                self._memory.setdefault(out, {})[inp] = payload
                self.memory_bytes += len(payload)
                self.bytes_received += len(payload)
            self.peak_memory_bytes = max(self.peak_memory_bytes, self.memory_bytes)
            over = self.disk and self.memory_bytes > self.memory_limit
        if over:
            await self.flush()

    async def flush(self) -> None:
        """Write what is in memory to disk (if disk is allowed), after any write already under way."""
        async with self._spill_lock:  # one write at a time; those waiting for it wait here
            if not self.disk or not self._memory:
                return
            await asyncio.get_running_loop().run_in_executor(self.executor, self._spill)

    async def flush_pending(self) -> None:
        """Wait for a write to disk under way, if any."""
        async with self._spill_lock:
            pass

    def _spill(self) -> None:
        # The batch leaves memory for ``_writing`` under the lock; the write itself runs
        # without it, so shards keep arriving (on the event loop) while it goes on.
        with self._lock:
            if self._closed:
                return
            batch, self._memory = self._memory, {}
            self._writing = batch
        written = 0
        sizes: dict[str, int] = {}
        try:
            os.makedirs(self.directory, exist_ok=True)
            for out, by_input in batch.items():
                parts: list[Shard] = []
                for inp, payload in by_input.items():
                    ident = msgpack.packb(inp)
                    parts += (_HEADER.pack(len(ident), len(payload)), ident, payload)
                    written += len(payload)
                path = self._path(out)
                with open(path, "ab") as f:
                    f.writelines(parts)
                    sizes[path] = f.tell()
        except OSError:
            if not self._closed:
                raise
        with self._lock:
            self._writing = {}
            closed = self._closed
            if not closed:
                self._committed.update(sizes)
                self.files_written.update(sizes)
                self.memory_bytes -= written
                self.disk_bytes_written += written
        if closed:  # dropped while writing: what was written goes too
            shutil.rmtree(self.directory, ignore_errors=True)

    def _path(self, partition: PartitionId) -> str:
        return os.path.join(self.directory, f"{self._position[partition]}.shards")

    def read(self, partition: PartitionId) -> list[tuple[PartitionId, Shard]]:
        """The shards of ``partition`` ``(input, bytes)``, sorted by input partition.

        They stay here until the store is closed: an unpack task may run
        again (its output lost), and a self-join reads a partition twice.
        Memory stays bounded by the spill limit all the same.
        """
        with self._lock:
            found = dict(self._writing.get(partition, {}))
            found.update(self._memory.get(partition, {}))
            path = self._path(partition)
            committed = self._committed.get(path, 0)
        data = b""
        if committed:
            # Files only grow: the first ``committed`` bytes are complete whatever is written meanwhile.
            with open(path, "rb") as f:
                data = f.read(committed)
        # Shards are views of the file's bytes: no copy per shard.
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            n_ident, n_payload = _HEADER.unpack_from(view, offset)
            offset += _HEADER.size
            inp = as_partition_id(msgpack.unpackb(view[offset : offset + n_ident]))
            offset += n_ident
            found[inp] = view[offset : offset + n_payload]
            offset += n_payload
        return sorted(found.items(), key=lambda item: _order(item[0]))

    def close(self) -> None:
        """Drop every shard and remove the directory."""
        with self._lock:
            self._closed = True
            self._memory.clear()
            self.memory_bytes = 0
        shutil.rmtree(self.directory, ignore_errors=True)


def _order(p: PartitionId) -> tuple[int, ...]:
    return (p,) if isinstance(p, int) else p
