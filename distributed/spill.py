"""A worker's data store that moves least-recently-used values to disk.

:class:`SpillBuffer` is a :class:`zict.Buffer`: values live in memory until the
bytes they hold (by :func:`dask.sizeof.sizeof`) pass ``target``; then the least
recently used go to files under a directory, and come back transparently when
read.  The worker's memory monitor also calls :meth:`SpillBuffer.evict` when the
process as a whole uses too much memory (``distributed.worker.memory.spill``).

A value that cannot be pickled stays in memory (logged once per buffer) and
counts as managed memory.  The worker uses the buffer from its event loop only.

A write that fails with :class:`OSError` (a full disk, ``ENOSPC``; a read-only
or vanished directory) leaves the value in memory, removes what was written of
it, and turns spilling off for the rest of the buffer's life
(:attr:`SpillBuffer.disk_error`, logged once): the disk will not get better by
trying again for every result, and each try would cost a pickling.  Values
spilled before stay readable.  The worker's memory monitor then pauses the
worker by its process memory instead of spilling.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import zict
from dask.sizeof import sizeof

from distributed.protocol.compression import Codec
from distributed.protocol.messages import Key
from distributed.protocol.serialize import SerializationError, deserialize_bytes, serialize_bytelist

__all__ = ["SpillActivity", "SpillBuffer", "SpilledSize"]

logger = logging.getLogger(__name__)


def _sizeof(value: Any) -> int:
    """The bytes ``value`` holds by :func:`dask.sizeof.sizeof`, at least 1 (a weight of 0 would never spill)."""
    try:
        return max(int(sizeof(value)), 1)
    except Exception:  # a user object whose __sizeof__ fails: count it small, still managed
        return 1


def _weight(key: Key, value: Any) -> float:
    return float(_sizeof(value))


#: The first byte of a spill file whose value is not compressed (compressed ones start with their codec's tag).
_RAW = b"\x00"


def _dump(value: Any, codec: Codec | None) -> list[bytes | bytearray | memoryview]:
    """Serialise with the default families (a type registered on ``dask_serialize`` as its own frames,
    others pickled with buffers out of band) into frames that read back when joined, after a one-byte tag:
    the codec that compressed the rest, if any."""
    frames = serialize_bytelist(value, on_error="raise")
    if codec is None:
        return [_RAW, *frames]
    return [codec.tag, codec.compress(b"".join(frames))]


def _load(blob: bytearray | memoryview, codec: Codec | None) -> Any:
    """Read back what :func:`_dump` wrote with ``codec`` (the store's own: it wrote every file it reads)."""
    view = memoryview(blob)
    tag = bytes(view[:1])
    if tag == _RAW:
        return deserialize_bytes(view[1:])
    if codec is None or codec.tag != tag:
        raise ValueError(f"A spill file tagged {tag!r}, not written by this store's codec ({codec})")
    return deserialize_bytes(codec.decompress(bytes(view[1:])))


def _nothing() -> None:
    """No growth callback set."""


class SpilledSize:
    """Bytes of spilled values: their size in memory (by sizeof) and on disk."""

    __slots__ = ("disk", "memory")

    def __init__(self, memory: int = 0, disk: int = 0) -> None:
        self.memory = memory
        self.disk = disk


class SpillActivity:
    """Disk accesses of a spill buffer since it was made: values written and read, and their bytes on disk."""

    __slots__ = ("write_count", "write_bytes", "read_count", "read_bytes")

    def __init__(self) -> None:
        self.write_count = 0
        self.write_bytes = 0
        self.read_count = 0
        self.read_bytes = 0


class _Unpicklable(Exception):
    """Raised by the disk store for a value it cannot write; the value stays in memory."""


class _NoRoom(Exception):
    """Raised by the disk store when a value would take the spilled bytes past ``max-spill``; it stays in memory."""


class _WriteFailed(Exception):
    """Raised by the disk store when writing a value failed with an OSError (its cause); the value stays in memory."""


class _DiskStore(MutableMapping[Key, Any]):
    """Values pickled to one file each under ``directory``, with their sizes counted.

    ``weights`` is the in-memory mapping's weights by key: a value being spilled
    is still counted there, so its size in memory is read rather than measured again.
    """

    def __init__(
        self, directory: str, weights: dict[Key, float], max_bytes: int | None = None, codec: Codec | None = None
    ) -> None:
        self.directory = directory
        #: Bytes the spill files may take in all; None: no limit.
        self.max_bytes = max_bytes
        #: Compresses spilled values; None: stored as serialised.
        self.codec = codec
        os.makedirs(directory, exist_ok=True)
        self.files = zict.File(directory)
        self.weights = weights
        #: File name of each key held.
        self.names: dict[Key, str] = {}
        #: ``(bytes in memory by sizeof, bytes on disk)`` of each key held.
        self.sizes: dict[Key, tuple[int, int]] = {}
        self._counter = 0
        self.total = SpilledSize()
        #: Values written and read back since the store was made, and their bytes on disk.
        self.activity = SpillActivity()

    def __setitem__(self, key: Key, value: Any) -> None:
        try:
            frames = _dump(value, self.codec)
        except SerializationError as e:
            raise _Unpicklable(key) from e
        if key in self.names:
            del self[key]
        disk = sum(f.nbytes if isinstance(f, memoryview) else len(f) for f in frames)
        if self.max_bytes is not None and self.total.disk + disk > self.max_bytes:
            raise _NoRoom(key)
        self._counter += 1
        name = str(self._counter)
        try:
            self.files[name] = frames
        except OSError as e:
            self._remove_partial(name)
            raise _WriteFailed(key) from e
        weight = self.weights.get(key)
        mem = int(weight) if weight is not None else _sizeof(value)
        self.names[key] = name
        self.sizes[key] = (mem, disk)
        self.total.memory += mem
        self.total.disk += disk
        self.activity.write_count += 1
        self.activity.write_bytes += disk

    def _remove_partial(self, name: str) -> None:
        """Remove what a failed write left of ``name``: on a full disk its bytes are the room others need."""
        # zict.File names the file after the key plus a suffix of its own and
        # records it only once written: find it by the key's part (names are unique counters).
        prefix = name + "#"
        try:
            with os.scandir(self.directory) as entries:
                partial = [e.path for e in entries if e.name.startswith(prefix)]
        except OSError:
            return
        for path in partial:
            try:
                os.remove(path)
            except OSError:
                pass

    def __getitem__(self, key: Key) -> Any:
        value = _load(self.files[self.names[key]], self.codec)
        self.activity.read_count += 1
        self.activity.read_bytes += self.sizes[key][1]
        return value

    def __delitem__(self, key: Key) -> None:
        name = self.names.pop(key)
        mem, disk = self.sizes.pop(key)
        self.total.memory -= mem
        self.total.disk -= disk
        try:
            del self.files[name]
        except OSError:
            # A read-only or failing disk: the key is gone from the books all
            # the same (a value read back lives in memory now); the file goes with the directory.
            logger.debug("Could not remove the spill file of %r", key, exc_info=True)

    def __contains__(self, key: object) -> bool:
        return key in self.names

    def __iter__(self) -> Iterator[Key]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def clear(self) -> None:
        for name in self.names.values():
            del self.files[name]
        self.names.clear()
        self.sizes.clear()
        self.total.memory = self.total.disk = 0


class SpillBuffer(zict.Buffer[Key, Any]):
    """A worker's data: in memory up to ``target`` bytes, the least recently used on disk past it.

    Parameters
    ----------
    directory
        Where spilled values are written, one file each; removed by :meth:`close`.
    target
        Bytes of values (by sizeof) kept in memory before the least recently used
        are spilled; ``inf`` spills only when :meth:`evict` is called.
    max_spill
        Bytes the spill files may take in all (``distributed.worker.memory.max-spill``);
        past it values stay in memory (logged once).  None: no limit.
    codec
        Compresses spilled values (``distributed.worker.memory.spill-compression``).

    Notes
    -----
    Storing, reading and deleting run once per task on the worker's event loop
    (and only there), so they keep the in-memory :class:`zict.LRU`'s books
    (``d``, ``order``, ``weights``, ``total_weight``, ``heavy``) directly, the
    way its own methods do, without its lock and without the exception its
    ``set_noevict`` raises and catches for every new key.  Spilling and reading
    back go through zict (``LRU.evict``, ``Buffer.fast_to_slow``, ``zict.File``).
    """

    def __init__(self, directory: str, target: float, max_spill: int | None = None, codec: Codec | None = None) -> None:
        memory: dict[Key, Any] = {}
        weights: dict[Key, float] = {}
        self.disk = _DiskStore(directory, weights, max_spill, codec)
        super().__init__(fast=memory, slow=self.disk, n=target, weight=_weight)
        lru = self.fast
        lru.weights = weights  # the disk store reads a spilled value's size from here
        if lru.d is not memory or not isinstance(lru.order, zict.utils.InsertionSortedSet):
            raise ImportError(f"zict {zict.__version__}: its LRU keeps its books differently than SpillBuffer expects")
        # Bound once: these run for every task.
        self._memory = memory
        self._weights = weights
        self._order_add = lru.order.add
        self._order_remove = lru.order.remove
        self._heavy = lru.heavy
        self._spilled = self.disk.names
        self._warned = False
        self._warned_full = False
        #: The error of the write that turned spilling off; None while spilling works.
        self.disk_error: OSError | None = None
        # Bytes stored since ``_on_growth`` last ran (see watch_growth).
        self._grown = 0
        self._growth_step: float = math.inf
        self._on_growth: Callable[[], object] = _nothing

    def watch_growth(self, step: int, callback: Callable[[], object]) -> None:
        """Call ``callback`` each time values of ``step`` bytes in all have been stored since its last call.

        The worker's memory monitor measures process memory only every
        ``monitor-interval``; results of tens of MB can arrive faster than
        that, and the process would pass the nanny's terminate line before
        the next measurement.  This lets it measure as soon as enough arrived.
        """
        if step <= 0:
            raise ValueError(f"step={step!r} must be > 0 bytes")
        self._grown = 0
        self._growth_step = float(step)
        self._on_growth = callback

    def put(self, key: Key, value: Any, nbytes: int) -> None:
        """Store ``value`` whose size the caller already measured (``sizeof`` runs once per result).

        ``sizeof`` of a DataFrame or of nested containers is not cheap; the
        worker measures every result for the scheduler anyway.
        """
        if key in self._memory or key in self._spilled:
            del self[key]  # a new value for a key held: its old bytes no longer count
        weight = nbytes if nbytes > 1 else 1
        self._memory[key] = value
        self._order_add(key)
        self._weights[key] = weight
        lru = self.fast
        n = lru.n
        total = lru.total_weight = lru.total_weight + weight
        if weight > n:
            self._heavy.add(key)  # as zict's LRU does: spilled first
        if total + lru.offset > n:
            self.evict_until_below_target()
        grown = self._grown + weight
        if grown >= self._growth_step:
            self._grown = 0
            self._on_growth()
        else:
            self._grown = grown

    def __setitem__(self, key: Key, value: Any) -> None:
        self.put(key, value, _sizeof(value))

    def __getitem__(self, key: Key) -> Any:
        try:
            value = self._memory[key]
        except KeyError:
            return self._read_back(key)
        # Most recently used: last in the LRU's order.
        self._order_remove(key)
        self._order_add(key)
        return value

    def _read_back(self, key: Key) -> Any:
        value = self.disk[key]  # KeyError when held nowhere
        weight = self.disk.sizes[key][0]
        if weight <= self.fast.n:  # else it would be spilled again at once: leave it on disk
            del self.disk[key]
            self.put(key, value, weight)
        return value

    def __delitem__(self, key: Key) -> None:
        memory = self._memory
        if key in memory:
            del memory[key]
            self._order_remove(key)
            heavy = self._heavy
            if heavy:
                heavy.discard(key)
            self.fast.total_weight -= self._weights.pop(key)
        else:
            del self.disk[key]

    def __contains__(self, key: object) -> bool:
        return key in self._memory or key in self._spilled

    def __len__(self) -> int:
        return len(self._memory) + len(self._spilled)

    def clear(self) -> None:
        """Drop every value, in memory and spilled (without reading spilled ones back)."""
        lru = self.fast
        self._memory.clear()
        lru.order.clear()
        self._heavy.clear()
        self._weights.clear()
        lru.total_weight = 0
        self.disk.clear()

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

    @property
    def activity(self) -> SpillActivity:
        """Values spilled and read back from disk so far, with their bytes on disk."""
        return self.disk.activity

    def evict_until_below_target(self, n: float | None = None) -> None:
        """Spill least-recently-used values until the in-memory bytes are at most ``n`` (default: target)."""
        limit = self.fast.n if n is None else n
        attempts = len(self._memory)
        while self.fast.total_weight + self.fast.offset > limit and attempts > 0:
            attempts -= 1
            if self.evict() < 0:
                return

    def evict(self) -> int:
        """Spill the least recently used value that can be pickled.

        Returns
        -------
        Its weight in bytes; 0 if the value tried could not be pickled (it stays,
        now as most recently used); -1 when nothing is left in memory, or when
        spilling is off after a disk error (:attr:`disk_error`).
        """
        if not self._memory or self.disk_error is not None:
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
            self[key]  # touch it: the next eviction tries other keys first
            return 0
        except _NoRoom as e:
            if not self._warned_full:
                self._warned_full = True
                logger.warning(
                    "Spill files reached max-spill (%d bytes) at %r; values stay in memory until spilled ones go",
                    self.disk.max_bytes,
                    e.args[0],
                )
            return -1
        except _WriteFailed as e:
            # zict's LRU kept the value in memory: nothing is lost, only the room on disk.
            error = e.__cause__
            self.disk_error = error if isinstance(error, OSError) else OSError(str(error))
            logger.error(
                "Spilling %r to %s failed (%s); spilling to disk is now off for this worker: "
                "results stay in memory, and the worker pauses when its memory fills",
                e.args[0],
                self.disk.directory,
                self.disk_error,
            )
            return -1
        except KeyError:
            return -1
        return int(weight)

    def close(self) -> None:
        """Remove the spill directory (values in memory stay; spilled ones can no longer be read)."""
        shutil.rmtree(self.disk.directory, ignore_errors=True)
