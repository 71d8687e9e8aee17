"""``distributed.print`` and ``distributed.warn``: what a task prints or warns, shown by its clients too.

Called in a task on a worker, each does what the builtin does there (the
worker's log or terminal) and also logs an event of topic ``print`` or
``warn`` on the scheduler; every client shows those events as its own output
(see :mod:`distributed.client.topics`), so ``print`` debugging works from a
notebook.  Called anywhere else, they are the builtins.
"""

from __future__ import annotations

import builtins
import sys
import warnings
from typing import IO, Any

from distributed.protocol import messages as m
from distributed.task_context import current_worker

__all__ = ["print", "warn"]


def _log(topic: str, event: m.PrintEvent | m.WarnEvent) -> None:
    """Log ``event`` on the scheduler when called in a task of a worker."""
    from distributed.worker.server import Worker

    worker = current_worker()
    if isinstance(worker, Worker):
        worker.log_event(topic, event)


def print(
    *args: Any, sep: str | None = " ", end: str | None = "\n", file: IO[str] | None = None, flush: bool = False
) -> None:
    """``print``, and in a task also on the screen of every client of the cluster.

    Parameters
    ----------
    *args, sep, end, flush
        As for the builtin; each argument is sent as ``str(arg)``.
    file
        None, ``sys.stdout`` or ``sys.stderr`` (where the clients print it too).

    Raises
    ------
    TypeError
        In a task, for another ``file``: the clients could not print to it.
    """
    if current_worker() is not None:
        event: m.PrintEvent = {"args": [str(a) for a in args], "sep": sep, "end": end, "flush": flush}
        if file is sys.stdout:
            event["file"] = 1
        elif file is sys.stderr:
            event["file"] = 2
        elif file is not None:
            raise TypeError("distributed.print in a task prints to None, sys.stdout or sys.stderr only")
        _log("print", event)
    builtins.print(*args, sep=sep, end=end, file=file, flush=flush)


def warn(message: str | Warning, category: type[Warning] | None = None, stacklevel: int = 1) -> None:
    """``warnings.warn``, and in a task also raised as a warning in every client of the cluster.

    Parameters
    ----------
    message
        The text, or a ``Warning`` instance (its class is then the category).
    category
        The warning class (default ``UserWarning``); the clients warn with the
        same class when they can import it, else with ``UserWarning``.
    stacklevel
        As for ``warnings.warn``, where the task runs.
    """
    if isinstance(message, Warning):
        category = type(message)
    elif category is None:
        category = UserWarning
    if current_worker() is not None:
        _log("warn", {"message": str(message), "category": f"{category.__module__}.{category.__qualname__}"})
    warnings.warn(message, category, stacklevel=stacklevel + 1)
