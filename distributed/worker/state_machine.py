"""The worker's task state machine, free of I/O.

Theory of operation
-------------------
The worker shell feeds *events* (``ComputeTaskEvent``, ``ExecuteSuccess``,
``GatherDepSuccess``, ...) into :meth:`WorkerStateMachine.handle_stimulus`,
which changes state and returns *instructions* (:class:`Execute`,
:class:`GatherDep`, :class:`SendMessage`) for the shell to carry out.  Nothing
here touches a socket or a thread, so tests drive it directly.

Event handlers never set a task's state: they recommend one, and the
transition engine applies the method :data:`TRANSITION_TABLE` names for the
``(start, finish)`` pair (a pair not in the table raises
:class:`InvalidTransition`), logs the change and calls the transition hook
(``WorkerPlugin.transition``).

A task the scheduler asked us to compute goes

    waiting (for dependencies) -> ready -> executing -> memory | error

and a dependency held elsewhere goes ``fetch -> flight -> memory``.  A task
freed while it runs or is being fetched becomes ``cancelled``; its result is
dropped when it arrives.  ``validate=True`` checks the invariants after every
event; :meth:`story` returns a key's transitions.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

from distributed.exceptions import InvalidTransition
from distributed.protocol import messages as m
from distributed.protocol.messages import Key, Payload
from distributed.spill import SpillBuffer

logger = logging.getLogger(__name__)

__all__ = [
    "TRANSITION_TABLE",
    "AcquireReplicasEvent",
    "BusyWorkerRetry",
    "ComputeTaskEvent",
    "Execute",
    "ExecuteAbandoned",
    "ExecuteFailure",
    "ExecuteStarted",
    "ExecuteSuccess",
    "FreeKeysEvent",
    "GatherDep",
    "GatherDepBusy",
    "GatherDepFailure",
    "GatherDepSuccess",
    "HeldDataEvent",
    "Instruction",
    "InvalidTransition",
    "RescheduleEvent",
    "RetryBusyWorkerLater",
    "SecedeEvent",
    "SendMessage",
    "StateMachineEvent",
    "StealRequestEvent",
    "UpdateDataEvent",
    "WorkerStateMachine",
    "WorkerTask",
    "WorkerTaskStateName",
]

#: The states of a task on a worker (mypy rejects a misspelt one).
WorkerTaskStateName = Literal[
    "waiting",
    "ready",
    "executing",
    "long-running",
    "memory",
    "error",
    "fetch",
    "flight",
    "cancelled",
    "released",
    "forgotten",
]
WORKER_TASK_STATES: Final[frozenset[WorkerTaskStateName]] = frozenset(get_args(WorkerTaskStateName))


class WorkerTask:
    """What a worker knows about one key: a task to run or data to fetch."""

    __slots__ = (
        "key",
        "state",
        "run_spec",
        "run_id",
        "priority",
        "dependencies",
        "dependents",
        "waiting_for_data",
        "who_has",
        "tried",
        "nbytes",
        "duration",
        "resources",
        "annotations",
        "coming_from",
        "computed",
        "type",
        "transfers",
        "deferred_compute",
    )

    def __init__(self, key: Key) -> None:
        self.key: Key = key
        self.state: WorkerTaskStateName = "released"
        self.run_spec: Payload | None = None
        self.run_id = -1
        self.priority: tuple[Any, ...] = ()
        self.dependencies: set[WorkerTask] = set()
        self.dependents: set[WorkerTask] = set()
        self.waiting_for_data: set[WorkerTask] = set()
        self.who_has: set[str] = set()
        self.tried: set[str] = set()
        self.nbytes = 0
        self.duration = 0.0
        self.resources: dict[str, float] | None = None
        self.annotations: dict[str, Any] | None = None
        #: Peer we are fetching this key from (state flight).
        self.coming_from: str | None = None
        #: Whether this worker computes the key (as opposed to fetching it).
        self.computed = False
        self.type: str | None = None
        #: Fetches of this task's dependencies since it was last reported (None: none).
        self.transfers: list[m.TransferSpan] | None = None
        #: The scheduler's request to compute this key, received while it was being fetched;
        #: carried out if that fetch fails (see ``_to_released``).
        self.deferred_compute: ComputeTaskEvent | None = None

    def __repr__(self) -> str:
        return f"<WorkerTask {self.key!r} {self.state}>"

    def __lt__(self, other: WorkerTask) -> bool:
        return self.priority < other.priority


#: Where tasks should go next, as the transition methods and handlers see it.
Recs = dict["WorkerTask", WorkerTaskStateName]
#: ``hook(key, start, finish, stimulus_id)``, called after each transition.
TransitionHook = Callable[[Key, WorkerTaskStateName, WorkerTaskStateName, str], None]


# -- events -------------------------------------------------------------------
# Events and instructions are read-only by convention, not frozen: a frozen
# dataclass sets each field through object.__setattr__ (about 3x the cost), and
# a few of them are built for every task.
@dataclass(slots=True)
class StateMachineEvent:
    """Base of all events; ``stimulus_id`` ties effects to their cause."""

    stimulus_id: str


@dataclass(slots=True)
class ComputeTaskEvent(StateMachineEvent):
    """The scheduler asks us to compute ``key``."""

    key: Key
    run_id: int
    run_spec: Payload | None
    priority: tuple[Any, ...]
    who_has: Mapping[Key, Iterable[str]]
    nbytes: Mapping[Key, int]
    duration: float = 0.5
    resources: Mapping[str, float] | None = None
    annotations: Mapping[str, Any] | None = None


@dataclass(slots=True)
class FreeKeysEvent(StateMachineEvent):
    """The scheduler no longer needs these keys here."""

    keys: tuple[Key, ...]


@dataclass(slots=True)
class ExecuteSuccess(StateMachineEvent):
    """A task ran; its value is ready to store."""

    key: Key
    run_id: int
    value: Any
    nbytes: int
    type: str
    start: float
    stop: float


@dataclass(slots=True)
class ExecuteFailure(StateMachineEvent):
    """A task raised."""

    key: Key
    run_id: int
    exception: Payload
    traceback: Any
    text: str
    start: float
    stop: float
    traceback_text: str = ""


@dataclass(slots=True)
class RescheduleEvent(StateMachineEvent):
    """A task raised ``Reschedule``: give it back to the scheduler."""

    key: Key
    run_id: int


@dataclass(slots=True)
class ExecuteAbandoned(StateMachineEvent):
    """An Execute instruction was not carried out: the task was freed first."""

    key: Key


@dataclass(slots=True)
class ExecuteStarted(StateMachineEvent):
    """A thread that just finished a task went on with ``key``, the task :meth:`~WorkerStateMachine.next_ready` named.

    The shell lines that task up for whichever thread finishes first, so a busy
    worker starts it without a round trip through the event loop; this event
    moves it to ``executing`` (its :class:`Execute` instruction is not carried out).
    """

    key: Key


@dataclass(slots=True)
class SecedeEvent(StateMachineEvent):
    """A running task left the thread pool (``secede()``)."""

    key: Key


@dataclass(slots=True)
class GatherDepSuccess(StateMachineEvent):
    """A fetch from ``worker`` returned; ``data`` may lack some keys asked for."""

    worker: str
    keys: tuple[Key, ...]
    data: Mapping[Key, Any]
    nbytes: Mapping[Key, int]
    #: When the fetch began and ended (``time.time()``; 0.0: not measured).
    start: float = 0.0
    stop: float = 0.0


@dataclass(slots=True)
class GatherDepFailure(StateMachineEvent):
    """A fetch from ``worker`` failed.

    Without ``exception`` the peer could not be reached: it is dropped as a holder
    of every key.  With one, the peer answered but its reply was unusable (the
    data did not deserialise, the reply was malformed, the peer raised): other
    holders are tried, and when none is left the tasks here that needed the data
    err with that exception, so the failure reaches whoever waits on them.
    """

    worker: str
    keys: tuple[Key, ...]
    exception: Payload | None = None
    traceback: Any = None
    text: str = ""


@dataclass(slots=True)
class GatherDepBusy(StateMachineEvent):
    """``worker`` serves as many peers as it may: the keys asked of it go back to fetch, it is left alone a while."""

    worker: str
    keys: tuple[Key, ...]


@dataclass(slots=True)
class BusyWorkerRetry(StateMachineEvent):
    """Time to fetch from ``worker`` again, which said it was busy."""

    worker: str


@dataclass(slots=True)
class AcquireReplicasEvent(StateMachineEvent):
    """Fetch copies of keys from the peers named, to hold them here."""

    who_has: Mapping[Key, Iterable[str]]
    nbytes: Mapping[Key, int]


@dataclass(slots=True)
class StealRequestEvent(StateMachineEvent):
    """The scheduler wants to run ``key`` elsewhere (work stealing), if it has not started here."""

    key: Key


@dataclass(slots=True)
class UpdateDataEvent(StateMachineEvent):
    """Data put here directly (scatter)."""

    data: Mapping[Key, Any]
    nbytes: Mapping[Key, int]


@dataclass(slots=True)
class HeldDataEvent(StateMachineEvent):
    """The data store already holds these keys: know them as tasks in memory.

    A worker that lost its scheduler keeps its results and starts a new state
    machine over them, to register again (see ``Worker.forget_tasks``).
    Unlike :class:`UpdateDataEvent` no value is read or written: spilled
    results stay on disk.  Keys the machine already knows, or that the store
    no longer holds, are left alone.
    """

    nbytes: Mapping[Key, int]


# -- instructions ----------------------------------------------------------------
@dataclass(slots=True)
class Instruction:
    """Base of what the state machine asks the shell to do."""


@dataclass(slots=True)
class Execute(Instruction):
    """Run ``key`` in the thread pool."""

    key: Key
    run_id: int


@dataclass(slots=True)
class GatherDep(Instruction):
    """Fetch ``keys`` from peer ``worker``."""

    worker: str
    keys: tuple[Key, ...]
    total_nbytes: int


@dataclass(slots=True)
class RetryBusyWorkerLater(Instruction):
    """After a while, feed :class:`BusyWorkerRetry` for ``worker``."""

    worker: str


@dataclass(slots=True)
class SendMessage(Instruction):
    """Send ``msg`` to the scheduler on the batched stream."""

    msg: m.WorkerStreamMessage


class WorkerStateMachine:
    """All task state of one worker.

    Every change of a task's state goes through one table of
    ``(start, finish) -> method`` (:data:`_TRANSITIONS`).  Event handlers only
    decide where tasks should go (*recommendations*); :meth:`_transitions`
    applies them, and those the methods return in turn, until none are left.
    Each method sets ``ts.state`` and does the bookkeeping of that change; the
    engine logs it (:meth:`story`) and calls :attr:`transition_hook`.

    Parameters
    ----------
    address
        This worker's address (never fetch from ourselves).
    nthreads
        Tasks that may execute at once.
    data
        Where values live (a dict, or a spilling mapping).
    resources
        Abstract resources this worker offers.
    validate
        Check invariants after every event, and raise :class:`InvalidTransition`
        for a pair the table does not allow.
    transfer_limit
        Most bytes to ask a peer for in one fetch.
    fetch_concurrency
        Most peers to fetch from at once.
    incoming_bytes_limit
        Most bytes in flight from all peers together (``distributed.worker.memory.transfer``
        of the memory limit); one fetch goes ahead whatever its size when none is in flight.
    """

    def __init__(
        self,
        address: str,
        nthreads: int,
        data: MutableMapping[Key, Any] | None = None,
        resources: Mapping[str, float] | None = None,
        validate: bool = False,
        transfer_limit: int = 50_000_000,
        fetch_concurrency: int = 50,
        log_length: int = 100_000,
        incoming_bytes_limit: float = math.inf,
    ) -> None:
        self.address = address
        self.nthreads = nthreads
        self.data: MutableMapping[Key, Any] = data if data is not None else {}
        self.total_resources: dict[str, float] = dict(resources or {})
        self.available_resources: dict[str, float] = dict(self.total_resources)
        self.validate = validate
        self.transfer_limit = transfer_limit
        self.fetch_concurrency = fetch_concurrency
        self.tasks: dict[Key, WorkerTask] = {}
        #: Task records made so far (those forgotten since too).
        self.tasks_made = 0
        self.ready: list[tuple[tuple[Any, ...], int, WorkerTask]] = []
        self._ready_counter = 0
        #: The first priority among the tasks made ready since :meth:`mark_ready_order` (None: none since).
        self.first_ready_since_mark: tuple[Any, ...] | None = None
        self.executing: set[WorkerTask] = set()
        self.long_running: set[WorkerTask] = set()
        #: Keys in state fetch, in the order they were asked for.
        self.to_fetch: dict[WorkerTask, None] = {}
        #: Peers we are fetching from, with the keys asked of each.
        self.in_flight_workers: dict[str, set[WorkerTask]] = {}
        #: Peers that said they were busy: not asked again until their retry comes (keys they hold wait in fetch).
        self.busy_workers: set[str] = set()
        self.incoming_bytes_limit = incoming_bytes_limit
        #: Bytes asked of each peer in ``in_flight_workers`` (their sum is held to ``incoming_bytes_limit``).
        self.in_flight_bytes: dict[str, int] = {}
        self.log: deque[tuple[Key, str, str, str, float]] = deque(maxlen=log_length)
        self.executed_count = 0
        self.nbytes_in_memory = 0
        self.transition_counter = 0
        #: While set, no task starts (the worker is over its memory limit); running ones finish.
        self.paused = False
        #: Called as ``hook(key, start, finish, stimulus_id)`` after every transition
        #: (the worker sets it while plugins are registered).
        self.transition_hook: TransitionHook | None = None

    # -- entry point ------------------------------------------------------------
    def handle_stimulus(self, *events: StateMachineEvent) -> list[Instruction]:
        """Apply events and return what the shell must do."""
        instructions: list[Instruction] = []
        log_start = self.transition_counter
        for ev in events:
            handler = _HANDLERS.get(type(ev))
            if handler is None:
                raise TypeError(f"Unknown event {type(ev).__name__}")
            handler(self, ev, instructions)
        self._ensure_computing(instructions)
        self._ensure_communicating(instructions)
        if self.validate:
            # Check what this event touched (the whole state is checked at the end of tests).
            n = self.transition_counter - log_start
            recent = list(self.log)[-n:] if 0 < n <= len(self.log) else list(self.log)
            for key in {e[0] for e in recent}:
                ts = self.tasks.get(key)
                if ts is not None:
                    self.validate_task(ts)
            assert len(self.executing) <= self.nthreads, "more tasks executing than threads"
        return instructions

    def transitions(
        self, recommendations: Mapping[WorkerTask, WorkerTaskStateName], stimulus_id: str
    ) -> list[Instruction]:
        """Move tasks to the states recommended, through the transition table.

        Raises :class:`InvalidTransition` for a pair the table does not allow.
        Events (:meth:`handle_stimulus`) are the normal way in; this is for tests
        and tools that steer one task.
        """
        instructions: list[Instruction] = []
        self._transitions(dict(recommendations), stimulus_id, instructions)
        return instructions

    def story(self, *keys: Key) -> list[tuple[Key, str, str, str, float]]:
        """Transitions of these keys: ``(key, start, finish, stimulus_id, time)``."""
        wanted = set(keys)
        return [e for e in self.log if e[0] in wanted]

    # -- the transition engine ----------------------------------------------------
    def _transition(
        self, ts: WorkerTask, finish: WorkerTaskStateName, stimulus_id: str, instructions: list[Instruction]
    ) -> None:
        """Move ``ts`` to ``finish``, then apply whatever that recommends."""
        recs = self._apply(ts, finish, stimulus_id, instructions)
        if recs:
            self._transitions(recs, stimulus_id, instructions)

    def _transitions(self, recs: Recs, stimulus_id: str, instructions: list[Instruction]) -> None:
        """Apply recommendations, and those they produce, until none are left."""
        apply = self._apply
        while recs:
            ts, finish = recs.popitem()
            if ts.state == finish or ts.state == "forgotten":
                continue
            more = apply(ts, finish, stimulus_id, instructions)
            if more:
                recs.update(more)

    def _apply(
        self, ts: WorkerTask, finish: WorkerTaskStateName, stimulus_id: str, instructions: list[Instruction]
    ) -> Recs | None:
        """The one place a transition happens: look it up in the table, run it, record it."""
        start = ts.state
        func = _TRANSITIONS[start].get(finish)
        if func is None:
            raise InvalidTransition(ts.key, start, finish, f"stimulus {stimulus_id}")
        recs = func(self, ts, stimulus_id, instructions)
        self.transition_counter += 1
        self.log.append((ts.key, start, ts.state, stimulus_id, time.time()))
        if self.transition_hook is not None:
            self.transition_hook(ts.key, start, ts.state, stimulus_id)
        return recs

    # -- the transition methods -----------------------------------------------------
    def _to_waiting(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # released | error | fetch -> waiting: a task to compute here, its inputs on the way.
        if ts.state == "fetch":
            del self.to_fetch[ts]
        ts.state = "waiting"
        return None

    def _to_ready(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # released | error | fetch | waiting -> ready: every input is here.
        if ts.state == "fetch":
            del self.to_fetch[ts]
        ts.state = "ready"
        self._ready_counter += 1
        priority = ts.priority
        heapq.heappush(self.ready, (priority, self._ready_counter, ts))
        first = self.first_ready_since_mark
        if first is None or priority < first:
            self.first_ready_since_mark = priority
        return None

    def _ready_to_executing(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        if ts.resources:
            for r, amount in ts.resources.items():
                self.available_resources[r] -= amount
        ts.state = "executing"
        self.executing.add(ts)
        instructions.append(Execute(ts.key, ts.run_id))
        return None

    def _executing_to_long_running(
        self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]
    ) -> Recs | None:
        self.executing.discard(ts)
        self.long_running.add(ts)
        ts.state = "long-running"
        instructions.append(SendMessage(m.LongRunning(op="long-running", key=ts.key, run_id=ts.run_id)))
        return None

    def _to_memory(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # The value was stored by the handler (it carries it); account for it and
        # release the tasks here that waited on it.
        if ts.state == "fetch":
            del self.to_fetch[ts]
        self.nbytes_in_memory += ts.nbytes
        ts.state = "memory"
        recs: Recs | None = None
        for dep in ts.dependents:
            if ts in dep.waiting_for_data:
                dep.waiting_for_data.discard(ts)
                if not dep.waiting_for_data and dep.state == "waiting":
                    if recs is None:
                        recs = {}
                    recs[dep] = "ready"
        return recs

    def _to_error(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # executing | long-running -> error: it raised; waiting | ready -> error: an input could not be had.
        ts.state = "error"
        return None

    def _to_fetch(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # released | error -> fetch (a dependency held elsewhere), flight -> fetch (try
        # another holder), cancelled -> fetch (our own run failed but a peer has it).
        ts.computed = False if ts.state == "cancelled" else ts.computed
        ts.coming_from = None
        ts.state = "fetch"
        self.to_fetch[ts] = None
        return None

    def _fetch_to_flight(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # The peer (ts.coming_from) and the GatherDep are set by _ensure_communicating.
        del self.to_fetch[ts]
        ts.state = "flight"
        return None

    def _to_cancelled(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # executing | long-running | flight -> cancelled: freed while its result is on the way.
        ts.state = "cancelled"
        return None

    def _cancelled_to_executing(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        ts.state = "executing"
        return None

    def _cancelled_to_long_running(
        self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]
    ) -> Recs | None:
        ts.state = "long-running"
        return None

    def _cancelled_to_flight(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        ts.state = "flight"
        return None

    def _to_released(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        # flight -> released: nobody has it, but tasks here still name it as input.
        # cancelled -> released: the fetch failed after we were asked to compute it: run it.
        computed = ts.state == "cancelled" and ts.computed
        ts.coming_from = None
        ts.state = "released"
        if computed:
            ev, ts.deferred_compute = ts.deferred_compute, None
            if ev is not None:
                # Asked while it was in flight: its inputs are known only now that we run it.
                return self._compute_recs(ts, ev)
            return {ts: "waiting" if ts.waiting_for_data else "ready"}
        return None

    def _to_forgotten(self, ts: WorkerTask, stimulus_id: str, instructions: list[Instruction]) -> Recs | None:
        """Drop ``ts`` entirely, and recommend the same for inputs nothing else needs."""
        if ts.key in self.data:
            del self.data[ts.key]
            self.nbytes_in_memory -= ts.nbytes
        self.to_fetch.pop(ts, None)
        ts.state = "forgotten"
        self.tasks.pop(ts.key, None)
        recs: Recs | None = None
        for dep in ts.dependencies:
            dep.dependents.discard(ts)
            if not dep.dependents and not dep.computed and dep.state in ("fetch", "flight", "released"):
                if recs is None:
                    recs = {}
                recs[dep] = "cancelled" if dep.state == "flight" else "forgotten"
        ts.dependencies.clear()
        ts.waiting_for_data.clear()
        return recs

    # -- helpers ----------------------------------------------------------------
    def _ensure_task(self, key: Key) -> WorkerTask:
        ts = self.tasks.get(key)
        if ts is None:
            ts = self.tasks[key] = WorkerTask(key)
            self.tasks_made += 1
        return ts

    def _put_data(self, ts: WorkerTask, value: Any, nbytes: int) -> None:
        """Store a value about to move ``ts`` to memory (the transition counts its bytes)."""
        data = self.data
        if type(data) is SpillBuffer:
            data.put(ts.key, value, nbytes)  # measured already: no second sizeof
        else:
            data[ts.key] = value
        ts.nbytes = nbytes

    def _can_run(self, ts: WorkerTask) -> bool:
        if not ts.resources:
            return True
        return all(self.available_resources.get(r, 0.0) >= amount for r, amount in ts.resources.items())

    def _ensure_computing(self, instructions: list[Instruction]) -> None:
        if self.paused:
            return
        ready = self.ready
        skipped: list[tuple[tuple[Any, ...], int, WorkerTask]] = []
        while ready and len(self.executing) < self.nthreads:
            item = heapq.heappop(ready)
            ts = item[2]
            if ts.state != "ready":
                continue
            if ts.resources and not self._can_run(ts):
                skipped.append(item)
                continue
            self._apply(ts, "executing", "ensure-computing", instructions)  # recommends nothing
        for item in skipped:
            heapq.heappush(ready, item)

    def next_ready(self) -> WorkerTask | None:
        """The task to start when a thread frees up, if every thread is busy.

        ``None`` when a thread is free (the ready task would have started),
        while paused, when the first ready task needs resources, or when a
        running task has dependents here (its result may make a task of higher
        priority ready).  Stable until the next event.
        """
        if self.paused or not self.ready or len(self.executing) < self.nthreads:
            return None
        for running in self.executing:
            if running.dependents:
                return None
        ready = self.ready
        while ready and ready[0][2].state != "ready":
            heapq.heappop(ready)  # started or released since it was queued (as _ensure_computing skips it)
        if not ready or ready[0][2].resources:
            return None
        return ready[0][2]

    def next_ready_tasks(self, n: int, with_inputs: int | None = None) -> list[WorkerTask]:
        """Up to ``n`` tasks to start, in order, as threads free up, if every thread is busy.

        The first is :meth:`next_ready`'s; the others follow it in priority
        order, up to the first that needs resources (it may have to wait for
        them), or, with ``with_inputs``, the first task with inputs beyond that
        many.  Empty when :meth:`next_ready` is None.  Stable until the next event.
        """
        if self.next_ready() is None:
            return []
        if with_inputs is None:
            with_inputs = n
        ready = self.ready
        kept: list[tuple[tuple[Any, ...], int, WorkerTask]] = []
        tasks: list[WorkerTask] = []
        seen: set[WorkerTask] = set()
        while ready and len(tasks) < n:
            item = heapq.heappop(ready)
            ts = item[2]
            if ts.state != "ready" or ts in seen:
                continue  # started or released since it was queued, or queued twice: dropped, as next_ready does
            kept.append(item)
            if ts.resources or (ts.dependencies and len(tasks) >= with_inputs):
                break
            seen.add(ts)
            tasks.append(ts)
        for item in kept:
            heapq.heappush(ready, item)
        return tasks

    def mark_ready_order(self) -> None:
        """Start noting :attr:`first_ready_since_mark` afresh: whether a task made ready since goes before others."""
        self.first_ready_since_mark = None

    def _ensure_communicating(self, instructions: list[Instruction]) -> None:
        if not self.to_fetch:
            return
        batches: dict[str, list[WorkerTask]] = {}
        sizes: dict[str, int] = {}
        limit = self.incoming_bytes_limit
        incoming = sum(self.in_flight_bytes.values()) if limit != math.inf else 0
        for ts in list(self.to_fetch):
            if len(self.in_flight_workers) + len(batches) >= self.fetch_concurrency and not any(
                w in batches for w in ts.who_has
            ):
                break
            busy = self.busy_workers
            candidates = [
                w for w in ts.who_has if w not in self.in_flight_workers and w != self.address and w not in busy
            ]
            if not candidates:
                continue
            # Prefer a peer we already fetch other keys from in this round.
            chosen = next((w for w in candidates if w in batches), None)
            if chosen is None:
                if len(self.in_flight_workers) + len(batches) >= self.fetch_concurrency:
                    continue
                chosen = min(candidates)
            if chosen in batches and sizes[chosen] + ts.nbytes > self.transfer_limit:
                continue
            size = max(ts.nbytes, 0)
            if incoming + size > limit and (incoming or batches):
                break  # memory for more in flight: the rest waits for these to land
            incoming += size
            batches.setdefault(chosen, []).append(ts)
            sizes[chosen] = sizes.get(chosen, 0) + size
        for worker, tss in batches.items():
            self.in_flight_workers[worker] = set(tss)
            self.in_flight_bytes[worker] = sizes[worker]
            for ts in tss:
                ts.coming_from = worker
                self._transition(ts, "flight", "ensure-communicating", instructions)
            instructions.append(GatherDep(worker, tuple(ts.key for ts in tss), sizes[worker]))

    def _needed_here(self, ts: WorkerTask) -> bool:
        return any(ts in d.waiting_for_data for d in ts.dependents)

    def _finished_msg(self, ts: WorkerTask, start: float, stop: float) -> m.TaskFinished:
        msg = m.TaskFinished(
            op="task-finished",
            key=ts.key,
            run_id=ts.run_id,
            nbytes=ts.nbytes,
            type=ts.type or "",
            start=start,
            stop=stop,
        )
        if ts.transfers is not None:
            msg["transfers"] = ts.transfers
            ts.transfers = None
        return msg

    def _release_resources(self, ts: WorkerTask) -> None:
        if ts.resources:
            for r, amount in ts.resources.items():
                self.available_resources[r] += amount

    # -- event handlers ---------------------------------------------------------
    def _handle_compute_task(self, ev: ComputeTaskEvent, instructions: list[Instruction]) -> None:
        ts = self._ensure_task(ev.key)
        sid = ev.stimulus_id
        state = ts.state
        if state == "memory":
            ts.run_id = ev.run_id
            instructions.append(SendMessage(self._finished_msg(ts, 0.0, 0.0)))
            return
        if state in ("executing", "long-running", "ready", "waiting"):
            ts.run_id = ev.run_id
            return
        if state == "cancelled":
            # Freed, then asked for again while still running/arriving.
            ts.run_id = ev.run_id
            ts.run_spec = ev.run_spec
            if ts in self.executing:
                ts.computed = True
                self._transition(ts, "executing", sid, instructions)
            elif ts in self.long_running:
                ts.computed = True
                self._transition(ts, "long-running", sid, instructions)
            else:
                # Still arriving from a peer: that copy will do (or we run it if the fetch fails).
                ts.computed = True
                ts.deferred_compute = ev
            return
        if state == "flight":
            # We were fetching it, but now compute it here instead: keep the copy if it arrives.
            ts.run_id = ev.run_id
            ts.run_spec = ev.run_spec
            ts.computed = True
            ts.deferred_compute = ev
            self._transition(ts, "cancelled", sid, instructions)
            return
        recs = self._compute_recs(ts, ev)
        if len(recs) > 1:
            self._transitions(recs, sid, instructions)
        else:
            # Neither recommends anything further.
            self._apply(ts, recs[ts], sid, instructions)

    def _compute_recs(self, ts: WorkerTask, ev: ComputeTaskEvent) -> Recs:
        """Take on the scheduler's request to compute ``ts``: where it and its inputs should go next."""
        ts.computed = True
        ts.deferred_compute = None
        ts.run_spec = ev.run_spec
        ts.run_id = ev.run_id
        ts.priority = tuple(ev.priority)
        ts.duration = ev.duration
        ts.resources = dict(ev.resources) if ev.resources else None
        ts.annotations = dict(ev.annotations) if ev.annotations else None
        ts.waiting_for_data.clear()
        recs: Recs = {}
        for dep_key, holders in ev.who_has.items() if ev.who_has else ():
            dts = self._ensure_task(dep_key)
            ts.dependencies.add(dts)
            dts.dependents.add(ts)
            if dts.state == "memory":
                continue
            ts.waiting_for_data.add(dts)
            if dts.state in ("released", "error"):
                dts.who_has = {h for h in holders if h != self.address}
                dts.nbytes = ev.nbytes.get(dep_key, 0)
                dts.priority = ts.priority
                recs[dts] = "fetch"
            elif dts.state == "fetch":
                dts.who_has.update(h for h in holders if h != self.address)
            elif dts.state == "cancelled":
                dts.who_has.update(h for h in holders if h != self.address)
                if not dts.computed:
                    recs[dts] = "flight"
        recs[ts] = "waiting" if ts.waiting_for_data else "ready"
        return recs

    def _handle_execute_success(self, ev: ExecuteSuccess, instructions: list[Instruction]) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None:
            return
        self.executing.discard(ts)
        self.long_running.discard(ts)
        self._release_resources(ts)
        self.executed_count += 1
        state = ts.state
        if state == "cancelled":
            if self._needed_here(ts):
                # Freed while running, but a task here now waits on it: keep it.
                ts.computed = False
                ts.type = ev.type
                self._put_data(ts, ev.value, ev.nbytes)
                self._transition(ts, "memory", ev.stimulus_id, instructions)
                instructions.append(SendMessage(m.AddKeys(op="add-keys", keys=[ts.key], nbytes={ts.key: ev.nbytes})))
            else:
                self._transition(ts, "forgotten", ev.stimulus_id, instructions)
            return
        if state != "executing" and state != "long-running":
            return
        ts.type = ev.type
        self._put_data(ts, ev.value, ev.nbytes)
        recs = self._apply(ts, "memory", ev.stimulus_id, instructions)
        if recs:
            self._transitions(recs, ev.stimulus_id, instructions)
        instructions.append(SendMessage(self._finished_msg(ts, ev.start, ev.stop)))

    def _handle_execute_failure(self, ev: ExecuteFailure, instructions: list[Instruction]) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None:
            return
        self.executing.discard(ts)
        self.long_running.discard(ts)
        self._release_resources(ts)
        if ts.state == "cancelled":
            # A task here waits on it: fetch the copy a peer holds.
            finish: WorkerTaskStateName = "fetch" if self._needed_here(ts) else "forgotten"
            self._transition(ts, finish, ev.stimulus_id, instructions)
            return
        if ts.state not in ("executing", "long-running"):
            return
        self._transition(ts, "error", ev.stimulus_id, instructions)
        erred = m.WorkerTaskErred(
            op="task-erred",
            key=ts.key,
            run_id=ts.run_id,
            exception=ev.exception,
            traceback=ev.traceback,
            text=ev.text,
            start=ev.start,
            stop=ev.stop,
        )
        if ev.traceback_text:
            erred["traceback_text"] = ev.traceback_text
        if ts.transfers is not None:
            erred["transfers"] = ts.transfers
            ts.transfers = None
        instructions.append(SendMessage(erred))

    def _handle_execute_abandoned(self, ev: ExecuteAbandoned, instructions: list[Instruction]) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None or ts not in self.executing or ts.state != "cancelled":
            return
        self.executing.discard(ts)
        self._release_resources(ts)
        finish: WorkerTaskStateName = "fetch" if self._needed_here(ts) else "forgotten"
        self._transition(ts, finish, ev.stimulus_id, instructions)

    def _handle_reschedule(self, ev: RescheduleEvent, instructions: list[Instruction]) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None:
            return
        self.executing.discard(ts)
        self.long_running.discard(ts)
        self._release_resources(ts)
        if ts.state in ("executing", "long-running"):
            instructions.append(SendMessage(m.Reschedule(op="reschedule", key=ts.key, run_id=ts.run_id)))
        self._transition(ts, "forgotten", ev.stimulus_id, instructions)

    def _handle_execute_started(self, ev: ExecuteStarted, instructions: list[Instruction]) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None or ts.state != "ready":
            # Cannot happen: the shell takes the lined-up task back before any other event.
            if self.validate:
                state = "missing" if ts is None else ts.state
                raise InvalidTransition(ev.key, state, "executing", f"stimulus {ev.stimulus_id}")
            return
        self._apply(ts, "executing", ev.stimulus_id, instructions)

    def _handle_secede(self, ev: SecedeEvent, instructions: list[Instruction]) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None or ts.state != "executing":
            return
        self._transition(ts, "long-running", ev.stimulus_id, instructions)

    def _handle_steal_request(self, ev: StealRequestEvent, instructions: list[Instruction]) -> None:
        # A task that has not started (waiting for its inputs, or ready) is
        # given up and forgotten; one that runs, ran or is arriving stays.
        # Either way the scheduler hears which state it was in, after any
        # task-finished sent before: it moves the task only on a give-up.
        ts = self.tasks.get(ev.key)
        state: WorkerTaskStateName | None = None if ts is None else ts.state
        if ts is not None and (state == "waiting" or state == "ready"):
            for dep in list(ts.dependents):
                dep.dependencies.discard(ts)
                dep.waiting_for_data.discard(ts)
            ts.dependents.clear()
            self._transition(ts, "forgotten", ev.stimulus_id, instructions)
        instructions.append(
            SendMessage(m.StealResponse(op="steal-response", key=ev.key, state=state, stimulus_id=ev.stimulus_id))
        )

    def _handle_free_keys(self, ev: FreeKeysEvent, instructions: list[Instruction]) -> None:
        for key in ev.keys:
            ts = self.tasks.get(key)
            if ts is None:
                continue
            if ts.state in ("executing", "long-running", "flight"):
                ts.computed = ts.computed and ts.state != "flight"
                self._transition(ts, "cancelled", ev.stimulus_id, instructions)
                continue
            if ts.state == "cancelled":
                continue
            if ts.dependents and any(d.state in ("waiting", "ready") for d in ts.dependents):
                # Still an input of a task about to run here: keep the data,
                # but it is no longer ours to report.  (A task already running
                # holds its inputs: kept for it, the data would outlive it, and
                # a compute-task asking for this key again would be answered
                # with the freed copy instead of a new run.)
                ts.computed = False
                continue
            for dep in list(ts.dependents):
                dep.dependencies.discard(ts)
                dep.waiting_for_data.discard(ts)
            ts.dependents.clear()
            self._transition(ts, "forgotten", ev.stimulus_id, instructions)

    def _handle_gather_success(self, ev: GatherDepSuccess, instructions: list[Instruction]) -> None:
        asked = self.in_flight_workers.pop(ev.worker, set())
        self.in_flight_bytes.pop(ev.worker, None)
        added: list[Key] = []
        nbytes: dict[Key, int] = {}
        sid = ev.stimulus_id
        for ts in asked:
            ts.coming_from = None
            state = ts.state
            if state != "flight" and state != "cancelled":
                continue  # put here meanwhile (update-data), or forgotten
            if ts.key in ev.data:
                if state == "flight":
                    n = ev.nbytes.get(ts.key, ts.nbytes)
                    self._put_data(ts, ev.data[ts.key], n)
                    self._transition(ts, "memory", sid, instructions)
                    added.append(ts.key)
                    nbytes[ts.key] = n
                elif ts.computed:
                    # We were asked to compute it meanwhile; the fetched copy is as good.
                    ts.deferred_compute = None
                    self._put_data(ts, ev.data[ts.key], ev.nbytes.get(ts.key, ts.nbytes))
                    self._transition(ts, "memory", sid, instructions)
                    instructions.append(SendMessage(self._finished_msg(ts, 0.0, 0.0)))
                else:
                    self._transition(ts, "forgotten", sid, instructions)
            else:
                self._fetch_failed(ts, ev.worker, sid, instructions)
        if added:
            instructions.append(SendMessage(m.AddKeys(op="add-keys", keys=added, nbytes=nbytes)))
            if ev.stop:
                self._note_transfer(ev, added, nbytes)

    def _note_transfer(self, ev: GatherDepSuccess, added: list[Key], nbytes: dict[Key, int]) -> None:
        """Remember the fetch on each task here that waits for what it brought (sent with its result)."""
        span = m.TransferSpan(source=ev.worker, start=ev.start, stop=ev.stop, keys=added, nbytes=sum(nbytes.values()))
        tasks = self.tasks
        for key in added:
            dts = tasks.get(key)
            if dts is None:
                continue
            for ts in dts.dependents:
                if not ts.computed:
                    continue
                spans = ts.transfers
                if spans is None:
                    ts.transfers = [span]
                elif spans[-1] is not span:
                    spans.append(span)

    def _handle_gather_failure(self, ev: GatherDepFailure, instructions: list[Instruction]) -> None:
        asked = self.in_flight_workers.pop(ev.worker, set())
        self.in_flight_bytes.pop(ev.worker, None)
        if ev.exception is None:
            for ts in self.tasks.values():
                ts.who_has.discard(ev.worker)
        for ts in asked:
            ts.coming_from = None
            if ts.state != "flight" and ts.state != "cancelled":
                continue
            if ev.exception is not None and ts.state == "flight" and not ts.who_has - {ev.worker}:
                self._fetch_broken(ts, ev, instructions)
            else:
                self._fetch_failed(ts, ev.worker, ev.stimulus_id, instructions)

    def _handle_gather_busy(self, ev: GatherDepBusy, instructions: list[Instruction]) -> None:
        asked = self.in_flight_workers.pop(ev.worker, set())
        self.in_flight_bytes.pop(ev.worker, None)
        self.busy_workers.add(ev.worker)
        instructions.append(RetryBusyWorkerLater(ev.worker))
        recs: Recs = {}
        for ts in asked:
            ts.coming_from = None
            if ts.state == "flight":
                recs[ts] = "fetch"  # the peer still holds it: from it or another, later
            elif ts.state == "cancelled":
                # Asked to compute it here meanwhile: run it; else nobody wants it any more.
                recs[ts] = "released" if ts.computed else "forgotten"
        self._transitions(recs, ev.stimulus_id, instructions)

    def _handle_busy_worker_retry(self, ev: BusyWorkerRetry, instructions: list[Instruction]) -> None:
        self.busy_workers.discard(ev.worker)

    def _fetch_broken(self, ts: WorkerTask, ev: GatherDepFailure, instructions: list[Instruction]) -> None:
        """The last holder of ``ts`` gave an unusable reply: the tasks here that need it err."""
        assert ev.exception is not None
        ts.who_has.discard(ev.worker)
        ts.tried.add(ev.worker)
        recs: Recs = {}
        for dep in list(ts.dependents):
            if dep.state in ("waiting", "ready"):
                instructions.append(
                    SendMessage(
                        m.WorkerTaskErred(
                            op="task-erred",
                            key=dep.key,
                            run_id=dep.run_id,
                            exception=ev.exception,
                            traceback=ev.traceback,
                            text=ev.text,
                        )
                    )
                )
                for d in dep.dependencies:
                    d.dependents.discard(dep)
                dep.dependencies.clear()
                dep.waiting_for_data.clear()
                recs[dep] = "error"
        recs[ts] = "released" if ts.dependents else "forgotten"
        self._transitions(recs, ev.stimulus_id, instructions)

    def _fetch_failed(self, ts: WorkerTask, worker: str, stimulus_id: str, instructions: list[Instruction]) -> None:
        ts.who_has.discard(worker)
        ts.tried.add(worker)
        if ts.state == "cancelled":
            # Asked to compute it here meanwhile: run it; else nobody wants it any more.
            self._transition(ts, "released" if ts.computed else "forgotten", stimulus_id, instructions)
            return
        if ts.who_has:
            self._transition(ts, "fetch", stimulus_id, instructions)
            return
        # Nobody we know has it: give the tasks that need it back to the scheduler.
        tried = sorted(ts.tried)
        recs: Recs = {}
        for dep in list(ts.dependents):
            if dep.state in ("waiting", "ready"):
                instructions.append(
                    SendMessage(
                        m.MissingData(op="missing-data", key=dep.key, run_id=dep.run_id, missing={ts.key: tried})
                    )
                )
                for d in dep.dependencies:
                    d.dependents.discard(dep)
                dep.dependencies.clear()
                dep.waiting_for_data.clear()
                recs[dep] = "forgotten"
        recs[ts] = "released" if ts.dependents else "forgotten"
        self._transitions(recs, stimulus_id, instructions)

    def _handle_acquire_replicas(self, ev: AcquireReplicasEvent, instructions: list[Instruction]) -> None:
        recs: Recs = {}
        held: dict[Key, int] = {}
        for key, holders in ev.who_has.items():
            ts = self._ensure_task(key)
            peers = {h for h in holders if h != self.address}
            if ts.state == "released" or ts.state == "error":
                ts.who_has = peers
                ts.nbytes = ev.nbytes.get(key, 0)
                recs[ts] = "fetch"
            elif ts.state == "fetch":
                ts.who_has.update(peers)
            elif ts.state == "memory":
                # Already here, maybe kept only for a task here after the scheduler
                # freed it: the scheduler asks because it does not count this copy.
                ts.computed = True
                held[key] = ts.nbytes
        if held:
            instructions.append(SendMessage(m.AddKeys(op="add-keys", keys=list(held), nbytes=held)))
        self._transitions(recs, ev.stimulus_id, instructions)

    def _handle_update_data(self, ev: UpdateDataEvent, instructions: list[Instruction]) -> None:
        for key, value in ev.data.items():
            ts = self._ensure_task(key)
            ts.computed = True
            n = ev.nbytes.get(key, 0)
            if ts.state == "memory":
                # A new value for data we hold: no change of state.
                self.nbytes_in_memory += n - ts.nbytes
                self._put_data(ts, value, n)
                continue
            if ts.key in self.data:
                self.nbytes_in_memory -= ts.nbytes
            self._put_data(ts, value, n)
            self._transition(ts, "memory", ev.stimulus_id, instructions)

    def _handle_held_data(self, ev: HeldDataEvent, instructions: list[Instruction]) -> None:
        for key, n in ev.nbytes.items():
            if key in self.tasks or key not in self.data:
                continue
            ts = self._ensure_task(key)
            # Ours to report: the worker tells the scheduler it holds these keys as it registers.
            ts.computed = True
            ts.nbytes = n
            self._transition(ts, "memory", ev.stimulus_id, instructions)

    # -- validation ---------------------------------------------------------------
    def validate_task(self, ts: WorkerTask) -> None:
        """Check one task's invariants."""
        assert ts.state in WORKER_TASK_STATES, ts
        if ts.state == "memory":
            assert ts.key in self.data, ("memory without data", ts)
        if ts.state == "waiting":
            assert ts.waiting_for_data, ("waiting on nothing", ts)
            for dep in ts.waiting_for_data:
                assert dep.state != "memory", ("waiting on data we have", ts, dep)
                assert self.tasks.get(dep.key) is dep, ("waiting on a forgotten task", ts, dep)
        if ts.state == "ready":
            for dep in ts.dependencies:
                assert dep.state == "memory", ("ready without dependency", ts, dep)
        if ts.state == "executing":
            assert ts in self.executing, ("executing not tracked", ts)
        if ts.state == "fetch":
            assert ts in self.to_fetch, ("fetch not queued", ts)
        if ts.state == "flight":
            assert ts.coming_from in self.in_flight_workers, ("flight without a peer", ts)
        for dep in ts.dependencies:
            assert ts in dep.dependents, ("dependency link", ts, dep)

    def validate_state(self) -> None:
        """Check every invariant."""
        for ts in self.tasks.values():
            self.validate_task(ts)
        for ts in self.executing:
            assert ts.state in ("executing", "cancelled"), ("executing set", ts)
        assert len(self.executing) <= self.nthreads, "more tasks executing than threads"
        assert self.in_flight_bytes.keys() == self.in_flight_workers.keys(), "in-flight bytes per peer"
        assert not self.busy_workers & self.in_flight_workers.keys(), "fetching from a peer that said it was busy"


Transition = Callable[[WorkerStateMachine, WorkerTask, str, list[Instruction]], "Recs | None"]

_W = WorkerStateMachine
#: Every allowed change of a worker task's state, and the method that makes it.
_TRANSITION_PAIRS: dict[tuple[WorkerTaskStateName, WorkerTaskStateName], Transition] = {
    ("released", "waiting"): _W._to_waiting,
    ("released", "ready"): _W._to_ready,
    ("released", "fetch"): _W._to_fetch,
    ("error", "waiting"): _W._to_waiting,
    ("error", "ready"): _W._to_ready,
    ("error", "fetch"): _W._to_fetch,
    ("fetch", "waiting"): _W._to_waiting,
    ("fetch", "ready"): _W._to_ready,
    ("fetch", "flight"): _W._fetch_to_flight,
    ("waiting", "ready"): _W._to_ready,
    ("ready", "executing"): _W._ready_to_executing,
    ("executing", "long-running"): _W._executing_to_long_running,
    ("executing", "error"): _W._to_error,
    ("long-running", "error"): _W._to_error,
    ("waiting", "error"): _W._to_error,
    ("ready", "error"): _W._to_error,
    ("executing", "cancelled"): _W._to_cancelled,
    ("long-running", "cancelled"): _W._to_cancelled,
    ("flight", "cancelled"): _W._to_cancelled,
    ("flight", "fetch"): _W._to_fetch,
    ("flight", "released"): _W._to_released,
    ("cancelled", "executing"): _W._cancelled_to_executing,
    ("cancelled", "long-running"): _W._cancelled_to_long_running,
    ("cancelled", "flight"): _W._cancelled_to_flight,
    ("cancelled", "fetch"): _W._to_fetch,
    ("cancelled", "released"): _W._to_released,
}
# Data put here directly (scatter), computed, or fetched: from any live state.
for _s in WORKER_TASK_STATES - {"memory", "forgotten"}:
    _TRANSITION_PAIRS[(_s, "memory")] = _W._to_memory
# Freed, rescheduled, or given back to the scheduler: from any state.
for _s in WORKER_TASK_STATES - {"forgotten"}:
    _TRANSITION_PAIRS[(_s, "forgotten")] = _W._to_forgotten

#: Every allowed ``(start, finish)`` pair of a worker task and the method that makes it (read only).
TRANSITION_TABLE: Mapping[tuple[WorkerTaskStateName, WorkerTaskStateName], Transition] = MappingProxyType(
    _TRANSITION_PAIRS
)

#: The same table keyed by start, then finish (two lookups, no tuple per transition).
_TRANSITIONS: dict[str, dict[str, Transition]] = {s: {} for s in WORKER_TASK_STATES}
for (_start, _finish), _func in _TRANSITION_PAIRS.items():
    _TRANSITIONS[_start][_finish] = _func
del _W


_HANDLERS: dict[type, Any] = {
    ComputeTaskEvent: WorkerStateMachine._handle_compute_task,
    FreeKeysEvent: WorkerStateMachine._handle_free_keys,
    ExecuteSuccess: WorkerStateMachine._handle_execute_success,
    ExecuteFailure: WorkerStateMachine._handle_execute_failure,
    ExecuteAbandoned: WorkerStateMachine._handle_execute_abandoned,
    RescheduleEvent: WorkerStateMachine._handle_reschedule,
    SecedeEvent: WorkerStateMachine._handle_secede,
    ExecuteStarted: WorkerStateMachine._handle_execute_started,
    GatherDepSuccess: WorkerStateMachine._handle_gather_success,
    GatherDepFailure: WorkerStateMachine._handle_gather_failure,
    GatherDepBusy: WorkerStateMachine._handle_gather_busy,
    BusyWorkerRetry: WorkerStateMachine._handle_busy_worker_retry,
    UpdateDataEvent: WorkerStateMachine._handle_update_data,
    HeldDataEvent: WorkerStateMachine._handle_held_data,
    AcquireReplicasEvent: WorkerStateMachine._handle_acquire_replicas,
    StealRequestEvent: WorkerStateMachine._handle_steal_request,
}
