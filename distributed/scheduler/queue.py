"""The scheduler's queue of root tasks waiting for a free thread, most urgent first."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

__all__ = ["PriorityQueue"]

T = TypeVar("T")
Priority = tuple[Any, ...]


class PriorityQueue(Generic[T]):
    """Items by priority (lowest first), for a queue that is mostly filled in order.

    The roots of a graph reach the queue in priority order or in its reverse.
    A sorted deque takes each item that extends either of its ends in O(1), and
    gives the most urgent one back in O(1); only items that fall in between go
    to a heap.  A heap alone costs a dozen scattered comparisons per pop, which
    with tens of thousands of queued tasks is several microseconds each.

    Items whose priorities tie come out in the order they went in when they
    extend the deque; the heap would compare the items themselves.
    """

    __slots__ = ("_run", "_heap")

    def __init__(self) -> None:
        self._run: deque[tuple[Priority, T]] = deque()
        self._heap: list[tuple[Priority, T]] = []

    def push(self, priority: Priority, item: T) -> None:
        """Add ``item`` with ``priority``."""
        run = self._run
        if not run or priority >= run[-1][0]:
            run.append((priority, item))
        elif priority <= run[0][0]:
            run.appendleft((priority, item))
        else:
            heapq.heappush(self._heap, (priority, item))

    def peek(self) -> tuple[Priority, T] | None:
        """The most urgent ``(priority, item)``, left in place; None when empty."""
        run, heap = self._run, self._heap
        if heap and (not run or heap[0][0] < run[0][0]):
            return heap[0]
        return run[0] if run else None

    def pop(self) -> tuple[Priority, T]:
        """Remove and return the most urgent ``(priority, item)``.

        Raises
        ------
        IndexError
            When the queue is empty.
        """
        run, heap = self._run, self._heap
        if heap and (not run or heap[0][0] < run[0][0]):
            return heapq.heappop(heap)
        return run.popleft()

    def __len__(self) -> int:
        return len(self._run) + len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._run) or bool(self._heap)

    def __iter__(self) -> Iterator[tuple[Priority, T]]:
        """Every ``(priority, item)``, not in priority order."""
        yield from self._run
        yield from self._heap
