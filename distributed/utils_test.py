"""The test harness: what this suite, and dask's own tests, are written with.

``gen_test`` and ``gen_cluster`` turn ``async def`` tests into plain test
functions that run in a fresh event loop; ``cluster`` starts a scheduler and
workers in child processes; the pytest fixtures (``loop``, ``cleanup``,
``cluster_fixture``, ``s``, ``a``, ``b``, ``client`` and its alias ``c``) form
the closed chain that dask's ``test_distributed.py`` imports.

Every harness entry point turns on validation (state invariants checked after
every event) and checks at teardown that no thread, child process or socket
was left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import gc
import inspect
import io
import logging
import random
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import dask
import dask.config
import psutil
import pytest

from distributed.client import Client
from distributed.client.client import global_clients
from distributed.scheduler import Scheduler
from distributed.security import Security
from distributed.spill import SpillBuffer
from distributed.utils import LoopRunner, sync
from distributed.worker import Worker

logger = logging.getLogger(__name__)

__all__ = [
    "a",
    "async_poll_for",
    "b",
    "c",
    "captured_handler",
    "captured_logger",
    "check_process_leak",
    "check_thread_leak",
    "cleanup",
    "client",
    "cluster",
    "cluster_fixture",
    "config_for_cluster_tests",
    "dec",
    "div",
    "double",
    "gen_cluster",
    "gen_test",
    "inc",
    "loop",
    "loop_in_thread",
    "new_config",
    "poll_for",
    "popen",
    "randominc",
    "reset_config",
    "run_async",
    "s",
    "scheduler_process",
    "slowadd",
    "slowdec",
    "slowidentity",
    "slowinc",
    "slowsum",
    "throws",
    "varying",
    "wait_for",
    "wait_for_state",
]

T = TypeVar("T")

_TEST_TIMEOUT = 30


# -- small task functions used across tests ----------------------------------------------
def inc(x: Any) -> Any:
    """``x + 1``."""
    return x + 1


def dec(x: Any) -> Any:
    """``x - 1``."""
    return x - 1


def div(x: Any, y: Any) -> Any:
    """``x / y``."""
    return x / y


def throws(x: Any) -> Any:
    """Always raise ``RuntimeError``."""
    raise RuntimeError("hello!")


def slowinc(x: Any, delay: float = 0.02) -> Any:
    """``x + 1`` after a pause (a task that takes a little time)."""
    time.sleep(delay)
    return x + 1


def slowadd(x: Any, y: Any, delay: float = 0.02) -> Any:
    """``x + y`` after a pause."""
    time.sleep(delay)
    return x + y


_varying_state: dict[str, int] = {}


def slowdec(x: Any, delay: float = 0.02) -> Any:
    """``x - 1`` after a pause."""
    time.sleep(delay)
    return x - 1


def slowidentity(*args: Any, delay: float = 0.02) -> Any:
    """Its one argument (or the tuple of several) after a pause."""
    time.sleep(delay)
    return args[0] if len(args) == 1 else args


def slowsum(seq: Sequence[Any], delay: float = 0.02) -> Any:
    """``sum(seq)`` after a pause."""
    time.sleep(delay)
    return sum(seq)


def double(x: Any) -> Any:
    """``x * 2``."""
    return x * 2


def randominc(x: Any, scale: float = 1) -> Any:
    """``x + 1`` after a pause of up to ``scale`` seconds (different each call)."""
    time.sleep(random.random() * scale)
    return x + 1


def varying(items: Sequence[Any]) -> Callable[[], Any]:
    """A function returning the next of ``items`` on each call (raising exceptions).

    The position lives in a module global, so it survives pickling to
    in-process workers: the function is a partial of a module-level function,
    pickled by reference.
    """
    key = f"varying-{id(items)}-{time.monotonic_ns()}"
    _varying_state[key] = 0
    return functools.partial(_varying_next, key, tuple(items))


def _varying_next(key: str, items: tuple[Any, ...]) -> Any:
    i = _varying_state.get(key, 0)
    if i >= len(items):
        raise IndexError("varying exhausted")
    _varying_state[key] = i + 1
    x = items[i]
    if isinstance(x, BaseException) or (isinstance(x, type) and issubclass(x, BaseException)):
        raise x
    return x


# -- waiting on conditions -------------------------------------------------------------------
def poll_for(predicate: Callable[[], bool], timeout: float = 20, period: float = 0.01, what: str = "") -> None:
    """Wait until ``predicate()`` is true, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(period)


async def async_poll_for(predicate: Callable[[], bool], timeout: float = 20, period: float = 0.01) -> None:
    """Async :func:`poll_for`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached within {timeout} s: {predicate}")
        await asyncio.sleep(period)


async def wait_for(aw: Coroutine[Any, Any, T], timeout: float) -> T:
    """Await ``aw`` for at most ``timeout`` seconds; fail the test with a clear message after."""
    try:
        async with asyncio.timeout(timeout):
            return await aw
    except TimeoutError:
        pytest.fail(f"timed out after {timeout} s")


# -- logs and config ------------------------------------------------------------------------
@contextlib.contextmanager
def captured_logger(
    logger: str | logging.Logger, level: int = logging.INFO, propagate: bool | None = None
) -> Iterator[io.StringIO]:
    """What ``logger`` logs at ``level`` and above in the block, as text in the yielded ``StringIO``.

    ``propagate`` set, the logger passes records to its parents (or not) meanwhile.
    """
    if isinstance(logger, str):
        logger = logging.getLogger(logger)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    if propagate is not None:
        logger.propagate = propagate
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


@contextlib.contextmanager
def captured_handler(handler: logging.StreamHandler[Any]) -> Iterator[io.StringIO]:
    """What ``handler`` writes in the block, as text in the yielded ``StringIO`` (instead of its stream)."""
    stream = io.StringIO()
    old = handler.setStream(stream)
    try:
        yield stream
    finally:
        handler.setStream(old)


#: dask's configuration as this module found it (what :func:`reset_config` goes back to).
_CONFIG_AT_IMPORT = copy.deepcopy(dask.config.config)


def reset_config() -> None:
    """Put dask's configuration back to what it was when ``distributed.utils_test`` was imported."""
    dask.config.config.clear()
    dask.config.config.update(copy.deepcopy(_CONFIG_AT_IMPORT))


@contextlib.contextmanager
def new_config(config: dict[str, Any]) -> Iterator[None]:
    """dask's configuration replaced whole by ``config`` (nested dicts) in the block."""
    saved = copy.deepcopy(dask.config.config)
    dask.config.config.clear()
    dask.config.config.update(copy.deepcopy(config))
    try:
        yield
    finally:
        dask.config.config.clear()
        dask.config.config.update(saved)


async def wait_for_state(
    key: Any, state: str | Collection[str], dask_worker: Worker | Scheduler, *, interval: float = 0.01
) -> None:
    """Wait until task ``key`` is in ``state`` (or one of several) on a worker or the scheduler.

    Without a deadline of its own: the test's timeout ends a wait that never ends.
    """
    states = {state} if isinstance(state, str) else set(state)
    while True:
        tasks: Mapping[Any, Any] = dask_worker.tasks
        ts = tasks.get(key)
        if ts is not None and ts.state in states:
            return
        await asyncio.sleep(interval)


# -- leak checks ------------------------------------------------------------------------------
def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


_IGNORED_THREAD_PREFIXES = ("pytest_timeout", "asyncio_", "ThreadPoolExecutor", "Dask-Offload", "QueueFeederThread")


@contextlib.contextmanager
def check_thread_leak(timeout: float = 10) -> Iterator[None]:
    """Fail if the block leaves threads running."""
    before = _threads()
    yield
    deadline = time.monotonic() + timeout
    while True:
        bad = [
            t
            for t in _threads() - before
            if not t.name.startswith(_IGNORED_THREAD_PREFIXES) and not t.name.startswith("future-callback")
        ]
        if not bad:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Leaked threads: {[t.name for t in bad]}")
        time.sleep(0.02)


def _children() -> set[int]:
    pids: set[int] = set()
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return pids
    for p in children:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(p.cmdline())
        except psutil.Error:
            continue
        # multiprocessing's helpers live as long as this process, by design.
        if "resource_tracker" in cmdline or "forkserver" in cmdline:
            continue
        pids.add(p.pid)
    return pids


@contextlib.contextmanager
def check_process_leak(timeout: float = 20) -> Iterator[None]:
    """Fail (after killing them) if the block leaves child processes running."""
    before = _children()
    yield
    deadline = time.monotonic() + timeout
    while True:
        leaked = _children() - before
        if not leaked:
            return
        if time.monotonic() > deadline:
            for pid in leaked:
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
            pytest.fail(f"Leaked child processes: {sorted(leaked)}")
        time.sleep(0.05)


def _sockets() -> set[tuple[Any, ...]]:
    try:
        conns = psutil.Process().net_connections(kind="inet")
    except (psutil.Error, AttributeError):
        return set()
    return {(c.laddr, c.raddr, c.status) for c in conns if c.status in (psutil.CONN_LISTEN, psutil.CONN_ESTABLISHED)}


@contextlib.contextmanager
def check_socket_leak(timeout: float = 10) -> Iterator[None]:
    """Fail if the block leaves listening or established sockets open."""
    before = _sockets()
    yield
    deadline = time.monotonic() + timeout
    while True:
        leaked = _sockets() - before
        if not leaked:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Leaked sockets: {sorted(map(str, leaked))[:10]}")
        gc.collect()
        time.sleep(0.05)


@contextlib.contextmanager
def config_for_cluster_tests(**extra: Any) -> Iterator[None]:
    """Reset dask config for a test and turn validation on."""
    with dask.config.set(
        {
            "distributed.scheduler.validate": True,
            "distributed.worker.validate": True,
            "distributed.comm.timeouts.connect": "10s",
            **extra,
        }
    ):
        yield


@contextlib.contextmanager
def clean(
    threads: bool = True, processes: bool = True, sockets: bool = True, instances: bool = True, **kwargs: Any
) -> Iterator[None]:
    """Validation on, and leak checks around the block."""
    with contextlib.ExitStack() as stack:
        if processes:
            stack.enter_context(check_process_leak())
        if threads:
            stack.enter_context(check_thread_leak())
        if sockets:
            stack.enter_context(check_socket_leak())
        stack.enter_context(config_for_cluster_tests())
        yield
        _close_stale_clients()


def _close_stale_clients() -> None:
    for client in global_clients():
        if client.status != "closed" and not client.asynchronous:
            client.close()


def run_async(
    make: Callable[[], Coroutine[Any, Any, T]], timeout: float = _TEST_TIMEOUT, check_loop_errors: bool = True
) -> T:
    """Run the coroutine ``make()`` in a fresh event loop, with a deadline; return its result.

    Tasks still pending at the end are cancelled and awaited, so nothing
    outlives the loop.  With ``check_loop_errors`` the test fails on any error
    the loop reports to its exception handler (a task exception nobody
    retrieved, a callback that raised), which would otherwise only be logged.

    Examples
    --------
    >>> async def f():
    ...     return 1
    >>> run_async(f)
    1
    """
    errors: list[dict[str, Any]] = []

    async def main() -> T:
        if check_loop_errors:
            asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        async with asyncio.timeout(timeout):
            return await make()

    loop = asyncio.new_event_loop()
    try:
        result = loop.run_until_complete(main())
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    if errors:
        pytest.fail(f"The event loop reported errors: {errors}")
    return result


def _strip_signature(func: Callable[..., Any], n: int) -> inspect.Signature:
    """``func``'s signature without the ``n`` arguments the harness passes.

    The harness passes them positionally: the first ``n`` positional
    parameters, or a ``*workers`` catch-all.  What remains (parameters after
    them, keyword-only ones after ``*workers``) is for pytest to fill from
    fixtures and ``parametrize``.
    """
    sig = inspect.signature(func)
    kept: list[inspect.Parameter] = []
    dropped = 0
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            dropped = n  # ``*workers`` takes whatever the named ones left
            continue
        if dropped < n and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            dropped += 1
            continue
        kept.append(p)
    return sig.replace(parameters=kept)


# -- gen_test ---------------------------------------------------------------------------------
def gen_test(
    timeout: float = _TEST_TIMEOUT, clean_kwargs: dict[str, Any] | None = None, config: dict[str, Any] | None = None
) -> Callable[[Callable[..., Coroutine[Any, Any, Any]]], Callable[..., Any]]:
    """Run an ``async def`` test in a fresh event loop, with leak checks.

    Parameters
    ----------
    timeout
        Fail the test after this many seconds.
    clean_kwargs
        Which leak checks to run (see ``clean``).
    config
        dask config set for the duration of the test (``dask.config.set``).

    Examples
    --------
    >>> @gen_test()
    ... async def test_foo():
    ...     await asyncio.sleep(0.01)
    """
    if not isinstance(timeout, (int, float)):
        raise TypeError("gen_test(timeout=...) takes seconds; call it: @gen_test()")

    def decorator(func: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
        if not inspect.iscoroutinefunction(func):
            raise TypeError("gen_test decorates async def functions")

        @functools.wraps(func)
        def test_func(*args: Any, **kwargs: Any) -> Any:
            with clean(**(clean_kwargs or {})), dask.config.set(config or {}):
                return run_async(lambda: func(*args, **kwargs), timeout, check_loop_errors=False)

        test_func.__signature__ = inspect.signature(func)  # type: ignore[attr-defined]  # pytest reads it
        del test_func.__wrapped__  # keep pytest from seeing a coroutine function
        return test_func

    return decorator


# -- gen_cluster ------------------------------------------------------------------------------
def gen_cluster(
    nthreads: Sequence[tuple[str, int] | tuple[str, int, dict[str, Any]]] | None = None,
    scheduler: str = "127.0.0.1",
    timeout: float = _TEST_TIMEOUT,
    security: Security | None = None,
    Worker: type[Any] = Worker,
    client: bool = False,
    scheduler_kwargs: dict[str, Any] | None = None,
    worker_kwargs: dict[str, Any] | None = None,
    client_kwargs: dict[str, Any] | None = None,
    active_rpc_timeout: float = 1,
    config: dict[str, Any] | None = None,
    clean_kwargs: dict[str, Any] | None = None,
    allow_unclosed: bool = False,
    cluster_dump_directory: Any = None,
    should_check_state: bool = True,
) -> Callable[[Callable[..., Coroutine[Any, Any, Any]]], Callable[..., Any]]:
    """Run an ``async def`` test given a scheduler and workers (and a client).

    The test receives ``(c, s, a, b, ...)`` with ``client=True``, else
    ``(s, a, b, ...)``: an asynchronous Client, the Scheduler and one Worker
    per entry of ``nthreads`` (default ``[("127.0.0.1", 1), ("127.0.0.1", 2)]``),
    all in this process on real TCP sockets.  Afterwards the scheduler's and
    workers' state is validated, and everything is closed and checked for leaks.

    Further parameters of the test, after the workers (or keyword-only after
    ``*workers``), are filled by pytest: fixtures and ``pytest.mark.parametrize``.
    ``config`` is dask config set for the duration of the test.
    ``active_rpc_timeout``, ``allow_unclosed`` and ``cluster_dump_directory``
    are accepted as dask's harness has them and have no effect here (leak
    checks stay on).  ``security`` (a :class:`~distributed.security.Security`)
    is given to the scheduler, the workers and the client: with
    ``require_encryption`` they talk over ``tls://``.

    Examples
    --------
    >>> @gen_cluster(client=True)
    ... async def test_add(c, s, a, b):
    ...     assert await c.submit(operator.add, 1, 2) == 3
    """
    if nthreads is None:
        nthreads = [("127.0.0.1", 1), ("127.0.0.1", 2)]
    scheduler_kwargs = dict(scheduler_kwargs or {})
    worker_kwargs = dict(worker_kwargs or {})
    client_kwargs = dict(client_kwargs or {})
    if security is not None:
        for kwargs in (scheduler_kwargs, worker_kwargs, client_kwargs):
            kwargs.setdefault("security", security)
    worker_cls = Worker

    def decorator(func: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
        if not inspect.iscoroutinefunction(func):
            raise TypeError("gen_cluster decorates async def functions")
        n_fixed = 1 + len(nthreads) + (1 if client else 0)

        @functools.wraps(func)
        def test_func(*args: Any, **kwargs: Any) -> Any:
            async def run() -> Any:
                s = Scheduler(host=scheduler, port=0, **{"dashboard": False, "validate": True, **scheduler_kwargs})
                workers: list[Any] = []
                c: Client | None = None
                try:
                    await s.start()
                    for i, spec in enumerate(nthreads):
                        host, n = spec[0], spec[1]
                        extra: dict[str, Any] = dict(spec[2]) if len(spec) > 2 else {}
                        kw = {"nthreads": n, "name": i, "validate": True, **worker_kwargs, **extra}
                        if host:
                            kw.setdefault("host", host)
                        w = worker_cls(s.address, **kw)
                        workers.append(w)
                    await asyncio.gather(*(w.start() for w in workers))
                    await _wait_for_workers(s, len(workers))
                    if client:
                        c = await Client(s.address, asynchronous=True, **client_kwargs)
                    fixed: list[Any] = ([c] if client else []) + [s] + workers
                    result = await func(*fixed, *args, **kwargs)
                    if should_check_state:
                        s.validate_state()
                        for w in workers:
                            state = getattr(w, "state", None)
                            if state is not None:
                                state.validate_state()
                    return result
                finally:
                    if c is not None:
                        await c.close(asynchronous=True)
                    await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)
                    await s.close()
                    for w in workers:
                        data = getattr(w, "data", None)
                        if isinstance(data, dict):
                            data.clear()
                        elif isinstance(data, SpillBuffer):
                            data.fast.clear()  # its spilled part went with the directory

            with clean(**(clean_kwargs or {})), dask.config.set(config or {}):
                return run_async(run, timeout, check_loop_errors=False)

        test_func.__signature__ = _strip_signature(func, n_fixed)  # type: ignore[attr-defined]  # pytest reads it
        del test_func.__wrapped__  # keep pytest from seeing a coroutine function
        return test_func

    return decorator


async def _wait_for_workers(s: Scheduler, n: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while len(s.workers) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Only {len(s.workers)} of {n} workers registered")
        await asyncio.sleep(0.005)


# -- cluster (child processes) ----------------------------------------------------------------
@contextlib.contextmanager
def cluster(
    nworkers: int = 2,
    nanny: bool = False,
    worker_kwargs: dict[str, Any] | None = None,
    active_rpc_timeout: float = 10,
    scheduler_kwargs: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    should_check_state: bool = True,
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """A scheduler and ``nworkers`` workers, each in a child process.

    Yields ``({"address": scheduler_address}, [{"address": ..., "proc": weakref}, ...])``
    once every worker has registered.  With ``nanny=True`` each worker runs
    under a :class:`~distributed.Nanny` in a child process of its own (the
    worker in a grandchild); ``address`` is still the worker's, ``"nanny"``
    the nanny's and ``proc`` the nanny's process.  ``active_rpc_timeout`` and
    ``should_check_state`` are accepted as dask's harness has them and have no
    effect here.
    """
    from distributed.spawn import ServerProcess

    child_config = {"distributed.scheduler.validate": True, "distributed.worker.validate": True, **(config or {})}
    skw = {"host": "127.0.0.1", "port": 0, "dashboard": False, **(scheduler_kwargs or {})}
    sched = ServerProcess("scheduler", skw, config=child_config, name="scheduler")
    workers: list[Any] = []
    try:
        saddr = sched.start_sync(timeout=30)
        for i in range(nworkers):
            wkw = {
                "scheduler_ip": saddr,
                "nthreads": 1,
                "name": f"worker-{i}",
                "host": "127.0.0.1",
                **(worker_kwargs or {}),
            }
            if nanny:
                w = ServerProcess(
                    "worker", wkw, config=child_config, name=f"nanny-{i}", server_class="distributed.nanny.Nanny"
                )
            else:
                w = ServerProcess("worker", wkw, config=child_config, name=f"worker-{i}")
            workers.append(w)

        async def start_workers() -> None:
            # Together: each child spends most of its start importing, which the other CPU can share.
            await asyncio.gather(*(w.start(timeout=30) for w in workers))

        # A daemonic process may not start children: a nanny's process is not one.
        with dask.config.set({"distributed.worker.daemon": False} if nanny else {}):
            asyncio.run(start_workers())

        async def registered() -> dict[str, Any]:
            async with _scheduler_rpc(saddr) as r:
                info: dict[str, Any] = await r.call("identity")
                return dict(info["workers"])

        deadline = time.monotonic() + 20
        while len(info := asyncio.run(registered())) < nworkers:
            if time.monotonic() > deadline:
                raise TimeoutError("Workers did not register in time")
            time.sleep(0.05)
        if nanny:
            by_nanny = {d.get("nanny"): addr for addr, d in info.items()}
            described = [{"address": by_nanny[w.address], "nanny": w.address, "proc": weakref.ref(w)} for w in workers]
        else:
            described = [{"address": w.address, "proc": weakref.ref(w)} for w in workers]
        yield {"address": saddr}, described
    finally:

        async def close_workers() -> None:
            await asyncio.gather(*(w.close(timeout=10) for w in workers), return_exceptions=True)

        try:
            asyncio.run(close_workers())
        finally:
            for w in workers:
                w.kill()
        try:
            sched.close_sync(timeout=10)
        except Exception:
            sched.kill()


def _scheduler_rpc(addr: str) -> Any:
    from distributed.core import rpc

    return rpc(addr)


@contextlib.contextmanager
def popen(
    args: Sequence[str], capture_output: bool = False, terminate_timeout: float = 10, **kwargs: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a command for the duration of the block; terminate it afterwards."""
    out = subprocess.PIPE if capture_output else None
    proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT if capture_output else None, **kwargs)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(terminate_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def scheduler_process(port: int) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``dask scheduler`` on 127.0.0.1:``port``, no dashboard, for the block (its output captured)."""
    args = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port)]
    return popen([*args, "--no-dashboard"], capture_output=True)


# -- pytest fixtures (a closed chain, as dask's test module imports them) ----------------------
@pytest.fixture
def cleanup() -> Iterator[None]:
    """Validation on and leak checks around a test."""
    with clean():
        yield


@pytest.fixture
def loop_in_thread(cleanup: None) -> Iterator[Any]:
    """An event loop (a tornado IOLoop) running in a background thread."""
    runner = LoopRunner(name="test-loop")
    runner.start()

    async def current() -> Any:
        from tornado.ioloop import IOLoop

        return IOLoop.current()

    ioloop = sync(runner.loop, current)
    try:
        yield ioloop
    finally:
        _close_stale_clients()
        runner.stop()


@pytest.fixture
def loop(loop_in_thread: Any) -> Iterator[Any]:
    """The event loop tests pass as ``Client(..., loop=loop)``."""
    yield loop_in_thread


@pytest.fixture
def cluster_fixture(loop: Any) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """A scheduler and two workers in child processes."""
    with cluster() as (scheduler, workers):
        yield scheduler, workers


@pytest.fixture
def s(cluster_fixture: tuple[dict[str, Any], list[dict[str, Any]]]) -> dict[str, Any]:
    """The scheduler of ``cluster_fixture``."""
    return cluster_fixture[0]


@pytest.fixture
def a(cluster_fixture: tuple[dict[str, Any], list[dict[str, Any]]]) -> dict[str, Any]:
    """The first worker of ``cluster_fixture``."""
    return cluster_fixture[1][0]


@pytest.fixture
def b(cluster_fixture: tuple[dict[str, Any], list[dict[str, Any]]]) -> dict[str, Any]:
    """The second worker of ``cluster_fixture``."""
    return cluster_fixture[1][1]


@pytest.fixture
def client(loop: Any, cluster_fixture: tuple[dict[str, Any], list[dict[str, Any]]]) -> Iterator[Client]:
    """A synchronous Client of ``cluster_fixture``."""
    scheduler, _ = cluster_fixture
    with Client(scheduler["address"], loop=loop) as c:
        yield c


c = client


def snapshot_journal(src: str, dst: str) -> None:
    """Copy the committed state of the scheduler journal at ``src`` (open in a running scheduler) to ``dst``.

    What a scheduler killed at this moment would leave: SQLite's online backup
    copies the transactions committed so far, none in part.
    """
    source, target = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
