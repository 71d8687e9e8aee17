"""A worker's data store that moves least-recently-used values to disk.

:class:`SpillBuffer` is a :class:`zict.Buffer`: values live in memory until the
bytes they hold (by :func:`dask.sizeof.sizeof`) pass ``target``; then the least
recently used go to files under a directory, and come back transparently when
read.  The worker's memory monitor also calls :meth:`SpillBuffer.evict` when the
process as a whole uses too much memory (``distributed.worker.memory.spill``).

A value that cannot be pickled stays in memory (logged once per buffer) and
counts as managed memory.  The worker uses the buffer from its event loop only.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import struct
from collections.abc import Iterator, MutableMapping
from typing import Any

import zict
from dask.sizeof import sizeof

from distributed.protocol.messages import Key
from distributed.protocol.serialize import SerializationError, pickle_dumps, pickle_loads

__all__ = ["SpillBuffer", "SpilledSize"]

logger = logging.getLogger(__name__)

_LEN = struct.Struct("<Q")


def _weight(key: Key, value: Any) -> float:
    try:
        return float(max(int(sizeof(value)), 1))
    except Exception:  # a user object whose __sizeof__ fails: count it small, still managed
        return 1.0


def _dump(value: Any) -> list[bytes | bytearray | memoryview]:
    """Pickle (protocol 5, buffers out of band) into frames prefixed by their lengths."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle_dumps(value, buffer_callback=buffers.append)
    frames: list[bytes | bytearray | memoryview] = [payload]
    for b in buffers:
        try:
            frames.append(b.raw())
        except BufferError:  # not contiguous
            frames.append(memoryview(bytes(b)))
    lengths = [f.nbytes if isinstance(f, memoryview) else len(f) for f in frames]
    header = _LEN.pack(len(frames)) + b"".join(_LEN.pack(n) for n in lengths)
    return [header, *frames]


def _load(blob: bytearray | memoryview) -> Any:
    view = memoryview(blob)
    (n,) = _LEN.unpack_from(view, 0)
    lengths = [_LEN.unpack_from(view, _LEN.size * (i + 1))[0] for i in range(n)]
    pos = _LEN.size * (n + 1)
    frames = []
    for length in lengths:
        frames.append(view[pos : pos + length])
        pos += length
    return pickle_loads(frames[0], frames[1:])


class SpilledSize:
    """Bytes of spilled values: their size in memory (by sizeof) and on disk."""

    __slots__ = ("disk", "memory")

    def __init__(self, memory: int = 0, disk: int = 0) -> None:
        self.memory = memory
        self.disk = disk


class _Unpicklable(Exception):
    """Raised by the disk store for a value it cannot write; the value stays in memory."""


class _DiskStore(MutableMapping[Key, Any]):
    """Values pickled to one file each under ``directory``, with their sizes counted."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.files = zict.File(directory)
        self._names: dict[Key, str] = {}
        self._sizes: dict[Key, tuple[int, int]] = {}
        self._counter = 0
        self.total = SpilledSize()

    def __setitem__(self, key: Key, value: Any) -> None:
        try:
            frames = _dump(value)
        except SerializationError as e:
            raise _Unpicklable(key) from e
        if key in self._names:
            del self[key]
        self._counter += 1
        name = str(self._counter)
        self.files[name] = frames
        disk = sum(f.nbytes if isinstance(f, memoryview) else len(f) for f in frames)
        mem = int(_weight(key, value))
        self._names[key] = name
        self._sizes[key] = (mem, disk)
        self.total.memory += mem
        self.total.disk += disk

    def __getitem__(self, key: Key) -> Any:
        return _load(self.files[self._names[key]])

    def __delitem__(self, key: Key) -> None:
        name = self._names.pop(key)
        mem, disk = self._sizes.pop(key)
        self.total.memory -= mem
        self.total.disk -= disk
        del self.files[name]

    def __contains__(self, key: object) -> bool:
        return key in self._names

    def __iter__(self) -> Iterator[Key]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class SpillBuffer(zict.Buffer[Key, Any]):
    """A worker's data: in memory up to ``target`` bytes, the least recently used on disk past it.

    Parameters
    ----------
    directory
        Where spilled values are written, one file each; removed by :meth:`close`.
    target
        Bytes of values (by sizeof) kept in memory before the least recently used
        are spilled; ``inf`` spills only when :meth:`evict` is called.
    """

    def __init__(self, directory: str, target: float) -> None:
        self.disk = _DiskStore(directory)
        #: The size of the value :meth:`put` is storing, known to its caller.
        self._size_hint: tuple[Key, int] | None = None
        super().__init__(fast={}, slow=self.disk, n=target, weight=self._weigh)
        self._warned = False

    def _weigh(self, key: Key, value: Any) -> float:
        hint = self._size_hint
        if hint is not None and hint[0] is key:
            return float(max(hint[1], 1))
        return _weight(key, value)

    def put(self, key: Key, value: Any, nbytes: int) -> None:
        """Store ``value`` whose size the caller already measured (``sizeof`` runs once per result).

        ``sizeof`` of a DataFrame or of nested containers is not cheap; the
        worker measures every result for the scheduler anyway.
        """
        self._size_hint = (key, nbytes)
        try:
            self[key] = value
        finally:
            self._size_hint = None

    @property
    def directory(self) -> str:
        """The spill directory."""
        return self.disk.directory

    @property
    def memory_bytes(self) -> int:
        """Managed bytes in memory: values not spilled, by sizeof."""
        return int(self.fast.total_weight)

    @property
    def spilled(self) -> SpilledSize:
        """Bytes spilled to disk: their size in memory (by sizeof) and their size on disk."""
        return self.disk.total

    # set/get/delete are overridden to take zict's locks once rather than at every
    # layer: they run for every task result, from the worker's event loop only.
    def __setitem__(self, key: Key, value: Any) -> None:
        if key in self.disk:
            del self.disk[key]
        self.fast.set_noevict(key, value)
        if self.fast.total_weight > self.n:
            self.evict_until_below_target()

    def __delitem__(self, key: Key) -> None:
        if key in self.fast.d:
            del self.fast[key]
        else:
            del self.disk[key]

    def __getitem__(self, key: Key) -> Any:
        # The worker reads and writes from its event loop only, so no locking here.
        if key in self.fast.d:
            return self.fast[key]
        value = self.disk[key]
        if _weight(key, value) <= self.n:
            self.fast.set_noevict(key, value)
            del self.disk[key]
            self.evict_until_below_target()
        return value

    def evict_until_below_target(self, n: float | None = None) -> None:
        """Spill least-recently-used values until the in-memory bytes are at most ``n`` (default: target)."""
        limit = self.n if n is None else n
        attempts = len(self.fast)
        while self.fast.total_weight > limit and attempts > 0:
            attempts -= 1
            if self.evict() < 0:
                return

    def evict(self) -> int:
        """Spill the least recently used value that can be pickled.

        Returns
        -------
        Its weight in bytes; 0 if the value tried could not be pickled (it stays,
        now as most recently used); -1 when nothing is left in memory.
        """
        if not self.fast:
            return -1
        try:
            _, _, weight = self.fast.evict()
        except _Unpicklable as e:
            key: Key = e.args[0]
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Could not pickle %r to spill it to disk (%s); values that cannot be pickled stay in memory",
                    key,
                    e.__cause__,
                )
            self.fast[key]  # touch it: the next eviction tries other keys first
            return 0
        except KeyError:
            return -1
        return int(weight)

    def close(self) -> None:
        """Remove the spill directory (values in memory stay; spilled ones can no longer be read)."""
        shutil.rmtree(self.disk.directory, ignore_errors=True)
