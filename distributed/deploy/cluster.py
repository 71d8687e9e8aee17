"""The cluster base class: a scheduler plus workers, managed as one object.

Theory of operation
-------------------
A :class:`Cluster` does its work in coroutines on one event loop, ``loop``:

* ``asynchronous=True``: the caller's loop.  The cluster is started by
  awaiting it (``await cluster`` or ``async with cluster``) and its methods
  return awaitables.
* ``asynchronous=False``: a loop of its own in a daemon thread (or a loop
  passed in that already runs in another thread).  Methods block until the
  work on the loop is done; :meth:`close` stops the thread.

Subclasses implement three coroutines: :meth:`_start_cluster` (start the
scheduler, set ``_scheduler_address``), :meth:`_scale_to` (add or remove
workers) and :meth:`_close_cluster` (close workers, then the scheduler).  The
base class owns every background task it starts (the periodic refresh of
``scheduler_info``, any scaling requested without awaiting, and the refresh
of its notebook widget once shown) and cancels and awaits them on close, so
nothing outlives the cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

import dask.config
from dask.utils import format_bytes, parse_timedelta
from tornado.ioloop import IOLoop

from distributed.comm import get_address_host, parse_address
from distributed.config_refusals import refuse_unhonoured_config
from distributed.core import ConnectionPool, LogBuffer, Status
from distributed.protocol import messages as m
from distributed.security import Security
from distributed.utils import Log, Logs, LoopRunner, format_dashboard_link, io_loop_of, sync
from distributed.widgets import ClusterWidget, Field, SchedulerInfo, cluster_html, scaling_html

if TYPE_CHECKING:
    from distributed.deploy.adaptive import AdaptiveCore

logger = logging.getLogger(__name__)

__all__ = ["Cluster", "WorkerHandle"]

T = TypeVar("T")


class WorkerHandle(Protocol):
    """What a cluster keeps per worker: an in-process Worker or a ServerProcess."""

    @property
    def address(self) -> str:
        """The worker's contact address."""

    def close(self) -> Coroutine[Any, Any, Any]:
        """Close the worker."""


class Cluster:
    """Base class for clusters: a scheduler address plus workers to manage.

    Parameters
    ----------
    asynchronous
        Run on the caller's event loop (await the cluster to start it).
    loop
        For a synchronous cluster, an event loop already running in another
        thread to use instead of starting one.
    name
        The cluster's name, shown by ``repr`` and in notebooks (default: a
        short random id, as in dask.distributed).
    scheduler_sync_interval
        Seconds between refreshes of :attr:`scheduler_info`.
    quiet
        Do not print the progress messages a subclass reports with
        :meth:`_log` (they are kept for :meth:`get_logs` all the same).
    """

    def __init__(
        self,
        asynchronous: bool = False,
        loop: Any = None,
        name: str | None = None,
        scheduler_sync_interval: float | str = 1,
        quiet: bool = False,
    ) -> None:
        refuse_unhonoured_config("cluster")
        self.asynchronous = asynchronous
        #: Whether :meth:`_log` keeps its messages without printing them.
        self.quiet = quiet
        #: What subclasses reported with :meth:`_log`: ``(when, message)``, oldest first.
        self._cluster_manager_logs: list[tuple[datetime.datetime, str]] = []
        #: The cluster's name: the one given, else a short random id (as dask's), shown by ``repr``.
        self.name = name or uuid.uuid4().hex[:8]
        self.status = Status.created
        #: The scheduler's identity and all its workers, refreshed every ``scheduler_sync_interval``.
        self.scheduler_info: dict[str, Any] = SchedulerInfo()
        self.workers: dict[Any, WorkerHandle] = {}
        self._scheduler_address: str | None = None
        self._sync_interval = float(parse_timedelta(scheduler_sync_interval, "s") or 1)
        self._pool: ConnectionPool | None = None
        #: TLS credentials the cluster's own connections to the scheduler use (role ``client``).
        self.security = Security()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started: asyncio.Future[None] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._loop_runner: LoopRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io_loop: IOLoop | None = None
        #: The notebook widget, once shown (see :meth:`_widget`), and whether a task refreshes it.
        self._cached_widget: ClusterWidget | None = None
        self._widget_refresh = False
        #: The cluster's own recent log records (``distributed.deploy``), kept while it runs.
        self._logs = LogBuffer("distributed.deploy")
        if asynchronous:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None  # set when awaited
        else:
            self._loop_runner = LoopRunner(loop=loop, name=f"{self.name}-loop")
            self._loop = self._loop_runner.loop

    # -- loop and sync/async duality ----------------------------------------------------
    @property
    def event_loop(self) -> asyncio.AbstractEventLoop | None:
        """The asyncio event loop the cluster's servers and coroutines run on (None before it starts)."""
        return self._loop

    @property
    def loop(self) -> IOLoop | None:
        """The tornado ``IOLoop`` over :attr:`event_loop`, as dask's ``Cluster.loop`` (None before it starts)."""
        if self._loop is None:
            return None
        # Tornado's IOLoops over asyncio have ``asyncio_loop``; its base class does not declare it.
        if self._io_loop is None or getattr(self._io_loop, "asyncio_loop", None) is not self._loop:
            self._io_loop = io_loop_of(self._loop)
        return self._io_loop

    def _in_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def sync(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> Any:
        """Run ``func`` on the cluster's loop.

        Returns an awaitable when the cluster is asynchronous or when called
        from the loop itself; otherwise blocks and returns the result.
        """
        if self.asynchronous or self._in_loop_thread():
            return func(*args, **kwargs)
        assert self._loop is not None
        return sync(self._loop, func, *args, **kwargs)

    def _spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as a task owned by the cluster (cancelled on close)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("Cluster task %s failed", task.get_name(), exc_info=task.exception())

    # -- life cycle -----------------------------------------------------------------------
    def _start_sync(self) -> None:
        """Start a synchronous cluster: its loop thread, then its servers."""
        assert self._loop_runner is not None
        self._loop_runner.start()
        try:
            sync(self._loop_runner.loop, self._start_once)
        except BaseException:
            try:
                sync(self._loop_runner.loop, self._close_once)
            except Exception:
                logger.debug("Cleaning up after a failed start failed", exc_info=True)
            self._loop_runner.stop()
            raise

    async def _start_once(self) -> None:
        if self.status == Status.running:
            return
        if self.status in (Status.closing, Status.closed):
            raise RuntimeError(f"{self.name} is closed")
        if self._started is None:
            self._loop = asyncio.get_running_loop()
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        self.status = Status.starting
        self._logs.attach()
        self._pool = ConnectionPool(limit=16, connection_args=self.security.get_connection_args("client"))
        await self._start_cluster()
        await self._refresh_scheduler_info()
        if self._sync_interval > 0:
            self._spawn(self._watch_scheduler(), name="cluster-scheduler-info")
        self.status = Status.running

    async def _start_cluster(self) -> None:
        """Subclass hook: start the scheduler (and initial workers)."""
        raise NotImplementedError

    async def _close_cluster(self) -> None:
        """Subclass hook: close the workers, then the scheduler."""

    async def _scale_to(self, n: int) -> None:
        """Subclass hook: add or remove workers until there are ``n``."""
        raise NotImplementedError(f"{type(self).__name__} cannot scale")

    def __await__(self) -> Generator[Any, None, Self]:
        async def start() -> Self:
            await self._start_once()
            return self

        return start().__await__()

    async def __aenter__(self) -> Self:
        await self._start_once()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close_once()

    def __enter__(self) -> Self:
        if self.asynchronous:
            raise TypeError(f"Use 'async with' with an asynchronous {type(self).__name__}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> Any:
        """Close the workers, the scheduler and (when synchronous) the loop thread.

        Returns an awaitable when the cluster is asynchronous.
        """
        if self.asynchronous or self._in_loop_thread():
            return self._close_once()
        runner = self._loop_runner
        try:
            if self._loop is not None and not self._loop.is_closed() and self._loop.is_running():
                sync(self._loop, self._close_once, callback_timeout=timeout)
        finally:
            if runner is not None:
                runner.stop()
        return None

    async def _close_once(self) -> None:
        if self.status == Status.closed:
            return
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self.status = Status.closing
        if self._started is not None and not self._started.done():
            self._started.cancel()
            await asyncio.gather(self._started, return_exceptions=True)
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self._close_cluster()
        finally:
            if self._pool is not None:
                await self._pool.close()
            if self.scheduler_info:
                gone = {"workers": {}, "n_workers": 0, "total_threads": 0, "total_memory": 0}
                self.scheduler_info = SchedulerInfo({**self.scheduler_info, **gone})
            self._logs.detach()
            self.status = Status.closed
            if self._cached_widget is not None:
                try:
                    self._cached_widget.refresh()  # its refreshing task is gone: show the end once
                except Exception:
                    logger.debug("Refreshing the cluster widget failed", exc_info=True)

    # -- the scheduler ------------------------------------------------------------------
    @property
    def scheduler_address(self) -> str:
        """The scheduler's contact address.

        Raises
        ------
        AttributeError
            Before the cluster has started (so ``getattr(cluster,
            "scheduler_address", None)`` gives None then).
        """
        if self._scheduler_address is None:
            raise AttributeError(f"{self.name} has not started yet: no scheduler address")
        return self._scheduler_address

    async def scheduler_request(self, msg: Mapping[str, Any]) -> Any:
        """Send the request ``msg`` to the scheduler over the cluster's connections and return the reply.

        The one way the cluster talks to its scheduler, whether that runs in
        this process or elsewhere (behind a ``ProcessInterface``).

        Raises
        ------
        RuntimeError
            Before the cluster has a scheduler to talk to, or after it closed.
        """
        if self._pool is None or self._scheduler_address is None:
            raise RuntimeError(f"{self.name} has no scheduler to send {msg.get('op')!r} to")
        return await self._pool.call(self._scheduler_address, msg)

    async def _refresh_scheduler_info(self) -> None:
        if self._pool is None or self._scheduler_address is None:
            return
        info = await self._pool.call(self._scheduler_address, m.Empty(op="identity"))
        if isinstance(info, dict):
            self.scheduler_info = SchedulerInfo(info)

    async def _watch_scheduler(self) -> None:
        while True:
            await asyncio.sleep(self._sync_interval)
            try:
                await self._refresh_scheduler_info()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.debug("Refreshing scheduler info failed", exc_info=True)

    @property
    def dashboard_link(self) -> str | None:
        """Link to the scheduler's dashboard, or None when it serves none."""
        port = self.scheduler_info.get("services", {}).get("dashboard")
        if not port or self._scheduler_address is None:
            return None
        scheme = parse_address(self._scheduler_address)[0]
        host = get_address_host(self._scheduler_address) if scheme != "inproc" else ""
        return format_dashboard_link(host or "127.0.0.1", port)

    # -- workers ------------------------------------------------------------------------
    def scale(self, n: int = 0) -> Any:
        """Add or remove workers until there are ``n``.

        Blocks until done on a synchronous cluster; on an asynchronous one,
        returns a task (awaiting it is optional: it runs either way).
        """
        if n < 0:
            raise ValueError(f"Cannot scale to a negative number of workers: {n}")
        if self.asynchronous or self._in_loop_thread():
            return self._spawn(self._scale_to(n), name=f"scale-{n}")
        return self.sync(self._scale_to, n)

    def wait_for_workers(self, n_workers: int, timeout: float | str | None = None) -> Any:
        """Wait until the scheduler knows of at least ``n_workers`` workers.

        Raises
        ------
        TimeoutError
            After ``timeout`` seconds.
        """
        t = parse_timedelta(timeout, "s") if timeout is not None else None
        return self.sync(self._wait_for_workers, n_workers, t)

    async def _wait_for_workers(self, n_workers: int, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while True:
            await self._refresh_scheduler_info()
            have = len(self.scheduler_info.get("workers", {}))
            if have >= n_workers:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"Only {have}/{n_workers} workers arrived after {timeout} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _log(self, message: str) -> None:
        """Report a step of the cluster's life to the user and keep it for :meth:`get_logs`.

        It is printed unless the cluster is ``quiet``.

        For subclasses whose start takes a while (submitting a job, waiting
        for a machine), as in dask.distributed.

        Examples
        --------
        >>> self._log("Submitted job 1234 to the batch system")  # doctest: +SKIP
        """
        self._cluster_manager_logs.append((datetime.datetime.now(), message))
        logger.info("%s: %s", self.name, message)
        if not self.quiet:
            # Meant for the person watching a notebook or terminal, not for the logging configuration.
            print(message)

    def get_client(self) -> Any:
        """A client of this cluster: the current client if it is connected to this cluster, else a new one.

        Returns
        -------
        Client
            Synchronous or asynchronous as the cluster is (an asynchronous
            one is to be awaited, as ``Client(cluster, asynchronous=True)``).
        """
        from distributed.client import Client

        try:
            current = Client.current()
        except ValueError:
            current = None
        if current is not None and getattr(current, "cluster", None) is self:
            return current
        return Client(self, asynchronous=self.asynchronous)

    def get_logs(self, cluster: bool = True, scheduler: bool = True, workers: bool | list[str] = True) -> Any:
        """Recent log records of the cluster, its scheduler and its workers.

        Each server keeps its last ``distributed.admin.log-length`` records
        at the level its loggers let through (see :class:`~distributed.core.LogBuffer`).

        Parameters
        ----------
        cluster
            Include, under ``"Cluster"``, what the cluster reported with
            :meth:`_log`, then its own records (``distributed.deploy``).
        scheduler
            Include the scheduler's under ``"Scheduler"``.
        workers
            Include every worker's (True), or those at the given addresses,
            each under its address.

        Returns
        -------
        Logs
            One :class:`~distributed.utils.Log` text per source, a record per
            line (both show as HTML in a notebook); an awaitable of it when the
            cluster is asynchronous.
        """
        return self.sync(self._get_logs, cluster, scheduler, workers)

    async def _get_logs(self, cluster: bool, scheduler: bool, workers: bool | list[str]) -> Logs:
        out = Logs()
        if cluster:
            own = [text for _, text in self._cluster_manager_logs]
            records = _as_text(self._logs.get())
            out["Cluster"] = Log("\n".join(own + ([records] if records else [])))
        if self._pool is None or self._scheduler_address is None:
            return out
        msg = m.GetLogs(op="get_logs")
        if scheduler:
            out["Scheduler"] = Log(_as_text(await self._pool.call(self._scheduler_address, msg)))
        if workers:
            if workers is True:
                await self._refresh_scheduler_info()
                addresses = list(self.scheduler_info.get("workers", {}))
            else:
                addresses = list(workers)
            replies = await asyncio.gather(*(self._pool.call(a, msg) for a in addresses))
            out.update({a: Log(_as_text(r)) for a, r in zip(addresses, replies)})
        return out

    # -- display ------------------------------------------------------------------------
    @property
    def _cluster_class_name(self) -> str:
        """The kind of cluster ``repr`` and the notebook view name (a subclass may name itself otherwise)."""
        return type(self).__name__

    def __repr__(self) -> str:
        # As dask's: the cluster by its name (an id unless given one), never by doing I/O.
        workers = self.scheduler_info.get("workers", {})
        threads = sum(int(w.get("nthreads", 0) or 0) for w in workers.values())
        address = self._scheduler_address or "<Not Connected>"
        text = f"{self._cluster_class_name}({self.name}, {address!r}, workers={len(workers)}, threads={threads}"
        limits = [int(w.get("memory_limit", 0) or 0) for w in workers.values()]
        if all(limits):  # an unlimited worker makes the total meaningless
            text += f", memory={format_bytes(sum(limits))}"
        return text + ")"

    def _html_fields(self) -> list[Field]:
        """Fields the notebook view shows after the totals (subclasses add theirs)."""
        return [Field("status", "Status", self.status.name)]

    def _repr_html_(self) -> str:
        return str(
            cluster_html(
                type_name=self._cluster_class_name,
                name=str(self.name),
                info=self.scheduler_info,
                dashboard_link=self.dashboard_link,
                extra=self._html_fields(),
                started=self._scheduler_address is not None,
            )
        )

    def _scaling_state(self) -> tuple[int, AdaptiveCore | None]:
        """The number of workers asked for, and the adaptive scaling in charge (None: scaled by hand)."""
        return len(self.workers), None

    def _scaling_html(self) -> str:
        requested, adaptive = self._scaling_state()
        return str(
            scaling_html(
                adaptive=adaptive is not None,
                workers=len(self.scheduler_info.get("workers", {})),
                requested=requested,
                minimum=adaptive.minimum if adaptive is not None else None,
                maximum=adaptive.maximum if adaptive is not None else None,
            )
        )

    def _widget(self) -> ClusterWidget | None:
        """The cluster's ipywidgets widget (made once), or None without ipywidgets."""
        if self._cached_widget is not None:
            return self._cached_widget
        adapt = getattr(self, "adapt", None)
        try:
            widget = ClusterWidget(
                status_html=self._repr_html_,
                scaling_html=self._scaling_html,
                scale=self.scale,
                adapt=(lambda lo, hi: adapt(minimum=lo, maximum=hi)) if callable(adapt) else None,
                workers=len(self.workers),
            )
        except ImportError:
            return None
        self._cached_widget = widget
        return widget

    def _keep_widget_fresh(self, widget: ClusterWidget) -> None:
        """Refresh the shown widget on the cluster's loop every ``distributed.deploy.cluster-repr-interval``.

        One refreshing task per cluster, owned by it: closing the cluster stops it.
        """
        loop = self._loop
        if self._widget_refresh or loop is None or loop.is_closed() or self.status in (Status.closing, Status.closed):
            return
        self._widget_refresh = True
        interval = float(parse_timedelta(dask.config.get("distributed.deploy.cluster-repr-interval"), "ms"))

        async def refresh() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    widget.refresh()
                except Exception:
                    logger.debug("Refreshing the cluster widget failed", exc_info=True)

        def start() -> None:
            if self.status not in (Status.closing, Status.closed):
                self._spawn(refresh(), name="cluster-widget-refresh")

        loop.call_soon_threadsafe(start)

    def _repr_mimebundle_(
        self, include: Collection[str] | None = None, exclude: Collection[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """What a notebook shows: the widget where ipywidgets is installed, else the HTML view; and the text."""
        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self._repr_html_()}
        widget = self._widget()
        if widget is not None:
            view = widget._repr_mimebundle_(**kwargs) or {}
            bundle.update((k, v) for k, v in view.items() if k != "text/plain")
            self._keep_widget_fresh(widget)
        if include is not None:
            bundle = {k: v for k, v in bundle.items() if k in include}
        if exclude is not None:
            bundle = {k: v for k, v in bundle.items() if k not in exclude}
        return bundle

    def _ipython_display_(self, **kwargs: Any) -> None:
        """Show the cluster in IPython (the widget, or its HTML without ipywidgets)."""
        from IPython import display as ipython_display

        # IPython leaves ``display`` unannotated.
        show: Callable[..., object] = ipython_display.display
        show(self._repr_mimebundle_(**kwargs), raw=True)


def _as_text(records: Any) -> str:
    """``[(level, text), ...]`` as one record per line."""
    return "\n".join(str(r[1]) if isinstance(r, (list, tuple)) and len(r) > 1 else str(r) for r in records or ())
