"""Nanny: a small server that keeps one worker process alive.

Theory of operation
-------------------
A :class:`Nanny` listens on an address of its own and runs its
:class:`~distributed.Worker` in a child process (a
:class:`~distributed.deploy.spawn.ServerProcess`).  The worker is told the
nanny's address (``Worker(nanny=...)``), so it registers with the scheduler
carrying it: ``scheduler_info()["workers"][addr]["nanny"]``, and the
scheduler reaches the nanny to restart or kill the worker.

A watcher runs every ``distributed.worker.memory.monitor-interval``:

* a worker process that exited with code 0 closed on purpose (retired, told
  to close, lost its scheduler): the nanny closes too, as dask's does;
* one that exited otherwise (a crash, ``os._exit``, SIGKILL) is started
  again, under the same name, while the nanny runs (when that new worker
  fails to start, the nanny closes);
* one whose resident memory passed ``distributed.worker.memory.terminate``
  (a fraction of ``memory_limit``; false disables) is killed, then started
  again.

Closing the nanny (``await nanny.close()``, or SIGTERM/SIGINT of a
``dask worker`` process, which closes its nannies) SIGTERMs the worker
process so the worker closes cleanly, and SIGKILLs it after a timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Mapping
from typing import Any

import dask.config
import psutil
from dask.utils import parse_timedelta

from distributed.comm import Comm
from distributed.core import Route, Server, Status
from distributed.deploy.spawn import ServerProcess, config_snapshot
from distributed.protocol import messages as m
from distributed.utils import get_ip_interface, refuse_unsupported, scheduler_address
from distributed.worker import Worker, parse_memory_limit
from distributed.worker_options import check_unsupported_worker_kwargs

logger = logging.getLogger(__name__)

__all__ = ["Nanny", "terminate_fraction"]

#: Worker keywords a nanny cannot hand to a child process (objects, not data).
_WORKER_PARAMS = frozenset(inspect.signature(Worker.__init__).parameters) - {"self", "kwargs"}


def terminate_fraction() -> float | None:
    """``distributed.worker.memory.terminate`` as a fraction of ``memory_limit`` (None: disabled).

    Raises
    ------
    ValueError
        For a value that is not false and not a fraction in (0, 1].
    """
    value = dask.config.get("distributed.worker.memory.terminate", 0.95)
    if value is False or value is None:
        return None
    frac = float(value)
    if not 0 < frac <= 1:
        raise ValueError(f"distributed.worker.memory.terminate must be false or in (0, 1], got {value!r}")
    return frac


def _listen_host(scheduler_addr: str) -> str:
    """Loopback when the scheduler is on loopback, else all interfaces (as the worker does)."""
    host = scheduler_addr.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host.startswith("127.") or host == "localhost":
        return "127.0.0.1"
    return ""


class Nanny(Server):
    """Run a :class:`~distributed.Worker` in a child process and start it again when it dies.

    Parameters
    ----------
    scheduler_ip, scheduler_port, scheduler_file
        Where the scheduler is, as for :class:`~distributed.Worker`.
    worker_port
        The worker's port (0: any free port).
    nthreads, name, memory_limit, resources, local_directory, death_timeout, ...
        Passed on to the worker (plain data only: they cross into the child).
    host, port, interface, protocol
        Where the nanny listens (the worker listens on the same host).
    worker_class
        The worker class, or its dotted import path; it must be importable
        in the child process.
    env
        Environment variables for the worker process.
    config
        Dask config for the worker process (on top of this process's config).
    auto_restart
        Start the worker again when it dies unexpectedly (default True).
    quiet, silence_logs
        Log level for the worker process (``quiet=True`` means warnings only).
    **worker_kwargs
        Other :class:`~distributed.Worker` keywords.

    Raises
    ------
    NotImplementedError
        For ``security``, ``services``, ``preload*``, ``plugins``, ``data``,
        ``loop`` and ``lifetime_restart``: a nanny cannot honour them here.

    Examples
    --------
    >>> async with Nanny("tcp://127.0.0.1:8786", nthreads=2) as nanny:  # doctest: +SKIP
    ...     print(nanny.worker_address)
    """

    def __init__(
        self,
        scheduler_ip: str | None = None,
        scheduler_port: int | None = None,
        *,
        scheduler_file: str | None = None,
        worker_port: int | str | None = 0,
        nthreads: int | None = None,
        name: Any = None,
        memory_limit: str | float | None = "auto",
        host: str | None = None,
        port: int | str | None = 0,
        interface: str | None = None,
        protocol: str | None = None,
        worker_class: type[Any] | str | None = None,
        env: Mapping[str, str] | None = None,
        config: Mapping[str, Any] | None = None,
        auto_restart: bool = True,
        quiet: bool = False,
        silence_logs: int | str | bool | None = None,
        loop: Any = None,
        security: Any = None,
        services: Any = None,
        preload: Any = None,
        preload_argv: Any = None,
        preload_nanny: Any = None,
        preload_nanny_argv: Any = None,
        plugins: Any = None,
        data: Any = None,
        lifetime_restart: bool = False,
        **worker_kwargs: Any,
    ) -> None:
        refuse_unsupported(
            "Nanny",
            loop=loop is not None,
            security=security is not None,
            services=bool(services),
            preload=bool(preload),
            preload_argv=bool(preload_argv),
            preload_nanny=bool(preload_nanny),
            preload_nanny_argv=bool(preload_nanny_argv),
            plugins=bool(plugins),
            data=data is not None,
            lifetime_restart=bool(lifetime_restart),
        )
        for key in ("nanny", "scheduler_ip", "scheduler_port"):
            if key in worker_kwargs:
                raise TypeError(f"Nanny() got an unexpected keyword argument {key!r}")
        check_unsupported_worker_kwargs({k: v for k, v in worker_kwargs.items() if k not in _WORKER_PARAMS})
        scheduler_ip = scheduler_address(scheduler_ip, scheduler_port, scheduler_file, who="nanny")
        if interface is not None:
            if host is not None:
                raise ValueError("Nanny: give host= or interface=, not both")
            host = get_ip_interface(interface)
        self.scheduler_addr = scheduler_ip
        self.nthreads = int(nthreads or os.cpu_count() or 1)
        self.name = name
        self.memory_limit = parse_memory_limit(memory_limit, self.nthreads)
        self._protocol = (protocol or scheduler_ip.split("://", 1)[0]).rstrip(":/")
        if self._protocol == "inproc":
            raise ValueError("A nanny's worker runs in another process: it cannot use the in-process protocol")
        self._host = host if host is not None else _listen_host(scheduler_ip)
        self._port = int(port or 0)
        if worker_class is None:
            self._worker_class: str | None = None
        else:
            path = (
                worker_class
                if isinstance(worker_class, str)
                else f"{worker_class.__module__}.{worker_class.__qualname__}"
            )
            if "<locals>" in path or path.startswith("__main__."):
                raise ValueError(f"worker_class {path!r} cannot be imported in the worker process")
            self._worker_class = path
        self._worker_kwargs: dict[str, Any] = {
            "nthreads": self.nthreads,
            "memory_limit": self.memory_limit,
            "host": self._host or None,
            "port": int(worker_port or 0),
            "protocol": self._protocol,
            **worker_kwargs,
        }
        self.env = dict(env or {})
        self._config = dict(config or {})
        self.auto_restart = auto_restart
        self._log_level: int | str | None = (
            logging.WARNING
            if quiet
            else (logging.ERROR if silence_logs is True else (silence_logs if silence_logs else None))
        )
        #: The running worker process (None before start and after close).
        self.process: ServerProcess | None = None
        #: How many times the worker process was started again.
        self.restarts = 0
        self._lock: asyncio.Lock | None = None
        self._terminate_at: float | None = None
        self._close_timeout = 5.0
        handlers: dict[str, Route[Any]] = {
            "restart": Route(m.NannyRestart, self.handle_restart),
            "kill": Route(m.NannyKill, self.handle_kill),
            "terminate": Route(m.Empty, self.handle_terminate),
            "identity": Route(m.Empty, lambda comm, msg: self.identity()),
        }
        super().__init__(handlers)

    # -- properties -------------------------------------------------------------------
    @property
    def worker_address(self) -> str | None:
        """The worker's address (None while no worker process runs)."""
        proc = self.process
        if proc is None or not proc.is_alive():
            return None
        try:
            return proc.address
        except ValueError:
            return None

    @property
    def pid(self) -> int | None:
        """The worker process's id (None while none runs)."""
        return self.process.pid if self.process is not None else None

    def identity(self) -> dict[str, Any]:
        """Who this nanny is, and its worker."""
        return {
            "type": "Nanny",
            "id": str(self.name),
            "address": self.address,
            "worker": self.worker_address,
            "pid": self.pid,
            "restarts": self.restarts,
        }

    def __repr__(self) -> str:
        return f"<Nanny: {self._address}, worker: {self.worker_address}, status: {self.status.name}>"

    # -- life cycle ---------------------------------------------------------------------
    async def start_unsafe(self) -> None:
        frac = terminate_fraction()
        self._terminate_at = frac * self.memory_limit if frac is not None and self.memory_limit else None
        await self.listen(f"{self._protocol}://{self._host or '0.0.0.0'}:{self._port}")
        self._lock = asyncio.Lock()
        await self._start_worker()
        interval = float(parse_timedelta(dask.config.get("distributed.worker.memory.monitor-interval")) or 0.1)
        self.periodic(interval, self._watch, name="nanny-watch")
        logger.info("Nanny at %s, worker at %s", self.address, self.worker_address)

    async def _start_worker(self) -> str:
        kwargs = {**self._worker_kwargs, "scheduler_ip": self.scheduler_addr, "nanny": self.address}
        if self.name is not None:
            kwargs["name"] = self.name
        proc = ServerProcess(
            "worker",
            kwargs,
            env=self.env,
            name=f"dask-worker-{self.name}" if self.name is not None else "dask-worker",
            config={**config_snapshot(), **self._config},
            server_class=self._worker_class,
            log_level=self._log_level,
        )
        self.process = proc
        timeout = float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) or 30)
        return await proc.start(timeout=max(timeout, 30))

    async def _watch(self) -> None:
        proc = self.process
        if proc is None or self.status != Status.running:
            return
        assert self._lock is not None
        if self._lock.locked():
            return  # a restart or kill is under way
        if proc.is_alive():
            if self._terminate_at is not None and proc.pid is not None:
                try:
                    rss = psutil.Process(proc.pid).memory_info().rss
                except psutil.Error:
                    return
                if rss > self._terminate_at:
                    logger.warning(
                        "Worker %s (pid %d) uses %d bytes, past %.0f%% of its memory limit %d: killing it",
                        proc.address,
                        proc.pid,
                        rss,
                        100 * self._terminate_at / self.memory_limit,
                        self.memory_limit,
                    )
                    proc.kill()
            return
        if proc.exitcode == 0:
            logger.info("Worker %s closed; closing its nanny %s", self.name, self.address)
            self.process = None
            self.spawn(self.close(), name="nanny-close")
            return
        if not self.auto_restart:
            self.process = None
            return
        logger.warning("Worker process %s exited with code %s: starting it again", proc.pid, proc.exitcode)
        async with self._lock:
            try:
                await self._replace(proc, timeout=0)
            except Exception as e:
                # The new worker already retried reaching its scheduler for its whole start: give up.
                logger.error("Could not start worker %s again (%s); closing its nanny %s", self.name, e, self.address)
                self.process = None
                self.spawn(self.close(reason="worker-restart-failed"), name="nanny-close")

    async def _replace(self, old: ServerProcess | None, timeout: float) -> None:
        if old is not None:
            await old.close(timeout=timeout)
        self.process = None
        if self.status not in (Status.running, Status.starting):
            return
        await self._start_worker()
        self.restarts += 1

    async def restart(self, timeout: float = 30, reason: str = "nanny-restart") -> str:
        """Close the worker process (SIGKILL after ``timeout``) and start a new one."""
        assert self._lock is not None
        logger.info("Restarting worker %s: %s", self.name, reason)
        async with self._lock:
            await self._replace(self.process, timeout=timeout)
        return "OK"

    async def kill(self, timeout: float = 2, reason: str = "nanny-kill") -> None:
        """End the worker process (SIGTERM, SIGKILL after ``timeout``) and start no other."""
        assert self._lock is not None
        logger.info("Killing worker %s: %s", self.name, reason)
        async with self._lock:
            if self.process is not None:
                await self.process.close(timeout=timeout)
            self.process = None

    async def handle_restart(self, comm: Comm, msg: m.NannyRestart) -> str:
        timeout = float(msg.get("timeout", 30))
        reason = msg.get("reason", "nanny-restart")
        if msg.get("wait", True):
            return await self.restart(timeout=timeout, reason=reason)
        self.spawn(self.restart(timeout=timeout, reason=reason), name="nanny-restart")
        return "OK"

    async def handle_kill(self, comm: Comm, msg: m.NannyKill) -> str:
        await self.kill(timeout=float(msg.get("timeout", 2)), reason=msg.get("reason", "nanny-kill"))
        return "OK"

    def handle_terminate(self, comm: Comm, msg: m.Empty) -> str:
        asyncio.get_running_loop().call_soon(lambda: self.spawn(self.close(), name="terminate"))
        return "OK"

    async def close(self, timeout: float = 5, reason: str = "nanny-close") -> None:
        """Close the worker cleanly (SIGTERM; SIGKILL after ``timeout`` s), then the nanny."""
        if self.status not in (Status.closing, Status.closed):
            logger.info("Closing nanny %s: %s", self._address or self.name, reason)
            self._close_timeout = timeout
        await super().close()

    async def _close(self) -> None:
        self.status = Status.closing
        proc, self.process = self.process, None
        if proc is not None:
            await proc.close(timeout=self._close_timeout)
        await super()._close()
