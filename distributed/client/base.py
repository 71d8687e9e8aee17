"""What every Client is: a connection to a scheduler that runs work and brings back results.

:class:`ClientBase` holds the client's parts (see :mod:`distributed.client.client`
for the whole picture) and the calls that submit, compute, gather, scatter,
cancel and retry; :class:`~distributed.client.client.Client` adds the
operations on the cluster itself.  A synchronous client runs its own event
loop in a background thread and waits on it through
:func:`distributed.utils.sync`; an asynchronous one (``asynchronous=True``)
runs on the caller's loop.  Most methods are written once with
:class:`~distributed.client.dual.dual_method`; the few whose two forms differ
in more than the awaitable (``compute``, ``persist``, ``get``, ``gather``,
``close``, ``shutdown``, and ``run`` and the constructor in the subclass)
state their shapes with ``@overload``.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Collection, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeAlias, TypeVar, cast, overload

import dask
import dask.config
from dask.core import validate_key
from dask.typing import NoDefault, no_default
from dask.utils import format_bytes, parse_timedelta
from tornado.ioloop import IOLoop

from distributed.batched import BatchedSend
from distributed.client.defaults import (
    AsCurrent,
    ClientContext,
    current_client,
)
from distributed.client.dual import Work, dual_method
from distributed.client.future import Future, FutureState, collect_futures
from distributed.client.graph_parts import GraphPlan
from distributed.client.graphs import (
    TaskOptions,
    actor_keys,
    expr_plan,
    for_compute,
    for_persist,
    graph_chunk_size,
    graph_plan,
    keys_of,
    make_task,
    map_keys,
    map_plan,
    pack_keys,
    submit_key,
    task_annotations,
)
from distributed.client.link import SchedulerLink, SchedulerRequest
from distributed.client.outbox import Outbox
from distributed.client.registry import FutureRegistry
from distributed.client.reprs import client_view
from distributed.client.topics import TopicSubscriptions
from distributed.client.transfer import DataTransfer
from distributed.comm import get_address_host, parse_address
from distributed.config import get_interval
from distributed.config_refusals import refuse_unhonoured_config
from distributed.core import ConnectionPool, RemoteRequests
from distributed.dask_api import (
    graph_expr,
    is_low_level_expr,
)
from distributed.event_loop import check_event_loop
from distributed.preloading import PreloadManager, process_preloads
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import families
from distributed.security import Security, coerce_security
from distributed.task_context import current_worker, secede
from distributed.utils import LoopRunner, format_dashboard_link, import_term, io_loop_of, sync, wait_for

if TYPE_CHECKING:
    from distributed.client.client import Client

logger = logging.getLogger(__name__)

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "ClientBase",
    "ProfileResult",
    "SchedulerHandle",
    "TaskStreamResult",
    "refuse_unsupported",
]

T = TypeVar("T")


class DaskCollection(Protocol):
    """What mypy can check of a dask collection (``dask.typing.DaskCollection`` does not match dask's own)."""

    def __dask_graph__(self) -> Any: ...

    def __dask_keys__(self) -> Any: ...


CollectionT = TypeVar("CollectionT", bound=DaskCollection)

if TYPE_CHECKING:
    from bokeh.plotting import figure
    from typing_extensions import TypeVar as TypeVarWithDefault

    #: Whether a client is asynchronous, when known statically: ``Client()``
    #: is a ``Client[Literal[False]]``, ``Client(asynchronous=True)`` a
    #: ``Client[Literal[True]]``; a plain ``Client`` annotation leaves it open.
    AsyncT = TypeVarWithDefault("AsyncT", bound=bool, default=bool, covariant=True)
else:
    AsyncT = TypeVar("AsyncT", bound=bool, covariant=True)

#: What ``Client.get_task_stream`` returns: the records, and with ``plot`` a bokeh figure of them.
TaskStreamResult: TypeAlias = "list[dict[str, Any]] | tuple[list[dict[str, Any]], figure]"

#: What ``Client.profile`` returns: the profile tree (trees by worker without ``merge_workers``),
#: and with ``plot`` a bokeh figure of it.
ProfileResult: TypeAlias = "dict[str, Any] | tuple[dict[str, Any], figure]"

FIRST_COMPLETED: Literal["FIRST_COMPLETED"] = "FIRST_COMPLETED"
ALL_COMPLETED: Literal["ALL_COMPLETED"] = "ALL_COMPLETED"

#: Closes of clients that were garbage collected, kept alive until they finish.
_abandoned: set[asyncio.Task[None]] = set()


class ClientBase(Generic[AsyncT]):
    """The connection, life cycle and computations of a :class:`~distributed.Client` (see the module docstring)."""

    _instances: weakref.WeakSet[ClientBase] = weakref.WeakSet()

    def __init__(
        self,
        address: Any = None,
        loop: Any = None,
        timeout: float | str | NoDefault | None = no_default,
        set_as_default: bool = True,
        scheduler_file: str | None = None,
        security: Security | dict[str, Any] | bool | None = None,
        asynchronous: bool = False,
        name: str | None = None,
        heartbeat_interval: Any = None,
        serializers: Sequence[str] | None = None,
        deserializers: Sequence[str] | None = None,
        extensions: Any = None,
        direct_to_workers: bool | None = None,
        connection_limit: int = 512,
        _in_worker: bool = False,
        **kwargs: Any,
    ) -> None:
        refuse_unhonoured_config("client")
        if extensions is not None and not isinstance(extensions, Mapping):
            raise TypeError(f"Client(extensions=) takes a mapping of names to factories, got {extensions!r}")
        # As in dask, deserializers default to the serializers: what the client sends, it takes back.
        families_chosen = (
            _family_names(serializers, "serializers"),
            _family_names(serializers if deserializers is None else deserializers, "deserializers"),
        )
        if kwargs and (address is not None or scheduler_file is not None):
            # They configure the LocalCluster started when no address is given.
            raise TypeError(f"Client() got unexpected keyword arguments {sorted(kwargs)} (an address was given)")
        if timeout is no_default or timeout is None:
            timeout_value: Any = dask.config.get("distributed.comm.timeouts.connect")
        else:
            timeout_value = timeout
        self._timeout = float(parse_timedelta(timeout_value) or 30)
        # As in dask, a name shows in the id: the scheduler's logs and dashboard tell clients apart by it.
        self.id = f"{type(self).__name__}-{name}-{uuid.uuid4()}" if name else f"{type(self).__name__}-{uuid.uuid4()}"
        self.name = name
        self.asynchronous = asynchronous
        self._in_worker = _in_worker
        #: The preloads of ``distributed.client.preload``, imported now; set up once connected, torn down at close.
        self.preloads: PreloadManager = process_preloads(
            self,
            None,
            None,
            config_preload="distributed.client.preload",
            config_argv="distributed.client.preload-argv",
        )
        self.cluster: Any = None
        self._own_cluster = False
        self._cluster_kwargs = kwargs
        #: This client's place among the process's clients (default, current).
        self.context = ClientContext(self._whole())
        #: A scheduler file not written yet: waited for (up to ``timeout``) at start.
        self._scheduler_file: str | None = None
        if scheduler_file is not None:
            address = _read_scheduler_file(scheduler_file)
            if address is None:
                self._scheduler_file = scheduler_file
        if address is not None and not isinstance(address, str):
            # A cluster object.
            self.cluster = address
            address = getattr(self.cluster, "scheduler_address", None)
            # The cluster's asyncio loop: ours names it ``event_loop``; dask's clusters hand out a tornado IOLoop.
            cluster_loop = getattr(self.cluster, "event_loop", None)
            if cluster_loop is None:
                cluster_loop = getattr(getattr(self.cluster, "loop", None), "asyncio_loop", None)
            if (
                loop is None
                and not asynchronous
                and not getattr(self.cluster, "asynchronous", False)
                and isinstance(cluster_loop, asyncio.AbstractEventLoop)
                and cluster_loop.is_running()
            ):
                # Run on the cluster's loop: the client, the scheduler and
                # in-process workers then talk without a thread hop per message.
                loop = cluster_loop
        elif address is None:
            from_config = dask.config.get("scheduler-address", None)
            address = from_config
        if security is None and self.cluster is not None:
            security = getattr(self.cluster, "security", None)
        if security is None and isinstance(address, str):
            security = _security_from_loader(address)
        # True: temporary credentials for the cluster this client starts (none other would accept them).
        starts_cluster = address is None and scheduler_file is None and self.cluster is None
        self.security = coerce_security(security, "Client", temporary_ok=starts_cluster)
        if starts_cluster and security not in (None, False):
            self._cluster_kwargs = {**kwargs, "security": self.security}
        self.scheduler_address: str | None = address
        #: Stream messages and key releases, in the order they were made.
        self.outbox = Outbox(self.id, graph_chunk_size())
        #: The futures of this client and their reference counts.
        self.registry = FutureRegistry(self._whole(), self.outbox, self._kick_outbox)
        self.pool = ConnectionPool(limit=connection_limit, connection_args=self.security.get_connection_args("client"))
        #: The connection to the scheduler: the stream both ways, and requests.
        self.link = SchedulerLink(
            self.id, self.outbox, self.registry, self.pool, self._timeout, lambda: self.event_loop
        )
        self.link.address = address
        if heartbeat_interval is not None:
            # As in dask, a bare number is milliseconds.
            self.link.heartbeat_interval = float(parse_timedelta(heartbeat_interval, default="ms") or 0)
        #: Gathers results from workers, scatters data to them.
        if direct_to_workers is None:
            direct_to_workers = dask.config.get("distributed.client.direct-to-workers")
        #: Whether results and scattered data move straight between this client and the workers (else the
        #: scheduler relays them: for a client that cannot reach the workers' addresses).
        self.direct_to_workers = direct_to_workers is not False
        self.transfer = DataTransfer(
            self.registry, self.link, self.pool, self._timeout, *families_chosen, direct=self.direct_to_workers
        )
        #: The topics this client subscribed to, and their event handlers.
        self.topics = TopicSubscriptions(self.id, self.link.post)
        self.link.add_route("event", self.topics.route())
        self.link.on_reconnect(self._after_reconnect)
        #: The scheduler file this client was given or wrote (``write_scheduler_file``).
        self.scheduler_file: str | None = scheduler_file
        if asynchronous and loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
        self._loop_runner = LoopRunner(loop=loop)
        #: The asyncio event loop the client runs on (``loop`` is the tornado IOLoop over it, as in dask).
        self.event_loop: asyncio.AbstractEventLoop = self._loop_runner.loop
        self._io_loop: IOLoop | None = None
        self._started: asyncio.Future[Any] | None = None
        #: The scheduler's identity as last seen (refreshed every ``distributed.client.scheduler-info-interval``
        #: without its workers, and whole by ``scheduler_info()``): what ``repr`` shows, without a round trip.
        self._scheduler_identity: dict[str, Any] = {}
        self._info_refresh: asyncio.Future[None] | None = None
        #: Parts of the client made with it, as in dask: ``{name: factory(client)}`` of ``extensions=``.
        self.extensions: dict[str, Any] = {}
        for name, factory in (extensions or {}).items():
            self.extensions[name] = factory(self)
        ClientBase._instances.add(self)
        #: Whether the client is a default one; only then does its ``with`` block make it current.
        self.set_as_default = set_as_default
        if set_as_default:
            self.context.make_default()
        if not asynchronous and self._in_loop_thread():
            # Made on its own running loop (a worker's client asked for by a coroutine task):
            # it cannot block there, so it connects in the background; what it is asked to
            # send meanwhile waits in its outbox.
            self.status = "connecting"
            self._started = asyncio.ensure_future(self._start())
        elif not asynchronous:
            self._loop_runner.start()
            try:
                self.sync(self._start)
            except BaseException:
                self._cleanup_after_failed_start()
                raise
        else:
            try:
                self.event_loop = asyncio.get_running_loop()
                self._loop_runner = LoopRunner(loop=self.event_loop)
            except RuntimeError:
                pass

    def _whole(self) -> Client[bool]:
        """This client as the :class:`~distributed.Client` it always is (this class is only its first part)."""
        return cast("Client[bool]", self)

    # -- life cycle -------------------------------------------------------------------
    def _cleanup_after_failed_start(self) -> None:
        self.status = "closed"
        self.context.leave()
        self._loop_runner.stop()

    def __await__(self) -> Generator[Any, None, Self]:
        return self._start_once().__await__()

    async def _start_once(self) -> Self:
        if self.status == "running":
            return self
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)
        return self

    async def _start(self) -> Self:
        check_event_loop("Client")
        self.event_loop = asyncio.get_running_loop()
        self._io_loop = IOLoop.current()
        self.link.status = "connecting"
        if self._scheduler_file is not None:
            self.scheduler_address = self.link.address = await _wait_for_scheduler_file(
                self._scheduler_file, self._timeout
            )
            self._scheduler_file = None
        if self.scheduler_address is None and self.cluster is None:
            from distributed.deploy.local import LocalCluster

            # As in dask.distributed, the cluster serves its dashboard (":8787",
            # or a free port when that one is taken) unless told otherwise.
            self.cluster = await LocalCluster(asynchronous=True, **self._cluster_kwargs)
            self._own_cluster = True
            self.scheduler_address = self.cluster.scheduler_address
        elif self.cluster is not None and self.scheduler_address is None:
            if getattr(self.cluster, "asynchronous", False):
                await self.cluster
            self.scheduler_address = self.cluster.scheduler_address
        assert self.scheduler_address is not None
        await self.link.connect(self.scheduler_address)
        self._scheduler_identity = self.link.identity
        interval = get_interval("distributed.client.scheduler-info-interval", 2.0)
        if interval > 0:
            self._info_refresh = asyncio.ensure_future(self._refresh_scheduler_info(interval))
        self.topics.subscribe_defaults()
        await self.preloads.start()
        return self

    @property
    def futures(self) -> dict[Key, FutureState]:
        """The state of each key this client holds futures of."""
        return self.registry.states

    @property
    def refcount(self) -> dict[Key, int]:
        """Live futures per key."""
        return self.registry.counts

    @property
    def status(self) -> str:
        """newly-created, connecting, running, closing or closed: the state of the connection to the scheduler.

        "connecting" again while the client reconnects after its connection
        was lost; "closed" when no scheduler answered within its ``timeout``.
        """
        return self.link.status

    @status.setter
    def status(self, value: str) -> None:
        self.link.status = value

    @property
    def scheduler_comm(self) -> BatchedSend | None:
        """The stream to the scheduler, once connected."""
        return self.link.stream

    def _in_loop_thread(self) -> bool:
        return self.registry.on_loop()

    def sync(
        self,
        func: Callable[..., Awaitable[T]],
        *args: Any,
        asynchronous: bool | None = None,
        callback_timeout: Any = None,
        **kwargs: Any,
    ) -> T | Awaitable[T]:
        """Run ``func`` on the client's loop: await it, or return an awaitable when asynchronous."""
        asynchronous = self.asynchronous if asynchronous is None else asynchronous
        if asynchronous or self._in_loop_thread():
            coro = func(*args, **kwargs)
            if callback_timeout is not None:
                return wait_for(coro, parse_timedelta(callback_timeout))
            return coro
        return sync(self.event_loop, func, *args, callback_timeout=callback_timeout, **kwargs)

    async def _update_scheduler_identity(self) -> None:
        """Refresh :attr:`_scheduler_identity` (the workers' count, threads and memory), never raising."""
        try:
            self._scheduler_identity = await self.link.request(m.IdentityRequest(op="identity", n_workers=0))
        except Exception:
            logger.debug("Could not refresh the scheduler's identity", exc_info=True)

    async def _refresh_scheduler_info(self, interval: float) -> None:
        """Call :meth:`_update_scheduler_identity` every ``interval`` while connected (and across reconnections)."""
        while True:
            await asyncio.sleep(interval)
            status = self.link.status
            if status in ("closing", "closed"):
                return
            if status == "running":
                await self._update_scheduler_identity()

    def _after_reconnect(self) -> None:
        """The stream to the scheduler runs again after it was lost (on the loop, before the outbox drains).

        The scheduler forgets a client's topics when an event finds its stream
        gone, and a new scheduler never had them: subscribe again (the
        scheduler keeps a set of subscribers, so twice is once).
        """
        self._scheduler_identity = self.link.identity
        for topic in self.topics.handlers:
            self.link.post(m.TopicSubscription(op="subscribe-topic", topic=topic, client=self.id))

    async def _close(self, fast: bool = False) -> None:
        refresh, self._info_refresh = self._info_refresh, None
        if refresh is not None:
            refresh.cancel()
            await asyncio.wait([refresh])  # ended, not merely told to: nothing of ours outlives close()
        if self.status == "closed" and not self.link.connected:
            return
        await self.preloads.teardown()
        await self.link.close()
        await self.pool.close()
        for fs in self.futures.values():
            if not fs.done():
                fs.cancel("client-closed")
        if self._own_cluster and self.cluster is not None:
            await self.cluster.close()
        self.status = "closed"
        self.context.leave()

    @overload
    def close(
        self: ClientBase[Literal[False]], timeout: Any = no_default, *, asynchronous: Literal[False] | None = None
    ) -> None: ...

    @overload
    def close(
        self: ClientBase[Literal[True]], timeout: Any = no_default, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[None]: ...

    @overload
    def close(self, timeout: Any = no_default, *, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def close(self, timeout: Any = no_default, *, asynchronous: bool | None = None) -> Awaitable[None] | None: ...

    def close(self, timeout: Any = no_default, *, asynchronous: bool | None = None) -> Awaitable[None] | None:
        """Close the client (and the LocalCluster it started, if any)."""
        asynchronous = self.asynchronous if asynchronous is None else asynchronous
        t = None if timeout is no_default or timeout is None else parse_timedelta(timeout)
        # A client closed because its scheduler never came back still has its pool, preloads and
        # cluster to close down (the link is still ``connected``).
        if self.status == "closed" and not self.link.connected:
            if asynchronous:
                return _noop()
            self._loop_runner.stop()
            return None
        if asynchronous:
            return wait_for(self._close(), t)
        try:
            if (not self.event_loop.is_closed() and self._loop_runner.is_started) or self._loop_runner.thread is None:
                self.sync(self._close, callback_timeout=t)
        except TimeoutError:
            raise
        except Exception:
            logger.debug("Error while closing the client", exc_info=True)
        finally:
            self.status = "closed"
            self.context.leave()
            self._loop_runner.stop()
        return None

    @overload
    def shutdown(self: ClientBase[Literal[False]], *, asynchronous: Literal[False] | None = None) -> None: ...

    @overload
    def shutdown(self: ClientBase[Literal[True]], *, asynchronous: Literal[True] | None = None) -> Awaitable[None]: ...

    @overload
    def shutdown(self, *, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def shutdown(self, *, asynchronous: bool | None = None) -> Awaitable[None] | None: ...

    def shutdown(self, *, asynchronous: bool | None = None) -> Awaitable[None] | None:
        """Close the scheduler and workers (or the cluster object), then the client.

        With a cluster object (or the LocalCluster the client started), the
        cluster is closed; with only an address, the scheduler is told to
        terminate, which also closes its workers.
        """
        cluster = self.cluster
        if (
            not self.asynchronous
            and not asynchronous
            and cluster is not None
            and not self._own_cluster
            and not getattr(cluster, "asynchronous", False)
        ):
            # A synchronous cluster runs its own loop (which this client may
            # share): close the client, then the cluster from this thread.
            self.close()
            cluster.close()
            return None

        async def _shutdown() -> None:
            cluster = self.cluster
            if cluster is None:
                await self.link.request(m.Empty(op="terminate"))
                await self._close()
            elif self._own_cluster:
                await self._close()  # closes the cluster it started
            else:
                await self._close()
                if getattr(cluster, "asynchronous", False):
                    await cluster.close()
                else:
                    # A synchronous cluster object under an asynchronous client.
                    await asyncio.get_running_loop().run_in_executor(None, cluster.close)

        return self.sync(_shutdown, asynchronous=asynchronous)

    def __enter__(self) -> Self:
        if self.set_as_default:
            self.context.enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.context.exit()
        self.close()

    async def __aenter__(self) -> Self:
        await self._start_once()
        if self.set_as_default:
            self.context.enter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.context.exit()
        await self._close()

    def __del__(self) -> None:
        # A finaliser runs inside whatever the collector interrupted (maybe
        # this client's loop): it must not block or do I/O, so the loop closes.
        status = getattr(self, "status", "closed")
        link = getattr(self, "link", None)  # absent when __init__ failed early
        if status == "closing" or (status == "closed" and not (link is not None and link.connected)):
            return
        if self.asynchronous:
            return
        try:
            self.event_loop.call_soon_threadsafe(self._close_abandoned)
        except RuntimeError:  # the loop is closed
            pass

    def _close_abandoned(self) -> None:
        """On the loop: close a client nobody holds any more, then stop its own loop."""

        def done(task: asyncio.Task[None]) -> None:
            _abandoned.discard(task)
            self.status = "closed"
            self.context.leave()
            self._loop_runner.stop()

        task = asyncio.ensure_future(self._close())
        _abandoned.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(done)

    def __repr__(self) -> str:
        info = self._scheduler_identity
        if self.status == "running" and "n_workers" in info:
            memory = format_bytes(int(info.get("total_memory") or 0))
            return (
                f"<Client: {self.scheduler_address!r} processes={info['n_workers']} "
                f"threads={info.get('total_threads', 0)}, memory={memory}>"
            )
        return f"<Client: {self.scheduler_address!r} status={self.status}>"

    def _repr_html_(self) -> str:
        cluster_view = getattr(self.cluster, "_repr_html_", None)
        return client_view(self._whole(), self._scheduler_identity, cluster_view if callable(cluster_view) else None)

    @classmethod
    def current(cls, allow_global: bool = True) -> Client:
        """The current client of this context; with ``allow_global``, else the default one.

        Raises
        ------
        ValueError
            When there is none.
        """
        return current_client(allow_global)

    def as_current(self) -> AsCurrent:
        """A context manager making this the current client (and dask's scheduler) inside it."""
        return AsCurrent(self._whole())

    @property
    def loop(self) -> IOLoop:
        """The tornado ``IOLoop`` the client runs on, as dask's ``Client.loop`` (``add_callback``, ``run_sync``).

        The asyncio loop behind it is :attr:`event_loop` (also ``loop.asyncio_loop``).
        """
        # Tornado's IOLoops over asyncio have ``asyncio_loop``; its base class does not declare it.
        if self._io_loop is None or getattr(self._io_loop, "asyncio_loop", None) is not self.event_loop:
            self._io_loop = io_loop_of(self.event_loop)
        return self._io_loop

    @property
    def io_loop(self) -> IOLoop:
        """The same as :attr:`loop` (dask has both names)."""
        return self.loop

    @property
    def scheduler(self) -> SchedulerHandle:
        """A handle on the scheduler: its address, and a way to send it a declared request."""
        return SchedulerHandle(self._whole())

    @property
    def dashboard_link(self) -> str | None:
        """Link to the scheduler's dashboard, or None when it serves none.

        Formatted with the ``distributed.dashboard.link`` template (``scheme``,
        ``host``, ``port`` and environment variables), the host being the
        scheduler's (``127.0.0.1`` for an in-process scheduler).
        """
        link = getattr(self.cluster, "dashboard_link", None) if self.cluster is not None else None
        if isinstance(link, str) and link:
            return link
        port = self.link.services.get("dashboard")
        if not port or not self.scheduler_address:
            return None
        scheme = parse_address(self.scheduler_address)[0]
        host = get_address_host(self.scheduler_address) if scheme != "inproc" else ""
        return format_dashboard_link(host or "127.0.0.1", port)

    # -- submitting work ------------------------------------------------------------------
    def _kick_outbox(self) -> None:
        """Have the loop send what the outbox holds; takes no lock (the registry calls it from finalisers)."""
        self.link.kick()

    def _send_plan(self, plan: GraphPlan, keys: list[Key]) -> list[Future]:
        """Make futures for ``keys``, then send the graph of ``plan`` (see :meth:`SchedulerLink.post_plan`).

        Futures come first, so that no report from the scheduler can arrive
        before they exist.
        """
        if self.status not in ("running", "connecting"):
            raise RuntimeError(f"Client is not running (status: {self.status})")
        head = plan.chunks[0]
        if len(plan) > 1 and plan.all_wanted and keys[: len(head)] == head:
            # A large map: the first part goes out once its own futures exist, and the
            # scheduler starts on it while the rest are made (before the later parts go).
            futures = self.registry.make_futures(head)
            self.link.post_plan(plan, before_rest=lambda: futures.extend(self.registry.make_futures(keys[len(head) :])))
            return futures
        futures = self.registry.make_futures(keys)
        self.link.post_plan(plan)
        return futures

    def submit(
        self,
        func: Callable[..., Any],
        *args: Any,
        key: Key | None = None,
        workers: Any = None,
        resources: dict[str, float] | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "100 ms",
        allow_other_workers: bool = False,
        actor: bool = False,
        actors: bool = False,
        pure: bool = True,
        **kwargs: Any,
    ) -> Future:
        """Run ``func(*args, **kwargs)`` on the cluster; return a :class:`Future`.

        ``key``, ``workers``, ``resources``, ``retries``, ``priority``,
        ``allow_other_workers`` and ``pure`` work as in dask.distributed.
        ``fifo_timeout`` is accepted as the hint it is there and has no effect
        (tasks of one call are ordered by submission anyway).  With
        ``actor=True`` (or ``actors=True``), ``func`` is usually a class: its
        instance stays on the worker that made it, and the future's result is
        an :class:`~distributed.Actor` proxy whose method calls run there.

        Examples
        --------
        >>> c.submit(add, 1, 2)  # doctest: +SKIP
        <Future: pending, key: add-ebf39f96ad7174656f97097d658f3fa2>
        """
        if not callable(func):
            raise TypeError("First input to submit must be a callable function")
        if key is None:
            key = submit_key(func, args, kwargs, pure)
        else:
            validate_key(key)
        if self.registry.is_live(key):
            return Future(key, self._whole())
        plan = graph_plan(
            self.id,
            {key: make_task(key, func, args, kwargs)},
            [key],
            priorities={key: 0},
            global_annotations=task_annotations(workers, resources, retries, allow_other_workers),
            user_priority=priority,
            actors=actor or actors,
        )
        return self._send_plan(plan, [key])[0]

    def map(
        self,
        func: Callable[..., Any],
        *iterables: Collection[Any],
        key: str | list[Key] | None = None,
        workers: Any = None,
        retries: int | None = None,
        resources: dict[str, float] | None = None,
        priority: int = 0,
        allow_other_workers: bool = False,
        fifo_timeout: Any = "100 ms",
        actor: bool = False,
        actors: bool = False,
        pure: bool = True,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> list[Future]:
        """Apply ``func`` to each element of the iterables; return a list of futures.

        Parameters as in :meth:`submit`; ``batch_size`` sets how many tasks go
        to the scheduler per message (default
        ``distributed.client.graph-chunk-size``).
        """
        if not callable(func):
            raise TypeError("First input to map must be a callable function")
        if all(isinstance(it, (Future,)) for it in iterables) and iterables:
            raise TypeError("map() needs iterables, not futures")
        seqs = [list(it) for it in iterables]
        if not seqs:
            return []
        keys = map_keys(func, seqs, kwargs, key, pure)
        plan = map_plan(
            self.id,
            func,
            keys,
            seqs,
            kwargs,
            batch_size=batch_size,
            global_annotations=task_annotations(workers, resources, retries, allow_other_workers),
            user_priority=priority,
            actors=actor or actors,
        )
        return self._send_plan(plan, keys)

    # -- collections ----------------------------------------------------------------------
    def _submit_expr(self, expr: Any, keys: list[Key], options: TaskOptions, cull: bool = False) -> list[Future]:
        """Submit an expression's graph; futures for ``keys``.

        Futures of keys held elsewhere (persisted collections, futures in
        graphs) stay alive until the scheduler has the new graph: their
        release would come after it on the same stream.
        """
        return self._send_plan(expr_plan(self.id, expr, keys, options, cull=cull), keys)

    @overload
    def compute(
        self,
        collections: CollectionT,
        sync: Literal[False] = False,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Future: ...

    @overload
    def compute(
        self,
        collections: list[CollectionT] | tuple[CollectionT, ...],
        sync: Literal[False] = False,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> list[Future]: ...

    @overload
    def compute(
        self: ClientBase[Literal[False]],
        collections: Any,
        sync: Literal[True],
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Any: ...

    @overload
    def compute(
        self: ClientBase[Literal[True]],
        collections: Any,
        sync: Literal[True],
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Awaitable[Any]: ...

    @overload
    def compute(
        self,
        collections: Any,
        sync: bool = False,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Any: ...

    def compute(
        self,
        collections: Any,
        sync: bool = False,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Start computing collections; return futures (or results with ``sync=True``).

        With ``traverse`` (the default), lists, tuples, sets, dicts and
        iterators among ``collections`` are searched for collections too: each
        becomes one future of the container with its collections computed.

        Returns
        -------
        A :class:`Future` for one collection, a list of them for a list, tuple or
        set (anything else in it is returned as it is).  With ``sync=True``, the
        results instead: an awaitable of them on an asynchronous client.
        """
        refuse_unsupported("Client.compute", **{k: True for k in kwargs})
        graph = for_compute(collections, optimize_graph, traverse)
        futures: list[Future] = []
        if graph.keys is not None:
            options = TaskOptions(workers, resources, retries, allow_other_workers, priority, actor_keys(actors))
            futures = self._submit_expr(graph.expr, graph.keys, options)
        out = graph.place(futures)
        if sync:
            # An awaitable of the values on an asynchronous client.
            return self.gather(out)
        return out

    @overload
    def persist(
        self,
        collections: list[T] | tuple[T, ...],
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> list[T]: ...

    @overload
    def persist(
        self,
        collections: T,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> T: ...

    def persist(
        self,
        collections: Any,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: Any = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Start computing collections; return them backed by futures.

        Returns
        -------
        The collection, or a list of them for a list or tuple, each of the same
        type as given (anything but a dask collection is returned as it is).
        Nothing waits: this returns at once on synchronous and asynchronous
        clients alike.
        """
        refuse_unsupported("Client.persist", **{k: True for k in kwargs})
        graph = for_persist(collections, optimize_graph)
        if graph.keys is None:
            return graph.place([])
        options = TaskOptions(workers, resources, retries, allow_other_workers, priority, actor_keys(actors))
        return graph.rebuild(self._submit_expr(graph.expr, graph.keys, options))

    @overload
    def get(
        self: ClientBase[Literal[False]],
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        sync: Literal[True] = True,
        asynchronous: Literal[False] | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any: ...

    @overload
    def get(
        self: ClientBase[Literal[True]],
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        sync: Literal[True] = True,
        asynchronous: Literal[True] | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Awaitable[Any]: ...

    @overload
    def get(
        self,
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        sync: Literal[True] = True,
        *,
        asynchronous: Literal[True],
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Awaitable[Any]: ...

    @overload
    def get(
        self,
        dsk: Any,
        keys: list[Any],
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        *,
        sync: Literal[False],
        asynchronous: bool | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> list[Any]: ...

    @overload
    def get(
        self,
        dsk: Any,
        keys: Key,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        *,
        sync: Literal[False],
        asynchronous: bool | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Future: ...

    @overload
    def get(
        self,
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        sync: bool = True,
        asynchronous: bool | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any: ...

    def get(
        self,
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: Any = None,
        sync: bool = True,
        asynchronous: bool | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: Any = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Compute a graph (an ``Expr`` or a dict) and return the values of ``keys``.

        Returns
        -------
        The value of ``keys`` (a key, or a nested list of keys giving the values
        in the same nesting): an awaitable of it on an asynchronous client.  With
        ``sync=False``, futures of the keys in that shape instead, at once.
        """
        refuse_unsupported("Client.get", **{k: True for k in kwargs if k not in FOR_OTHER_SCHEDULERS})
        expr = graph_expr(dsk)
        flat = list(keys_of(keys))
        for k in flat:
            validate_key(k)
        options = TaskOptions(workers, resources, retries, bool(allow_other_workers), priority, actor_keys(actors))
        futures = self._submit_expr(expr, flat, options, cull=is_low_level_expr(expr))
        by_key = dict(zip(flat, futures))
        packed = pack_keys(keys, by_key)
        if not sync:
            return packed
        asynchronous = self.asynchronous if asynchronous is None else asynchronous
        if asynchronous:
            return self.transfer.gather(packed, direct=direct)
        try:
            return self.gather(packed, direct=direct)
        finally:
            del futures, by_key, packed

    # -- gathering ------------------------------------------------------------------------------
    @overload
    def gather(
        self: ClientBase[Literal[False]],
        futures: Any,
        errors: str = "raise",
        direct: bool | None = None,
        asynchronous: Literal[False] | None = None,
    ) -> Any: ...

    @overload
    def gather(
        self: ClientBase[Literal[True]],
        futures: Any,
        errors: str = "raise",
        direct: bool | None = None,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[Any]: ...

    @overload
    def gather(
        self, futures: Any, errors: str = "raise", direct: bool | None = None, *, asynchronous: Literal[True]
    ) -> Awaitable[Any]: ...

    @overload
    def gather(
        self, futures: Any, errors: str = "raise", direct: bool | None = None, asynchronous: bool | None = None
    ) -> Any: ...

    def gather(
        self, futures: Any, errors: str = "raise", direct: bool | None = None, asynchronous: bool | None = None
    ) -> Any:
        """The results of futures, in the same structure (lists, dicts, ...).

        ``errors="raise"`` re-raises the first error; ``"skip"`` leaves erred
        futures out.  ``direct=False`` fetches through the scheduler (default:
        the client's ``direct_to_workers``).
        """
        if isinstance(futures, Iterator):
            return (self.gather(f, errors=errors, direct=direct) for f in futures)
        if current_worker() is not None and not self.asynchronous:
            secede()
        return self.sync(self.transfer.gather, futures, errors=errors, direct=direct, asynchronous=asynchronous)

    # -- scatter --------------------------------------------------------------------------------
    @dual_method
    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: Any = no_default,
    ) -> Work[Any]:
        """Move data to workers; return futures in the same structure.

        A list, tuple, set or frozenset (or a subclass, a namedtuple) gives the
        same container of futures, a dict a dict, an iterator or a ``range`` a
        list; anything else is one object and gives one future.  ``broadcast``
        sends each item to every worker (``True``) or to that many workers (an
        int); ``workers`` limits the targets (addresses, names or hosts).
        ``timeout`` bounds the wait for a worker to scatter to (default: the
        client's connect timeout).  ``direct=False`` sends the data through the
        scheduler (default: the client's ``direct_to_workers``).
        """
        return functools.partial(
            self.transfer.scatter,
            data,
            workers=workers,
            broadcast=broadcast,
            hash=hash,
            timeout=None if timeout is no_default else timeout,
            direct=direct,
        )

    # -- cancel, retry ------------------------------------------------------------------------
    async def _cancel(self, futures: Any, reason: str | None = None, force: bool = False) -> None:
        from distributed.client.waiting import futures_of

        # futures_of also finds the futures behind persisted collections.
        keys = list({f.key for f in futures_of(futures)})
        if not keys:
            return
        await self.link.stream_handled()
        await self.link.request(
            m.CancelKeys(
                op="cancel-keys", client=self.id, keys=keys, force=force, reason=reason or "cancelled by a client"
            )
        )
        for k in keys:
            fs = self.futures.get(k)
            if fs is not None and fs.status != "cancelled":
                # Finished ones too: this client no longer has their values.
                fs.cancel(reason)

    @dual_method
    def cancel(
        self, futures: Any, force: bool = False, reason: str | None = None, msg: str | None = None
    ) -> Work[None]:
        """Cancel the tasks of these futures (and what depends on them)."""
        return functools.partial(self._cancel, futures, reason=reason or msg, force=force)

    async def _retry(self, futures: Any) -> None:
        flat: list[Future] = []
        collect_futures(futures, flat)
        for f in flat:
            f.state.reset()
        await self.link.request(m.RetryKeys(op="retry", client=self.id, keys=[f.key for f in flat]))
        # Dependents erred by blame are reset too: ask for them again.
        self.link.post(m.ClientKeys(op="client-desires-keys", client=self.id, keys=[f.key for f in flat]))

    @dual_method
    def retry(self, futures: Any) -> Work[None]:
        """Rerun erred futures."""
        return functools.partial(self._retry, futures)


#: Keywords that libraries pass through ``dask.compute`` (or straight to a scheduler's ``get``) whichever
#: scheduler runs the graph, which mean nothing to this one (as in dask's): ``Client.get`` takes them and does
#: nothing with them, where any other unknown keyword is refused by name.  ``flush`` is what ``dask.array.store``
#: receives from xarray's ``to_netcdf``/``to_zarr``; ``num_workers`` is the threaded scheduler's pool size, which
#: dask-ml's searches pass to whatever scheduler they were given.
FOR_OTHER_SCHEDULERS: frozenset[str] = frozenset({"flush", "num_workers"})


class SchedulerHandle:
    """``client.scheduler``: the scheduler's address and a way to send it a request."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def address(self) -> str | None:
        """The scheduler's address (None before the client connects)."""
        return self._client.scheduler_address

    async def call(self, msg: SchedulerRequest) -> Any:
        """Send ``msg``, built as its declared type, to the scheduler and return its reply.

        The request goes after every graph part the client queued before it.

        Examples
        --------
        >>> await client.scheduler.call(coordination_messages.LockLocked(op="lock_locked", name="x"))  # doctest: +SKIP
        False
        """
        return await self._client.link.request(msg)

    def __getattr__(self, op: str) -> Callable[..., Awaitable[Any]]:
        """The scheduler's request ``op`` by name, as dask's ``client.scheduler.<op>(**fields)``.

        The fields go as keywords; the scheduler refuses, by name, an op it does
        not serve, and checks the declared fields as for any request.  The
        request goes after every graph part the client queued before it.

        Examples
        --------
        >>> await client.scheduler.who_has(keys=["x"])  # doctest: +SKIP
        {'x': ['tcp://127.0.0.1:40123']}
        """
        if op.startswith("_"):
            raise AttributeError(op)
        link = self._client.link
        return RemoteRequests(lambda name, fields: link.request_by_name(name, **fields)).__getattr__(op)


def refuse_unsupported(where: str, **given: bool) -> None:
    """Refuse, by name, the first parameter given a value this client cannot honour yet.

    Raises
    ------
    NotImplementedError
        Naming ``where`` and the parameter, e.g. ``Client(security=...)``.
    """
    for name, unsupported in given.items():
        if unsupported:
            raise NotImplementedError(f"{where}({name}=...) is not supported yet")


async def _noop() -> None:
    return None


# -- module functions ---------------------------------------------------------------------


@atexit.register
def _close_global_clients() -> None:
    for c in list(ClientBase._instances):
        try:
            if c.status not in ("closed",) and not c.asynchronous:
                c.close()
        except Exception:
            pass


def _security_from_loader(address: str) -> Any:
    """The security that ``distributed.client.security-loader`` gives for ``address``; None without a loader.

    The loader is a callable named by its import path; it is called with
    ``{"address": address}`` and returns a :class:`~distributed.Security` (or
    anything ``Client(security=)`` takes), or None for the default.
    """
    term = dask.config.get("distributed.client.security-loader")
    if not term:
        return None
    try:
        loader = import_term(term)
    except Exception as e:
        raise ImportError(f"Could not import {term!r}, set as distributed.client.security-loader: {e}") from e
    return loader({"address": address})


def _read_scheduler_file(path: str) -> str | None:
    """The address in a scheduler file; None while the file is missing or half written."""
    import json

    try:
        with open(path) as f:
            address = json.load(f)["address"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError):
        return None  # being written right now
    if not isinstance(address, str):
        raise ValueError(f"Scheduler file {path} holds no address string")
    return address


async def _wait_for_scheduler_file(path: str, timeout: float) -> str:
    """Wait up to ``timeout`` seconds for a scheduler to write its file."""
    deadline = time.monotonic() + timeout
    while (address := _read_scheduler_file(path)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Scheduler file {path} did not appear (with an address) within {timeout} s")
        await asyncio.sleep(0.05)
    return address


def _family_names(names: Sequence[str] | None, parameter: str) -> tuple[str, ...] | None:
    """``Client(serializers=)`` or ``deserializers=`` checked: registered family names, or None."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"Client({parameter}=) takes a list of serializer family names, got {names!r}")
    unknown = [n for n in names if n not in families]
    if unknown:
        raise ValueError(
            f"Client({parameter}=) names unknown serializer families {unknown}; registered: {sorted(families)}"
        )
    return tuple(names)
