"""The worker: runs tasks in a thread pool and serves their results.

This module is the I/O shell around :class:`~distributed.worker.state_machine.
WorkerStateMachine`: it turns messages from the scheduler and results from
threads into events, and carries out the instructions the state machine
returns (run a task, fetch data from a peer, message the scheduler).
Its parts live beside it, each a base class of :class:`Worker`: the link to
the scheduler (registering, the scheduler's stream and its loss, the
heartbeat) in :mod:`~distributed.worker.scheduler_link`, peer transfers in
:mod:`~distributed.worker.transfers`, running tasks in
:mod:`~distributed.worker.running`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import os
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Literal

import dask.config
import psutil
from dask.sizeof import sizeof
from dask.utils import parse_timedelta, typename

from distributed.client.client import get_client
from distributed.comm import Comm, CommClosedError, validate_address
from distributed.comm.addressing import listen_addresses, listen_protocol, parse_ports
from distributed.config import log_length, silence_logging
from distributed.config_refusals import refuse_unhonoured_config
from distributed.core import RemoteRequests, Route, Server, Status, StreamRoute
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.gc_tending import LargeStateGC
from distributed.http.server import HTTPServerHandle
from distributed.offload import offload_threshold, unwrap_all
from distributed.preloading import PreloadManager, process_preloads
from distributed.profile import Profiler, ProfileSettings, ProfileState, create
from distributed.protocol import messages as m
from distributed.protocol.compression import codec_for
from distributed.protocol.framing import is_msgpack_serializable
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize, unwrap
from distributed.security import Security, acting_as, coerce_security
from distributed.shuffle._worker_plugin import ShuffleWorkerExtension
from distributed.spill import SpillBuffer
from distributed.task_context import context_worker, rejoin, secede, thread_state
from distributed.threadpool import ThreadPool
from distributed.uploads import import_uploaded, save_upload
from distributed.utils import get_ip_interface, scheduler_address, unsupported, wait_for
from distributed.utils_comm import retry_settings
from distributed.versions import get_versions
from distributed.worker import hardware, reporting
from distributed.worker.actors import ActorHost
from distributed.worker.execution import (
    Runnable,
    consume,
    run_actor_method,
)
from distributed.worker.executors import (
    named_executors,
    offload_executor,
)
from distributed.worker.memory import WorkerMemoryMonitor, parse_max_spill, parse_memory_limit, spill_target
from distributed.worker.options import check_unsupported_worker_kwargs
from distributed.worker.running import TaskRunning
from distributed.worker.scheduler_link import FIRST_CONNECT_TIMEOUT as FIRST_CONNECT_TIMEOUT  # re-exported
from distributed.worker.scheduler_link import SchedulerLink
from distributed.worker.settings import WorkerSettings
from distributed.worker.state_machine import (
    AcquireReplicasEvent,
    BusyWorkerRetry,
    ComputeTaskEvent,
    Execute,
    ExecuteFailure,
    ExecuteStarted,
    ExecuteSuccess,
    FreeKeysEvent,
    GatherDep,
    HeldDataEvent,
    Instruction,
    RescheduleEvent,
    RetryBusyWorkerLater,
    SecedeEvent,
    SendMessage,
    StateMachineEvent,
    StealRequestEvent,
    UpdateDataEvent,
    WorkerStateMachine,
    WorkerTaskStateName,
)
from distributed.worker.storage import DataFactory, data_factory
from distributed.worker.transfers import PeerTransfers
from distributed.workspace import WorkDir, WorkSpace

if TYPE_CHECKING:
    from distributed.client import Client
    from distributed.dashboard.worker import WorkerDashboard

logger = logging.getLogger("distributed.worker")  # the name users configure, as in dask

__all__ = ["Worker", "get_client", "get_worker", "parse_memory_limit", "rejoin", "secede"]

#: Seconds before a peer that answered get_data with "busy" is asked again.
BUSY_RETRY_DELAY = 0.15


class Worker(Server, PeerTransfers, TaskRunning, SchedulerLink):
    """A worker: runs tasks the scheduler assigns and holds their results.

    Parameters
    ----------
    scheduler_ip
        The scheduler's address (``"tcp://127.0.0.1:8786"``).
    nthreads
        Threads that run tasks (default: the number of cores).
    name
        A name unique in the cluster (default: the worker's address).
    memory_limit
        ``"auto"`` (the machine's memory times this worker's share of its cores),
        bytes, a fraction of the machine's memory, or a string like ``"4GiB"``;
        0 or ``None`` for no limit.  Past ``distributed.worker.memory.target``
        of it, the least recently used results are spilled to
        ``local_directory/storage`` (see :class:`~distributed.spill.SpillBuffer`).
    memory_target_fraction, memory_spill_fraction, memory_pause_fraction
        Override ``distributed.worker.memory.target``/``spill``/``pause``
        (fractions of ``memory_limit``; ``False`` turns the step off).
    memory_monitor_interval
        Override ``distributed.worker.memory.monitor-interval``.
    max_spill
        Bytes (or a string such as ``"10 GiB"``) the spill files may take in all;
        past it results stay in memory.  ``False``: no limit.  Default from
        ``distributed.worker.memory.max-spill``.
    dashboard, dashboard_address
        ``dashboard=True`` serves the worker's HTTP routes and its bokeh
        dashboard (:mod:`distributed.dashboard.worker`) at ``dashboard_address``
        (default ``":0"``, a free port); an address alone serves the routes
        (``/health``, ``/info``, ``/metrics``) only.  The port is
        :attr:`service_ports`'s ``"dashboard"``.
    extensions
        Parts of the worker made with it: ``{name: factory}``, each called with
        the worker (``worker.extensions[name]``); one with ``heartbeat()`` sends
        its value with each heartbeat to the scheduler extension of the same
        name (``heartbeat(ws, value)``), one with ``close()`` is closed with the worker.
    executor
        Where tasks run instead of the worker's own thread pool: a
        ``concurrent.futures.Executor`` (the default one), a mapping of names to
        them (tasks choose one with ``dask.annotate(executor=name)``), or
        ``"offload"`` (see :mod:`distributed.worker.executors`).  The worker
        shuts them down as it closes.
    profile_cycle_interval
        Override ``distributed.worker.profile.cycle`` (a number is milliseconds, as in dask).
    data
        Where results are kept instead of the worker's own (spilling) store: a
        ``MutableMapping``, a callable making one (given the local directory
        if it has a ``worker_local_directory`` parameter), or a
        ``(callable, kwargs)`` pair (see :mod:`distributed.worker.storage`).
    host, port, protocol, interface
        Where to listen.  ``host`` is an IP address or host name and may carry
        a scheme (``"tcp://10.0.0.5"``); ``interface`` names a network
        interface to take the IPv4 address of instead.  ``port`` is a number,
        or a range ``"9000:9010"`` tried in order.  The protocol defaults to
        the scheduler's (``"tls"`` when ``security`` requires encryption).
        Without a host the worker listens on loopback when the scheduler is
        on loopback, else on all interfaces, announcing the address of the
        interface through which it reaches the scheduler.
    listen_address, contact_address
        Listen at exactly ``listen_address`` (``"tcp://0.0.0.0:9000"``), and
        announce ``contact_address`` to the scheduler and peers instead
        (behind NAT or in a container).
    security
        A :class:`~distributed.security.Security` (or a dict of its keywords):
        the TLS credentials of the ``worker`` role, used to listen and to
        connect to the scheduler and other workers.  Default from config.
    resources
        Abstract resources, e.g. ``{"GPU": 1}``.
    validate
        Check state-machine invariants after every event.
    scheduler_file
        Read the scheduler's address from this JSON file.
    death_timeout
        Seconds to keep trying to reach the scheduler, at start and after losing
        it; past it the worker closes.  A worker that loses its scheduler without
        being asked to close keeps its results and registers again with whatever
        scheduler comes back at the same address (restarted, or taking over from
        its journal), under a nanny or not; unset, it tries for
        ``distributed.worker.reconnect-timeout``.
    nanny
        The address of this worker's :class:`~distributed.Nanny` (set by the
        nanny that starts it).
    lifetime, lifetime_stagger
        Close gracefully (handing the data off) after this long, give or take
        a random part of ``lifetime_stagger``.  Defaults from
        ``distributed.worker.lifetime.duration`` and ``.stagger``.
    lifetime_restart
        At the end of ``lifetime``, have the nanny start a new worker rather
        than close too (needs a nanny and a ``lifetime``).  Default from
        ``distributed.worker.lifetime.restart`` (for a worker with a nanny).
    preload
        Modules to run in the worker: module names, paths to ``.py`` files,
        ``http(s)://`` addresses or module source (see
        :mod:`distributed.preloading`), imported now; their ``dask_setup(worker)``
        runs once it listens, before it registers with the scheduler, and
        ``dask_teardown(worker)`` as it closes.  Default from
        ``distributed.worker.preload``.
    preload_argv
        Arguments for a preload whose ``dask_setup`` is a click command: one
        list for all, or one per preload.  Default from
        ``distributed.worker.preload-argv``.

    Examples
    --------
    >>> async with Worker("tcp://127.0.0.1:8786", nthreads=2) as w:  # doctest: +SKIP
    ...     await w.finished()
    """

    #: Every module of the worker package logs under this name.
    log_prefix = "distributed.worker"

    def __init__(
        self,
        scheduler_ip: str | None = None,
        scheduler_port: int | None = None,
        *,
        scheduler_file: str | None = None,
        nthreads: int | None = None,
        name: Any = None,
        memory_limit: str | float | None = "auto",
        memory_target_fraction: float | Literal[False] | None = None,
        memory_spill_fraction: float | Literal[False] | None = None,
        memory_pause_fraction: float | Literal[False] | None = None,
        memory_monitor_interval: str | float | None = None,
        max_spill: float | str | Literal[False] | None = None,
        host: str | None = None,
        port: int | str | None = 0,
        protocol: str | None = None,
        listen_address: str | None = None,
        contact_address: str | None = None,
        resources: Mapping[str, float] | None = None,
        validate: bool | None = None,
        local_directory: str | None = None,
        heartbeat_interval: float | str | None = None,
        nanny: str | None = None,
        plugins: Iterable[WorkerPlugin] = (),
        data: Any = None,
        death_timeout: float | str | None = None,
        loop: Any = None,
        interface: str | None = None,
        security: Security | dict[str, Any] | None = None,
        lifetime: float | str | None = None,
        lifetime_stagger: float | str | None = None,
        lifetime_restart: bool | None = None,
        dashboard: bool | None = None,
        dashboard_address: str | None = None,
        silence_logs: int | bool | None = None,
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        metrics: Mapping[str, Callable[[Worker], Any]] | None = None,
        startup_information: Mapping[str, Callable[[Worker], Any]] | None = None,
        profile_cycle_interval: float | str | None = None,
        extensions: Mapping[str, Callable[[Worker], Any]] | None = None,
        executor: Executor | Mapping[str, Executor] | str | None = None,
        **kwargs: Any,
    ) -> None:
        check_unsupported_worker_kwargs(kwargs)
        #: The executors given as ``executor=``, by name (see :mod:`distributed.worker.executors`);
        #: empty when every task runs in the worker's own pool.
        self.task_executors: dict[str, Executor] = named_executors(executor)
        #: Extra heartbeat metrics: name -> ``f(worker)`` (or a coroutine function), as in dask.
        self.custom_metrics: dict[str, Callable[[Any], Any]] = reporting.named_callables(metrics, "metrics")
        #: What the worker tells the scheduler as it registers: name -> ``f(worker)``; the values
        #: show in the scheduler's identity of the worker (``scheduler_info()``).
        self.startup_information: dict[str, Callable[[Any], Any]] = reporting.named_callables(
            startup_information, "startup_information"
        )
        self.security = coerce_security(security, "Worker")
        #: How fetches from peers are retried (``distributed.comm.retry.*``; see utils_comm).
        self.comm_retry = retry_settings()
        #: Bytes from which data sent or received is (de)serialised off the event loop (``distributed.comm.offload``).
        self.offload_threshold = offload_threshold()
        # First: a preload may change the config that the rest of construction reads.
        #: The preloads, imported; set up once the worker listens, torn down as it closes.
        self.preloads: PreloadManager = process_preloads(
            self,
            preload or None,
            preload_argv or None,
            config_preload="distributed.worker.preload",
            config_argv="distributed.worker.preload-argv",
        )
        refuse_unhonoured_config("worker")
        if lifetime_restart and nanny is None:
            raise unsupported("Worker", "lifetime_restart", "it needs a nanny to start the new worker")
        if lifetime_restart and lifetime is None:
            raise ValueError("Worker(lifetime_restart=True) needs lifetime=")
        if interface is not None:
            if host is not None:
                raise ValueError("Worker: give host= or interface=, not both")
            host = get_ip_interface(interface)
        if listen_address is not None and (host is not None or port):
            raise ValueError("Worker: listen_address= already says where to listen; drop host=, interface= and port=")
        if contact_address is not None:
            validate_address(contact_address)
        if silence_logs:
            silence_logging(logging.ERROR if silence_logs is True else int(silence_logs))
        scheduler_ip = scheduler_address(scheduler_ip, scheduler_port, scheduler_file, who="worker")
        self.scheduler_addr: str = scheduler_ip
        self.nthreads = int(nthreads or os.cpu_count() or 1)
        self.name = name
        self.memory_limit = parse_memory_limit(memory_limit, self.nthreads)
        self._host = host
        self._ports = parse_ports(port)
        self._protocol = listen_protocol(protocol, host, scheduler_ip, self.security.require_encryption)
        self._listen_address = listen_address
        self._contact_address = contact_address
        settings = WorkerSettings.from_config(
            validate=validate,
            resources=resources,
            local_directory=local_directory,
            memory_monitor_interval=memory_monitor_interval,
            heartbeat_interval=heartbeat_interval,
            lifetime=lifetime,
            lifetime_stagger=lifetime_stagger,
            lifetime_restart=lifetime_restart,
        )
        #: The settings read from the config.
        self.settings = settings
        self.resources = dict(settings.resources)
        self.validate = settings.validate
        self.id = f"Worker-{uuid.uuid4()}"
        # Each worker gets a directory of its own under the base (as dask.distributed's do),
        # so workers given the same local_directory never share scratch files.
        self.local_directory = os.path.join(
            settings.directory_base, "dask-scratch-space", f"worker-{self.id[len('Worker-') :]}"
        )
        self._work_dir: WorkDir | None = None
        self.lifetime = settings.lifetime
        if self.lifetime is not None and settings.lifetime_stagger:
            self.lifetime = max(self.lifetime + (random.random() * 2 - 1) * settings.lifetime_stagger, 0.0)
        #: At the end of ``lifetime``, have the nanny start a new worker (instead of closing it too).
        #: From config, as in dask, a worker without a nanny has no one to start it again, and just closes.
        self.lifetime_restart = settings.lifetime_restart and nanny is not None
        self.dashboard_address = dashboard_address
        self._serve_http = bool(dashboard) if dashboard is not None else dashboard_address is not None
        # As in dask.distributed, the bokeh pages only with dashboard=True (an address alone serves the routes).
        self._serve_dashboard = bool(dashboard)
        self.http_server: HTTPServerHandle | None = None
        #: The bokeh pages on the HTTP port (``dashboard=True``), while served.
        self.dashboard_server: WorkerDashboard | None = None
        #: This process, for the heartbeat's memory and CPU figures (set as the worker starts).
        self.psutil_process: psutil.Process | None = None
        self.memory_monitor = WorkerMemoryMonitor(
            self, target=memory_target_fraction, spill=memory_spill_fraction, pause=memory_pause_fraction
        )
        #: Seconds between two memory checks.
        self.memory_monitor_interval = settings.memory_monitor_interval
        self.heartbeat_interval = settings.heartbeat_interval
        self.nanny = nanny
        self.death_timeout = parse_timedelta(death_timeout) if death_timeout is not None else None
        self.data: MutableMapping[Key, Any] = data if isinstance(data, MutableMapping) else {}
        #: Makes the data mapping once the local directory exists (``data=`` a callable or ``(callable, kwargs)``).
        self._data_factory: DataFactory | None = (
            None if data is None or isinstance(data, MutableMapping) else data_factory(data)
        )
        # With a memory limit the data becomes a spill buffer at start (it owns a directory);
        # without one it stays a plain dict: the per-task path pays nothing.
        self._spill_target = spill_target(self.memory_limit, self.memory_monitor) if data is None else None
        if max_spill not in (None, False) and self._spill_target is None:
            # Nothing spills without a memory limit (or with data= of the caller's): the limit would do nothing.
            raise ValueError(f"max_spill={max_spill!r} needs a memory_limit and no data=: nothing spills otherwise")
        self._max_spill = self.memory_monitor.max_spill_bytes = parse_max_spill(max_spill)
        #: Most bytes fetched from peers at once (``distributed.worker.memory.transfer`` of the memory limit).
        self._incoming_bytes_limit = (
            settings.transfer_fraction * self.memory_limit
            if settings.transfer_fraction is not None and self.memory_limit
            else math.inf
        )
        self._spill_codec = codec_for(settings.spill_compression, "distributed.worker.memory.spill-compression")
        self.state: WorkerStateMachine | None = None
        #: The garbage collector's tending, for a worker alone in its process (see :meth:`tend_gc_alone`).
        self.gc_tending: LargeStateGC | None = None
        self.executor = ThreadPool(self.nthreads, name="Dask-Worker-Threads")
        self.plugins: dict[str, WorkerPlugin] = {}
        self._initial_plugins = list(plugins)
        self._client: Client | None = None
        self._running_tasks: set[asyncio.Task[Any]] = set()
        self._results: list[StateMachineEvent] = []
        self._results_lock = threading.Lock()
        self._results_wake_pending = False
        #: Ready tasks lined up, in order, for pool threads that finish their task (see _line_up_next);
        #: set by the loop, taken by pool threads, both under _results_lock.
        self._lined_up: deque[Runnable] = deque()
        #: Whether pool threads may take from _lined_up: closed while the loop feeds events to the state machine.
        self._lineup_open = False
        #: A pool thread whose result is at least this large leaves the lined-up task to the loop (see _post_result).
        self._large_result_bytes = math.inf
        #: The tasks last prepared to run (their specs unpickled), by key: reused when lined up again or executed.
        self._prepared: dict[Key, Runnable] = {}
        #: The events of the scheduler's batch being handled, fed to the state machine together at its end
        #: (see :meth:`dispatch_stream`); None outside a batch.
        self._stream_events: list[StateMachineEvent] | None = None
        self.outgoing_transfer_count = 0
        #: Replies to peers' get_data being written now, and the most allowed (see PeerTransfers.handle_get_data).
        self.outgoing_to_peers = 0
        self.incoming_connections_limit = settings.serve_concurrency
        #: Bytes (by sizeof) sent to and received from other workers since the worker started.
        self.transfer_outgoing_bytes_total = 0
        self.transfer_incoming_bytes_total = 0
        self._close_timeout = 30.0
        self._close_executor_wait = True
        #: (tell the nanny to close too, why), from the first close() call.
        self._close_nanny: tuple[bool, str] | None = None
        # Set as soon as the scheduler (close-worker) or a peer (close) asks us to close: the close
        # itself starts a moment later, and the end of the scheduler's stream that comes with the
        # request must not be taken for a lost scheduler meanwhile.
        self._close_requested = False
        #: ``(key, run_id)`` of the runs a pool thread had under way when the scheduler was lost:
        #: their results, when they come, are dropped (see :meth:`forget_tasks`).
        self._abandoned_runs: set[tuple[Key, int]] = set()
        #: Abandoned runs that the next scheduler asked for again under the same ``(key, run_id)``
        #: (its run ids start afresh): the first result is kept, whichever thread it comes from.
        self._rerun_abandoned: set[tuple[Key, int]] = set()
        self.incoming_transfer_count = 0
        #: The actors held here; the data store holds an Actor proxy for each (see distributed.client.actor).
        self.actor_host = ActorHost(functools.partial(run_actor_method, self))
        #: Actor instances by key.
        self.actors: dict[Key, object] = self.actor_host.instances
        #: Runs the actors' (non-async) methods, one call at a time.
        self.actor_executor = self.actor_host.executor
        #: Thread id -> key of the task it runs now (the profiler reads it to attribute samples).
        self.active_threads: dict[int, Key] = {}
        # Read (and checked) now: a setting refused must stop the worker before it starts.
        self._profile_settings = ProfileSettings(cycle=profile_cycle_interval)
        #: The statistical profiler, while the worker runs (None when disabled).
        self.profiler: Profiler | None = None
        handlers: dict[str, Route[Any]] = {
            "get_data": Route(m.GetData, self.handle_get_data),
            "update_data": Route(m.WorkerUpdateData, self.handle_update_data),
            "run": Route(m.RunFunction, self.handle_run),
            "identity": Route(m.Empty, self.handle_identity),
            "benchmark_memory": Route(m.BenchmarkLocal, self.handle_benchmark_memory),
            "benchmark_disk": Route(m.BenchmarkLocal, self.handle_benchmark_disk),
            "benchmark_network": Route(m.BenchmarkNetwork, self.handle_benchmark_network),
            "versions": Route(m.VersionsRequest, lambda comm, msg: get_versions(msg.get("packages"))),
            "close": Route(m.WorkerClose, self.handle_close),
            "keys": Route(m.Empty, lambda comm, msg: list(self.data)),
            "acquire-replicas": Route(m.AcquireReplicas, self.handle_acquire_replicas),
            # As on the stream, answered once the keys are freed (rebalance waits for it).
            "free-keys": Route(m.FreeKeys, self.handle_free_keys),
            "plugin-add": Route(m.PluginAdd, self.handle_plugin_add),
            "plugin-remove": Route(m.PluginRemove, self.handle_plugin_remove),
            "actor_execute": Route(m.ActorExecute, self.handle_actor_execute),
            "actor_attribute": Route(m.ActorAttribute, self.handle_actor_attribute),
            "profile": Route(m.WorkerProfile, self.handle_profile),
            "profile_metadata": Route(m.WorkerProfileMetadata, self.handle_profile_metadata),
            "story": Route(m.StoryRequest, lambda comm, msg: [tuple(t) for t in self.story(*msg["keys"])]),
        }
        stream_handlers: dict[str, StreamRoute[Any]] = {
            "compute-task": StreamRoute(m.ComputeTask, self._stream_compute_task),
            "free-keys": StreamRoute(m.FreeKeys, self._stream_free_keys),
            "close-worker": StreamRoute(m.CloseWorker, self._stream_close_worker),
            # From the scheduler (replicate, rebalance): on the stream, so it comes after any free-keys sent before.
            "acquire-replicas": StreamRoute(m.AcquireReplicas, self._stream_acquire_replicas),
            "steal-request": StreamRoute(m.StealRequest, self._stream_steal_request),
        }
        #: The worker's part of P2P shuffles (transfer, barrier and unpack tasks reach it).
        self.shuffle = ShuffleWorkerExtension(self)
        handlers.update(self.shuffle.routes())
        super().__init__(
            handlers,
            stream_handlers,
            connection_args=self.security.get_connection_args("worker"),
            listen_args=self.security.get_listen_args("worker"),
        )
        #: ``Worker(extensions=)``: each factory's product by name, made last (it may use the whole worker).
        self.extensions: dict[str, Any] = {
            name: factory(self) for name, factory in reporting.named_callables(extensions, "extensions").items()
        }

    def _blocked_handlers(self) -> list[str]:
        return list(self.settings.blocked_handlers)

    @property
    def status(self) -> Status:
        """The worker's status; pausing and resuming are reported to the scheduler."""
        return self._status

    @status.setter
    def status(self, value: Status) -> None:
        old = getattr(self, "_status", None)
        self._status = value
        if value is not Status.running:
            self._take_back_lined_up()
        if old in (Status.running, Status.paused) and value in (Status.running, Status.paused) and old != value:
            bs = self.batched_stream
            if bs is not None:
                try:
                    bs.send(m.WorkerStatusChange(op="worker-status-change", status=value.value))
                except CommClosedError:
                    pass

    # -- life cycle ---------------------------------------------------------------
    async def start_unsafe(self) -> None:
        addrs, default_host = listen_addresses(
            self._listen_address, self._host, self._ports, self._protocol, self.scheduler_addr, who="Worker"
        )
        await self.listen_first_free(addrs, default_host)
        if self._contact_address:
            self._address = self._contact_address
        await self._make_local_directory()
        if self._data_factory is not None:
            self.data = self._data_factory(self.local_directory)
        if self._spill_target is not None:
            self.data = SpillBuffer(
                os.path.join(self.local_directory, "storage"),
                target=self._spill_target,
                max_spill=self._max_spill,
                codec=self._spill_codec,
            )
            self.memory_monitor.watch(self.data)
        large = self.memory_monitor.large_result_bytes()
        if large is not None:
            self._large_result_bytes = float(large)
        self.psutil_process = psutil.Process()
        self.psutil_process.cpu_percent()  # the first call only starts the measurement
        if self._serve_http:
            from distributed.http.worker import start_worker_http_server

            self.http_server, self.dashboard_server = await start_worker_http_server(
                self, self.dashboard_address or ":0", dashboard=self._serve_dashboard
            )
        self.state = self._new_state_machine(
            transfer_limit=self.settings.transfer_limit,
            fetch_concurrency=self.settings.fetch_concurrency,
        )
        self._update_transition_hook()
        if self.name is None:
            self.name = self.address
        for plugin in self._initial_plugins:
            await self.add_plugin(plugin)
        # Before joining, as in dask.distributed: what a setup adds (handlers, plugins) is there for the first task.
        await self.preloads.start()
        await self.register_with_scheduler()
        settings = self._profile_settings
        if settings.enabled:
            self.profiler = Profiler(self.active_threads, threading.get_ident(), settings.interval, settings.cycle)
            self.profiler.start()
        self.periodic(self.heartbeat_interval, self.heartbeat, name="heartbeat")
        if self.memory_limit:
            self.periodic(self.memory_monitor_interval, self.memory_monitor.check, name="memory-monitor")
        if self.lifetime is not None:
            self.spawn(self._close_after_lifetime(self.lifetime), name="lifetime")
        logger.info("Worker %s at %s, %d threads", self.name, self.address, self.nthreads)

    def held_nbytes(self) -> dict[Key, int]:
        """The size of each result held, as measured when it was stored (a spilled one is not read back).

        What the worker reports of its results as it registers, and what a new
        state machine is told of them after the scheduler was lost.
        """
        tasks = self.state.tasks if self.state is not None else {}
        nbytes: dict[Key, int] = {}
        for key in list(self.data):
            ts = tasks.get(key)
            # Unknown to the state machine: data= given filled, before the first registration.
            nbytes[key] = ts.nbytes if ts is not None else sizeof(self.data[key])
        return nbytes

    @property
    def closing_started(self) -> bool:
        """Whether the worker closes, or was asked to (``close()`` runs as ``running`` until its last steps).

        The end of the scheduler's stream is then no loss to recover from.
        """
        return (
            self._close_requested
            or self._close_nanny is not None
            or self.status in (Status.closing, Status.closed, Status.closing_gracefully)
        )

    def forget_tasks(self) -> None:
        """Keep the results held and forget every other task, under a new state machine.

        Called by the scheduler link once it lost the scheduler and dropped
        the stream (see :mod:`~distributed.worker.scheduler_link`).
        Synchronous, so that nothing happens between the loss and the new
        state: fetches and async executions are cancelled (the link awaits
        them, :meth:`cancel_coroutines`, before it registers again), and a
        task a pool thread still runs is abandoned: its result is dropped when
        it comes (:meth:`_apply_results`).  The new machine knows each key
        held as a task in memory, so that the next scheduler may use, serve
        and free it.
        """
        # A run through the execute coroutine (async tasks, other executors, large specs; see
        # TaskRunning) reports nothing once that is cancelled: only pool threads' runs are waited out.
        coroutine_runs = {task.get_name() for task in self._running_tasks if not task.done()}
        for task in self._running_tasks:
            task.cancel()
        old = self.state
        if old is None:
            return
        self._take_back_lined_up()
        abandoned = self._abandoned_runs
        for ts in (*old.executing, *old.long_running):
            if f"execute-{ts.key}" not in coroutine_runs:
                abandoned.add((ts.key, ts.run_id))
        with self._results_lock:
            pending, self._results = self._results, []
        finished: dict[Key, int] = {}
        for ev in pending:  # in the order the threads posted them
            if type(ev) is ExecuteStarted:
                started = old.tasks.get(ev.key)
                if started is not None:
                    abandoned.add((started.key, started.run_id))
            elif isinstance(ev, (ExecuteSuccess, ExecuteFailure, RescheduleEvent)):
                abandoned.discard((ev.key, ev.run_id))  # finished: nothing more will come of it
                if type(ev) is ExecuteSuccess and self._keep_result(ev):
                    finished[ev.key] = ev.nbytes
        nbytes = {**self.held_nbytes(), **finished}
        state = self.state = self._new_state_machine(old.transfer_limit, old.fetch_concurrency)
        state.paused = old.paused
        state.tasks_made += old.tasks_made  # a count of all the records made, as the collector's tending reads it
        state.log = old.log  # a key's story goes on across the loss
        self._update_transition_hook()
        self.handle_stimulus(HeldDataEvent(stimulus_id=f"scheduler-lost-{time.time()}", nbytes=nbytes))
        if self.actor_host.keys:
            self._prune_actors(list(self.actor_host.keys))

    def _keep_result(self, ev: ExecuteSuccess) -> bool:
        """Store the value of a run that ended as the scheduler was lost; whether it was (not an actor's)."""
        if ev.key in self.data or ev.key in self.actor_host.keys:
            return False
        try:
            self.data[ev.key] = ev.value
        except Exception:  # the store refused it (a full disk): the next scheduler runs the task again
            logger.exception("Could not keep the result of %s after losing the scheduler", ev.key)
            return False
        return True

    async def cancel_coroutines(self) -> None:
        """Cancel the fetches and the executions run as coroutines, and await their end.

        A task running in a pool thread carries on, unawaited (see :meth:`forget_tasks`).
        """
        while running := [t for t in self._running_tasks if not t.done()]:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def get_metrics(self) -> m.WorkerMetrics:
        """What the heartbeat reports: memory (RSS), CPU percent since the last call, task counts."""
        return reporting.own_metrics(self)

    async def _close_after_lifetime(self, lifetime: float) -> None:
        await asyncio.sleep(lifetime)
        logger.info("Worker %s reached its lifetime of %.1f s; closing gracefully", self.address, lifetime)
        self.spawn(
            self.close_gracefully(restart=self.lifetime_restart, reason="worker-lifetime"), name="lifetime-close"
        )

    async def _make_local_directory(self) -> None:
        """Create this worker's directory, owned while it lives; remove those of workers that died.

        Workers killed outright (SIGKILL, ``os._exit``) leave theirs, spilled
        results and all: the next worker started under the same parent removes
        them (see :mod:`distributed.workspace`).

        Raises
        ------
        OSError
            Naming the directory, when it cannot be made or written (a full or
            read-only disk, no permission): the worker does not start.
        """
        base, name = os.path.split(self.local_directory)
        try:
            workspace = WorkSpace(base, locking=bool(dask.config.get("distributed.worker.use-file-locking")))
            # Dead workers' directories go first: on a disk their spilled results
            # filled, that is the room this one needs.  Removing them can take a
            # while: not on the event loop.
            await asyncio.get_running_loop().run_in_executor(None, workspace.purge)
            self._work_dir = workspace.new_work_dir(name)
        except OSError as e:
            # The bare error names no directory (ENOSPC from a write) or only a file in it.
            raise OSError(e.errno, f"Worker cannot use its local directory {base}: {e.strerror or e}") from e

    async def _close(self) -> None:
        # Here, not in close(): _close runs once, in a task that closing does not cancel.
        try:
            if self.profiler is not None:
                self.profiler.close()  # wakes at once; the join waits at most for one sample
            close_nanny, reason = self._close_nanny or (False, "")
            if close_nanny and self.nanny is not None:
                await self._tell_nanny_to_close(reason)
            for name, plugin in list(self.plugins.items()):
                try:
                    result = plugin.teardown(self)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    logger.exception("Plugin %s teardown failed", name)
            await self.preloads.teardown()
            await reporting.close_extensions(self.extensions)
            if self._client is not None:
                try:
                    await self._client.close(asynchronous=True)
                except Exception:
                    logger.debug("Closing the worker's client failed", exc_info=True)
            await self.close_scheduler_link()
            await self.cancel_coroutines()
            if self.http_server is not None:
                await self.http_server.close()
            await super()._close()
        finally:
            # Whatever step above failed, the task threads, spill files and directory are let go.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self.executor.shutdown, self._close_executor_wait, self._close_timeout)
            for given in self.task_executors.values():
                # As dask does, the worker shuts down the executors it was given; the offload thread is shared.
                if given is not offload_executor():
                    await loop.run_in_executor(None, functools.partial(given.shutdown, wait=self._close_executor_wait))
            self.actor_executor.shutdown(wait=False, cancel_futures=True)
            self.actors.clear()
            self.shuffle.close()
            if isinstance(self.data, SpillBuffer):
                self.data.close()
            if self._work_dir is not None:
                self._work_dir.release()
            if self.gc_tending is not None:
                self.gc_tending.release()
                self.gc_tending = None

    async def close(
        self, timeout: float = 30, executor_wait: bool = True, nanny: bool = True, reason: str = "worker-close"
    ) -> None:
        """Close the worker.

        Parameters
        ----------
        timeout
            Longest wait, in seconds, for the threads to finish the tasks they run.
        executor_wait
            Wait for running tasks to end (else leave their threads to finish alone).
        nanny
            For a worker under a :class:`~distributed.Nanny`: True (the default)
            tells the nanny to close too once this worker's process ends; False
            leaves the nanny running, and it starts a new worker.
        reason
            Why, for the logs.
        """
        if self.status not in (Status.closing, Status.closed):
            logger.info("Closing worker %s: %s", self._address or self.name, reason)
        if self._close_nanny is None:
            # The first call decides (a later one, such as the end of the scheduler's stream that
            # closing brings, must not make a close(executor_wait=False) wait); the nanny is told
            # at the start of the one close (see _close).
            self._close_nanny = (nanny, reason)
            self._close_timeout = timeout
            self._close_executor_wait = executor_wait
        await super().close()

    async def close_gracefully(self, restart: bool | None = None, reason: str = "worker-close-gracefully") -> None:
        """Hand the data only this worker holds to other workers, leave the scheduler, then close.

        The scheduler retires this worker (as ``Client.retire_workers``): it
        gets no new tasks while the keys held nowhere else are fetched by
        running workers, and forgets it once their copies are recorded, so no
        result is lost or recomputed.  When no other running worker exists, or
        the copies do not land within ``distributed.comm.timeouts.tcp``, the
        worker closes anyway and the scheduler recomputes what it can.

        Parameters
        ----------
        restart
            Have this worker's nanny start a new worker afterwards (the nanny
            otherwise closes with it).
        reason
            Why, for the logs.

        Raises
        ------
        NotImplementedError
            For ``restart=True`` on a worker without a nanny (nothing would start the new one).
        """
        if restart and self.nanny is None:
            raise unsupported("Worker.close_gracefully", "restart", "it needs a nanny to start the new worker")
        if self.status in (Status.closing, Status.closed, Status.closing_gracefully):
            await self.finished()
            return
        self.status = Status.closing_gracefully
        logger.info("Closing worker %s gracefully: %s", self.address, reason)
        try:
            await self._hand_off_data()
            await self.rpc.call(
                self.scheduler_addr, m.UnregisterWorker(op="unregister", address=self.address, reason=reason)
            )
        except (OSError, CommClosedError):
            logger.warning("Could not hand off data of %s before closing", self.address, exc_info=True)
        await self.close(nanny=not restart, reason=reason)

    async def _tell_nanny_to_close(self, reason: str) -> None:
        """Ask our nanny to close after this process ends rather than start another worker."""
        assert self.nanny is not None
        try:
            await wait_for(
                self.rpc.call(self.nanny, m.NannyCloseGracefully(op="close_gracefully", reason=reason)),
                min(self.settings.connect_timeout, 5.0),
            )
        except (OSError, CommClosedError, TimeoutError):
            # Without the message the nanny starts a new worker: better than no worker.
            logger.warning("Could not tell nanny %s that worker %s closes", self.nanny, self._address, exc_info=True)

    async def _hand_off_data(self) -> None:
        """Have the scheduler retire this worker: it takes no new tasks, and its only copies move elsewhere.

        The scheduler forgets this worker once the copies have landed (what it
        was running runs elsewhere); when no other worker can take them it
        keeps the worker, which closes anyway.
        """
        timeout = self.settings.tcp_timeout
        request = m.RetireWorkers(
            op="retire_workers",
            workers=[self.address],
            close_workers=False,
            remove=True,
            stimulus_id=f"worker-close-gracefully-{time.time()}",
        )
        try:
            retired = await wait_for(self.rpc.call(self.scheduler_addr, request), timeout)
        except TimeoutError:
            logger.warning("The data of %s found no other holder within %s s", self.address, timeout)
            return
        if self.address not in retired:
            logger.warning("No other worker could take the data only %s holds; it will be recomputed", self.address)

    @property
    def service_ports(self) -> dict[str, int]:
        """Ports of what the worker serves besides its comms, by name: ``{"dashboard": port}`` while it serves HTTP."""
        return {"dashboard": self.http_server.port} if self.http_server is not None else {}

    def get_current_task(self) -> Key:
        """The key of the task running on the calling thread (``ValueError`` outside a task of this worker)."""
        if thread_state.worker is not self or thread_state.key is None:
            raise ValueError("get_current_task: no task of this worker runs on this thread")
        return thread_state.key

    def identity(self) -> dict[str, Any]:
        """A summary of this worker."""
        return {
            "type": "Worker",
            "id": self.id,
            "scheduler": self.scheduler_addr,
            "nthreads": self.nthreads,
            "memory_limit": self.memory_limit,
            "name": self.name,
            "spill_disk_error": str(self.data.disk_error)
            if isinstance(self.data, SpillBuffer) and self.data.disk_error is not None
            else None,
        }

    def __repr__(self) -> str:
        addr = self._address or "not started"
        n = len(self.state.executing) if self.state is not None else 0
        return (
            f"<Worker {addr!r}, name: {self.name}, status: {self.status.name}, "
            f"stored: {len(self.data)}, running: {n}/{self.nthreads}>"
        )

    # -- plugins --------------------------------------------------------------------
    async def add_plugin(self, plugin: WorkerPlugin, name: str | None = None) -> None:
        """Attach a plugin and run its ``setup``."""
        name = name or getattr(plugin, "name", None) or f"{type(plugin).__name__}-{uuid.uuid4()}"
        if name in self.plugins:
            old = self.plugins.pop(name)
            result = old.teardown(self)
            if inspect.isawaitable(result):
                await result
        self.plugins[name] = plugin
        self._update_transition_hook()
        result = plugin.setup(self)
        if inspect.isawaitable(result):
            await result

    async def remove_plugin(self, name: str) -> None:
        """Detach the plugin registered as ``name`` and run its ``teardown``."""
        plugin = self.plugins.pop(name)
        self._update_transition_hook()
        result = plugin.teardown(self)
        if inspect.isawaitable(result):
            await result

    def _new_state_machine(self, transfer_limit: int, fetch_concurrency: int) -> WorkerStateMachine:
        """A task state machine over this worker's data (at start, and afresh when it rejoins a scheduler)."""
        return WorkerStateMachine(
            self.address,
            self.nthreads,
            data=self.data,
            resources=self.resources,
            validate=self.validate,
            transfer_limit=transfer_limit,
            fetch_concurrency=fetch_concurrency,
            incoming_bytes_limit=self._incoming_bytes_limit,
            log_length=log_length(),
        )

    def _update_transition_hook(self) -> None:
        """Call plugins' ``transition`` only while a plugin defines one (the per-task path stays lean)."""
        if self.state is None:
            return
        watching = any(type(p).transition is not WorkerPlugin.transition for p in self.plugins.values())
        self.state.transition_hook = self._plugins_transition if watching else None

    def _plugins_transition(
        self, key: Key, start: WorkerTaskStateName, finish: WorkerTaskStateName, stimulus_id: str
    ) -> None:
        for name, plugin in list(self.plugins.items()):
            try:
                plugin.transition(key, start, finish, stimulus_id=stimulus_id)
            except Exception:
                logger.exception("Plugin %s failed in transition %s -> %s of %r", name, start, finish, key)

    # -- the state machine's shell ----------------------------------------------------
    def handle_stimulus(self, *events: StateMachineEvent) -> None:
        """Feed events to the state machine and carry out its instructions.

        Results that pool threads posted go first, and with them the lined-up
        task if a thread took it; otherwise it is taken back: the events may
        change which task should run next (or whether it may run at all).
        """
        state = self.state
        if state is None or self.status in (Status.closed,):
            return
        applied = False
        if self._results or self._lined_up:
            applied = self._apply_results(state)
        if events or not applied:  # no events: start what may start (e.g. on resuming)
            self._carry_out(state.handle_stimulus(*events))
        self._line_up_next(state)
        tending = self.gc_tending
        if tending is not None:
            ntasks = len(state.tasks)
            tending.tend(ntasks, state.tasks_made - ntasks)

    def tend_gc_alone(self) -> None:
        """This worker is the only server of its process: keep the collector's full passes short as it grows.

        Called by the process that runs it alone (a nanny's child, ``dask worker``
        with one worker and no nanny), once it has started: the objects made to
        start are frozen out of the collector's view, and as the tasks held grow
        the collector looks only at those made since (see
        :class:`~distributed.gc_tending.LargeStateGC`).  A full pass over 50,000
        held task records and their sets took a tenth of a worker's CPU on a map
        of no-op tasks.  A worker sharing its process with other servers leaves
        the collector alone: its thresholds and frozen set are the process's.
        """
        if self.gc_tending is None:
            self.gc_tending = LargeStateGC()
            self.gc_tending.freeze_startup()

    def _apply_results(self, state: WorkerStateMachine) -> bool:
        """Hand the results pool threads posted to the state machine; whether there were any."""
        with self._results_lock:
            events, self._results = self._results, []
            self._lineup_open = False  # the events may change the order; _line_up_next opens it again
        if self._abandoned_runs or self._rerun_abandoned:
            kept: dict[Key, int] = {}
            events = [ev for ev in events if not self._abandoned(ev, kept)]
            if kept:
                self.handle_stimulus(HeldDataEvent(stimulus_id=f"finished-while-away-{time.time()}", nbytes=kept))
        if not events:
            return False
        started = [ev.key for ev in events if type(ev) is ExecuteStarted]
        self._carry_out(state.handle_stimulus(*events), started)
        if self.actor_host.keys:
            self._prune_actors([ev.key for ev in events if isinstance(ev, ExecuteSuccess)])
        return True

    def _abandoned(self, ev: StateMachineEvent, kept: dict[Key, int]) -> bool:
        """Whether ``ev`` is the result of a run abandoned when the scheduler was lost (not to hand on).

        By run, not key: the next scheduler may ask for the same key again, and
        that run's result is the one it waits for.  When it asked under the very
        ``(key, run_id)`` abandoned (its run ids started afresh), the two results
        cannot be told apart: the first is kept, the second dropped.  A value
        that comes before the worker registered again is stored with the results
        held (its size in ``kept``): the registration reports it, and the next
        scheduler need not run the task again.
        """
        if not isinstance(ev, (ExecuteSuccess, ExecuteFailure, RescheduleEvent)):
            return False
        run = (ev.key, ev.run_id)
        if run in self._abandoned_runs:
            self._abandoned_runs.discard(run)
            if type(ev) is ExecuteSuccess and self.batched_stream is None and self._keep_result(ev):
                kept[ev.key] = ev.nbytes
            return True
        if run in self._rerun_abandoned:
            self._rerun_abandoned.discard(run)
            self._abandoned_runs.add(run)
        return False

    def _carry_out(self, instructions: list[Instruction], started: list[Key] | None = None) -> None:
        to_scheduler: list[m.WorkerStreamMessage] = []
        lazy = True
        for inst in instructions:
            if isinstance(inst, SendMessage):
                to_scheduler.append(inst.msg)
                lazy = lazy and inst.msg["op"] in _LAZY_OPS
            elif isinstance(inst, Execute):
                if self._abandoned_runs and (inst.key, inst.run_id) in self._abandoned_runs:
                    # The next scheduler asked for the very run abandoned (see _abandoned).
                    self._abandoned_runs.discard((inst.key, inst.run_id))
                    self._rerun_abandoned.add((inst.key, inst.run_id))
                if started and inst.key in started:
                    continue  # a pool thread runs it already
                self._execute_now(inst.key, inst.run_id)
            elif isinstance(inst, GatherDep):
                self._start_task(self.gather_dep(inst.worker, inst.keys), f"gather-{inst.worker}")
            elif isinstance(inst, RetryBusyWorkerLater):
                self._start_task(self._retry_busy_worker(inst.worker), f"retry-busy-{inst.worker}")
        if to_scheduler and self.batched_stream is not None:
            try:
                state = self.state
                if lazy:
                    self.batched_stream.send_lazy(*to_scheduler)
                elif state is not None and not state.ready and len(state.executing) < state.nthreads:
                    # A thread is free and nothing is ready: what the scheduler answers is all it waits for.
                    self.batched_stream.send_now(*to_scheduler)
                else:
                    self.batched_stream.send(*to_scheduler)
            except CommClosedError:
                logger.debug("Scheduler stream closed; dropped %d messages", len(to_scheduler))

    async def _retry_busy_worker(self, worker: str) -> None:
        """Let the fetches from a peer that said it was busy go on after a pause (as dask: 0.15 s)."""
        await asyncio.sleep(BUSY_RETRY_DELAY)
        self.handle_stimulus(BusyWorkerRetry(stimulus_id=f"retry-busy-worker-{time.time()}", worker=worker))

    def _start_task(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._running_tasks.add(task)
        task.add_done_callback(self._task_done)
        if self.status == Status.closed:
            task.cancel()  # nothing would end it later

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._running_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A bug in the worker itself: say so loudly rather than leave the task stuck in silence.
            logger.error("Worker %s: %s failed", self.address, task.get_name(), exc_info=task.exception())

    def dispatch_stream(self, msgs: Any, origin: str = "", check: bool = True) -> None:
        """Handle a batch of stream messages; their events reach the state machine as one stimulus.

        The scheduler sends tasks in batches (60 compute-tasks a batch, on
        average, in a map of no-op tasks).  Fed one by one, each paid the
        shell's round (results posted, instructions carried out, the next task
        lined up and its spec unpickled) for a task that is not the next to
        run; fed together, the batch pays it once.  The order of events stays
        the order of the messages.
        """
        if self._stream_events is not None:  # within a batch already (a handler that dispatches)
            super().dispatch_stream(msgs, origin, check)
            return
        self._stream_events = []
        try:
            super().dispatch_stream(msgs, origin, check)
        finally:
            events, self._stream_events = self._stream_events, None
            try:
                self._feed(events)
            except Exception:
                logger.exception("Worker %s failed on the scheduler's messages", self.address)
                if dask.config.get("distributed.admin.pdb-on-err", False):
                    raise

    def _from_stream(self, ev: StateMachineEvent) -> None:
        """Feed ``ev`` to the state machine: at the end of the batch being handled, else now."""
        events = self._stream_events
        if events is None:
            self._feed([ev])
        else:
            events.append(ev)

    def _feed(self, events: list[StateMachineEvent] | None) -> None:
        """Feed the scheduler's ``events`` to the state machine; drop the actors it let go of."""
        if not events:
            return
        self.handle_stimulus(*events)
        if self.actor_host.keys:
            self._prune_actors([key for ev in events if type(ev) is FreeKeysEvent for key in ev.keys])

    def _stream_compute_task(self, msg: m.ComputeTask) -> None:
        if msg.get("actor"):
            self.actor_host.keys.add(msg["key"])
        self._from_stream(
            ComputeTaskEvent(
                stimulus_id=f"compute-task-{msg['run_id']}",
                key=msg["key"],
                run_id=msg["run_id"],
                run_spec=msg["run_spec"],
                priority=tuple(msg["priority"]),
                who_has=msg["who_has"],
                nbytes=msg["nbytes"],
                duration=msg["duration"],
                resources=msg.get("resources"),
                annotations=msg.get("annotations"),
            )
        )

    def _stream_free_keys(self, msg: m.FreeKeys) -> None:
        self._from_stream(
            FreeKeysEvent(stimulus_id=msg.get("stimulus_id", f"free-keys-{time.time()}"), keys=tuple(msg["keys"]))
        )

    def handle_free_keys(self, comm: Comm, msg: m.FreeKeys) -> str:
        """Free ``keys`` now and say so (the scheduler forgot this worker's copies)."""
        self._stream_free_keys(msg)
        return "OK"

    def _stream_steal_request(self, msg: m.StealRequest) -> None:
        self._from_stream(StealRequestEvent(stimulus_id=msg["stimulus_id"], key=msg["key"]))

    def _stream_close_worker(self, msg: m.CloseWorker) -> None:
        if self._stream_events:  # what came before the request to close goes first
            events, self._stream_events = self._stream_events, []
            self._feed(events)
        logger.info("Scheduler asked worker %s to close: %s", self.address, msg.get("reason", ""))
        self._close_requested = True
        self.spawn(self.close(reason=msg.get("reason", "scheduler-request")), name="close-worker")

    # -- request handlers ---------------------------------------------------------------
    async def handle_update_data(self, comm: Comm, msg: m.WorkerUpdateData) -> m.UpdateDataReply:
        data = await unwrap_all(msg["data"], self.offload_threshold)
        nbytes = {k: sizeof(v) for k, v in data.items()}
        self.handle_stimulus(UpdateDataEvent(stimulus_id=f"update-data-{time.time()}", data=data, nbytes=nbytes))
        return m.UpdateDataReply(nbytes=nbytes, types={k: typename(type(v)) for k, v in data.items()})

    async def handle_plugin_add(self, comm: Comm, msg: m.PluginAdd) -> str:
        """Set up a plugin the scheduler sends (registered by a client)."""
        await self.add_plugin(unwrap(msg["plugin"]), name=msg["name"])
        return "OK"

    async def handle_plugin_remove(self, comm: Comm, msg: m.PluginRemove) -> str:
        """Tear down a plugin the scheduler no longer keeps."""
        if msg["name"] in self.plugins:
            await self.remove_plugin(msg["name"])
        return "OK"

    def handle_acquire_replicas(self, comm: Comm, msg: m.AcquireReplicas) -> str:
        """Fetch copies of keys from the peers named (a retiring worker hands its data off)."""
        self._stream_acquire_replicas(msg)
        return "OK"

    def _stream_acquire_replicas(self, msg: m.AcquireReplicas) -> None:
        self._from_stream(
            AcquireReplicasEvent(
                stimulus_id=f"acquire-replicas-{time.time()}", who_has=msg["who_has"], nbytes=msg["nbytes"]
            )
        )

    async def handle_run(self, comm: Comm, msg: m.RunFunction) -> Any:
        function = unwrap(msg["function"])
        args = unwrap(msg.get("args")) or ()
        kwargs = unwrap(msg.get("kwargs")) or {}
        return Serialize(await self.run(comm, function, args, msg.get("wait", True), kwargs))

    def get_profile(
        self, start: float | None = None, stop: float | None = None, key: str | None = None, server: bool = False
    ) -> ProfileState:
        """The statistical profile of the tasks run here (of key prefix ``key``; of the event loop with ``server``).

        Empty when profiling is disabled (``distributed.worker.profile.enabled``).
        """
        if self.profiler is None:
            return create()
        return self.profiler.get_profile(start=start, stop=stop, key=key, server=server)

    def handle_profile(self, comm: Comm, msg: m.WorkerProfile) -> ProfileState:
        return self.get_profile(msg.get("start"), msg.get("stop"), msg.get("key"), msg.get("server", False))

    def handle_profile_metadata(self, comm: Comm, msg: m.WorkerProfileMetadata) -> dict[str, Any]:
        if self.profiler is None:
            return {"counts": [], "keys": []}
        return self.profiler.get_metadata(msg.get("start", 0), msg.get("stop"))

    def handle_identity(self, comm: Comm, msg: m.Empty) -> dict[str, Any]:
        return self.identity()

    async def handle_benchmark_memory(self, comm: Comm, msg: m.BenchmarkLocal) -> dict[str, float]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, hardware.benchmark_memory, msg.get("sizes", hardware.MEMORY_SIZES), msg["duration"]
        )

    async def handle_benchmark_disk(self, comm: Comm, msg: m.BenchmarkLocal) -> dict[str, float]:
        loop = asyncio.get_running_loop()
        sizes = msg.get("sizes", hardware.DISK_SIZES)
        work = functools.partial(hardware.benchmark_disk, self.local_directory, sizes, msg["duration"])
        return await loop.run_in_executor(None, work)

    async def handle_benchmark_network(self, comm: Comm, msg: m.BenchmarkNetwork) -> dict[str, float]:
        sizes = msg.get("sizes", hardware.NETWORK_SIZES)
        return await hardware.benchmark_network(msg["address"], self.rpc, sizes, msg["duration"])

    async def handle_close(self, comm: Comm, msg: m.WorkerClose) -> str:
        self._close_requested = True
        self.spawn(self.close(reason=msg.get("reason", "close-request")), name="close")
        return "OK"

    # -- actors -------------------------------------------------------------------------------
    def _prune_actors(self, keys: Iterable[Key]) -> None:
        """Drop the actors among ``keys`` that the state machine no longer holds in memory."""
        state = self.state

        def state_of(key: Key) -> str | None:
            ts = state.tasks.get(key) if state is not None else None
            return ts.state if ts is not None else None

        self.actor_host.prune(keys, state_of)

    async def handle_actor_execute(self, comm: Comm, msg: m.ActorExecute) -> Serialize:
        """Call a method of an actor held here (see :meth:`ActorHost.execute`)."""
        return await self.actor_host.execute(msg, self.address)

    def handle_actor_attribute(self, comm: Comm, msg: m.ActorAttribute) -> Serialize:
        """The value of an attribute of an actor held here."""
        return self.actor_host.attribute(msg, self.address)

    # -- helpers for user code ----------------------------------------------------------
    @property
    def scheduler(self) -> RemoteRequests:
        """The scheduler's requests by name over this worker's connections, as dask's ``Worker.scheduler``.

        Examples
        --------
        >>> await get_worker().scheduler.who_has(keys=["x"])  # doctest: +SKIP
        """
        return self.rpc(self.scheduler_addr)

    @property
    def memory_manager(self) -> WorkerMemoryMonitor:
        """What keeps the worker under its memory limit, as dask's ``Worker.memory_manager``.

        It names the settings as dask does (``memory_limit``,
        ``memory_target_fraction``, ``memory_spill_fraction``,
        ``memory_pause_fraction``, ``max_spill``, ``memory_monitor_interval``,
        ``data``).
        """
        return self.memory_monitor

    async def run(
        self,
        comm: Comm | None,
        function: Callable[..., Any],
        args: Sequence[Any] = (),
        wait: bool = True,
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run ``function(*args, **kwargs)`` here, as ``Client.run`` does (dask's ``Worker.run`` handler).

        A function with a ``dask_worker`` parameter is given this worker; a
        coroutine function is awaited unless ``wait`` is false (then started
        and None returned).
        """
        kwargs = dict(kwargs or {})
        try:
            params = inspect.signature(function).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]  # builtins without a signature
        if "dask_worker" in params:
            kwargs["dask_worker"] = self
        result = function(*args, **kwargs)
        if inspect.isawaitable(result):
            if wait:
                result = await result
            else:
                self.spawn(consume(result))
                result = None
        return result

    @property
    def client(self) -> Client:
        """The worker's own client of its scheduler (made on first use), as dask's ``Worker.client``."""
        return self.task_client()

    def task_client(self, timeout: float | None = None) -> Client:
        """A synchronous client of our scheduler, sharing this worker's event loop (made on first use)."""
        if self._client is None or self._client.status in ("closed", "closing"):
            from distributed.client import Client

            assert self.loop is not None
            self._client = Client(
                self.scheduler_addr,
                loop=self.loop,
                set_as_default=False,
                _in_worker=True,
                timeout=timeout,
                security=acting_as(self.security, "worker", "client"),
            )
        return self._client

    @property
    def executing_count(self) -> int:
        """Tasks running now."""
        return len(self.state.executing) if self.state is not None else 0

    @property
    def tasks(self) -> dict[Key, Any]:
        """The state machine's tasks by key."""
        return self.state.tasks if self.state is not None else {}

    def story(self, *keys: Key) -> list[tuple[Any, ...]]:
        """The transitions of ``keys`` on this worker."""
        return self.state.story(*keys) if self.state is not None else []

    # -- events and uploaded files ---------------------------------------------------
    def log_event(self, topic: str | Sequence[str], msg: Any) -> None:
        """Log an event under ``topic`` (or each of several topics) on the scheduler; from any thread.

        A dict ``msg`` is recorded with ``"worker"``: this worker's address.

        Raises
        ------
        TypeError
            When ``msg`` is not plain msgpack data.
        """
        if not is_msgpack_serializable(msg):
            raise TypeError(f"Message must be msgpack serializable. Got {type(msg)=} instead.")
        event = m.WorkerLogEvent(op="log-event", topic=topic, msg=msg, worker=self.address)
        loop = self.loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._send_event(event)
        elif loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._send_event, event)

    def _send_event(self, event: m.WorkerLogEvent) -> None:
        if self.batched_stream is None:
            logger.warning("Not connected to the scheduler: event of topic %r dropped", event["topic"])
            return
        try:
            self.batched_stream.send(event)
        except CommClosedError:
            logger.warning("Scheduler stream closed: event of topic %r dropped", event["topic"])

    async def upload_file(self, filename: str, data: bytes | str, load: bool = True) -> dict[str, Any]:
        """Save ``data`` as ``filename`` in the local directory, and import it when ``load``.

        Returns
        -------
        ``{"status": "OK", "nbytes": <bytes saved>}``
        """
        loop = asyncio.get_running_loop()
        if len(data) < 100_000:
            path = save_upload(self.local_directory, filename, data)
        else:
            path = await loop.run_in_executor(None, save_upload, self.local_directory, filename, data)
        if load:
            try:
                import_uploaded(path)
            except Exception:
                logger.exception("Importing uploaded file %s failed", filename)
                raise
        return {"status": "OK", "nbytes": len(data.encode() if isinstance(data, str) else data)}

    def secede_task(self, key: Key) -> None:
        """Called from a task thread that secedes (thread-safe)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.handle_stimulus, SecedeEvent(stimulus_id=f"secede-{time.time()}", key=key))


#: Messages to the scheduler that nothing waits on.
_LAZY_OPS = frozenset({"add-keys", "release-worker-data"})


# -- functions for user code ----------------------------------------------------------------
def get_worker() -> Worker:
    """The worker running the current task.

    Raises
    ------
    ValueError
        When not called from within a task.
    """
    worker = context_worker()
    if isinstance(worker, Worker):
        return worker
    raise ValueError("No worker found: get_worker() must be called from within a task")
