"""A scheduler or worker running in a child process of its own.

Theory of operation
-------------------
:class:`ServerProcess` starts a child with the multiprocessing start method
named by ``distributed.worker.multiprocessing-method`` ("spawn" by default,
so the child never inherits the parent's threads or event loops).  Only plain
data crosses into the child: the server kind, its keyword arguments, extra
environment variables and a dask config mapping.

The child:

1. sets the environment variables and applies the config;
2. installs a SIGTERM handler on its event loop and ignores SIGINT (a
   terminal's Ctrl-C reaches the whole process group; the parent decides);
3. builds and starts the server and reports ``("address", addr)`` (or
   ``("error", text)``) on a one-way pipe;
4. runs until one of: a SIGTERM arrives, the server closes itself (a
   worker whose scheduler went away), or the parent process dies (noticed by
   polling ``os.getppid()``);
5. closes the server and exits with code 0 (a worker closes with
   ``nanny=False``: stopped from outside, it leaves its nanny, if any, to
   decide whether another worker follows).

The parent never waits without a deadline: :meth:`ServerProcess.close` sends
SIGTERM, waits up to ``timeout`` seconds, then SIGKILLs; every exited child is
joined so no zombie remains.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import dask.config

logger = logging.getLogger(__name__)

__all__ = ["CANCEL_GRACE", "ServerProcess", "WorkerProcess", "config_snapshot"]

#: Seconds a child whose start was cancelled gets to stop by itself (SIGTERM) before it is killed.
CANCEL_GRACE = 5.0

ServerKind = Literal["scheduler", "worker"]

#: How often a child checks whether its parent is still alive.
PARENT_POLL_INTERVAL = 0.5


class ServerProcess:
    """A :class:`~distributed.Scheduler` or :class:`~distributed.Worker` in a child process.

    Parameters
    ----------
    kind
        ``"scheduler"`` or ``"worker"``.
    kwargs
        Keyword arguments for the server's constructor.  They are pickled into
        the child, so they must be plain data (strings, numbers, lists, dicts).
        A worker takes the scheduler's address as ``scheduler_ip``.
    env
        Environment variables to set in the child before the server is built.
    name
        The child process's name (for ``ps`` and logs).
    config
        Dask config to apply in the child before the server is built: dotted
        keys (``{"distributed.worker.validate": True}``) are set, nested
        mappings are merged into the child's config.
    server_class
        The dotted import path of a server class to build instead of the
        default one for ``kind`` (e.g. a Worker subclass).
    log_level
        Level for the child's ``distributed`` logger (None leaves it alone).

    Examples
    --------
    >>> proc = ServerProcess("scheduler", {"host": "127.0.0.1", "dashboard": False})  # doctest: +SKIP
    >>> addr = proc.start_sync(timeout=30)  # doctest: +SKIP
    >>> proc.close_sync()  # doctest: +SKIP
    """

    def __init__(
        self,
        kind: ServerKind,
        kwargs: Mapping[str, Any],
        *,
        env: Mapping[str, str] | None = None,
        pre_spawn_env: Mapping[str, str] | None = None,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        server_class: str | None = None,
        log_level: int | str | None = None,
    ) -> None:
        if kind not in ("scheduler", "worker"):
            raise ValueError(f"kind must be 'scheduler' or 'worker', got {kind!r}")
        self.kind: ServerKind = kind
        self.kwargs = dict(kwargs)
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.pre_spawn_env = {str(k): str(v) for k, v in (pre_spawn_env or {}).items()}
        self.name = name or f"dask-{kind}"
        self.config: dict[str, Any] = dict(config or {})
        self.server_class = server_class
        self.log_level = log_level
        for label, value in (("kwargs", self.kwargs), ("config", self.config)):
            try:
                pickle.dumps(value)
            except Exception as e:
                raise TypeError(f"ServerProcess {label} must be plain, picklable data: {e}") from e
        self._address: str | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._pid: int | None = None
        self._exitcode: int | None = None

    # -- properties -------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The server's contact address (once :meth:`start` returned)."""
        if self._address is None:
            raise ValueError(f"{self!r} has not reported an address yet")
        return self._address

    @property
    def pid(self) -> int | None:
        """The child's process id (None before start)."""
        return self._pid

    @property
    def exitcode(self) -> int | None:
        """The child's exit code once it has exited and been joined."""
        if self._process is not None and self._exitcode is None:
            self._reap()
        return self._exitcode

    def is_alive(self) -> bool:
        """Whether the child is running (an exited child is joined here)."""
        proc = self._process
        if proc is None or self._exitcode is not None:
            return False
        if proc.is_alive():
            return True
        self._reap()
        return False

    def __repr__(self) -> str:
        state = "running" if self.is_alive() else ("exited" if self._exitcode is not None else "not started")
        return f"<ServerProcess {self.kind} {self.name!r} pid={self._pid} address={self._address!r} {state}>"

    # -- starting ---------------------------------------------------------------------
    def _launch(self) -> None:
        if self._process is not None:
            raise RuntimeError(f"{self!r} was started already")
        method = str(dask.config.get("distributed.worker.multiprocessing-method", "spawn") or "spawn")
        ctx = multiprocessing.get_context(method)
        reader, writer = ctx.Pipe(duplex=False)
        # The stubs type get_context() as BaseContext, which lacks Process.
        process: multiprocessing.process.BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_child_main,
            name=self.name,
            args=(
                self.kind,
                self.kwargs,
                self.env,
                self.config,
                self.server_class,
                self.log_level,
                writer,
                os.getpid(),
            ),
        )
        process.daemon = bool(dask.config.get("distributed.worker.daemon", True))
        with _environ_set(self.pre_spawn_env):
            process.start()
        writer.close()  # the child holds the only write end now
        self._process = process
        self._conn = reader
        self._pid = process.pid

    def _poll_report(self) -> bool:
        """Read the child's report if there is one; True once an address arrived."""
        conn = self._conn
        assert conn is not None
        try:
            ready = conn.poll()
        except (OSError, EOFError):
            ready = False
        if ready:
            try:
                kind, value = conn.recv()
            except (OSError, EOFError):
                kind, value = "eof", None
            if kind == "address":
                self._address = str(value)
                return True
            if kind == "error":
                self._after_failed_start()
                raise RuntimeError(f"The {self.kind} process failed to start:\n{value}")
        if not self.is_alive():
            code = self._exitcode
            self._after_failed_start()
            raise RuntimeError(f"The {self.kind} process exited with code {code} before reporting its address")
        return False

    def _after_failed_start(self) -> None:
        self.kill()

    async def start(self, timeout: float = 30) -> str:
        """Start the child and return its server's address once it is up.

        Raises
        ------
        TimeoutError
            When the server does not report its address within ``timeout``
            seconds (the child is killed).
        RuntimeError
            When the child fails to start its server.

        Cancelled (a signal, a close while starting), it asks the child to stop
        (SIGTERM) and waits up to :data:`CANCEL_GRACE` seconds before killing
        it: the child gives up its start and tears down what it had set up
        (preloads, plugins), as it does when stopped after starting.
        """
        self._launch()
        deadline = time.monotonic() + timeout
        delay = 0.005
        try:
            while not self._poll_report():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"The {self.kind} process did not start within {timeout} s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
        except asyncio.CancelledError:
            try:
                await self.close(timeout=CANCEL_GRACE)
            finally:
                self.kill()  # also when cancelled again while waiting
            raise
        except BaseException:
            self.kill()
            raise
        return self.address

    def start_sync(self, timeout: float = 30) -> str:
        """Like :meth:`start`, blocking the calling thread."""
        self._launch()
        deadline = time.monotonic() + timeout
        conn = self._conn
        assert conn is not None
        try:
            while not self._poll_report():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"The {self.kind} process did not start within {timeout} s")
                try:
                    conn.poll(min(remaining, 0.05))
                except (OSError, EOFError):
                    time.sleep(min(remaining, 0.05))
        except BaseException:
            self.kill()
            raise
        return self.address

    # -- stopping ---------------------------------------------------------------------
    def _terminate(self) -> bool:
        """Send SIGTERM; False when there is no live child."""
        proc = self._process
        if proc is None or not self.is_alive():
            return False
        try:
            proc.terminate()
        except (OSError, ValueError):
            return False
        return True

    async def close(self, timeout: float = 5) -> None:
        """Ask the child to close its server (SIGTERM); SIGKILL it after ``timeout`` s."""
        if self._terminate():
            deadline = time.monotonic() + timeout
            delay = 0.005
            while self.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
        self.kill()

    def close_sync(self, timeout: float = 5) -> None:
        """Like :meth:`close`, blocking the calling thread."""
        proc = self._process
        if self._terminate() and proc is not None:
            proc.join(timeout)
        self.kill()

    def kill(self) -> None:
        """SIGKILL the child if it still runs, and join it."""
        proc = self._process
        if proc is None:
            return
        if self._exitcode is None:
            try:
                if proc.is_alive():
                    proc.kill()
                proc.join(10)
            except ValueError:  # process object closed already
                pass
            self._reap()

    def _reap(self) -> None:
        proc = self._process
        if proc is None or self._exitcode is not None:
            return
        try:
            if proc.is_alive():
                return
            proc.join(0)
            code = proc.exitcode
        except ValueError:
            return
        if code is None:
            return
        self._exitcode = code
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        try:
            proc.close()
        except ValueError:
            pass

    async def finished(self, timeout: float | None = None) -> int | None:
        """Wait until the child exits by itself; return its exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self!r} still running after {timeout} s")
            await asyncio.sleep(0.05)
        return self._exitcode


class WorkerProcess(ServerProcess):
    """A worker in a child process of its own, made the way a SpecCluster makes workers.

    ``WorkerProcess(scheduler_address, name=..., **worker_kwargs)``, then
    ``await start()``; the child gets this process's dask config as it is now.

    Parameters
    ----------
    scheduler_ip
        The scheduler's address.
    server_class
        The dotted path of the worker class (default :class:`~distributed.Worker`).
    log_level
        The ``distributed`` logger's level in the child.
    **worker_kwargs
        Keyword arguments for the worker (plain, picklable data).
    """

    def __init__(
        self,
        scheduler_ip: str,
        *,
        server_class: str | None = None,
        log_level: int | str | None = None,
        **worker_kwargs: Any,
    ) -> None:
        super().__init__(
            "worker",
            {"scheduler_ip": scheduler_ip, **worker_kwargs},
            name=f"dask-worker-{worker_kwargs.get('name', '')}",
            config=config_snapshot(),
            server_class=server_class,
            log_level=log_level,
        )


def config_snapshot() -> dict[str, Any]:
    """A picklable copy of the current dask config, to hand to a child process.

    Top-level entries that cannot be pickled are left out (with a debug log).
    """
    snapshot: dict[str, Any] = {}
    for key, value in dask.config.config.items():
        try:
            snapshot[key] = pickle.loads(pickle.dumps(copy.deepcopy(value)))
        except Exception:
            logger.debug("Not passing config key %r to the child process", key, exc_info=True)
    return snapshot


# -- the child side -----------------------------------------------------------------------
def _apply_config(config: Mapping[str, Any]) -> None:
    for key, value in config.items():
        if "." in key:
            dask.config.set({key: value})
        else:
            dask.config.update(dask.config.config, {key: value}, priority="new")


def _server_class(kind: ServerKind, path: str | None) -> type[Any]:
    if path is not None:
        from distributed.utils import import_term

        cls = import_term(path)
        if not isinstance(cls, type):
            raise TypeError(f"{path!r} is not a class")
        return cls
    if kind == "scheduler":
        from distributed.scheduler import Scheduler

        return Scheduler
    from distributed.worker import Worker

    return Worker


#: Held while this process's environment is changed for a child being started.
_ENVIRON_LOCK = threading.Lock()


@contextlib.contextmanager
def _environ_set(env: Mapping[str, str]) -> Iterator[None]:
    """Set ``env`` in this process's environment while a child starts, then restore it.

    The child inherits the environment at start: variables read before any
    Python code of its own runs (the C library's malloc settings) must be
    there already.
    """
    if not env:
        yield
        return
    with _ENVIRON_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _child_main(
    kind: ServerKind,
    kwargs: dict[str, Any],
    env: dict[str, str],
    config: dict[str, Any],
    server_class: str | None,
    log_level: int | str | None,
    conn: multiprocessing.connection.Connection,
    parent_pid: int,
) -> None:
    """The child's entry point: run the server until told to stop."""
    os.environ.update(env)
    if log_level is not None:
        from distributed.config import silence_logging

        silence_logging(log_level)
    code = 1
    try:
        _apply_config(config)
        code = asyncio.run(_child_run(kind, kwargs, server_class, conn, parent_pid))
    except BaseException:
        _report(conn, ("error", traceback.format_exc()))
    finally:
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
    if code:
        sys.exit(code)


def _tend_gc_if_worker(server: Any) -> None:
    """A worker is the only server of this child process: the garbage collector is its own to tend."""
    from distributed.worker import Worker

    if isinstance(server, Worker):
        server.tend_gc_alone()


async def _close_server(server: Any) -> None:
    from distributed.worker import Worker

    if isinstance(server, Worker):
        # Stopped from outside (its nanny, a signal, a dead parent): its nanny, if any, decides what follows.
        await server.close(nanny=False)
    else:
        await server.close()


def _report(conn: multiprocessing.connection.Connection, msg: tuple[str, Any]) -> None:
    try:
        conn.send(msg)
    except (OSError, ValueError):
        pass  # the parent went away or stopped listening


async def _child_run(
    kind: ServerKind,
    kwargs: dict[str, Any],
    server_class: str | None,
    conn: multiprocessing.connection.Connection,
    parent_pid: int,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # Ctrl-C in a terminal reaches the whole process group: the parent (a nanny,
    # ``dask worker``, a LocalCluster's script) decides, e.g. retiring the worker
    # so its data moves first, then stops this child with SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def watch_parent() -> None:
        while os.getppid() == parent_pid:
            await asyncio.sleep(PARENT_POLL_INTERVAL)
        logger.info("Parent process %d is gone; closing the %s", parent_pid, kind)

    cls = _server_class(kind, server_class)
    server = cls(**kwargs)
    starting = asyncio.ensure_future(server.start())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        # Asked to stop while starting: give up on the start.
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await _close_server(server)
        return 0
    exc = starting.exception()
    if exc is not None:
        stopped.cancel()
        await asyncio.gather(stopped, return_exceptions=True)
        _report(conn, ("error", "".join(traceback.format_exception(exc))))
        await _close_server(server)
        return 1
    _report(conn, ("address", server.address))
    _tend_gc_if_worker(server)

    waiters = {
        stopped,
        asyncio.ensure_future(server.finished()),
        asyncio.ensure_future(watch_parent()),
    }
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        try:
            await _close_server(server)
        except Exception:
            logger.exception("Closing the %s failed", kind)
    return 0
