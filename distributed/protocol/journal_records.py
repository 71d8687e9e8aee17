"""The records a scheduler keeps in its journal of what happened, besides the messages it was sent.

Most of the journal is requests and stream messages kept as they came (see
:mod:`distributed.scheduler.journal`).  These records are what the scheduler
decided on its own and a successor must know: a task's error, a retry spent,
a key ``fire_and_forget`` let go of once done, a lease of a lock or a
semaphore granted or ended.  They are never sent on a wire.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal, TypedDict

from distributed.protocol.messages import ClientKeys
from distributed.protocol.wire_types import Key, Payload

__all__ = [
    "LockFreed",
    "LockGranted",
    "SemaphoreFreed",
    "SemaphoreGranted",
    "StateRecord",
    "TaskErredRecord",
    "TaskRetriedRecord",
]


class TaskErredRecord(TypedDict):
    """A task erred on its own (its dependents erred with it)."""

    op: Literal["erred-before"]
    key: Key
    exception: Payload
    traceback: Any
    text: str


class TaskRetriedRecord(TypedDict):
    """A task erred and runs again; ``retries`` are left."""

    op: Literal["retried-before"]
    key: Key
    retries: int


#: What the scheduler's state keeps for the journal as its transitions run: errors, retries spent,
#: and the keys ``fire_and_forget`` let go of once done (a ``client-releases-keys`` of that client).
StateRecord = TaskErredRecord | TaskRetriedRecord | ClientKeys


class LockGranted(TypedDict):
    """Lease ``id`` holds lock ``name`` (through ``client``)."""

    op: Literal["lock_granted"]
    name: Hashable
    id: str
    client: str | None


class LockFreed(TypedDict):
    """Lease ``id`` holds lock ``name`` no more."""

    op: Literal["lock_freed"]
    name: Hashable
    id: str


class SemaphoreGranted(TypedDict):
    """Lease ``id`` of semaphore ``name`` (of ``max_leases``) was granted."""

    op: Literal["semaphore_granted"]
    name: Hashable
    id: str
    client: str | None
    max_leases: int


class SemaphoreFreed(TypedDict):
    """Lease ``id`` of semaphore ``name`` ended."""

    op: Literal["semaphore_freed"]
    name: Hashable
    id: str
