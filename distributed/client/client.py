"""The Client facade: the public API, with the parts that do the work behind it.

A :class:`Client` connects to a scheduler and keeps one long-lived batched
stream to it.  Graphs become ``update-graph`` messages of tasks, each carrying
its own serialised run specification; the scheduler answers on the stream when
keys are in memory (with the workers that hold them), erred, cancelled or
lost.  :class:`Future` objects are references to keys: while one is alive the
client wants the key, and when the last one goes the client releases it.
Results are fetched straight from the workers that hold them.

The class itself checks and refuses parameters, picks the event loop, starts
a LocalCluster when given no address, and hands each call to the part that
owns it:

- :mod:`~distributed.client.graphs`: submissions and collections as tasks and
  graph plans;
- :mod:`~distributed.client.registry`: the futures and their reference counts;
- :mod:`~distributed.client.link`: the stream to the scheduler (through the
  :mod:`~distributed.client.outbox`) and requests;
- :mod:`~distributed.client.transfer`: gathering from and scattering to
  workers;
- :mod:`~distributed.client.defaults`: which client dask uses.

A synchronous client runs its own event loop in a background thread and
waits on it through :func:`distributed.utils.sync`; an asynchronous one
(``asynchronous=True``) runs on the caller's loop.  Each public method states
its shapes with ``@overload``: values on a ``Client[Literal[False]]``,
awaitables on a ``Client[Literal[True]]`` or with ``asynchronous=True`` per
call.  One generic descriptor per method cannot say this: the per-call
``asynchronous`` keyword would have to follow ``*args: P.args`` of a
ParamSpec, which the type system does not allow, so the overloads stay.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import time
import uuid
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Generator, Iterator
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, Protocol, Self, TypeAlias, TypeVar, overload

import dask
import dask.config
from dask._task_spec import TaskRef
from dask.core import validate_key
from dask.typing import NoDefault, no_default
from dask.utils import key_split, parse_timedelta

from distributed.batched import BatchedSend
from distributed.client.defaults import (
    AsCurrent,
    ClientContext,
    current_client,
    default_client,
    get_default_client,
    global_clients,
)
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
    worker_list,
)
from distributed.client.link import SchedulerLink, SchedulerRequest
from distributed.client.outbox import Outbox
from distributed.client.registry import FutureRegistry
from distributed.client.topics import TopicSubscriptions
from distributed.client.transfer import DataTransfer
from distributed.comm import get_address_host, parse_address, resolve_address
from distributed.core import ConnectionPool, rebuild_exception
from distributed.dask_api import (
    graph_expr,
    is_low_level_expr,
)
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import checker
from distributed.protocol.serialize import Serialize, unwrap
from distributed.security import Security, coerce_security
from distributed.task_context import current_worker, secede
from distributed.utils import LoopRunner, format_dashboard_link, sync

logger = logging.getLogger(__name__)

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "Client",
    "Future",
    "default_client",
    "get_client",
    "get_default_client",
    "get_task_metadata",
    "global_clients",
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

    from distributed.client.datasets import Datasets

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


class Client(Generic[AsyncT]):
    """Connect to and submit computation to a cluster.

    Parameters
    ----------
    address
        The scheduler's address, a cluster object, or None to start a
        :class:`~distributed.LocalCluster`.
    loop
        An event loop already running in another thread.
    timeout
        Seconds to wait for the scheduler.
    set_as_default
        Make this the client ``dask.compute`` uses.
    scheduler_file
        Read the scheduler's address from this file.
    asynchronous
        Run on the caller's event loop; methods return awaitables.
    name
        Shown in logs.
    direct_to_workers
        Results always come straight from the workers: None and True are
        accepted, False is refused.
    connection_limit
        Most connections open at once (to workers).
    security
        A :class:`~distributed.security.Security` (or a dict of its keywords):
        the TLS credentials of the ``client`` role.  Default: the cluster's
        when given a cluster object, else from config.  ``True`` starts the
        local cluster (no address given) with :meth:`Security.temporary`.
    heartbeat_interval, serializers, deserializers, extensions
        Not supported yet: a value other than the default raises
        ``NotImplementedError`` naming the parameter.
    **kwargs
        Passed to ``LocalCluster`` when no address is given (refused otherwise).

    Examples
    --------
    >>> client = Client("tcp://127.0.0.1:8786")  # doctest: +SKIP
    >>> client.submit(lambda x: x + 1, 10).result()  # doctest: +SKIP
    11
    """

    _instances: weakref.WeakSet[Client] = weakref.WeakSet()

    @overload
    def __init__(
        self: Client[Literal[False]],
        address: Any = None,
        loop: Any = None,
        timeout: float | str | NoDefault | None = no_default,
        set_as_default: bool = True,
        scheduler_file: str | None = None,
        security: Security | dict[str, Any] | bool | None = None,
        asynchronous: Literal[False] = False,
        name: str | None = None,
        heartbeat_interval: Any = None,
        serializers: Any = None,
        deserializers: Any = None,
        extensions: Any = None,
        direct_to_workers: bool | None = None,
        connection_limit: int = 512,
        _in_worker: bool = False,
        **kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: Client[Literal[True]],
        address: Any = None,
        loop: Any = None,
        timeout: float | str | NoDefault | None = no_default,
        set_as_default: bool = True,
        scheduler_file: str | None = None,
        security: Security | dict[str, Any] | bool | None = None,
        *,
        asynchronous: Literal[True],
        name: str | None = None,
        heartbeat_interval: Any = None,
        serializers: Any = None,
        deserializers: Any = None,
        extensions: Any = None,
        direct_to_workers: bool | None = None,
        connection_limit: int = 512,
        _in_worker: bool = False,
        **kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: Client[bool],
        address: Any = None,
        loop: Any = None,
        timeout: float | str | NoDefault | None = no_default,
        set_as_default: bool = True,
        scheduler_file: str | None = None,
        security: Security | dict[str, Any] | bool | None = None,
        *,
        asynchronous: bool,
        name: str | None = None,
        heartbeat_interval: Any = None,
        serializers: Any = None,
        deserializers: Any = None,
        extensions: Any = None,
        direct_to_workers: bool | None = None,
        connection_limit: int = 512,
        _in_worker: bool = False,
        **kwargs: Any,
    ) -> None: ...

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
        serializers: Any = None,
        deserializers: Any = None,
        extensions: Any = None,
        direct_to_workers: bool | None = None,
        connection_limit: int = 512,
        _in_worker: bool = False,
        **kwargs: Any,
    ) -> None:
        refuse_unsupported(
            "Client",
            heartbeat_interval=heartbeat_interval is not None,
            serializers=serializers is not None,
            deserializers=deserializers is not None,
            extensions=bool(extensions),
            direct_to_workers=direct_to_workers is False,
        )
        if kwargs and (address is not None or scheduler_file is not None):
            # They configure the LocalCluster started when no address is given.
            raise TypeError(f"Client() got unexpected keyword arguments {sorted(kwargs)} (an address was given)")
        if timeout is no_default or timeout is None:
            timeout_value: Any = dask.config.get("distributed.comm.timeouts.connect")
        else:
            timeout_value = timeout
        self._timeout = float(parse_timedelta(timeout_value) or 30)
        self.id = f"{type(self).__name__}-{uuid.uuid4()}"
        self.name = name
        self.asynchronous = asynchronous
        self._in_worker = _in_worker
        self.cluster: Any = None
        self._own_cluster = False
        self._cluster_kwargs = kwargs
        #: This client's place among the process's clients (default, current).
        self.context = ClientContext(self)
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
            cluster_loop = getattr(self.cluster, "loop", None)
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
        # True: temporary credentials for the cluster this client starts (none other would accept them).
        starts_cluster = address is None and scheduler_file is None and self.cluster is None
        self.security = coerce_security(security, "Client", temporary_ok=starts_cluster)
        if starts_cluster and security not in (None, False):
            self._cluster_kwargs = {**kwargs, "security": self.security}
        self.scheduler_address: str | None = address
        #: Stream messages and key releases, in the order they were made.
        self.outbox = Outbox(self.id, graph_chunk_size())
        #: The futures of this client and their reference counts.
        self.registry = FutureRegistry(self, self.outbox, self._kick_outbox)
        self.pool = ConnectionPool(limit=connection_limit, connection_args=self.security.get_connection_args("client"))
        #: The connection to the scheduler: the stream both ways, and requests.
        self.link = SchedulerLink(self.id, self.outbox, self.registry, self.pool, self._timeout, lambda: self.loop)
        self.link.address = address
        #: Gathers results from workers, scatters data to them.
        self.transfer = DataTransfer(self.registry, self.link, self.pool, self._timeout)
        #: The topics this client subscribed to, and their event handlers.
        self.topics = TopicSubscriptions(self.id, self.link.post)
        self.link.add_route("event", self.topics.route())
        #: The scheduler file this client was given or wrote (``write_scheduler_file``).
        self.scheduler_file: str | None = scheduler_file
        if asynchronous and loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
        self._loop_runner = LoopRunner(loop=loop)
        self.loop = self._loop_runner.loop
        self._started: asyncio.Future[Any] | None = None
        Client._instances.add(self)
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
                self.loop = asyncio.get_running_loop()
                self._loop_runner = LoopRunner(loop=self.loop)
            except RuntimeError:
                pass

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

    async def _start(self) -> Client:
        self.loop = asyncio.get_running_loop()
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
        """newly-created, connecting, running, closing or closed: the state of the connection to the scheduler."""
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
                return asyncio.wait_for(coro, parse_timedelta(callback_timeout))
            return coro
        return sync(self.loop, func, *args, callback_timeout=callback_timeout, **kwargs)

    async def _close(self, fast: bool = False) -> None:
        if self.status == "closed" and not self.link.connected:
            return
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
        self: Client[Literal[False]], timeout: Any = no_default, *, asynchronous: Literal[False] | None = None
    ) -> None: ...

    @overload
    def close(
        self: Client[Literal[True]], timeout: Any = no_default, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[None]: ...

    @overload
    def close(self, timeout: Any = no_default, *, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def close(self, timeout: Any = no_default, *, asynchronous: bool | None = None) -> Awaitable[None] | None: ...

    def close(self, timeout: Any = no_default, *, asynchronous: bool | None = None) -> Awaitable[None] | None:
        """Close the client (and the LocalCluster it started, if any)."""
        asynchronous = self.asynchronous if asynchronous is None else asynchronous
        t = None if timeout is no_default or timeout is None else parse_timedelta(timeout)
        if self.status == "closed":
            if asynchronous:
                return _noop()
            self._loop_runner.stop()
            return None
        if asynchronous:
            return asyncio.wait_for(self._close(), t)
        try:
            if (not self.loop.is_closed() and self._loop_runner.is_started) or self._loop_runner.thread is None:
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
    def shutdown(self: Client[Literal[False]], *, asynchronous: Literal[False] | None = None) -> None: ...

    @overload
    def shutdown(self: Client[Literal[True]], *, asynchronous: Literal[True] | None = None) -> Awaitable[None]: ...

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
        if getattr(self, "status", "closed") in ("closed", "closing") or self.asynchronous:
            return
        try:
            self.loop.call_soon_threadsafe(self._close_abandoned)
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
        return f"<Client: {self.scheduler_address!r} status={self.status}>"

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
        return AsCurrent(self)

    @property
    def scheduler(self) -> SchedulerHandle:
        """A handle on the scheduler: its address, and a way to send it a declared request."""
        return SchedulerHandle(self)

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
            return Future(key, self)
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
        self: Client[Literal[False]],
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
        self: Client[Literal[True]],
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
        self: Client[Literal[False]],
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
        self: Client[Literal[True]],
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
        refuse_unsupported("Client.get", direct=direct is False, **{k: True for k in kwargs})
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
            return self.transfer.gather(packed)
        try:
            return self.gather(packed)
        finally:
            del futures, by_key, packed

    # -- gathering ------------------------------------------------------------------------------
    @overload
    def gather(
        self: Client[Literal[False]],
        futures: Any,
        errors: str = "raise",
        direct: bool | None = None,
        asynchronous: Literal[False] | None = None,
    ) -> Any: ...

    @overload
    def gather(
        self: Client[Literal[True]],
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
        futures out.
        """
        refuse_unsupported("Client.gather", direct=direct is False)
        if isinstance(futures, Iterator):
            return (self.gather(f, errors=errors, direct=direct) for f in futures)
        if current_worker() is not None and not self.asynchronous:
            secede()
        return self.sync(self.transfer.gather, futures, errors=errors, asynchronous=asynchronous)

    # -- scatter --------------------------------------------------------------------------------
    @overload
    def scatter(
        self: Client[Literal[False]],
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: Any = no_default,
        asynchronous: Literal[False] | None = None,
    ) -> Any: ...

    @overload
    def scatter(
        self: Client[Literal[True]],
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: Any = no_default,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[Any]: ...

    @overload
    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: Any = no_default,
        *,
        asynchronous: Literal[True],
    ) -> Awaitable[Any]: ...

    @overload
    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: Any = no_default,
        asynchronous: bool | None = None,
    ) -> Any: ...

    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: Any = no_default,
        asynchronous: bool | None = None,
    ) -> Any:
        """Move data to workers; return futures in the same structure.

        A list, tuple, set or frozenset (or a subclass, a namedtuple) gives the
        same container of futures, a dict a dict, an iterator or a ``range`` a
        list; anything else is one object and gives one future.  ``broadcast``
        sends each item to every worker (``True``) or to that many workers (an
        int); ``workers`` limits the targets (addresses, names or hosts).
        ``timeout`` bounds the wait for a worker to scatter to (default: the
        client's connect timeout).
        """
        refuse_unsupported("Client.scatter", direct=direct is False)
        return self.sync(
            self.transfer.scatter,
            data,
            workers=workers,
            broadcast=broadcast,
            hash=hash,
            timeout=None if timeout is no_default else timeout,
            asynchronous=asynchronous,
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

    @overload
    def cancel(
        self: Client[Literal[False]],
        futures: Any,
        asynchronous: Literal[False] | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> None: ...

    @overload
    def cancel(
        self: Client[Literal[True]],
        futures: Any,
        asynchronous: Literal[True] | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Awaitable[None]: ...

    @overload
    def cancel(
        self,
        futures: Any,
        asynchronous: Literal[True],
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Awaitable[None]: ...

    @overload
    def cancel(
        self,
        futures: Any,
        asynchronous: bool | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Awaitable[None] | None: ...

    def cancel(
        self,
        futures: Any,
        asynchronous: bool | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Any:
        """Cancel the tasks of these futures (and what depends on them)."""
        return self.sync(self._cancel, futures, reason=reason or msg, force=force, asynchronous=asynchronous)

    async def _retry(self, futures: Any) -> None:
        flat: list[Future] = []
        collect_futures(futures, flat)
        for f in flat:
            f.state.reset()
        await self.link.request(m.RetryKeys(op="retry", client=self.id, keys=[f.key for f in flat]))
        # Dependents erred by blame are reset too: ask for them again.
        self.link.post(m.ClientKeys(op="client-desires-keys", client=self.id, keys=[f.key for f in flat]))

    @overload
    def retry(self: Client[Literal[False]], futures: Any, asynchronous: Literal[False] | None = None) -> None: ...

    @overload
    def retry(
        self: Client[Literal[True]], futures: Any, asynchronous: Literal[True] | None = None
    ) -> Awaitable[None]: ...

    @overload
    def retry(self, futures: Any, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def retry(self, futures: Any, asynchronous: bool | None = None) -> Awaitable[None] | None: ...

    def retry(self, futures: Any, asynchronous: bool | None = None) -> Awaitable[None] | None:
        """Rerun erred futures."""
        return self.sync(self._retry, futures, asynchronous=asynchronous)

    # -- running functions ----------------------------------------------------------------
    async def _run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: str = "raise",
        **kwargs: Any,
    ) -> Any:
        response = await self.link.request(
            m.RunFunction(
                op="broadcast",
                function=Serialize(function),
                args=Serialize(args),
                kwargs=Serialize(kwargs),
                workers=worker_list(workers),
                wait=wait,
                nanny=nanny,
            )
        )
        results: dict[str, Any] = {}
        for addr, resp in response.items():
            if resp.get("status") == "OK":
                results[addr] = unwrap(resp.get("result"))
            else:
                exc = rebuild_exception(resp)
                if on_error == "raise":
                    raise exc
                if on_error == "return":
                    results[addr] = exc
        return results if wait else None

    @overload
    def run(
        self: Client[Literal[False]],
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: Literal[True] = True,
        nanny: bool = False,
        on_error: str = "raise",
        asynchronous: Literal[False] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]: ...

    @overload
    def run(
        self: Client[Literal[True]],
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: Literal[True] = True,
        nanny: bool = False,
        on_error: str = "raise",
        asynchronous: Literal[True] | None = None,
        **kwargs: Any,
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: Literal[True] = True,
        nanny: bool = False,
        on_error: str = "raise",
        asynchronous: Literal[True],
        **kwargs: Any,
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: Literal[False],
        nanny: bool = False,
        on_error: str = "raise",
        asynchronous: bool | None = None,
        **kwargs: Any,
    ) -> Awaitable[None] | None: ...

    @overload
    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: str = "raise",
        asynchronous: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any] | Awaitable[dict[str, Any] | None] | None: ...

    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: str = "raise",
        asynchronous: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any] | Awaitable[dict[str, Any] | None] | None:
        """Run ``function(*args, **kwargs)`` on every worker (or some); return ``{address: result}``.

        A ``dask_worker`` keyword argument, if the function takes one, receives the worker.
        With ``nanny=True`` the function runs in each worker's nanny process instead
        (``dask_worker`` then receives the :class:`~distributed.Nanny`); results
        are still keyed by worker address, and a worker without a nanny is an error.
        """
        return self.sync(
            self._run,
            function,
            *args,
            workers=workers,
            wait=wait,
            nanny=nanny,
            on_error=on_error,
            asynchronous=asynchronous,
            **kwargs,
        )

    async def _run_on_scheduler(
        self, function: Callable[..., Any], *args: Any, wait: bool = True, **kwargs: Any
    ) -> Any:
        result = await self.link.request(
            m.RunFunction(
                op="run_function",
                function=Serialize(function),
                args=Serialize(args),
                kwargs=Serialize(kwargs),
                wait=wait,
            )
        )
        return unwrap(result)

    @overload
    def run_on_scheduler(
        self: Client[Literal[False]],
        function: Callable[..., Any],
        *args: Any,
        asynchronous: Literal[False] | None = None,
        **kwargs: Any,
    ) -> Any: ...

    @overload
    def run_on_scheduler(
        self: Client[Literal[True]],
        function: Callable[..., Any],
        *args: Any,
        asynchronous: Literal[True] | None = None,
        **kwargs: Any,
    ) -> Awaitable[Any]: ...

    @overload
    def run_on_scheduler(
        self, function: Callable[..., Any], *args: Any, asynchronous: Literal[True], **kwargs: Any
    ) -> Awaitable[Any]: ...

    @overload
    def run_on_scheduler(
        self, function: Callable[..., Any], *args: Any, asynchronous: bool | None = None, **kwargs: Any
    ) -> Any: ...

    def run_on_scheduler(
        self, function: Callable[..., Any], *args: Any, asynchronous: bool | None = None, **kwargs: Any
    ) -> Any:
        """Run ``function`` on the scheduler; a ``dask_scheduler`` argument receives it."""
        return self.sync(self._run_on_scheduler, function, *args, asynchronous=asynchronous, **kwargs)

    # -- plugins --------------------------------------------------------------------------
    @overload
    def register_plugin(
        self: Client[Literal[False]],
        plugin: Any,
        name: str | None = None,
        idempotent: bool | None = None,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> str | dict[str, Any]: ...

    @overload
    def register_plugin(
        self: Client[Literal[True]],
        plugin: Any,
        name: str | None = None,
        idempotent: bool | None = None,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[str | dict[str, Any]]: ...

    @overload
    def register_plugin(
        self, plugin: Any, name: str | None = None, idempotent: bool | None = None, *, asynchronous: Literal[True]
    ) -> Awaitable[str | dict[str, Any]]: ...

    @overload
    def register_plugin(
        self, plugin: Any, name: str | None = None, idempotent: bool | None = None, *, asynchronous: bool | None = None
    ) -> str | dict[str, Any] | Awaitable[str | dict[str, Any]]: ...

    def register_plugin(
        self,
        plugin: Any,
        name: str | None = None,
        idempotent: bool | None = None,
        *,
        asynchronous: bool | None = None,
    ) -> str | dict[str, Any] | Awaitable[str | dict[str, Any]]:
        """Register a scheduler, worker or nanny plugin.

        A :class:`~distributed.WorkerPlugin` is kept by the scheduler and set up on
        every worker: those connected now and each one that joins later.  A
        :class:`~distributed.NannyPlugin` likewise on every nanny (workers without
        one do not run it); when its ``restart`` attribute is true, each nanny
        then replaces its worker process.

        Parameters
        ----------
        plugin
            A :class:`~distributed.SchedulerPlugin`, :class:`~distributed.WorkerPlugin`
            or :class:`~distributed.NannyPlugin`.
        name
            The plugin's name; by default its ``name`` attribute, else one made up
            from its type.  Registering a name again replaces the plugin of that name.
        idempotent
            Leave an already registered plugin of the same name in place.  By
            default the plugin's ``idempotent`` attribute (False if it has none).

        Returns
        -------
        ``"OK"`` for a scheduler plugin; for a worker or nanny plugin, each current
        worker's (or its nanny's) reply to the setup, by worker address
        (``{"status": "OK"}``; a nanny without a worker at that moment, by its own
        address).

        Raises
        ------
        Exception
            The first exception a worker's or nanny's ``setup`` raised.
        """
        from distributed.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin

        name = name or getattr(plugin, "name", None) or f"{type(plugin).__name__}-{uuid.uuid4()}"
        if idempotent is None:
            idempotent = bool(getattr(plugin, "idempotent", False))
        if isinstance(plugin, SchedulerPlugin):
            return self.sync(
                self.link.request,
                m.RegisterPlugin(
                    op="register_scheduler_plugin", plugin=Serialize(plugin), name=name, idempotent=idempotent
                ),
                asynchronous=asynchronous,
            )
        if isinstance(plugin, WorkerPlugin):
            return self.sync(
                self._worker_plugin_request,
                m.RegisterWorkerPlugin(
                    op="register_worker_plugin", plugin=Serialize(plugin), name=name, idempotent=idempotent
                ),
                asynchronous=asynchronous,
            )
        if isinstance(plugin, NannyPlugin):
            return self.sync(
                self._worker_plugin_request,
                m.RegisterNannyPlugin(
                    op="register_nanny_plugin", plugin=Serialize(plugin), name=name, idempotent=idempotent
                ),
                asynchronous=asynchronous,
            )
        raise TypeError(f"Unknown plugin type {type(plugin).__name__}")

    async def _worker_plugin_request(
        self,
        msg: m.RegisterWorkerPlugin | m.UnregisterWorkerPlugin | m.RegisterNannyPlugin | m.UnregisterNannyPlugin,
    ) -> dict[str, Any]:
        """Send a worker or nanny plugin request; raise the first error a worker or nanny replied with."""
        replies: dict[str, Any] = await self.link.request(msg)
        for reply in replies.values():
            if reply.get("status") == "error":
                raise rebuild_exception(reply)
        return replies

    @overload
    def unregister_worker_plugin(
        self: Client[Literal[False]],
        name: str,
        nanny: bool | None = None,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> dict[str, Any]: ...

    @overload
    def unregister_worker_plugin(
        self: Client[Literal[True]], name: str, nanny: bool | None = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def unregister_worker_plugin(
        self, name: str, nanny: bool | None = None, *, asynchronous: Literal[True]
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def unregister_worker_plugin(
        self, name: str, nanny: bool | None = None, *, asynchronous: bool | None = None
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]: ...

    def unregister_worker_plugin(
        self, name: str, nanny: bool | None = None, *, asynchronous: bool | None = None
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Remove the worker plugin ``name``: torn down on every worker, given to no new one.

        Parameters
        ----------
        name
            The plugin's name.
        nanny
            True for a nanny plugin (torn down on every nanny, given to no new one).

        Returns
        -------
        Each current worker's (or nanny's) reply to the teardown, by worker address.

        Raises
        ------
        ValueError
            When no plugin of that name is registered.
        """
        msg: m.UnregisterWorkerPlugin | m.UnregisterNannyPlugin = (
            m.UnregisterNannyPlugin(op="unregister_nanny_plugin", name=name)
            if nanny
            else m.UnregisterWorkerPlugin(op="unregister_worker_plugin", name=name)
        )
        return self.sync(self._worker_plugin_request, msg, asynchronous=asynchronous)

    @overload
    def unregister_scheduler_plugin(
        self: Client[Literal[False]], name: str, *, asynchronous: Literal[False] | None = None
    ) -> str: ...

    @overload
    def unregister_scheduler_plugin(
        self: Client[Literal[True]], name: str, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[str]: ...

    @overload
    def unregister_scheduler_plugin(self, name: str, *, asynchronous: Literal[True]) -> Awaitable[str]: ...

    @overload
    def unregister_scheduler_plugin(self, name: str, *, asynchronous: bool | None = None) -> str | Awaitable[str]: ...

    def unregister_scheduler_plugin(self, name: str, *, asynchronous: bool | None = None) -> str | Awaitable[str]:
        """Remove a scheduler plugin."""
        return self.sync(
            self.link.request,
            m.UnregisterPlugin(op="unregister_scheduler_plugin", name=name),
            asynchronous=asynchronous,
        )

    # -- published datasets, events, uploaded files, logs ---------------------------------
    @overload
    def publish_dataset(
        self: Client[Literal[False]],
        *args: Any,
        name: Any = None,
        override: bool = False,
        asynchronous: Literal[False] | None = None,
        **kwargs: Any,
    ) -> None: ...

    @overload
    def publish_dataset(
        self: Client[Literal[True]],
        *args: Any,
        name: Any = None,
        override: bool = False,
        asynchronous: Literal[True] | None = None,
        **kwargs: Any,
    ) -> Awaitable[None]: ...

    @overload
    def publish_dataset(
        self, *args: Any, name: Any = None, override: bool = False, asynchronous: Literal[True], **kwargs: Any
    ) -> Awaitable[None]: ...

    @overload
    def publish_dataset(
        self, *args: Any, name: Any = None, override: bool = False, asynchronous: bool | None = None, **kwargs: Any
    ) -> Awaitable[None] | None: ...

    def publish_dataset(
        self, *args: Any, name: Any = None, override: bool = False, asynchronous: bool | None = None, **kwargs: Any
    ) -> Awaitable[None] | None:
        """Publish objects (futures, persisted collections, any picklable object) by name.

        Published futures stay computed, their results in memory, until the
        dataset is unpublished, even after this client closes.

        Parameters
        ----------
        *args
            One object (or several, published as a tuple) to publish as ``name``.
        name
            The name for ``args``.
        override
            Replace a dataset of the same name instead of raising.
        **kwargs
            More datasets, by name.

        Raises
        ------
        KeyError
            When a name is taken and ``override`` is false.
        ValueError
            When ``args`` come without a ``name``.

        Examples
        --------
        >>> df = client.persist(df)  # doctest: +SKIP
        >>> client.publish_dataset(my_df=df)  # doctest: +SKIP
        >>> client.publish_dataset(df, name="my_df", override=True)  # doctest: +SKIP
        """
        from distributed.client.datasets import publish

        datasets: dict[Any, Any] = {}
        if name is not None:
            if not args:
                raise ValueError("If name is provided, expecting call signature like publish_dataset(df, name='ds')")
            datasets[name] = args[0] if len(args) == 1 else args
        elif args:
            raise ValueError("Datasets given by position need a name: publish_dataset(df, name='ds')")
        datasets.update(kwargs)
        return self.sync(publish, self, datasets, override, asynchronous=asynchronous)

    @overload
    def unpublish_dataset(
        self: Client[Literal[False]], name: Any, *, asynchronous: Literal[False] | None = None
    ) -> None: ...

    @overload
    def unpublish_dataset(
        self: Client[Literal[True]], name: Any, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[None]: ...

    @overload
    def unpublish_dataset(self, name: Any, *, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def unpublish_dataset(self, name: Any, *, asynchronous: bool | None = None) -> Awaitable[None] | None: ...

    def unpublish_dataset(self, name: Any, *, asynchronous: bool | None = None) -> Awaitable[None] | None:
        """Remove the published dataset ``name``: its futures' results may go once no one else holds them."""
        return self.sync(self.link.request, m.PublishDelete(op="publish_delete", name=name), asynchronous=asynchronous)

    @overload
    def list_datasets(self: Client[Literal[False]], *, asynchronous: Literal[False] | None = None) -> list[Any]: ...

    @overload
    def list_datasets(
        self: Client[Literal[True]], *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[list[Any]]: ...

    @overload
    def list_datasets(self, *, asynchronous: Literal[True]) -> Awaitable[list[Any]]: ...

    @overload
    def list_datasets(self, *, asynchronous: bool | None = None) -> list[Any] | Awaitable[list[Any]]: ...

    def list_datasets(self, *, asynchronous: bool | None = None) -> list[Any] | Awaitable[list[Any]]:
        """The names of the published datasets."""

        async def names() -> list[Any]:
            return list(await self.link.request(m.PublishList(op="publish_list")))

        return self.sync(names, asynchronous=asynchronous)

    @overload
    def get_dataset(
        self: Client[Literal[False]],
        name: Any,
        default: Any = no_default,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> Any: ...

    @overload
    def get_dataset(
        self: Client[Literal[True]], name: Any, default: Any = no_default, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[Any]: ...

    @overload
    def get_dataset(self, name: Any, default: Any = no_default, *, asynchronous: Literal[True]) -> Awaitable[Any]: ...

    @overload
    def get_dataset(self, name: Any, default: Any = no_default, *, asynchronous: bool | None = None) -> Any: ...

    def get_dataset(self, name: Any, default: Any = no_default, *, asynchronous: bool | None = None) -> Any:
        """The published dataset ``name``, with futures of this client.

        Parameters
        ----------
        name
            The dataset's name.
        default
            Returned when there is no such dataset (by default, ``KeyError`` is raised).

        Raises
        ------
        KeyError
            When there is no dataset ``name`` and no ``default``.
        """
        from distributed.client.datasets import get_dataset

        return self.sync(get_dataset, self, name, default, asynchronous=asynchronous)

    @property
    def datasets(self) -> Datasets:
        """The published datasets as a mapping: ``client.datasets["x"] = df``, ``del``, ``in``, ``len``."""
        from distributed.client.datasets import Datasets

        return Datasets(self)

    @overload
    def log_event(
        self: Client[Literal[False]],
        topic: str | Collection[str],
        msg: Any,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> None: ...

    @overload
    def log_event(
        self: Client[Literal[True]],
        topic: str | Collection[str],
        msg: Any,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[None]: ...

    @overload
    def log_event(self, topic: str | Collection[str], msg: Any, *, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def log_event(
        self, topic: str | Collection[str], msg: Any, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None: ...

    def log_event(
        self, topic: str | Collection[str], msg: Any, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None:
        """Log an event ``msg`` under ``topic`` (or each of several topics) on the scheduler.

        Parameters
        ----------
        topic
            The topic, or several.
        msg
            Plain msgpack data (dicts, lists, strings, numbers...).

        Raises
        ------
        TypeError
            When ``msg`` is not plain msgpack data.

        Examples
        --------
        >>> client.log_event("current-time", time.time())  # doctest: +SKIP
        """
        from distributed.protocol.framing import is_msgpack_serializable

        if not is_msgpack_serializable(msg):
            raise TypeError(f"Message must be msgpack serializable. Got {type(msg)=} instead.")
        topics: str | list[str] = topic if isinstance(topic, str) else list(topic)
        return self.sync(
            self.link.request, m.LogEvent(op="log_event", topic=topics, msg=msg), asynchronous=asynchronous
        )

    @overload
    def get_events(
        self: Client[Literal[False]], topic: str | None = None, *, asynchronous: Literal[False] | None = None
    ) -> Any: ...

    @overload
    def get_events(
        self: Client[Literal[True]], topic: str | None = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[Any]: ...

    @overload
    def get_events(self, topic: str | None = None, *, asynchronous: Literal[True]) -> Awaitable[Any]: ...

    @overload
    def get_events(self, topic: str | None = None, *, asynchronous: bool | None = None) -> Any: ...

    def get_events(self, topic: str | None = None, *, asynchronous: bool | None = None) -> Any:
        """The events the scheduler keeps: of ``topic`` as ``((time, msg), ...)``, oldest first.

        With no topic, those of every topic in a dict by topic.
        """

        async def events() -> Any:
            reply = await self.link.request(m.GetEvents(op="events", topic=topic))
            if topic is not None:
                return tuple(tuple(e) for e in reply)
            return {t: tuple(tuple(e) for e in log) for t, log in reply.items()}

        return self.sync(events, asynchronous=asynchronous)

    def subscribe_topic(self, topic: str, handler: Callable[[tuple[float, Any]], Any]) -> None:
        """Call ``handler`` with each event ``(time, msg)`` logged under ``topic`` from now on.

        The handler runs on the client's event loop; one that returns an
        awaitable is awaited.  Subscribing again replaces the handler.

        Examples
        --------
        >>> client.subscribe_topic("status", lambda event: print(event[1]))  # doctest: +SKIP
        """
        self.topics.subscribe(topic, handler)

    def unsubscribe_topic(self, topic: str) -> None:
        """Stop handling the events of ``topic``.

        Raises
        ------
        ValueError
            When no handler is subscribed to ``topic``.
        """
        self.topics.unsubscribe(topic)

    @overload
    def upload_file(
        self: Client[Literal[False]], filename: str, load: bool = True, *, asynchronous: Literal[False] | None = None
    ) -> str | dict[str, Any]: ...

    @overload
    def upload_file(
        self: Client[Literal[True]], filename: str, load: bool = True, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[str | dict[str, Any]]: ...

    @overload
    def upload_file(
        self, filename: str, load: bool = True, *, asynchronous: Literal[True]
    ) -> Awaitable[str | dict[str, Any]]: ...

    @overload
    def upload_file(
        self, filename: str, load: bool = True, *, asynchronous: bool | None = None
    ) -> str | dict[str, Any] | Awaitable[str | dict[str, Any]]: ...

    def upload_file(
        self, filename: str, load: bool = True, *, asynchronous: bool | None = None
    ) -> str | dict[str, Any] | Awaitable[str | dict[str, Any]]:
        """Send a ``.py``, ``.egg`` or ``.zip`` file to every worker, now and joining later.

        Each worker saves it in its local directory, which goes on its
        ``sys.path``, and with ``load`` imports it (see
        :class:`~distributed.diagnostics.plugin.UploadFile`).

        Returns
        -------
        Each current worker's reply, by address.

        Raises
        ------
        Exception
            The first error a worker met saving or importing the file.

        Examples
        --------
        >>> client.upload_file("mylibrary.egg")  # doctest: +SKIP
        >>> from mylibrary import myfunc  # doctest: +SKIP
        >>> client.submit(myfunc, 10)  # doctest: +SKIP
        """
        from distributed.diagnostics.plugin import UploadFile

        plugin = UploadFile(filename, load=load)
        return self.register_plugin(plugin, name=f"{filename}{uuid.uuid4()}", asynchronous=asynchronous)

    @overload
    def register_worker_callbacks(
        self: Client[Literal[False]],
        setup: Callable[..., Any] | None = None,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> str | dict[str, Any]: ...

    @overload
    def register_worker_callbacks(
        self: Client[Literal[True]],
        setup: Callable[..., Any] | None = None,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[str | dict[str, Any]]: ...

    @overload
    def register_worker_callbacks(
        self, setup: Callable[..., Any] | None = None, *, asynchronous: Literal[True]
    ) -> Awaitable[str | dict[str, Any]]: ...

    @overload
    def register_worker_callbacks(
        self, setup: Callable[..., Any] | None = None, *, asynchronous: bool | None = None
    ) -> str | dict[str, Any] | Awaitable[str | dict[str, Any]]: ...

    def register_worker_callbacks(
        self, setup: Callable[..., Any] | None = None, *, asynchronous: bool | None = None
    ) -> str | dict[str, Any] | Awaitable[str | dict[str, Any]]:
        """Run ``setup`` on every worker, now and on each one that joins later.

        ``setup`` is called with no arguments, or with the worker as
        ``dask_worker=`` when it takes that keyword.

        Raises
        ------
        TypeError
            When ``setup`` is not callable.
        """
        from distributed.diagnostics.plugin import WorkerSetupCallback

        if setup is None:
            raise TypeError("Client.register_worker_callbacks() needs a setup function")
        return self.register_plugin(WorkerSetupCallback(setup), asynchronous=asynchronous)

    @overload
    def write_scheduler_file(
        self: Client[Literal[False]], scheduler_file: str, *, asynchronous: Literal[False] | None = None
    ) -> None: ...

    @overload
    def write_scheduler_file(
        self: Client[Literal[True]], scheduler_file: str, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[None]: ...

    @overload
    def write_scheduler_file(self, scheduler_file: str, *, asynchronous: Literal[True]) -> Awaitable[None]: ...

    @overload
    def write_scheduler_file(
        self, scheduler_file: str, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None: ...

    def write_scheduler_file(self, scheduler_file: str, *, asynchronous: bool | None = None) -> Awaitable[None] | None:
        """Write the scheduler's information (its address among it) as JSON to ``scheduler_file``.

        Another client connects with ``Client(scheduler_file=scheduler_file)``.

        Raises
        ------
        ValueError
            When this client already has a scheduler file.
        """
        if self.scheduler_file is not None:
            raise ValueError("Scheduler file already set")
        self.scheduler_file = scheduler_file

        async def write() -> None:
            import json

            info = await self.scheduler_info(asynchronous=True)
            with open(scheduler_file, "w") as f:
                json.dump(info, f, indent=2, default=str)

        return self.sync(write, asynchronous=asynchronous)

    @overload
    def get_scheduler_logs(
        self: Client[Literal[False]], n: int | None = None, *, asynchronous: Literal[False] | None = None
    ) -> list[tuple[str, str]]: ...

    @overload
    def get_scheduler_logs(
        self: Client[Literal[True]], n: int | None = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[list[tuple[str, str]]]: ...

    @overload
    def get_scheduler_logs(
        self, n: int | None = None, *, asynchronous: Literal[True]
    ) -> Awaitable[list[tuple[str, str]]]: ...

    @overload
    def get_scheduler_logs(
        self, n: int | None = None, *, asynchronous: bool | None = None
    ) -> list[tuple[str, str]] | Awaitable[list[tuple[str, str]]]: ...

    def get_scheduler_logs(
        self, n: int | None = None, *, asynchronous: bool | None = None
    ) -> list[tuple[str, str]] | Awaitable[list[tuple[str, str]]]:
        """The scheduler's recent log records as ``(level, message)``, oldest first (the last ``n``)."""

        async def logs() -> list[tuple[str, str]]:
            return _as_log_records(await self.link.request(m.GetLogs(op="get_logs", n=n)))

        return self.sync(logs, asynchronous=asynchronous)

    @overload
    def get_worker_logs(
        self: Client[Literal[False]],
        n: int | None = None,
        workers: Collection[str] | None = None,
        nanny: bool = False,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> dict[str, list[tuple[str, str]]]: ...

    @overload
    def get_worker_logs(
        self: Client[Literal[True]],
        n: int | None = None,
        workers: Collection[str] | None = None,
        nanny: bool = False,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[dict[str, list[tuple[str, str]]]]: ...

    @overload
    def get_worker_logs(
        self,
        n: int | None = None,
        workers: Collection[str] | None = None,
        nanny: bool = False,
        *,
        asynchronous: Literal[True],
    ) -> Awaitable[dict[str, list[tuple[str, str]]]]: ...

    @overload
    def get_worker_logs(
        self,
        n: int | None = None,
        workers: Collection[str] | None = None,
        nanny: bool = False,
        *,
        asynchronous: bool | None = None,
    ) -> dict[str, list[tuple[str, str]]] | Awaitable[dict[str, list[tuple[str, str]]]]: ...

    def get_worker_logs(
        self,
        n: int | None = None,
        workers: Collection[str] | None = None,
        nanny: bool = False,
        *,
        asynchronous: bool | None = None,
    ) -> dict[str, list[tuple[str, str]]] | Awaitable[dict[str, list[tuple[str, str]]]]:
        """Recent log records of workers (or of their nannies) as ``(level, message)``, by worker address.

        Parameters
        ----------
        n
            The last ``n`` records of each (all kept when None).
        workers
            Addresses or names of the workers (default: all).
        nanny
            The records of the workers' nannies instead.

        Raises
        ------
        ValueError
            For a worker that is not known, or (with ``nanny``) that has no nanny.
        """

        async def logs() -> dict[str, list[tuple[str, str]]]:
            info = await self.scheduler_info(n_workers=-1, asynchronous=True)
            known: dict[str, Any] = dict(info.get("workers") or {})
            if workers is None:
                addresses = list(known)
            else:
                by_name = {str(w.get("name")): a for a, w in known.items()}
                addresses = [w if w in known else by_name.get(str(w), w) for w in workers]
                unknown = [a for a in addresses if a not in known]
                if unknown:
                    raise ValueError(f"Unknown workers: {unknown}")
            targets = {a: known[a].get("nanny") if nanny else a for a in addresses}
            if nanny:
                bare = [a for a, t in targets.items() if not t]
                if bare:
                    raise ValueError(f"These workers have no nanny: {bare}")
            request = m.GetLogs(op="get_logs", n=n)
            replies = await asyncio.gather(*(self.pool.call(t, request) for t in targets.values()))
            return {a: _as_log_records(r) for a, r in zip(targets, replies)}

        return self.sync(logs, asynchronous=asynchronous)

    # -- information ----------------------------------------------------------------------
    @overload
    def scheduler_info(
        self: Client[Literal[False]], n_workers: int = 5, *, asynchronous: Literal[False] | None = None
    ) -> dict[str, Any]: ...

    @overload
    def scheduler_info(
        self: Client[Literal[True]], n_workers: int = 5, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def scheduler_info(self, n_workers: int = 5, *, asynchronous: Literal[True]) -> Awaitable[dict[str, Any]]: ...

    @overload
    def scheduler_info(
        self, n_workers: int = 5, *, asynchronous: bool | None = None
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]: ...

    def scheduler_info(
        self, n_workers: int = 5, *, asynchronous: bool | None = None
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """The scheduler's identity and its workers (the first ``n_workers`` of them; all with -1)."""

        async def info_of() -> dict[str, Any]:
            info: dict[str, Any] = await self.link.checked_request(m.Empty(op="identity"), _CHECK_IDENTITY)
            self.link.services = info["services"]
            workers = info.get("workers")
            if n_workers >= 0 and isinstance(workers, dict) and len(workers) > n_workers:
                info = {**info, "workers": dict(itertools.islice(workers.items(), n_workers))}
            return info

        return self.sync(info_of, asynchronous=asynchronous)

    @overload
    def nthreads(
        self: Client[Literal[False]], workers: Any = None, *, asynchronous: Literal[False] | None = None
    ) -> dict[str, int]: ...

    @overload
    def nthreads(
        self: Client[Literal[True]], workers: Any = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[dict[str, int]]: ...

    @overload
    def nthreads(self, workers: Any = None, *, asynchronous: Literal[True]) -> Awaitable[dict[str, int]]: ...

    @overload
    def nthreads(
        self, workers: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, int] | Awaitable[dict[str, int]]: ...

    def nthreads(
        self, workers: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, int] | Awaitable[dict[str, int]]:
        """Threads per worker."""
        return self.sync(
            self.link.request, m.WorkersRequest(op="nthreads", workers=worker_list(workers)), asynchronous=asynchronous
        )

    ncores = nthreads

    @overload
    def who_has(
        self: Client[Literal[False]], futures: Any = None, *, asynchronous: Literal[False] | None = None
    ) -> dict[Key, list[str]]: ...

    @overload
    def who_has(
        self: Client[Literal[True]], futures: Any = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[dict[Key, list[str]]]: ...

    @overload
    def who_has(self, futures: Any = None, *, asynchronous: Literal[True]) -> Awaitable[dict[Key, list[str]]]: ...

    @overload
    def who_has(
        self, futures: Any = None, *, asynchronous: bool | None = None
    ) -> dict[Key, list[str]] | Awaitable[dict[Key, list[str]]]: ...

    def who_has(
        self, futures: Any = None, *, asynchronous: bool | None = None
    ) -> dict[Key, list[str]] | Awaitable[dict[Key, list[str]]]:
        """Which workers hold each key."""
        keys = None
        if futures is not None:
            flat: list[Future] = []
            collect_futures(futures, flat)
            keys = [f.key for f in flat]
        return self.sync(self.link.request, m.OptionalKeysRequest(op="who_has", keys=keys), asynchronous=asynchronous)

    @overload
    def has_what(
        self: Client[Literal[False]], workers: Any = None, *, asynchronous: Literal[False] | None = None
    ) -> dict[str, list[Key]]: ...

    @overload
    def has_what(
        self: Client[Literal[True]], workers: Any = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[dict[str, list[Key]]]: ...

    @overload
    def has_what(self, workers: Any = None, *, asynchronous: Literal[True]) -> Awaitable[dict[str, list[Key]]]: ...

    @overload
    def has_what(
        self, workers: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, list[Key]] | Awaitable[dict[str, list[Key]]]: ...

    def has_what(
        self, workers: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, list[Key]] | Awaitable[dict[str, list[Key]]]:
        """Which keys each worker holds."""
        return self.sync(
            self.link.request, m.WorkersRequest(op="has_what", workers=worker_list(workers)), asynchronous=asynchronous
        )

    @overload
    def processing(
        self: Client[Literal[False]], workers: Any = None, *, asynchronous: Literal[False] | None = None
    ) -> dict[str, list[Key]]: ...

    @overload
    def processing(
        self: Client[Literal[True]], workers: Any = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[dict[str, list[Key]]]: ...

    @overload
    def processing(self, workers: Any = None, *, asynchronous: Literal[True]) -> Awaitable[dict[str, list[Key]]]: ...

    @overload
    def processing(
        self, workers: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, list[Key]] | Awaitable[dict[str, list[Key]]]: ...

    def processing(
        self, workers: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, list[Key]] | Awaitable[dict[str, list[Key]]]:
        """Which keys each worker is running."""
        return self.sync(
            self.link.request,
            m.WorkersRequest(op="processing", workers=worker_list(workers)),
            asynchronous=asynchronous,
        )

    @overload
    def nbytes(
        self: Client[Literal[False]],
        keys: Any = None,
        summary: bool = True,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> dict[Key, int] | dict[str, int]: ...

    @overload
    def nbytes(
        self: Client[Literal[True]],
        keys: Any = None,
        summary: bool = True,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[dict[Key, int] | dict[str, int]]: ...

    @overload
    def nbytes(
        self, keys: Any = None, summary: bool = True, *, asynchronous: Literal[True]
    ) -> Awaitable[dict[Key, int] | dict[str, int]]: ...

    @overload
    def nbytes(
        self, keys: Any = None, summary: bool = True, *, asynchronous: bool | None = None
    ) -> dict[Key, int] | dict[str, int] | Awaitable[dict[Key, int] | dict[str, int]]: ...

    def nbytes(
        self, keys: Any = None, summary: bool = True, *, asynchronous: bool | None = None
    ) -> dict[Key, int] | dict[str, int] | Awaitable[dict[Key, int] | dict[str, int]]:
        """Bytes held per key; with ``summary``, per key prefix (``inc-<token>`` counts under ``inc``)."""

        async def nbytes_of() -> dict[Key, int] | dict[str, int]:
            per_key: dict[Key, int] = await self.link.request(m.OptionalKeysRequest(op="nbytes", keys=keys))
            if not summary:
                return per_key
            per_prefix: defaultdict[str, int] = defaultdict(int)
            for k, n in per_key.items():
                per_prefix[key_split(k)] += n
            return dict(per_prefix)

        return self.sync(nbytes_of, asynchronous=asynchronous)

    @overload
    def story(
        self: Client[Literal[False]], *keys_or_stimuli: Any, asynchronous: Literal[False] | None = None
    ) -> list[tuple[Any, ...]]: ...

    @overload
    def story(
        self: Client[Literal[True]], *keys_or_stimuli: Any, asynchronous: Literal[True] | None = None
    ) -> Awaitable[list[tuple[Any, ...]]]: ...

    @overload
    def story(self, *keys_or_stimuli: Any, asynchronous: Literal[True]) -> Awaitable[list[tuple[Any, ...]]]: ...

    @overload
    def story(
        self, *keys_or_stimuli: Any, asynchronous: bool | None = None
    ) -> list[tuple[Any, ...]] | Awaitable[list[tuple[Any, ...]]]: ...

    def story(
        self, *keys_or_stimuli: Any, asynchronous: bool | None = None
    ) -> list[tuple[Any, ...]] | Awaitable[list[tuple[Any, ...]]]:
        """The scheduler's transition log for these keys."""
        keys = [k.key if isinstance(k, TaskRef) else k for k in keys_or_stimuli]
        return self.sync(self.link.request, m.StoryRequest(op="story", keys=keys), asynchronous=asynchronous)

    @overload
    def get_task_stream(
        self: Client[Literal[False]],
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> TaskStreamResult: ...

    @overload
    def get_task_stream(
        self: Client[Literal[True]],
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[TaskStreamResult]: ...

    @overload
    def get_task_stream(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        *,
        asynchronous: Literal[True],
    ) -> Awaitable[TaskStreamResult]: ...

    @overload
    def get_task_stream(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        *,
        asynchronous: bool | None = None,
    ) -> TaskStreamResult | Awaitable[TaskStreamResult]: ...

    def get_task_stream(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        *,
        asynchronous: bool | None = None,
    ) -> TaskStreamResult | Awaitable[TaskStreamResult]:
        """The tasks that ran on the cluster: worker, key, and their compute and transfer intervals.

        The scheduler records tasks from the first time anyone asks (this
        call, :class:`~distributed.get_task_stream`, a performance report or
        the dashboard) on; earlier tasks are not in the stream.

        Parameters
        ----------
        start, stop
            Only tasks that ran between these times: ``time.time()`` values,
            or strings giving a time before now (``"60s"``, ``"500 ms"``).
        count
            At most this many records (the last ones; the first ones after
            ``start`` when it is given).
        plot
            ``True``: also return a bokeh figure of the records; ``"save"``:
            also save it as HTML in ``filename``.
        filename
            Where ``plot="save"`` writes the figure.
        bokeh_resources
            The bokeh ``Resources`` the saved file loads (bokeh's default when None).

        Returns
        -------
        The list of records (dicts with ``key``, ``worker``, ``status``,
        ``nbytes``, ``typename`` and ``startstops``: a list of
        ``{"action": "compute" | "transfer", "start", "stop"}``, transfers
        with their ``source``), and with ``plot`` the figure too.

        Examples
        --------
        >>> client.get_task_stream(start="10s")  # doctest: +SKIP
        [{'key': 'inc-...', 'worker': 'tcp://...', 'startstops': [...], ...}]
        """
        if plot not in (False, True, "save"):
            raise ValueError(f"plot must be True, False or 'save', got {plot!r}")

        async def fetch() -> TaskStreamResult:
            records: list[dict[str, Any]] = list(
                await self.link.request(
                    m.GetTaskStream(
                        op="get_task_stream", start=_time_before_now(start), stop=_time_before_now(stop), count=count
                    )
                )
            )
            if not plot:
                return records
            from distributed.dashboard.components.task_stream import task_stream_figure

            fig = task_stream_figure(records)
            if plot == "save":
                from bokeh.io import save
                from bokeh.resources import CDN

                save(fig, filename=filename, resources=bokeh_resources or CDN, title="Dask Task Stream")
            return records, fig

        return self.sync(fetch, asynchronous=asynchronous)

    @overload
    def profile(
        self: Client[Literal[False]],
        key: str | None = None,
        start: float | str | None = None,
        stop: float | str | None = None,
        workers: Any = None,
        merge_workers: bool = True,
        plot: bool | str = False,
        filename: str | None = None,
        server: bool = False,
        scheduler: bool = False,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> ProfileResult: ...

    @overload
    def profile(
        self: Client[Literal[True]],
        key: str | None = None,
        start: float | str | None = None,
        stop: float | str | None = None,
        workers: Any = None,
        merge_workers: bool = True,
        plot: bool | str = False,
        filename: str | None = None,
        server: bool = False,
        scheduler: bool = False,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[ProfileResult]: ...

    @overload
    def profile(
        self,
        key: str | None = None,
        start: float | str | None = None,
        stop: float | str | None = None,
        workers: Any = None,
        merge_workers: bool = True,
        plot: bool | str = False,
        filename: str | None = None,
        server: bool = False,
        scheduler: bool = False,
        *,
        asynchronous: Literal[True],
    ) -> Awaitable[ProfileResult]: ...

    @overload
    def profile(
        self,
        key: str | None = None,
        start: float | str | None = None,
        stop: float | str | None = None,
        workers: Any = None,
        merge_workers: bool = True,
        plot: bool | str = False,
        filename: str | None = None,
        server: bool = False,
        scheduler: bool = False,
        *,
        asynchronous: bool | None = None,
    ) -> ProfileResult | Awaitable[ProfileResult]: ...

    def profile(
        self,
        key: str | None = None,
        start: float | str | None = None,
        stop: float | str | None = None,
        workers: Any = None,
        merge_workers: bool = True,
        plot: bool | str = False,
        filename: str | None = None,
        server: bool = False,
        scheduler: bool = False,
        *,
        asynchronous: bool | None = None,
    ) -> ProfileResult | Awaitable[ProfileResult]:
        """The workers' statistical profile: where the threads running tasks spent their time.

        Each worker samples its task threads' stacks every
        ``distributed.worker.profile.interval`` (see :mod:`distributed.profile`).

        Parameters
        ----------
        key
            Only tasks of this key prefix (``"inc"`` for ``inc-<token>``).
        start, stop
            Only samples between these times (``time.time()`` values, or
            durations before now such as ``"10s"``), by whole profile cycles.
        workers
            Only these workers (addresses or names); all by default.
        merge_workers
            One tree for all workers (else a dict of trees by worker).
        plot
            ``True``: also return a bokeh figure; ``"save"``: also save it
            (in ``filename``, ``"dask-profile.html"`` by default).
        filename
            Save the figure here (implies ``plot``).
        server
            The workers' event loop threads instead of their task threads.
        scheduler
            The scheduler's event loop instead (sampled from the first such
            request on).

        Returns
        -------
        The profile: ``{"count", "children", "identifier", "description"}``,
        and the figure with ``plot``.
        """
        if plot not in (False, True, "save"):
            raise ValueError(f"plot must be True, False or 'save', got {plot!r}")
        if not merge_workers and (plot or filename):
            raise ValueError("Client.profile(merge_workers=False) returns a profile per worker: it cannot plot them")

        async def fetch() -> ProfileResult:
            state = await self.link.request(
                m.GetProfile(
                    op="profile",
                    key=key,
                    start=_time_before_now(start),
                    stop=_time_before_now(stop),
                    workers=worker_list(workers),
                    merge_workers=merge_workers,
                    server=server,
                    scheduler=scheduler,
                )
            )
            if not plot and filename is None:
                return state  # type: ignore[no-any-return]  # the scheduler's reply, a profile tree
            from distributed.dashboard.components.profile import profile_figure

            fig = profile_figure(state)
            out = filename if filename is not None else "dask-profile.html" if plot == "save" else None
            if out is not None:
                from bokeh.io import save
                from bokeh.resources import CDN

                save(fig, filename=out, resources=CDN, title="Dask Profile")
            return state, fig

        return self.sync(fetch, asynchronous=asynchronous)

    @overload
    def wait_for_workers(
        self: Client[Literal[False]], n_workers: int, timeout: Any = None, *, asynchronous: Literal[False] | None = None
    ) -> None: ...

    @overload
    def wait_for_workers(
        self: Client[Literal[True]], n_workers: int, timeout: Any = None, *, asynchronous: Literal[True] | None = None
    ) -> Awaitable[None]: ...

    @overload
    def wait_for_workers(
        self, n_workers: int, timeout: Any = None, *, asynchronous: Literal[True]
    ) -> Awaitable[None]: ...

    @overload
    def wait_for_workers(
        self, n_workers: int, timeout: Any = None, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None: ...

    def wait_for_workers(
        self, n_workers: int, timeout: Any = None, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None:
        """Wait until ``n_workers`` workers are connected."""
        t = parse_timedelta(timeout) if timeout is not None else None

        async def waiter() -> None:
            await asyncio.wait_for(self.link.request(m.WaitForWorkers(op="wait_for_workers", n_workers=n_workers)), t)

        return self.sync(waiter, asynchronous=asynchronous)

    @overload
    def retire_workers(
        self: Client[Literal[False]],
        workers: Any = None,
        close_workers: bool = True,
        *,
        asynchronous: Literal[False] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]: ...

    @overload
    def retire_workers(
        self: Client[Literal[True]],
        workers: Any = None,
        close_workers: bool = True,
        *,
        asynchronous: Literal[True] | None = None,
        **kwargs: Any,
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def retire_workers(
        self, workers: Any = None, close_workers: bool = True, *, asynchronous: Literal[True], **kwargs: Any
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def retire_workers(
        self, workers: Any = None, close_workers: bool = True, *, asynchronous: bool | None = None, **kwargs: Any
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]: ...

    def retire_workers(
        self, workers: Any = None, close_workers: bool = True, *, asynchronous: bool | None = None, **kwargs: Any
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Retire workers gracefully: the data only they hold moves to other workers first.

        Parameters
        ----------
        workers
            Addresses (or names) of the workers to retire.  When None, the
            scheduler chooses them from ``n``, ``target``, ``minimum`` and
            ``memory_ratio`` (by default: idle workers, while the others keep
            twice the memory the data needs).
        close_workers
            Also close the retired workers (else they stay up, out of the cluster).
        **kwargs
            As the scheduler's ``retire_workers``: ``names`` (workers by name),
            ``n``, ``target``, ``minimum``, ``memory_ratio``, ``remove``
            (forget the workers at once; default True), ``stimulus_id`` and
            ``key``: a callable ``WorkerState -> group`` choosing whole groups
            of workers.  It is pickled and run on the scheduler, as with
            :meth:`run_on_scheduler`.  ``attribute`` does not apply (the
            result is by address) and is refused.

        Returns
        -------
        dict
            The identity of each retired worker, by address.  A worker whose
            only copies of some data can go nowhere (no other running worker)
            is not retired and is not in it.
        """
        if "attribute" in kwargs:
            raise TypeError(
                "Client.retire_workers(attribute=...): the result is by address; "
                "Scheduler.workers_to_close(attribute=...) chooses workers by another attribute"
            )
        allowed = {"names", "n", "target", "minimum", "memory_ratio", "remove", "stimulus_id", "key"}
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise TypeError(f"Client.retire_workers() got unexpected keyword arguments {unknown}")
        msg = m.RetireWorkers(op="retire_workers", workers=worker_list(workers), close_workers=close_workers)
        if kwargs.get("names") is not None:
            names = kwargs["names"]
            msg["names"] = [names] if isinstance(names, (str, int)) else list(names)
        for field in ("n", "target", "minimum"):
            if kwargs.get(field) is not None:
                msg[field] = int(kwargs[field])
        if kwargs.get("memory_ratio") is not None:
            msg["memory_ratio"] = float(kwargs["memory_ratio"])
        if kwargs.get("key") is not None:
            if not callable(kwargs["key"]):
                raise TypeError(
                    f"Client.retire_workers(key={kwargs['key']!r}): it must be a callable taking a WorkerState"
                )
            msg["key"] = Serialize(kwargs["key"])
        if "remove" in kwargs:
            msg["remove"] = bool(kwargs["remove"])
        if kwargs.get("stimulus_id") is not None:
            msg["stimulus_id"] = str(kwargs["stimulus_id"])
        return self.sync(self._retire_workers, msg, asynchronous=asynchronous)

    async def _retire_workers(self, msg: m.RetireWorkers) -> dict[str, Any]:
        retired: dict[str, Any] = await self.link.request(msg)
        # Where the keys of the retired workers went comes on the stream, which may trail the reply:
        # without it, a gather would first try a worker that left and wait seconds for it to fail.
        await self.link.stream_handled()
        return retired

    # -- replicas -----------------------------------------------------------------------------
    @overload
    def replicate(
        self: Client[Literal[False]],
        futures: Any,
        n: int | None = None,
        workers: Any = None,
        branching_factor: int = 2,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> None: ...

    @overload
    def replicate(
        self: Client[Literal[True]],
        futures: Any,
        n: int | None = None,
        workers: Any = None,
        branching_factor: int = 2,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[None]: ...

    @overload
    def replicate(
        self,
        futures: Any,
        n: int | None = None,
        workers: Any = None,
        branching_factor: int = 2,
        *,
        asynchronous: Literal[True],
    ) -> Awaitable[None]: ...

    @overload
    def replicate(
        self,
        futures: Any,
        n: int | None = None,
        workers: Any = None,
        branching_factor: int = 2,
        *,
        asynchronous: bool | None = None,
    ) -> Awaitable[None] | None: ...

    def replicate(
        self,
        futures: Any,
        n: int | None = None,
        workers: Any = None,
        branching_factor: int = 2,
        *,
        asynchronous: bool | None = None,
    ) -> Awaitable[None] | None:
        """Have ``n`` workers hold a copy of each of these futures' results.

        Parameters
        ----------
        futures : futures or a persisted collection
            Waited for first; each must finish without error.
        n : int, optional
            Copies wanted among ``workers``; every one of them when None.  A
            key held by more of them loses the extra copies.
        workers : addresses or names, optional
            The workers that may hold the copies (all by default); copies on
            others are left alone.
        branching_factor : int
            New copies each holder serves per round: copies spread as a tree.

        Raises
        ------
        ValueError
            ``n`` or ``branching_factor`` below 1, an unknown worker, or a key
            not in memory (erred, cancelled or released).

        Examples
        --------
        >>> x = c.submit(func, *args)  # doctest: +SKIP
        >>> c.replicate([x], n=2)  # doctest: +SKIP
        """
        if n is not None and n < 1:
            raise ValueError(f"replicate(n={n}): n must be at least 1 (or None for every worker)")
        if branching_factor < 1:
            raise ValueError(f"replicate(branching_factor={branching_factor}): it must be at least 1")
        targets = self.futures_of(futures)
        request = m.Replicate(
            op="replicate",
            keys=[],
            n=n,
            workers=worker_list(workers),
            branching_factor=branching_factor,
        )

        async def replicate() -> None:
            await self._finished(targets)
            request["keys"] = list(dict.fromkeys(f.key for f in targets))
            await self.link.request(request)

        return self.sync(replicate, asynchronous=asynchronous)

    @overload
    def rebalance(
        self: Client[Literal[False]],
        futures: Any = None,
        workers: Any = None,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> None: ...

    @overload
    def rebalance(
        self: Client[Literal[True]],
        futures: Any = None,
        workers: Any = None,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[None]: ...

    @overload
    def rebalance(
        self, futures: Any = None, workers: Any = None, *, asynchronous: Literal[True]
    ) -> Awaitable[None]: ...

    @overload
    def rebalance(
        self, futures: Any = None, workers: Any = None, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None: ...

    def rebalance(
        self, futures: Any = None, workers: Any = None, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None:
        """Even out the workers' memory by moving data between them.

        Each worker's memory is measured as ``distributed.worker.memory.rebalance.measure``
        says (by default results in memory plus unmanaged memory that has lasted
        ``distributed.worker.memory.recent-to-old-time``).  Workers above the
        mean by more than half of ``sender-recipient-gap`` and at or above
        ``sender-min`` give their least recently inserted keys to workers below
        it by more than half the gap and under ``recipient-max`` (fractions of
        each worker's ``memory_limit``; a worker without one has no thresholds).
        Each key is copied before its old holder frees it, so nothing is lost;
        a key may stay put when no worker has room for it.

        Parameters
        ----------
        futures : futures or a persisted collection, optional
            Only these keys move (waited for first); all data in memory when None.
        workers : addresses or names, optional
            Only these workers give and receive, and the mean is theirs (all by default).

        Raises
        ------
        ValueError
            An unknown worker, or one of ``futures`` not in memory.
        RuntimeError
            Some copies did not land (a recipient left, or did not confirm in
            time); those keys stay where they were.
        """
        targets = None if futures is None else self.futures_of(futures)
        request = m.Rebalance(op="rebalance", keys=None, workers=worker_list(workers))

        async def rebalance() -> None:
            if targets is not None:
                await self._finished(targets)
                request["keys"] = list(dict.fromkeys(f.key for f in targets))
            await self.link.request(request)

        return self.sync(rebalance, asynchronous=asynchronous)

    async def _finished(self, futures: list[Future]) -> None:
        """Wait until these futures are done, whatever their outcome."""
        for f in futures:
            if not f.done():
                await f.state.event().wait()

    # -- restarts -----------------------------------------------------------------------------
    @overload
    def restart(
        self: Client[Literal[False]],
        timeout: Any = no_default,
        wait_for_workers: bool = True,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> None: ...

    @overload
    def restart(
        self: Client[Literal[True]],
        timeout: Any = no_default,
        wait_for_workers: bool = True,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[None]: ...

    @overload
    def restart(
        self, timeout: Any = no_default, wait_for_workers: bool = True, *, asynchronous: Literal[True]
    ) -> Awaitable[None]: ...

    @overload
    def restart(
        self, timeout: Any = no_default, wait_for_workers: bool = True, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None: ...

    def restart(
        self, timeout: Any = no_default, wait_for_workers: bool = True, *, asynchronous: bool | None = None
    ) -> Awaitable[None] | None:
        """Restart every worker process (through its nanny) and cancel every future of every client.

        Parameters
        ----------
        timeout
            Seconds (or a string like ``"30s"``) to wait for the workers to come
            back (default: four times the connect timeout); TimeoutError past it.
        wait_for_workers
            Wait until the new worker processes joined (else return once each
            nanny started replacing its worker).

        Raises
        ------
        ValueError
            When a worker has no nanny (nothing would start it again); nothing is
            cancelled then.
        """
        t = self._restart_timeout(timeout)

        async def restart() -> None:
            await self.link.stream_handled()
            await self.link.request(m.Restart(op="restart", timeout=t, wait_for_workers=wait_for_workers))
            reason = "The scheduler restarted its workers (Client.restart)"
            for fs in list(self.futures.values()):
                if fs.status != "cancelled":
                    fs.cancel(reason)

        return self.sync(restart, asynchronous=asynchronous)

    def _restart_timeout(self, timeout: Any) -> float:
        if timeout is no_default or timeout is None:
            return 4 * self._timeout
        return float(parse_timedelta(timeout) or 0)

    @overload
    def restart_workers(
        self: Client[Literal[False]],
        workers: list[str],
        timeout: Any = no_default,
        raise_for_error: bool = True,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> dict[str, Any]: ...

    @overload
    def restart_workers(
        self: Client[Literal[True]],
        workers: list[str],
        timeout: Any = no_default,
        raise_for_error: bool = True,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def restart_workers(
        self,
        workers: list[str],
        timeout: Any = no_default,
        raise_for_error: bool = True,
        *,
        asynchronous: Literal[True],
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def restart_workers(
        self,
        workers: list[str],
        timeout: Any = no_default,
        raise_for_error: bool = True,
        *,
        asynchronous: bool | None = None,
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]: ...

    def restart_workers(
        self,
        workers: list[str],
        timeout: Any = no_default,
        raise_for_error: bool = True,
        *,
        asynchronous: bool | None = None,
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Restart these workers' processes (addresses or names) through their nannies.

        Their tasks run again elsewhere or on the new processes; other workers
        and the futures stay.  Returns ``{worker: "OK"}``.

        Raises
        ------
        ValueError
            When a worker is unknown or has no nanny.
        NotImplementedError
            For ``raise_for_error=False`` (errors are always raised).
        """
        if not raise_for_error:
            raise NotImplementedError("Client.restart_workers(raise_for_error=False) is not supported yet")
        names = [str(w) for w in (worker_list(workers) or [])]
        t = self._restart_timeout(timeout)

        async def restart() -> dict[str, Any]:
            reply = await self.link.request(m.RestartWorkers(op="restart_workers", workers=names, timeout=t))
            assert isinstance(reply, dict)
            return reply

        return self.sync(restart, asynchronous=asynchronous)

    def futures_of(self, collection: Any) -> list[Future]:
        """The futures held in a collection."""
        from distributed.client.waiting import futures_of

        return futures_of(collection, client=self)

    @overload
    def get_versions(
        self: Client[Literal[False]],
        check: bool = False,
        packages: Any = None,
        *,
        asynchronous: Literal[False] | None = None,
    ) -> dict[str, Any]: ...

    @overload
    def get_versions(
        self: Client[Literal[True]],
        check: bool = False,
        packages: Any = None,
        *,
        asynchronous: Literal[True] | None = None,
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def get_versions(
        self, check: bool = False, packages: Any = None, *, asynchronous: Literal[True]
    ) -> Awaitable[dict[str, Any]]: ...

    @overload
    def get_versions(
        self, check: bool = False, packages: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]: ...

    def get_versions(
        self, check: bool = False, packages: Any = None, *, asynchronous: bool | None = None
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Versions of the main packages here."""
        refuse_unsupported("Client.get_versions", check=check, packages=bool(packages))
        import sys

        from distributed.dask_api import dask_version

        async def versions() -> dict[str, Any]:
            return {"client": {"python": sys.version.split()[0], "dask": dask_version()}}

        return self.sync(versions, asynchronous=asynchronous)


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
        >>> await client.scheduler.call(m.LockLocked(op="lock_locked", name="x"))  # doctest: +SKIP
        False
        """
        return await self._client.link.request(msg)


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


_CHECK_IDENTITY: Final = checker(m.SchedulerIdentity)


async def _noop() -> None:
    return None


def _as_log_records(records: Any) -> list[tuple[str, str]]:
    """Log records as they arrived (sequences) as ``(level, message)`` tuples."""
    return [(str(r[0]), str(r[1])) for r in records or ()]


def _time_before_now(t: float | str | None) -> float | None:
    """A ``time.time()`` value from a time or a duration before now (``"60s"``)."""
    if isinstance(t, str):
        return time.time() - parse_timedelta(t)
    return t


# -- module functions ---------------------------------------------------------------------
def get_client(address: str | None = None, timeout: float | str | None = None, resolve_address: bool = True) -> Client:
    """The client to use here: the worker's own inside a task, else the default one.

    Parameters
    ----------
    address
        The scheduler the client must be connected to.  Outside a task, a
        default client of another scheduler is not returned: a new client
        of ``address`` is made instead.
    timeout
        How long connecting a new client may take.
    resolve_address
        Compare ``address`` with the default client's scheduler after
        resolving its host name (``"localhost:8786"`` matches
        ``"tcp://127.0.0.1:8786"``); with False, compare the strings as given.

    Raises
    ------
    ValueError
        When there is no client (dask reads this as "no distributed scheduler").
    """
    worker = current_worker()
    if worker is not None:
        client = worker.task_client(timeout=parse_timedelta(timeout) if timeout is not None else None)
        if not isinstance(client, Client):
            raise TypeError(f"The worker's client is a {type(client).__name__}, not a Client")
        return client
    client = get_default_client()
    if client is not None and (address is None or _same_scheduler(client, address, resolve_address)):
        return client
    if address is not None:
        return Client(address, timeout=timeout)
    raise ValueError(
        "No clients found\n"
        "Start a client and point it to the scheduler address\n"
        "  from distributed import Client\n"
        "  client = Client('ip-addr-of-scheduler:8786')\n"
    )


def _same_scheduler(client: Client, address: str, resolve: bool) -> bool:
    """Whether ``client`` is connected to the scheduler at ``address``."""
    if not resolve:
        return client.scheduler_address == address
    try:
        return resolve_address(client.scheduler_address or "") == resolve_address(address)
    except (OSError, ValueError):  # an address that does not resolve names no scheduler we know
        return False


def get_task_metadata() -> Any:
    """Not supported yet."""
    raise NotImplementedError("get_task_metadata is not supported yet")


@atexit.register
def _close_global_clients() -> None:
    for c in list(Client._instances):
        try:
            if c.status not in ("closed",) and not c.asynchronous:
                c.close()
        except Exception:
            pass


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
