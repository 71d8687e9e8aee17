"""Actors: a stateful object that lives on one worker, used through a proxy.

Theory of operation
-------------------
``client.submit(Cls, *args, actor=True)`` runs ``Cls(*args)`` as a task whose
key the scheduler marks as an actor.  The worker that ran it keeps the
instance in ``Worker.actors`` and stores, as the key's value, an
:class:`Actor` proxy naming the class, the worker's address and the key.  So
whoever receives the key's value - the client through ``future.result()``, a
task that takes the future as an argument, a peer fetching it - receives the
proxy, never the instance; the scheduler only knows that the key is an actor.

A proxy calls its actor's worker directly (``actor_execute`` and
``actor_attribute`` requests), not through the scheduler.  On the worker,
ordinary methods run one at a time in the worker's single actor thread, and
``async def`` methods run on its event loop.  A method call returns an
:class:`ActorFuture` at once; a read of a non-callable attribute returns the
value (an awaitable of it on an event loop, as on an asynchronous client).

Invariants:

- A proxy made by a client (``future.result()``) holds a future of its key, so
  the actor lives at least as long as the proxy; the actor is freed on its
  worker once neither a future nor such a proxy is left.
- A worker that leaves takes its actors with it: the scheduler errs their
  keys with :class:`~distributed.exceptions.ActorLostError` instead of
  recomputing them (a fresh instance would silently lose the state), and a
  proxy's calls raise that error.
- Calls made from inside an actor method to an actor on the same worker run
  at once in the calling thread: waiting for the one actor thread, which the
  caller occupies, would never end.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

import dask.config
from dask._task_spec import TaskRef
from dask.utils import parse_timedelta

from distributed.core import BorrowedComm, ConnectionPool
from distributed.exceptions import ActorLostError
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize, unwrap
from distributed.task_context import TaskHost, current_worker, in_actor_thread

if TYPE_CHECKING:
    from distributed.client import Client, Future

__all__ = ["Actor", "ActorFuture", "BaseActorFuture"]

T = TypeVar("T")


class BaseActorFuture(abc.ABC, Awaitable[T]):
    """The result of a call on an :class:`Actor`, to come.

    ``await`` it on an event loop, or call :meth:`result` from a thread.
    """

    @abc.abstractmethod
    def result(self, timeout: float | None = None) -> T:
        """Wait at most ``timeout`` seconds for the call's value; raise what the call raised."""

    @abc.abstractmethod
    def done(self) -> bool:
        """Whether the call has finished."""

    def __repr__(self) -> str:
        return "<ActorFuture>"


class ActorFuture(BaseActorFuture[T]):
    """The result of one call on an :class:`Actor`.

    Parameters
    ----------
    future
        Where the call's outcome lands (set from the event loop that makes the call).
    loop
        That event loop: :meth:`result` must not block it.

    Examples
    --------
    >>> future = counter.increment()  # doctest: +SKIP
    >>> future.result()  # doctest: +SKIP
    1
    """

    __slots__ = ("_future", "_loop")

    def __init__(self, future: concurrent.futures.Future[T], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._future = future
        self._loop = loop

    def result(self, timeout: float | None = None) -> T:
        """The call's value, waiting at most ``timeout`` seconds.

        Raises
        ------
        TimeoutError
            When the call does not finish in time.
        RuntimeError
            When called, unfinished, from the event loop that makes the call
            (it would wait forever): ``await`` the future there instead.
        """
        if not self._future.done() and self._loop is not None and _running_loop() is self._loop:
            raise RuntimeError("ActorFuture.result() would block the event loop it waits on: await it instead")
        return self._future.result(timeout)

    def done(self) -> bool:
        """Whether the call has finished."""
        return self._future.done()

    def __await__(self) -> Generator[Any, None, T]:
        return asyncio.wrap_future(self._future).__await__()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _finished(call: Callable[[], T]) -> concurrent.futures.Future[T]:
    """A future holding the outcome of ``call()``, made now."""
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()
    try:
        fut.set_result(call())
    except BaseException as e:
        fut.set_exception(e)
    return fut


class Actor(TaskRef):
    """A proxy of an object living on a remote worker.

    Method calls run on that worker and return :class:`ActorFuture` objects
    at once; reading an attribute that is not callable returns its value.
    Passed to a task, an actor reaches the task as a proxy it can call.

    Parameters
    ----------
    cls
        The class of the remote object (methods and attributes are told apart by it).
    address
        The worker holding the object.
    key
        The key of the task that made it.
    worker
        The worker to call through (inside tasks it is found by itself).

    Examples
    --------
    >>> class Counter:
    ...     n = 0
    ...     def increment(self):
    ...         self.n += 1
    ...         return self.n
    >>> future = client.submit(Counter, actor=True)  # doctest: +SKIP
    >>> counter = future.result()  # doctest: +SKIP
    >>> counter.increment().result()  # doctest: +SKIP
    1
    >>> counter.n  # doctest: +SKIP
    1
    """

    def __init__(self, cls: type, address: str, key: Key, worker: TaskHost | None = None) -> None:
        super().__init__(key)
        self._cls = cls
        self._address = address
        self._worker = worker
        self._client: Client | None = None
        self._future: Future | None = None

    def __reduce__(self) -> Any:
        # Only what names the actor travels: the receiver binds to its own client or worker.
        return (Actor, (self._cls, self._address, self.key))

    def __repr__(self) -> str:
        return f"<Actor: {self._cls.__name__}, key={self.key}>"

    def __dir__(self) -> list[str]:
        return sorted(set(dir(type(self))) | {n for n in dir(self._cls) if not n.startswith("_")})

    @property
    def address(self) -> str:
        """The address of the worker holding the actor."""
        return self._address

    def bind(self, client: Client) -> None:
        """Make calls through ``client`` and keep the actor alive while this proxy lives.

        The client does this for proxies it returns from ``gather`` and ``result``.
        """
        from distributed.client import Future

        self._client = client
        self._future = Future(self.key, client)

    # -- where calls go --------------------------------------------------------------------
    def _channel(self) -> tuple[asyncio.AbstractEventLoop, ConnectionPool]:
        """The loop and connection pool to reach the actor's worker through from here."""
        if self._client is None and self._worker is None:
            worker = current_worker()
            if worker is not None:
                self._worker = worker  # inside a task or an actor method
            else:
                from distributed.client.client import default_client

                self.bind(default_client())
        if self._client is not None:
            client_loop = self._client.event_loop
            if client_loop is None:
                raise RuntimeError(f"The client of {self!r} is not running")
            return client_loop, self._client.pool
        worker = self._worker
        assert worker is not None
        if worker.loop is None:
            raise RuntimeError(f"The worker of {self!r} is not running")
        return worker.loop, worker.rpc

    def _local_instance(self) -> Any:
        """The instance itself when called from an actor thread of its own worker, else None."""
        if not in_actor_thread():
            return None
        worker = current_worker()
        if worker is None or worker.address != self._address:
            return None
        return worker.actors.get(self.key)

    def _check_alive(self) -> None:
        """Raise what the actor's future would, when its key erred (its worker left) or was cancelled."""
        fut = self._future
        if fut is not None:
            exc = fut.state.error()
            if exc is not None:
                raise exc

    def _send(self, msg: m.ActorExecute | m.ActorAttribute) -> ActorFuture[Any]:
        loop, pool = self._channel()
        cf = asyncio.run_coroutine_threadsafe(_request(pool, self._address, self.key, msg), loop)
        return ActorFuture(cf, loop)

    # -- the user's view -------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            # Private names (and the probes of pickle, copy, numpy, ...) are the proxy's own.
            raise AttributeError(name)
        self._check_alive()
        local = self._local_instance()
        if local is not None:
            return _local_attribute(local, name, self._channel)
        attr = getattr(self._cls, name, None)
        if callable(attr):
            return functools.partial(self._call_method, name)
        msg = m.ActorAttribute(op="actor_attribute", key=self.key, attribute=name)
        loop, _ = self._channel()
        future = self._send(msg)
        if _running_loop() is loop:
            return future  # on the loop that makes the call (an asynchronous client): await it
        return future.result()

    def _call_method(self, name: str, *args: Any, separate_thread: bool = True, **kwargs: Any) -> ActorFuture[Any]:
        # separate_thread=False (as in dask): a quick method runs on the worker's event loop, with
        # no hop to the actor thread; one that blocks would stop the worker meanwhile.
        self._check_alive()
        msg = m.ActorExecute(
            op="actor_execute", key=self.key, function=name, args=Serialize(args), kwargs=Serialize(kwargs)
        )
        if not separate_thread:
            msg["separate_thread"] = False
        return self._send(msg)


def _local_attribute(
    instance: Any, name: str, channel: Callable[[], tuple[asyncio.AbstractEventLoop, ConnectionPool]]
) -> Any:
    """An attribute of an actor on this worker, read from one of its methods: calls run here and now."""
    attr = getattr(instance, name)
    if not callable(attr):
        return attr

    def call(*args: Any, separate_thread: bool = True, **kwargs: Any) -> ActorFuture[Any]:
        # As on a remote call: ``async def`` methods, and others asked with separate_thread=False, run on
        # the worker's loop; the rest at once in the calling thread, which is already an actor thread.
        if inspect.iscoroutinefunction(attr) or not separate_thread:
            loop, _ = channel()
            return ActorFuture(asyncio.run_coroutine_threadsafe(_on_loop(attr, args, kwargs), loop), loop)
        return ActorFuture(_finished(lambda: attr(*args, **kwargs)))

    return call


async def _on_loop(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``method`` on the running loop, awaiting it when it is ``async def``."""
    if inspect.iscoroutinefunction(method):
        return await method(*args, **kwargs)
    return method(*args, **kwargs)


#: Seconds a call waits to reach its actor's worker.  That worker was up when
#: the actor was made, so a refused connection means it died: waiting out the
#: whole connect timeout (made for servers still starting) would only delay
#: the ActorLostError.
ACTOR_CONNECT_TIMEOUT = 5.0


def _connect_timeout() -> float:
    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) or ACTOR_CONNECT_TIMEOUT)


async def _request(pool: ConnectionPool, address: str, key: Key, msg: m.ActorExecute | m.ActorAttribute) -> Any:
    """Send ``msg`` to the actor's worker; its reply's value, or the error the call raised there.

    Only a worker that cannot be reached, or whose connection breaks during
    the call, means the actor is lost: an ``OSError`` raised by the actor's own
    method arrives as an error reply and is raised as it is.
    """
    borrowed: BorrowedComm | None = None
    try:
        async with pool.borrowed(address, timeout=min(_connect_timeout(), ACTOR_CONNECT_TIMEOUT)) as borrowed:
            result = await borrowed.request(msg)
    except OSError as e:
        if borrowed is not None and borrowed.in_step:
            raise  # an error reply: the actor's own method raised it
        raise ActorLostError(key, address) from e
    return unwrap(result)
