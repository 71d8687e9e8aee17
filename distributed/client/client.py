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

The class is two: :class:`~distributed.client.base.ClientBase` (the parts
above, the life cycle, and the calls that run work and bring back results)
and :class:`Client`, which adds the operations on the cluster: queries,
functions run on workers, plugins, datasets, events, logs, and changing the
workers.  Both write each method once for synchronous and asynchronous
clients (:mod:`~distributed.client.dual`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, overload

from dask._task_spec import TaskRef
from dask.typing import NoDefault, no_default
from dask.utils import key_split, parse_timedelta

from distributed.client.amm import AMMClientProxy
from distributed.client.base import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    AsyncT,
    ProfileResult,
    SchedulerHandle,
    TaskStreamResult,
)
from distributed.client.debugging import ClientDebugging
from distributed.client.defaults import default_client, get_default_client, global_clients
from distributed.client.dual import Work, dual_method
from distributed.client.executor import ClientExecutor
from distributed.client.future import Future
from distributed.client.graphs import (
    worker_list,
)
from distributed.comm import resolve_address
from distributed.core import rebuild_exception
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import checker
from distributed.protocol.serialize import Serialize, unwrap
from distributed.security import Security
from distributed.task_context import context_worker
from distributed.utils import wait_for, write_json_whole
from distributed.widgets import SchedulerInfo

if TYPE_CHECKING:
    from distributed.client.datasets import Datasets

logger = logging.getLogger(__name__)

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "Client",
    "Future",
    "SchedulerHandle",
    "default_client",
    "get_client",
    "get_default_client",
    "get_task_metadata",
    "global_clients",
]

T = TypeVar("T")

_CHECK_IDENTITY: Final = checker(m.SchedulerIdentity)


class Client(ClientDebugging[AsyncT]):
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
        False: results and scattered data go through the scheduler (for a
        client that cannot reach the workers' addresses); None (default:
        ``distributed.client.direct-to-workers``) or True: straight between
        the client and the workers.
    connection_limit
        Most connections open at once (to workers).
    security
        A :class:`~distributed.security.Security` (or a dict of its keywords):
        the TLS credentials of the ``client`` role.  Default: the cluster's
        when given a cluster object, else from config.  ``True`` starts the
        local cluster (no address given) with :meth:`Security.temporary`.
    serializers
        The serializer families the data this client scatters may travel as,
        tried in order (default: ``dask``, then ``pickle``).  An object none of
        them takes is refused with a ``SerializationError``.
    deserializers
        The families the data this client gathers may come in (default: those
        of ``serializers``; when neither is given, any); data in another one
        raises ``TypeError``.
    heartbeat_interval
        Time between the client's heartbeats to the scheduler (a number is
        milliseconds, as in dask; default ``distributed.client.heartbeat``, 5 s;
        0 sends none).
    extensions
        Parts of the client made with it: ``{name: factory}``, each called
        with the client before it connects (``client.extensions[name]``).
    **kwargs
        Passed to ``LocalCluster`` when no address is given (refused otherwise).

    Examples
    --------
    >>> client = Client("tcp://127.0.0.1:8786")  # doctest: +SKIP
    >>> client.submit(lambda x: x + 1, 10).result()  # doctest: +SKIP
    11
    """

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
        serializers: Sequence[str] | None = None,
        deserializers: Sequence[str] | None = None,
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
        serializers: Sequence[str] | None = None,
        deserializers: Sequence[str] | None = None,
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
        serializers: Sequence[str] | None = None,
        deserializers: Sequence[str] | None = None,
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
        serializers: Sequence[str] | None = None,
        deserializers: Sequence[str] | None = None,
        extensions: Any = None,
        direct_to_workers: bool | None = None,
        connection_limit: int = 512,
        _in_worker: bool = False,
        **kwargs: Any,
    ) -> None:
        """Connect to a scheduler (see the class docstring for the parameters)."""
        super().__init__(
            address,
            loop,
            timeout,
            set_as_default,
            scheduler_file,
            security,
            asynchronous,
            name,
            heartbeat_interval,
            serializers,
            deserializers,
            extensions,
            direct_to_workers,
            connection_limit,
            _in_worker,
            **kwargs,
        )

    # -- running functions ----------------------------------------------------------------

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

    @dual_method
    def run_on_scheduler(self, /, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Work[Any]:
        """Run ``function`` on the scheduler; a ``dask_scheduler`` argument receives it."""
        return functools.partial(self._run_on_scheduler, function, *args, **kwargs)

    # -- plugins --------------------------------------------------------------------------

    @dual_method
    def register_plugin(
        self, plugin: Any, name: str | None = None, idempotent: bool | None = None
    ) -> Work[str | dict[str, Any]]:
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
            return functools.partial(
                self.link.request,
                m.RegisterPlugin(
                    op="register_scheduler_plugin", plugin=Serialize(plugin), name=name, idempotent=idempotent
                ),
            )
        if isinstance(plugin, WorkerPlugin):
            return functools.partial(
                self._worker_plugin_request,
                m.RegisterWorkerPlugin(
                    op="register_worker_plugin", plugin=Serialize(plugin), name=name, idempotent=idempotent
                ),
            )
        if isinstance(plugin, NannyPlugin):
            return functools.partial(
                self._worker_plugin_request,
                m.RegisterNannyPlugin(
                    op="register_nanny_plugin", plugin=Serialize(plugin), name=name, idempotent=idempotent
                ),
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

    @dual_method
    def unregister_worker_plugin(self, name: str, nanny: bool | None = None) -> Work[dict[str, Any]]:
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
        return functools.partial(self._worker_plugin_request, msg)

    @dual_method
    def unregister_scheduler_plugin(self, name: str) -> Work[str]:
        """Remove a scheduler plugin."""
        return functools.partial(self.link.request, m.UnregisterPlugin(op="unregister_scheduler_plugin", name=name))

    # -- published datasets, events, uploaded files, logs ---------------------------------
    @dual_method
    def publish_dataset(self, /, *args: Any, name: Any = None, override: bool = False, **kwargs: Any) -> Work[None]:
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
        return functools.partial(publish, self, datasets, override)

    @dual_method
    def unpublish_dataset(self, name: Any) -> Work[None]:
        """Remove the published dataset ``name``: its futures' results may go once no one else holds them."""
        return functools.partial(self.link.request, m.PublishDelete(op="publish_delete", name=name))

    @dual_method
    def list_datasets(self) -> Work[list[Any]]:
        """The names of the published datasets."""

        async def names() -> list[Any]:
            return list(await self.link.request(m.PublishList(op="publish_list")))

        return names

    @dual_method
    def get_dataset(self, name: Any, default: Any = no_default) -> Work[Any]:
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

        return functools.partial(get_dataset, self, name, default)

    @property
    def datasets(self) -> Datasets:
        """The published datasets as a mapping: ``client.datasets["x"] = df``, ``del``, ``in``, ``len``."""
        from distributed.client.datasets import Datasets

        return Datasets(self)

    @dual_method
    def log_event(self, topic: str | Collection[str], msg: Any) -> Work[None]:
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
        return functools.partial(self.link.request, m.LogEvent(op="log_event", topic=topics, msg=msg))

    def forward_logging(self, logger_name: str | None = None, level: int = logging.NOTSET) -> Any:
        """Log here what workers log: records of ``logger_name`` (None: all) at ``level`` and above.

        Each record a worker logs (now, and on workers that join later) is sent
        to this client and handled by its own logger of the same name, so it
        shows wherever this process's logging shows it.
        """
        from distributed.diagnostics.plugin import ForwardLoggingPlugin

        plugin = ForwardLoggingPlugin(logger_name, level, FORWARDED_LOGGING_TOPIC)
        name = _forwarding_plugin_name(logger_name)
        self.subscribe_topic(FORWARDED_LOGGING_TOPIC, _log_forwarded_record)
        return self.register_plugin(plugin, name=name)

    def unforward_logging(self, logger_name: str | None = None) -> Any:
        """Stop :meth:`forward_logging` of ``logger_name``."""
        return self.unregister_worker_plugin(_forwarding_plugin_name(logger_name))

    @dual_method
    def get_events(self, topic: str | None = None) -> Work[Any]:
        """The events the scheduler keeps: of ``topic`` as ``((time, msg), ...)``, oldest first.

        With no topic, those of every topic in a dict by topic.
        """

        async def events() -> Any:
            reply = await self.link.request(m.GetEvents(op="events", topic=topic))
            if topic is not None:
                return tuple(tuple(e) for e in reply)
            return {t: tuple(tuple(e) for e in log) for t, log in reply.items()}

        return events

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

    @dual_method
    def upload_file(self, filename: str, load: bool = True) -> Work[str | dict[str, Any]]:
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
        return Client.register_plugin.body(self, plugin, name=f"{filename}{uuid.uuid4()}")

    @dual_method
    def register_worker_callbacks(self, setup: Callable[..., Any] | None = None) -> Work[str | dict[str, Any]]:
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
        return Client.register_plugin.body(self, WorkerSetupCallback(setup))

    @dual_method
    def write_scheduler_file(self, scheduler_file: str) -> Work[None]:
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
            info = await self.scheduler_info(asynchronous=True)
            write_json_whole(scheduler_file, info, default=str)

        return write

    @dual_method
    def get_scheduler_logs(self, n: int | None = None) -> Work[list[tuple[str, str]]]:
        """The scheduler's recent log records as ``(level, message)``, oldest first (the last ``n``)."""

        async def logs() -> list[tuple[str, str]]:
            return _as_log_records(await self.link.request(m.GetLogs(op="get_logs", n=n)))

        return logs

    @dual_method
    def get_worker_logs(
        self, n: int | None = None, workers: Collection[str] | None = None, nanny: bool = False
    ) -> Work[dict[str, list[tuple[str, str]]]]:
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

        return logs

    # -- information ----------------------------------------------------------------------
    @dual_method
    def scheduler_info(self, n_workers: int = 5) -> Work[dict[str, Any]]:
        """The scheduler's identity and its workers (the first ``n_workers`` of them; all with -1)."""

        async def info_of() -> dict[str, Any]:
            request = m.IdentityRequest(op="identity", n_workers=n_workers)
            info: dict[str, Any] = await self.link.checked_request(request, _CHECK_IDENTITY)
            self.link.services = info["services"]
            workers = info.get("workers")
            if n_workers >= 0 and isinstance(workers, dict) and len(workers) > n_workers:
                # An older scheduler lists them all.
                info = {**info, "workers": dict(itertools.islice(workers.items(), n_workers))}
            self._scheduler_identity = info
            return SchedulerInfo(info)  # a dict that a notebook shows as HTML

        return info_of

    @dual_method
    def nthreads(self, workers: Any = None) -> Work[dict[str, int]]:
        """Threads per worker."""
        return functools.partial(self.link.request, m.WorkersRequest(op="nthreads", workers=worker_list(workers)))

    ncores = nthreads

    @dual_method
    def who_has(self, futures: Any = None) -> Work[dict[Key, list[str]]]:
        """Which workers hold each key: of ``futures`` (futures, or collections holding them), else of all."""
        keys = None
        if futures is not None:
            keys = [f.key for f in self.futures_of(futures)]
        return functools.partial(self.link.request, m.OptionalKeysRequest(op="who_has", keys=keys))

    @dual_method
    def has_what(self, workers: Any = None) -> Work[dict[str, list[Key]]]:
        """Which keys each worker holds."""
        return functools.partial(self.link.request, m.WorkersRequest(op="has_what", workers=worker_list(workers)))

    @dual_method
    def processing(self, workers: Any = None) -> Work[dict[str, list[Key]]]:
        """Which keys each worker is running."""
        return functools.partial(self.link.request, m.WorkersRequest(op="processing", workers=worker_list(workers)))

    @dual_method
    def nbytes(self, keys: Any = None, summary: bool = True) -> Work[dict[Key, int] | dict[str, int]]:
        """Bytes held per key; with ``summary``, per key prefix (``inc-<token>`` counts under ``inc``)."""

        async def nbytes_of() -> dict[Key, int] | dict[str, int]:
            per_key: dict[Key, int] = await self.link.request(m.OptionalKeysRequest(op="nbytes", keys=keys))
            if not summary:
                return per_key
            per_prefix: defaultdict[str, int] = defaultdict(int)
            for k, n in per_key.items():
                per_prefix[key_split(k)] += n
            return dict(per_prefix)

        return nbytes_of

    @dual_method
    def story(self, /, *keys_or_stimuli: Any, on_error: str = "raise") -> Work[list[tuple[Any, ...]]]:
        """The cluster's story of these keys: the scheduler's transitions, then each worker's.

        Each entry is ``("scheduler", key, start, finish, recommendations,
        stimulus_id, timestamp)`` or ``(worker address, *the worker's entry)``,
        as in dask.

        Parameters
        ----------
        on_error
            ``"raise"``: a part that cannot answer raises its error;
            ``"ignore"``: its entries are left out.

        Raises
        ------
        ValueError
            For another ``on_error``.
        """
        if on_error not in ("raise", "ignore"):
            raise ValueError(f"on_error must be 'raise' or 'ignore', got {on_error!r}")
        keys = [k.key if isinstance(k, TaskRef) else k for k in keys_or_stimuli]
        request = m.StoryRequest(op="story", keys=keys)

        async def part(where: str, ask: Awaitable[Any]) -> list[tuple[Any, ...]]:
            try:
                return [(where, *entry) for entry in await ask]
            except Exception:
                if on_error == "raise":
                    raise
                return []

        async def cluster_story() -> list[tuple[Any, ...]]:
            told = await part("scheduler", self.link.request(request))
            workers = await self.link.request(m.WorkersRequest(op="nthreads", workers=None))
            for entries in await asyncio.gather(*(part(w, self.pool.call(w, request)) for w in sorted(workers))):
                told.extend(entries)
            return told

        return cluster_story

    @dual_method
    def get_task_stream(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
    ) -> Work[TaskStreamResult]:
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

        return fetch

    @dual_method
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
    ) -> Work[ProfileResult]:
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

        return fetch

    @dual_method
    def wait_for_workers(self, n_workers: int, timeout: Any = None) -> Work[None]:
        """Wait until ``n_workers`` workers are connected.

        Raises
        ------
        ValueError
            When ``n_workers`` is not a positive integer.
        TimeoutError
            After ``timeout``, saying how many workers had arrived.
        """
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"wait_for_workers: n_workers must be a positive integer, got {n_workers!r}")
        t = parse_timedelta(timeout) if timeout is not None else None

        async def waiter() -> None:
            try:
                await wait_for(self.link.request(m.WaitForWorkers(op="wait_for_workers", n_workers=n_workers)), t)
            except TimeoutError:
                info = await self.link.checked_request(m.Empty(op="identity"), _CHECK_IDENTITY)
                arrived = sum(1 for w in info["workers"].values() if w.get("status", "running") == "running")
                raise TimeoutError(
                    f"Only {arrived} of the {n_workers} workers waited for had arrived after {t} s"
                ) from None

        return waiter

    @dual_method
    def retire_workers(self, /, workers: Any = None, close_workers: bool = True, **kwargs: Any) -> Work[dict[str, Any]]:
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
        return functools.partial(self._retire_workers, msg)

    async def _retire_workers(self, msg: m.RetireWorkers) -> dict[str, Any]:
        retired: dict[str, Any] = await self.link.request(msg)
        # Where the keys of the retired workers went comes on the stream, which may trail the reply:
        # without it, a gather would first try a worker that left and wait seconds for it to fail.
        await self.link.stream_handled()
        return retired

    # -- replicas -----------------------------------------------------------------------------
    @dual_method
    def replicate(
        self, futures: Any, n: int | None = None, workers: Any = None, branching_factor: int = 2
    ) -> Work[None]:
        """Have ``n`` workers hold a copy of each of these futures' results.

        The active memory manager's default policy, ``ReduceReplicas``, drops
        copies no task needs at its next pass (within
        ``distributed.scheduler.active-memory-manager.interval``), as in
        dask.distributed: to keep the copies, leave that policy out of
        ``distributed.scheduler.active-memory-manager.policies`` or stop the
        manager (``client.amm.stop()``, or ``...active-memory-manager.start: false``).

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

        return replicate

    @dual_method
    def rebalance(self, futures: Any = None, workers: Any = None) -> Work[None]:
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

        return rebalance

    async def _finished(self, futures: list[Future]) -> None:
        """Wait until these futures are done, whatever their outcome."""
        for f in futures:
            if not f.done():
                await f.state.event().wait()

    # -- restarts -----------------------------------------------------------------------------
    @dual_method
    def restart(self, timeout: Any = no_default, wait_for_workers: bool = True) -> Work[None]:
        """Restart every worker process (through its nanny) and cancel every future of every client.

        Parameters
        ----------
        timeout
            Seconds (or a string like ``"30s"``) to wait for the workers to come
            back (default: four times the connect timeout); TimeoutError past it.
        wait_for_workers
            Wait until the new worker processes joined (else return once each
            nanny started replacing its worker).

        A worker without a nanny is closed, as in dask: whatever deployed it
        may start another, which ``wait_for_workers`` then waits for.

        Raises
        ------
        TimeoutError
            When the workers are not back within ``timeout`` (the message says how many are).
        """
        t = self._restart_timeout(timeout)

        async def restart() -> None:
            await self.link.stream_handled()
            await self.link.request(m.Restart(op="restart", timeout=t, wait_for_workers=wait_for_workers))
            reason = "The scheduler restarted its workers (Client.restart)"
            for fs in list(self.futures.values()):
                if fs.status != "cancelled":
                    fs.cancel(reason)

        return restart

    def _restart_timeout(self, timeout: Any) -> float:
        if timeout is no_default or timeout is None:
            return 4 * self._timeout
        return float(parse_timedelta(timeout) or 0)

    @dual_method
    def restart_workers(
        self, workers: list[str], timeout: Any = no_default, raise_for_error: bool = True
    ) -> Work[dict[str, Any]]:
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

        return restart

    def get_executor(self, **kwargs: Any) -> ClientExecutor:
        """This client as a :class:`concurrent.futures.Executor`.

        The executor is a :class:`~distributed.client.executor.ClientExecutor`.

        ``kwargs`` (``pure``, ``workers``, ``resources``, ``allow_other_workers``,
        ``retries``) apply to every call made through it.
        """
        return ClientExecutor(self, **kwargs)

    @property
    def amm(self) -> AMMClientProxy:
        """The scheduler's active memory manager: ``client.amm.start()``, ``stop()``, ``run_once()``, ``running()``."""
        return AMMClientProxy(self)

    def futures_of(self, collection: Any) -> list[Future]:
        """The futures held in a collection."""
        from distributed.client.waiting import futures_of

        return futures_of(collection, client=self)


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
    worker = context_worker()
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


class get_task_metadata:
    """Collect the metadata and final state of the tasks computed inside a ``with`` block.

    The tasks are those the current client asks for inside the block; their
    ``TaskState.metadata`` and final state (``memory`` or ``erred``) are read
    on the scheduler as each finishes.

    Examples
    --------
    >>> with get_task_metadata() as tasks:  # doctest: +SKIP
    ...     x.compute()
    >>> tasks.state  # doctest: +SKIP
    {'x': 'memory'}
    """

    def __init__(self) -> None:
        self.name = f"task-metadata-{uuid.uuid4().hex}"
        #: By key, each task's metadata (after the block).
        self.metadata: dict[Key, Any] | None = None
        #: By key, each task's final state (after the block).
        self.state: dict[Key, str] | None = None

    async def __aenter__(self) -> get_task_metadata:
        await get_client().scheduler.start_task_metadata(name=self.name)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        reply = await get_client().scheduler.stop_task_metadata(name=self.name)
        self.metadata = dict(reply["metadata"])
        self.state = dict(reply["state"])

    def __enter__(self) -> get_task_metadata:
        get_client().sync(self.__aenter__)
        return self

    def __exit__(self, *exc_info: object) -> None:
        get_client().sync(self.__aexit__)


#: The event topic of records forwarded by :meth:`Client.forward_logging`.
FORWARDED_LOGGING_TOPIC = "forwarded-logging"


def _forwarding_plugin_name(logger_name: str | None) -> str:
    return f"forward-logging-{logger_name}" if logger_name else "forward-logging"


def _log_forwarded_record(event: tuple[float, Any]) -> None:
    """A record a worker forwarded, handled by this process's logger of its name."""
    _, fields = event
    if isinstance(fields, dict):
        record = logging.makeLogRecord(fields)
        logging.getLogger(record.name).handle(record)
