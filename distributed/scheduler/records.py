"""The scheduler's records of tasks, workers and clients.

Plain ``__slots__`` classes, re-exported from :mod:`distributed.scheduler`
(where plugins and users import them).  They hold data only: every change of
state goes through the scheduler's transition methods, which keep these
invariants (checked in validation mode):

* ``ts in dts.dependents`` iff ``dts in ts.dependencies``.
* ``ts.state == "memory"`` iff ``ts.who_has`` is non-empty, and then
  ``ts in ws.has_what`` for every ``ws in ts.who_has``.
* ``ts.state == "processing"`` iff ``ts.processing_on`` is set, and then
  ``ts in ts.processing_on.processing``.
* ``ts.waiting_on`` holds the dependencies of a waiting task not yet in memory.
* ``dts.waiters`` holds the dependents that still need ``dts``.
* ``cs in ts.who_wants`` iff ``ts in cs.wants_what``.

``ws.has_what`` and ``cs.wants_what`` may hold millions of tasks: add to them
with :func:`hold` and :func:`want`, which shard them once they are large
(:mod:`distributed.sharded`), so that growing them never stops the scheduler
for long.

A task's relations (``dependencies`` ... ``who_has``) start as the shared
:data:`EMPTY` frozenset and become a set at their first member: most tasks of
a large map never have dependencies or waiters, and six empty sets would be
over half of what the scheduler keeps per task.  They are typed read-only;
change them with :func:`grown` and :func:`without`, or assign :data:`EMPTY`.
A worker or client alone in ``who_has`` or ``who_wants`` is its shared
one-member frozenset (``ws.alone``, ``cs.alone``): remove members of those
with :func:`without`.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, MutableMapping, MutableSet
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic, Literal, TypeVar, cast, get_args, overload

from distributed.core import Status
from distributed.protocol import messages as m
from distributed.protocol.messages import Key, Payload
from distributed.protocol.serialize import Serialized
from distributed.scheduler.priorities import (
    DEFAULT_PRIORITY_RANKS,
    MAX_GENERATION,
    MAX_ORDER,
    ORDER_BITS,
    priority_of,
    priority_problem,
    rank_of,
)
from distributed.scheduler.stored_specs import PACKED_PAIR, restore, shared_prefix, shrink
from distributed.sharded import SHARD_ABOVE, ShardedDict, ShardedSet

__all__ = [
    "ALL_TASK_STATES",
    "EMPTY",
    "NO_ANNOTATIONS",
    "NO_EXTRAS",
    "ClientState",
    "Effects",
    "ErredTask",
    "MemoryState",
    "TaskExtras",
    "TaskGroup",
    "TaskPrefix",
    "TaskState",
    "TaskStateName",
    "TransitionInputs",
    "UnmanagedHistory",
    "WorkerState",
    "grown",
    "hold",
    "want",
    "without",
]

#: The states of a scheduler task; a misspelt state is a type error.
TaskStateName = Literal["released", "waiting", "no-worker", "queued", "processing", "memory", "erred", "forgotten"]

ALL_TASK_STATES: Final[frozenset[TaskStateName]] = frozenset(get_args(TaskStateName))

T = TypeVar("T")

#: An empty relation; shared, never mutated.
EMPTY: Final[frozenset[Any]] = frozenset()

#: The annotations of a task that has none; shared, read-only.
NO_ANNOTATIONS: Final[Mapping[str, Any]] = MappingProxyType({})


def grown(relation: AbstractSet[T], item: T) -> AbstractSet[T]:
    """``relation`` with ``item`` added: in place if it is a set already.

    A task, worker or client alone in a relation is its shared one-member
    frozenset (``ts.alone``, ``ws.alone``, ``cs.alone``): a set of one costs
    216 bytes, and a million tasks held by one worker and wanted by one
    client, or the million leaves of a tree each with one dependent, would
    spend more on those sets than on anything else the scheduler keeps.
    Remove members of such relations with :func:`without`.

    Use as ``ts.who_has = grown(ts.who_has, ws)``.
    """
    if type(relation) is set:
        relation.add(item)
        return relation
    if not relation and isinstance(item, (TaskState, WorkerState, ClientState)):
        return cast(AbstractSet[T], item.alone)
    if item in relation:
        return relation
    return {*relation, item}


def hold(ws: WorkerState, ts: TaskState) -> None:
    """Add ``ts`` to ``ws.has_what``; shard it once it is large."""
    has_what = ws.has_what
    has_what[ts] = None
    if type(has_what) is dict and len(has_what) > SHARD_ABOVE:
        ws.has_what = ShardedDict(has_what)


def want(cs: ClientState, ts: TaskState) -> None:
    """Add ``ts`` to ``cs.wants_what``; shard it once it is large."""
    wants_what = cs.wants_what
    wants_what.add(ts)
    if type(wants_what) is set and len(wants_what) > SHARD_ABOVE:
        cs.wants_what = ShardedSet(wants_what)


def without(relation: AbstractSet[T], item: T) -> AbstractSet[T]:
    """``relation`` without ``item``: in place if it is a set of its own.

    Use as ``ts.who_has = without(ts.who_has, ws)``.
    """
    if type(relation) is set:
        relation.discard(item)
        return relation
    if item not in relation:
        return relation
    return relation - {item} or EMPTY


class TaskPrefix:
    """Tasks sharing a key prefix (``"inc"`` of ``"inc-1234"``): duration statistics and totals.

    Its groups with a task not yet forgotten are in :attr:`groups`; once all of
    a group's tasks are forgotten the scheduler drops the group and folds its
    totals in here (:meth:`retire`), so that a scheduler running graph after
    graph does not keep one group per graph forever.
    """

    __slots__ = ("name", "duration_average", "count", "groups", "forgotten", "duration", "nbytes_total")

    def __init__(self, name: str) -> None:
        self.name = name
        #: Exponentially weighted mean of run time in seconds (-1 until known).
        self.duration_average = -1.0
        self.count = 0
        #: The groups with tasks not yet forgotten, by name.
        self.groups: dict[str, TaskGroup] = {}
        #: Tasks, run time (s) and result bytes of the groups dropped.
        self.forgotten = 0
        self.duration = 0.0
        self.nbytes_total = 0

    def add_duration(self, duration: float) -> None:
        """Fold one measured run time into the average."""
        if self.duration_average < 0:
            self.duration_average = duration
        else:
            self.duration_average = 0.5 * self.duration_average + 0.5 * duration

    def retire(self, group: TaskGroup) -> None:
        """Drop ``group``, all of whose tasks are forgotten, keeping its totals."""
        if self.groups.get(group.name) is group:
            del self.groups[group.name]
            self.forgotten += group.states["forgotten"]
            self.duration += group.duration
            self.nbytes_total += group.nbytes_total

    def state_counts(self) -> dict[TaskStateName, int]:
        """Tasks of this prefix in each state, forgotten ones included (those of dropped groups too)."""
        states = dict.fromkeys(ALL_TASK_STATES, 0)
        for tg in self.groups.values():
            for state, n in tg.states.items():
                states[state] += n
        states["forgotten"] += self.forgotten
        return states

    def totals(self) -> tuple[float, int]:
        """Run time (s) and result bytes of every finished task of this prefix, dropped groups included."""
        groups = self.groups.values()
        return self.duration + sum(tg.duration for tg in groups), self.nbytes_total + sum(
            tg.nbytes_total for tg in groups
        )

    def __repr__(self) -> str:
        return f"<TaskPrefix {self.name}: {self.count} tasks>"


class TaskGroup:
    """Tasks sharing a key name (``"x-abc"`` of ``("x-abc", 0)``): counts by state."""

    __slots__ = (
        "name",
        "prefix",
        "states",
        "nbytes_total",
        "duration",
        "types",
        "live",
        "span_id",
        "start",
        "stop",
        "spec_prefix",
    )

    def __init__(self, name: str, prefix: TaskPrefix) -> None:
        self.name = name
        self.prefix = prefix
        self.states: dict[TaskStateName, int] = dict.fromkeys(ALL_TASK_STATES, 0)
        self.nbytes_total = 0
        self.duration = 0.0
        #: The span the group belongs to (that of its first task; see :mod:`distributed.scheduler.spans`).
        self.span_id: str | None = None
        #: When the first of its tasks to finish started, and the last one finished (0.0: none yet).
        self.start = 0.0
        self.stop = 0.0
        self.types: set[str] = set()
        #: Tasks of the group not forgotten (kept by the scheduler: summing ``states`` costs more).
        self.live = 0
        #: The packed run_spec of the group's first task up to its last frame (its header and function), which
        #: the group's tasks of the same function keep once, here (b"": no such part; None: no task yet).
        self.spec_prefix: bytes | None = None
        prefix.groups[name] = self

    def __len__(self) -> int:
        return sum(self.states.values()) - self.states["forgotten"]

    def __repr__(self) -> str:
        active = {k: v for k, v in self.states.items() if v}
        return f"<TaskGroup {self.name}: {active}>"


class TaskExtras:
    """What few tasks have: an error, restrictions, retries, metadata, an actor's result.

    A task starts with the shared :data:`NO_EXTRAS` and gets a record of its
    own at the first of these it is given; the fields read through the task
    (``ts.exception``, ``ts.worker_restrictions`` ...).  Fourteen slots a
    task would be 112 bytes each of millions of tasks.
    """

    __slots__ = (
        "exception",
        "traceback",
        "exception_text",
        "exception_blame",
        "erred_on",
        "retries",
        "suspicious",
        "worker_restrictions",
        "host_restrictions",
        "resource_restrictions",
        "loose_restrictions",
        "metadata",
        "has_lost_dependencies",
        "actor",
    )

    def __init__(self) -> None:
        self.exception: Payload | None = None
        self.traceback: Any = None
        self.exception_text = ""
        self.exception_blame: TaskState | None = None
        self.erred_on: set[str] | None = None
        self.retries = 0
        self.suspicious = 0
        self.worker_restrictions: set[Any] | None = None
        self.host_restrictions: set[str] | None = None
        self.resource_restrictions: dict[str, float] | None = None
        self.loose_restrictions = False
        self.metadata: dict[str, Any] | None = None
        self.has_lost_dependencies = False
        self.actor = False

    def __repr__(self) -> str:
        set_fields = ", ".join(
            f"{name}={value!r}"
            for name in self.__slots__
            if (value := getattr(self, name)) is not None and value is not False and value != 0 and value != ""
        )
        return f"<TaskExtras {set_fields}>" if set_fields else "<TaskExtras: none>"


_PACKED_PAIR_BYTE: Final = bytes((PACKED_PAIR,))

#: The extras of every task that has none of its own; never changed.
NO_EXTRAS: Final = TaskExtras()


V = TypeVar("V")


class ExtraField(Generic[V]):
    """A field of :class:`TaskState` kept in its :class:`TaskExtras`.

    Read, it is the record's field (the default's, from :data:`NO_EXTRAS`);
    written, the task gets a record of its own first, unless the value is the
    default and it has none: releasing a task writes defaults, and must not
    give it a record.
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""
        self.default: object = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.default = getattr(NO_EXTRAS, name)

    @overload
    def __get__(self, ts: None, owner: type | None = None) -> ExtraField[V]: ...

    @overload
    def __get__(self, ts: TaskState, owner: type | None = None) -> V: ...

    def __get__(self, ts: TaskState | None, owner: type | None = None) -> V | ExtraField[V]:
        if ts is None:
            return self
        return cast(V, getattr(ts.extras, self.name))

    def __set__(self, ts: TaskState, value: V) -> None:
        extras = ts.extras
        if extras is NO_EXTRAS:
            default = self.default
            if value is default or (type(value) is type(default) and value == default):
                return
            extras = ts.extras = TaskExtras()
        setattr(extras, self.name, value)


class TaskState:
    """What the scheduler knows about one task.

    The fields most tasks never set (an error, restrictions, retries, metadata)
    are properties over a :class:`TaskExtras` made at the first of them.
    """

    __slots__ = (
        "key",
        "_run_spec",
        "rank",
        "state",
        "dependencies",
        "dependents",
        "waiting_on",
        "waiters",
        "who_wants",
        "who_has",
        "processing_on",
        "nbytes",
        "type",
        "group",
        "annotations",
        "run_id",
        "extras",
        "_alone",
    )

    # Hashed and compared by identity (object's own): no per-task counter.

    def __init__(self, key: Key, run_spec: Payload | None, group: TaskGroup, compact: bool = False) -> None:
        self.key: Key = key
        self.group = group
        self._run_spec: Payload | bytes | None
        if compact:
            self.compact_run_spec(run_spec)
        else:
            self.run_spec = run_spec
        #: The task's priority as one integer, lower first (see :mod:`distributed.scheduler.priorities`);
        #: None until it has one (data scattered before any graph).
        self.rank: int | None = None
        self.state: TaskStateName = "released"
        self.dependencies: AbstractSet[TaskState] = EMPTY
        self.dependents: AbstractSet[TaskState] = EMPTY
        self.waiting_on: AbstractSet[TaskState] = EMPTY
        self.waiters: AbstractSet[TaskState] = EMPTY
        self.who_wants: AbstractSet[ClientState] = EMPTY
        self.who_has: AbstractSet[WorkerState] = EMPTY
        self.processing_on: WorkerState | None = None
        self.nbytes = -1
        self.type: str | None = None
        #: Replaced, never changed in place: most tasks share one empty mapping.
        self.annotations: Mapping[str, Any] = NO_ANNOTATIONS
        self.run_id = -1
        #: The record of the task's rarely set fields: :data:`NO_EXTRAS` (shared) until it has one of them.
        self.extras = NO_EXTRAS
        # The 18th slot costs nothing: the allocator rounds a 17-slot task up to this size anyway.
        self._alone: frozenset[TaskState] | None = None
        group.states["released"] += 1
        group.live += 1
        group.prefix.count += 1

    @property
    def alone(self) -> frozenset[TaskState]:
        """``{self}``, shared by the relations of other tasks in which this task is alone (made at the first)."""
        alone = self._alone
        if alone is None:
            alone = self._alone = frozenset((self,))
        return alone

    def forget_alone(self) -> None:
        """Drop :attr:`alone` (it refers to the task): for a forgotten task, which no relation holds."""
        self._alone = None

    @property
    def prefix(self) -> TaskPrefix:
        """The task's prefix (that of its group)."""
        return self.group.prefix

    exception: ExtraField[Payload | None] = ExtraField("The error the task raised (serialised), while it is erred.")
    traceback: ExtraField[Any] = ExtraField("The traceback of that error (serialised), while the task is erred.")
    exception_text: ExtraField[str] = ExtraField("The error's text, readable without unpickling it (empty when none).")
    exception_blame: ExtraField[TaskState | None] = ExtraField(
        "The task whose error this one erred by (itself when it raised it)."
    )
    erred_on: ExtraField[set[str] | None] = ExtraField(
        "Workers the task erred on (None until it first errs: most never do)."
    )
    retries: ExtraField[int] = ExtraField("How many more times the task may be rerun after it errs.")
    suspicious: ExtraField[int] = ExtraField(
        "How many workers died while running it (past ``allowed-failures``, it errs)."
    )
    worker_restrictions: ExtraField[set[Any] | None] = ExtraField(
        "Worker addresses, or names (of any type: LocalCluster names workers 0, 1, ...)."
    )
    host_restrictions: ExtraField[set[str] | None] = ExtraField("Hosts the task may run on (None: any).")
    resource_restrictions: ExtraField[dict[str, float] | None] = ExtraField(
        "Resources the task takes on its worker while it runs (None: none)."
    )
    loose_restrictions: ExtraField[bool] = ExtraField(
        "Whether the task may run elsewhere when no worker meets its restrictions."
    )
    metadata: ExtraField[dict[str, Any] | None] = ExtraField(
        "What plugins and users stored on the task (None until the first)."
    )
    has_lost_dependencies: ExtraField[bool] = ExtraField(
        "Whether a dependency was lost for good (forgotten while needed)."
    )
    actor: ExtraField[bool] = ExtraField("The result is an actor: it lives on one worker, whose loss errs the task.")

    @property
    def run_spec(self) -> Payload | None:
        """The serialised task; opaque to the scheduler.  None for scattered data."""
        spec = self._run_spec
        if isinstance(spec, bytes):
            if spec[0] != PACKED_PAIR:
                spec = restore(spec, self.key, self.group.spec_prefix or b"")
            return Serialized.from_packed(spec)
        return spec

    @run_spec.setter
    def run_spec(self, spec: Payload | None) -> None:
        # A task that came packed in its message is kept as those bytes alone: the wrapper
        # would cost 56 bytes a task, and one more object for the collector to look at.
        if type(spec) is Serialized and spec.packed is not None and spec.packed[:1] == _PACKED_PAIR_BYTE:
            self._run_spec = spec.packed
        else:
            self._run_spec = spec

    def compact_run_spec(self, spec: Payload | None) -> None:
        """Set the run_spec, keeping less of it than the setter does, for a bit more time to set and read it.

        Of a task packed as its group's first was up to the last frame (the
        same function), only what differs is kept: see
        :mod:`distributed.scheduler.stored_specs`.  About 60 bytes a task
        instead of 160 for a ``client.map``, for about half a microsecond
        each to keep and to read; the scheduler does it once it holds many tasks.
        """
        if type(spec) is Serialized and spec.packed is not None:
            packed = spec.packed
            group = self.group
            prefix = group.spec_prefix
            if prefix is None:
                prefix = group.spec_prefix = shared_prefix(packed)
            kept = shrink(packed, self.key, prefix)
            if kept is not None:
                self._run_spec = kept
                return
        self.run_spec = spec

    @property
    def has_run_spec(self) -> bool:
        """Whether the task can be computed (scattered data has no run_spec); cheaper than reading it."""
        return self._run_spec is not None

    @property
    def priority(self) -> tuple[Any, ...]:
        """``(-user_priority, generation, order)``, lower first, as dask writes it; ``()`` when it has none."""
        rank = self.rank
        if rank is None:
            return ()
        if 0 <= rank <= DEFAULT_PRIORITY_RANKS:  # the user's priority is 0: no call
            return 0, rank >> ORDER_BITS, rank & MAX_ORDER
        return priority_of(rank)

    @priority.setter
    def priority(self, value: tuple[Any, ...]) -> None:
        if not value:
            self.rank = None
            return
        if len(value) != 3:
            raise ValueError(f"A task's priority is (-user_priority, generation, order), not {value!r}")
        negated, generation, order = value
        problem = priority_problem(negated, order)
        if problem is None and not (isinstance(generation, int) and 0 <= generation <= MAX_GENERATION):
            problem = f"generation {generation!r} is not an integer from 0 to {MAX_GENERATION}"
        if problem is not None:
            raise ValueError(f"A task's priority {value!r}: {problem}")
        self.rank = rank_of(-negated, generation, order)

    def __lt__(self, other: TaskState) -> bool:
        rank, other_rank = self.rank, other.rank
        if rank is None:
            return other_rank is not None
        return other_rank is not None and rank < other_rank

    @property
    def has_restrictions(self) -> bool:
        """Whether the task may run only on some workers."""
        extras = self.extras
        return extras is not NO_EXTRAS and bool(
            extras.worker_restrictions or extras.host_restrictions or extras.resource_restrictions
        )

    def __repr__(self) -> str:
        return f"<TaskState {self.key!r} {self.state}>"


class MemoryState:
    """A worker's memory, as its heartbeat reported it.

    Parameters
    ----------
    process
        The worker process's memory (RSS), in bytes.
    managed_total
        Bytes of the results it holds (by sizeof), spilled ones included.
    spilled
        Bytes (by sizeof) of those results that are on disk.
    unmanaged_old
        The least unmanaged memory seen over the last
        ``distributed.worker.memory.recent-to-old-time``; the current unmanaged
        memory when not given.
    """

    __slots__ = ("managed", "process", "spilled", "unmanaged", "unmanaged_old")

    def __init__(self, *, process: int, managed_total: int, spilled: int, unmanaged_old: int | None = None) -> None:
        self.process = process
        self.spilled = min(spilled, managed_total)
        #: Results held in memory.
        self.managed = managed_total - self.spilled
        #: What the process uses beyond the results in memory (interpreter, libraries, buffers, leaks).
        self.unmanaged = unmanaged_of(process, managed_total, spilled)
        #: The part of ``unmanaged`` that has lasted: a task's temporary heap is not in it.
        self.unmanaged_old = self.unmanaged if unmanaged_old is None else min(max(unmanaged_old, 0), self.unmanaged)

    @property
    def unmanaged_recent(self) -> int:
        """Unmanaged memory that appeared recently (and may soon be gone)."""
        return self.unmanaged - self.unmanaged_old

    @property
    def optimistic(self) -> int:
        """Results in memory plus the lasting unmanaged memory: ``process`` without recent spikes."""
        return self.managed + self.unmanaged_old

    @property
    def managed_total(self) -> int:
        """Results held, in memory or spilled."""
        return self.managed + self.spilled

    @property
    def managed_in_memory(self) -> int:
        """The older name of ``managed``, kept because dask.distributed's docs use it."""
        return self.managed

    def __repr__(self) -> str:
        return (
            f"<MemoryState process={self.process} managed={self.managed} "
            f"unmanaged={self.unmanaged} unmanaged_old={self.unmanaged_old} spilled={self.spilled}>"
        )


def unmanaged_of(process: int, managed_total: int, spilled: int) -> int:
    """What a process uses beyond the results it holds in memory (``managed_total`` less those ``spilled``)."""
    return max(process - (managed_total - min(spilled, managed_total)), 0)


class UnmanagedHistory:
    """The least unmanaged memory of a worker over a sliding window of its heartbeats.

    Keeps only the samples that can still be the minimum (each smaller than
    every later one), so adding a sample is amortised O(1).
    """

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, unmanaged: int, window: float) -> None:
        """Record ``unmanaged`` bytes at time ``now``; forget samples older than ``window`` seconds."""
        samples = self._samples
        while samples and samples[-1][1] >= unmanaged:
            samples.pop()
        samples.append((now, unmanaged))
        while samples[0][0] < now - window:
            samples.popleft()

    def minimum(self) -> int | None:
        """The least sample of the window; None before the first."""
        return self._samples[0][1] if self._samples else None


class WorkerState:
    """What the scheduler knows about one worker."""

    __slots__ = (
        "address",
        "name",
        "nthreads",
        "memory_limit",
        "pid",
        "host",
        "nanny",
        "resources",
        "used_resources",
        "processing",
        "long_running",
        "has_what",
        "nbytes",
        "occupancy",
        "status",
        "last_seen",
        "metrics",
        "local_directory",
        "versions",
        "executing_count",
        "unmanaged_history",
        "actors",
        "extra",
        "alone",
        "_hash",
        "__weakref__",
    )

    def __init__(
        self,
        address: str,
        nthreads: int,
        name: Any = None,
        memory_limit: int = 0,
        pid: int = 0,
        nanny: str | None = None,
        resources: Mapping[str, float] | None = None,
    ) -> None:
        self.address = address
        self._hash = hash(address)
        #: ``{self}``, shared by the ``who_has`` of every task only this worker holds.
        self.alone: frozenset[WorkerState] = frozenset((self,))
        self.name = name if name is not None else address
        self.nthreads = nthreads
        self.memory_limit = memory_limit
        self.pid = pid
        host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
        self.host = host
        self.nanny = nanny
        self.resources: dict[str, float] = dict(resources or {})
        self.used_resources: dict[str, float] = dict.fromkeys(self.resources, 0.0)
        #: Tasks assigned here, with their expected durations in seconds.
        self.processing: dict[TaskState, float] = {}
        #: Tasks that seceded from the worker's thread pool.
        self.long_running: set[TaskState] = set()
        #: Keys held in memory (a dict for insertion order while small; see :func:`hold`).
        self.has_what: MutableMapping[TaskState, None] = {}
        self.nbytes = 0
        self.occupancy = 0.0
        #: The worker's life cycle, as dask's plugins compare it: ``ws.status == Status.running``.
        self.status: Status = Status.running
        self.last_seen = 0.0
        self.metrics: dict[str, Any] = {}
        self.local_directory = ""
        self.versions: dict[str, Any] = {}
        self.executing_count = 0
        #: Unmanaged memory over the recent heartbeats (see ``memory``).
        self.unmanaged_history = UnmanagedHistory()
        #: Actor tasks whose instance lives here (new actors go where there are fewest).
        self.actors: set[TaskState] = set()
        #: What the worker told as it registered (``Worker(startup_information=)``): part of its identity.
        self.extra: dict[str, Any] = {}

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def identity(self) -> dict[str, Any]:
        """A summary for ``scheduler_info``."""
        return {
            "type": "Worker",
            "id": self.name,
            "name": self.name,
            "host": self.host,
            "nthreads": self.nthreads,
            "memory_limit": self.memory_limit,
            "pid": self.pid,
            "nanny": self.nanny,
            "resources": dict(self.resources),
            "local_directory": self.local_directory,
            "last_seen": self.last_seen,
            "metrics": dict(self.metrics),
            "status": self.status.name,
            **self.extra,
        }

    @property
    def memory(self) -> MemoryState:
        """This worker's memory as of its last heartbeat: process, managed, spilled, unmanaged."""
        process, managed_total, spilled = self._memory_figures()
        return MemoryState(
            process=process,
            managed_total=managed_total,
            spilled=spilled,
            unmanaged_old=self.unmanaged_history.minimum(),
        )

    def unmanaged_now(self) -> int:
        """``memory.unmanaged``, without making the rest of :attr:`memory` (every heartbeat asks)."""
        return unmanaged_of(*self._memory_figures())

    def _memory_figures(self) -> tuple[int, int, int]:
        """Process memory, results held (in memory or spilled) and results spilled, as of the last heartbeat."""
        metrics = self.metrics
        spilled = metrics.get("spilled_bytes") or {}
        return (
            int(metrics.get("memory", 0) or 0),
            int(metrics.get("managed_bytes", self.nbytes) or 0),
            int(spilled.get("memory", 0) or 0),
        )

    def __repr__(self) -> str:
        return (
            f"<WorkerState {self.address!r}, name: {self.name}, status: {self.status}, "
            f"memory: {len(self.has_what)}, processing: {len(self.processing)}>"
        )


@dataclass(frozen=True, slots=True)
class ErredTask:
    """A task that erred on a worker, as the scheduler's ``erred_tasks`` history keeps it (no graph, no run_spec).

    Attributes
    ----------
    key
        The task's key.
    timestamp
        When it erred (``time.time()``).
    erred_on
        The workers it erred on.
    exception_text, traceback_text
        The error and its traceback, as text.
    """

    key: Key
    timestamp: float
    erred_on: frozenset[str]
    exception_text: str
    traceback_text: str


class ClientState:
    """What the scheduler knows about one client."""

    __slots__ = ("client_key", "wants_what", "last_seen", "versions", "alone", "_hash", "__weakref__")

    def __init__(self, client: str) -> None:
        self.client_key = client
        self._hash = hash(client)
        #: Tasks whose results the client holds futures of (see :func:`want`).
        self.wants_what: MutableSet[TaskState] = set()
        #: ``{self}``, shared by the ``who_wants`` of every task only this client wants.
        self.alone: frozenset[ClientState] = frozenset((self,))
        self.last_seen = 0.0
        self.versions: dict[str, Any] = {}

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return f"<ClientState {self.client_key!r}>"


class Effects:
    """What a stimulus produces: the recommendations still to apply, and the messages to send.

    Attributes
    ----------
    recs
        Task -> the state it should go to next (applied by ``transitions``).
    workers, clients
        Messages to each worker's and each client's stream, by address and client id.
    free
        Keys each worker may free, sent as one message per worker.
    """

    __slots__ = ("recs", "workers", "clients", "free")

    def __init__(self) -> None:
        self.recs: dict[TaskState, TaskStateName] = {}
        self.workers: defaultdict[str, list[m.SchedulerToWorker]] = defaultdict(list)
        self.clients: defaultdict[str, list[m.SchedulerToClient]] = defaultdict(list)
        self.free: defaultdict[str, list[Key]] = defaultdict(list)


class TransitionInputs:
    """What the transitions a stimulus asks for need from it, and what their loop keeps between them.

    Parameters
    ----------
    finished
        A worker's report of the task going from processing to memory.
    erred
        A worker's report of a task that raised (given only when plugins are there to see it).
    scattered
        Where scattered data landed, its size and type, for released -> memory.
    placements
        Workers chosen in advance for tasks about to go to processing: a stolen
        task's thief, checked against its restrictions by whoever chose it.
    opened
        Workers whose threads may have freed up: queued tasks go there once
        the recommendations settle (transitions that free a thread add to it).

    Attributes
    ----------
    target
        The worker a queued task was pulled for (set by the loop just before
        queued -> processing).
    no_room_for
        A root-task duration no worker had room for since a task last left
        processing: later root tasks of that duration queue without scanning
        the workers again.
    run_worker, run_left, run_duration
        The worker taking the current run of short root tasks, how many more
        of the run it takes, and the tasks' duration (see
        ``SchedulerState._worker_for_root``).
    """

    __slots__ = (
        "finished",
        "erred",
        "scattered",
        "placements",
        "opened",
        "target",
        "no_room_for",
        "run_worker",
        "run_left",
        "run_duration",
    )

    def __init__(
        self,
        *,
        finished: m.TaskFinished | None = None,
        erred: m.WorkerTaskErred | None = None,
        scattered: tuple[list[WorkerState], int, str | None] | None = None,
        placements: dict[TaskState, WorkerState] | None = None,
        opened: list[WorkerState] | None = None,
    ) -> None:
        self.finished = finished
        self.erred = erred
        self.scattered = scattered
        self.placements = placements
        self.opened: list[WorkerState] = opened if opened is not None else []
        self.target: WorkerState | None = None
        self.no_room_for: float | None = None
        self.run_worker: WorkerState | None = None
        self.run_left = 0
        self.run_duration = -1.0
