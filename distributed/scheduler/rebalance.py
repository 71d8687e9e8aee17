"""Planning ``rebalance``: which keys move from the workers using the most memory to those using the least.

Each worker's memory is measured the way ``distributed.worker.memory.rebalance.measure``
says (by default *optimistic*: results in memory plus the unmanaged memory that
has lasted ``distributed.worker.memory.recent-to-old-time``, so a task's
passing heap does not count).  Against the pool's mean:

* a worker is a *sender* when it is above the mean by more than half of
  ``sender-recipient-gap`` and at or above ``sender-min``;
* a worker is a *recipient* when it is below the mean by more than half of
  the gap and below ``recipient-max``.

The three thresholds are fractions of each worker's ``memory_limit``; a worker
without one has no gap, no ``sender-min`` and no ``recipient-max``.  The plan
then repeatedly takes the sender farthest above the mean and gives its least
recently inserted key to the recipient farthest below it that does not hold the
key and has room for it, until no senders or no recipients are left.  A move
never takes a sender below the mean by more than its half gap nor a recipient
above it by more than its own (nor past ``recipient-max``), so a second
rebalance right after moves nothing back.  Copying and freeing are the
scheduler's business (:meth:`distributed.scheduler.requests.ClusterRequests.handle_rebalance`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, cast, get_args

import dask.config

from distributed.config import get_interval
from distributed.scheduler.records import MemoryState, TaskState, WorkerState

__all__ = ["MEASURES", "Measure", "Move", "RebalanceSettings", "measure", "plan", "recent_to_old_time", "worker_memory"]

#: The ways to measure a worker's memory (properties of :class:`MemoryState`).
#: ``managed_in_memory`` is the older name of ``managed``.
Measure = Literal["optimistic", "process", "managed", "managed_total", "managed_in_memory"]
MEASURES: Final[tuple[str, ...]] = get_args(Measure)


def _fraction(key: str) -> float:
    value = dask.config.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{key} must be a number from 0 to 1 (a fraction of memory_limit), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RebalanceSettings:
    """How ``rebalance`` measures workers and whom it lets give and receive.

    Parameters
    ----------
    measure
        Which figure of :class:`MemoryState` counts as a worker's memory.
    sender_min
        Fraction of ``memory_limit`` below which a worker never gives.
    recipient_max
        Fraction of ``memory_limit`` at and above which a worker never receives.
    gap
        Fraction of ``memory_limit`` around the mean where a worker neither gives nor receives.
    """

    measure: Measure = "optimistic"
    sender_min: float = 0.3
    recipient_max: float = 0.6
    gap: float = 0.1

    @classmethod
    def from_config(cls) -> RebalanceSettings:
        """Read ``distributed.worker.memory.rebalance.*``; a bad value raises ``ValueError`` naming its key."""
        key = "distributed.worker.memory.rebalance.measure"
        measure: Any = dask.config.get(key)
        if measure not in MEASURES:
            raise ValueError(f"{key} must be one of {list(MEASURES)}, got {measure!r}")
        return cls(
            measure=cast(Measure, measure),
            sender_min=_fraction("distributed.worker.memory.rebalance.sender-min"),
            recipient_max=_fraction("distributed.worker.memory.rebalance.recipient-max"),
            gap=_fraction("distributed.worker.memory.rebalance.sender-recipient-gap"),
        )


def recent_to_old_time() -> float:
    """``distributed.worker.memory.recent-to-old-time`` in seconds; a bad value raises ``ValueError`` naming it."""
    key = "distributed.worker.memory.recent-to-old-time"
    try:
        seconds = get_interval(key, 30.0)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"{key} must be a duration such as '30s', got {dask.config.get(key)!r}") from e
    if seconds < 0:
        raise ValueError(f"{key} must not be negative, got {dask.config.get(key)!r}")
    return seconds


def worker_memory(ws: WorkerState) -> MemoryState:
    """``ws``'s memory for planning: the heartbeat's process and spilled figures, the scheduler's own managed bytes.

    The scheduler learns of each key a worker gains or frees at once, and
    the heartbeat only every so often; a plan made just after a scatter must
    see the scattered data.
    """
    heartbeat = ws.memory
    return MemoryState(
        process=heartbeat.process,
        managed_total=max(ws.nbytes, 0),
        spilled=heartbeat.spilled,
        unmanaged_old=ws.unmanaged_history.minimum(),
    )


def measure(ws: WorkerState, how: Measure) -> int:
    """``ws``'s memory in bytes, measured ``how``."""
    return int(getattr(worker_memory(ws), how))


class Move(NamedTuple):
    """One key to copy from ``sender`` to ``recipient``; the sender then frees its copy."""

    task: TaskState
    sender: WorkerState
    recipient: WorkerState


class _Bounds(NamedTuple):
    half_gap: float
    sender_min: float
    recipient_max: float


def _bounds(ws: WorkerState, settings: RebalanceSettings) -> _Bounds:
    limit = ws.memory_limit
    if not limit:
        # No limit: nothing to take fractions of; any imbalance counts and any room is room.
        return _Bounds(0.0, 0.0, math.inf)
    return _Bounds(settings.gap / 2 * limit, settings.sender_min * limit, settings.recipient_max * limit)


def plan(
    pool: Sequence[WorkerState],
    memory: Mapping[WorkerState, int],
    settings: RebalanceSettings,
    movable: Collection[TaskState] | None = None,
) -> list[Move]:
    """The moves that bring the workers of ``pool`` nearer the mean of ``memory``.

    Parameters
    ----------
    pool
        The workers that may give and receive; the mean is theirs alone.
    memory
        Each worker's memory in bytes, as measured for ``settings.measure``.
    settings
        The thresholds (fractions of each worker's ``memory_limit``).
    movable
        The only keys that may move; every key the senders hold when None.

    Returns
    -------
    The moves, each key at most once, in the order they were chosen.
    """
    if len(pool) < 2:
        return []
    usage = {ws: float(memory[ws]) for ws in pool}
    mean = sum(usage.values()) / len(usage)
    bounds = {ws: _bounds(ws, settings) for ws in pool}
    tie = itertools.count()  # heap entries never compare workers

    # Heaps ordered by distance from the mean, farthest first.
    senders: list[tuple[float, int, WorkerState, Iterator[TaskState]]] = []
    recipients: list[tuple[float, int, WorkerState]] = []
    for ws in pool:
        b = bounds[ws]
        if usage[ws] > mean + b.half_gap and usage[ws] >= b.sender_min:
            # Least recently inserted first: has_what keeps the order keys arrived in.
            senders.append((mean - usage[ws], next(tie), ws, iter(list(ws.has_what))))
        elif usage[ws] < mean - b.half_gap and usage[ws] < b.recipient_max:
            recipients.append((usage[ws] - mean, next(tie), ws))
    heapq.heapify(senders)
    heapq.heapify(recipients)

    moves: list[Move] = []
    moved: set[TaskState] = set()
    while senders and recipients:
        _, _, sender, keys = heapq.heappop(senders)
        floor = mean - bounds[sender].half_gap
        for ts in keys:
            nbytes = ts.nbytes
            if nbytes <= 0 or ts in moved or (movable is not None and ts not in movable):
                continue
            if usage[sender] - nbytes < floor:
                continue  # it would make the sender a recipient: try a smaller key
            recipient = _take_recipient(recipients, ts, nbytes, usage, mean, bounds)
            if recipient is None:
                continue
            moves.append(Move(ts, sender, recipient))
            moved.add(ts)
            usage[sender] -= nbytes
            usage[recipient] += nbytes
            b = bounds[recipient]
            if usage[recipient] < mean - b.half_gap and usage[recipient] < b.recipient_max:
                heapq.heappush(recipients, (usage[recipient] - mean, next(tie), recipient))
            if usage[sender] > mean + bounds[sender].half_gap:
                heapq.heappush(senders, (mean - usage[sender], next(tie), sender, keys))
            break
        # A sender whose keys ran out, or that came within its half gap, is done.
    return moves


def _take_recipient(
    recipients: list[tuple[float, int, WorkerState]],
    ts: TaskState,
    nbytes: int,
    usage: Mapping[WorkerState, float],
    mean: float,
    bounds: Mapping[WorkerState, _Bounds],
) -> WorkerState | None:
    """Pop the recipient farthest below the mean that can take ``ts``; the others go back."""
    skipped = []
    found = None
    while recipients:
        entry = heapq.heappop(recipients)
        ws = entry[2]
        b = bounds[ws]
        if ws not in ts.who_has and usage[ws] + nbytes <= min(mean + b.half_gap, b.recipient_max):
            found = ws
            break
        skipped.append(entry)
    for entry in skipped:
        heapq.heappush(recipients, entry)
    return found
