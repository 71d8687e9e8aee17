"""The wire messages of the coordination primitives (``Lock``, ``Semaphore``, ``Variable``,
``Queue``, ``Event``, ``MultiLock``): user-side primitive -> its scheduler extension.

One group with one sender and one receiver, declared apart from
:mod:`distributed.protocol.messages`, which re-exports every name here; that
module's rules hold (requests carry ``op``; sequences arrive as tuples over TCP).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypedDict

from distributed.protocol.wire_types import Key, Payload

#: The name of a coordination primitive: any msgpack-able key; lists arrive
#: as tuples over TCP, so extensions normalise them (see ``coordination``).
PrimitiveName = str | int | float | bytes | Sequence[Any]


class LockAcquire(TypedDict):
    """Wait until the lock ``name`` is free (at most ``timeout`` seconds), then hold it as ``id``.

    ``client`` is the id of the holder's client: the lease ends when that
    client leaves the scheduler.
    """

    op: Literal["lock_acquire"]
    name: PrimitiveName
    id: str
    timeout: NotRequired[float | None]
    client: NotRequired[str | None]


class LockRelease(TypedDict):
    op: Literal["lock_release"]
    name: PrimitiveName
    id: str


class LockLocked(TypedDict):
    op: Literal["lock_locked"]
    name: PrimitiveName


class LockRefresh(TypedDict):
    """The holder of these leases of lock ``name`` is alive (they do not time out yet)."""

    op: Literal["lock_refresh_leases"]
    name: PrimitiveName
    ids: Sequence[str]


class SemaphoreAcquire(TypedDict):
    """Wait for a free lease of semaphore ``name`` (at most ``timeout`` seconds), then hold it as ``id``.

    The first request for ``name`` creates the semaphore with ``max_leases``;
    ``client`` is the id of the holder's client, as in :class:`LockAcquire`.
    """

    op: Literal["semaphore_acquire"]
    name: PrimitiveName
    id: str
    max_leases: int
    timeout: NotRequired[float | None]
    client: NotRequired[str | None]


class SemaphoreRelease(TypedDict):
    op: Literal["semaphore_release"]
    name: PrimitiveName
    id: str


class SemaphoreRefresh(TypedDict):
    """The holder of these leases of semaphore ``name`` is alive."""

    op: Literal["semaphore_refresh_leases"]
    name: PrimitiveName
    ids: Sequence[str]


class SemaphoreValue(TypedDict):
    """How many leases of semaphore ``name`` are held."""

    op: Literal["semaphore_value"]
    name: PrimitiveName


class SemaphoreClose(TypedDict):
    """Forget semaphore ``name``: its leases end, its waiters get no lease."""

    op: Literal["semaphore_close"]
    name: PrimitiveName


class HeldItem(TypedDict):
    """What a Queue or Variable holds: a user object the scheduler never opens, or a future's key.

    Exactly one of ``value`` and ``key`` is present; the scheduler keeps the
    task of ``key`` alive while it holds the item.
    """

    value: NotRequired[Payload]
    key: NotRequired[Key]


class VariableSet(TypedDict):
    op: Literal["variable_set"]
    name: PrimitiveName
    item: HeldItem


class VariableGet(TypedDict):
    """Wait until variable ``name`` has a value (at most ``timeout`` seconds); return it.

    A future's key returned is wanted by ``client`` (the getter) from then on.
    """

    op: Literal["variable_get"]
    name: PrimitiveName
    timeout: NotRequired[float | None]
    client: NotRequired[str | None]


class VariableGetReply(TypedDict):
    """The value of a variable (``item``), unless ``timeout`` passed first."""

    item: NotRequired[HeldItem]


class VariableDelete(TypedDict):
    op: Literal["variable_delete"]
    name: PrimitiveName


class VariableIsSet(TypedDict):
    """Whether variable ``name`` has a value now (the reply is a bool)."""

    op: Literal["variable_is_set"]
    name: PrimitiveName


class QueuePut(TypedDict):
    """Append ``item`` to queue ``name``, waiting (at most ``timeout`` seconds) while it is full.

    The first request for ``name`` creates the queue with ``maxsize`` (0: unbounded).
    """

    op: Literal["queue_put"]
    name: PrimitiveName
    maxsize: int
    item: HeldItem
    timeout: NotRequired[float | None]


class QueueGet(TypedDict):
    """Take items from queue ``name``: one, ``batch`` of them (waiting), or all there are (``batch=True``).

    Keys of futures returned are wanted by ``client`` (the getter) from then on.
    """

    op: Literal["queue_get"]
    name: PrimitiveName
    maxsize: int
    batch: bool | int
    timeout: NotRequired[float | None]
    client: NotRequired[str | None]


class QueueGetReply(TypedDict):
    """The items taken; ``timed_out`` when ``timeout`` passed first (nothing is taken then)."""

    items: Sequence[HeldItem]
    timed_out: bool


class QueueSize(TypedDict):
    op: Literal["queue_qsize"]
    name: PrimitiveName
    maxsize: int


class EventSet(TypedDict):
    op: Literal["event_set"]
    name: PrimitiveName


class EventClear(TypedDict):
    op: Literal["event_clear"]
    name: PrimitiveName


class EventIsSet(TypedDict):
    op: Literal["event_is_set"]
    name: PrimitiveName


class EventWait(TypedDict):
    """Wait until event ``name`` is set (at most ``timeout`` seconds); whether it is."""

    op: Literal["event_wait"]
    name: PrimitiveName
    timeout: NotRequired[float | None]


class MultiLockAcquire(TypedDict):
    """Wait (at most ``timeout`` seconds) until ``num_locks`` of the locks ``names`` are free; hold them as ``id``.

    ``client`` is the id of the holder's client: the locks are freed when that
    client leaves the scheduler.
    """

    op: Literal["multi_lock_acquire"]
    names: Sequence[PrimitiveName]
    id: str
    num_locks: int
    timeout: NotRequired[float | None]
    client: NotRequired[str | None]


class MultiLockRelease(TypedDict):
    op: Literal["multi_lock_release"]
    id: str


#: Every request a coordination primitive sends its scheduler extension.
CoordinationRequest = (
    LockAcquire
    | LockRelease
    | LockLocked
    | LockRefresh
    | SemaphoreAcquire
    | SemaphoreRelease
    | SemaphoreRefresh
    | SemaphoreValue
    | SemaphoreClose
    | VariableSet
    | VariableGet
    | VariableDelete
    | QueuePut
    | QueueGet
    | QueueSize
    | EventSet
    | EventClear
    | EventIsSet
    | EventWait
    | MultiLockAcquire
    | MultiLockRelease
)
