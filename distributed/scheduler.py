"""The scheduler: one class holding the cluster's state and running it.

Theory of operation
-------------------
Clients submit graphs of tasks; workers run them.  The scheduler keeps a
:class:`TaskState` per key, a :class:`WorkerState` per worker and a
:class:`ClientState` per client, and moves tasks through the states

    released -> waiting -> (queued | no-worker | processing) -> memory | erred
    ... -> released -> forgotten

The state machine is plain methods without I/O.  A stimulus (a graph arrives,
a task finished, a worker left) changes state and returns an :class:`Out`:
the recommendations still to apply and the messages to send.
:meth:`Scheduler.transitions` applies recommendations until none are left;
each allowed ``(start, finish)`` pair has one method in a table, and every
change of ``TaskState.state`` happens inside one of them, so the transition
counter, :meth:`Scheduler.story`, validation and the plugins' ``transition``
hook see every change.  Any other pair goes through ``released`` (or raises
:class:`InvalidTransition` in validation mode).  What a transition needs from
its stimulus (the report of a finished task, where scattered data landed, the
worker whose thread freed up for a queued task) travels on the stimulus's
:class:`Out`.  Only then does the I/O shell send the
messages, batched per worker and per client.  Tests drive the same methods
without any socket.  The shell (registration, the streams and their message
handlers) is :mod:`distributed.scheduler_streams`; requests that only read
state or run a user's function are :mod:`distributed.scheduler_requests`.

Two rules keep tasks from holding the cluster: a key asked for by
``fire_and_forget`` is wanted by a stand-in client only until it is done (the
transitions into memory and erred drop that want, then release the key if
nothing else wants it); and a task whose inputs add up to more than the largest
worker memory limit errs with ``MemoryError`` as it gets ready, instead of
killing worker after worker.

The run specification of a task is kept as the serialised bytes the client
sent: the scheduler never unpickles user code unless a user asks it to
(``run_on_scheduler``, scheduler plugins), and refuses such requests when
``distributed.scheduler.pickle`` is False.
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
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import dask
import dask.config
from dask.utils import format_bytes, parse_timedelta

from distributed.batched import BatchedSend
from distributed.comm import (
    CommClosedError,
    address_from_user_args,
    get_address_host,
    parse_address,
    validate_address,
)
from distributed.core import Route, Server, Status
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.exceptions import ActorLostError, InvalidTransition, KilledWorker, LostDataError, NoValidWorkerError
from distributed.preloading import PreloadManager, process_preloads
from distributed.protocol import messages as m
from distributed.protocol.messages import Key, Payload
from distributed.protocol.serialize import as_serialized, to_serialize
from distributed.scheduler_events import EventLog
from distributed.scheduler_extensions import ExtensionFactory, make_extensions, start_extensions
from distributed.scheduler_queue import PriorityQueue
from distributed.scheduler_requests import ClusterRequests
from distributed.scheduler_state import (
    ALL_TASK_STATES,
    EMPTY,
    ClientState,
    Out,
    TaskGroup,
    TaskPrefix,
    TaskState,
    TaskStateName,
    WorkerState,
    drop,
    grown,
    without,
)
from distributed.scheduler_streams import SchedulerStreams
from distributed.security import Security, coerce_security
from distributed.utils import key_split_uncached, refuse_unsupported, unsupported

if TYPE_CHECKING:
    from distributed.dashboard.core import BokehDashboard

logger = logging.getLogger(__name__)

__all__ = [
    "ClientState",
    "Scheduler",
    "TaskGroup",
    "TaskPrefix",
    "TaskState",
    "TaskStateName",
    "WorkerState",
]

#: States in which a task still needs its dependencies.
_ACTIVE: Final[frozenset[TaskStateName]] = frozenset({"waiting", "queued", "no-worker", "processing"})

#: Seconds a worker removed for silence (``worker-ttl``) gets to close on its nanny's SIGTERM before
#: the SIGKILL (as dask's nanny gives it): a stopped or stuck process never answers, a woken one is quick.
UNRESPONSIVE_WORKER_GRACE: Final = 4.0

#: Tasks of a large graph added between two chances for others to be served
#: (see :meth:`Scheduler.update_graph_slices`): about ten milliseconds of work.
INGEST_SLICE: Final = 1000

#: Extra keyword arguments a transition passes to the plugins' ``transition`` hook.
PluginKwargs = dict[str, Any] | None


def _startstops(msg: m.TaskFinished | m.WorkerTaskErred) -> list[dict[str, Any]]:
    """The intervals a worker reported for a task (transfers of its inputs, then its compute), for plugins."""
    spans: list[dict[str, Any]] = []
    for t in msg.get("transfers", ()):
        spans.append(
            {"action": "transfer", "start": t["start"], "stop": t["stop"], "source": t["source"], "nbytes": t["nbytes"]}
        )
    start = msg.get("start")
    stop = msg.get("stop")
    if start is not None and stop is not None and stop > 0:
        spans.append({"action": "compute", "start": start, "stop": stop})
    return spans


class Scheduler(Server):
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
        :data:`distributed.scheduler_extensions.DEFAULT_EXTENSIONS`).
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
    ) -> None:
        self.security = coerce_security(security, "Scheduler")
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
        self.id = f"Scheduler-{uuid.uuid4()}"
        if not protocol and "://" not in (host or ""):
            default = "tls" if self.security.require_encryption else "tcp"
            protocol = dask.config.get("distributed.comm.default-scheme", default)
            if self.security.require_encryption and protocol == "tcp":
                protocol = "tls"
        #: Where to listen: host (with or without a scheme), port, interface and protocol in one address.
        self._start_address = address_from_user_args(host, port, interface, protocol, who="Scheduler")
        self._protocol = parse_address(self._start_address)[0]
        contact = contact_address or dask.config.get("distributed.scheduler.contact-address", None)
        if contact:
            validate_address(contact)
        self._contact_address: str | None = contact or None
        self.validate = bool(dask.config.get("distributed.scheduler.validate", False) if validate is None else validate)
        allow_pickle = dask.config.get("distributed.scheduler.pickle", True)
        if not isinstance(allow_pickle, bool):
            # A security control: a value such as "no" must not read as true.
            raise ValueError(f"distributed.scheduler.pickle must be true or false, got {allow_pickle!r}")
        #: Whether requests that make the scheduler unpickle what it is sent are served
        #: (``distributed.scheduler.pickle``, read once at construction).
        self.allow_pickle: bool = allow_pickle
        self.dashboard = dashboard
        self.dashboard_address = dashboard_address
        self.scheduler_file = scheduler_file
        self._wrote_scheduler_file = False
        self.allowed_failures = int(
            dask.config.get("distributed.scheduler.allowed-failures") if allowed_failures is None else allowed_failures
        )
        ttl = worker_ttl if worker_ttl is not None else dask.config.get("distributed.scheduler.worker-ttl")
        self.worker_ttl: float | None = parse_timedelta(ttl) if ttl else None
        idle = idle_timeout if idle_timeout is not None else dask.config.get("distributed.scheduler.idle-timeout")
        self.idle_timeout: float | None = parse_timedelta(idle) if idle else None
        full = dask.config.get("distributed.scheduler.full-disk-timeout")
        #: Seconds every worker may stay paused, unable to spill after a disk error, before waiting tasks err.
        self.full_disk_timeout: float | None = parse_timedelta(full) if full else None
        #: Since when (``time.time()``) every worker has been paused that way with tasks waiting; None if not so.
        self.full_disks_since: float | None = None
        self.bandwidth = float(dask.utils.parse_bytes(str(dask.config.get("distributed.scheduler.bandwidth"))))
        self.unknown_duration = float(
            parse_timedelta(dask.config.get("distributed.scheduler.unknown-task-duration")) or 0.5
        )
        self.default_durations: dict[str, float] = {
            k: float(parse_timedelta(v) or 0)
            for k, v in dask.config.get("distributed.scheduler.default-task-durations", {}).items()
        }
        self.root_latency_budget = float(
            parse_timedelta(dask.config.get("distributed.scheduler.root-task-latency-budget", "5ms")) or 0.0
        )
        sat = dask.config.get("distributed.scheduler.worker-saturation")
        self.worker_saturation = float(sat) if sat not in (None, "inf") else math.inf
        if not self.worker_saturation > 0:
            raise ValueError(f"worker-saturation must be positive, got {sat!r}")

        # -- state ---------------------------------------------------------
        self.tasks: dict[Key, TaskState] = {}
        self.workers: dict[str, WorkerState] = {}
        self.clients: dict[str, ClientState] = {}
        self.task_prefixes: dict[str, TaskPrefix] = {}
        self.task_groups: dict[str, TaskGroup] = {}
        #: Groups whose last task was forgotten in the transitions running now (dropped at their end).
        self._emptied_groups: list[TaskGroup] = []
        self.aliases: dict[Any, str] = {}
        self.total_nthreads = 0
        #: Root tasks waiting for a free thread, most urgent first (entries of tasks gone since are skipped).
        self.queued: PriorityQueue[TaskState] = PriorityQueue()
        self.n_queued = 0
        #: Tasks no current worker can run.
        self.unrunnable: set[TaskState] = set()
        #: The stand-in client of ``fire_and_forget`` (made when it first asks for a key): it wants a
        #: key only until the key is done, so that nothing it asked for is kept once computed.
        self._fire_and_forget: ClientState | None = None
        #: The most bytes of inputs a task may have: the largest worker memory limit, or 0 (no check)
        #: while some worker has no limit or there is none.  Kept up as workers come and go, so that
        #: the check as a task gets ready costs no pass over the workers.
        self._input_cap = 0
        self._largest_memory_limit = 0
        self._unlimited_workers = 0
        self.generation = 0
        self._run_ids = itertools.count(1)
        self.transition_counter = 0
        #: Tasks forgotten since the start (how much work has flowed through the state).
        self.tasks_forgotten = 0
        log_length = int(dask.config.get("distributed.scheduler.transition-log-length", 100000))
        self.transition_log: deque[tuple[Key, TaskStateName, TaskStateName, str, float]] = deque(maxlen=log_length)
        #: While a batch of stream messages is handled: the messages its stimuli produced, not sent yet.
        self._held: Out | None = None
        #: Recent events by topic and the clients subscribed to topics.
        self.event_log = EventLog(self)
        self.events = self.event_log.events
        self.event_subscriber = self.event_log.subscribers
        self.plugins: dict[str, SchedulerPlugin] = {}
        self._initial_plugins = list(plugins)
        self.stream_comms: dict[str, BatchedSend] = {}
        self.client_comms: dict[str, BatchedSend] = {}
        #: Set when a worker joins, for :meth:`wait_for_workers`; made on first use.
        self._worker_joined: asyncio.Event | None = None
        self.time_started = time.time()
        self.idle_since: float | None = time.time()
        self.extensions: dict[str, Any] = {}
        #: ``hook(address, stimulus_id, out)`` of each extension that acts when a worker leaves.
        self.remove_worker_hooks: list[Callable[[str, str, Out], None]] = []
        self.http_server: Any = None
        #: The bokeh dashboard served by ``http_server`` (None without one).
        self.dashboard_server: BokehDashboard | None = None

        self._transitions_table: dict[tuple[TaskStateName, TaskStateName], Callable[[TaskState, Out], PluginKwargs]] = {
            ("released", "waiting"): self._released_to_waiting,
            ("released", "memory"): self._released_to_memory,
            ("released", "forgotten"): self._released_to_forgotten,
            ("released", "erred"): self._to_erred_by_blame,
            ("waiting", "processing"): self._waiting_to_processing,
            ("waiting", "released"): self._waiting_to_released,
            ("waiting", "erred"): self._to_erred_by_blame,
            ("queued", "processing"): self._queued_to_processing,
            ("queued", "waiting"): self._to_waiting_again,
            ("queued", "released"): self._waiting_to_released,
            ("queued", "erred"): self._to_erred_by_blame,
            ("no-worker", "processing"): self._waiting_to_processing,
            ("no-worker", "waiting"): self._to_waiting_again,
            ("no-worker", "released"): self._waiting_to_released,
            ("no-worker", "erred"): self._to_erred_by_blame,
            ("processing", "memory"): self._processing_to_memory,
            ("processing", "released"): self._processing_to_released,
            ("processing", "erred"): self._processing_to_erred_by_blame,
            ("memory", "released"): self._memory_to_released,
            ("memory", "erred"): self._memory_to_erred,
            ("erred", "released"): self._erred_to_released,
        }

        self.requests = ClusterRequests(self)
        self.streams = SchedulerStreams(self)
        handlers: dict[str, Route[Any]] = {
            **self.streams.routes(),
            "identity": Route(m.Empty, self.requests.handle_identity),
            "scheduler_info": Route(m.Empty, self.requests.handle_identity),
            "who_has": Route(m.OptionalKeysRequest, self.requests.handle_who_has),
            "has_what": Route(m.WorkersRequest, self.requests.handle_has_what),
            "nthreads": Route(m.WorkersRequest, self.requests.handle_nthreads),
            "processing": Route(m.WorkersRequest, self.requests.handle_processing),
            "nbytes": Route(m.OptionalKeysRequest, self.requests.handle_nbytes),
            "run_function": Route(m.RunFunction, self.requests.handle_run_function),
            "broadcast": Route(m.RunFunction, self.requests.handle_broadcast),
            "story": Route(m.StoryRequest, self.requests.handle_story),
            "retire_workers": Route(m.RetireWorkers, self.requests.handle_retire_workers),
            "replicate": Route(m.Replicate, self.requests.handle_replicate),
            "rebalance": Route(m.Rebalance, self.requests.handle_rebalance),
            "wait_for_workers": Route(m.WaitForWorkers, self.requests.handle_wait_for_workers),
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
        }
        stream_handlers = {**self.streams.stream_routes(), **self.event_log.stream_routes()}
        super().__init__(
            handlers,
            stream_handlers,
            connection_args=self.security.get_connection_args("scheduler"),
            listen_args=self.security.get_listen_args("scheduler"),
        )
        # Workers' and nannies' error replies carry pickled exceptions: left unopened when pickle is off.
        self.rpc.unpickle_errors = self.allow_pickle
        make_extensions(self, extensions, self._blocked_handlers())

    def _blocked_handlers(self) -> list[str]:
        return list(dask.config.get("distributed.scheduler.blocked-handlers", []))

    # ======================================================================
    # Life cycle
    # ======================================================================
    async def start_unsafe(self) -> None:
        await self.listen(self._start_address)
        if self._contact_address:
            self._address = self._contact_address
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
        """Write this scheduler's identity as JSON to ``path``."""
        import json

        with open(path, "w") as f:
            json.dump(self.identity(), f, indent=2)
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
        if any(ws.processing for ws in self.workers.values()) or self.unrunnable or self.n_queued:
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
        """Remove the workers not heard from within ``worker_ttl``; have their nannies replace them.

        What such a worker ran or alone held runs again elsewhere.  The worker is
        stopped, swapped out or stuck, and may wake up later: its stream is closed
        now, so that when it does it finds itself cut off (as after losing its
        scheduler) and closes, its nanny starting a new worker, or reconnects
        afresh (``death_timeout``), instead of running on unknown to us.  And, as
        in dask, its nanny is asked to replace it at once (SIGTERM, then SIGKILL
        after :data:`UNRESPONSIVE_WORKER_GRACE`), which also ends a worker that
        never wakes.  A worker without a nanny is only removed.
        """
        assert self.worker_ttl is not None
        now = time.time()
        for ws in list(self.workers.values()):
            if not ws.last_seen or ws.last_seen >= now - self.worker_ttl:
                continue
            address, nanny = ws.address, ws.nanny
            logger.warning(
                "Worker %s not heard from in %s s; removing it%s",
                address,
                self.worker_ttl,
                f" and having its nanny {nanny} replace it" if nanny else "",
            )
            stream = self.stream_comms.get(address)
            self.send_all(self.remove_worker_state(address, stimulus_id=f"worker-ttl-{now}"))
            self.log_event(
                "scheduler", {"action": "worker-ttl-timed-out", "workers": [address], "ttl": self.worker_ttl}
            )
            if stream is not None:
                stream.abort()
            if nanny:
                self.spawn(self._replace_unresponsive_worker(address, nanny), name="worker-ttl-replace")

    async def _replace_unresponsive_worker(self, address: str, nanny: str) -> None:
        """Ask ``nanny`` for a new worker process in place of the one at ``address`` (see ``_check_worker_ttl``)."""
        request = m.NannyRestart(
            op="restart",
            timeout=UNRESPONSIVE_WORKER_GRACE,
            reason=f"worker-ttl: {address} not heard from in {self.worker_ttl} s",
            wait=False,
            # Not a worker that the nanny has started since (the old one woke, closed and was replaced).
            worker=address,
        )
        timeout = float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) or 30)
        try:
            await asyncio.wait_for(self.rpc.call(nanny, request), timeout)
        except (OSError, CommClosedError, TimeoutError) as e:
            # Stuck too, or cut off with its worker: the worker learns it was removed when it wakes up.
            logger.warning("Could not ask nanny %s to replace the unresponsive worker %s: %r", nanny, address, e)

    def identity(self) -> dict[str, Any]:
        """A summary of this scheduler and its workers."""
        return {
            "type": "Scheduler",
            "id": self.id,
            "address": self.address,
            "services": {name: server.port for name, server in self.services.items()},
            "started": self.time_started,
            "n_workers": len(self.workers),
            "total_threads": self.total_nthreads,
            "total_memory": sum(ws.memory_limit for ws in self.workers.values()),
            "workers": {ws.address: ws.identity() for ws in self.workers.values()},
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

    def _transition_hooks(self) -> list[Callable[..., None]]:
        """The ``transition`` methods of the plugins that define their own (the base one does nothing)."""
        base = SchedulerPlugin.transition
        hooks: list[Callable[..., None]] = []
        for plugin in self.plugins.values():
            hook = getattr(plugin, "transition", None)
            if hook is not None and getattr(hook, "__func__", None) is not base:
                hooks.append(hook)
        return hooks

    def call_plugins(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """Call method ``hook`` of every scheduler plugin with these arguments.

        A plugin whose hook raises is logged and skipped: a faulty plugin never
        stops the scheduler or the other plugins.
        """
        for plugin in list(self.plugins.values()):
            try:
                getattr(plugin, hook)(*args, **kwargs)
            except Exception:
                logger.exception("Plugin hook %s of %r failed", hook, plugin)

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

    def story(self, *keys_or_tasks: Any) -> list[tuple[Key, TaskStateName, TaskStateName, str, float]]:
        """The transitions of these keys: ``(key, start, finish, stimulus_id, time)``."""
        keys = {k.key if isinstance(k, TaskState) else k for k in keys_or_tasks}
        return [t for t in self.transition_log if t[0] in keys]

    # ======================================================================
    # The transition engine
    # ======================================================================
    def transitions(
        self, recommendations: Mapping[TaskState, TaskStateName], stimulus_id: str, out: Out | None = None
    ) -> Out:
        """Apply recommendations, and those they produce, until none are left.

        The one entry point of the state machine: every change of a task's
        state happens in a table method called from here, counted, logged
        for :meth:`story`, shown to plugins and (in validation mode) checked.
        Once no recommendation is left, queued root tasks go to the workers
        in ``out.opened`` while they have free slots.

        Returns the messages to send (``out.workers``, ``out.clients``).
        """
        if out is None:
            out = Out()
        recs = out.recs
        recs.update(recommendations)
        out.no_room_for = None  # workers may have gained room since this Out was last used
        opened = out.opened
        table = self._transitions_table
        log = self.transition_log
        # Bound once per stimulus, not per transition: only plugins that watch transitions.
        hooks = self._transition_hooks() if self.plugins else None
        validate = self.validate
        touched: list[TaskState] = []
        pull_ws: WorkerState | None = None
        pull_room = 0
        finish: TaskStateName
        while True:
            if recs:
                ts, finish = recs.popitem()
            elif pull_room > 0 and pull_ws is not None:
                # A thread freed up: hand it the next queued root task.
                qts = self._pop_queued()
                if qts is None:
                    pull_room = 0
                    opened.clear()
                    continue
                pull_room -= 1
                ts, finish = qts, "processing"
                out.target = pull_ws
            elif opened:
                pull_ws = opened.pop()
                pull_room = self._queue_room(pull_ws)
                continue
            else:
                break
            start = ts.state
            if start == finish or start == "forgotten":
                continue
            func = table.get((start, finish))
            if func is None:
                if validate or start == "released":
                    raise InvalidTransition(ts.key, start, finish, "not in the transition table")
                # Go through released, then try again.
                func = table[(start, "released")]
                recs[ts] = finish
                finish = "released"
            extra = func(ts, out)
            new = ts.state
            if new == start:
                continue  # nothing changed (e.g. still needed, so not forgotten)
            self.transition_counter += 1
            group_states = ts.group.states
            group_states[start] -= 1
            group_states[new] += 1
            log.append((ts.key, start, new, stimulus_id, time.time()))
            if hooks:
                for hook in hooks:
                    try:
                        if extra:
                            hook(ts.key, start, new, stimulus_id=stimulus_id, **extra)
                        else:
                            hook(ts.key, start, new, stimulus_id=stimulus_id)
                    except Exception:
                        logger.exception("Plugin hook transition %r failed", hook)
            if validate:
                touched.append(ts)
        if self._emptied_groups:
            self._drop_emptied_groups()
        for ts in touched:
            self.validate_task(ts)
        return out

    def _drop_emptied_groups(self) -> None:
        # A group per graph (its key names carry a token) would otherwise stay forever.
        emptied, self._emptied_groups = self._emptied_groups, []
        groups = self.task_groups
        for tg in emptied:
            if not tg.live and groups.get(tg.name) is tg:
                del groups[tg.name]
                tg.prefix.retire(tg)

    def send_all(self, out: Out) -> None:
        """Send what a stimulus produced (the I/O shell of the state machine).

        Inside :meth:`holding_sends`, what was held is sent first, so that
        messages leave in the order of the stimuli that made them.
        """
        held = self._held
        if held is not None and out is not held:
            self._held = Out()
            self._send(held)
        self._send(out)

    @contextmanager
    def holding_sends(self) -> Iterator[Out]:
        """Gather the messages of several stimuli into one :class:`Out`, sent at the end.

        For a batch of stream messages (a worker's task-finished reports):
        one send per batch instead of one per task.  Handlers that take the
        yielded ``Out`` add to it; any other :meth:`send_all` flushes it first.
        """
        if self._held is not None:
            yield self._held  # nested: the outer holder sends
            return
        self._held = Out()
        try:
            yield self._held
        finally:
            held, self._held = self._held, None
            self._send(held)

    @property
    def held_out(self) -> Out | None:
        """The :class:`Out` gathering messages during :meth:`holding_sends`, or None."""
        return self._held

    def _send(self, out: Out) -> None:
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

    # -- the transition methods ------------------------------------------------
    def _released_to_waiting(self, ts: TaskState, out: Out) -> None:
        if ts.run_spec is None:
            # Scattered data that was lost: nothing can bring it back.
            ts.state = "released"
            exc = LostDataError(f"Data for {ts.key!r} was lost with its workers and cannot be recomputed")
            self._set_error(ts, as_serialized(exc), None, str(exc))
            out.recs[ts] = "erred"
            return
        ts.state = "waiting"
        erred: TaskState | None = None
        for dts in ts.dependencies:
            dts.waiters = grown(dts.waiters, ts)
            state = dts.state
            if state == "memory":
                continue
            ts.waiting_on = grown(ts.waiting_on, dts)
            if state == "released":
                out.recs.setdefault(dts, "waiting")
            elif state == "erred":
                erred = dts
        if erred is not None:
            ts.exception_blame = erred.exception_blame
            out.recs[ts] = "erred"
        elif not ts.waiting_on:
            out.recs[ts] = "processing"

    def _is_queueable(self, ts: TaskState) -> bool:
        # Actors are not queued: each goes where the fewest actors live (decide_worker).
        return not ts.dependencies and not ts.has_restrictions and self.worker_saturation != math.inf and not ts.actor

    def _slots(self, ws: WorkerState, duration: float) -> int:
        """Root tasks ``ws`` may take now, for tasks expected to run ``duration`` s.

        ``worker-saturation`` bounds root tasks per thread so that their
        outputs do not pile up in memory.  Tasks measured to finish in well
        under the latency budget cannot produce much each, and with one or two
        per thread a worker would spend most of its time waiting for the next
        one: they get enough extra slots to cover the budget.
        """
        base = max(math.ceil(self.worker_saturation * ws.nthreads), 1)
        if 0 <= duration < self.root_latency_budget:
            base += min(int(ws.nthreads * self.root_latency_budget / max(duration, 1e-5)), 1000 * ws.nthreads)
        return base - len(ws.processing) + len(ws.long_running)

    def _worker_with_room(self, duration: float) -> WorkerState | None:
        best: WorkerState | None = None
        best_room = 0
        for ws in self.workers.values():
            if ws.status != "running":
                continue
            room = self._slots(ws, duration)
            if room > best_room:
                best, best_room = ws, room
        return best

    def _unqueue(self, ts: TaskState) -> None:
        """Take a queued or no-worker task off the count or set that tracks it, before it leaves that state."""
        if ts.state == "no-worker":
            self.unrunnable.discard(ts)
        elif ts.state == "queued":
            self.n_queued -= 1  # its heap entry is skipped when popped

    def _waiting_to_processing(self, ts: TaskState, out: Out) -> None:
        cap = self._input_cap
        if cap and ts.dependencies:
            total = 0
            for dts in ts.dependencies:
                total += dts.nbytes
            if total > cap:
                self._refuse_inputs(ts, total, cap, out)
                return
        # _unqueue, inlined: every task passes here.
        start = ts.state
        if start == "no-worker":
            self.unrunnable.discard(ts)
        elif start == "queued":
            self.n_queued -= 1
        placements = out.placements
        if placements is not None:
            ws = placements.pop(ts, None)
            if ws is not None and ws.status == "running" and self.workers.get(ws.address) is ws:
                self._add_to_processing(ts, ws, out)
                return
        if self._is_queueable(ts):
            duration = ts.prefix.duration_average
            ws = None if out.no_room_for == duration else self._worker_with_room(duration)
            if ws is None:
                out.no_room_for = duration
                ts.state = "queued"
                self.n_queued += 1
                self.queued.push(ts.priority, ts)
                return
        else:
            ws = self.decide_worker(ts)
            if ws is None:
                ts.state = "no-worker"
                self.unrunnable.add(ts)
                return
        self._add_to_processing(ts, ws, out)

    def _refuse_inputs(self, ts: TaskState, total: int, cap: int, out: Out) -> None:
        """Err ``ts``, whose inputs alone are more than any worker may hold: running it would only kill workers.

        The task stays where it is and is recommended to erred, so that the
        erred transition (and plugins, and the story) see the change.
        """
        exc = MemoryError(
            f"Task {ts.key!r} has {format_bytes(total)} worth of input dependencies, "
            f"but the largest memory_limit of any worker is {format_bytes(cap)}"
        )
        logger.error("%s", exc)
        self._set_error(ts, as_serialized(exc), None, str(exc))
        out.recs[ts] = "erred"

    def _track_memory_limit(self, ws: WorkerState, joined: bool) -> None:
        """Keep the input cap (see ``_input_cap``) as ``ws`` joins or leaves."""
        limit = ws.memory_limit
        if not limit:
            self._unlimited_workers += 1 if joined else -1
        elif joined:
            self._largest_memory_limit = max(self._largest_memory_limit, limit)
        elif limit >= self._largest_memory_limit:
            # The largest may have left: look again (a worker leaving is rare next to tasks).
            self._largest_memory_limit = max((w.memory_limit for w in self.workers.values()), default=0)
        self._input_cap = 0 if self._unlimited_workers else self._largest_memory_limit

    def _queued_to_processing(self, ts: TaskState, out: Out) -> None:
        ws = out.target
        out.target = None
        if ws is None:
            # Recommended without a worker in mind: look for room anywhere.
            self._waiting_to_processing(ts, out)
            return
        self.n_queued -= 1
        self._add_to_processing(ts, ws, out)

    def _to_waiting_again(self, ts: TaskState, out: Out) -> None:
        """A queued or no-worker task whose dependency must be computed again."""
        self._unqueue(ts)
        ts.state = "waiting"
        if not ts.waiting_on:
            out.recs[ts] = "processing"

    def _add_to_processing(self, ts: TaskState, ws: WorkerState, out: Out) -> None:
        ts.state = "processing"
        ts.processing_on = ws
        ts.waiting_on = EMPTY
        duration = self.get_task_duration(ts)
        ws.processing[ts] = duration
        ws.occupancy += duration
        self.idle_since = None
        if ts.resource_restrictions:
            for r, amount in ts.resource_restrictions.items():
                ws.used_resources[r] = ws.used_resources.get(r, 0.0) + amount
        ts.run_id = next(self._run_ids)
        freed = out.free.get(ws.address)
        if freed and ts.key in freed:
            # Released and assigned again in one go: the worker must not drop it.
            freed.remove(ts.key)
        who_has: dict[Key, list[str]] = {}
        nbytes: dict[Key, int] = {}
        for dts in ts.dependencies:
            who_has[dts.key] = [w.address for w in dts.who_has]
            nbytes[dts.key] = dts.nbytes
        msg = m.ComputeTask(
            op="compute-task",
            key=ts.key,
            run_id=ts.run_id,
            run_spec=ts.run_spec,
            priority=ts.priority,
            who_has=who_has,
            nbytes=nbytes,
            duration=duration,
        )
        if ts.resource_restrictions:
            msg["resources"] = ts.resource_restrictions
        if ts.annotations:
            msg["annotations"] = ts.annotations
        if ts.actor:
            msg["actor"] = True
        out.workers[ws.address].append(msg)

    def get_task_duration(self, ts: TaskState) -> float:
        """Expected run time of ``ts`` in seconds, from its prefix's history."""
        d = ts.prefix.duration_average
        if d >= 0:
            return d
        return self.default_durations.get(ts.prefix.name, self.unknown_duration)

    def _exit_processing(self, ts: TaskState, out: Out) -> WorkerState | None:
        """Take ``ts`` off its worker; give the freed slot to a queued task."""
        ws = ts.processing_on
        if ws is None:
            return None
        out.no_room_for = None
        ts.processing_on = None
        duration = ws.processing.pop(ts, 0.0)
        ws.occupancy = max(ws.occupancy - duration, 0.0) if ws.processing else 0.0
        ws.long_running.discard(ts)
        if ts.resource_restrictions:
            for r, amount in ts.resource_restrictions.items():
                ws.used_resources[r] = ws.used_resources.get(r, 0.0) - amount
        if self.n_queued:
            out.opened.append(ws)
        if ts.resource_restrictions and self.unrunnable:
            for uts in list(self.unrunnable):
                if uts.resource_restrictions:
                    out.recs.setdefault(uts, "processing")
        return ws

    def _queue_room(self, ws: WorkerState) -> int:
        """How many queued root tasks ``ws`` may take now."""
        head = self.queued.peek() if self.n_queued else None
        if head is None or ws.status != "running" or ws.address not in self.workers:
            return 0
        return self._slots(ws, head[1].prefix.duration_average)

    def _pop_queued(self) -> TaskState | None:
        """The most urgent queued task, off the queue (None if there is none)."""
        queue = self.queued
        while queue:
            _, qts = queue.pop()
            if qts.state == "queued":
                return qts
            # Released (or pulled) since it was queued: a stale entry.
        return None

    def decide_worker(self, ts: TaskState) -> WorkerState | None:
        """The worker where ``ts`` should start soonest, or None if none can run it.

        Start time is estimated as the worker's queued work per thread plus the
        time to fetch the dependencies it lacks.
        """
        valid = self._valid_workers(ts)
        if valid is not None and not valid:
            return None
        if not self.workers:
            return None
        if ts.actor:
            return self._decide_actor_worker(valid)
        candidates: Iterable[WorkerState]
        if ts.dependencies:
            holders: set[WorkerState] = set()
            for dts in ts.dependencies:
                holders.update(dts.who_has)
            if valid is not None:
                holders &= valid
            candidates = holders or (valid if valid is not None else self.workers.values())
        else:
            candidates = valid if valid is not None else self.workers.values()
        bandwidth = self.bandwidth
        best: WorkerState | None = None
        best_cost = math.inf
        deps = ts.dependencies
        for ws in candidates:
            if ws.status != "running":
                continue
            cost = ws.occupancy / ws.nthreads
            if deps:
                missing = 0
                for dts in deps:
                    if ws not in dts.who_has:
                        missing += dts.nbytes if dts.nbytes > 0 else 1024
                cost += missing / bandwidth
            cost += len(ws.processing) * 1e-9  # tie-break: fewer tasks
            if cost < best_cost:
                best, best_cost = ws, cost
        if best is None and valid is None:
            for ws in self.workers.values():
                if ws.status == "running":
                    return ws
        return best

    def _decide_actor_worker(self, valid: set[WorkerState] | None) -> WorkerState | None:
        """Where a new actor goes: the running worker with the fewest actors, then the least work."""
        best: WorkerState | None = None
        best_cost: tuple[float, float] = (math.inf, math.inf)
        for ws in valid if valid is not None else self.workers.values():
            if ws.status != "running":
                continue
            cost = (len(ws.actors) + sum(1 for pts in ws.processing if pts.actor), ws.occupancy / ws.nthreads)
            if cost < best_cost:
                best, best_cost = ws, cost
        return best

    def valid_workers(self, ts: TaskState) -> set[WorkerState] | None:
        """Workers allowed to run ``ts`` now (restrictions, free resources), or None for all of them."""
        return self._valid_workers(ts)

    def _valid_workers(self, ts: TaskState) -> set[WorkerState] | None:
        """Workers allowed to run ``ts``, or None for all of them."""
        if not ts.has_restrictions:
            return None
        result: set[WorkerState] | None = None
        if ts.worker_restrictions or ts.host_restrictions:
            allowed: set[WorkerState] = set()
            for w in ts.worker_restrictions or ():
                ws = (self.workers.get(w) if isinstance(w, str) else None) or self.worker_by_name(w)
                if ws is not None:
                    allowed.add(ws)
            for h in ts.host_restrictions or ():
                allowed.update(ws for ws in self.workers.values() if ws.host == h)
            result = allowed
        if ts.resource_restrictions:
            ok = {
                ws
                for ws in self.workers.values()
                if all(
                    ws.resources.get(r, 0.0) - ws.used_resources.get(r, 0.0) >= amount
                    for r, amount in ts.resource_restrictions.items()
                )
            }
            result = ok if result is None else result & ok
        if result is not None and not result and ts.loose_restrictions:
            return None
        return result

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
        n_tasks = self.n_queued + len(self.unrunnable) + sum(len(ws.processing) for ws in workers)
        # Waiting work: measured on a sample, so that a long queue costs no more than 100 lookups.
        waiting = self.n_queued + len(self.unrunnable)
        sample = [ts for _, ts in itertools.islice(self.queued, 200) if ts.state == "queued"][:100]
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

    def worker_by_name(self, name: Any) -> WorkerState | None:
        """The worker called ``name`` (its ``Worker(name=...)``), or None.

        A name that is not a string also matches its ``str()`` (``"0"`` finds
        the worker LocalCluster names ``0``), since names given as strings on
        the command line or in JSON lose their type.
        """
        addr = self.aliases.get(name)
        if addr is not None:
            return self.workers.get(addr)
        if isinstance(name, str):
            # A name that is not a string may arrive as one (``workers=["0"]``
            # for the worker LocalCluster names 0).
            for ws in self.workers.values():
                if not isinstance(ws.name, str) and str(ws.name) == name:
                    return ws
        return None

    def _notify_in_memory(self, ts: TaskState, out: Out) -> None:
        recs = out.recs
        for dts in ts.dependents:
            drop(dts.waiting_on, ts)
            if dts.state == "waiting" and not dts.waiting_on:
                recs[dts] = "processing"
        for dts in ts.dependencies:
            drop(dts.waiters, ts)
            if not dts.waiters and not dts.who_wants and dts.state == "memory":
                recs[dts] = "released"
        if ts.who_wants and self._fire_and_forget is not None:
            self._done_for_fire_and_forget(ts)
        if ts.who_wants:
            workers = [ws.address for ws in ts.who_has]
            msg = m.KeyInMemory(op="key-in-memory", key=ts.key, workers=workers, type=ts.type)
            for cs in ts.who_wants:
                out.clients[cs.client_key].append(msg)
        elif not ts.waiters:
            recs[ts] = "released"

    def _processing_to_memory(self, ts: TaskState, out: Out) -> PluginKwargs:
        finished = out.finished
        if finished is None:
            raise InvalidTransition(ts.key, ts.state, "memory", "only when its worker reports it finished")
        out.finished = None
        nbytes = finished["nbytes"]
        type_ = finished["type"]
        ws = self._exit_processing(ts, out)
        assert ws is not None
        ts.state = "memory"
        ts.nbytes = nbytes
        ts.type = type_
        ts.exception_blame = None
        ts.who_has = grown(ts.who_has, ws)
        ws.has_what[ts] = None
        ws.nbytes += nbytes
        ts.group.nbytes_total += nbytes
        if ts.actor:
            ws.actors.add(ts)
        self._notify_in_memory(ts, out)
        if self.plugins:
            return {
                "worker": ws.address,
                "nbytes": nbytes,
                "type": type_,
                "typename": type_,
                "startstops": _startstops(finished),
            }
        return None

    def _released_to_memory(self, ts: TaskState, out: Out) -> PluginKwargs:
        scattered = out.scattered
        if scattered is None:
            raise InvalidTransition(ts.key, ts.state, "memory", "only when it was scattered")
        out.scattered = None
        holders, nbytes, type_ = scattered
        ts.state = "memory"
        ts.nbytes = nbytes
        ts.type = type_
        for ws in holders:
            ts.who_has = grown(ts.who_has, ws)
            ws.has_what[ts] = None
            ws.nbytes += nbytes
        ts.priority = ts.priority or (0, self.generation, 0)
        self._notify_in_memory(ts, out)
        if self.plugins:
            return {"workers": [ws.address for ws in holders], "nbytes": nbytes, "type": type_}
        return None

    def _after_release(self, ts: TaskState, out: Out) -> None:
        """A released task that is still needed waits again; an unneeded one is forgotten."""
        if ts.who_wants or ts.waiters:
            out.recs.setdefault(ts, "waiting")
        elif not ts.dependents:
            out.recs.setdefault(ts, "forgotten")

    def _release_dependencies(self, ts: TaskState, out: Out) -> None:
        for dts in ts.dependencies:
            drop(dts.waiters, ts)
            if (
                not dts.waiters
                and not dts.who_wants
                and dts.state in ("memory", "erred", "waiting", "queued", "no-worker", "processing")
            ):
                out.recs.setdefault(dts, "released")

    def _waiting_to_released(self, ts: TaskState, out: Out) -> None:
        self._unqueue(ts)
        ts.state = "released"
        ts.waiting_on = EMPTY
        if not (ts.who_wants or ts.waiters):
            self._release_dependencies(ts, out)
        self._after_release(ts, out)

    def _processing_to_released(self, ts: TaskState, out: Out) -> None:
        ws = self._exit_processing(ts, out)
        if ws is not None and ws.address in self.workers:
            out.free[ws.address].append(ts.key)
        ts.state = "released"
        ts.waiting_on = EMPTY
        if not (ts.who_wants or ts.waiters):
            self._release_dependencies(ts, out)
        self._after_release(ts, out)

    def _memory_to_released(self, ts: TaskState, out: Out) -> None:
        # A key still wanted leaves memory only when its data was lost: its
        # clients wait again (it is recomputed, or errs if it cannot be).
        for cs in ts.who_wants:
            out.clients[cs.client_key].append(m.LostData(op="lost-data", key=ts.key))
        self._drop_holders(ts, out)
        ts.state = "released"
        for dts in ts.dependents:
            if dts.state in ("waiting", "queued", "no-worker"):
                dts.waiting_on = grown(dts.waiting_on, ts)
                if dts.state != "waiting":
                    out.recs[dts] = "waiting"
            elif dts.state == "processing":
                # Its worker may not be able to fetch this key any more.
                out.recs[dts] = "released"
        self._after_release(ts, out)

    def _drop_holders(self, ts: TaskState, out: Out) -> None:
        """Forget every copy of ``ts``; the workers still here are told to drop theirs."""
        for ws in ts.who_has:
            del ws.has_what[ts]
            ws.nbytes -= max(ts.nbytes, 0)
            if ts.actor:
                ws.actors.discard(ts)
            if ws.address in self.workers:
                out.free[ws.address].append(ts.key)
        ts.who_has = EMPTY

    def _memory_to_erred(self, ts: TaskState, out: Out) -> None:
        """An actor whose worker left: its state cannot be recomputed, so its key errs (error set before)."""
        self._drop_holders(ts, out)
        if ts.exception_blame is None:
            ts.exception_blame = ts
        self._mark_erred(ts, out)

    def _erred_to_released(self, ts: TaskState, out: Out) -> None:
        ts.state = "released"
        ts.exception = None
        ts.traceback = None
        ts.exception_text = ""
        ts.exception_blame = None
        for dts in ts.dependents:
            if dts.state == "erred":
                out.recs.setdefault(dts, "released")
        self._after_release(ts, out)

    def _released_to_forgotten(self, ts: TaskState, out: Out) -> None:
        if ts.who_wants or ts.dependents:
            # Still needed after all: keep it released.
            return
        ts.state = "forgotten"
        for dts in ts.dependencies:
            drop(dts.dependents, ts)
            drop(dts.waiters, ts)
            if not dts.who_wants and not dts.dependents:
                if dts.state == "released":
                    out.recs.setdefault(dts, "forgotten")
                elif dts.state != "forgotten" and not dts.waiters:
                    out.recs.setdefault(dts, "released")
            elif not dts.waiters and not dts.who_wants and dts.state == "memory":
                out.recs.setdefault(dts, "released")
        ts.dependencies = EMPTY
        del self.tasks[ts.key]
        self.tasks_forgotten += 1
        tg = ts.group
        tg.live -= 1
        if not tg.live:
            self._emptied_groups.append(tg)

    def _done_for_fire_and_forget(self, ts: TaskState) -> None:
        """``ts`` is done (in memory or erred): ``fire_and_forget`` wants it no more.

        Called by the transitions into memory and erred, which then release
        it if nothing else wants it.
        """
        ff = self._fire_and_forget
        if ff is not None and ff in ts.who_wants:
            ts.who_wants = without(ts.who_wants, ff)
            ff.wants_what.discard(ts)

    def _set_error(self, ts: TaskState, exception: Payload, traceback: Any, text: str) -> None:
        ts.exception = exception
        ts.traceback = traceback
        ts.exception_text = text
        ts.exception_blame = ts

    def _mark_erred(self, ts: TaskState, out: Out) -> None:
        ts.state = "erred"
        ts.waiting_on = EMPTY
        blame = ts.exception_blame or ts
        for dts in ts.dependents:
            if dts.state in ("waiting", "queued", "no-worker", "released", "processing"):
                dts.exception_blame = blame
                out.recs[dts] = "erred"
        for dts in ts.dependencies:
            drop(dts.waiters, ts)
            if not dts.waiters and not dts.who_wants and dts.state == "memory":
                out.recs.setdefault(dts, "released")
        if ts.who_wants and self._fire_and_forget is not None:
            self._done_for_fire_and_forget(ts)
            if not ts.who_wants and not ts.dependents:
                # Only fire_and_forget wanted it, and no dependent's error points here: let it go.
                out.recs[ts] = "released"
        if ts.who_wants:
            msg = self._task_erred(ts)
            if msg is not None:
                for cs in ts.who_wants:
                    out.clients[cs.client_key].append(msg)

    def _to_erred_by_blame(self, ts: TaskState, out: Out) -> None:
        self._unqueue(ts)
        if ts.exception_blame is None:
            ts.exception_blame = ts
        self._mark_erred(ts, out)

    def _processing_to_erred_by_blame(self, ts: TaskState, out: Out) -> PluginKwargs:
        ws = self._exit_processing(ts, out)
        if ws is not None and ws.address in self.workers:
            out.free[ws.address].append(ts.key)
        if ts.exception_blame is None:
            ts.exception_blame = ts
        self._mark_erred(ts, out)
        if not self.plugins:
            return None
        erred = out.erred
        out.erred = None
        extra: dict[str, Any] = {"worker": ws.address if ws is not None else None}
        if erred is not None and erred["key"] == ts.key:
            extra["startstops"] = _startstops(erred)
            extra["text"] = erred["text"]
        return extra

    # ======================================================================
    # Stimuli (pure: they change state and return what to send)
    # ======================================================================
    def _get_group(self, key: Key) -> TaskGroup:
        if isinstance(key, tuple) and key and isinstance(key[0], str):
            group_name = key[0]
        elif type(key) is str:
            group_name = _key_name(key)
        else:
            group_name = key_split_uncached(key)
        tg = self.task_groups.get(group_name)
        if tg is None:
            name = key_split_uncached(key)
            tp = self.task_prefixes.get(name)
            if tp is None:
                tp = self.task_prefixes[name] = TaskPrefix(name)
            tg = self.task_groups[group_name] = TaskGroup(group_name, tp)
        return tg

    def new_task(self, key: Key, run_spec: Payload | None) -> TaskState:
        """Create the record of a new task."""
        ts = TaskState(key, run_spec, self._get_group(key))
        self.tasks[key] = ts
        return ts

    def update_graph(
        self,
        client: str,
        tasks: Mapping[Key, m.TaskSpec],
        keys: Sequence[Key],
        *,
        user_priority: int = 0,
        annotations: Mapping[str, Any] | None = None,
        stimulus_id: str | None = None,
        graph: str | None = None,
        final: bool = True,
        generation: int | None = None,
        checked: bool = False,
    ) -> Out:
        """Add a client's graph and want its ``keys``.

        Tasks whose key is already known keep their existing state (a key
        names one computation).  Tasks whose dependencies are neither in the
        graph nor known are cancelled as "lost dependencies".

        A large graph may come in several parts sharing a ``graph`` id: the
        tasks of every part are held (wanted by a stand-in client) until the
        ``final`` part arrives, so that nothing a later part depends on is
        released in between.

        ``generation`` (default: a new one) orders these tasks after those of
        earlier graphs of the same priority; ``checked`` says the graph was
        already checked for NaN keys and cycles (see :meth:`update_graph_slices`).
        """
        stimulus_id = stimulus_id or f"update-graph-{time.time()}"
        out = Out()
        problem = None if checked else _graph_problem(tasks, keys, self.tasks)
        if problem is not None:
            # Refused whole: nothing of it enters the state, so nothing is left behind.
            logger.warning("Refused a graph from client %s: %s", client, problem)
            exc = ValueError(f"Graph refused: {problem}")
            payload = as_serialized(exc)
            for key in keys:
                out.clients[client].append(
                    m.ClientTaskErred(op="task-erred", key=key, exception=payload, traceback=None, text=str(exc))
                )
            return out
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        holder: ClientState | None = None
        if graph is not None:
            hold_id = f"{client}/graph-{graph}"
            holder = self.clients.get(hold_id)
            if holder is None:
                holder = self.clients[hold_id] = ClientState(hold_id)
        if generation is None:
            self.generation += 1
            generation = self.generation
        global_annotations = dict(annotations or {})
        new: list[TaskState] = []
        for key, spec in tasks.items():
            ts = self.tasks.get(key)
            if ts is None:
                ts = self.new_task(key, spec["run_spec"])
                new.append(ts)
                if spec.get("actor"):
                    ts.actor = True
            else:
                if ts.run_spec is None and spec["run_spec"] is not None and ts.state == "released":
                    ts.run_spec = spec["run_spec"]
                continue
            # No dict per task unless the task has annotations of its own (read only below).
            own = spec.get("annotations")
            ann = {**global_annotations, **own} if own else global_annotations
            priority = ann.get("priority", user_priority) if ann else user_priority
            ts.priority = (-(priority or 0), generation, spec["order"])
            if ann:
                self._apply_annotations(ts, ann)
        lost: list[TaskState] = []
        for ts in new:
            spec = tasks[ts.key]
            for dep_key in spec["dependencies"]:
                dts = self.tasks.get(dep_key)
                if dts is None:
                    ts.has_lost_dependencies = True
                    continue
                if dts is ts:
                    continue
                ts.dependencies = grown(ts.dependencies, dts)
                dts.dependents = grown(dts.dependents, ts)
            if ts.has_lost_dependencies:
                lost.append(ts)
        # Propagate lost dependencies to dependents in this graph.
        if lost:
            stack = list(lost)
            lost_set = set(lost)
            while stack:
                t = stack.pop()
                for d in t.dependents:
                    if d not in lost_set:
                        lost_set.add(d)
                        d.has_lost_dependencies = True
                        stack.append(d)
        if holder is not None and not final:
            for key in tasks:
                hts = self.tasks.get(key)
                if hts is not None and not hts.has_lost_dependencies:
                    hts.who_wants = grown(hts.who_wants, holder)
                    holder.wants_what.add(hts)
        wanted: list[TaskState] = []
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None:
                out.clients[client].append(m.CancelledKeys(op="cancelled-keys", keys=[key], reason="lost dependencies"))
                continue
            ts.who_wants = grown(ts.who_wants, cs)
            cs.wants_what.add(ts)
            wanted.append(ts)
        for ts in wanted:
            if ts.has_lost_dependencies:
                ts.who_wants = without(ts.who_wants, cs)
                cs.wants_what.discard(ts)
                out.clients[client].append(
                    m.CancelledKeys(op="cancelled-keys", keys=[ts.key], reason="lost dependencies")
                )
            elif ts.state == "memory":
                out.clients[client].append(self._key_in_memory(ts))
            elif ts.state == "erred":
                self._report_erred(ts, cs, out)
        if self.plugins:
            ann_out: dict[str, dict[Key, Any]] = defaultdict(dict)
            for ts in new:
                for k, v in ts.annotations.items():
                    ann_out[k][ts.key] = v
            self.call_plugins(
                "update_graph",
                self,
                client=client,
                keys={ts.key for ts in wanted},
                tasks=[ts.key for ts in new],
                annotations=dict(ann_out),
                priority={ts.key: ts.priority for ts in new},
                stimulus_id=stimulus_id,
            )
        if lost:
            self._drop_lost(lost_set, stimulus_id, out)
        recs: dict[TaskState, TaskStateName] = {}
        # Recommendations pop last-in first: insert the most urgent task last.
        for ts in sorted(new, key=_priority_key, reverse=True):
            if ts.state == "released":
                recs[ts] = "waiting"
        for ts in wanted:
            if ts.state == "released" and not ts.has_lost_dependencies:
                recs[ts] = "waiting"
        self.transitions(recs, stimulus_id, out)
        if holder is not None and final:
            # The whole graph is here: stop holding its parts.
            out2 = self.remove_client_state(holder.client_key, stimulus_id)
            for addr, keys_ in out2.free.items():
                out.free[addr].extend(keys_)
            for addr, msgs in out2.workers.items():
                out.workers[addr].extend(msgs)
            for c, client_msgs in out2.clients.items():
                out.clients[c].extend(client_msgs)
        return out

    def update_graph_slices(
        self,
        client: str,
        tasks: Mapping[Key, m.TaskSpec],
        keys: Sequence[Key],
        *,
        user_priority: int = 0,
        annotations: Mapping[str, Any] | None = None,
        stimulus_id: str | None = None,
        graph: str | None = None,
        final: bool = True,
        size: int = INGEST_SLICE,
    ) -> Iterator[Out]:
        """:meth:`update_graph` in slices of ``size`` tasks: the messages of each slice in turn.

        The caller may let other work in between slices (the state is whole
        after each), so that a large graph does not stop the scheduler from
        answering workers and clients for as long as it takes to add it all.
        The result is that of one :meth:`update_graph`: the graph is checked
        whole first, and its tasks share one generation.  Tasks nobody wants
        yet are held (as for a graph in parts) until the last slice is in.
        A graph in which a task comes before one of its dependencies is added
        in one go.
        """
        stimulus_id = stimulus_id or f"update-graph-{time.time()}"
        slices = _slices(tasks, keys, size)
        if slices is None:
            yield self.update_graph(
                client,
                tasks,
                keys,
                user_priority=user_priority,
                annotations=annotations,
                stimulus_id=stimulus_id,
                graph=graph,
                final=final,
            )
            return
        problem = _graph_problem(tasks, keys, self.tasks)
        if problem is not None:
            yield self.update_graph(client, tasks, keys, stimulus_id=stimulus_id)
            return
        slice_keys, unwanted = slices
        if unwanted and graph is None:
            # Hold the slices' tasks as a graph in parts would be held.
            graph = f"slices-{uuid.uuid4().hex}"
        self.generation += 1
        generation = self.generation
        last = len(slice_keys) - 1
        items = iter(tasks.items())
        for i, wanted in enumerate(slice_keys):
            part = dict(itertools.islice(items, size))
            yield self.update_graph(
                client,
                part,
                wanted,
                user_priority=user_priority,
                annotations=annotations,
                stimulus_id=stimulus_id,
                graph=graph,
                final=final if i == last else graph is None,
                generation=generation,
                checked=True,
            )

    def _drop_lost(self, lost: set[TaskState], stimulus_id: str, out: Out) -> None:
        """Forget new tasks that cannot run because a dependency is unknown.

        Every dependent of a lost task is lost too: forgetting the lost
        tasks no other lost task depends on forgets the rest in turn, and
        with them the dependencies nothing else needs.
        """
        recs: dict[TaskState, TaskStateName] = {}
        for ts in lost:
            for cs in ts.who_wants:
                cs.wants_what.discard(ts)
            ts.who_wants = EMPTY
            if not ts.dependents:
                recs[ts] = "forgotten"
        self.transitions(recs, stimulus_id, out)

    @staticmethod
    def _key_in_memory(ts: TaskState) -> m.KeyInMemory:
        return m.KeyInMemory(op="key-in-memory", key=ts.key, workers=[ws.address for ws in ts.who_has], type=ts.type)

    def _report_erred(self, ts: TaskState, cs: ClientState, out: Out) -> None:
        msg = self._task_erred(ts)
        if msg is not None:
            out.clients[cs.client_key].append(msg)

    @staticmethod
    def _task_erred(ts: TaskState) -> m.ClientTaskErred | None:
        """What clients learn of erred ``ts``: the error of the task to blame (None when it has none)."""
        blame = ts.exception_blame or ts
        if blame.exception is None:
            return None
        return m.ClientTaskErred(
            op="task-erred", key=ts.key, exception=blame.exception, traceback=blame.traceback, text=blame.exception_text
        )

    def _apply_annotations(self, ts: TaskState, ann: Mapping[str, Any]) -> None:
        ts.annotations = {
            k: v for k, v in ann.items() if isinstance(v, (str, int, float, bool, tuple, list, dict, type(None)))
        }
        retries = ann.get("retries")
        if isinstance(retries, int) and not isinstance(retries, bool):
            ts.retries = retries
        workers = ann.get("workers")
        if workers:
            if isinstance(workers, (str, int)):
                workers = [workers]
            hosts: set[str] = set()
            addrs: set[Any] = set()
            for w in workers:
                if not isinstance(w, str):
                    addrs.add(w)  # a worker name that is not a string, e.g. 0
                    continue
                if "://" in w or w in self.aliases or any(ws.name == w for ws in self.workers.values()):
                    addrs.add(w)
                elif ":" in w:
                    addrs.add(f"{'tcp' if self._protocol == 'inproc' else self._protocol}://{w}")
                else:
                    hosts.add(w)
                    addrs.add(w)
            ts.worker_restrictions = addrs or None
            ts.host_restrictions = hosts or None
        resources = ann.get("resources")
        if isinstance(resources, dict) and resources:
            ts.resource_restrictions = {str(k): float(v) for k, v in resources.items()}
        if ann.get("allow_other_workers"):
            ts.loose_restrictions = True

    def task_finished(self, worker: str, msg: m.TaskFinished, stimulus_id: str, out: Out | None = None) -> Out:
        """``worker`` finished a task and holds its result.

        ``msg`` is the worker's report as it arrived (already checked against
        its declaration): passing it through costs nothing per task, where
        copying it into an event object would.  ``out`` gathers the result
        with that of other stimuli (see :meth:`holding_sends`).
        """
        if out is None:
            out = Out()
        key = msg["key"]
        ts = self.tasks.get(key)
        ws = self.workers.get(worker)
        if ws is None:
            return out
        if ts is None or ts.state != "processing" or ts.processing_on is not ws or ts.run_id != msg["run_id"]:
            if ts is not None and ts.state == "processing" and ts.processing_on is ws:
                # An older run finished on the worker now running a newer one: ignore it.
                return out
            if ts is not None and ts.state == "memory" and ws not in ts.who_has:
                # Computed twice (e.g. after a reschedule): keep the replica.
                ts.who_has = grown(ts.who_has, ws)
                ws.has_what[ts] = None
                ws.nbytes += max(msg["nbytes"], 0)
            elif ts is None or ts.state not in ("memory",):
                out.free[worker].append(key)
            return out
        duration = msg["stop"] - msg["start"]
        if duration >= 0:
            ts.prefix.add_duration(duration)
            ts.group.duration += duration
        type_ = msg["type"]
        if type_:
            ts.group.types.add(type_)
        out.finished = msg
        return self.transitions({ts: "memory"}, stimulus_id, out)

    def task_erred(self, worker: str, msg: m.WorkerTaskErred, stimulus_id: str) -> Out:
        """A task raised on ``worker`` (``msg`` is the worker's report)."""
        out = Out()
        ts = self.tasks.get(msg["key"])
        ws = self.workers.get(worker)
        if (
            ts is None
            or ws is None
            or ts.state != "processing"
            or ts.processing_on is not ws
            or ts.run_id != msg["run_id"]
        ):
            return out
        if ts.retries > 0:
            # Released, it is wanted still, so it waits and runs again.
            ts.retries -= 1
            return self.transitions({ts: "released"}, stimulus_id, out)
        self._set_error(ts, msg["exception"], msg["traceback"], msg["text"])
        if ts.erred_on is None:
            ts.erred_on = set()
        ts.erred_on.add(worker)
        if self.plugins:
            out.erred = msg
        return self.transitions({ts: "erred"}, stimulus_id, out)

    def add_worker_state(
        self,
        address: str,
        nthreads: int,
        *,
        name: Any = None,
        memory_limit: int = 0,
        pid: int = 0,
        nanny: str | None = None,
        resources: Mapping[str, float] | None = None,
        keys: Sequence[Key] = (),
        nbytes: Mapping[Key, int] | None = None,
        stimulus_id: str | None = None,
    ) -> Out:
        """A worker joined: record it and give it work."""
        stimulus_id = stimulus_id or f"add-worker-{time.time()}"
        _check_worker_fields(address, nthreads, name, memory_limit)
        if address in self.workers:
            raise ValueError(f"Worker {address} is already registered")
        if name is not None and name in self.aliases and self.aliases[name] != address:
            raise ValueError(f"A worker named {name!r} already exists")
        ws = WorkerState(
            address, nthreads, name=name, memory_limit=memory_limit, pid=pid, nanny=nanny, resources=resources
        )
        ws.last_seen = time.time()
        self.workers[address] = ws
        self.aliases[ws.name] = address
        self.total_nthreads += nthreads
        self._track_memory_limit(ws, joined=True)
        out = Out()
        for key in keys:
            ts = self.tasks.get(key)
            if ts is not None and ts.state == "memory":
                ts.who_has = grown(ts.who_has, ws)
                ws.has_what[ts] = None
                ws.nbytes += (nbytes or {}).get(key, ts.nbytes)
            else:
                out.free[address].append(key)
        recs: dict[TaskState, TaskStateName] = {ts: "processing" for ts in self.unrunnable if self._can_run_on(ts, ws)}
        out.opened.append(ws)
        self.transitions(recs, stimulus_id, out)
        if self.plugins:
            self.call_plugins("add_worker", self, address)
        if self._worker_joined is not None:
            self._worker_joined.set()
        return out

    def _can_run_on(self, ts: TaskState, ws: WorkerState) -> bool:
        valid = self._valid_workers(ts)
        return valid is None or ws in valid

    def remove_worker_state(self, address: str, *, stimulus_id: str, safe: bool = False) -> Out:
        """A worker left: rerun what it was running and recompute what only it held."""
        out = Out()
        ws = self.workers.pop(address, None)
        if ws is None:
            return out
        ws.status = "closed"
        self.total_nthreads -= ws.nthreads
        self._track_memory_limit(ws, joined=False)
        if self.aliases.get(ws.name) == address:
            del self.aliases[ws.name]
        recs: dict[TaskState, TaskStateName] = {}
        for ts in list(ws.processing):
            if not safe:
                ts.suspicious += 1
            if ts.suspicious > self.allowed_failures:
                exc = KilledWorker(ts.key, address, self.allowed_failures)
                self._set_error(ts, as_serialized(exc), None, str(exc))
                recs[ts] = "erred"
            else:
                recs[ts] = "released"
        lost: list[TaskState] = []
        for ts in list(ws.has_what):
            if ts.actor and ts in ws.actors:
                continue  # see below
            if len(ts.who_has) > 1 or ts.state != "memory":
                ts.who_has = without(ts.who_has, ws)
                del ws.has_what[ts]
                continue
            # Held only here: released (which clears who_has) before its
            # dependents move, so none of them starts with no holder to fetch from.
            lost.append(ts)
        ws.nbytes = 0
        # Recommendations pop last-in first: lost data goes before the reruns,
        # and dependencies (earlier priority) before their dependents.
        for ts in sorted(lost, key=_priority_key, reverse=True):
            recs[ts] = "released"
        for ts in list(ws.actors):
            # The instance lived there (other holders have only proxies): a new
            # instance would silently start afresh, so the key errs instead.
            lost_actor = ActorLostError(ts.key, address)
            self._set_error(ts, as_serialized(lost_actor), None, str(lost_actor))
            recs[ts] = "erred"
        self.transitions(recs, stimulus_id, out)
        self.stream_comms.pop(address, None)
        self.rpc.remove(address)
        for hook in self.remove_worker_hooks:
            hook(address, stimulus_id, out)
        if self.plugins:
            self.call_plugins("remove_worker", self, address, stimulus_id=stimulus_id)
        return out

    def reopen_worker_state(self, address: str, *, stimulus_id: str) -> Out:
        """A worker that was to retire stays: it takes tasks again (queued ones and those waiting for it)."""
        out = Out()
        ws = self.workers.get(address)
        if ws is None or ws.status == "running":
            return out
        ws.status = "running"
        out.opened.append(ws)
        recs: dict[TaskState, TaskStateName] = {ts: "processing" for ts in self.unrunnable if self._can_run_on(ts, ws)}
        return self.transitions(recs, stimulus_id, out)

    def report_holders(self, tasks: Iterable[TaskState]) -> Out:
        """Tell the clients wanting these keys where they are now (they moved: their old holders left)."""
        out = Out()
        for ts in tasks:
            if ts.state == "memory" and ts.who_wants:
                msg = self._key_in_memory(ts)
                for cs in ts.who_wants:
                    out.clients[cs.client_key].append(msg)
        return out

    def fail_tasks_restricted_to(self, gone: Mapping[str, Any], *, stimulus_id: str, reason: str) -> Out:
        """Err the tasks that may run only on workers that left for good.

        ``gone`` maps the departed workers' addresses to their names.  A task
        waiting or unrunnable, without ``allow_other_workers``, whose worker
        restrictions name one of them, and which no worker left can run, errs with
        :class:`~distributed.exceptions.NoValidWorkerError` instead of waiting
        for a worker that will not come back.
        """
        out = Out()
        idents = set(gone) | {str(n) for n in gone.values()}
        recs: dict[TaskState, TaskStateName] = {}
        # Rare (a retirement), so a pass over the tasks is fine: waiting ones would end up unrunnable too.
        for ts in [t for t in self.tasks.values() if t.state in ("no-worker", "waiting")]:
            restrictions = ts.worker_restrictions
            if ts.loose_restrictions or not restrictions:
                continue
            if not any(str(w) in idents for w in restrictions) or self._valid_workers(ts):
                continue
            exc = NoValidWorkerError(ts.key, sorted(str(w) for w in restrictions), reason)
            self._set_error(ts, as_serialized(exc), None, str(exc))
            recs[ts] = "erred"
        return self.transitions(recs, stimulus_id, out)

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

    def workers_stuck_on_full_disks(self) -> bool:
        """Whether tasks wait while every worker is paused and cannot spill (its spill disk failed).

        Such a cluster goes on only if clients release results or someone frees
        the disk; otherwise every future waits forever.  Past
        ``distributed.scheduler.full-disk-timeout`` of this, the waiting tasks
        err (:meth:`fail_tasks_stuck_on_full_disks`).
        """
        workers = self.workers.values()
        if not workers:
            return False
        for ws in workers:
            if ws.status != "paused" or "spill_disk_error" not in ws.metrics:
                return False
        return bool(self.n_queued or self.unrunnable or any(ws.processing for ws in workers))

    def fail_tasks_stuck_on_full_disks(self, *, stimulus_id: str) -> Out:
        """Err, with :class:`MemoryError`, the tasks that wait for workers paused on full memory and a failed disk.

        Tasks queued, waiting for a worker, or assigned to one (a paused worker
        starts none) err; those depending on them err by blame, as after any
        error.  Results already in memory stay and can be fetched.
        """
        out = Out()
        if not self.workers_stuck_on_full_disks():
            return out
        example = next(iter(self.workers.values()))
        why = (
            f"every worker has been paused for {self.full_disk_timeout} s with its memory full, unable to spill "
            f"to disk after a disk error ({example.address}: {example.metrics['spill_disk_error']}); "
            f"free disk space or release results (distributed.scheduler.full-disk-timeout)"
        )
        logger.error("Failing the tasks that wait: %s", why)
        recs: dict[TaskState, TaskStateName] = {}
        # Rare (a cluster that cannot go on), so a pass over the tasks is fine.
        for ts in [t for t in self.tasks.values() if t.state in ("queued", "no-worker", "processing")]:
            exc = MemoryError(f"Task {ts.key!r} cannot run: {why}")
            self._set_error(ts, as_serialized(exc), None, str(exc))
            recs[ts] = "erred"
        return self.transitions(recs, stimulus_id, out)

    def client_releases_keys(self, client: str, keys: Iterable[Key], stimulus_id: str) -> Out:
        """A client no longer wants ``keys``."""
        out = Out()
        cs = self.clients.get(client)
        if cs is not None:
            self._release_for(cs, keys, stimulus_id, out)
        return out

    def _release_for(self, cs: ClientState, keys: Iterable[Key], stimulus_id: str, out: Out) -> None:
        recs: dict[TaskState, TaskStateName] = {}
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None or cs not in ts.who_wants:
                continue
            ts.who_wants = without(ts.who_wants, cs)
            cs.wants_what.discard(ts)
            if not ts.who_wants:
                if ts.state == "released":
                    recs[ts] = "forgotten"
                elif not ts.waiters:
                    recs[ts] = "released"
        self.transitions(recs, stimulus_id, out)

    def client_desires_keys(self, client: str, keys: Iterable[Key], stimulus_id: str) -> Out:
        """A client wants ``keys`` (already known to the scheduler).

        The stand-in client :data:`~distributed.protocol.messages.FIRE_AND_FORGET`
        wants a key only until it is done: the transitions into memory and
        erred drop its want, and a key already done is not wanted at all.
        """
        out = Out()
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        forget_when_done = client == m.FIRE_AND_FORGET
        if forget_when_done:
            self._fire_and_forget = cs
        recs: dict[TaskState, TaskStateName] = {}
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None:
                if not forget_when_done:
                    out.clients[client].append(m.CancelledKeys(op="cancelled-keys", keys=[key], reason="unknown key"))
                continue
            if forget_when_done and ts.state in ("memory", "erred"):
                continue  # done already: nothing to see through, and nobody to tell
            ts.who_wants = grown(ts.who_wants, cs)
            cs.wants_what.add(ts)
            if ts.state == "memory":
                out.clients[client].append(self._key_in_memory(ts))
            elif ts.state == "erred":
                self._report_erred(ts, cs, out)
            elif ts.state == "released":
                recs[ts] = "waiting"
        return self.transitions(recs, stimulus_id, out)

    def remove_client_state(self, client: str, stimulus_id: str) -> Out:
        """A client left: release everything it wanted.

        That includes what the stand-ins holding the parts of its graphs
        still in flight (``<client>/graph-<id>``) wanted: no final part
        will ever come to release them.
        """
        out = Out()
        prefix = f"{client}/graph-"
        for name in [client, *(c for c in self.clients if c.startswith(prefix))]:
            cs = self.clients.get(name)
            if cs is None:
                continue
            self._release_for(cs, [ts.key for ts in cs.wants_what], stimulus_id, out)
            del self.clients[name]
            if self.plugins and name == client:
                self.call_plugins("remove_client", self, client)
        return out

    def cancel_keys(self, msg: m.CancelKeys, stimulus_id: str) -> Out:
        """A client cancels ``msg["keys"]``.

        A key only the cancelling client wants (or nobody) is cancelled,
        with what depends on it and is not computed yet, for every client
        that wanted any of them.  A key another client wants too stays: only
        the cancelling client's interest goes.  With ``force`` the keys are
        cancelled for every client regardless (``Client.cancel(force=True)``).
        """
        out = Out()
        reason = msg.get("reason", "cancelled by a client")
        force = msg.get("force", False)
        cs = self.clients.get(msg["client"])
        mine: list[TaskState] = []
        seen: set[TaskState] = set()
        stack = [self.tasks[k] for k in msg["keys"] if k in self.tasks]
        while stack:
            ts = stack.pop()
            if ts in seen:
                continue
            if not force and any(other is not cs for other in ts.who_wants):
                # Others want it: only the cancelling client lets go.
                if cs is not None and cs in ts.who_wants:
                    mine.append(ts)
                continue
            seen.add(ts)
            for dts in ts.dependents:
                if dts.state not in ("memory", "erred"):
                    stack.append(dts)
        if mine and cs is not None:
            for ts in mine:
                out.clients[cs.client_key].append(m.CancelledKeys(op="cancelled-keys", keys=[ts.key], reason=reason))
            self._release_for(cs, [ts.key for ts in mine], stimulus_id, out)
        recs: dict[TaskState, TaskStateName] = {}
        for ts in seen:
            for wcs in list(ts.who_wants):
                out.clients[wcs.client_key].append(m.CancelledKeys(op="cancelled-keys", keys=[ts.key], reason=reason))
                wcs.wants_what.discard(ts)
            ts.who_wants = EMPTY
        # A cancelled task still needed by one that stays (another client
        # wants it) keeps running; look at dependents before dependencies.
        releasing: set[TaskState] = set()
        for ts in sorted(seen, key=_priority_key, reverse=True):
            if ts.state != "forgotten" and not ts.waiters - releasing:
                releasing.add(ts)
        # Recommendations pop last-in first: dependents (later priority) go
        # first, so a dependency is not kept alive by a dependent being cancelled.
        for ts in sorted(releasing, key=_priority_key):
            recs[ts] = "released" if ts.state != "released" else "forgotten"
        return self.transitions(recs, stimulus_id, out)

    def update_data_state(self, msg: m.UpdateData, stimulus_id: str) -> Out:
        """Data was scattered to workers: record it in memory, wanted by ``msg["client"]``."""
        out = Out()
        client = msg["client"]
        who_has = msg["who_has"]
        nbytes = msg["nbytes"]
        types = msg.get("types", {})
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        for key, addrs in who_has.items():
            holders = [self.workers[a] for a in addrs if a in self.workers]
            if not holders:
                continue
            ts = self.tasks.get(key)
            if ts is None:
                ts = self.new_task(key, None)
            elif ts.state == "memory":
                # More replicas of data already in memory.
                for ws in holders:
                    if ws not in ts.who_has:
                        ts.who_has = grown(ts.who_has, ws)
                        ws.has_what[ts] = None
                        ws.nbytes += max(ts.nbytes, 0)
                if cs not in ts.who_wants:
                    ts.who_wants = grown(ts.who_wants, cs)
                    cs.wants_what.add(ts)
                    out.clients[client].append(self._key_in_memory(ts))
                continue
            elif ts.state != "released":
                self.transitions({ts: "released"}, stimulus_id, out)
                if _state(ts) != "released":
                    continue  # wanted by others, so it runs again instead
            ts.who_wants = grown(ts.who_wants, cs)
            cs.wants_what.add(ts)
            out.scattered = (holders, nbytes.get(key, 0), types.get(key))
            self.transitions({ts: "memory"}, stimulus_id, out)
        return out

    def add_keys(self, address: str, keys: Sequence[Key]) -> Out:
        """A worker says it holds ``keys`` (after fetching them, say)."""
        out = Out()
        ws = self.workers.get(address)
        if ws is None:
            return out
        for key in keys:
            ts = self.tasks.get(key)
            if ts is not None and ts.state == "memory":
                if ws not in ts.who_has:
                    ts.who_has = grown(ts.who_has, ws)
                    ws.has_what[ts] = None
                    ws.nbytes += max(ts.nbytes, 0)
            else:
                out.free[address].append(key)
        return out

    def drop_replicas(self, address: str, keys: Sequence[Key]) -> Out:
        """Forget ``address``'s copies of ``keys`` and have it free them; a key's last copy is never dropped.

        The key stays in memory on its other holders, so no task changes state.
        A copy that a task processing on ``address`` needs as input is kept.
        """
        out = Out()
        ws = self.workers.get(address)
        if ws is None:
            return out
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None or ts.state != "memory" or ws not in ts.who_has or len(ts.who_has) < 2:
                continue
            if self.needed_on(ts, ws) or (ts.actor and ts in ws.actors):
                continue  # an actor's instance lives on its home worker: that copy stays
            ts.who_has = without(ts.who_has, ws)
            del ws.has_what[ts]
            ws.nbytes -= max(ts.nbytes, 0)
            out.free[address].append(key)
        return out

    @staticmethod
    def needed_on(ts: TaskState, ws: WorkerState) -> bool:
        """Whether a task processing on ``ws`` takes ``ts`` as input."""
        return any(dts.processing_on is ws for dts in ts.dependents)

    def release_worker_data(self, address: str, keys: Sequence[Key], stimulus_id: str) -> Out:
        """A worker dropped its copies of ``keys``."""
        ws = self.workers.get(address)
        recs: dict[TaskState, TaskStateName] = {}
        if ws is None:
            return Out()
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None or ws not in ts.who_has:
                continue
            ts.who_has = without(ts.who_has, ws)
            del ws.has_what[ts]
            ws.nbytes -= max(ts.nbytes, 0)
            if not ts.who_has:
                recs[ts] = "released"
        return self.transitions(recs, stimulus_id)

    def missing_data(self, address: str, msg: m.MissingData, stimulus_id: str) -> Out:
        """A worker could not fetch dependencies of ``msg["key"]`` from where we said they were."""
        recs: dict[TaskState, TaskStateName] = {}
        missing = msg["missing"]
        ts = self.tasks.get(msg["key"])
        if ts is not None and self._runs_on(ts, address, msg["run_id"]):
            # First in, so popped last: the lost dependencies are released
            # before ``ts`` looks for a worker again.
            recs[ts] = "released"
        for dep_key, addrs in missing.items():
            dts = self.tasks.get(dep_key)
            if dts is None:
                continue
            for addr in addrs:
                holder = self.workers.get(addr)
                if holder is not None and holder in dts.who_has:
                    dts.who_has = without(dts.who_has, holder)
                    holder.has_what.pop(dts, None)
                    holder.nbytes -= max(dts.nbytes, 0)
            if not dts.who_has and dts.state == "memory":
                recs[dts] = "released"
        return self.transitions(recs, stimulus_id)

    def reschedule(self, address: str, msg: m.Reschedule, stimulus_id: str) -> Out:
        """A task asked to be run again, maybe elsewhere."""
        ts = self.tasks.get(msg["key"])
        if ts is None or not self._runs_on(ts, address, msg["run_id"]):
            return Out()
        return self.transitions({ts: "released"}, stimulus_id)

    def long_running(self, address: str, msg: m.LongRunning, stimulus_id: str) -> Out:
        """A task seceded from its worker's thread pool: its slot is free."""
        out = Out()
        ws = self.workers.get(address)
        ts = self.tasks.get(msg["key"])
        if ws is None or ts is None or ts.processing_on is not ws or ts.run_id != msg["run_id"]:
            return out
        ws.long_running.add(ts)
        # It no longer occupies a thread: take its expected time off the worker's load
        # (kept at zero until it finishes, so that leaving processing takes nothing more off).
        duration = ws.processing.get(ts, 0.0)
        if duration:
            ws.processing[ts] = 0.0
            ws.occupancy = max(ws.occupancy - duration, 0.0)
        out.opened.append(ws)
        return self.transitions({}, stimulus_id, out)

    def retry(self, keys: Sequence[Key], stimulus_id: str) -> tuple[list[Key], Out]:
        """Rerun erred ``keys``: release the tasks whose own failure they inherit.

        Returns those tasks' keys and what to send.
        """
        roots: set[TaskState] = set()
        stack = [self.tasks[k] for k in keys if k in self.tasks]
        while stack:
            ts = stack.pop()
            if ts.state != "erred":
                continue
            blame = ts.exception_blame
            if blame is ts or blame is None:
                roots.add(ts)
            else:
                stack.append(blame)
        out = self.transitions({ts: "released" for ts in roots}, stimulus_id)
        for ts in list(self.tasks.values()):
            if ts.state == "released" and (ts.who_wants or ts.waiters):
                out.recs[ts] = "waiting"
        return [ts.key for ts in roots], self.transitions({}, stimulus_id, out)

    def _runs_on(self, ts: TaskState, address: str, run_id: int) -> bool:
        ws = ts.processing_on
        return ts.state == "processing" and ws is not None and ws.address == address and ts.run_id == run_id

    # ======================================================================
    # Validation
    # ======================================================================
    def validate_task(self, ts: TaskState) -> None:
        """Check the invariants of one task (raises AssertionError)."""
        state = ts.state
        assert state in ALL_TASK_STATES, (ts, state)
        if state == "forgotten":
            assert ts.key not in self.tasks or self.tasks[ts.key] is not ts, ts
            return
        assert self.tasks.get(ts.key) is ts, ("task not in scheduler.tasks", ts)
        for dts in ts.dependencies:
            assert ts in dts.dependents, ("dependency link", ts, dts)
        for dts in ts.dependents:
            assert ts in dts.dependencies, ("dependent link", ts, dts)
        for cs in ts.who_wants:
            assert ts in cs.wants_what, ("who_wants link", ts, cs)
        if state == "memory":
            assert ts.who_has, ("memory without who_has", ts)
            for ws in ts.who_has:
                assert ts in ws.has_what, ("who_has link", ts, ws)
        else:
            assert not ts.who_has, ("who_has outside memory", ts, ts.who_has)
        if state == "processing":
            proc = ts.processing_on
            assert proc is not None and ts in proc.processing, ("processing link", ts)
            assert proc.address in self.workers, ("processing on a removed worker", ts)
            for dts in ts.dependencies:
                assert dts.state == "memory", ("processing with a dependency not in memory", ts, dts)
        else:
            assert ts.processing_on is None, ("processing_on outside processing", ts)
        if state == "waiting":
            assert ts.waiting_on, ("waiting on nothing", ts)
            for dts in ts.waiting_on:
                assert dts.state != "memory", ("waiting on a task in memory", ts, dts)
                assert ts in dts.waiters, ("waiters link", ts, dts)
        if state == "no-worker":
            assert ts in self.unrunnable, ("no-worker not in unrunnable", ts)
        if state == "erred":
            assert ts.exception_blame is not None, ("erred without blame", ts)
        if ts.actor and state == "memory":
            # Other holders keep copies of the proxy; the instance lives on one of them.
            homes = [ws for ws in ts.who_has if ts in ws.actors]
            assert len(homes) == 1, ("an actor must live on one of its holders", ts, ts.who_has)

    def validate_state(self) -> None:
        """Check every invariant of the whole state (raises AssertionError)."""
        for ts in self.tasks.values():
            self.validate_task(ts)
        for ws in self.workers.values():
            for ts in ws.has_what:
                assert ws in ts.who_has, ("has_what link", ws, ts)
            for ts in ws.processing:
                assert ts.processing_on is ws, ("processing link", ws, ts)
        for cs in self.clients.values():
            for ts in cs.wants_what:
                assert cs in ts.who_wants, ("wants_what link", cs, ts)
        assert self.total_nthreads == sum(ws.nthreads for ws in self.workers.values())
        assert self.n_queued == sum(1 for ts in self.tasks.values() if ts.state == "queued"), "queued count"
        assert self.unrunnable == {ts for ts in self.tasks.values() if ts.state == "no-worker"}, "unrunnable set"
        limits = [ws.memory_limit for ws in self.workers.values()]
        assert self._input_cap == (0 if not limits or 0 in limits else max(limits)), "input cap"
        ff = self._fire_and_forget
        if ff is not None:
            for ts in ff.wants_what:
                assert ts.state not in ("memory", "erred"), ("fire_and_forget still wants a task done", ts)


#: ``key_split`` of key heads (see :func:`_key_name`); cleared when it reaches ``_KEY_NAMES_MAX``.
_key_names: dict[str, str] = {}
_KEY_NAMES_MAX = 4096


def _key_name(key: str) -> str:
    """``key_split(key)``, looked up by the key without its last ``-`` word when that word is not alphabetic.

    ``key_split`` keeps leading words up to the first one that is not
    alphabetic, so such a last word never changes its result; the keys of one
    ``map`` (``"f-<token>-<i>"``) or of pure calls (``"f-<hash>"``) then share
    one entry, where ``key_split``'s own cache holds one per key and misses
    once a graph has more keys than it holds.
    """
    head, sep, tail = key.rpartition("-")
    if not sep or tail.isalpha():
        return key_split_uncached(key)
    name = _key_names.get(head)
    if name is None:
        if len(_key_names) >= _KEY_NAMES_MAX:
            _key_names.clear()
        name = _key_names[head] = key_split_uncached(head)
    return name


def _priority_key(ts: TaskState) -> tuple[Any, ...]:
    return ts.priority


def _state(ts: TaskState) -> TaskStateName:
    # Read after a transition: a plain ``ts.state`` would keep the narrowed type from before it.
    return ts.state


def _check_worker_fields(address: object, nthreads: object, name: object, memory_limit: object) -> None:
    """Refuse a worker registration whose fields could not describe a real worker."""
    validate_address(address)
    if isinstance(nthreads, bool) or not isinstance(nthreads, int) or nthreads < 1:
        raise ValueError(f"A worker needs nthreads >= 1, got {nthreads!r}")
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 0:
        raise ValueError(f"A worker's memory_limit must be a byte count >= 0 (0: no limit), got {memory_limit!r}")
    try:
        hash(name)
    except TypeError:
        raise ValueError(
            f"A worker's name must be hashable (a string or a number), got {type(name).__name__}"
        ) from None


def _nan_in_key(key: object) -> bool:
    """Whether ``key`` is or holds a NaN: a key that never equals itself cannot be looked up."""
    if isinstance(key, float):
        return key != key
    if isinstance(key, tuple):
        return any(_nan_in_key(k) for k in key)
    return False


def _slices(tasks: Mapping[Key, m.TaskSpec], keys: Sequence[Key], size: int) -> tuple[list[list[Key]], bool] | None:
    """How :meth:`Scheduler.update_graph_slices` cuts a graph: the wanted keys of each slice.

    Also whether some task is not wanted.  None when the graph is one slice
    or a task comes before a dependency of the graph (a slice could not find it).
    """
    if len(tasks) <= size:
        return None
    wanted = set(keys)
    slice_keys: list[list[Key]] = []
    seen: set[Key] = set()
    unwanted = False
    current: list[Key] = []
    for i, (key, spec) in enumerate(tasks.items()):
        if i and i % size == 0:
            slice_keys.append(current)
            current = []
        for dep in spec["dependencies"]:
            if dep in tasks and dep not in seen:
                return None
        seen.add(key)
        if key in wanted:
            current.append(key)
        else:
            unwanted = True
    # Wanted keys that are not tasks of the graph come with the last slice.
    current.extend(k for k in keys if k not in tasks)
    slice_keys.append(current)
    return slice_keys, unwanted


def _graph_problem(tasks: Mapping[Key, m.TaskSpec], keys: Sequence[Key], known: Mapping[Key, Any]) -> str | None:
    """Why the new tasks of a graph cannot run (a NaN key, a cycle), or None.

    Only tasks not ``known`` count: a known key keeps the dependencies it has.
    """
    for key in keys:
        if type(key) is not str and _nan_in_key(key):
            return f"key {key!r} is NaN or holds a NaN"
    # Depth-first search for a cycle among the new tasks; 1: on the current path, 2: done.
    mark: dict[Key, int] = {}
    for root in tasks:
        if root in mark or root in known:
            continue
        if type(root) is not str and _nan_in_key(root):
            return f"key {root!r} is NaN or holds a NaN"
        mark[root] = 1
        path: list[Key] = [root]
        stack = [iter(tasks[root]["dependencies"])]
        while stack:
            for dep in stack[-1]:
                if dep == path[-1] or dep not in tasks or dep in known:
                    continue
                seen = mark.get(dep)
                if seen is None:
                    if type(dep) is not str and _nan_in_key(dep):
                        return f"key {dep!r} is NaN or holds a NaN"
                    mark[dep] = 1
                    path.append(dep)
                    stack.append(iter(tasks[dep]["dependencies"]))
                    break
                if seen == 1:
                    cycle = [*path[path.index(dep) :], dep]
                    return "cycle between the keys " + " -> ".join(map(repr, cycle))
            else:
                mark[path.pop()] = 2
                stack.pop()
    return None
