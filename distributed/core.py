"""Servers, remote calls and the connection pool.

Theory of operation
-------------------
A :class:`Server` listens on one or more addresses.  Every comm it accepts
carries request messages: a mapping of ``op`` (a name), ``reply`` (a bool) and fields.  The op
names a :class:`Route`: the ``TypedDict`` that declares the message and the
handler to call.  The message is checked against its declaration before the
handler runs, so a malformed or unknown message is answered with an error and
never reaches state.  Replies are ``{"status": "OK", "result": ...}`` or
``{"status": "error", ...}`` carrying the exception (pickled) and its traceback
(as plain data), which :func:`raise_remote_error` re-raises with its original
type.

A route may take over its comm (``takes_comm=True``): the server stops reading
requests from it and the handler runs it as a long-lived stream of batched
messages (see :mod:`distributed.batched`), dispatched through
:class:`StreamRoute` tables with the same checks.

Every background coroutine of a server is started with :meth:`Server.spawn`
and cancelled and awaited by :meth:`Server.close`, so nothing outlives it.

A server holds at most ``distributed.comm.max-accepted-connections`` accepted
comms open at once (those a route took over included).  Past that, a new
connection is closed as soon as it is accepted, and the refusals are logged
at most once per :data:`REFUSAL_LOG_INTERVAL` seconds, so a flood of
connections neither exhausts the process nor floods its log; the comms already
open keep working.  The process's own limit of open files (``ulimit -n``) may
come first: a server that nears it (95 %, seen in the system monitor's
samples) says so in its log, at most as often, naming the limits to raise.

While it runs, a server measures how promptly its event loop runs a periodic
tick (:attr:`Server.loop_health`, :mod:`distributed.loop_health`): one timer
callback every ``distributed.admin.tick.interval``, logged when a tick comes
later than ``distributed.admin.tick.limit``.

While it runs, a server keeps the last ``distributed.admin.log-length`` log
records of its own modules (``distributed.scheduler*`` for a scheduler,
``distributed.worker*`` for a worker) in :attr:`Server.logs`, and answers
``get_logs`` with them, as dask.distributed's servers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import functools
import inspect
import logging
import sys
import time
import types
import weakref
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import dask.config
import tblib

from distributed.comm import Comm, CommClosedError, connect, listen, normalize_address
from distributed.comm.core import ConnectionArgs, Listener
from distributed.config import get_interval
from distributed.event_loop import check_event_loop
from distributed.exceptions import keep_cause_chain
from distributed.loop_health import LoopHealth
from distributed.protocol import messages as m
from distributed.protocol.framing import ProtocolError
from distributed.protocol.schema import Check, checker
from distributed.protocol.serialize import Serialized, as_serialized, unwrap
from distributed.system import open_file_limit
from distributed.system_monitor import SystemMonitor
from distributed.utils import format_exception_text, get_traceback, wait_for

logger = logging.getLogger(__name__)

__all__ = [
    "BorrowedComm",
    "ConnectionPool",
    "LogBuffer",
    "PeriodicCallback",
    "RemoteError",
    "RemoteRequests",
    "ReplyThen",
    "Route",
    "Server",
    "Status",
    "StreamRoute",
    "error_message",
    "raise_remote_error",
    "reply_result",
    "rpc",
    "send_recv",
]

M = TypeVar("M", bound=Mapping[str, Any])

#: Seconds between two log lines about connections refused at the limit.
REFUSAL_LOG_INTERVAL = 10.0


def max_accepted_connections() -> int:
    """``distributed.comm.max-accepted-connections``, checked: a positive integer."""
    value = dask.config.get("distributed.comm.max-accepted-connections")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"distributed.comm.max-accepted-connections must be a positive integer, got {value!r}")
    return value


class Status(enum.Enum):
    """Life cycle of a server (and of clients and clusters)."""

    undefined = "undefined"
    created = "created"
    init = "init"
    starting = "starting"
    running = "running"
    paused = "paused"
    stopping = "stopping"
    stopped = "stopped"
    closing = "closing"
    closing_gracefully = "closing_gracefully"
    closed = "closed"
    failed = "failed"
    dont_reply = "dont_reply"


class RemoteError(RuntimeError):
    """An error reply whose exception could not be rebuilt here, or was not to be unpickled.

    ``reply`` is that error reply as it came (None when made otherwise), for
    a caller that passes the error on without opening it.
    """

    def __init__(self, *args: object, reply: Mapping[str, Any] | None = None) -> None:
        super().__init__(*args)
        self.reply = reply


@dataclass(frozen=True, slots=True)
class ReplyThen:
    """A handler's ``result``, with ``sent`` to call once the reply is written (or failed to be).

    For a handler that counts replies in flight (a worker's ``get_data``: the
    data goes out as the reply is written, after the handler returned).
    """

    result: Any
    sent: Callable[[], None]


@dataclass(frozen=True)
class Route(Generic[M]):
    """A request handler and the declared type of its message.

    ``func(comm, msg)`` returns the reply (or an awaitable of it).  With
    ``takes_comm=True`` the handler owns the comm from then on and no reply is
    sent.
    """

    schema: type[M]
    func: Callable[[Comm, M], Any]
    takes_comm: bool = False
    check: Check = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "check", checker(self.schema))


@dataclass(frozen=True)
class StreamRoute(Generic[M]):
    """A handler of one kind of message arriving on a batched stream."""

    schema: type[M]
    func: Callable[[M], Any]
    check: Check = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "check", checker(self.schema))


def error_message(exc: BaseException, tb: types.TracebackType | None = None) -> dict[str, Any]:
    """An error reply for ``exc``, safe to send whatever ``exc`` holds.

    An exception that cannot be pickled is replaced by a ``RuntimeError`` with
    the same text, so the caller still learns what went wrong.  The exception
    travels with its ``__cause__``/``__context__`` chain
    (:func:`~distributed.exceptions.keep_cause_chain`), so ``raise ... from``
    inside a task reads the same on the client.
    """
    if tb is None:
        tb = exc.__traceback__
    tb = get_traceback(tb)
    try:
        keep_cause_chain(exc)
        exc_ser: Serialized = as_serialized(exc)
        # Check it comes back, too: some exceptions pickle but do not unpickle.
        unwrap(exc_ser)
    except Exception:
        exc_ser = as_serialized(RuntimeError(format_exception_text(exc)))
    try:
        tb_data: Any = tblib.Traceback(tb).as_dict() if tb is not None else None
    except Exception:
        tb_data = None
    return {
        "status": "error",
        "exception": exc_ser,
        "traceback": tb_data,
        "text": format_exception_text(exc),
        "type": type(exc).__name__,
    }


def rebuild_exception(msg: Mapping[str, Any], *, unpickle: bool = True) -> BaseException:
    """The exception carried by an error reply, with its remote traceback.

    With ``unpickle=False`` the pickled exception is left unopened: the result
    is a :class:`RemoteError` with the remote type's name and text, holding the
    reply (a scheduler that may not unpickle, ``distributed.scheduler.pickle``).
    """
    exc: BaseException
    if not unpickle:
        exc = RemoteError(f"{msg.get('type', 'Exception')}: {msg.get('text', 'remote error')}", reply=msg)
    else:
        try:
            obj = unwrap(msg.get("exception"))
            if not isinstance(obj, BaseException):
                raise TypeError("not an exception")
            exc = obj
        except Exception:
            exc = RemoteError(str(msg.get("text", "remote error")))
    tb_data = msg.get("traceback")
    if tb_data:
        try:
            exc = exc.with_traceback(tblib.Traceback.from_dict(_as_lists(tb_data)).as_traceback())
        except Exception:
            pass
    return exc


def _as_lists(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _as_lists(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return [_as_lists(v) for v in x]
    return x


def raise_remote_error(msg: Mapping[str, Any], *, unpickle: bool = True) -> None:
    """Raise the exception carried by an error reply (see :func:`rebuild_exception`)."""
    raise rebuild_exception(msg, unpickle=unpickle)


async def send_recv(comm: Comm, msg: Mapping[str, Any], *, unpickle_errors: bool = True) -> Any:
    """Send a request and return the result of its reply.

    With ``unpickle_errors=False`` an error reply raises a
    :class:`RemoteError` instead of its unpickled exception.

    Raises
    ------
    Exception
        The remote handler's exception, with its type and remote traceback.
    CommClosedError
        When the comm closes first.
    """
    await comm.write(msg)
    if msg.get("reply", True) is False:
        return None
    return reply_result(await comm.read(), unpickle_errors=unpickle_errors)


def reply_result(response: object, *, unpickle_errors: bool = True) -> Any:
    """The result of a reply read off a comm; its exception raised for an error reply.

    Raises
    ------
    ProtocolError
        When ``response`` is not a reply.
    Exception
        The remote handler's exception (a :class:`RemoteError` with ``unpickle_errors=False``).
    """
    if not isinstance(response, dict):
        raise ProtocolError(f"Malformed reply: {type(response).__name__}")
    status = response.get("status")
    if status == "OK":
        return response.get("result")
    if status == "error":
        raise_remote_error(response, unpickle=unpickle_errors)
    raise ProtocolError(f"Malformed reply status {status!r}")


class BorrowedComm:
    """A comm of a :class:`ConnectionPool`, lent for requests (see :meth:`ConnectionPool.borrowed`).

    It knows whether the comm stands between two messages: a request cut off
    after its write, or answered with something that is not a reply, leaves
    the comm out of step, and the pool closes it instead of lending it again.
    """

    __slots__ = ("comm", "in_step")

    def __init__(self, comm: Comm) -> None:
        self.comm = comm
        self.in_step = True

    @property
    def same_process(self) -> bool:
        """Whether the peer is in this process (its replies need no checking)."""
        return self.comm.same_process

    async def request(self, msg: Mapping[str, Any], *, unpickle_errors: bool = True) -> Any:
        """Send request ``msg`` and return its result (see :func:`send_recv`)."""
        self.in_step = False
        await self.comm.write(msg)
        if msg.get("reply", True) is False:
            self.in_step = True
            return None
        response = await self.comm.read()
        # A reply, even an error reply, ends the exchange; anything else leaves the peer out of step.
        self.in_step = isinstance(response, dict) and response.get("status") in ("OK", "error")
        return reply_result(response, unpickle_errors=unpickle_errors)


class LogBuffer(logging.Handler):
    """Keeps the last ``n`` log records whose logger name starts with ``prefix``.

    Attached to the ``distributed`` logger, it sees what that logger's
    children emit at their effective level; nothing is formatted until asked.

    Parameters
    ----------
    prefix
        Logger names to keep, e.g. ``"distributed.scheduler"`` (which also
        covers ``distributed.scheduler.streams``).
    n
        Most records kept (default ``distributed.admin.log-length``).
    """

    def __init__(self, prefix: str, n: int | None = None) -> None:
        super().__init__()
        if n is None:
            n = int(dask.config.get("distributed.admin.log-length"))
        self.prefix = prefix
        self.records: deque[logging.LogRecord] = deque(maxlen=n)
        self._formatter = logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(self.prefix):
            self.records.append(record)

    def get(self, n: int | None = None, timestamps: bool = False) -> list[tuple[Any, ...]]:
        """The last ``n`` records (all when None), oldest first, as ``(level, text)``.

        With ``timestamps``, ``(level, text, created)``.
        """
        records = list(self.records)
        if n is not None:
            records = records[-n:] if n > 0 else []
        out: list[tuple[Any, ...]] = []
        for r in records:
            try:
                text = self._formatter.format(r)
            except Exception:  # a record whose arguments do not fit its message
                text = f"{r.name} - {r.levelname} - {r.msg!r} {r.args!r}"
            out.append((r.levelname, text, r.created) if timestamps else (r.levelname, text))
        return out

    def attach(self) -> None:
        """Start keeping records."""
        logging.getLogger("distributed").addHandler(self)

    def detach(self) -> None:
        """Stop keeping records (those kept stay readable)."""
        logging.getLogger("distributed").removeHandler(self)


class PeriodicCallback:
    """A function a server calls every ``interval`` seconds, from its loop, until stopped or the server closes.

    What ``Server.periodic_callbacks`` holds, as dask's holds tornado's
    ``PeriodicCallback``: :meth:`start`, :meth:`stop`, :meth:`is_running`
    and ``callback_time`` (milliseconds) work as there.  A call that raises
    is logged, and the next one runs all the same.
    """

    __slots__ = ("callback", "interval", "name", "_server", "_task")

    def __init__(self, server: Server, callback: Callable[[], Any], interval: float, name: str) -> None:
        self.callback = callback
        #: Seconds between calls.
        self.interval = interval
        self.name = name
        self._server = server
        self._task: asyncio.Task[Any] | None = None

    @property
    def callback_time(self) -> float:
        """Milliseconds between calls (tornado's name)."""
        return self.interval * 1000

    @callback_time.setter
    def callback_time(self, value: float) -> None:
        self.interval = value / 1000

    def start(self) -> None:
        """Start calling (nothing if already running)."""
        if not self.is_running():
            self._task = self._server.spawn(self._run(), name=self.name)

    def stop(self) -> None:
        """Stop calling."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def is_running(self) -> bool:
        """Whether it is calling."""
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                result = self.callback()
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Periodic callback %s failed", self.name)


class Server:
    """A message server: listens, checks messages, dispatches them to handlers.

    Parameters
    ----------
    handlers
        Request routes by op name.
    stream_handlers
        Routes for messages arriving on batched streams, by op name.
    """

    default_port = 0

    #: The loggers whose records ``get_logs`` returns (default: this class's module).
    log_prefix: str | None = None

    def __init__(
        self,
        handlers: Mapping[str, Route[Any]] | None = None,
        stream_handlers: Mapping[str, StreamRoute[Any]] | None = None,
        connection_limit: int = 512,
        timeout: float | None = None,
        connection_args: ConnectionArgs | None = None,
        listen_args: ConnectionArgs | None = None,
    ) -> None:
        #: Arguments of the comms this server opens (TLS context, require_encryption).
        self.connection_args: ConnectionArgs = connection_args or ConnectionArgs()
        #: Arguments of the listeners it starts.
        self.listen_args: ConnectionArgs = listen_args or ConnectionArgs()
        self.handlers: dict[str, Route[Any]] = dict(handlers or {})
        self.handlers.setdefault("get_logs", Route(m.GetLogs, self.handle_get_logs))
        self.handlers.setdefault("echo", Route(m.Echo, self.handle_echo))
        #: This server's recent log records (kept while it runs): those of its loggers (see ``log_prefix``).
        self.logs = LogBuffer(self.log_prefix or type(self).__module__)
        #: How late this server's event loop runs a periodic tick (see :mod:`distributed.loop_health`).
        self.loop_health = LoopHealth(type(self).__name__)
        #: Samples of this process and host (see :mod:`distributed.system_monitor`), taken while it runs.
        self.monitor = SystemMonitor()
        self.stream_handlers: dict[str, StreamRoute[Any]] = dict(stream_handlers or {})
        self.listeners: list[Listener] = []
        self.status = Status.init
        self.rpc = ConnectionPool(limit=connection_limit, timeout=timeout, connection_args=self.connection_args)
        self._background: set[asyncio.Task[Any]] = set()
        #: What the server calls periodically, by name (heartbeat, memory-monitor, worker-ttl, ...).
        self.periodic_callbacks: dict[str, PeriodicCallback] = {}
        # The tasks running handle_comm, one per accepted comm: close() ends them too.
        self._handlers: set[asyncio.Task[Any]] = set()
        self._comms: set[Comm] = set()
        # Accepted comms open now, those a route took over included.
        self._accepted = 0
        self._max_accepted = max_accepted_connections()
        # Connections refused at the limit since the last log line about them, and its time.
        self._refused = 0
        self._refusal_logged = -REFUSAL_LOG_INTERVAL
        # When the last warning about nearing the open-file limit was logged.
        self._fd_warned = -REFUSAL_LOG_INTERVAL
        self._finished: asyncio.Event | None = None
        self._start_lock: asyncio.Lock | None = None
        self._close_task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._address: str | None = None
        blocked = self._blocked_handlers()
        for name in blocked:
            self.handlers.pop(name, None)

    def _blocked_handlers(self) -> list[str]:
        return []

    # -- life cycle ---------------------------------------------------------
    async def start(self) -> Server:
        """Start the server (idempotent)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.status in (Status.running, Status.paused):
                return self
            if self.status in (Status.closing, Status.closed):
                raise RuntimeError(f"{type(self).__name__} is closed")
            check_event_loop(type(self).__name__)
            self.loop = asyncio.get_running_loop()
            self._finished = asyncio.Event()
            self.status = Status.starting
            self.logs.attach()
            self.loop_health.arm(self.loop)
            self.periodic(
                get_interval("distributed.admin.system-monitor.interval", 0.5), self._sample_system, "monitor"
            )
            try:
                await self.start_unsafe()
            except BaseException:
                self.status = Status.failed
                await self.close()
                raise
            if self.status == Status.starting:
                self.status = Status.running
        return self

    async def start_unsafe(self) -> None:
        """Subclass hook: listen and start background work."""

    def __await__(self) -> Any:
        return self.start().__await__()

    async def __aenter__(self) -> Any:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening, cancel background work, close comms."""
        if self.status == Status.closed:
            return
        if self._close_task is not None:
            await asyncio.shield(self._close_task)
            return
        self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    def stop(self) -> None:
        """Stop accepting connections; comms already open and background work go on until :meth:`close`.

        Synchronous, as in dask.distributed: for a caller that cannot await
        (a signal handler, a finaliser of a deployment library) and wants no
        newcomers while the server winds down.
        """
        for listener in self.listeners:
            listener.stop()

    async def _close(self) -> None:
        self.status = Status.closing
        self.loop_health.disarm()
        for listener in self.listeners:
            listener.stop()
        await self._end_owned_tasks()
        for comm in list(self._comms):
            comm.abort()
        await self.rpc.close()
        # Anything spawned while the comms and the pool closed.
        await self._end_owned_tasks()
        self.logs.detach()
        self.monitor.close()
        self.status = Status.closed
        if self._finished is not None:
            self._finished.set()

    def get_logs(self, n: int | None = None, timestamps: bool = False) -> list[tuple[Any, ...]]:
        """This server's recent log records as ``(level, text)`` (see :class:`LogBuffer`)."""
        return self.logs.get(n, timestamps)

    def handle_get_logs(self, comm: Comm, msg: m.GetLogs) -> list[tuple[Any, ...]]:
        """Answer ``get_logs``."""
        return self.get_logs(msg.get("n"), bool(msg.get("timestamps", False)))

    def handle_echo(self, comm: Comm, msg: m.Echo) -> Any:
        """Answer ``echo`` with the data sent (what a network benchmark bounces off a peer)."""
        return msg.get("data")

    async def finished(self) -> None:
        """Wait until the server is closed."""
        if self._finished is None:
            self._finished = asyncio.Event()
        await self._finished.wait()

    async def _end_owned_tasks(self) -> None:
        """Cancel and await the background and comm-handler tasks, until none is left.

        A task may spawn another as it ends (a stream handler's cleanup), hence
        the loop; one that swallowed its cancellation (it can happen inside
        ``asyncio.wait_for`` when the inner call finishes at the same moment) is
        cancelled again after a second rather than awaited forever.
        """
        current = asyncio.current_task()
        while True:
            tasks = [t for t in (*self._background, *self._handlers) if t is not current and not t.done()]
            if not tasks:
                return
            for t in tasks:
                t.cancel()
            done, _ = await asyncio.wait(tasks, timeout=1.0)
            for t in done:
                if not t.cancelled():
                    t.exception()  # retrieved: the task's own callbacks logged what matters

    # -- background work ----------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task owned by this server (cancelled and awaited on close).

        On a closed server the task is cancelled at once: nothing would end it later.
        """
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        if self.status == Status.closed:
            task.cancel()
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            logger.error("Background task %s failed", task.get_name(), exc_info=exc)

    def periodic(self, interval: float, func: Callable[[], Any], name: str | None = None) -> PeriodicCallback:
        """Call ``func`` every ``interval`` seconds until the server closes (or the callback is stopped).

        The callback is kept in :attr:`periodic_callbacks` under ``name``.
        """
        callback = PeriodicCallback(self, func, interval, name or repr(func))
        self.periodic_callbacks[callback.name] = callback
        callback.start()
        return callback

    # -- listening and dispatch ---------------------------------------------
    async def listen(self, addr: str, default_host: str | None = None) -> None:
        """Listen at ``addr`` with :attr:`listen_args`.

        ``addr`` is ``"tcp://host:port"``, ``"tls://host:port"`` or ``"inproc://"``.
        On every interface, the server announces ``default_host`` when given,
        else the outward interface's address (see :mod:`distributed.comm.addressing`).
        """
        listener = listen(addr, self.handle_comm, default_host=default_host, **self.listen_args)
        await listener.start()
        self.listeners.append(listener)
        if self._address is None:
            self._address = listener.contact_address

    async def listen_first_free(self, addrs: Sequence[str], default_host: str | None = None) -> None:
        """Listen at the first of ``addrs`` whose port is free (the addresses of a port range, in order).

        Raises
        ------
        OSError
            When every port is taken (``EADDRINUSE``, naming the range), or
            listening fails for another reason.
        """
        for addr in addrs[:-1]:
            try:
                await self.listen(addr, default_host)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
            else:
                return
        try:
            await self.listen(addrs[-1], default_host)
        except OSError as e:
            if e.errno == errno.EADDRINUSE and len(addrs) > 1:
                raise OSError(errno.EADDRINUSE, f"Every port from {addrs[0]} to {addrs[-1]} is in use") from e
            raise

    @property
    def address(self) -> str:
        """The contact address of the first listener."""
        if self._address is None:
            raise ValueError(f"{type(self).__name__} is not listening yet")
        return self._address

    @property
    def listen_address(self) -> str:
        """The listen address of the first listener."""
        if not self.listeners:
            raise ValueError(f"{type(self).__name__} is not listening yet")
        return self.listeners[0].listen_address

    @property
    def port(self) -> int:
        """The port of the first TCP or TLS listener (0 when in process)."""
        addr = self.address
        if addr.startswith(("tcp://", "tls://")):
            return int(addr.rsplit(":", 1)[1])
        return 0

    async def handle_comm(self, comm: Comm) -> None:
        """Answer requests on ``comm`` until it closes or a route takes it.

        The task running this belongs to the server from here on: ``close()``
        cancels and awaits it, with whatever route took the comm over.
        """
        if self.status == Status.closed:
            # Accepted as the listener stopped: nothing would end this handler.
            comm.abort()
            return
        if self._accepted >= self._max_accepted:
            self._refuse(comm)
            return
        self._accepted += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self._comms.add(comm)
        handed_over = False
        try:
            while True:
                try:
                    msg = await comm.read()
                except (CommClosedError, ProtocolError):
                    return
                if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
                    await self._reply(
                        comm,
                        True,
                        error_message(
                            ValueError(f"A request must be a mapping with a string 'op', got {type(msg).__name__}")
                        ),
                    )
                    continue
                op = msg["op"]
                reply = msg.get("reply", True) is not False
                route = self.handlers.get(op)
                if route is None:
                    await self._reply(comm, reply, error_message(ValueError(f"Unknown operation {op!r}")))
                    continue
                problem = route.check(msg)
                if problem is not None:
                    await self._reply(comm, reply, error_message(ValueError(f"Malformed {op!r} message: {problem}")))
                    continue
                if route.takes_comm:
                    handed_over = True
                    self._comms.discard(comm)
                    await route.func(comm, msg)
                    return
                sent: Callable[[], None] | None = None
                try:
                    result = route.func(comm, msg)
                    if inspect.isawaitable(result):
                        result = await result
                    if type(result) is ReplyThen:
                        result, sent = result.result, result.sent
                    response: dict[str, Any] = {"status": "OK", "result": result}
                except (asyncio.CancelledError, GeneratorExit):
                    raise
                except Exception as e:
                    if self.status not in (Status.closing, Status.closed):
                        logger.debug("Handler %r raised", op, exc_info=True)
                    response = error_message(e, sys.exc_info()[2])
                try:
                    if not await self._reply(comm, reply, response):
                        return
                finally:
                    if sent is not None:
                        sent()
        finally:
            self._accepted -= 1
            if task is not None:
                self._handlers.discard(task)
            if not handed_over:
                self._comms.discard(comm)
                if not comm.closed():
                    comm.abort()

    def _sample_system(self) -> None:
        limit = open_file_limit()
        try:
            fds = self.monitor.update().get("num_fds")
        except OSError as e:
            if e.errno != errno.EMFILE:
                raise
            fds = limit  # at the limit: not even /proc can be opened to count
        if fds is None or limit is None or fds < 0.95 * limit:
            return
        now = time.monotonic()
        if now - self._fd_warned >= REFUSAL_LOG_INTERVAL:
            self._fd_warned = now
            logger.warning(
                "%s at %s has %d files open of the %d this process may open (ulimit -n): past it, workers and "
                "clients cannot connect. Raise the hard limit (ulimit -Hn, systemd's LimitNOFILE, "
                "/etc/security/limits.conf); the scheduler raises its soft limit to it as it starts",
                type(self).__name__,
                self._address,
                fds,
                limit,
            )

    def _refuse(self, comm: Comm) -> None:
        """Close a comm accepted past the limit; log it unless another was logged lately."""
        comm.abort()
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged >= REFUSAL_LOG_INTERVAL:
            logger.warning(
                "%s at %s refused %d connection(s) (the last from %s): %d accepted connections are open, "
                "the limit set by distributed.comm.max-accepted-connections",
                type(self).__name__,
                self._address,
                self._refused,
                comm.peer_address,
                self._accepted,
            )
            self._refused = 0
            self._refusal_logged = now

    async def _reply(self, comm: Comm, reply: bool, response: dict[str, Any]) -> bool:
        if not reply:
            return True
        try:
            await comm.write(response)
            return True
        except CommClosedError:
            return False
        except Exception as e:
            # The result itself could not be encoded: say so instead.
            try:
                await comm.write(error_message(e))
                return True
            except Exception:
                return False

    def dispatch_stream(self, msgs: Any, origin: str = "", check: bool = True) -> None:
        """Run the stream handlers for a batch of messages.

        A malformed message is logged and skipped; the rest of the batch runs.
        ``check=False`` trusts the messages' shape (they come from this
        process, see ``Comm.same_process``).
        """
        if isinstance(msgs, dict):
            msgs = (msgs,)
        if not isinstance(msgs, (list, tuple)):
            logger.warning("Dropping malformed batch from %s: %s", origin, type(msgs).__name__)
            return
        handlers = self.stream_handlers
        for msg in msgs:
            op = msg.get("op") if isinstance(msg, dict) else None
            route = handlers.get(op) if isinstance(op, str) else None
            if route is None:
                logger.warning("Dropping unknown stream message %r from %s", op, origin)
                continue
            problem = route.check(msg) if check else None
            if problem is not None:
                logger.warning("Dropping malformed %r message from %s: %s", op, origin, problem)
                continue
            try:
                result = route.func(msg)
                if result is not None and inspect.isawaitable(result):
                    self.spawn(_consume(result), name=f"stream-{op}")
            except Exception:
                logger.exception("Stream handler %r failed on a message from %s", op, origin)
                if dask.config.get("distributed.admin.pdb-on-err", False):
                    raise


async def _consume(aw: Awaitable[Any]) -> None:
    await aw


class ConnectionPool:
    """Reusable comms to many addresses, with a limit on how many are open.

    Parameters
    ----------
    limit
        Most comms open at once.
    timeout
        Connect timeout in seconds (default from config).
    connection_args
        Passed to :func:`~distributed.comm.connect` (TLS context,
        ``require_encryption``), from ``Security.get_connection_args(role)``.
    unpickle_errors
        Whether a remote error's pickled exception is rebuilt (else calls
        raise :class:`RemoteError`, see :func:`rebuild_exception`); may be
        changed later, as a scheduler that may not unpickle does.
    """

    def __init__(
        self,
        limit: int = 512,
        timeout: float | None = None,
        connection_args: ConnectionArgs | None = None,
        unpickle_errors: bool = True,
    ) -> None:
        self.limit = limit
        self.timeout = timeout
        self.connection_args: ConnectionArgs = connection_args or ConnectionArgs()
        self.unpickle_errors = unpickle_errors
        self.available: defaultdict[str, set[Comm]] = defaultdict(set)
        self.occupied: defaultdict[str, set[Comm]] = defaultdict(set)
        # Comms open or being opened; never above ``limit``.
        self._slots = 0
        # Set whenever a comm is given back or a slot freed, so that callers
        # waiting at the limit look again.
        self._changed: asyncio.Event | None = None
        self._closed = False

    @property
    def open(self) -> int:
        """Number of open comms."""
        return sum(map(len, self.available.values())) + sum(map(len, self.occupied.values()))

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _free_slot(self) -> None:
        self._slots -= 1
        self._notify()

    async def connect(self, addr: str, timeout: float | None = None) -> Comm:
        """A comm to ``addr``, reused when one is idle.

        At the limit, idle comms to other addresses are closed to make room;
        when every comm is busy this waits until one is given back.  A new
        connection gets ``timeout`` seconds (the pool's own when None).
        """
        addr = normalize_address(addr)
        while True:
            if self._closed:
                raise CommClosedError("Connection pool is closed")
            idle = self.available.get(addr)
            while idle:
                comm = idle.pop()
                if not comm.closed():
                    self.occupied[addr].add(comm)
                    return comm
                self._free_slot()
            if idle is not None:
                # Emptied: no entry is kept for an address without comms (workers come and go).
                del self.available[addr]
            if self._slots >= self.limit:
                self._collect_idle()
            if self._slots < self.limit:
                break
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            await self._changed.wait()
        self._slots += 1
        try:
            comm = await connect(addr, timeout=self.timeout if timeout is None else timeout, **self.connection_args)
        except BaseException:
            self._free_slot()
            raise
        if self._closed:
            comm.abort()
            self._free_slot()
            raise CommClosedError("Connection pool is closed")
        self.occupied[addr].add(comm)
        return comm

    def _collect_idle(self) -> None:
        for comms in self.available.values():
            for comm in comms:
                comm.abort()
                self._free_slot()
        self.available.clear()

    def reuse(self, addr: str, comm: Comm) -> None:
        """Give back a comm obtained from :meth:`connect`."""
        addr = normalize_address(addr)
        busy = self.occupied.get(addr)
        if busy is None or comm not in busy:
            return  # given back already (or the pool was closed meanwhile)
        busy.discard(comm)
        if not busy:
            del self.occupied[addr]
        if comm.closed() or self._closed:
            if not comm.closed():
                comm.abort()
            self._free_slot()
        else:
            self.available[addr].add(comm)
            self._notify()

    def release(self, addr: str, comm: Comm) -> None:
        """Close a comm obtained from :meth:`connect` instead of reusing it."""
        comm.abort()
        self.reuse(addr, comm)

    @contextlib.asynccontextmanager
    async def borrowed(self, addr: str, timeout: float | None = None) -> AsyncIterator[BorrowedComm]:
        """A comm to ``addr`` for requests in an ``async with`` block, given back after it.

        A comm left between two messages goes back to the pool, even when the
        block raised (an error reply leaves the comm in step); one cut off
        mid-request (the peer went, a timeout or a cancellation struck, a
        reply was malformed) is closed, never lent again.

        Parameters
        ----------
        timeout
            Bounds getting the comm: waiting for a free slot and connecting
            (default: only the connect timeout bounds the connecting).
        """
        if timeout is None:
            comm = await self.connect(addr)
        else:
            comm = await wait_for(self.connect(addr), timeout)
        borrowed = BorrowedComm(comm)
        try:
            yield borrowed
        finally:
            if not borrowed.in_step:
                comm.abort()
            self.reuse(addr, comm)

    def __call__(self, addr: str) -> RemoteRequests:
        """Requests by name to the server at ``addr`` over this pool, as dask's ``pool(addr).who_has(...)``."""
        return RemoteRequests(functools.partial(self._call_by_name, addr))

    async def _call_by_name(self, addr: str, op: str, fields: dict[str, Any]) -> Any:
        return await self.call(addr, m.request(op, **fields))

    async def call(self, addr: str, msg: Mapping[str, Any]) -> Any:
        """Send request ``msg`` to ``addr`` and return its result (a comm cut off mid-call is closed)."""
        async with self.borrowed(addr) as comm:
            return await comm.request(msg, unpickle_errors=self.unpickle_errors)

    async def call_once(self, addr: str, msg: Mapping[str, Any]) -> Any:
        """Send request ``msg`` to ``addr`` over a connection of its own, closed after (never pooled)."""
        comm = await connect(addr, timeout=self.timeout, **self.connection_args)
        try:
            return await send_recv(comm, msg, unpickle_errors=self.unpickle_errors)
        finally:
            comm.abort()

    def remove(self, addr: str) -> None:
        """Close all idle comms to ``addr``."""
        addr = normalize_address(addr)
        for comm in self.available.pop(addr, set()):
            comm.abort()
            self._free_slot()

    async def close(self) -> None:
        """Close every comm (callers waiting for one get CommClosedError)."""
        self._closed = True
        for d in (self.available, self.occupied):
            for comms in d.values():
                for comm in comms:
                    comm.abort()
            d.clear()
        self._notify()


class RemoteRequests:
    """A remote server's requests by name: ``await handle.who_has(keys=["x"])`` sends ``who_has``.

    Code written for dask calls servers this way (``worker.scheduler.<op>(...)``,
    ``rpc(addr).<op>(...)``).  The server checks the fields against the op's
    declaration and refuses an op it does not serve, by name.
    """

    __slots__ = ("_send",)

    def __init__(self, send: Callable[[str, dict[str, Any]], Awaitable[Any]]) -> None:
        self._send = send

    def __getattr__(self, op: str) -> Callable[..., Awaitable[Any]]:
        if op.startswith("_"):
            raise AttributeError(op)
        send = self._send

        async def request(**fields: Any) -> Any:
            return await send(op, fields)

        request.__name__ = request.__qualname__ = op
        return request


class rpc:
    """Calls to one remote server over a comm of its own.

    Examples
    --------
    >>> async with rpc("tcp://127.0.0.1:8786") as r:  # doctest: +SKIP
    ...     info = await r.call("identity")
    """

    def __init__(
        self, address: str, timeout: float | None = None, connection_args: ConnectionArgs | None = None
    ) -> None:
        self.address = normalize_address(address)
        self.timeout = timeout
        self.connection_args: ConnectionArgs = connection_args or ConnectionArgs()
        self._comm: Comm | None = None
        self._lock: asyncio.Lock | None = None

    async def call(self, op: str, **fields: Any) -> Any:
        """Send the request ``op`` with ``fields`` and return the reply's result.

        The server checks the request against the declaration of ``op``.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._comm is None or self._comm.closed():
                self._comm = await connect(self.address, timeout=self.timeout, **self.connection_args)
            try:
                return await send_recv(self._comm, m.request(op, **fields))
            except (CommClosedError, ProtocolError):
                self._comm.abort()
                self._comm = None
                raise

    def __getattr__(self, op: str) -> Callable[..., Awaitable[Any]]:
        """The request ``op`` by name, as dask's ``rpc(addr).<op>(**fields)``."""
        if op.startswith("_"):
            raise AttributeError(op)
        return RemoteRequests(self._call_fields).__getattr__(op)

    async def _call_fields(self, op: str, fields: dict[str, Any]) -> Any:
        return await self.call(op, **fields)

    async def close_rpc(self) -> None:
        """Close the comm."""
        if self._comm is not None:
            await self._comm.close()
            self._comm = None

    async def __aenter__(self) -> rpc:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_rpc()


_servers: weakref.WeakSet[Server] = weakref.WeakSet()
