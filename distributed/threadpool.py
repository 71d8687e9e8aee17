"""A thread pool whose threads can leave it while they run (``secede``).

A task that waits on other tasks (``get_client().gather`` inside a task) should
not hold one of its worker's threads: it calls :func:`distributed.secede`, the
pool starts a replacement thread, and the seceded thread ends when its task
returns.  :func:`distributed.rejoin` takes a seceded thread back: it waits
until a pool thread finishes its task and hands over its slot.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ThreadPool"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_local = threading.local()
#: Queued by a rejoining thread: the pool thread that draws it gives its slot up.
_YIELD_SLOT: Any = ("yield-slot",)
_names = itertools.count()


class ThreadPool:
    """Run callables on up to ``max_workers`` threads.

    Parameters
    ----------
    max_workers
        Threads that run at once (seceded threads do not count).
    name
        Prefix of the threads' names.
    """

    def __init__(self, max_workers: int, name: str = "Dask-Worker-Threads") -> None:
        if max_workers < 1:
            raise ValueError("A thread pool needs at least one thread")
        self.max_workers = max_workers
        self.name = name
        self._work: queue.SimpleQueue[
            tuple[concurrent.futures.Future[Any] | None, Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._seceded: set[threading.Thread] = set()
        #: Seceded threads waiting for a slot, each woken by the thread that gives its slot up.
        self._rejoining: list[tuple[threading.Thread, threading.Event]] = []
        self._shutdown = False
        # Idle threads sleep on an eventfd semaphore (one unit per queued item) rather than in
        # SimpleQueue.get: writing to it releases the GIL, so the woken thread does not find the
        # GIL held by the thread that woke it (a futile wake-up and a second context switch).
        # It is closed as soon as the pool is shut down and its last thread has ended (see
        # _close_efd_if_unused), not by a finalizer alone: the pool sits in reference cycles (its
        # threads' targets are its bound methods), so a finalizer waits for the cyclic collector,
        # and a process that starts and closes many workers would hold one descriptor per worker.
        self._efd: int | None = None
        self._efd_finalizer: weakref.finalize[Any, Any] | None = None
        if hasattr(os, "eventfd"):
            self._efd = os.eventfd(0, os.EFD_SEMAPHORE | os.EFD_CLOEXEC)
            # For a pool never shut down.  Not at interpreter exit: daemon threads may still use it
            # then (the OS closes it).
            self._efd_finalizer = weakref.finalize(self, os.close, self._efd)
            self._efd_finalizer.atexit = False

    def _put(self, item: Any) -> None:
        self._work.put(item)
        if self._efd is not None:
            os.eventfd_write(self._efd, 1)

    def _get(self) -> Any:
        if self._efd is not None:
            os.eventfd_read(self._efd)
            return self._work.get_nowait()
        return self._work.get()

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """Schedule ``fn(*args, **kwargs)``; return a future of its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._enqueue((future, fn, args, kwargs))
        return future

    def submit_nowait(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` without a future; ``fn`` reports its own result."""
        self._enqueue((None, fn, args, {}))

    def _enqueue(self, item: Any) -> None:
        # Under the lock, as shutdown reads the threads to stop: a job (and a thread started for
        # it) either comes before shutdown, whose stop markers then reach every thread, or is refused.
        with self._lock:
            if self._shutdown:
                raise RuntimeError("Thread pool is shut down")
            self._put(item)
            if len(self._threads) < self.max_workers:
                self._start_thread()

    def _start_thread(self) -> None:
        t = threading.Thread(target=self._run, name=f"{self.name}-{next(_names)}", daemon=True)
        self._threads.add(t)
        t.start()

    def _run(self) -> None:
        _local.pool = self
        _local.seceded = False
        #: Whether the job running on this thread seceded at some point (rejoined or not).
        _local.seceded_in_job = False
        me = threading.current_thread()
        try:
            while True:
                item = self._get()
                if item is None:
                    return
                if item is _YIELD_SLOT:
                    if self._give_slot_to_rejoiner(me):
                        return
                    continue
                future, fn, args, kwargs = item
                _local.seceded_in_job = False
                if future is None:
                    try:
                        fn(*args, **kwargs)
                    except BaseException:
                        logger.exception("Uncaught error in a thread-pool job")
                elif future.set_running_or_notify_cancel():
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as e:
                        future.set_exception(e)
                    else:
                        future.set_result(result)
                del item, future, fn, args, kwargs
                if _local.seceded:
                    return
        finally:
            with self._lock:
                self._threads.discard(me)
                self._seceded.discard(me)
                self._close_efd_if_unused()

    def _close_efd_if_unused(self) -> None:
        """Close the eventfd once the pool is shut down and no thread of it lives (under the lock).

        Only then: a live thread may still read it, or write to it (a rejoiner), and a closed
        descriptor's number may be reused by any file the process opens next.  Every write by
        others happens under the lock (``_enqueue``, ``shutdown``) or by a live thread.
        """
        if self._shutdown and not self._threads and not self._seceded and self._efd_finalizer is not None:
            self._efd = None
            self._efd_finalizer()  # closes it, once; the finalizer then does nothing
            self._efd_finalizer = None

    def secede_current_thread(self) -> None:
        """Let the calling pool thread leave; start another in its place."""
        me = threading.current_thread()
        with self._lock:
            if me not in self._threads:
                return
            self._threads.discard(me)
            self._seceded.add(me)
            _local.seceded = True
            _local.seceded_in_job = True
            if not self._work.empty() and len(self._threads) < self.max_workers and not self._shutdown:
                self._start_thread()

    def rejoin_current_thread(self) -> None:
        """Let a seceded thread take a slot in the pool again; block until one is free.

        The next pool thread to finish its task (or an idle one) leaves the pool and
        wakes this one, which then stays in the pool after its task, as any pool thread.
        """
        me = threading.current_thread()
        with self._lock:
            if me not in self._seceded:
                return
            if len(self._threads) < self.max_workers or self._shutdown:
                self._seceded.discard(me)
                self._threads.add(me)
                _local.seceded = False
                return
            event = threading.Event()
            self._rejoining.append((me, event))
        # Queued behind the work already waiting: the thread that takes it leaves the pool.
        self._put(_YIELD_SLOT)
        event.wait()
        _local.seceded = False

    def _give_slot_to_rejoiner(self, me: threading.Thread) -> bool:
        """Called by a pool thread that drew the yield marker: leave the pool if someone waits."""
        with self._lock:
            if not self._rejoining:
                return False
            thread, event = self._rejoining.pop(0)
            self._threads.discard(me)
            self._seceded.discard(thread)
            self._threads.add(thread)
        event.set()
        return True

    def may_continue(self) -> bool:
        """Whether the calling thread, its task done, may run another job without asking the queue.

        Only a pool thread whose job never seceded (a job that seceded and rejoined
        took a slot that others were given meanwhile, not one it held: its caller
        counted it apart while it was out), while no seceded thread waits to rejoin
        (it must get the next free slot) and the pool is not shutting down.
        Lock-free: a rejoiner that arrives just after is served one job later.
        """
        return (
            getattr(_local, "pool", None) is self
            and not _local.seceded_in_job  # set with _local.seceded, and kept after a rejoin
            and not self._rejoining
            and not self._shutdown
        )

    @property
    def waiting_to_rejoin(self) -> int:
        """Seceded threads blocked in :meth:`rejoin_current_thread`."""
        with self._lock:
            return len(self._rejoining)

    def shutdown(self, wait: bool = True, timeout: float = 10) -> None:
        """Stop accepting work; let threads finish their current task and end."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads | self._seceded)
            rejoining, self._rejoining = self._rejoining, []
            # Under the lock: the last thread to end closes the eventfd, maybe before we are done here.
            for _ in threads:
                self._put(None)
            self._close_efd_if_unused()
        for _, event in rejoining:
            event.set()
        if wait:
            for t in threads:
                if t is not threading.current_thread():
                    t.join(timeout)

    @property
    def threads(self) -> list[threading.Thread]:
        """The pool's threads, seceded ones included."""
        with self._lock:
            return list(self._threads | self._seceded)


def current_pool() -> ThreadPool | None:
    """The pool running the calling thread, if any."""
    pool = getattr(_local, "pool", None)
    return pool if isinstance(pool, ThreadPool) else None
