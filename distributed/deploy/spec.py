"""SpecCluster: a cluster described by specifications of its scheduler and workers.

Theory of operation
-------------------
A :class:`SpecCluster` holds what it *should* run and reconciles what it *does*
run with it:

* ``scheduler_spec``: ``{"cls": SchedulerClass, "options": {...}}``, started
  once, on the cluster's loop: a :class:`~distributed.Scheduler` in this
  process, or a :class:`ProcessInterface` whose ``start()`` runs one
  elsewhere (a process, a pod, a cloud machine) and sets its ``address``.
  The cluster talks to it only through requests to that address (worker
  info, retiring workers, logs, ``terminate`` on close), so both work alike.
* ``worker_spec``: ``{name: {"cls": WorkerClass, "options": {...}}}``, the
  workers wanted.  Each is started as ``cls(scheduler_address, name=name,
  **options)``, then awaited via its ``start()``; it must offer ``address`` and
  ``close()`` (a :class:`~distributed.Worker`, a :class:`~distributed.Nanny`,
  or any class in their image, as dask-jobqueue's jobs).  An entry with a
  ``"group": [suffix, ...]`` key starts several workers (one job running
  several worker processes), named ``str(name) + suffix``: the cluster counts
  workers, but starts and closes whole entries.
* ``new_spec``: the template :meth:`new_worker_spec` copies when scaling up.

:meth:`scale` only edits ``worker_spec``; :meth:`_correct_state` then closes
the running workers no longer in it (the scheduler first retires them, moving
the data only they hold to the others) and starts those missing.  Calls to it
are serialised by a lock, so concurrent scalings end in the last one's state.

:meth:`adapt` hands the number of workers to an
:class:`~distributed.deploy.adaptive.Adaptive`, which asks the scheduler's
``adaptive_target()`` for it; a call to :meth:`scale` by the user stops it.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import logging
import math
import time
import weakref
from collections.abc import Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self, cast

import dask.config
from dask.utils import parse_bytes, parse_timedelta

from distributed.config import silence_logging
from distributed.core import Status
from distributed.deploy.cluster import Cluster, WorkerHandle
from distributed.nanny import Nanny
from distributed.protocol import messages as m
from distributed.scheduler import Scheduler
from distributed.security import Security, coerce_security
from distributed.utils import import_term

if TYPE_CHECKING:
    from distributed.deploy.adaptive import Adaptive, AdaptiveCore

logger = logging.getLogger(__name__)

__all__ = ["ProcessInterface", "SpecCluster", "close_clusters", "worker_names"]

#: One entry of a spec: ``{"cls": ..., "options": {...}}``.
Spec = dict[str, Any]


def _spec_class(spec: Mapping[str, Any], what: str) -> Any:
    """The class of a spec entry (a class or its dotted import path)."""
    if not isinstance(spec, Mapping) or "cls" not in spec:
        raise TypeError(f"A {what} spec is a dict {{'cls': ..., 'options': {{...}}}}, got {spec!r}")
    cls = spec["cls"]
    if isinstance(cls, str):
        cls = import_term(cls)
    if not callable(cls):
        raise TypeError(f"The {what} spec's cls must be a class, got {cls!r}")
    group = spec.get("group")
    if group is not None and (
        isinstance(group, str) or not isinstance(group, Iterable) or not all(isinstance(g, str) for g in group)
    ):
        raise TypeError(f"The {what} spec's group is a list of name suffixes (str), got {group!r}")
    if group is not None and not list(group):
        raise ValueError(f"The {what} spec's group is empty: an entry must start at least one worker")
    return cls


def worker_names(name: Any, spec: Mapping[str, Any]) -> list[Any]:
    """Names of the workers one spec entry starts: ``name``, or ``str(name) + suffix`` for each of its ``group``."""
    group = spec.get("group")
    if group is None:
        return [name]
    return [f"{name}{suffix}" for suffix in group]


def _options(spec: Mapping[str, Any]) -> dict[str, Any]:
    opts = spec.get("options") or {}
    if not isinstance(opts, Mapping):
        raise TypeError(f"A spec's options must be a dict, got {opts!r}")
    return dict(opts)


class _Done:
    """An awaitable that is already done: what an asynchronous cluster's ``scale`` returns before it starts."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


class ProcessInterface:
    """A worker (or other process) a :class:`SpecCluster` starts and stops through a resource manager.

    The base of the job classes of dask-jobqueue and the like: a subclass's
    :meth:`start` submits the process (to SLURM, Kubernetes...) and need not
    wait for it to connect; its :meth:`close` removes it, forcefully if need
    be (the scheduler has already retired the worker by then).  Subclasses
    call ``super().start()`` / ``super().close()`` last.

    Parameters
    ----------
    scheduler
        The address of the scheduler the process is to connect to.
    name
        The worker's name, its key in ``SpecCluster.worker_spec``.
    """

    def __init__(self, scheduler: str | None = None, name: Any = None) -> None:
        #: The process's contact address, once known (subclasses may set it in ``start``).
        self.address: str | None = getattr(self, "address", None)
        #: An address to reach the process from outside its network, if different.
        self.external_address: str | None = None
        #: Serialises starting and closing.
        self.lock = asyncio.Lock()
        self.status = Status.created
        self._event_finished = asyncio.Event()

    async def start(self) -> None:
        """Submit the process; the base marks it running."""
        self.status = Status.running

    async def close(self) -> None:
        """Remove the process; the base marks it closed and wakes :meth:`finished`."""
        self.status = Status.closed
        self._event_finished.set()

    async def finished(self) -> None:
        """Wait until the process is closed."""
        await self._event_finished.wait()

    async def _start_once(self) -> ProcessInterface:
        async with self.lock:
            if self.status == Status.created:
                await self.start()
        return self

    def __await__(self) -> Generator[Any, None, ProcessInterface]:
        return self._start_once().__await__()

    async def __aenter__(self) -> ProcessInterface:
        return await self._start_once()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: status={self.status.name}>"


#: Synchronous clusters made with ``shutdown_on_close=True``, closed at exit if still open.
_to_close_at_exit: weakref.WeakSet[SpecCluster] = weakref.WeakSet()


def close_clusters() -> None:
    """Close the synchronous clusters made with ``shutdown_on_close=True`` that are still open (run at exit)."""
    for cluster in list(_to_close_at_exit):
        if cluster.status not in (Status.closed, Status.closing):
            try:
                cluster.close(timeout=10)
            except Exception:
                logger.debug("Closing %s at exit failed", cluster.name, exc_info=True)


atexit.register(close_clusters)


class SpecCluster(Cluster):
    """A cluster from specifications of its scheduler and workers.

    Parameters
    ----------
    workers
        The workers to start: ``{name: {"cls": WorkerClass, "options": {...}}}``.
    scheduler
        The scheduler: ``{"cls": Scheduler, "options": {...}}`` (default: a
        :class:`~distributed.Scheduler` serving a dashboard), or a
        :class:`ProcessInterface` subclass that starts one elsewhere and sets
        its ``address`` (``external_address`` first, when set); on close the
        cluster sends it ``terminate``, then closes the handle.
    worker
        The spec of workers added by :meth:`scale` (default: none, so the
        cluster cannot grow beyond ``workers``).
    asynchronous
        Run on the caller's loop (await the cluster to start it).
    loop
        A loop running in another thread to use (synchronous clusters only).
    security
        A :class:`~distributed.security.Security`: the TLS credentials the
        cluster connects to its scheduler with (role ``client``), and those a
        :class:`~distributed.Client` given this cluster uses.  The scheduler
        and worker specs carry their own (``options={"security": ...}``).
    silence_logs
        A log level for the ``distributed`` logger while the cluster runs
        (falsy leaves logging alone).
    name
        A name for ``repr``.
    shutdown_on_close
        Close the cluster when the interpreter exits, if still open (a
        synchronous cluster: an asynchronous one's loop is its caller's, gone by then).
    scheduler_sync_interval
        Seconds between refreshes of ``scheduler_info``.
    shutdown_scheduler
        Close the scheduler when the cluster closes (False: the workers close,
        the scheduler is left running, as for a scheduler shared with others).
    quiet
        Do not print the messages a subclass reports with ``_log`` (they are
        kept for :meth:`get_logs` all the same).

    Examples
    --------
    >>> spec = {"cls": Worker, "options": {"nthreads": 1}}  # doctest: +SKIP
    >>> cluster = SpecCluster(workers={"a": spec}, worker=spec,
    ...                       scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})  # doctest: +SKIP
    >>> cluster.scale(3)  # doctest: +SKIP
    """

    def __init__(
        self,
        workers: Mapping[Any, Spec] | None = None,
        scheduler: Spec | None = None,
        worker: Spec | None = None,
        asynchronous: bool = False,
        loop: Any = None,
        security: Security | dict[str, Any] | None = None,
        silence_logs: int | str | bool = False,
        name: str | None = None,
        shutdown_on_close: bool = True,
        scheduler_sync_interval: float | str = 1,
        shutdown_scheduler: bool = True,
        quiet: bool = False,
    ) -> None:
        super().__init__(
            asynchronous=asynchronous,
            loop=loop,
            name=name,
            scheduler_sync_interval=scheduler_sync_interval,
            quiet=quiet,
        )
        # The name subclasses build worker names from (dask-jobqueue's "<cluster name>-<n>"), as in dask.distributed.
        self._name = name or type(self).__name__
        #: Whether closing the cluster closes its scheduler too.
        self.shutdown_scheduler = shutdown_scheduler
        self.security = coerce_security(security, "SpecCluster")
        for nm, spec in (workers or {}).items():
            _spec_class(spec, f"worker {nm!r}")
        if worker is not None:
            _spec_class(worker, "worker")
        if scheduler is not None:
            _spec_class(scheduler, "scheduler")
        #: The workers wanted, by name.
        self.worker_spec: dict[Any, Spec] = copy.copy(dict(workers or {}))
        #: The scheduler's spec.
        self.scheduler_spec: Spec | None = copy.copy(scheduler)
        #: The spec copied for each worker added by :meth:`scale`.
        self.new_spec: Spec | None = copy.copy(worker)
        self.silence_logs = silence_logs
        #: The scheduler, once started.
        self.scheduler: Any = None
        self._i = 0
        self._used_names: set[Any] = set()
        # The spec each running entry was started from (its group, once gone from worker_spec).
        self._started_specs: dict[Any, Spec] = {}
        self._old_log_level: int | None = None
        self._correct_lock: asyncio.Lock | None = None
        #: Retiring and closing the workers a scale-down took out of ``workers`` (see _correct_state).
        self._leaving: set[asyncio.Task[None]] = set()
        self._adaptive: Adaptive | None = None
        self._adaptive_options: dict[str, Any] = {}
        #: Seconds a worker that was connected may be missing from the scheduler before it is closed
        #: and dropped from ``workers`` (``distributed.deploy.lost-worker-timeout``).
        self.lost_worker_timeout = float(parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout")))
        # Entries whose workers all reached the scheduler once, and since when each is missing there.
        self._arrived_once: set[Any] = set()
        self._missing_since: dict[Any, float] = {}
        self.shutdown_on_close = shutdown_on_close
        if shutdown_on_close and not asynchronous:
            _to_close_at_exit.add(self)
        if not asynchronous:
            self._start_sync()

    # -- logging --------------------------------------------------------------------------
    def _log_level(self) -> int | str | None:
        if not self.silence_logs:
            return None
        return logging.WARN if self.silence_logs is True else self.silence_logs

    def _silence(self) -> None:
        level = self._log_level()
        if level is not None and self._old_log_level is None:
            self._old_log_level = silence_logging(level)

    def _unsilence(self) -> None:
        if self._old_log_level is not None:
            silence_logging(self._old_log_level)
            self._old_log_level = None

    # -- life cycle -----------------------------------------------------------------------
    async def _start_cluster(self) -> None:
        self._silence()
        if self.scheduler_spec is None:
            self.scheduler_spec = {"cls": Scheduler, "options": {"dashboard": True}}
        cls = _spec_class(self.scheduler_spec, "scheduler")
        scheduler = cls(**_options(self.scheduler_spec))
        self.scheduler = scheduler
        if isinstance(scheduler, ProcessInterface):
            # The scheduler runs elsewhere: its start() submits it and learns its address.
            await scheduler
            address = scheduler.external_address or scheduler.address
            if not address:
                raise RuntimeError(f"{self.name}: the scheduler {scheduler!r} started without an address")
            self._scheduler_address = str(address)
            # Waits (within the connect timeout) until it listens: workers start against it next.
            await self._refresh_scheduler_info()
        else:
            await scheduler.start()
            self._scheduler_address = str(scheduler.address)
        logger.info("%s: scheduler at %s", self.name, self._scheduler_address)
        await self._scheduler_started(scheduler)
        await self._correct_state()

    async def _scheduler_started(self, scheduler: Any) -> None:
        """Subclass hook: the scheduler runs, no worker is started yet."""

    async def _close_cluster(self) -> None:
        try:
            if self._adaptive is not None:
                self._adaptive.stop()
            if self.workers:
                handles = list(self.workers.values())
                self.workers.clear()
                results = await asyncio.gather(*(h.close() for h in handles), return_exceptions=True)
                for r in results:
                    if isinstance(r, BaseException):
                        logger.warning("Closing a worker failed: %r", r)
            # Those a scale-down took out of ``workers`` (its task cancelled as the cluster closes):
            # before the scheduler goes, so that they retire and close as they would have.
            while self._leaving:
                await asyncio.gather(*self._leaving, return_exceptions=True)
            if not self.shutdown_scheduler:
                logger.info("%s: leaving the scheduler at %s running", self.name, self._scheduler_address)
            elif isinstance(self.scheduler, ProcessInterface):
                await self._terminate_remote_scheduler(self.scheduler)
            elif self.scheduler is not None:
                await self.scheduler.close()
        finally:
            self._unsilence()

    async def _terminate_remote_scheduler(self, scheduler: ProcessInterface) -> None:
        """Ask the scheduler to close (``terminate``), then have its handle remove the process.

        The request lets the scheduler shut down in order; the handle's
        ``close()`` then ends what is left (a job, a pod, a process).
        """
        if self._scheduler_address is not None and self._pool is not None:
            try:
                await self.scheduler_request(m.Empty(op="terminate"))
            except Exception as e:  # gone already: the handle still closes
                logger.debug("%s: terminating the scheduler at %s failed: %r", self.name, self._scheduler_address, e)
        await scheduler.close()

    # -- reconciling ----------------------------------------------------------------------
    async def _correct_state(self) -> None:
        """Close the running workers not in ``worker_spec``, then start those missing from ``workers``.

        Workers leaving are retired by the scheduler first, so the data only
        they hold moves to the others.  Raises the first error of a worker
        that failed to start (the others started all the same).
        """
        if self._correct_lock is None:
            self._correct_lock = asyncio.Lock()
        async with self._correct_lock:
            if self.status in (Status.closing, Status.closed) or self._scheduler_address is None:
                return
            leaving = [nm for nm in self.workers if nm not in self.worker_spec]
            if leaving:
                logger.info("%s: closing workers %s", self.name, leaving)
                handles = {nm: self.workers.pop(nm) for nm in leaving}
                # In a task of its own, which _close_cluster awaits: cancelling this correction (the
                # cluster closing cancels its scaling tasks) must not leave these workers half closed
                # (a worker's close runs on when its caller is cancelled) or, mid-retirement, running.
                task = asyncio.get_running_loop().create_task(self._leave(handles), name=f"close-workers-{leaving}")
                self._leaving.add(task)
                task.add_done_callback(self._leaving.discard)
                await asyncio.shield(task)
            joining = [nm for nm in self.worker_spec if nm not in self.workers]
            if joining:
                logger.info("%s: starting workers %s", self.name, joining)
                started = await asyncio.gather(
                    *(self._start_worker(nm, self.worker_spec[nm]) for nm in joining), return_exceptions=True
                )
                errors: list[BaseException] = []
                for nm, r in zip(joining, started):
                    if isinstance(r, BaseException):
                        errors.append(r)
                        # Not wanted any more: a later correction would only fail again.
                        self.worker_spec.pop(nm, None)
                    else:
                        self.workers[nm] = r
                if errors:
                    raise errors[0]
            await self._refresh_scheduler_info()

    async def _refresh_scheduler_info(self) -> None:
        await super()._refresh_scheduler_info()
        self._close_lost_workers(time.monotonic())

    def _close_lost_workers(self, now: float) -> None:
        """Close, and drop from ``workers``, the entries the scheduler lost ``lost_worker_timeout`` ago.

        As in dask: a job whose worker left the scheduler (killed, its machine
        gone) and did not come back is closed, so that the next scaling starts a
        new one.  An entry still starting (never seen by the scheduler) is left alone.
        """
        if self.status in (Status.closing, Status.closed) or not self.scheduler_info:
            return
        arrived = {str(w.get("name")) for w in self.scheduler_info.get("workers", {}).values()}
        lost: dict[Any, WorkerHandle] = {}
        for nm in list(self.workers):
            spec = self._started_specs.get(nm) or self.worker_spec.get(nm) or {}
            if all(str(w) in arrived for w in worker_names(nm, spec)):
                self._arrived_once.add(nm)
                self._missing_since.pop(nm, None)
                continue
            if nm not in self._arrived_once:
                continue
            since = self._missing_since.setdefault(nm, now)
            if now - since >= self.lost_worker_timeout:
                lost[nm] = self.workers.pop(nm)
                self._missing_since.pop(nm, None)
                self._arrived_once.discard(nm)
        if lost:
            logger.warning(
                "%s: workers %s left the scheduler %s s ago and did not come back; closing them",
                self.name,
                sorted(map(str, lost)),
                self.lost_worker_timeout,
            )
            task = asyncio.get_running_loop().create_task(self._close_handles(lost), name=f"close-lost-{list(lost)}")
            self._leaving.add(task)
            task.add_done_callback(self._leaving.discard)

    async def _close_handles(self, handles: Mapping[Any, WorkerHandle]) -> None:
        for nm in handles:
            self._started_specs.pop(nm, None)
        results = await asyncio.gather(*(h.close() for h in handles.values()), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                logger.warning("Closing a worker failed: %r", r)

    async def _leave(self, handles: Mapping[Any, WorkerHandle]) -> None:
        """Retire these workers (taken out of ``workers``), then close them, whatever the retirement did."""
        try:
            await self._retire(handles)
        finally:
            await self._close_handles(handles)

    async def _start_worker(self, name: Any, spec: Spec) -> WorkerHandle:
        """Start the worker ``name`` from its spec: ``cls(scheduler_address, name=name, **options)``."""
        cls = _spec_class(spec, f"worker {name!r}")
        opts = _options(spec)
        opts.setdefault("name", name)
        self._used_names.add(name)
        self._started_specs[name] = spec
        worker = cls(self.scheduler_address, **opts)
        await worker.start()  # a failed start closes what it started
        return cast(WorkerHandle, worker)

    async def _retire(self, handles: Mapping[Any, WorkerHandle]) -> None:
        """Have the scheduler retire these workers: the data only they hold moves to the others first.

        The workers are closed afterwards by their handles (a nanny then does
        not start its worker again).  Those the scheduler keeps, because no
        other worker can take their only copies, are closed all the same (as
        in dask.distributed): what they held is recomputed where it can be.
        """
        if self._pool is None or not handles:
            return
        await self._refresh_scheduler_info()
        known: dict[str, Any] = self.scheduler_info.get("workers", {})
        # A job behind a ProcessInterface may not know its worker's address: the scheduler knows it by name.
        by_name = {str(info.get("name")): a for a, info in known.items() if isinstance(info, Mapping)}
        found: list[str | None] = []
        for nm, h in handles.items():
            spec = self.worker_spec.get(nm) or self._started_specs.get(nm) or {}
            if spec.get("group") is not None:
                # Every worker of the entry goes: each hands its data off.
                found += [by_name.get(str(member)) for member in worker_names(nm, spec)]
            else:
                found.append(self._worker_address(h) or by_name.get(str(nm)))
        # Those already retired (by Adaptive, before it asks to close them) are not the scheduler's any more.
        addrs = [a for a in found if a and a in known]
        if not addrs:
            return
        try:
            retired = await self._pool.call(
                self.scheduler_address,
                m.RetireWorkers(op="retire_workers", workers=addrs, close_workers=False, remove=True),
            )
        except Exception as e:
            logger.warning("%s: retiring workers %s failed (%s); closing them anyway", self.name, addrs, e)
            return
        kept = [a for a in addrs if a not in retired]
        if kept:
            logger.warning("%s: no other worker could take the data only %s hold; closing them anyway", self.name, kept)

    @staticmethod
    def _worker_address(handle: WorkerHandle) -> str | None:
        if isinstance(handle, Nanny):
            return handle.worker_address
        try:
            return handle.address
        except (AttributeError, ValueError, RuntimeError):
            return None

    # -- scaling --------------------------------------------------------------------------
    def _new_worker_name(self, worker_number: int) -> Any:
        """The name of the ``worker_number``-th worker added by :meth:`new_worker_spec`."""
        return worker_number

    def new_worker_spec(self) -> dict[Any, Spec]:
        """The spec of one more worker, as ``{name: spec}`` (a name not yet in ``worker_spec``).

        Raises
        ------
        ValueError
            When the cluster was given no ``worker`` template.
        """
        if self.new_spec is None:
            raise ValueError(f"{self.name} has no worker template (SpecCluster(worker=...)): it cannot add workers")
        name = self._new_worker_name(self._i)
        # A name once used is not given again: the scheduler may still know the worker that had it.
        while name in self.worker_spec or name in self._used_names:
            self._i += 1
            name = self._new_worker_name(self._i)
        self._i += 1
        # Options are copied one level deep: they may hold objects that cannot be deep-copied.
        return {name: {**self.new_spec, "options": _options(self.new_spec)}}

    def _template_option(self, *keys: str) -> Any:
        opts = _options(self.new_spec) if self.new_spec is not None else {}
        for key in keys:
            if opts.get(key) is not None:
                return opts[key]
        return None

    def _group_size(self) -> int:
        """Workers each new entry starts: the worker template's ``group``, else 1."""
        group = self.new_spec.get("group") if self.new_spec is not None else None
        return 1 if group is None else len(list(group))

    def _threads_per_worker(self) -> int:
        """Threads of each new entry, from the worker template's options.

        ``nthreads`` (or ``threads_per_worker``, ``ncores``, ``threads``,
        ``cores``): for a template starting a group, the whole job's, as
        dask-jobqueue's ``cores`` (the name and the reading are dask.distributed's).
        """
        n = self._template_option("nthreads", "threads_per_worker", "ncores", "threads", "cores")
        if n is None:
            raise ValueError(f"{self.name}: the worker template sets no nthreads: cannot count workers by cores")
        return max(1, int(n))

    def _memory_per_worker(self) -> int:
        """Bytes each new entry may use, from the worker template's ``memory_limit`` (or ``memory``)."""
        mem = self._template_option("memory_limit", "memory")
        if mem is None or mem == "auto":
            raise ValueError(f"{self.name}: the worker template sets no memory_limit: cannot count workers by memory")
        n = parse_bytes(mem) if isinstance(mem, str) else int(mem)
        if n <= 0:
            raise ValueError(f"{self.name}: the worker template's memory_limit is unlimited: cannot count by memory")
        return int(n)

    def _entries_for(self, n: int, memory: str | int | None, cores: int | None) -> int:
        """``n`` entries, raised to cover ``memory`` bytes and ``cores`` threads with whole entries."""
        if memory is not None:
            n = max(n, math.ceil(parse_bytes(memory) / self._memory_per_worker()))
        if cores is not None:
            n = max(n, math.ceil(cores / self._threads_per_worker()))
        if n < 0:
            raise ValueError(f"Cannot scale to a negative number of workers: {n}")
        return n

    def _set_target(self, n: int) -> None:
        """Edit ``worker_spec`` to hold ``n`` entries: entries not yet arrived go first, then the newest."""
        if len(self.worker_spec) > n:
            arrived = {str(w.get("name")) for w in self.scheduler_info.get("workers", {}).values()}
            pending = [
                nm
                for nm, spec in reversed(self.worker_spec.items())
                if nm not in self.workers or not all(str(w) in arrived for w in worker_names(nm, spec))
            ]
            for nm in pending:
                if len(self.worker_spec) <= n:
                    break
                del self.worker_spec[nm]
            while len(self.worker_spec) > n:
                self.worker_spec.popitem()
        if self.status not in (Status.closing, Status.closed):
            while len(self.worker_spec) < n:
                self.worker_spec.update(self.new_worker_spec())

    def scale(self, n: int = 0, memory: str | int | None = None, cores: int | None = None) -> Any:
        """Scale to ``n`` entries of ``worker_spec``, or to enough for ``memory`` bytes or ``cores`` threads.

        An entry is one worker, or, with a worker template starting a
        ``group``, one job running the group's workers: ``n`` counts entries,
        as in dask.distributed (dask-jobqueue's ``scale(jobs=)`` passes jobs
        here; use :meth:`scale_up` to count workers).  With ``memory`` or
        ``cores``, the number of entries is rounded up from the worker
        template's ``memory_limit``/``nthreads`` (a job's ``memory``/``cores``)
        and is at least ``n``.

        ``worker_spec`` holds the new target when this returns; the workers
        start or close on the cluster's loop.  Stops adaptive scaling, as the
        user now sets the size.  Blocks until done on a synchronous cluster;
        on an asynchronous one, returns an awaitable (awaiting it is optional:
        the change happens either way).
        """
        target = self._entries_for(n, memory, cores)  # a bad request leaves adaptive scaling alone
        if self._adaptive is not None:
            self._adaptive.stop()
            self._adaptive = None
        return self._apply_target(target)

    def scale_up(self, n: int = 0, memory: str | int | None = None, cores: int | None = None) -> Any:
        """Scale to ``n`` workers, as :meth:`scale`, but leave adaptive scaling on (it is what calls this).

        ``n`` counts workers: with a template starting a group, as many whole
        entries run as cover ``n`` workers (rounded up).
        """
        target = self._entries_for(math.ceil(n / self._group_size()), memory, cores)
        return self._apply_target(target)

    def _apply_target(self, n: int) -> Any:
        """Set ``worker_spec`` to ``n`` entries now, then have the workers follow on the loop."""
        if self.asynchronous or self._in_loop_thread():
            self._set_target(n)
            if self.status == Status.created:
                # Starting the cluster starts what worker_spec holds: nothing to do until then.
                return _Done()
            return self._spawn(self._correct_state(), name=f"scale-{n}")
        return self.sync(self._scale_to, n)

    def scale_down(self, workers: Iterable[Any]) -> Any:
        """Close these workers (by name, or by address), retiring them through the scheduler first.

        A worker of a group stands for its whole entry: every worker of the
        entry is retired and closed.
        """
        return self._run(self._scale_down(list(workers)), "scale-down")

    def _run(self, coro: Any, name: str) -> Any:
        if self.asynchronous or self._in_loop_thread():
            return self._spawn(coro, name=name)

        async def run() -> Any:
            return await coro

        return self.sync(run)

    async def _scale_to(self, n: int) -> None:
        """Run ``n`` entries (the base class's hook; ``n`` counts entries here)."""
        self._set_target(n)
        await self._correct_state()

    async def _scale_down(self, workers: list[Any]) -> None:
        names = set(self._names_of(workers))
        for nm in list(self.worker_spec):
            if nm in names:
                del self.worker_spec[nm]
        await self._correct_state()

    @property
    def _cluster_class_name(self) -> str:
        # As dask's: the name given (SSHCluster passes its own), else the class's.
        return self._name

    def _scaling_state(self) -> tuple[int, AdaptiveCore | None]:
        return len(self.requested), self._adaptive

    def __await__(self) -> Generator[Any, None, Self]:
        """Start the cluster if need be, then wait until the workers match ``worker_spec`` (as in dask.distributed)."""

        async def settle() -> Self:
            await self._start_once()
            await self._correct_state()
            return self

        return settle().__await__()

    def _names_of(self, workers: Iterable[Any]) -> list[Any]:
        """Names in ``worker_spec`` of the entries of these workers, given by name or by address."""
        by_str: dict[str, Any] = {}
        for nm, spec in self.worker_spec.items():
            by_str[str(nm)] = nm
            for member in worker_names(nm, spec):
                by_str[str(member)] = nm
        by_addr: dict[str, Any] = {}
        for nm, h in self.workers.items():
            addr = self._worker_address(h)
            if addr:
                by_addr[addr] = nm
        for addr, info in self.scheduler_info.get("workers", {}).items():
            if str(info.get("name")) in by_str:
                by_addr.setdefault(addr, by_str[str(info.get("name"))])
        out: list[Any] = []
        for w in workers:
            if w in self.worker_spec:
                nm = w
            elif str(w) in by_str:
                nm = by_str[str(w)]
            elif w in by_addr:
                nm = by_addr[w]
            else:
                continue
            if nm not in out:
                out.append(nm)
        return out

    def worker_groups(self) -> dict[Any, list[Any]]:
        """The names of the workers each entry of ``worker_spec`` runs, by entry name."""
        return {nm: worker_names(nm, spec) for nm, spec in self.worker_spec.items()}

    # -- what adaptive scaling looks at ---------------------------------------------------
    @property
    def plan(self) -> set[Any]:
        """Names of the workers wanted (those of ``worker_spec``'s entries)."""
        return {w for members in self.worker_groups().values() for w in members}

    @property
    def requested(self) -> set[Any]:
        """Names of the workers asked for: those wanted."""
        return self.plan

    @property
    def observed(self) -> set[Any]:
        """Names of the workers the scheduler knows (as last refreshed)."""
        return self.names_known([info.get("name") for info in self.scheduler_info.get("workers", {}).values()])

    def names_known(self, names: Iterable[Any]) -> set[Any]:
        """These names reported by workers, as the cluster names them (a name sent as text maps back to its key)."""
        by_str = {str(w): w for w in self.plan}
        return {by_str.get(str(nm), nm) for nm in names}

    def adapt(
        self,
        Adaptive: type[Adaptive] | None = None,
        minimum: int = 0,
        maximum: float = math.inf,
        minimum_cores: int | None = None,
        maximum_cores: int | None = None,
        minimum_memory: str | int | None = None,
        maximum_memory: str | int | None = None,
        **kwargs: Any,
    ) -> Adaptive:
        """Let the scheduler's load set the number of workers, between bounds.

        Replaces any previous adaptive scaling (its options are kept unless
        given again); :meth:`scale` stops it.

        Parameters
        ----------
        Adaptive
            The class to use (default :class:`~distributed.deploy.Adaptive`).
        minimum, maximum
            Bounds on the number of workers.
        minimum_cores, maximum_cores, minimum_memory, maximum_memory
            Bounds in threads or bytes, turned into workers from the worker
            template (the minimum rounded up, the maximum down).
        **kwargs
            For the Adaptive: ``interval``, ``target_duration``, ``wait_count``.
        """
        from distributed.deploy.adaptive import Adaptive as DefaultAdaptive

        cls = Adaptive or DefaultAdaptive
        # Cores and memory are counted per entry (a job of a group), the bounds in workers.
        per = self._group_size()
        if minimum_cores is not None:
            minimum = max(minimum or 0, per * math.ceil(minimum_cores / self._threads_per_worker()))
        if minimum_memory is not None:
            minimum = max(minimum or 0, per * math.ceil(parse_bytes(minimum_memory) / self._memory_per_worker()))
        if maximum_cores is not None:
            maximum = min(maximum, per * math.floor(maximum_cores / self._threads_per_worker()))
        if maximum_memory is not None:
            maximum = min(maximum, per * math.floor(parse_bytes(maximum_memory) / self._memory_per_worker()))
        if self._adaptive is not None:
            self._adaptive.stop()
        self._adaptive_options.update(kwargs)
        self._adaptive_options.update(minimum=minimum, maximum=maximum)
        self._adaptive = cls(self, **self._adaptive_options)
        return self._adaptive
