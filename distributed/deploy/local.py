"""LocalCluster: a scheduler and workers on this machine.

Theory of operation
-------------------
The scheduler always runs in this process, on the cluster's event loop.
Workers run either

* in this process, on the same loop (``processes=False``): comms default to
  the in-process transport (``inproc://``), so nothing is serialised; or
* in child processes (``processes=True``), each under a
  :class:`~distributed.Nanny` in this process (as in dask.distributed), which
  starts the worker again when its process dies; with an explicit Worker
  class, one bare :class:`ServerProcess` each (nothing restarts it).  Either
  way the workers talk TCP on 127.0.0.1 (by default).

Workers are named ``0, 1, 2, ...`` in the order they are added; scaling down
retires the most recently added workers first: the scheduler moves the data
only they hold to the remaining workers and forgets them, then they are closed
(a nanny does not start a retired worker again).

Default sizes (``cores`` is ``os.cpu_count()``):

* ``processes=False``: one worker with ``cores`` threads.
* ``processes=True``: up to 4 cores, one single-threaded worker per core;
  beyond that, the number of workers is the smallest divisor of ``cores`` that
  is at least ``sqrt(cores)``, each with ``cores // workers`` threads (8 cores
  give 4 workers x 2 threads, 16 give 4 x 4, 12 give 4 x 3).
* Given only ``n_workers``, each gets ``max(1, cores // n_workers)`` threads;
  given only ``threads_per_worker``, there are ``max(1, cores //
  threads_per_worker)`` workers.
* ``memory_limit="auto"`` gives each worker the machine's total memory divided
  by the initial number of workers.

Worker processes are started with the "spawn" method, which re-imports the
main module in each child: a script that makes a ``LocalCluster`` with
processes must do so under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from distributed.deploy.spec import SpecCluster
from distributed.nanny import Nanny
from distributed.scheduler import Scheduler
from distributed.security import Security, coerce_security
from distributed.spawn import WorkerProcess
from distributed.system import MEMORY_LIMIT
from distributed.utils import get_ip_interface, import_term, refuse_unsupported
from distributed.widgets import Field
from distributed.worker import Worker, parse_memory_limit

logger = logging.getLogger(__name__)

__all__ = ["LocalCluster", "cluster_protocol", "nprocesses_nthreads", "split_cores", "worker_counts"]


def split_cores(cores: int) -> tuple[int, int]:
    """The default ``(n_workers, threads_per_worker)`` for ``cores`` cores with processes.

    Examples
    --------
    >>> split_cores(2)
    (2, 1)
    >>> split_cores(8)
    (4, 2)
    >>> split_cores(7)
    (7, 1)
    """
    cores = max(1, cores)
    if cores <= 4:
        return cores, 1
    root = math.sqrt(cores)
    workers = min(d for d in range(1, cores + 1) if cores % d == 0 and d >= root)
    return workers, cores // workers


def nprocesses_nthreads(n: int | None = None) -> tuple[int, int]:
    """The default ``(processes, threads_per_process)`` for ``n`` cores (default: this machine's).

    The split :class:`LocalCluster` makes with processes (see :func:`split_cores`);
    libraries that deploy dask on batch systems size their jobs' workers with it.

    Examples
    --------
    >>> nprocesses_nthreads(4)
    (4, 1)
    >>> nprocesses_nthreads(32)
    (8, 4)
    """
    return split_cores(os.cpu_count() or 1 if n is None else n)


def _resolve_worker_class(worker_class: Any) -> type[Any] | None:
    if worker_class is None:
        return None
    if isinstance(worker_class, str):
        try:
            cls = import_term(worker_class)
        except (ImportError, AttributeError) as e:
            raise ImportError(
                f"worker_class {worker_class!r} cannot be imported ({type(e).__name__}: {e}). "
                "Give a class, or the dotted path of an importable class such as 'distributed.Worker'."
            ) from e
    else:
        cls = worker_class
    if not isinstance(cls, type):
        raise TypeError(f"worker_class must be a class or its dotted path, got {worker_class!r}")
    return cls


def worker_counts(n_workers: int | None, threads_per_worker: int | None, processes: bool) -> tuple[int, int]:
    """How many workers of how many threads a LocalCluster starts: the given, the rest from this machine's cores.

    Raises
    ------
    ValueError
        For fewer than 0 workers or 1 thread.
    """
    cores = os.cpu_count() or 1
    if n_workers is None and threads_per_worker is None:
        n_workers, threads_per_worker = split_cores(cores) if processes else (1, cores)
    elif n_workers is None:
        assert threads_per_worker is not None
        n_workers = max(1, cores // max(1, threads_per_worker))
    elif threads_per_worker is None:
        threads_per_worker = max(1, cores // max(1, n_workers))
    if n_workers < 0 or threads_per_worker < 1:
        raise ValueError(f"Need n_workers >= 0 and threads_per_worker >= 1, got {n_workers}, {threads_per_worker}")
    return n_workers, threads_per_worker


def cluster_protocol(protocol: str | None, encrypted: bool, processes: bool, scheduler_port: int) -> str:
    """The protocol a LocalCluster's servers use: the given, else TLS with credentials, else in-process or TCP.

    Raises
    ------
    ValueError
        For the in-process protocol with worker processes.
    """
    if protocol is None:
        if encrypted:
            protocol = "tls"
        else:
            protocol = "inproc" if not processes and not scheduler_port else "tcp"
    protocol = protocol.rstrip(":/")
    if processes and protocol == "inproc":
        raise ValueError("Worker processes cannot use the in-process protocol")
    return protocol


class LocalCluster(SpecCluster):
    """A scheduler and workers on this machine.

    A :class:`~distributed.deploy.SpecCluster` whose specs the parameters
    below fill in: ``worker_spec`` holds one entry per worker, ``new_spec`` is
    the template :meth:`scale` copies, and :meth:`adapt` sizes it by load.

    Parameters
    ----------
    n_workers
        Workers to start (default: see the module docstring).
    threads_per_worker, nthreads
        Threads per worker (``nthreads`` is an alias).
    processes
        Run workers in child processes (True) or in this process on the
        cluster's loop (False).  None means True unless ``worker_class`` is
        given, in which case workers run in this process.
    loop
        A loop running in another thread to use (synchronous clusters only).
    start
        Not supported, as in dask.distributed: only None (the cluster always starts).
    host, ip
        Where the scheduler and workers listen (default 127.0.0.1).
    scheduler_port
        The scheduler's port (0 picks a free one).
    silence_logs
        A log level for the ``distributed`` logger while the cluster runs
        (falsy leaves logging alone).
    dashboard_address
        Where the scheduler serves its dashboard; None means no dashboard.
    worker_dashboard_address
        Where each worker serves its own dashboard (``":0"``: a free port
        each); None (the default): workers serve none.
    diagnostics_port
        Deprecated alias of ``dashboard_address``.
    services, worker_services, service_kwargs
        Not supported yet: only None or empty.
    asynchronous
        Run on the caller's loop: ``await LocalCluster(asynchronous=True)`` or
        ``async with LocalCluster(asynchronous=True) as cluster``.
    security
        A :class:`~distributed.security.Security` for the scheduler, the
        workers and the cluster's (and its clients') connections, or ``True``
        for :meth:`Security.temporary` credentials made for this cluster.
    protocol
        ``"tcp"``, ``"tls"`` or ``"inproc"``; default ``"tls"`` when
        ``security`` requires encryption, else ``"inproc"`` without processes
        (and without a fixed ``scheduler_port``), ``"tcp"`` otherwise.
    blocked_handlers
        Scheduler operations to refuse.
    interface
        A network interface whose IPv4 address to listen on.
    worker_class
        The worker class, or its dotted import path (e.g.
        ``"distributed.Worker"``).
    scheduler_kwargs
        Extra keyword arguments for the :class:`~distributed.Scheduler`.
    scheduler_sync_interval
        Seconds between refreshes of ``scheduler_info``.
    memory_limit
        Per worker: ``"auto"``, bytes, a string like ``"4GiB"``, or 0/None.
    name
        A name for the cluster.
    **worker_kwargs
        Extra keyword arguments for every worker (plain data when
        ``processes=True``).

    Examples
    --------
    >>> with LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster:  # doctest: +SKIP
    ...     with Client(cluster) as client:
    ...         client.submit(sum, [1, 2]).result()
    3
    """

    def __init__(
        self,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        processes: bool | None = None,
        loop: Any = None,
        start: Any = None,
        host: str | None = None,
        ip: str | None = None,
        scheduler_port: int = 0,
        silence_logs: int | str | bool = logging.WARN,
        dashboard_address: str | None = ":8787",
        worker_dashboard_address: str | None = None,
        diagnostics_port: str | int | None = None,
        services: dict[str, Any] | None = None,
        worker_services: dict[str, Any] | None = None,
        service_kwargs: dict[str, Any] | None = None,
        asynchronous: bool = False,
        security: Security | dict[str, Any] | bool | None = None,
        protocol: str | None = None,
        blocked_handlers: list[str] | None = None,
        interface: str | None = None,
        worker_class: type[Any] | str | None = None,
        scheduler_kwargs: dict[str, Any] | None = None,
        scheduler_sync_interval: float | str = 1,
        memory_limit: str | float | None = "auto",
        nthreads: int | None = None,
        name: str | None = None,
        **worker_kwargs: Any,
    ) -> None:
        if start is not None:
            # As dask.distributed: the cluster always starts (await it when asynchronous).
            raise ValueError("LocalCluster(start=...) is not supported: a LocalCluster always starts")
        refuse_unsupported(
            "LocalCluster",
            services=bool(services),
            worker_services=bool(worker_services),
            service_kwargs=bool(service_kwargs),
        )
        if threads_per_worker is None:
            threads_per_worker = nthreads
        elif nthreads is not None and nthreads != threads_per_worker:
            raise ValueError(f"nthreads={nthreads} contradicts threads_per_worker={threads_per_worker}")
        self._worker_cls = _resolve_worker_class(worker_class)
        if processes is None:
            processes = worker_class is None or (self._worker_cls is not None and issubclass(self._worker_cls, Nanny))
        self.processes = processes
        #: Whether each worker process runs under a nanny (processes=True and no plain Worker class given).
        self.nannies = bool(processes) and (self._worker_cls is None or issubclass(self._worker_cls, Nanny))
        if not processes and self._worker_cls is not None and issubclass(self._worker_cls, Nanny):
            raise ValueError("worker_class=Nanny runs workers in processes: it needs processes=True")
        if self.processes and self._worker_cls is not None and not self.nannies:
            self._worker_class_path: str | None = f"{self._worker_cls.__module__}.{self._worker_cls.__qualname__}"
            if "<locals>" in self._worker_class_path or self._worker_cls.__module__ == "__main__":
                raise ValueError(
                    f"worker_class {self._worker_class_path!r} cannot be imported in a child process; "
                    "define it in an importable module or use processes=False"
                )
        else:
            self._worker_class_path = None

        n_workers, threads_per_worker = worker_counts(n_workers, threads_per_worker, bool(processes))
        self.threads_per_worker = threads_per_worker
        if memory_limit == "auto":
            self.memory_limit: str | float | None = MEMORY_LIMIT // max(1, n_workers)
        else:
            parse_memory_limit(memory_limit, threads_per_worker)  # a bad value fails here, not in each worker
            self.memory_limit = memory_limit

        host = host or ip
        if host and "://" in host:
            scheme, _, host = host.partition("://")
            protocol = protocol or scheme
        if interface and host:
            raise ValueError(f"LocalCluster: give host= or interface=, not both (got {host!r} and {interface!r})")
        if interface:
            host = get_ip_interface(interface)  # a missing interface fails here, naming it
        sec = coerce_security(security, "LocalCluster", temporary_ok=True)
        self.protocol = cluster_protocol(protocol, sec.require_encryption, bool(processes), scheduler_port)
        self.host = host or "127.0.0.1"
        self.scheduler_port = scheduler_port

        if diagnostics_port is not None and dashboard_address == ":8787":
            dashboard_address = f":{diagnostics_port}" if isinstance(diagnostics_port, int) else diagnostics_port
        self._scheduler_kwargs: dict[str, Any] = {
            "dashboard": dashboard_address is not None,
            "dashboard_address": dashboard_address,
        }
        self._scheduler_kwargs.update(scheduler_kwargs or {})
        self._blocked_handlers = list(blocked_handlers or ())
        self._worker_kwargs = dict(worker_kwargs)

        # What each worker is started from, as a SpecCluster worker spec.
        options: dict[str, Any] = {
            "nthreads": self.threads_per_worker,
            "memory_limit": self.memory_limit,
            "protocol": self.protocol,
            "security": sec,
        }
        # Where the scheduler and the workers listen, as the spec's own options (libraries that
        # deploy dask read "interface" there); the in-process protocol has no host.
        where: dict[str, Any] = {}
        if self.protocol != "inproc":
            where = {"interface": interface} if interface else {"host": self.host}
        options.update(where)
        if worker_dashboard_address is not None:
            options.update(dashboard=True, dashboard_address=worker_dashboard_address)
        options.update(worker_kwargs)
        level = silence_logs if silence_logs is not True else logging.WARN
        worker_cls: Any
        if self.nannies:
            worker_cls = self._worker_cls or Nanny
            options["silence_logs"] = level or None
        elif self.processes:
            worker_cls = WorkerProcess
            options["server_class"] = self._worker_class_path
            options["log_level"] = level or None
        else:
            worker_cls = self._worker_cls or Worker
        worker_spec = {"cls": worker_cls, "options": options}
        scheduler_options: dict[str, Any] = {
            **where,
            "port": self.scheduler_port,
            "protocol": self.protocol,
            "security": sec,
            **self._scheduler_kwargs,
        }
        super().__init__(
            workers={i: {"cls": worker_cls, "options": dict(options)} for i in range(n_workers)},
            scheduler={"cls": Scheduler, "options": scheduler_options},
            worker=worker_spec,
            asynchronous=asynchronous,
            loop=loop,
            security=sec,
            silence_logs=silence_logs,
            name=name,
            scheduler_sync_interval=scheduler_sync_interval,
        )

    async def _scheduler_started(self, scheduler: Any) -> None:
        for op in self._blocked_handlers:
            scheduler.handlers.pop(op, None)

    def _html_fields(self) -> list[Field]:
        return [*super()._html_fields(), Field("processes", "Using processes", self.processes)]
