"""Waiting on many futures: ``wait``, ``as_completed``, ``futures_of``, ``fire_and_forget``."""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from dask._task_spec import DataNode, Task
from dask.utils import parse_timedelta

from distributed.client.client import ALL_COMPLETED, FIRST_COMPLETED, Client, default_client
from distributed.client.future import Future, collect_futures
from distributed.dask_api import is_dask_collection
from distributed.exceptions import FutureCancelledError, FuturesCancelledError
from distributed.protocol.messages import Key
from distributed.utils import wait_for

__all__ = ["DoneAndNotDoneFutures", "as_completed", "fire_and_forget", "futures_of", "wait"]


class DoneAndNotDoneFutures(NamedTuple):
    """What :func:`wait` returns."""

    done: set[Future]
    not_done: set[Future]


def futures_of(o: Any, client: Client | None = None) -> list[Future]:
    """The futures inside ``o`` (nested containers and dask collections), in the order they appear there.

    A collection's futures come in the order of its graph, which is the order
    of its partitions (as in dask: libraries pair the partitions of two
    collections by position, xgboost its data and labels).
    """
    stack = [o]
    seen: set[int] = set()
    futures: dict[Key, Future] = {}
    while stack:
        x = stack.pop()
        if isinstance(x, Future):
            # Found last to first (the stack pops the last item first), so reversed below; a future found
            # twice keeps the place dask gives it (its first find here).
            futures.setdefault(x.key, x)
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, DataNode):
            stack.append(x.value)
        elif isinstance(x, Task):
            stack.extend(x.args)
            stack.extend(x.kwargs.values())
        elif is_dask_collection(x):
            if id(x) in seen:
                continue
            seen.add(id(x))
            # A graph that cannot be built is the caller's error, not "no futures".
            stack.extend(x.__dask_graph__().values())
    if client is not None:
        bad = [f for f in futures.values() if f.bound_client is not None and f.bound_client is not client]
        if bad:
            raise ValueError("Futures belong to another client")
    return list(reversed(futures.values()))


def wait(fs: Any, timeout: Any = None, return_when: str = ALL_COMPLETED) -> Any:
    """Wait until futures are done; return ``(done, not_done)``.

    Raises
    ------
    ValueError
        When there is no client (dask reads this as "no distributed scheduler").
    TimeoutError
        When not done within ``timeout``.
    FuturesCancelledError
        When some of the futures done were cancelled (as dask.distributed
        raises): its ``error_groups`` list them by reason.
    """
    client = default_client()
    if isinstance(fs, Future):
        futures = [fs]
    elif isinstance(fs, (list, tuple, set, frozenset)) and all(isinstance(f, Future) for f in fs):
        futures = list(fs)
    else:
        # Persisted collections (also inside lists) stand for their futures.
        futures = futures_of(fs)
    if futures:
        client = futures[0].client
    t = parse_timedelta(timeout) if timeout is not None else None

    async def _wait() -> DoneAndNotDoneFutures:
        # One countdown over the futures' done callbacks, not a task per future.
        states = list({id(f.state): f.state for f in futures if not f.state.done()}.values())
        need = len(states) if return_when != FIRST_COMPLETED else min(1, len(states))
        if need:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            remaining = need

            def one_done() -> None:
                nonlocal remaining
                remaining -= 1
                if remaining <= 0 and not waiter.done():
                    waiter.set_result(None)

            for fs in states:
                fs.add_callback(one_done)
            try:
                await wait_for(waiter, t)
            except TimeoutError:
                left = sum(not fs.done() for fs in states)
                if return_when == FIRST_COMPLETED:
                    raise TimeoutError(f"No future finished within {t} s") from None
                raise TimeoutError(f"{left} futures did not finish within {t} s") from None
            finally:
                for fs in states:
                    if not fs.done():
                        fs.remove_callback(one_done)
        done = {f for f in futures if f.done()}
        cancelled = [FutureCancelledError(f.key, f.state.reason) for f in done if f.cancelled()]
        if cancelled:
            raise FuturesCancelledError.of(cancelled)
        return DoneAndNotDoneFutures(done, {f for f in futures if not f.done()})

    return client.sync(_wait)


class as_completed:
    """Iterate over futures in the order they finish.

    Parameters
    ----------
    futures
        The futures (more can be added with :meth:`add`).
    with_results
        Yield ``(future, result)`` pairs.
    raise_errors
        With ``with_results``, raise a future's exception instead of yielding it.
        A cancelled future is yielded with its ``CancelledError`` either way.
    timeout
        Seconds from the call after which waiting for the next future raises
        ``TimeoutError``.
    """

    def __init__(
        self,
        futures: Iterable[Future] | None = None,
        loop: Any = None,
        with_results: bool = False,
        raise_errors: bool = True,
        *,
        timeout: Any = None,
    ) -> None:
        self.queue: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self.futures: dict[Future, int] = {}
        self.lock = threading.Lock()
        self.with_results = with_results
        self.raise_errors = raise_errors
        self.timeout: float | None = parse_timedelta(timeout) if timeout is not None else None
        self._deadline: float | None = time.monotonic() + self.timeout if self.timeout is not None else None
        for f in futures or ():
            self.add(f)

    def add(self, future: Future) -> None:
        """Add a future to watch."""
        self.update([future])

    def update(self, futures: Iterable[Future]) -> None:
        """Add several futures."""
        futures = list(futures)
        with self.lock:
            for f in futures:
                self.futures[f] = self.futures.get(f, 0) + 1
        by_client: defaultdict[Client, list[Future]] = defaultdict(list)
        for f in futures:
            by_client[f.client].append(f)
        for client, fs in by_client.items():
            client.registry.call_soon(functools.partial(_notify_when_done, fs, self._ready))

    def _ready(self, future: Future) -> None:
        """A watched future is done: queue it, unless it was cleared meanwhile."""
        with self.lock:
            if future not in self.futures:
                return
        self.queue.put(future)

    def count(self) -> int:
        """Futures not yet yielded."""
        with self.lock:
            return sum(self.futures.values())

    def is_empty(self) -> bool:
        """Whether all futures were yielded."""
        return self.count() == 0

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> as_completed:
        return self

    def _untrack(self, future: Future) -> None:
        with self.lock:
            n = self.futures.get(future, 0) - 1
            if n <= 0:
                self.futures.pop(future, None)
            else:
                self.futures[future] = n

    def _take(self, future: Future) -> Any:
        self._untrack(future)
        if self.with_results:
            if future.cancelled():
                return future, FutureCancelledError(future.key, future.state.reason)
            try:
                return future, future.result()
            except Exception as e:
                if self.raise_errors:
                    raise
                return future, e
        return future

    def _remaining(self) -> float | None:
        """Seconds left before the timeout (None: no timeout)."""
        if self._deadline is None:
            return None
        return max(self._deadline - time.monotonic(), 0.0)

    def _get(self) -> Future:
        """The next finished future (blocking), within the timeout."""
        try:
            return self.queue.get(timeout=self._remaining())
        except queue.Empty:
            raise TimeoutError(f"No future finished within {self.timeout} s") from None

    def __next__(self) -> Any:
        if self.is_empty():
            raise StopIteration
        return self._take(self._get())

    def __aiter__(self) -> as_completed:
        return self

    async def __anext__(self) -> Any:
        if self.is_empty():
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        future = await loop.run_in_executor(None, self._get)
        if self.with_results:
            if future.cancelled():
                return self._take(future)
            self._untrack(future)
            try:
                return future, await future
            except Exception as e:
                if self.raise_errors:
                    raise
                return future, e
        return self._take(future)

    def next_batch(self, block: bool = True) -> list[Any]:
        """The futures finished so far (at least one when ``block``)."""
        batch = []
        if block and not self.is_empty():
            batch.append(next(self))
        while not self.queue.empty():
            batch.append(self._take(self.queue.get()))
        return batch

    def batches(self) -> Iterator[list[Any]]:
        """Yield lists of futures as they finish."""
        while not self.is_empty():
            yield self.next_batch(block=True)

    def clear(self) -> None:
        """Forget all futures (those finished but not yielded too), releasing them."""
        with self.lock:
            self.futures.clear()
            while True:
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break


def _notify_when_done(futures: list[Future], put: Callable[[Future], Any]) -> None:
    """On the client's loop: call ``put(future)`` as each future finishes.

    The callback holds the future weakly: only the caller's own references
    keep it (and its key) alive.
    """
    for f in futures:
        fs = f.state
        if fs.done():
            put(f)
        else:
            fs.add_callback(functools.partial(_put_if_alive, weakref.ref(f), put))


def _put_if_alive(ref: weakref.ref[Future], put: Callable[[Future], Any]) -> None:
    f = ref()
    if f is not None:
        put(f)


def fire_and_forget(obj: Any) -> None:
    """Run futures to completion even after every reference to them is dropped."""
    flat: list[Future] = []
    collect_futures(obj, flat)
    for f in flat if flat else futures_of(obj):
        f.client.registry.keep_wanted([f.key])
