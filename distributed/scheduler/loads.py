"""The workers by load, so that the least loaded one is found without looking at every worker.

A worker's load is the number of tasks processing on it, less those that
seceded from its threads (``long_running``): what it can still take before
``worker-saturation`` says it is full depends on that and on its thread
count alone.  Placing a root task (queued or not) needs the worker with the
most room; looking at every worker for every task made the scheduler's cost
per task grow with the number of workers (1,000 workers: 1.7 ms per task).
:class:`WorkerLoads` keeps the workers of each thread count in buckets by
load, each bucket in the order its workers entered it, so the least loaded
one is at hand and a worker's load changes in O(1).  Workers that do not run
(paused, retiring) stay where they are and are passed over when looked for.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from distributed.core import Status

if TYPE_CHECKING:
    from distributed.scheduler.records import WorkerState

__all__ = ["WorkerLoads", "load_of"]


def load_of(ws: WorkerState) -> int:
    """Tasks processing on ``ws`` that hold one of its threads (those seceded do not)."""
    return len(ws.processing) - len(ws.long_running)


class _Buckets:
    """The workers of one thread count by load: load -> workers (insertion-ordered), and each worker's load.

    A bucket is an ``OrderedDict``, not a dict: workers leave a bucket from its
    front as they get work, and a dict keeps the slots of deleted entries until
    it is resized, so finding its first worker walked past every worker that
    left it since (with 10,000 workers, some microseconds per task placed).
    An ``OrderedDict`` finds its first entry through its links.
    """

    __slots__ = ("buckets", "loads", "low")

    def __init__(self) -> None:
        self.buckets: dict[int, OrderedDict[WorkerState, None]] = {}
        self.loads: dict[WorkerState, int] = {}
        #: At most the lowest load of a bucket (raised lazily to it when looked for).
        self.low = 0

    def put(self, ws: WorkerState, load: int) -> None:
        self.loads[ws] = load
        bucket = self.buckets.get(load)
        if bucket is None:
            bucket = self.buckets[load] = OrderedDict()
        bucket[ws] = None
        if load < self.low:
            self.low = load

    def take(self, ws: WorkerState) -> None:
        load = self.loads.pop(ws)
        bucket = self.buckets[load]
        del bucket[ws]
        if not bucket:
            del self.buckets[load]

    def least_loaded(self) -> WorkerState | None:
        """The running worker of lowest load (the first to get there among equals), or None."""
        if not self.loads:
            return None
        buckets = self.buckets
        while self.low not in buckets:
            self.low += 1
        for ws in buckets[self.low]:
            if ws.status == Status.running:
                return ws
        # The least loaded do not run (paused, retiring): the others, by load (rare).
        for load in sorted(buckets):
            for ws in buckets[load]:
                if ws.status == Status.running:
                    return ws
        return None


class WorkerLoads:
    """The scheduler's workers by load (:func:`load_of`), apart by thread count.

    The scheduler calls :meth:`add` and :meth:`discard` as workers come and
    go, and :meth:`update` after each change of a worker's ``processing`` or
    ``long_running``.
    """

    __slots__ = ("_by_threads",)

    def __init__(self) -> None:
        self._by_threads: dict[int, _Buckets] = {}

    def add(self, ws: WorkerState) -> None:
        """Index a worker that joined."""
        group = self._by_threads.get(ws.nthreads)
        if group is None:
            group = self._by_threads[ws.nthreads] = _Buckets()
        group.put(ws, load_of(ws))

    def discard(self, ws: WorkerState) -> None:
        """Forget a worker that left (nothing if it is not indexed)."""
        group = self._by_threads.get(ws.nthreads)
        if group is not None and ws in group.loads:
            group.take(ws)
            if not group.loads:
                del self._by_threads[ws.nthreads]

    def update(self, ws: WorkerState) -> None:
        """Re-index ``ws`` after its load may have changed (nothing for a worker not indexed)."""
        group = self._by_threads.get(ws.nthreads)
        if group is None:
            return
        old = group.loads.get(ws)
        if old is None:
            return
        load = len(ws.processing) - len(ws.long_running)
        if load != old:
            group.take(ws)
            group.put(ws, load)

    def least_loaded(self) -> Iterator[WorkerState]:
        """The running worker of lowest load of each thread count (at most one per thread count)."""
        for group in self._by_threads.values():
            ws = group.least_loaded()
            if ws is not None:
                yield ws

    def saturated(self) -> list[WorkerState]:
        """The workers with more tasks than threads (whatever their status): O(them), not O(workers)."""
        return list(self._loaded(operator.gt))

    def unsaturated(self) -> list[WorkerState]:
        """The running workers with a thread free: O(them), not O(workers)."""
        return [ws for ws in self._loaded(operator.lt) if ws.status == Status.running]

    def _loaded(self, compare: Callable[[int, int], bool]) -> Iterator[WorkerState]:
        """The workers for which ``compare(load, thread count)`` is true, bucket by bucket."""
        for nthreads, group in self._by_threads.items():
            for load, bucket in group.buckets.items():
                if compare(load, nthreads):
                    yield from bucket

    def validate(self, workers: Iterable[WorkerState]) -> None:
        """Check that exactly ``workers`` are indexed, each at its current load (raises AssertionError)."""
        indexed = {ws: load for group in self._by_threads.values() for ws, load in group.loads.items()}
        workers = list(workers)
        assert set(indexed) == set(workers), ("worker loads index", set(indexed) ^ set(workers))
        for ws in workers:
            assert indexed[ws] == load_of(ws), ("worker load", ws, indexed[ws], load_of(ws))
        for nthreads, group in self._by_threads.items():
            for load, bucket in group.buckets.items():
                assert bucket and load >= group.low, ("worker load bucket", nthreads, load)
                for ws in bucket:
                    assert ws.nthreads == nthreads and group.loads[ws] == load, ("worker load bucket", ws)
