"""A pure-Python, fully typed Dask distributed scheduler.

Importing this package must never raise anything but ``ImportError``: dask
probes for it on every ``compute`` and catches only that.
"""

from __future__ import annotations

from distributed import (
    config,  # noqa: F401  (first: applies the logging config before other modules make their loggers)
    lock,  # noqa: F401  (dask and users import distributed.lock.Lock)
)
from distributed.client import (
    Client,
    Future,
    as_completed,
    default_client,
    fire_and_forget,
    futures_of,
    get_task_metadata,
    get_task_stream,
    performance_report,
    wait,
)
from distributed.client.actor import Actor, ActorFuture, BaseActorFuture
from distributed.coordination import Event, Lock, MultiLock, Queue, Semaphore, Variable
from distributed.core import Status, rpc
from distributed.deploy import Adaptive, LocalCluster, SpecCluster, SSHCluster
from distributed.diagnostics.plugin import (
    CondaInstall,
    Environ,
    InstallPlugin,
    NannyPlugin,
    PipInstall,
    SchedulerPlugin,
    UploadDirectory,
    UploadFile,
    WorkerPlugin,
)
from distributed.diagnostics.progressbar import progress
from distributed.exceptions import CancelledError, KilledWorker, Reschedule, TimeoutError
from distributed.nanny import Nanny
from distributed.scheduler import Scheduler
from distributed.security import Security
from distributed.spans import span
from distributed.utils import sync
from distributed.worker import Worker, get_client, get_worker, rejoin, secede
from distributed.worker.task_output import print, warn
from distributed.worker_client import local_client, worker_client

__version__ = "2026.11.0"
__git_revision__ = "unknown"

__all__ = [
    "Actor",
    "ActorFuture",
    "Adaptive",
    "BaseActorFuture",
    "CancelledError",
    "Client",
    "CondaInstall",
    "Environ",
    "Event",
    "Future",
    "InstallPlugin",
    "KilledWorker",
    "LocalCluster",
    "Lock",
    "MultiLock",
    "Nanny",
    "NannyPlugin",
    "PipInstall",
    "Queue",
    "Reschedule",
    "SSHCluster",
    "Scheduler",
    "SchedulerPlugin",
    "Security",
    "Semaphore",
    "SpecCluster",
    "Status",
    "TimeoutError",
    "UploadDirectory",
    "UploadFile",
    "Variable",
    "Worker",
    "WorkerPlugin",
    "as_completed",
    "default_client",
    "fire_and_forget",
    "futures_of",
    "get_client",
    "get_task_metadata",
    "get_task_stream",
    "get_worker",
    "local_client",
    "performance_report",
    "print",
    "progress",
    "rejoin",
    "rpc",
    "secede",
    "span",
    "sync",
    "wait",
    "warn",
    "worker_client",
]
