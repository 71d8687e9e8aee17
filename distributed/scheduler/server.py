"""The scheduler's server: the shell around its state machine.

:class:`Scheduler` listens, registers workers and clients (through
:mod:`.streams`), answers requests (:mod:`.requests`), runs its extensions
and plugins, checks its workers' heartbeats, and sends what the state
machine's stimuli return, batched per worker and per client.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import dask
import dask.config
from dask.typing import no_default
from dask.utils import parse_timedelta

from distributed import heap
from distributed.batched import BatchedSend
from distributed.cluster_dump import scheduler_state
from distributed.comm import (
    CommClosedError,
    address_from_user_args,
    get_address_host,
    parse_address,
    validate_address,
)
from distributed.config_refusals import refuse_unhonoured_config
from distributed.core import Route, Server, Status
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.preloading import PreloadManager, process_preloads
from distributed.protocol import messages as m
from distributed.protocol.serialize import to_serialize
from distributed.protocol.wire_types import Key
from distributed.scheduler.events import EventLog
from distributed.scheduler.extensions import ExtensionFactory, make_extensions, start_extensions
from distributed.scheduler.graph import GraphIngestion
from distributed.scheduler.journal import JOURNALED_REQUESTS, Journal
from distributed.scheduler.liveness import LivenessWatch
from distributed.scheduler.memory_sampler import MemorySamplerExtension
from distributed.scheduler.metadata import MetadataStore
from distributed.scheduler.records import (
    Effects,
    WorkerState,
)
from distributed.scheduler.requests import ClusterRequests
from distributed.scheduler.settings import SchedulerServerSettings
from distributed.scheduler.state import SchedulerState
from distributed.scheduler.streams import SchedulerStreams
from distributed.scheduler.takeover import Takeover
from distributed.security import Security, coerce_security
from distributed.system import raise_open_file_limit
from distributed.utils import refuse_unsupported, unsupported, wait_for, write_json_whole
from distributed.utils_comm import retry_settings

if TYPE_CHECKING:
    from distributed.dashboard.core import BokehDashboard

logger = logging.getLogger("distributed.scheduler")

__all__ = ["HEAP_TRIM_INTERVAL", "UNRESPONSIVE_WORKER_GRACE", "Scheduler"]

#: Seconds a worker removed for silence (``worker-ttl``) gets to close on its nanny's SIGTERM before
#: the SIGKILL (as dask's nanny gives it): a stopped or stuck process never answers, a woken one is quick.
UNRESPONSIVE_WORKER_GRACE: Final = 4.0

#: Seconds between two hand-backs of the scheduler's free heap memory to the OS, each only
#: if tasks were forgotten since the last: glibc keeps what a forgotten graph freed, in the RSS.
HEAP_TRIM_INTERVAL: Final = 60.0


class Scheduler(GraphIngestion, Server):
    """Dynamic distributed task scheduler.

    Parameters
    ----------
    host, port
        Where to listen.  ``host`` is an IP address or host name, and may
        carry a scheme and a port (``"tcp://0.0.0.0"``, ``"10.0.0.5:8786"``,
        ``"[::1]"``).  ``host=None`` listens on all interfaces and announces
        the address of the interface that routes outward.
    interface
        Listen on the IPv4 address of this network interface (``"eth0"``);
        not together with ``host``.
    protocol
        ``"tcp"`` (default), ``"tls"`` or ``"inproc"``.
    contact_address
        The address to announce (to workers, clients, the scheduler file)
        instead of the one listened at, as behind NAT or in a container.
        Default from ``distributed.scheduler.contact-address``.
    scheduler_file
        Write the address and identity here (JSON) once listening.
    idle_timeout
        Close after this long with no work and no client.
    validate
        Check state invariants after every transition (slow; for tests).
    dashboard, dashboard_address
        Whether and where to serve HTTP endpoints.
    plugins
        :class:`SchedulerPlugin` instances to add at start.
    allowed_failures
        How many workers may die running one task before it errs with
        :class:`KilledWorker`.
    worker_ttl
        Remove a worker not heard from for this long.
    extensions
        Extension classes by name, each called with the scheduler while it is
        constructed (default:
        :data:`distributed.scheduler.extensions.DEFAULT_EXTENSIONS`).
    security
        A :class:`~distributed.security.Security` (or a dict of its keywords):
        the TLS credentials of the ``scheduler`` role, used to listen (with
        ``protocol="tls"``) and to connect to workers.  Default from config.
    preload
        Modules to run in the scheduler: module names, paths to ``.py`` files,
        ``http(s)://`` addresses or module source (see
        :mod:`distributed.preloading`), imported now; their ``dask_setup(scheduler)``
        runs once it has started, ``dask_teardown(scheduler)`` as it closes.
        Default from ``distributed.scheduler.preload``.
    preload_argv
        Arguments for a preload whose ``dask_setup`` is a click command: one
        list for all, or one per preload.  Default from
        ``distributed.scheduler.preload-argv``.
    journal
        An SQLite file where the scheduler keeps what only it knows (graphs,
        what clients want, its workers) before acting on it.  A scheduler
        started on the file a dead one wrote, at the same address, takes over
        (see :mod:`distributed.scheduler.takeover`).  Default from
        ``distributed.scheduler.journal`` (None: no journal).
    services, http_prefix, jupyter
        Only their defaults are supported yet (no extra services, HTTP
        routes at ``/``, no Jupyter server): any other value raises
        ``NotImplementedError`` naming the parameter.
    loop
        Ignored, as in ``dask.distributed``: the scheduler runs on the event
        loop that starts it.

    Examples
    --------
    >>> async with Scheduler(port=8786) as s:  # doctest: +SKIP
    ...     await s.finished()
    """

    default_port = 8786
    #: Every module of the scheduler package logs under this name.
    log_prefix = "distributed.scheduler"

    def __init__(
        self,
        loop: Any = None,
        *,
        host: str | None = None,
        port: int = 0,
        interface: str | None = None,
        protocol: str | None = None,
        validate: bool | None = None,
        dashboard: bool | None = None,
        dashboard_address: str | None = None,
        http_prefix: str | None = "/",
        plugins: Iterable[SchedulerPlugin] = (),
        allowed_failures: int | None = None,
        worker_ttl: float | str | None = None,
        scheduler_file: str | None = None,
        idle_timeout: float | str | None = None,
        contact_address: str | None = None,
        security: Security | dict[str, Any] | None = None,
        services: Any = None,
        extensions: Mapping[str, ExtensionFactory] | None = None,
        jupyter: bool = False,
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        journal: str | None = None,
    ) -> None:
        self.security = coerce_security(security, "Scheduler")
        #: How the scheduler's requests to workers on a client's behalf are retried (``distributed.comm.retry.*``).
        self.comm_retry = retry_settings()
        # First: a preload may change what the rest reads (the config, the comm backends).
        #: The preloads, imported; set up at the end of start, torn down as the scheduler closes.
        self.preloads: PreloadManager = process_preloads(
            self,
            preload or None,
            preload_argv or None,
            config_preload="distributed.scheduler.preload",
            config_argv="distributed.scheduler.preload-argv",
        )
        if http_prefix not in (None, "", "/"):
            raise unsupported("Scheduler", "http_prefix", f"routes are served at /, not {http_prefix!r}")
        refuse_unsupported("Scheduler", services=bool(services), jupyter=jupyter)
        refuse_unhonoured_config("scheduler")
        self.id = f"Scheduler-{uuid.uuid4()}"
        server_settings = SchedulerServerSettings.from_config(
            contact_address=contact_address, worker_ttl=worker_ttl, idle_timeout=idle_timeout, journal=journal
        )
        #: The server's settings read from the config (the state machine's are ``settings``).
        self.server_settings = server_settings
        if not protocol and "://" not in (host or ""):
            default = "tls" if self.security.require_encryption else "tcp"
            protocol = server_settings.default_scheme or default
            if self.security.require_encryption and protocol == "tcp":
                protocol = "tls"
        #: Where to listen: host (with or without a scheme), port, interface and protocol in one address.
        self._start_address = address_from_user_args(host, port, interface, protocol, who="Scheduler")
        self._protocol = parse_address(self._start_address)[0]
        if server_settings.contact_address:
            validate_address(server_settings.contact_address)
        self._contact_address = server_settings.contact_address
        #: Whether requests that make the scheduler unpickle what it is sent are served
        #: (``distributed.scheduler.pickle``, read once at construction).
        self.allow_pickle = server_settings.allow_pickle
        self.dashboard = dashboard
        self.dashboard_address = dashboard_address
        self.scheduler_file = scheduler_file
        self._wrote_scheduler_file = False
        self.worker_ttl = server_settings.worker_ttl
        self.idle_timeout = server_settings.idle_timeout
        SchedulerState.__init__(self, validate=validate, allowed_failures=allowed_failures, protocol=self._protocol)
        #: While a batch of stream messages is handled: the messages its stimuli produced, not sent yet.
        self._held: Effects | None = None
        #: While frees are held (see :meth:`holding_frees`): the workers whose ``free-keys`` wait in their
        #: stream's buffer.
        self._lazy_held: set[str] | None = None
        #: The ``free-keys`` held last for each worker (see :meth:`_hold_frees`).
        self._held_free_msgs: dict[str, m.FreeKeys] = {}
        #: Recent events by topic and the clients subscribed to topics.
        self.event_log = EventLog(self)
        self.metadata_store = MetadataStore()
        #: The samplings of the cluster's memory that clients run (``MemorySampler``).
        self.memory_sampler = MemorySamplerExtension(self.workers, self)
        #: The metadata clients set (``Client.set_metadata``): nested dicts.
        self.task_metadata = self.metadata_store.values
        self.events = self.event_log.events
        self.event_subscriber = self.event_log.subscribers
        self._initial_plugins = list(plugins)
        self.stream_comms: dict[str, BatchedSend] = {}
        self.client_comms: dict[str, BatchedSend] = {}
        #: Set when a worker joins, for :meth:`wait_for_workers`; made on first use.
        self._worker_joined: asyncio.Event | None = None
        #: ``tasks_forgotten`` at the last hand-back of free heap memory.
        self._heap_trimmed_at_forgotten = 0
        self.extensions: dict[str, Any] = {}
        self.http_server: Any = None
        #: The bokeh dashboard served by ``http_server`` (None without one).
        self.dashboard_server: BokehDashboard | None = None

        self.requests = ClusterRequests(self)
        self.streams = SchedulerStreams(self)
        #: Where what only this scheduler knows is kept for a successor (``distributed.scheduler.journal``).
        self.journal: Journal | None = Journal(server_settings.journal) if server_settings.journal else None
        #: The taking over from the journal's messages of a scheduler that died (None: there were none).
        self.takeover: Takeover | None = None
        if self.journal is not None:
            self.journal_records = []
            if self.journal.has_messages:
                self.takeover = Takeover(self, self.journal, server_settings.recovery_timeout)
        #: The liveness links of the processes that vouch for workers (see :mod:`distributed.liveness`).
        self.liveness = LivenessWatch(self)
        handlers: dict[str, Route[Any]] = {
            **self.streams.routes(),
            **self.liveness.routes(),
            "identity": Route(m.IdentityRequest, self.requests.handle_identity),
            "versions": Route(m.VersionsRequest, self.requests.handle_versions),
            "dump_state": Route(m.DumpState, lambda comm, msg: scheduler_state(self, msg["exclude"])),
            "scheduler_info": Route(m.Empty, self.requests.handle_identity),
            "who_has": Route(m.OptionalKeysRequest, self.requests.handle_who_has),
            "get_runspec": Route(m.KeyRequest, self.requests.handle_get_runspec),
            "start_task_metadata": Route(m.TaskMetadataRequest, self.requests.handle_start_task_metadata),
            "stop_task_metadata": Route(m.TaskMetadataRequest, self.requests.handle_stop_task_metadata),
            "get_error_cause": Route(m.KeysRequest, self.requests.handle_get_error_cause),
            "has_what": Route(m.WorkersRequest, self.requests.handle_has_what),
            "nthreads": Route(m.WorkersRequest, self.requests.handle_nthreads),
            # dask's names for the same answers, which code written for it sends (``client.scheduler.ncores()``).
            "ncores": Route(m.WorkersRequest, self.requests.handle_nthreads),
            "ncores_running": Route(m.WorkersRequest, self.requests.handle_nthreads_running),
            "processing": Route(m.WorkersRequest, self.requests.handle_processing),
            "nbytes": Route(m.OptionalKeysRequest, self.requests.handle_nbytes),
            "run_function": Route(m.RunFunction, self.requests.handle_run_function),
            "broadcast": Route(m.RunFunction, self.requests.handle_broadcast),
            "story": Route(m.StoryRequest, self.requests.handle_story),
            "retire_workers": Route(m.RetireWorkers, self.requests.handle_retire_workers),
            "replicate": Route(m.Replicate, self.requests.handle_replicate),
            "rebalance": Route(m.Rebalance, self.requests.handle_rebalance),
            "wait_for_workers": Route(m.WaitForWorkers, self.requests.handle_wait_for_workers),
            "benchmark_hardware": Route(m.BenchmarkHardware, self.requests.handle_benchmark_hardware),
            "relay_get_data": Route(m.RelayGetData, self.requests.handle_relay_get_data),
            "relay_update_data": Route(m.RelayUpdateData, self.requests.handle_relay_update_data),
            "restart": Route(m.Restart, self.requests.handle_restart),
            "restart_workers": Route(m.RestartWorkers, self.requests.handle_restart_workers),
            "register_scheduler_plugin": Route(m.RegisterPlugin, self.requests.handle_register_plugin),
            "unregister_scheduler_plugin": Route(m.UnregisterPlugin, self.requests.handle_unregister_plugin),
            "register_nanny": Route(m.RegisterNanny, self.requests.handle_register_nanny),
            "register_nanny_plugin": Route(m.RegisterNannyPlugin, self.requests.handle_register_nanny_plugin),
            "unregister_nanny_plugin": Route(m.UnregisterNannyPlugin, self.requests.handle_unregister_nanny_plugin),
            "task_states": Route(m.OptionalKeysRequest, self.requests.handle_task_states),
            "get_task_stream": Route(m.GetTaskStream, self.requests.handle_get_task_stream),
            "profile": Route(m.GetProfile, self.requests.handle_profile),
            "profile_metadata": Route(m.GetProfileMetadata, self.requests.handle_profile_metadata),
            "terminate": Route(m.Empty, self.requests.handle_terminate),
            "workers_to_close": Route(m.WorkersToClose, self.requests.handle_workers_to_close),
            "adaptive_target": Route(m.AdaptiveTarget, self.requests.handle_adaptive_target),
            **self.event_log.routes(),
            **self.metadata_store.routes(),
            **self.memory_sampler.routes(),
        }
        stream_handlers = {**self.streams.stream_routes(), **self.event_log.stream_routes()}
        Server.__init__(
            self,
            handlers,
            stream_handlers,
            connection_args=self.security.get_connection_args("scheduler"),
            listen_args=self.security.get_listen_args("scheduler"),
        )
        # Workers' and nannies' error replies carry pickled exceptions: left unopened when pickle is off.
        self.rpc.unpickle_errors = self.allow_pickle
        make_extensions(self, extensions, self._blocked_handlers())
        #: The handlers of the journaled requests as they were before journaling wrapped them (for the replay).
        self.journaled_routes: dict[str, Route[Any]] = {}
        if self.journal is not None:
            self._journal_requests(self.journal)

    def _journal_requests(self, journal: Journal) -> None:
        """Have each journaled request kept in ``journal`` before its handler runs."""
        for op in JOURNALED_REQUESTS:
            route = self.handlers.get(op)
            if route is None:
                continue  # its extension is not there
            self.journaled_routes[op] = route
            self.handlers[op] = Route(route.schema, _recording(journal, op, route.func), route.takes_comm)

    def _blocked_handlers(self) -> list[str]:
        return list(self.server_settings.blocked_handlers)

    # ======================================================================
    # Life cycle
    # ======================================================================
    async def start_unsafe(self) -> None:
        limits = raise_open_file_limit()
        if limits is not None and limits[1] > limits[0]:
            # A connection or two per worker and client: the usual soft limit (1,024) stops at a few hundred.
            logger.info("Raised the limit of open files from %d to %d (the hard limit)", *limits)
        await self.listen(self._start_address)
        if self._contact_address:
            self._address = self._contact_address
        if self.takeover is not None:
            self.spawn(self.takeover.run(), name="takeover")
        start_extensions(self)
        for plugin in self._initial_plugins:
            await self.add_plugin(plugin)
        if self.worker_ttl:
            self.periodic(max(self.worker_ttl / 10, 0.05), self._check_worker_ttl, name="worker-ttl")
        if self.idle_timeout:
            self.periodic(max(self.idle_timeout / 4, 0.05), self._check_idle, name="idle-timeout")
        if self.full_disk_timeout:
            interval = min(max(self.full_disk_timeout / 10, 0.05), 1.0)
            self.periodic(interval, self._check_full_disks, name="full-disk-timeout")
        if self.no_workers_timeout:
            interval = min(max(self.no_workers_timeout / 10, 0.05), 1.0)
            self.periodic(interval, self._check_no_workers, name="no-workers-timeout")
        if heap.can_trim():
            self.periodic(HEAP_TRIM_INTERVAL, self.trim_heap, name="heap-trim")
        cleanup = min(max(self.event_log.cleanup_delay / 10, 0.05), 60.0)
        self.periodic(cleanup, self.event_log.clean_up, name="events-cleanup")
        if self.dashboard or (self.dashboard is None and self.dashboard_address):
            try:
                from distributed.http.scheduler import start_http_server

                self.http_server = await start_http_server(self, self.dashboard_address or ":8787")
            except Exception:
                logger.warning("Could not start the HTTP server", exc_info=True)
        if self.scheduler_file:
            self.write_scheduler_file(self.scheduler_file)
        await self.preloads.start()
        logger.debug("Scheduler at: %s", self.address)

    def write_scheduler_file(self, path: str) -> None:
        """Write this scheduler's identity as JSON to ``path`` (whole, for whoever polls for it)."""
        write_json_whole(path, self.identity())
        self._wrote_scheduler_file = True

    async def _close(self) -> None:
        for plugin in list(self.plugins.values()):
            try:
                await plugin.before_close()
            except Exception:
                logger.exception("Plugin before_close failed")
        await self.preloads.teardown()
        for _addr, bs in list(self.stream_comms.items()):
            try:
                bs.send(m.CloseWorker(op="close-worker", reason="scheduler-close"))
            except CommClosedError:
                pass
        for bs in list(self.stream_comms.values()) + list(self.client_comms.values()):
            await bs.close(timeout=1)
        for plugin in list(self.plugins.values()):
            try:
                await plugin.close()
            except Exception:
                logger.exception("Plugin close failed")
        if self.http_server is not None:
            await self.http_server.close()
        self.requests.close()
        self.streams.close()
        if self.journal is not None:
            # Closed on purpose, its workers told to close: there is nothing for a successor to take over.
            self.journal.clear()
            self.journal.close()
        # A frozen view would outlive this scheduler in its process (others, tests, a notebook).
        self.streams.gc.release()
        if self.scheduler_file and self._wrote_scheduler_file and os.path.exists(self.scheduler_file):
            try:
                os.remove(self.scheduler_file)
            except OSError:
                pass
        await super()._close()

    def _check_idle(self) -> None:
        self.check_idle()

    def check_idle(self) -> float | None:
        """Since when the scheduler has had nothing to do, or None while it has work.

        Work is a task processing on a worker, queued, or waiting for a
        worker that can run it.  Past ``idle_timeout`` of idleness the
        scheduler closes itself.  Runs periodically when ``idle_timeout`` is
        set; deployment libraries also call it to decide when to scale a
        cluster to zero.

        Returns
        -------
        float or None
            The time (``time.time()``) the scheduler became idle, None when
            it has work or is closing.
        """
        if self.status in (Status.closing, Status.closed):
            return None
        if self.n_processing or self.unrunnable or self.n_queued:
            self.idle_since = None
            return None
        if self.idle_since is None:
            self.idle_since = time.time()
            return self.idle_since
        if self.idle_timeout and time.time() > self.idle_since + self.idle_timeout:
            logger.info("Scheduler idle for %s s, closing", self.idle_timeout)
            self.spawn(self.close(), name="idle-close")
        return self.idle_since

    @property
    def ip(self) -> str:
        """The host part of the address listened at (``"0.0.0.0"`` when listening on every interface).

        Raises
        ------
        AttributeError
            Before the scheduler listens (so ``getattr(s, "ip", None)`` gives None then).
        """
        if not self.listeners:
            raise AttributeError(f"{type(self).__name__} is not listening yet: no ip")
        return get_address_host(self.listen_address)

    @property
    def services(self) -> dict[str, Any]:
        """The servers running beside the scheduler's comms, by name: ``"dashboard"``, the HTTP server, if any.

        Each has a ``port``; :meth:`identity` reports ``{name: port}``.
        """
        return {"dashboard": self.http_server} if self.http_server is not None else {}

    def _check_worker_ttl(self) -> None:
        """Remove the workers not heard from within ``worker_ttl`` (see :meth:`remove_unresponsive_worker`)."""
        assert self.worker_ttl is not None
        now = time.time()
        for ws in list(self.workers.values()):
            if not ws.last_seen or ws.last_seen >= now - self.worker_ttl:
                continue
            self.remove_unresponsive_worker(
                ws.address,
                f"not heard from in {self.worker_ttl} s",
                {"action": "worker-ttl-timed-out", "workers": [ws.address], "ttl": self.worker_ttl},
            )

    def remove_unresponsive_worker(self, address: str, why: str, event: dict[str, Any]) -> None:
        """Remove a worker that stopped answering, and have its nanny replace it.

        What such a worker ran or alone held runs again elsewhere.  The worker is
        stopped, swapped out, stuck or cut off, and may wake up later: its stream is
        closed now, so that when it does it finds itself cut off (as after losing its
        scheduler) and closes, its nanny starting a new worker, or reconnects
        afresh (``death_timeout``), instead of running on unknown to us.  And, as
        in dask, its nanny is asked to replace it at once (SIGTERM, then SIGKILL
        after :data:`UNRESPONSIVE_WORKER_GRACE`), which also ends a worker that
        never wakes.  A worker without a nanny is only removed.

        Parameters
        ----------
        address
            The worker (nothing happens if it is no longer known).
        why
            What it did, for the log: ``"not heard from in 300 s"``.
        event
            The event logged on the ``"scheduler"`` topic (its ``action`` names the stimulus).
        """
        ws = self.workers.get(address)
        if ws is None:
            return
        nanny = ws.nanny
        logger.warning(
            "Worker %s %s; removing it%s", address, why, f" and having its nanny {nanny} replace it" if nanny else ""
        )
        stream = self.stream_comms.get(address)
        self.send_all(self.remove_worker_state(address, stimulus_id=f"{event['action']}-{time.time()}"))
        self.log_event("scheduler", event)
        if stream is not None:
            stream.abort()
        if nanny:
            self.spawn(self._replace_unresponsive_worker(address, nanny, why), name="unresponsive-worker-replace")

    async def _replace_unresponsive_worker(self, address: str, nanny: str, why: str) -> None:
        """Ask ``nanny`` for a new worker process in place of the one at ``address``."""
        request = m.NannyRestart(
            op="restart",
            timeout=UNRESPONSIVE_WORKER_GRACE,
            reason=f"unresponsive worker: {address} {why}",
            wait=False,
            # Not a worker that the nanny has started since (the old one woke, closed and was replaced).
            worker=address,
        )
        try:
            await wait_for(self.rpc.call(nanny, request), self.server_settings.connect_timeout)
        except (OSError, CommClosedError, TimeoutError) as e:
            # Stuck too, or cut off with its worker: the worker learns it was removed when it wakes up.
            logger.warning("Could not ask nanny %s to replace the unresponsive worker %s: %r", nanny, address, e)

    def identity(self, n_workers: int = -1) -> dict[str, Any]:
        """A summary of this scheduler and its workers (the first ``n_workers`` of them; all when -1)."""
        workers: Iterable[WorkerState] = self.workers.values()
        if n_workers >= 0:
            workers = itertools.islice(workers, n_workers)
        return {
            "type": "Scheduler",
            "id": self.id,
            "address": self.address,
            "services": {name: server.port for name, server in self.services.items()},
            "started": self.time_started,
            "n_workers": len(self.workers),
            "total_threads": self.total_nthreads,
            "total_memory": sum(ws.memory_limit for ws in self.workers.values()),
            "workers": {ws.address: ws.identity() for ws in workers},
        }

    def __repr__(self) -> str:
        addr = self._address or "not started"
        return (
            f"<Scheduler {addr!r}, workers: {len(self.workers)}, "
            f"threads: {self.total_nthreads}, tasks: {len(self.tasks)}>"
        )

    # ======================================================================
    # Plugins and events
    # ======================================================================
    async def add_plugin(self, plugin: SchedulerPlugin, *, idempotent: bool = False, name: str | None = None) -> None:
        """Add a plugin and run its ``start`` hook."""
        name = name or getattr(plugin, "name", None) or f"{type(plugin).__name__}-{uuid.uuid4()}"
        if name in self.plugins and idempotent:
            return
        self.plugins[name] = plugin
        start = getattr(plugin, "start", None)
        if start is not None:
            result = start(self)
            if inspect.isawaitable(result):
                await result

    def remove_plugin(self, name: str) -> None:
        """Remove the plugin called ``name``."""
        if name not in self.plugins:
            raise ValueError(f"Could not find plugin {name!r} among {list(self.plugins)}")
        del self.plugins[name]

    def log_event(self, topic: str | Sequence[str], msg: Any) -> None:
        """Record an event under one or more topics, and send it to the clients subscribed to them."""
        topics = self.event_log.log(topic, msg)
        if self.plugins:
            for t in topics:
                self.call_plugins("log_event", t, msg)

    def get_events(self, topic: str | None = None) -> tuple[tuple[float, Any], ...] | dict[str, Any]:
        """The ``(time, msg)`` events of ``topic``, oldest first; of every topic, by topic, when None."""
        return self.event_log.get(topic)

    def subscribe_topic(self, topic: str, client: str) -> None:
        """Send client ``client`` each new event of ``topic``."""
        self.event_log.subscribe(topic, client)

    def unsubscribe_topic(self, topic: str, client: str) -> None:
        """Stop sending client ``client`` the events of ``topic``."""
        self.event_log.unsubscribe(topic, client)

    def send_all(self, out: Effects) -> None:
        """Send what a stimulus produced (the I/O shell of the state machine).

        Inside :meth:`holding_sends`, what was held is sent first, so that
        messages leave in the order of the stimuli that made them.
        """
        held = self._held
        if held is not None and out is not held:
            self._held = Effects()
            self._send(held)
        self._send(out)

    def keep_in_journal(self, op: str, msg: Mapping[str, Any]) -> None:
        """Keep ``msg`` (of operation ``op``) in the journal, if this scheduler keeps one.

        For what changes as it happens rather than with a request (a queue's
        items, a lease granted); see :mod:`distributed.scheduler.journal`.
        """
        if self.journal is not None:
            self.journal.record(op, msg)

    def _journal_state_records(self) -> None:
        """Keep in the journal, in order, what the transitions recorded (see :attr:`journal_records`).

        The keys ``fire_and_forget`` let go of one after another go in one release.
        """
        records, self.journal_records = self.journal_records or [], []
        done: list[Key] = []
        for record in records:
            if record["op"] == "client-releases-keys":
                done.extend(record["keys"])
                continue
            if done:
                self.keep_in_journal("client-releases-keys", _released_when_done(done))
                done = []
            self.keep_in_journal(record["op"], record)
        if done:
            self.keep_in_journal("client-releases-keys", _released_when_done(done))

    @contextmanager
    def holding_sends(self) -> Iterator[Effects]:
        """Gather the messages of several stimuli into one :class:`Effects`, sent at the end.

        For a batch of stream messages (a worker's task-finished reports):
        one send per batch instead of one per task.  Handlers that take the
        yielded ``Effects`` add to it; any other :meth:`send_all` flushes it first.
        """
        if self._held is not None:
            yield self._held  # nested: the outer holder sends
            return
        self._held = Effects()
        try:
            yield self._held
        finally:
            held, self._held = self._held, None
            self._send(held)

    @contextmanager
    def holding_frees(self, held: set[str]) -> Iterator[None]:
        """Hold the ``free-keys`` that :meth:`send_all` sends meanwhile, noting their workers in ``held``.

        For a client's batch of release messages: a client dropping 100,000
        futures sends their keys 2,000 a message, each handled in slices with
        others served in between, and each slice frees keys on most workers.
        With thousands of workers, a ``free-keys`` per worker per slice was a
        write per key or two.  Held, they wait in each worker's stream buffer
        (so the order of a worker's messages is kept, and any other message
        to it takes them along) until :meth:`send_held_frees`.  Hold only
        while the stimuli run, not across awaits: others' frees are not held.
        """
        outer, self._lazy_held = self._lazy_held, held
        try:
            yield
        finally:
            self._lazy_held = outer

    def _hold_frees(self, free: Mapping[str, list[Key]], held: set[str]) -> None:
        """Hold a ``free-keys`` of each worker's keys in its stream, joined to the one held before if still last.

        A client's release is handled a slice of keys at a time, and with
        thousands of workers most slices free a key or two on each: one message
        each was 86,000 ``free-keys`` for a 100,000-task map over 10,000 workers.
        This loop runs once per worker per slice (some 100,000 times for that
        map), so it keeps to a lookup and a join for a worker held before.
        """
        streams = self.stream_comms
        held_msgs = self._held_free_msgs
        for addr, keys in free.items():
            bs = streams.get(addr)
            if bs is None or not keys:
                continue
            last = held_msgs.get(addr)
            if last is not None:
                buffer = bs.buffer  # still the last message queued: nothing was queued after it, nothing written
                if buffer and buffer[-1] is last:
                    last["keys"].extend(keys)
                    continue
            msg = m.FreeKeys(op="free-keys", keys=list(keys))  # its own list: later slices' keys join it
            try:
                bs.hold(msg)
            except CommClosedError:
                continue
            held_msgs[addr] = msg
            held.add(addr)

    def send_held_frees(self, held: set[str]) -> None:
        """Have the ``free-keys`` held for the workers in ``held`` written (within their streams' interval)."""
        streams = self.stream_comms
        held_msgs = self._held_free_msgs
        for addr in held:
            held_msgs.pop(addr, None)
            bs = streams.get(addr)
            if bs is not None:
                try:
                    bs.send_lazy()
                except CommClosedError:
                    pass  # what it held is lost with the stream
        held.clear()

    @property
    def held_out(self) -> Effects | None:
        """The :class:`Effects` gathering messages during :meth:`holding_sends`, or None."""
        return self._held

    def _send(self, out: Effects) -> None:
        workers = self.workers
        for addr, msgs in out.workers.items():
            bs = self.stream_comms.get(addr)
            if bs is not None:
                try:
                    ws = workers.get(addr)
                    if ws is not None and len(ws.processing) - len(ws.long_running) <= ws.nthreads:
                        # No backlog there: its threads wait for these, so do not batch them.
                        bs.send_now(*msgs)
                    else:
                        bs.send(*msgs)
                except CommClosedError:
                    logger.debug("Worker %s stream closed; dropping %d messages", addr, len(msgs))
        lazy_held = self._lazy_held
        if lazy_held is not None:
            self._hold_frees(out.free, lazy_held)
        else:
            for addr, keys in out.free.items():
                bs = self.stream_comms.get(addr)
                if bs is not None and keys:
                    # After this stimulus's compute-tasks, and without hurrying them.
                    try:
                        bs.send_lazy(m.FreeKeys(op="free-keys", keys=keys))
                    except CommClosedError:
                        pass
        for client, client_msgs in out.clients.items():
            cbs = self.client_comms.get(client)
            if cbs is not None:
                try:
                    cbs.send(*client_msgs)
                except CommClosedError:
                    logger.debug("Client %s stream closed", client)
        if self.journal_records:
            self._journal_state_records()

    async def retire_workers(
        self,
        workers: Sequence[str] | None = None,
        *,
        names: Sequence[Any] | None = None,
        close_workers: bool = False,
        remove: bool = True,
        stimulus_id: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Retire workers gracefully: the data only they hold moves to other running workers first.

        Parameters
        ----------
        workers, names
            The workers to retire, by address or by name (not both).  With
            neither, ``kwargs`` choose them as :meth:`workers_to_close` does.
        close_workers
            Also tell the retired workers to close.
        remove
            Forget the retired workers at once (else they stay known, taking no tasks).
        stimulus_id
            For the logs and stories.
        **kwargs
            ``n``, ``target``, ``minimum``, ``memory_ratio`` and ``key`` (a
            callable ``WorkerState -> group``: groups are retired whole).

        Returns
        -------
        dict
            The retired workers' identities by address; a worker whose only
            copies could go nowhere stays and is not in it.
        """
        msg = m.RetireWorkers(
            op="retire_workers", workers=workers, names=names, close_workers=close_workers, remove=remove
        )
        if stimulus_id is not None:
            msg["stimulus_id"] = stimulus_id
        for name, value in kwargs.items():
            if name in ("n", "target", "minimum"):
                msg[name] = value  # type: ignore[literal-required]  # one of the int fields checked just above
            elif name == "memory_ratio":
                msg["memory_ratio"] = value
            elif name == "key":
                # In process: the caller's own callable, handed over as it is.
                msg["key"] = None if value is None else to_serialize(value)
            elif name == "attribute":
                raise TypeError(
                    "Scheduler.retire_workers(attribute=...): it returns the retired workers' identities by address; "
                    "use workers_to_close(attribute=...) to choose workers by another attribute"
                )
            else:
                raise TypeError(f"Scheduler.retire_workers() got an unexpected keyword argument {name!r}")
        return await self.requests.retire_workers(msg)

    def workers_to_close(
        self,
        memory_ratio: float | None = None,
        n: int | None = None,
        key: Callable[[WorkerState], Hashable] | None = None,
        minimum: int | None = None,
        target: int | None = None,
        attribute: str = "address",
    ) -> list[Any]:
        """Workers that can be closed at low cost (see ``retire_workers``), as their ``attribute``.

        Idle workers holding the least data come first.  Called in process,
        ``key`` runs as given; over the ``workers_to_close`` request, the
        caller sends it pickled and the scheduler unpickles and runs it, as
        it runs a function sent to ``run_on_scheduler``: sending one is an
        explicit request to run that code here.

        Parameters
        ----------
        memory_ratio
            Without ``n``/``target``: close idle workers as long as those left
            have this many times (default 2) the memory the data held needs.
        n
            How many workers to close.
        key
            A callable ``WorkerState -> group`` (say ``lambda ws: ws.host``):
            the workers of one group are closed together or not at all.
        minimum
            Workers to leave at least.
        target
            Workers to leave (``n`` is then the excess).
        attribute
            The :class:`WorkerState` attribute to return of each worker
            (``"address"``, ``"name"``, ``"host"``...).

        Examples
        --------
        >>> scheduler.workers_to_close(key=lambda ws: ws.host, attribute="name")  # doctest: +SKIP
        ['job-1-0', 'job-1-1']
        """
        if not isinstance(attribute, str) or attribute.startswith("_") or not hasattr(WorkerState, attribute):
            raise ValueError(f"workers_to_close(attribute={attribute!r}): not an attribute of WorkerState")
        chosen = self.requests.workers_to_close(n=n, target=target, minimum=minimum, memory_ratio=memory_ratio, key=key)
        return [getattr(ws, attribute) for ws in chosen]

    def adaptive_target(self, target_duration: float | str | None = None) -> int:
        """How many workers the current load wants, for adaptive scaling.

        Enough threads to get through the work in hand (the expected time of
        the tasks processing, queued and unrunnable) within ``target_duration``,
        but never more threads than there are tasks to run; turned into workers
        by the mean threads per worker.  At least one worker while tasks wait
        and none runs; twice the workers when the data held fills more than 60%
        of their memory limits.  Below the current count, only the workers that
        :meth:`workers_to_close` would let go (idle, with room for their data
        elsewhere) are given up.

        Parameters
        ----------
        target_duration
            How long the work in hand should take (default
            ``distributed.adaptive.target-duration``); shorter asks for more workers.
        """
        if target_duration is None:
            target_duration = dask.config.get("distributed.adaptive.target-duration")
        duration = float(parse_timedelta(target_duration, "s") or 0)
        if duration <= 0:
            raise ValueError(f"adaptive_target(target_duration={target_duration!r}): it must be positive")
        workers = list(self.workers.values())
        busy = sum(ws.occupancy for ws in workers)
        n_tasks = self.n_queued + len(self.unrunnable) + self.n_processing
        # Waiting work: measured on a sample, so that a long queue costs no more than 100 lookups.
        waiting = self.n_queued + len(self.unrunnable)
        sample = [ts for ts in itertools.islice(self.queued, 200) if ts.state == "queued"][:100]
        sample += list(itertools.islice(self.unrunnable, 100 - len(sample)))
        if sample:
            busy += sum(self.get_task_duration(ts) for ts in sample) * waiting / len(sample)
        threads = min(math.ceil(busy / duration), n_tasks)
        if workers:
            per_worker = sum(ws.nthreads for ws in workers) / len(workers)
            cpu = math.ceil(threads / max(per_worker, 1))
        else:
            cpu = threads
        if waiting and not workers:
            cpu = max(cpu, 1)
        limit = sum(ws.memory_limit for ws in workers)
        held = sum(max(ws.nbytes, 0) for ws in workers)
        memory = 2 * len(workers) if limit > 0 and held > 0.6 * limit else 0
        target = max(cpu, memory)
        if target >= len(workers):
            return target
        return len(workers) - len(self.workers_to_close())

    async def wait_for_workers(self, n_workers: int) -> None:
        """Return once at least ``n_workers`` workers are connected."""
        while len(self.workers) < n_workers:
            if self._worker_joined is None:
                self._worker_joined = asyncio.Event()
            self._worker_joined.clear()
            await self._worker_joined.wait()

    def set_metadata(self, keys: Any, value: Any) -> None:
        """Put ``value`` at the path ``keys`` (a key, or a list of them) of :attr:`task_metadata`."""
        self.metadata_store.set(keys, value)

    def get_metadata(self, keys: Any, default: Any = no_default) -> Any:
        """The value at the path ``keys`` of :attr:`task_metadata`; ``default`` (else ``KeyError``) when none."""
        try:
            return self.metadata_store.get(keys)
        except KeyError:
            if default is no_default:
                raise
            return default

    async def trim_heap(self) -> bool:
        """Hand the heap memory freed since tasks were last forgotten back to the OS.

        Runs in a thread (tens of milliseconds on a large fragmented heap), so
        the event loop goes on meanwhile.  Called every :data:`HEAP_TRIM_INTERVAL`
        seconds on glibc.

        Returns
        -------
        Whether the heap was trimmed: not when no task was forgotten since the last time.
        """
        forgotten = self.tasks_forgotten
        if forgotten == self._heap_trimmed_at_forgotten:
            return False
        self._heap_trimmed_at_forgotten = forgotten
        await asyncio.to_thread(heap.trim)
        return True

    def _check_no_workers(self) -> None:
        if self.status in (Status.closing, Status.closed):
            return
        now = time.time()
        self.send_all(self.fail_unrunnable_tasks(now, stimulus_id=f"no-workers-timeout-{now}"))

    def _check_full_disks(self) -> None:
        if self.full_disk_timeout is None or self.status in (Status.closing, Status.closed):
            return
        now = time.time()
        if not self.workers_stuck_on_full_disks():
            self.full_disks_since = None
        elif self.full_disks_since is None:
            self.full_disks_since = now
        elif now - self.full_disks_since >= self.full_disk_timeout:
            self.full_disks_since = None
            self.send_all(self.fail_tasks_stuck_on_full_disks(stimulus_id=f"full-disk-timeout-{now}"))

    def on_worker_joined(self, ws: WorkerState) -> None:
        """Wake :meth:`wait_for_workers`; keep the worker's event topic."""
        self.event_log.worker_joined(ws.address)
        if self._worker_joined is not None:
            self._worker_joined.set()

    def on_worker_left(self, address: str) -> None:
        """Drop the stream and the pooled connections to the worker; its event topic joins those of the departed."""
        self.stream_comms.pop(address, None)
        self.rpc.remove(address)
        self.event_log.worker_left(address)
        if self.journal is not None:
            self.journal.worker_left(address)


def _released_when_done(keys: list[Key]) -> m.ClientKeys:
    return m.ClientKeys(op="client-releases-keys", client=m.FIRE_AND_FORGET, keys=keys)


def _recording(journal: Journal, op: str, func: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``func``, keeping each message in ``journal`` first."""

    def record_then_handle(comm: Any, msg: Any) -> Any:
        seq = journal.record(op, msg, applying=True)
        try:
            result = func(comm, msg)
        except BaseException:
            journal.applied(seq)
            raise
        if inspect.isawaitable(result):
            return _applied_after(journal, seq, result)
        journal.applied(seq)
        return result

    return record_then_handle


async def _applied_after(journal: Journal, seq: int, handling: Awaitable[Any]) -> Any:
    """Await ``handling`` (of the journal's message ``seq``), then tell the journal it has been applied."""
    try:
        return await handling
    finally:
        journal.applied(seq)
