"""Plugin interfaces for the scheduler and workers.

Subclass and override only the hooks you need; every hook is optional.
Plugins run inside the scheduler (or worker) process: they are the one place,
besides ``run_on_scheduler``, where user code runs on the scheduler, and only
because a user registered them.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler
    from distributed.worker import Worker

__all__ = [
    "CondaInstall",
    "Environ",
    "ForwardLoggingPlugin",
    "InstallPlugin",
    "NannyPlugin",
    "PipInstall",
    "SchedulerPlugin",
    "UploadDirectory",
    "UploadFile",
    "WorkerPlugin",
    "WorkerSetupCallback",
]


class SchedulerPlugin:
    """Hooks called by the scheduler on its events.

    Examples
    --------
    >>> class Counter(SchedulerPlugin):
    ...     def __init__(self):
    ...         self.count = 0
    ...     def transition(self, key, start, finish, *args, **kwargs):
    ...         if finish == "memory":
    ...             self.count += 1
    """

    name: str | None = None
    idempotent: bool = False

    async def start(self, scheduler: Scheduler) -> None:
        """Run when the plugin is added to a running scheduler."""

    async def before_close(self) -> None:
        """Run before the scheduler closes."""

    async def close(self) -> None:
        """Run when the scheduler closes."""

    def update_graph(
        self,
        scheduler: Scheduler,
        *,
        client: str,
        keys: set[Any],
        tasks: list[Any],
        annotations: dict[str, dict[Any, Any]],
        priority: dict[Any, tuple[Any, ...]],
        stimulus_id: str,
        **kwargs: Any,
    ) -> None:
        """Run once for each graph a client submits."""

    def restart(self, scheduler: Scheduler) -> None:
        """Run when the scheduler restarts its workers (``Client.restart``).

        Called after every future was cancelled and before the nannies
        replace the worker processes.
        """

    def transition(self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any) -> None:
        """Run after each change of a task's state, with the stimulus that caused it.

        Every change goes through the scheduler's transition table, so the
        calls match ``Scheduler.story(key)`` step for step.  A task going to
        memory also passes ``nbytes`` and ``type``, with ``worker`` (computed)
        or ``workers`` (scattered).
        """

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        """Run when a worker joins."""

    def remove_worker(self, scheduler: Scheduler, worker: str, *, stimulus_id: str, **kwargs: Any) -> None:
        """Run when a worker leaves."""

    def add_client(self, scheduler: Scheduler, client: str) -> None:
        """Run when a client connects."""

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        """Run when a client disconnects."""

    def log_event(self, topic: str, msg: Any) -> None:
        """Run when an event is logged."""


class WorkerPlugin:
    """Hooks called by a worker on its events.

    Examples
    --------
    >>> class Transitions(WorkerPlugin):
    ...     def setup(self, worker):
    ...         self.seen = []
    ...     def transition(self, key, start, finish, **kwargs):
    ...         self.seen.append((key, start, finish))
    """

    name: str | None = None
    idempotent: bool = False

    def setup(self, worker: Worker) -> Any:
        """Run when the plugin is attached to a worker."""

    def teardown(self, worker: Worker) -> Any:
        """Run when the worker closes."""

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        """Run after each change of a task's state on the worker.

        ``kwargs`` holds ``stimulus_id``, the cause of the change.  Called in the
        worker's event loop for every task: keep it quick.  An exception is logged
        and does not stop the worker.
        """


class UploadFile(WorkerPlugin):
    """Save a file in each worker's local directory, and import it (``Client.upload_file``).

    A ``.py`` file is imported as a module (imported afresh when it was
    already); a ``.zip`` or ``.egg`` goes on ``sys.path`` with each top-level
    module or package in it imported.  Registered with the scheduler, it
    reaches every worker that joins later too.

    Parameters
    ----------
    filepath
        The file, read now.
    load
        Import it on the workers (otherwise it is only saved, and a ``.py``
        can be imported by tasks later).
    """

    name = "upload_file"

    def __init__(self, filepath: str | os.PathLike[str], load: bool = True) -> None:
        with open(filepath, "rb") as f:
            self.data = f.read()
        self.filename = os.path.basename(os.fspath(filepath))
        self.load = load

    async def setup(self, worker: Worker) -> None:
        """Save and import the file on ``worker``."""
        reply = await worker.upload_file(self.filename, self.data, load=self.load)
        if reply["nbytes"] != len(self.data):
            raise OSError(f"{self.filename}: {reply['nbytes']} of {len(self.data)} bytes were saved")


class WorkerSetupCallback(WorkerPlugin):
    """Run a function when the plugin is set up on a worker (``Client.register_worker_callbacks``).

    Parameters
    ----------
    setup
        Called with no arguments, or with the worker as ``dask_worker=`` when
        it takes that keyword; its awaitable, if it returns one, is awaited.
    """

    def __init__(self, setup: Callable[..., Any]) -> None:
        if not callable(setup):
            raise TypeError(f"A worker setup callback must be callable, got {setup!r}")
        self.callback = setup

    def setup(self, worker: Worker) -> Any:
        """Call the callback."""
        try:
            takes_worker = "dask_worker" in inspect.signature(self.callback).parameters
        except (TypeError, ValueError):  # a callable without a signature
            takes_worker = False
        return self.callback(dask_worker=worker) if takes_worker else self.callback()


class ForwardLoggingPlugin(WorkerPlugin):
    """Send what a logger logs on each worker to the clients, as events of ``topic`` (``Client.forward_logging``).

    Each record becomes plain data (its message formatted, its traceback as
    text) logged on the scheduler under ``topic``; a client subscribed there
    hands it to its own logger of the same name.

    Parameters
    ----------
    logger_name
        The logger on the workers (None: the root logger, so every record).
    level
        The least level forwarded.
    topic
        The event topic.
    """

    def __init__(self, logger_name: str | None, level: int, topic: str) -> None:
        self.logger_name = logger_name
        self.level = level
        self.topic = topic
        self.handler: logging.Handler | None = None

    def setup(self, worker: Worker) -> None:
        """Attach the forwarding handler to the logger on ``worker``."""
        self.handler = _EventForwardingHandler(worker, self.topic, self.level)
        logging.getLogger(self.logger_name).addHandler(self.handler)

    def teardown(self, worker: Worker) -> None:
        """Detach the handler."""
        if self.handler is not None:
            logging.getLogger(self.logger_name).removeHandler(self.handler)
            self.handler = None


class _EventForwardingHandler(logging.Handler):
    def __init__(self, worker: Worker, topic: str, level: int) -> None:
        super().__init__(level)
        self.worker = worker
        self.topic = topic

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {k: v for k, v in vars(record).items() if isinstance(v, (str, int, float, bool, type(None)))}
            fields["msg"] = record.getMessage()
            fields["args"] = None
            if record.exc_info and not record.exc_text:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            fields.pop("exc_info", None)
            self.worker.log_event(self.topic, fields)
        except Exception:
            self.handleError(record)


class NannyPlugin:
    """Hooks called by a nanny, in the nanny's process.

    Register one with ``Client.register_plugin``: it is set up on every nanny,
    those running now and each one that starts later.  With ``restart = True``
    each nanny then replaces its worker process, so that the new worker sees
    what ``setup`` changed (environment variables, files).

    Examples
    --------
    >>> class Greeting(NannyPlugin):
    ...     restart = True
    ...     def setup(self, nanny):
    ...         os.environ["GREETING"] = "hello"
    """

    name: str | None = None
    restart: bool = False

    def setup(self, nanny: Any) -> Any:
        """Run when the plugin is attached (may be a coroutine function)."""

    def teardown(self, nanny: Any) -> Any:
        """Run when the plugin is removed or the nanny closes (may be a coroutine function)."""


class Environ(NannyPlugin):
    """Set environment variables in every nanny's process, then restart its worker to see them.

    Parameters
    ----------
    environ
        Variable names and values (values are turned into strings).

    Examples
    --------
    >>> client.register_plugin(Environ({"OMP_NUM_THREADS": "1"}))  # doctest: +SKIP
    """

    restart = True

    def __init__(self, environ: Mapping[str, Any] | None = None) -> None:
        self.environ = {str(k): str(v) for k, v in (environ or {}).items()}

    def setup(self, nanny: Any) -> None:
        os.environ.update(self.environ)


def plugin_names(plugins: Iterable[Any]) -> list[str]:
    """Names of plugins, made up from their types where they have none."""
    return [getattr(p, "name", None) or f"{type(p).__name__}-{id(p):x}" for p in plugins]


# dask users import these from here.  Imported last: that module subclasses WorkerPlugin and NannyPlugin above.
from distributed.diagnostics.install import CondaInstall, InstallPlugin, PipInstall, UploadDirectory  # noqa: E402
