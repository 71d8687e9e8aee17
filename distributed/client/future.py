"""Futures: references to keys computed on a cluster.

A :class:`Future` holds one reference to a key of its client; all futures of
one key share a :class:`FutureState` (status, error, the workers holding the
value), which the client updates from the scheduler's reports.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import itertools
import logging
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dask._task_spec import TaskRef
from dask.utils import parse_timedelta, typename

from distributed.core import rebuild_exception
from distributed.exceptions import FutureCancelledError
from distributed.protocol.messages import Key
from distributed.utils import wait_for
from distributed.widgets import future_html

if TYPE_CHECKING:
    from distributed.client.client import Client

logger = logging.getLogger(__name__)

__all__ = ["Future", "FutureState", "collect_futures"]

#: Tokens of future objects: unique in this process, and across processes by the prefix.
_PROCESS_TOKEN = uuid.uuid4().hex
_token_counter = itertools.count()
_token_lock = threading.Lock()


class FutureState:
    """What a client knows about one key; shared by all its futures."""

    __slots__ = ("key", "status", "exception", "traceback", "workers", "type", "_event", "callbacks", "reason")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.status = "pending"
        self.exception: Any = None
        self.traceback: Any = None
        #: Replaced, never changed in place (a map's pending keys share one empty tuple).
        self.workers: Sequence[str] = ()
        #: The result's type once resolved, else the type's name the worker reported.
        self.type: type | str | None = None
        self._event: asyncio.Event | None = None
        #: Made when the first callback is added: most keys never get one.
        self.callbacks: list[Callable[[], None]] | None = None
        self.reason: str | None = None

    def event(self) -> asyncio.Event:
        """The event set when the key is done (create on the client's loop)."""
        if self._event is None:
            self._event = asyncio.Event()
            if self.status != "pending":
                self._event.set()
        return self._event

    def done(self) -> bool:
        return self.status != "pending"

    def add_callback(self, cb: Callable[[], None]) -> None:
        """Call ``cb`` (on the client's loop) when the key is next done."""
        if self.callbacks is None:
            self.callbacks = [cb]
        else:
            self.callbacks.append(cb)

    def remove_callback(self, cb: Callable[[], None]) -> None:
        """Forget ``cb`` if it was added and has not run."""
        if self.callbacks is not None:
            try:
                self.callbacks.remove(cb)
            except ValueError:
                pass

    def _finish(self, status: str) -> None:
        self.status = status
        if self._event is not None:
            self._event.set()
        callbacks, self.callbacks = self.callbacks, None
        for cb in callbacks or ():
            try:
                cb()
            except Exception:
                logger.exception("Future callback failed")

    def finish(self, workers: Iterable[str], type_: type | str | None) -> None:
        self.workers = list(workers)
        if type_ and not isinstance(self.type, type):
            self.type = type_
        self._finish("finished")

    def set_error(self, exception: Any, traceback: Any) -> None:
        self.exception = exception
        self.traceback = traceback
        self._finish("error")

    def cancel(self, reason: str | None = None) -> None:
        self.reason = reason
        self._finish("cancelled")

    def error(self) -> BaseException | None:
        """The exception ``result()`` raises for this key, or None when it has none."""
        if self.status == "error":
            exc: BaseException = rebuild_exception(self.exception)
            where = self.exception.get("where") if isinstance(self.exception, dict) else None
            if where:
                # The remote traceback holds only the task's own frames: say where they ran.
                exc.add_note(where)
            return exc
        if self.status == "cancelled":
            return FutureCancelledError(self.key, self.reason)
        return None

    def reset(self) -> None:
        self.status = "pending"
        self.exception = None
        self.traceback = None
        self.workers = ()
        if self._event is not None:
            self._event.clear()


class Future(TaskRef):
    """A remote result: a reference to one key on the cluster.

    Parameters
    ----------
    key
        The key.
    client
        The client it belongs to (default: the current client).

    Examples
    --------
    >>> future = client.submit(sum, [1, 2, 3])  # doctest: +SKIP
    >>> future.result()  # doctest: +SKIP
    6
    """

    __slots__ = ("_client", "_state", "_bound", "_token", "__weakref__")

    def __init__(
        self, key: Key, client: Client | None = None, state: FutureState | None = None, inform: bool = True
    ) -> None:
        super().__init__(key)
        self._client: Client | None = None
        self._state: FutureState | None = None
        self._bound = False
        self._token: str | None = None
        if client is None:
            try:
                client = get_client_for_future()
            except ValueError:
                client = None
        if client is not None:
            self.bind_client(client, state, inform=inform)

    @classmethod
    def counted(cls, key: Key, client: Client, state: FutureState) -> Future:
        """A future of ``client`` whose reference the client's registry has already counted."""
        f = cls.__new__(cls)
        f.key = key
        f._client = client
        f._state = state
        f._bound = True
        f._token = None
        return f

    def bind_client(self, client: Client, state: FutureState | None = None, inform: bool = True) -> None:
        """Attach to ``client`` (keeping the key wanted while we live)."""
        self._client = client
        if state is None:
            self._state = client.registry.acquire(self.key, inform=inform)
        else:
            self._state = state
            client.registry.hold(self.key)
        self._bound = True

    @property
    def client(self) -> Client:
        """The client this future belongs to."""
        if self._client is None:
            # Unpickled where no client was current (e.g. a task's arguments are
            # loaded on the worker's loop): bind now, to the task's worker client.
            self.bind_client(get_client_for_future())
        assert self._client is not None
        return self._client

    @property
    def executor(self) -> Client:
        """Alias of :attr:`client`."""
        return self.client

    @property
    def bound_client(self) -> Client | None:
        """The client this future is bound to, or None (unlike :attr:`client`, never binds)."""
        return self._client

    @property
    def state(self) -> FutureState:
        """What the client knows about the key (shared by all its futures)."""
        if self._state is None:
            _ = self.client
        assert self._state is not None
        return self._state

    @property
    def status(self) -> str:
        """``"pending"``, ``"finished"``, ``"error"`` or ``"cancelled"`` (a lost key is pending again)."""
        return self.state.status

    @property
    def type(self) -> type | None:
        """The type of the result, once known (None before).

        Workers report the type's name, never a pickled type: the scheduler
        does not unpickle user code, and neither does this property.  The name
        is looked up in the modules this process has already imported (so
        builtins, numpy, pandas and the user's own modules resolve); a type
        that cannot be found that way is known once the value was fetched.
        """
        fs = self.state
        t = fs.type
        if t is None or isinstance(t, type):
            return t
        resolved = resolve_type(t)
        if resolved is not None:
            fs.type = resolved
        return resolved

    def done(self) -> bool:
        """Whether the computation is complete (finished, erred or cancelled)."""
        return self.state.done()

    def cancelled(self) -> bool:
        """Whether the future was cancelled."""
        return self.state.status == "cancelled"

    def result(self, timeout: float | str | None = None) -> Any:
        """Wait for and return the result; re-raise its exception if it erred.

        Raises
        ------
        TimeoutError
            When it is not done within ``timeout`` seconds.
        """
        client = self.client
        if client.asynchronous and client.registry.on_loop():
            return self._result_coro(timeout)
        return client.sync(self._result_coro, timeout)

    async def _result_coro(self, timeout: float | str | None = None) -> Any:
        t = parse_timedelta(timeout) if timeout is not None else None
        # One deadline for waiting on the task and fetching its value.
        deadline = asyncio.timeout(t)
        try:
            async with deadline:
                return await self._result_now()
        except TimeoutError:
            if deadline.expired():
                raise TimeoutError(f"Future {self.key!r} did not finish within {t} s") from None
            raise  # the task's own TimeoutError

    async def _result_now(self) -> Any:
        result = await self.client.gather([self], errors="raise", asynchronous=True)
        return result[0]

    def exception(self, timeout: float | str | None = None) -> Any:
        """The exception the task raised, or None."""
        client = self.client

        async def get() -> BaseException | None:
            t = parse_timedelta(timeout) if timeout is not None else None
            await wait_for(self.state.event().wait(), t)
            return self.state.error()

        if client.asynchronous and client.registry.on_loop():
            return get()
        return client.sync(get)

    def traceback(self, timeout: float | str | None = None) -> Any:
        """The traceback of the task's exception, or None (an awaitable on an asynchronous client)."""
        exc = self.exception(timeout)
        if inspect.isawaitable(exc):
            return _traceback_of(exc)
        return exc.__traceback__ if isinstance(exc, BaseException) else None

    def cancel(self, reason: str | None = None, **kwargs: Any) -> Any:
        """Cancel this future's task."""
        return self.client.cancel([self], reason=reason, **kwargs)

    def retry(self, **kwargs: Any) -> Any:
        """Rerun this future's task if it erred."""
        return self.client.retry([self], **kwargs)

    def release(self) -> None:
        """Stop wanting the key (also done when the future is garbage collected)."""
        if self._bound and self._client is not None:
            self._bound = False
            self._client.registry.release(self.key)

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        """Call ``fn(future)`` (in a separate thread) when the future is done."""
        client = self.client
        fs = self.state

        def run() -> None:
            threading.Thread(target=_run_callback, args=(fn, self), daemon=True, name="future-callback").start()

        def register() -> None:
            if fs.done():
                run()
            else:
                fs.add_callback(run)

        client.registry.call_soon(register)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass

    def __reduce__(self) -> Any:
        return (Future, (self.key,))

    def __dask_tokenize__(self) -> Any:
        # Each future object has a token of its own, as in dask.distributed: two
        # futures of one key are distinct objects (an unpickled copy is a new one).
        # Made on first use, so making futures costs nothing for it.
        token = self._token
        if token is None:
            with _token_lock:
                token = self._token
                if token is None:
                    token = self._token = f"{_PROCESS_TOKEN}-{next(_token_counter)}"
        return (type(self).__name__, self.key, token)

    def __await__(self) -> Any:
        return self._result_coro().__await__()

    def __repr__(self) -> str:
        status = self._state.status if self._state is not None else "unbound"
        known = self._state.type if self._state is not None else None
        t = f", type: {known if isinstance(known, str) else typename(known)}" if known else ""
        return f"<Future: {status}{t}, key: {self.key}>"

    def __str__(self) -> str:
        return repr(self)

    def _repr_html_(self) -> str:
        status = self._state.status if self._state is not None else "unbound"
        known = self._state.type if self._state is not None else None
        kind = (known if isinstance(known, str) else typename(known)) if known else None
        return str(future_html(key=self.key, status=status, type_name=kind))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskRef) and other.key == self.key


async def _traceback_of(exception: Awaitable[BaseException | None]) -> TracebackType | None:
    exc = await exception
    return exc.__traceback__ if exc is not None else None


def resolve_type(name: str) -> type | None:
    """The type called ``name`` (as ``dask.utils.typename`` writes it), from modules already imported."""
    if "." not in name:
        found = getattr(builtins, name, None)
        return found if isinstance(found, type) else None
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is None:
            continue
        obj: Any = module
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            continue
        return obj if isinstance(obj, type) else None
    return None


def _run_callback(fn: Callable[[Future], Any], future: Future) -> None:
    try:
        fn(future)
    except Exception:
        logger.exception("Error in a future's done-callback")


def collect_futures(x: Any, out: list[Future]) -> None:
    """Append the futures in ``x`` (a future, or lists, tuples, sets and dicts of them) to ``out``."""
    if isinstance(x, Future):
        out.append(x)
    elif isinstance(x, (list, tuple, set, frozenset)):
        for v in x:
            collect_futures(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            collect_futures(v, out)


def get_client_for_future() -> Client:
    """The client that an unpickled future should bind to."""
    from distributed.client.client import get_client  # the client module imports this one

    return get_client()
