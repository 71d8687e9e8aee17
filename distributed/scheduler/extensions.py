"""Scheduler extensions: optional parts of the scheduler with requests of their own.

An extension is made by calling its factory (usually its class) with the
scheduler, once, while the scheduler is constructed: ``Scheduler(extensions=
{name: factory})`` as in dask.distributed, the instance then being
``scheduler.extensions[name]``.  An extension declares the requests it answers
with a ``routes()`` method (op name -> :class:`~distributed.core.Route`) and
the batched-stream messages it handles with ``stream_routes()`` (op name ->
:class:`~distributed.core.StreamRoute`), both optional.  The scheduler
registers them right after making the extension, before it listens, so no
handler is ever patched in later; an op that is already taken is an error, and
ops listed in ``distributed.scheduler.blocked-handlers`` stay blocked.

Without ``extensions=``, a scheduler gets :data:`DEFAULT_EXTENSIONS`, less
``"stealing"`` when ``distributed.scheduler.work-stealing`` is off (as in
dask.distributed).  An extension with an ``on_start()`` method has it called
once the scheduler listens, to start periodic work on the scheduler's loop; one
with an ``on_remove_worker(address, stimulus_id, out)`` method has it called
each time a worker leaves, after the scheduler's own transitions for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import dask.config

from distributed.coordination.event_extension import EventExtension
from distributed.coordination.lock_extension import LockExtension
from distributed.coordination.multi_lock_extension import MultiLockExtension
from distributed.coordination.publish_extension import PublishExtension
from distributed.coordination.queue_extension import QueueExtension
from distributed.coordination.semaphore_extension import SemaphoreExtension
from distributed.coordination.variable_extension import VariableExtension
from distributed.core import Route, StreamRoute
from distributed.diagnostics.progress import ProgressExtension
from distributed.scheduler.amm import ActiveMemoryManagerExtension
from distributed.scheduler.spans import SpansSchedulerExtension
from distributed.scheduler.stealing import WorkStealing
from distributed.shuffle._scheduler_plugin import ShuffleSchedulerExtension

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import Effects

__all__ = [
    "DEFAULT_EXTENSIONS",
    "ExtensionFactory",
    "HasRemoveWorker",
    "HasRoutes",
    "HasStart",
    "HasStreamRoutes",
    "make_extensions",
    "start_extensions",
]

#: Makes an extension given the scheduler (usually the extension's class).
ExtensionFactory = Callable[["Scheduler"], Any]

#: The extensions every scheduler gets unless ``extensions=`` says otherwise.
DEFAULT_EXTENSIONS: Mapping[str, ExtensionFactory] = {
    "locks": LockExtension,
    "variables": VariableExtension,
    "queues": QueueExtension,
    "events": EventExtension,
    "semaphores": SemaphoreExtension,
    "multi_locks": MultiLockExtension,
    "publish": PublishExtension,
    "progress": ProgressExtension,
    "stealing": WorkStealing,
    "shuffle": ShuffleSchedulerExtension,
    "amm": ActiveMemoryManagerExtension,
    "spans": SpansSchedulerExtension,
}


@runtime_checkable
class HasRoutes(Protocol):
    """An extension answering requests."""

    def routes(self) -> Mapping[str, Route[Any]]:
        """Request routes by op name."""


@runtime_checkable
class HasStreamRoutes(Protocol):
    """An extension handling messages on batched streams."""

    def stream_routes(self) -> Mapping[str, StreamRoute[Any]]:
        """Stream routes by op name."""


@runtime_checkable
class HasStart(Protocol):
    """An extension with work of its own to start once the scheduler runs."""

    def on_start(self) -> None:
        """Called once the scheduler listens, on its event loop."""


@runtime_checkable
class HasRemoveWorker(Protocol):
    """An extension acting when a worker leaves."""

    def on_remove_worker(self, address: str, stimulus_id: str, out: Effects) -> None:
        """Called once the scheduler's own transitions for the departed worker are done."""


def make_extensions(
    scheduler: Scheduler, extensions: Mapping[str, ExtensionFactory] | None, blocked: list[str]
) -> None:
    """Make ``extensions`` (default :data:`DEFAULT_EXTENSIONS`) into ``scheduler.extensions``; register their routes.

    Each is in ``scheduler.extensions`` before the next one is made, so later
    extensions may use earlier ones.

    Raises
    ------
    TypeError
        When ``extensions`` is not a mapping of names to callables.
    ValueError
        When an extension claims an op the scheduler already answers.
    """
    if extensions is None:
        extensions = DEFAULT_EXTENSIONS
        if not dask.config.get("distributed.scheduler.work-stealing"):
            extensions = {k: v for k, v in extensions.items() if k != "stealing"}
    if not isinstance(extensions, Mapping):
        raise TypeError(
            f"Scheduler(extensions=...) takes a mapping of names to extension classes, got {type(extensions).__name__}"
        )
    for name, factory in extensions.items():
        if not callable(factory):
            raise TypeError(f"Scheduler extension {name!r} is not callable: {factory!r}")
        ext = factory(scheduler)
        scheduler.extensions[name] = ext
        if isinstance(ext, HasRoutes):
            _register(scheduler.handlers, ext.routes(), name, blocked)
        if isinstance(ext, HasStreamRoutes):
            _register(scheduler.stream_handlers, ext.stream_routes(), name, blocked)
        if isinstance(ext, HasRemoveWorker):
            scheduler.remove_worker_hooks.append(ext.on_remove_worker)


def start_extensions(scheduler: Scheduler) -> None:
    """Call ``on_start()`` of each extension that has one."""
    for ext in scheduler.extensions.values():
        if isinstance(ext, HasStart):
            ext.on_start()


def _register(table: dict[str, Any], routes: Mapping[str, Any], ext_name: str, blocked: list[str]) -> None:
    for op, route in routes.items():
        if op in table:
            raise ValueError(f"Scheduler extension {ext_name!r} claims op {op!r}, which is already handled")
        if op not in blocked:
            table[op] = route
