"""Nanny: a small server that keeps one worker process alive.

Theory of operation
-------------------
A :class:`Nanny` listens on an address of its own and runs its
:class:`~distributed.Worker` in a child process (a
:class:`~distributed.spawn.ServerProcess`).  The worker is told the
nanny's address (``Worker(nanny=...)``), so it registers with the scheduler
carrying it: ``scheduler_info()["workers"][addr]["nanny"]``, and the
scheduler reaches the nanny to restart or kill the worker.

A watcher runs every ``distributed.worker.memory.monitor-interval``:

* a worker that closed on purpose with ``Worker.close(nanny=True)`` (the
  default: retired, told to close, gave up waiting for its scheduler, closed
  gracefully) told its nanny first (``close_gracefully``): the nanny closes
  too, as dask's does;
* any other exit (a crash, ``os._exit``, SIGKILL, ``Worker.close(nanny=False)``,
  ``close_gracefully(restart=True)``, ``lifetime_restart``) is followed by a
  new worker process, under the same name, while the nanny runs (when that
  new worker fails to start, the nanny closes, saying why in ``failure``);
* one whose resident memory passed ``distributed.worker.memory.terminate``
  (a fraction of ``memory_limit``; false disables) is killed, then started
  again.

A scheduler that dies (SIGKILL) ends neither the nanny nor its worker
process: the worker keeps its results and registers again with whatever
scheduler comes back at the same address (restarted, or taking over from its
journal) within its reconnect timeout, and the nanny's liveness link (see
:mod:`distributed.liveness`) connects to that scheduler by itself and vouches
for the same worker again.  Only a worker that gives up closes, and its
nanny with it (first bullet above): no new worker process would fare better.

:class:`~distributed.diagnostics.plugin.NannyPlugin` s registered with the
scheduler (``Client.register_plugin``) are set up in the nanny's process: the
ones registered before the nanny started are fetched from the scheduler
(``register_nanny``) before the first worker starts; later ones are pushed by
the scheduler (``plugin-add``).  A plugin with ``restart = True`` is followed
by a new worker process, so that it sees what the plugin changed (e.g.
environment variables).

Closing the nanny (``await nanny.close()``, or SIGTERM/SIGINT of a
``dask worker`` process, which closes its nannies) SIGTERMs the worker
process so the worker closes cleanly, and SIGKILLs it after a timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import pickle
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.config
import psutil
from dask.utils import parse_timedelta

from distributed.comm import Comm, CommClosedError, connect_until
from distributed.comm.addressing import listen_addresses, listen_protocol, parse_ports
from distributed.config_refusals import refuse_unhonoured_config
from distributed.core import Route, Server, Status, error_message, send_recv
from distributed.diagnostics.plugin import NannyPlugin
from distributed.liveness import Voucher
from distributed.preloading import PreloadManager, process_preloads
from distributed.protocol import messages as m
from distributed.protocol.serialize import Serialize, unwrap
from distributed.security import Security, coerce_security
from distributed.spawn import ServerProcess, config_snapshot
from distributed.utils import get_ip_interface, refuse_unsupported, scheduler_address
from distributed.worker import FIRST_CONNECT_TIMEOUT, Worker, parse_memory_limit
from distributed.worker.options import check_unsupported_worker_kwargs

logger = logging.getLogger(__name__)

__all__ = ["Nanny", "NannySettings", "config_environ", "terminate_fraction"]

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


def config_environ(key: str) -> dict[str, str]:
    """Environment variables from the config mapping at ``key`` (values as strings).

    Raises
    ------
    TypeError
        When the value at ``key`` is not a mapping.
    """
    value = dask.config.get(key, None) or {}
    if not isinstance(value, dict):
        raise TypeError(f"{key} must be a mapping of environment variables, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


@dataclass(frozen=True, slots=True)
class NannySettings:
    """What a nanny reads of the config, in one place; read once, when the nanny is made.

    Attributes
    ----------
    terminate
        Kill the worker past this fraction of its memory limit, or None (``distributed.worker.memory.terminate``).
    environ, pre_spawn_environ
        The worker process's environment, and what the nanny sets in its own while it starts one
        (``distributed.nanny.environ``, ``.pre-spawn-environ``).
    watch_interval
        Seconds between two looks at the worker process (``distributed.worker.memory.monitor-interval``).
    connect_timeout
        Seconds to reach the scheduler (``distributed.comm.timeouts.connect``).
    lifetime
        The workers' lifetime from config (``distributed.worker.lifetime.duration``), or None.
    """

    terminate: float | None = 0.95
    environ: dict[str, str] = field(default_factory=dict)
    pre_spawn_environ: dict[str, str] = field(default_factory=dict)
    watch_interval: float = 0.1
    connect_timeout: float = 30.0
    lifetime: float | None = None

    @classmethod
    def from_config(cls) -> NannySettings:
        """The settings in dask's config now."""
        lifetime = dask.config.get("distributed.worker.lifetime.duration")
        return cls(
            terminate=terminate_fraction(),
            environ=config_environ("distributed.nanny.environ"),
            pre_spawn_environ=config_environ("distributed.nanny.pre-spawn-environ"),
            watch_interval=float(parse_timedelta(dask.config.get("distributed.worker.memory.monitor-interval")) or 0.1),
            connect_timeout=float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) or 30),
            lifetime=float(parse_timedelta(lifetime)) if lifetime is not None else None,
        )


class Nanny(Server):
    """Run a :class:`~distributed.Worker` in a child process and start it again when it dies.

    Parameters
    ----------
    scheduler_ip, scheduler_port, scheduler_file
        Where the scheduler is, as for :class:`~distributed.Worker`.
    worker_port
        The worker's port (0: any free port), or a range ``"9000:9010"``.
    nthreads, name, memory_limit, resources, local_directory, death_timeout, ...
        Passed on to the worker (plain data only: they cross into the child).
    data
        The worker's ``data=`` (see :class:`~distributed.Worker`), pickled into
        the worker process: a class or an importable function (or a
        ``(callable, kwargs)`` pair) makes the mapping there.
    host, port, interface, protocol
        Where the nanny listens (the worker listens on the same host), as for
        :class:`~distributed.Worker`: ``host`` may carry a scheme, ``port``
        may be a range, and without a host both announce the address of the
        interface through which they reach the scheduler.
    security
        A :class:`~distributed.security.Security` (or a dict of its keywords):
        the ``worker`` role's TLS credentials, for the nanny and its worker.
    worker_class
        The worker class, or its dotted import path; it must be importable
        in the child process.
    env
        Environment variables for the worker process, on top of
        ``distributed.nanny.environ``.  Those read as the interpreter starts
        (``MALLOC_TRIM_THRESHOLD_``, thread pool sizes) belong in
        ``distributed.nanny.pre-spawn-environ``: the nanny sets them in its own
        environment while it starts the worker.
    config
        Dask config for the worker process (on top of this process's config).
    auto_restart
        Start the worker again when it dies unexpectedly (default True).
    quiet, silence_logs
        Log level for the worker process (``quiet=True`` means warnings only).
    plugins
        :class:`~distributed.diagnostics.plugin.NannyPlugin` s to set up at
        start, before the first worker process starts.
    lifetime_restart
        With ``lifetime``: when the worker reaches its lifetime it hands its
        data to other workers and the nanny starts a new worker (instead of
        closing).
    preload, preload_argv
        The worker's preloads and their arguments, passed on to each worker
        process (see :class:`~distributed.Worker`); default from
        ``distributed.worker.preload`` and ``distributed.worker.preload-argv``.
    preload_nanny, preload_nanny_argv
        The nanny's own preloads (see :mod:`distributed.preloading`),
        imported now; their ``dask_setup(nanny)`` runs once the nanny listens,
        before it registers with the scheduler, and ``dask_teardown(nanny)``
        first thing as it closes.  Default from ``distributed.nanny.preload``
        and ``distributed.nanny.preload-argv``.
    **worker_kwargs
        Other :class:`~distributed.Worker` keywords.

    Raises
    ------
    NotImplementedError
        For ``services`` and ``loop``: a nanny cannot honour them here.

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
        security: Security | dict[str, Any] | None = None,
        services: Any = None,
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        preload_nanny: str | Sequence[str] | None = None,
        preload_nanny_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        plugins: Iterable[NannyPlugin] = (),
        data: Any = None,
        lifetime_restart: bool = False,
        **worker_kwargs: Any,
    ) -> None:
        refuse_unsupported(
            "Nanny",
            loop=loop is not None,
            services=bool(services),
        )
        # Before the scheduler's address is looked up: a preload may set it (``scheduler-address``).
        #: The nanny's own preloads, imported; set up once it listens, torn down first as it closes.
        self.preloads: PreloadManager = process_preloads(
            self,
            preload_nanny,
            preload_nanny_argv,
            config_preload="distributed.nanny.preload",
            config_argv="distributed.nanny.preload-argv",
        )
        refuse_unhonoured_config("nanny")
        #: The settings read from the config.
        self.settings = NannySettings.from_config()
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
        self.security = coerce_security(security, "Nanny")
        self._protocol = listen_protocol(protocol, host, scheduler_ip, self.security.require_encryption)
        if self._protocol == "inproc":
            raise ValueError("A nanny's worker runs in another process: it cannot use the in-process protocol")
        self._host = host
        self._ports = parse_ports(port)
        parse_ports(worker_port)  # a bad range fails here, not in the worker process
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
            "host": host,
            "port": worker_port or 0,
            "protocol": self._protocol,
            "security": self.security,
            **worker_kwargs,
        }
        #: The directory given for its workers' local directories (None: the default scratch space), where
        #: nanny plugins such as UploadDirectory put files.
        self.local_directory: str | None = worker_kwargs.get("local_directory")
        if data is not None:
            try:
                pickle.dumps(data)
            except Exception as e:
                raise TypeError(
                    f"Nanny(data=) goes to the worker process, so it must pickle (an importable class or function): {e}"
                ) from e
            self._worker_kwargs["data"] = data
        # Imported by each worker process (where they run), not here; unset, the worker reads its config.
        if preload is not None:
            self._worker_kwargs["preload"] = [preload] if isinstance(preload, str) else list(preload)
        if preload_argv is not None:
            self._worker_kwargs["preload_argv"] = (
                preload_argv
                if isinstance(preload_argv, str)
                else [a if isinstance(a, str) else list(a) for a in preload_argv]
            )
        if lifetime_restart:
            if worker_kwargs.get("lifetime") is None and self.settings.lifetime is None:
                raise ValueError("Nanny(lifetime_restart=True) needs lifetime=")
            self._worker_kwargs["lifetime_restart"] = True
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
        #: Why the nanny closed itself, when its worker could not be started again (a full or
        #: read-only local directory...); ``dask worker`` then exits with an error.
        self.failure: str | None = None
        self._lock: asyncio.Lock | None = None
        self._terminate_at: float | None = None
        self._close_timeout = 5.0
        #: Nanny plugins by name, set up in this process.
        self.plugins: dict[str, NannyPlugin] = {}
        self._initial_plugins = list(plugins)
        # The worker process that said it closes on purpose: when it ends, the nanny closes too.
        self._leaving: ServerProcess | None = None
        # This nanny's part in its process's liveness link (see distributed.liveness), once its worker runs.
        self._voucher: Voucher | None = None
        # The worker process found stopped: its pid, since when (monotonic), and whether it was reported.
        self._stopped: tuple[int, float, bool] | None = None
        handlers: dict[str, Route[Any]] = {
            "restart": Route(m.NannyRestart, self.handle_restart),
            "kill": Route(m.NannyKill, self.handle_kill),
            "terminate": Route(m.Empty, self.handle_terminate),
            "close_gracefully": Route(m.NannyCloseGracefully, self.handle_close_gracefully),
            "plugin-add": Route(m.NannyPluginAdd, self.handle_plugin_add),
            "plugin-remove": Route(m.NannyPluginRemove, self.handle_plugin_remove),
            "run": Route(m.RunFunction, self.handle_run),
            "identity": Route(m.Empty, lambda comm, msg: self.identity()),
        }
        super().__init__(
            handlers,
            connection_args=self.security.get_connection_args("worker"),
            listen_args=self.security.get_listen_args("worker"),
        )

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
        frac = self.settings.terminate
        self._terminate_at = frac * self.memory_limit if frac is not None and self.memory_limit else None
        addrs, default_host = listen_addresses(
            None, self._host, self._ports, self._protocol, self.scheduler_addr, who="Nanny"
        )
        await self.listen_first_free(addrs, default_host)
        self._lock = asyncio.Lock()
        await self.preloads.start()
        for plugin in self._initial_plugins:
            await self.plugin_add(plugin, restart=False)
        for name, payload in (await self._register_with_scheduler()).items():
            # Before the first worker starts: no restart needed for it to see the plugin.
            reply = await self._plugin_add_payload(payload, name, restart=False)
            if reply["status"] != "OK":
                logger.error("Nanny plugin %s failed to set up on %s: %s", name, self.address, reply.get("text"))
        await self._start_worker()
        self.periodic(self.settings.watch_interval, self._watch, name="nanny-watch")
        logger.info("Nanny at %s, worker at %s", self.address, self.worker_address)

    async def _register_with_scheduler(self) -> dict[str, Any]:
        """The nanny plugins the scheduler holds, by name (asked until the worker's start timeout)."""
        death_timeout = self._worker_kwargs.get("death_timeout")
        timeout = float(parse_timedelta(death_timeout) or 30) if death_timeout else self.settings.connect_timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                # The first try short, so that waiting for a scheduler not up yet is logged early.
                comm = await connect_until(
                    self.scheduler_addr,
                    deadline,
                    "nanny->scheduler",
                    FIRST_CONNECT_TIMEOUT,
                    lambda: logger.info("Waiting to connect to the scheduler at %s", self.scheduler_addr),
                    **self.connection_args,
                )
                try:
                    reply = await send_recv(comm, m.RegisterNanny(op="register_nanny", address=self.address))
                finally:
                    await comm.close()
                return dict(reply or {})
            except (OSError, CommClosedError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _start_worker(self) -> str:
        kwargs = {**self._worker_kwargs, "scheduler_ip": self.scheduler_addr, "nanny": self.address}
        if self.name is not None:
            kwargs["name"] = self.name
        proc = ServerProcess(
            "worker",
            kwargs,
            env={**self.settings.environ, **self.env},
            pre_spawn_env=self.settings.pre_spawn_environ,
            name=f"dask-worker-{self.name}" if self.name is not None else "dask-worker",
            config={**config_snapshot(), **self._config},
            server_class=self._worker_class,
            log_level=self._log_level,
        )
        self.process = proc
        address = await proc.start(timeout=max(self.settings.connect_timeout, 30))
        # The nanny, not the worker, vouches for the worker: a task holding the worker's GIL cannot stop it.
        if self._voucher is None:
            self._voucher = Voucher(self.scheduler_addr, self.connection_args)
        self._voucher.vouch([address])
        return address

    async def _watch(self) -> None:
        proc = self.process
        if proc is None or self.status != Status.running:
            return
        assert self._lock is not None
        if self._lock.locked():
            return  # a restart or kill is under way
        if proc.is_alive():
            if proc.pid is None:
                return
            try:
                process = psutil.Process(proc.pid)  # one look per tick, for both checks
            except psutil.Error:
                return
            self._check_stopped(process, proc.address)
            if self._terminate_at is not None:
                try:
                    rss = process.memory_info().rss
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
        if proc is self._leaving:
            logger.info("Worker %s closed; closing its nanny %s", self.name, self.address)
            self.process = None
            self.spawn(self.close(reason="worker-closed"), name="nanny-close")
            return
        if not self.auto_restart:
            self.process = None
            return
        if proc.exitcode == 0:
            # Worker.close(nanny=False), close_gracefully(restart=True), lifetime_restart.
            logger.info("Worker process %s closed without closing its nanny: starting a new one", proc.pid)
        else:
            logger.warning("Worker process %s exited with code %s: starting it again", proc.pid, proc.exitcode)
        async with self._lock:
            try:
                await self._replace(proc, timeout=0)
            except Exception as e:
                # The new worker already retried reaching its scheduler for its whole start: give up.
                logger.error("Could not start worker %s again (%s); closing its nanny %s", self.name, e, self.address)
                self.failure = f"its worker could not be started again: {e}"
                self.process = None
                self.spawn(self.close(reason="worker-restart-failed"), name="nanny-close")

    def _check_stopped(self, process: psutil.Process, address: str | None) -> None:
        """Report the worker process to the scheduler once it has been stopped for too long (SIGSTOP, a debugger).

        Its event loop cannot say so, and from outside it looks like a worker
        whose task holds the GIL: only here is the difference known.  The
        scheduler then removes the worker and asks us to replace it.
        """
        voucher = self._voucher
        if voucher is None or address is None:
            return
        try:
            status = process.status()
        except psutil.Error:
            return
        pid = process.pid
        if status not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            self._stopped = None
            return
        now = time.monotonic()
        if self._stopped is None or self._stopped[0] != pid:
            self._stopped = (pid, now, False)
            return
        _, since, reported = self._stopped
        if not reported and now - since >= voucher.stopped_timeout:
            logger.warning(
                "Worker process %d (%s) stopped for %.1f s: telling the scheduler", pid, address, now - since
            )
            voucher.report_stopped([address], now - since)
            self._stopped = (pid, since, True)

    async def _replace(self, old: ServerProcess | None, timeout: float) -> None:
        if old is not None:
            await old.close(timeout=timeout)
        self.process = None
        if self.status not in (Status.running, Status.starting):
            return
        await self._start_worker()
        self.restarts += 1

    async def restart(self, timeout: float = 30, reason: str = "nanny-restart", worker: str | None = None) -> str:
        """Close the worker process (SIGKILL after ``timeout``) and start a new one.

        With ``worker``, only if the running worker is still the one at that
        address: a request about a worker that has ended since (and that this
        nanny has replaced, or is about to) leaves its successor alone.
        """
        assert self._lock is not None
        async with self._lock:
            if worker is not None and self.worker_address != worker:
                logger.info("Not restarting worker %s (%s): %s is no longer running", self.name, reason, worker)
                return "OK"
            logger.info("Restarting worker %s: %s", self.name, reason)
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
        worker = msg.get("worker")
        if msg.get("wait", True):
            return await self.restart(timeout=timeout, reason=reason, worker=worker)
        self.spawn(self.restart(timeout=timeout, reason=reason, worker=worker), name="nanny-restart")
        return "OK"

    async def handle_kill(self, comm: Comm, msg: m.NannyKill) -> str:
        await self.kill(timeout=float(msg.get("timeout", 2)), reason=msg.get("reason", "nanny-kill"))
        return "OK"

    async def close_gracefully(self, reason: str = "nanny-close-gracefully") -> None:
        """Close the nanny when its current worker process ends, instead of starting another.

        The worker calls this (``Worker.close(nanny=True)``) before it closes.
        """
        logger.info("Worker %s closes on purpose (%s): its nanny %s closes after it", self.name, reason, self._address)
        self._leaving = self.process

    async def handle_close_gracefully(self, comm: Comm, msg: m.NannyCloseGracefully) -> str:
        await self.close_gracefully(reason=msg.get("reason", "nanny-close-gracefully"))
        return "OK"

    # -- plugins ------------------------------------------------------------------------
    async def plugin_add(self, plugin: NannyPlugin, name: str | None = None, restart: bool = True) -> None:
        """Set ``plugin`` up in this nanny (replacing one of the same name).

        With ``restart`` and a plugin whose ``restart`` attribute is true, the
        worker process is then replaced, so that it sees what the plugin set up.

        Raises
        ------
        Exception
            Whatever the plugin's ``setup`` raised (the plugin is then not kept).
        """
        name = name or getattr(plugin, "name", None) or f"{type(plugin).__name__}-{id(plugin):x}"
        if name in self.plugins:
            await self.plugin_remove(name)
        result = plugin.setup(self)
        if inspect.isawaitable(result):
            await result
        self.plugins[name] = plugin
        if restart and getattr(plugin, "restart", False) and self.process is not None:
            await self.restart(reason=f"nanny-plugin-{name}-restart")

    async def plugin_remove(self, name: str) -> None:
        """Tear the plugin ``name`` down and forget it (a teardown error is logged)."""
        plugin = self.plugins.pop(name, None)
        if plugin is None:
            return
        try:
            result = plugin.teardown(self)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("Nanny plugin %s teardown failed on %s", name, self._address)

    async def _plugin_add_payload(self, payload: Any, name: str, restart: bool) -> dict[str, Any]:
        # Errors travel as data: the scheduler forwards them to the client without opening them.
        try:
            await self.plugin_add(unwrap(payload), name=name, restart=restart)
        except Exception as e:
            logger.exception("Nanny plugin %s failed to set up on %s", name, self._address)
            return error_message(e)
        return {"status": "OK"}

    async def handle_plugin_add(self, comm: Comm, msg: m.NannyPluginAdd) -> dict[str, Any]:
        """Set up a plugin the scheduler sends; reply ``{"status": "OK"}`` or the setup's error."""
        return await self._plugin_add_payload(msg["plugin"], msg["name"], restart=True)

    async def handle_plugin_remove(self, comm: Comm, msg: m.NannyPluginRemove) -> dict[str, Any]:
        """Tear down a plugin the scheduler no longer keeps."""
        await self.plugin_remove(msg["name"])
        return {"status": "OK"}

    async def handle_run(self, comm: Comm, msg: m.RunFunction) -> Any:
        """Run a user's function here (``Client.run(..., nanny=True)``); ``dask_worker`` receives the nanny."""
        func = unwrap(msg["function"])
        args = unwrap(msg.get("args")) or ()
        kwargs = unwrap(msg.get("kwargs")) or {}
        try:
            takes_nanny = "dask_worker" in inspect.signature(func).parameters
        except (TypeError, ValueError):
            takes_nanny = False  # builtins without a signature
        if takes_nanny:
            kwargs["dask_worker"] = self
        result = func(*args, **kwargs)
        if inspect.isawaitable(result):
            if msg.get("wait", True):
                result = await result
            else:
                self.spawn(_consume(result), name="run")
                result = None
        return Serialize(result)

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
        # First, as in dask.distributed: a teardown still sees the worker process.
        await self.preloads.teardown()
        proc, self.process = self.process, None
        if proc is not None:
            await proc.close(timeout=self._close_timeout)
        if self._voucher is not None:
            await self._voucher.close()
        for name in list(self.plugins):
            await self.plugin_remove(name)
        await super()._close()


async def _consume(aw: Any) -> None:
    await aw
