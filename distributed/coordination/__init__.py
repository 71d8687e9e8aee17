"""Coordination primitives: objects that tasks and clients share through the scheduler.

Layout
------
Each primitive has two halves in two modules:

* the user-side class, which users make anywhere (in a client, inside a task)
  and which talks to the scheduler through a client: :mod:`.lock` holds
  :class:`Lock`, and likewise :mod:`.multi_lock`, :mod:`.semaphore`,
  :mod:`.queue`, :mod:`.variable` and :mod:`.event`;
* the scheduler-side extension that keeps the primitive's state and answers
  its requests: :mod:`.lock_extension` holds :class:`LockExtension`, and so
  on for each primitive.

Shared parts: :mod:`.names` (names of primitives), :mod:`.primitive` (the
client a user-side object binds to and talks through), :mod:`.leases` (Lock
and Semaphore leases that end when their holder dies) with
:mod:`.lease_holder` (the leases one object holds), :mod:`.waiting` (requests
waiting in an extension, at most for their timeout) and :mod:`.held` (what a
Queue or Variable holds: user objects as opaque frames, futures as keys the
scheduler keeps computed).

Their wire messages are declared in the "coordination" section of
:mod:`distributed.protocol.messages`, and the extensions are registered with
every scheduler by :data:`distributed.scheduler.extensions.DEFAULT_EXTENSIONS`.
Names of primitives are any msgpack-able key (see :mod:`.names`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from distributed.utils import lazy_attribute

if TYPE_CHECKING:
    from distributed.coordination.event import Event
    from distributed.coordination.event_extension import EventExtension
    from distributed.coordination.lock import Lock
    from distributed.coordination.lock_extension import LockExtension
    from distributed.coordination.multi_lock import MultiLock
    from distributed.coordination.multi_lock_extension import MultiLockExtension
    from distributed.coordination.queue import Queue
    from distributed.coordination.queue_extension import QueueExtension
    from distributed.coordination.semaphore import Semaphore
    from distributed.coordination.semaphore_extension import SemaphoreExtension
    from distributed.coordination.variable import Variable
    from distributed.coordination.variable_extension import VariableExtension

#: Where each name of this face comes from: imported on first use, so that a caller of one side loads only it.
_SOURCES: Final = {
    "Event": "distributed.coordination.event",
    "EventExtension": "distributed.coordination.event_extension",
    "Lock": "distributed.coordination.lock",
    "LockExtension": "distributed.coordination.lock_extension",
    "MultiLock": "distributed.coordination.multi_lock",
    "MultiLockExtension": "distributed.coordination.multi_lock_extension",
    "Queue": "distributed.coordination.queue",
    "QueueExtension": "distributed.coordination.queue_extension",
    "Semaphore": "distributed.coordination.semaphore",
    "SemaphoreExtension": "distributed.coordination.semaphore_extension",
    "Variable": "distributed.coordination.variable",
    "VariableExtension": "distributed.coordination.variable_extension",
}

__all__ = [
    "Event",
    "EventExtension",
    "Lock",
    "LockExtension",
    "MultiLock",
    "MultiLockExtension",
    "Queue",
    "QueueExtension",
    "Semaphore",
    "SemaphoreExtension",
    "Variable",
    "VariableExtension",
]


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, _SOURCES, name)


def __dir__() -> list[str]:
    return sorted(__all__)
