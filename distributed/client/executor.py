"""``Client.get_executor()``: the client as a :class:`concurrent.futures.Executor`.

Code written against the standard library's executors (``submit``, ``map``,
``shutdown``, ``concurrent.futures.wait`` / ``as_completed``) runs its calls on
the cluster.  Each call is a task of the client's; what ``submit`` returns is a
plain :class:`concurrent.futures.Future` that takes the task's outcome (its
value, its exception, or its cancellation) once the task is done, and whose
``cancel()`` cancels the task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.utils import TimeoutError

if TYPE_CHECKING:
    from distributed.client.client import Client
    from distributed.client.future import Future

__all__ = ["ClientExecutor"]

#: The ``Client.submit`` keywords an executor takes, applied to each of its calls.
TASK_KEYWORDS = frozenset({"pure", "workers", "resources", "allow_other_workers", "retries"})


class ClientExecutor(cf.Executor):
    """A :class:`concurrent.futures.Executor` whose calls run as tasks of ``client``.

    Parameters
    ----------
    client
        The client the calls go through.
    **kwargs
        ``Client.submit`` keywords for every call: ``pure``, ``workers``,
        ``resources``, ``allow_other_workers``, ``retries``.

    Raises
    ------
    TypeError
        For any other keyword (named).
    """

    def __init__(self, client: Client[Any], **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - TASK_KEYWORDS)
        if unknown:
            raise TypeError(f"unsupported arguments to ClientExecutor: {unknown}")
        self._client = client
        self._kwargs = kwargs
        self._futures: weakref.WeakSet[Future] = weakref.WeakSet()
        #: The standard-library futures handed out, which take their outcome just after their task's.
        self._mirrors: weakref.WeakSet[cf.Future[Any]] = weakref.WeakSet()
        self._shut_down = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """Run ``fn(*args, **kwargs)`` as a task; a :class:`concurrent.futures.Future` of its outcome.

        Raises
        ------
        RuntimeError
            After :meth:`shutdown`.
        """
        if self._shut_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future = self._client.submit(fn, *args, **{**self._kwargs, **kwargs})
        self._futures.add(future)
        return self._mirror(future)

    def map(
        self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None, chunksize: int = 1
    ) -> Iterator[Any]:
        """``fn`` over ``iterables`` as tasks, all submitted at once; the results in order.

        ``chunksize`` is the standard library's batching of calls for process
        pools: every call here is a task of its own, whatever it is.  Leaving
        the iterator early (or a timeout) cancels the calls not yet read.

        Raises
        ------
        concurrent.futures.TimeoutError
            When the results are not all read within ``timeout`` seconds of the call.
        """
        if self._shut_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        end = None if timeout is None else time.monotonic() + float(parse_timedelta(timeout) or 0)
        futures: list[Future] = list(self._client.map(fn, *[list(it) for it in iterables], **self._kwargs))
        self._futures.update(futures)

        def results() -> Iterator[Any]:
            read = 0
            try:
                for future in futures:
                    remaining = None if end is None else max(end - time.monotonic(), 0.0)
                    try:
                        value = future.result(timeout=remaining)
                    except TimeoutError as e:
                        if end is not None and time.monotonic() >= end:
                            raise cf.TimeoutError(f"map() results not read within {timeout} s") from e
                        raise
                    read += 1
                    yield value
            finally:
                unread = futures[read:]
                if unread:
                    self._client.cancel(unread)

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more calls: wait for those made (``wait=True``), or cancel them.

        Safe to call more than once.  ``cancel_futures=True`` cancels the calls
        not finished even with ``wait=True``, as the standard library's does.
        """
        if self._shut_down:
            return
        self._shut_down = True
        futures = [f for f in self._futures if not f.done()]
        if futures and (cancel_futures or not wait):
            self._client.cancel(futures)
        elif futures:
            from distributed.client.waiting import wait as wait_for_futures

            wait_for_futures(futures)
        if wait:
            cf.wait(list(self._mirrors))

    def _mirror(self, future: Future) -> cf.Future[Any]:
        """A standard-library future that takes ``future``'s outcome; cancelling it cancels the task."""
        mirror: cf.Future[Any] = cf.Future()
        self._mirrors.add(mirror)

        def cancel_task(f: cf.Future[Any]) -> None:
            if f.cancelled() and not future.done():
                future.cancel()

        mirror.add_done_callback(cancel_task)

        async def copy_outcome() -> None:
            try:
                value = await future
            except BaseException as e:  # the task's own exception, or its cancellation
                if future.cancelled():
                    mirror.cancel()
                    mirror.set_running_or_notify_cancel()  # wakes concurrent.futures.wait / as_completed
                elif not mirror.done():
                    mirror.set_exception(e)
                return
            if not mirror.done():
                mirror.set_result(value)

        asyncio.run_coroutine_threadsafe(copy_outcome(), self._client.event_loop)
        return mirror
