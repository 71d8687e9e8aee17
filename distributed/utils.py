"""Small helpers shared by the client, scheduler and worker.

The client's synchronous calls run through :func:`sync` here on purpose: dask
shortens tracebacks by dropping frames from ``distributed/(client|scheduler|
utils|worker).py``, so the frames between ``dask.compute`` and a user's failing
function must come from those files.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import os
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import dask
from dask.typing import no_default
from dask.utils import format_bytes, funcname, key_split, parse_bytes, parse_timedelta

from distributed.interfaces import get_ip, get_ip_interface, get_ipv6

if TYPE_CHECKING:
    from tornado.ioloop import IOLoop

logger = logging.getLogger(__name__)

__all__ = [
    "ErrorLogger",
    "Log",
    "Logs",
    "LoopRunner",
    "LoopTurns",
    "SyncMethodMixin",
    "TimeoutError",
    "call_after_io",
    "format_bytes",
    "format_dashboard_link",
    "funcname",
    "get_asyncio_loop",
    "get_ip",
    "get_ip_interface",
    "get_ipv6",
    "get_traceback",
    "has_arg",
    "import_term",
    "in_async_call",
    "io_loop_of",
    "is_kernel",
    "iscoroutinefunction",
    "key_split",
    "key_split_uncached",
    "lazy_attribute",
    "log_errors",
    "nbytes",
    "no_default",
    "open_port",
    "parse_bytes",
    "parse_timedelta",
    "refuse_unsupported",
    "scheduler_address",
    "sync",
    "unsupported",
    "wait_for",
    "write_json_whole",
    "yield_after_io",
]

T = TypeVar("T")

#: dask's ``key_split`` itself, without the cache its decorator adds.
_KEY_SPLIT: Callable[[Any], str] = key_split.__wrapped__


def key_split_uncached(key: Any) -> str:
    """What :func:`dask.utils.key_split` returns for ``key``, without going through its cache.

    ``key_split`` keeps the last 100,000 keys it was given with their results:
    on a scheduler that runs for hours and sees graph after graph, about 20 MB
    of keys of graphs long gone, filling over hours, which reads as a leak.
    Code that splits a key once and keeps what it needs calls this instead.
    """
    while type(key) is tuple and key:  # as key_split: a tuple key is named by its first element
        key = key[0]
    if type(key) is bytes:
        key = key.decode()
    return _KEY_SPLIT(key)


TimeoutError = asyncio.TimeoutError


def lazy_attribute(face: str, sources: Mapping[str, str], name: str) -> object:
    """The module ``__getattr__`` of a package face (PEP 562): ``name`` imported from its module on first use.

    A face that gathers the names of several modules, say the scheduler side and
    the client side of a package, then loads only what a caller asks for, and
    importing one module of the package does not load the others.

    Parameters
    ----------
    face
        The face's module name (its ``__name__``).
    sources
        Each name the face offers, and the module that defines it.

    Raises
    ------
    AttributeError
        For a name the face does not offer (Python then looks for a submodule of that name).
    """
    module = sources.get(name)
    if module is None:
        raise AttributeError(f"module {face!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    setattr(sys.modules[face], name, value)
    return value


def unsupported(where: str, name: str, why: str = "") -> NotImplementedError:
    """The error for parameter ``name`` of ``where`` given a value this package cannot honour yet.

    Raise it: ``raise unsupported("Worker", "security", "TLS is not implemented")``.
    ``why``, when given, follows the fixed message after a colon.

    Examples
    --------
    >>> unsupported("Scheduler", "services")
    NotImplementedError('Scheduler(services=...) is not supported yet')
    """
    message = f"{where}({name}=...) is not supported yet"
    return NotImplementedError(f"{message}: {why}" if why else message)


def refuse_unsupported(where: str, /, **given: bool) -> None:
    """Refuse, by name, the first parameter flagged ``True``: one given a value ``where`` cannot honour yet.

    The caller decides what counts as unsupported (``security is not None``,
    ``bool(services)``, ...), so a default or harmless value passes.

    Raises
    ------
    NotImplementedError
        ``"<where>(<name>=...) is not supported yet"``, e.g. ``LocalCluster(security=...)``.

    Examples
    --------
    >>> refuse_unsupported("Client.run", nanny=False)
    >>> refuse_unsupported("Client.run", nanny=True)
    Traceback (most recent call last):
    ...
    NotImplementedError: Client.run(nanny=...) is not supported yet
    """
    for name, refused in given.items():
        if refused:
            raise unsupported(where, name)


#: ``iscoroutinefunction`` answers by callable, keeping each alive so its id stays its own.
_coroutine_function_answers: dict[int, tuple[object, bool]] = {}


def iscoroutinefunction(f: object) -> bool:
    """Whether ``f`` is an ``async def`` function (or wraps one).

    Unwraps ``functools.partial`` and ``__wrapped__`` chains, and accepts
    callables whose ``__call__`` is ``async``.  dask asks this of every task's
    function before running it (a worker reuses one object per distinct
    function), and for some callables (toolz's ``compose``) the answer takes
    ``inspect.signature`` of each part: answers are kept for the last 1024.
    """
    if not callable(f):
        return False
    known = _coroutine_function_answers.get(id(f))
    if known is not None and known[0] is f:
        return known[1]
    answer = _iscoroutinefunction(f)
    if len(_coroutine_function_answers) >= 1024:
        _coroutine_function_answers.clear()
    _coroutine_function_answers[id(f)] = (f, answer)
    return answer


def _iscoroutinefunction(f: object) -> bool:
    while isinstance(f, functools.partial):
        f = f.func
    while True:
        if inspect.iscoroutinefunction(f):
            return True
        wrapped = getattr(f, "__wrapped__", None)
        if wrapped is None or wrapped is f:
            break
        f = wrapped
    # B004 is silenced below: the __call__ method itself is needed, not callable().
    call = getattr(type(f), "__call__", None) if not inspect.isroutine(f) else None  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


def get_asyncio_loop(loop: Any) -> asyncio.AbstractEventLoop:
    """The asyncio loop behind ``loop`` (an asyncio loop or a tornado IOLoop)."""
    inner = getattr(loop, "asyncio_loop", None)
    if isinstance(inner, asyncio.AbstractEventLoop):
        return inner
    if isinstance(loop, asyncio.AbstractEventLoop):
        return loop
    raise TypeError(f"Expected an event loop, got {type(loop).__name__}")


def io_loop_of(loop: asyncio.AbstractEventLoop, timeout: float = 10) -> IOLoop:
    """The tornado ``IOLoop`` over the asyncio ``loop``, as dask's objects hand out (``client.loop``).

    Code written for dask calls tornado's API on it (``add_callback``,
    ``call_later``, ``run_sync``); this package itself runs on the asyncio loop.
    Tornado keeps one ``IOLoop`` per asyncio loop: asked from another thread
    while the loop runs, the answer comes from the loop's own thread.

    Raises
    ------
    RuntimeError
        When tornado already holds an ``IOLoop`` for a loop that is not running
        (that one can only be asked for from the loop's thread).
    """
    from tornado.ioloop import IOLoop
    from tornado.platform.asyncio import AsyncIOLoop

    if _in_loop_thread(loop):
        return IOLoop.current()
    if loop.is_running():

        async def current() -> IOLoop:
            return IOLoop.current()

        return asyncio.run_coroutine_threadsafe(current(), loop).result(timeout)
    wrapper = AsyncIOLoop(asyncio_loop=loop, make_current=False)
    assert isinstance(wrapper, IOLoop)
    return wrapper


def _in_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def sync(
    loop: Any,
    func: Callable[..., Awaitable[T]],
    *args: Any,
    callback_timeout: float | str | None = None,
    **kwargs: Any,
) -> T:
    """Run ``func(*args, **kwargs)`` on ``loop`` (in another thread) and wait.

    Raises
    ------
    RuntimeError
        When called from the loop's own thread (that would deadlock), or when
        the loop is closed.
    TimeoutError
        After ``callback_timeout`` seconds.
    """
    aloop = get_asyncio_loop(loop)
    timeout = parse_timedelta(callback_timeout, "s") if callback_timeout is not None else None
    if aloop.is_closed():
        raise RuntimeError("IOLoop is closed")
    if _in_loop_thread(aloop):
        raise RuntimeError("sync() called from the event loop's own thread")

    async def f() -> T | _Raise:
        coro = func(*args, **kwargs)
        try:
            if timeout is not None:
                return await wait_for(coro, timeout)
            return await coro
        except asyncio.CancelledError as e:
            if type(e) is asyncio.CancelledError:
                raise
            # A subclass carries meaning (a cancelled future's key and reason);
            # asyncio would turn it into a bare cancellation on the way out.
            return _Raise(e)

    future = asyncio.run_coroutine_threadsafe(f(), aloop)
    try:
        result = future.result()
    except BaseException:
        future.cancel()
        raise
    if isinstance(result, _Raise):
        raise result.exc
    return result


class _Raise:
    """An exception to re-raise in the waiting thread."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class LoopRunner:
    """An asyncio event loop running in a daemon thread of its own.

    Parameters
    ----------
    loop
        An existing loop (asyncio, or a tornado IOLoop) to use instead of
        starting one; it is then not stopped by :meth:`stop`.
    name
        The name of the loop's thread.
    asynchronous
        Without ``loop``: use the loop running the caller (which must be one)
        instead of starting one, as an asynchronous object does.

    Raises
    ------
    RuntimeError
        With ``asynchronous=True`` and no ``loop``, when no loop runs the caller.
    """

    _started = 0

    def __init__(self, loop: Any = None, name: str = "distributed-loop", asynchronous: bool = False) -> None:
        if loop is None and asynchronous:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise RuntimeError("LoopRunner(asynchronous=True) needs a running event loop (or loop=)") from None
        self._own = loop is None
        self.name = name
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop
        if loop is not None:
            self.loop = get_asyncio_loop(loop)
        else:
            self.loop = asyncio.new_event_loop()

    def start(self) -> None:
        """Start the loop's thread (for a loop of our own)."""
        if not self._own or self.thread is not None:
            return
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()
            # Let cancelled tasks finish before closing.
            pending = asyncio.all_tasks(self.loop)
            for t in pending:
                t.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()
        ready.wait()

    def run_sync(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run a coroutine function on the loop and wait for its result."""
        return sync(self.loop, func, *args, **kwargs)

    def stop(self) -> None:
        """Stop and close the loop and join its thread (for a loop of our own)."""
        if self._own and self.thread is None and not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()  # created but never started
            return
        if not self._own or self.thread is None:
            return
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=10)
        self.thread = None

    @property
    def is_started(self) -> bool:
        """Whether the loop is running."""
        return self.loop.is_running()


def in_async_call(loop: Any, default: bool = False) -> bool:
    """Whether the caller runs on ``loop`` (an asyncio loop or a tornado IOLoop).

    When no loop runs the caller's thread and ``loop`` is not running either
    (it may yet be started in this thread), ``default``.
    """
    aloop = get_asyncio_loop(loop)
    try:
        return asyncio.get_running_loop() is aloop
    except RuntimeError:
        return default if not aloop.is_running() else False


class SyncMethodMixin:
    """An ``asynchronous`` property and a :meth:`sync` method for a class with a ``loop``.

    For classes whose methods are coroutines that callers outside the loop
    call as blocking functions: a subclass sets ``loop`` (the event loop its
    coroutines run on) and may set ``_asynchronous`` (its default when the
    loop is not running yet).
    """

    loop: Any
    _asynchronous: bool = False

    @property
    def asynchronous(self) -> bool:
        """Whether the caller runs on the object's loop (so calls return awaitables)."""
        try:
            return in_async_call(self.loop, default=getattr(self, "_asynchronous", False))
        except (RuntimeError, TypeError):
            return False

    def sync(
        self,
        func: Callable[..., Awaitable[T]],
        *args: Any,
        asynchronous: bool | None = None,
        callback_timeout: float | str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``func(*args, **kwargs)``: return its awaitable when asynchronous, else block for its result.

        Raises
        ------
        TimeoutError
            After ``callback_timeout`` seconds.
        """
        timeout = parse_timedelta(callback_timeout, "s") if callback_timeout is not None else None
        if asynchronous is None:
            asynchronous = self.asynchronous
        if asynchronous:
            aw = func(*args, **kwargs)
            return wait_for(aw, timeout) if timeout is not None else aw
        return sync(self.loop, func, *args, callback_timeout=timeout, **kwargs)


class Log(str):
    """Log records as one text, a record per line, shown in notebooks with warnings and errors highlighted.

    What :meth:`Cluster.get_logs <distributed.deploy.Cluster.get_logs>` gives per source.
    """

    def _repr_html_(self) -> str:
        import html

        def style(line: str) -> str:
            # The worst level a line names sets its colour (CRITICAL lines often also say ERROR).
            for level, colour in (("CRITICAL", "orangered"), ("ERROR", "crimson"), ("WARNING", "orange")):
                if level in line:
                    return f"font-family: monospace; margin: 0; font-weight: bold; color: {colour};"
            return "font-family: monospace; margin: 0;"

        return "\n".join(f'<p style="{style(line)}">{html.escape(line)}</p>' for line in self.split("\n"))


class Logs(dict[str, Log]):
    """Logs by source (``"Cluster"``, ``"Scheduler"``, a worker's address), shown in notebooks as folded sections."""

    def _repr_html_(self) -> str:
        import html

        parts = []
        for title, log in self.items():
            body = log._repr_html_() if isinstance(log, Log) else Log(str(log))._repr_html_()
            parts.append(
                f"<details>\n<summary style='display:list-item'>{html.escape(str(title))}</summary>\n{body}\n</details>"
            )
        return "\n".join(parts)


_strip_prefixes = (
    os.path.join("distributed", "worker"),
    os.path.join("distributed", "threadpool"),
    os.path.join("distributed", "scheduler"),
    os.path.join("tornado", "gen.py"),
    os.path.join("concurrent", "futures"),
    os.path.join("dask", "_task_spec"),
)


def get_traceback(tb: types.TracebackType | None = None) -> types.TracebackType | None:
    """The current (or given) traceback without our own leading frames.

    Only frames of the user's code should travel back to the client.
    """
    if tb is None:
        tb = __import__("sys").exc_info()[2]
    while tb is not None and any(p in tb.tb_frame.f_code.co_filename for p in _strip_prefixes):
        tb = tb.tb_next
    return tb


def format_exception_text(exc: BaseException) -> str:
    """A one-line description of ``exc``, shortened to the configured length."""
    limit = int(dask.config.get("distributed.admin.max-error-length", 10000))
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def import_term(name: str) -> Any:
    """Import ``"package.module.attribute"`` and return the attribute."""
    import importlib

    module_name, _, attr = name.rpartition(".")
    if not module_name:
        return importlib.import_module(name)
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        module = import_term(module_name)
    return getattr(module, attr)


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
    """Await ``aw`` for at most ``timeout`` seconds (``None``: no limit).

    Use this, not ``asyncio.wait_for``: before Python 3.12 that one loses a
    cancellation arriving in the same loop step as the result of what it
    waits on (it returns that result, or raises its error, instead).  A retry
    loop that catches the error then retries on, and a Ctrl-C or a close is
    ignored until its deadline.  Here ``aw`` runs in the caller's own task
    under :func:`asyncio.timeout`, so a cancellation always wins.

    Raises
    ------
    TimeoutError
        When ``aw`` has not finished after ``timeout`` seconds (it is cancelled).
    """
    if timeout is None:
        return await aw
    async with asyncio.timeout(timeout):
        return await aw


async def yield_after_io() -> None:
    """Let the event loop serve what is ready to read, and what that wakes, before the caller goes on.

    For work done in steps (a large graph, a long batch).  After ``asyncio.sleep(0)``
    the caller's next step runs first in the loop's next turn, before that turn's
    reads, and a task a read wakes runs in the turn after, behind the next step: a
    request that came during one step waited for two more.  A timer due now runs
    after the turn's reads, and the caller's task wakes behind the tasks they woke,
    so such a request is answered as soon as the current step ends (on uvloop's
    loop too).
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    timer = loop.call_at(loop.time(), _resolve, done)
    try:
        await done
    finally:
        timer.cancel()


def write_json_whole(path: str, obj: Any, default: Callable[[Any], Any] | None = None) -> None:
    """Write ``obj`` as JSON to ``path``, so that a reader polling for the file finds it whole.

    Written beside it under another name, then renamed over it: a client or
    worker waiting for a scheduler file never reads it empty or cut short.
    ``default`` is :func:`json.dump`'s.
    """
    import json
    import uuid

    partial = f"{path}.{uuid.uuid4().hex}.partial"
    try:
        with open(partial, "w") as f:
            json.dump(obj, f, indent=2, default=default)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise


def call_after_io(callback: Callable[[], object]) -> asyncio.TimerHandle:
    """Call ``callback`` once the event loop has served what is ready to read now, and the tasks that wakes.

    The callback's counterpart of :func:`yield_after_io`: a timer due now runs
    after the turn's reads, and the callback it schedules runs behind the
    tasks they woke (a request's handler among them).  Cancelling the handle
    returned stops it only until the timer has run.
    """
    loop = asyncio.get_running_loop()
    return loop.call_at(loop.time(), loop.call_soon, callback)


class LoopTurns:
    """Lets the event loop turn (:func:`yield_after_io`) once work done in pieces has held it ``budget`` seconds.

    For a handler that goes through many pieces of work, large and small, in
    one go: after each, :meth:`maybe` lets others in only once the pieces
    since the last turn took ``budget`` seconds.  A turn after every piece
    would cost small pieces (a client's thousands of small graphs) more than
    they take; none would hold the loop for as long as all take.

    Parameters
    ----------
    budget
        Seconds of work between two turns of the loop.
    """

    __slots__ = ("budget", "_since")

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self._since = time.perf_counter()

    async def maybe(self) -> None:
        """Let the loop turn if the work since the last turn (or since this was made) took ``budget``."""
        if time.perf_counter() - self._since >= self.budget:
            await self.now()

    async def now(self) -> None:
        """Let the loop turn now: for work this does not see, such as reading what comes next."""
        await yield_after_io()
        self._since = time.perf_counter()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def format_dashboard_link(host: str, port: int) -> str:
    """The dashboard's address from the ``distributed.dashboard.link`` template.

    The template may name ``scheme`` (``https`` when the dashboard has a TLS
    certificate, else ``http``), ``host``, ``port`` and any environment
    variable (``"{JUPYTERHUB_SERVICE_PREFIX}proxy/{port}/status"``).  An IPv6
    ``host`` is bracketed.

    Examples
    --------
    >>> format_dashboard_link("10.0.0.5", 8787)  # doctest: +SKIP
    'http://10.0.0.5:8787/status'
    """
    template = str(dask.config.get("distributed.dashboard.link", "{scheme}://{host}:{port}/status"))
    scheme = "https" if dask.config.get("distributed.scheduler.dashboard.tls.cert", None) else "http"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return template.format(**{**os.environ, "scheme": scheme, "host": host, "port": port})


def scheduler_address(
    address: str | None, port: int | None = None, scheduler_file: str | None = None, *, who: str = "worker"
) -> str:
    """The scheduler's address from what a worker or nanny was given.

    ``address`` wins over ``scheduler_file`` (JSON with an ``"address"``); a bare
    host gets ``tcp://`` and, when given, ``port``.

    Raises
    ------
    ValueError
        When neither an address nor a scheduler file is given.
    """
    if scheduler_file is not None and address is None:
        import json

        with open(scheduler_file) as f:
            address = json.load(f)["address"]
    if address is None:
        raise ValueError(f"A {who} needs the scheduler's address (or a scheduler_file)")
    if "://" in address:
        return address
    return f"tcp://{address}:{port}" if port is not None else f"tcp://{address}"


F = TypeVar("F", bound=Callable[..., Any])


class ErrorLogger:
    """What :func:`log_errors` gives without a function: a context manager, and a decorator."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt)):
            return
        module = "distributed"
        frame = tb
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        if frame is not None:
            module = frame.tb_frame.f_globals.get("__name__", module)
        logging.getLogger(module).error("%s: %s", type(exc).__name__, exc, exc_info=exc)

    def __call__(self, func: F) -> F:
        """``func`` (synchronous or a coroutine function) with its errors logged."""
        if iscoroutinefunction(func):

            @functools.wraps(func)
            async def logged_async(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return await func(*args, **kwargs)

            return cast(F, logged_async)

        @functools.wraps(func)
        def logged(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return cast(F, logged)


@overload
def log_errors(func: F, pdb: bool = False) -> F: ...


@overload
def log_errors(func: None = None, pdb: bool = False) -> ErrorLogger: ...


def log_errors(func: F | None = None, pdb: bool = False) -> F | ErrorLogger:
    """Log an exception on its way out, then let it go on: ``with log_errors():``, ``@log_errors``.

    For code whose errors would otherwise be lost (a callback, a background
    task): the exception is logged at ERROR with its traceback, by the logger
    of the module that raised it, and raised again.  A cancellation is not an
    error and is not logged.

    Parameters
    ----------
    func
        The function to wrap (synchronous or a coroutine function); None gives
        a context manager that is also a decorator (``@log_errors()``).
    pdb
        Refused when True: no interactive debugger is started in a server.

    Examples
    --------
    >>> with log_errors():  # doctest: +SKIP
    ...     risky()
    """
    if pdb:
        raise unsupported("log_errors", "pdb", "no debugger is started in a server")
    error_logger = ErrorLogger()
    return error_logger if func is None else error_logger(func)


def nbytes(frame: Any) -> int:
    """Bytes in ``frame``: ``len`` of bytes and bytearrays, ``nbytes`` of buffers (memoryviews, arrays).

    Examples
    --------
    >>> nbytes(b"abc"), nbytes(memoryview(bytes(10)).cast("B"))
    (3, 10)
    """
    if isinstance(frame, (bytes, bytearray)):
        return len(frame)
    try:
        return int(frame.nbytes)
    except AttributeError:
        return len(frame)


def open_port(host: str = "") -> int:
    """A TCP port free on ``host`` now (another process may take it before it is used).

    Examples
    --------
    >>> 0 < open_port("127.0.0.1") < 65536
    True
    """
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def has_arg(func: Callable[..., Any], argname: str) -> bool:
    """Whether ``func`` takes a parameter ``argname`` (by name; also through ``**kwargs``)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return argname in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def is_kernel() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel).

    Looks only at an IPython already imported: a process that never imported it
    is no kernel, and importing it here would cost a plain script its start-up.
    """
    # Read through getattr: IPython's own typing of get_ipython differs between releases.
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None
