"""The scheduler's queue of root tasks waiting for a free thread, most urgent first."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Prioritized", "PriorityQueue"]


class Prioritized(Protocol):
    """An item that knows its own rank (lowest first) and compares by it."""

    @property
    def rank(self) -> Any:
        """The item's place in the queue; it must not change while the item is queued."""

    def __lt__(self, other: Any, /) -> bool:
        """Whether this item is more urgent than ``other``."""


T = TypeVar("T", bound=Prioritized)


class PriorityQueue(Generic[T]):
    """Items by rank (lowest first), for a queue that is mostly filled in order.

    The roots of a graph reach the queue in priority order or in its reverse.
    A sorted deque takes each item that extends either of its ends in O(1), and
    gives the most urgent one back in O(1); only items that fall in between go
    to a heap.  A heap alone costs a dozen scattered comparisons per pop, which
    with tens of thousands of queued tasks is several microseconds each.

    The queue holds the items alone, not ``(rank, item)`` pairs: with
    millions of tasks queued, a pair would cost 64 bytes each.

    Items whose ranks tie come out in the order they went in when they
    extend the deque; from the heap, in no set order.
    """

    __slots__ = ("_run", "_heap")

    def __init__(self) -> None:
        self._run: deque[T] = deque()
        self._heap: list[T] = []

    def push(self, item: T) -> None:
        """Add ``item`` at its rank."""
        run = self._run
        rank = item.rank
        if not run or rank >= run[-1].rank:
            run.append(item)
        elif rank <= run[0].rank:
            run.appendleft(item)
        else:
            heapq.heappush(self._heap, item)

    def peek(self) -> T | None:
        """The most urgent item, left in place; None when empty."""
        run, heap = self._run, self._heap
        if heap and (not run or heap[0].rank < run[0].rank):
            return heap[0]
        return run[0] if run else None

    def pop(self) -> T:
        """Remove and return the most urgent item.

        Raises
        ------
        IndexError
            When the queue is empty.
        """
        run, heap = self._run, self._heap
        if heap and (not run or heap[0].rank < run[0].rank):
            return heapq.heappop(heap)
        return run.popleft()

    def keep(self, wanted: Callable[[T], bool]) -> None:
        """Keep only the items ``wanted`` says to, in their order: O(len), for dropping stale items in bulk."""
        self._run = deque(item for item in self._run if wanted(item))
        self._heap = [item for item in self._heap if wanted(item)]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._run) + len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._run) or bool(self._heap)

    def __iter__(self) -> Iterator[T]:
        """Every item, not in priority order."""
        yield from self._run
        yield from self._heap
