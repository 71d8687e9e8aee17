"""The scheduler: one object holding the cluster's state and running it.

Theory of operation
-------------------
Clients submit graphs of tasks; workers run them.  The scheduler keeps a
:class:`TaskState` per key, a :class:`WorkerState` per worker and a
:class:`ClientState` per client, and moves tasks through the states

    released -> waiting -> (queued | no-worker | processing) -> memory | erred
    ... -> released -> forgotten

The state machine is plain methods without I/O.  A stimulus (a graph arrives,
a task finished, a worker left) changes state and returns an :class:`Effects`:
the recommendations still to apply and the messages to send.
:meth:`SchedulerState.transitions` applies recommendations until none are left;
each allowed ``(start, finish)`` pair has one method in a table, and every
change of ``TaskState.state`` happens inside one of them, so the transition
counter, :meth:`SchedulerState.story`, validation and the plugins' ``transition``
hook see every change.  Any other pair goes through ``released`` (or raises
:class:`InvalidTransition` in validation mode).  What a transition needs from
its stimulus (the report of a finished task, where scattered data landed, the
worker whose thread freed up for a queued task) is given to ``transitions``
apart, as :class:`~distributed.scheduler.records.TransitionInputs`, so that the
:class:`Effects` hold only what goes out.  Only then does the I/O shell send the
messages, batched per worker and per client.  Tests drive the same methods
without any socket.

The package, by seam:

- :mod:`.records`: :class:`TaskState`, :class:`WorkerState`, :class:`ClientState`,
  task groups and prefixes, and :class:`Effects`;
- :mod:`.state`: :class:`SchedulerState`, the transition table and worker choice;
- :mod:`.stimuli`: what workers and clients do to the state;
- :mod:`.graph`: graphs from clients, in named phases;
- :mod:`.server`: :class:`Scheduler`, the I/O shell (listening, heartbeats,
  plugins, sending), with :mod:`.streams` (registration and the long-lived
  streams), :mod:`.requests` (queries, functions, retiring, restarts),
  :mod:`.extensions`, :mod:`.events`, :mod:`.stealing` and :mod:`.rebalance`.

``Scheduler`` is the state machine's classes and the server in one object
(``Scheduler(GraphIngestion, Server)``): plugins and users reach the state as
``scheduler.tasks``, ``scheduler.workers``, as in dask.

Two rules keep tasks from holding the cluster: a key asked for by
``fire_and_forget`` is wanted by a stand-in client only until it is done (the
transitions into memory and erred drop that want, then release the key if
nothing else wants it); and a task whose inputs add up to more than the largest
worker memory limit errs with ``MemoryError`` as it gets ready, instead of
killing worker after worker.

The run specification of a task is kept as the serialised bytes the client
sent: the scheduler never unpickles user code unless a user asks it to
(``run_on_scheduler``, scheduler plugins), and refuses such requests when
``distributed.scheduler.pickle`` is False.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from distributed.utils import lazy_attribute

if TYPE_CHECKING:
    from distributed.exceptions import KilledWorker
    from distributed.scheduler.records import (
        ClientState,
        Effects,
        TaskGroup,
        TaskPrefix,
        TaskState,
        TaskStateName,
        WorkerState,
    )
    from distributed.scheduler.server import Scheduler
    from distributed.scheduler.state import SchedulerState

#: Where each name of this face comes from: imported on first use, so that a caller of one side loads only it.
_SOURCES: Final = {
    "ClientState": "distributed.scheduler.records",
    "Effects": "distributed.scheduler.records",
    # Raised to clients, defined with the other exceptions; dask's scheduler module has it, and code imports it there.
    "KilledWorker": "distributed.exceptions",
    "Scheduler": "distributed.scheduler.server",
    "SchedulerState": "distributed.scheduler.state",
    "TaskGroup": "distributed.scheduler.records",
    "TaskPrefix": "distributed.scheduler.records",
    "TaskState": "distributed.scheduler.records",
    "TaskStateName": "distributed.scheduler.records",
    "WorkerState": "distributed.scheduler.records",
}

__all__ = [
    "ClientState",
    "Effects",
    "KilledWorker",
    "Scheduler",
    "SchedulerState",
    "TaskGroup",
    "TaskPrefix",
    "TaskState",
    "TaskStateName",
    "WorkerState",
]


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, _SOURCES, name)


def __dir__() -> list[str]:
    return sorted(__all__)
