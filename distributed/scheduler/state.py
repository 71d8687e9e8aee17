"""The scheduler's state machine (see :mod:`distributed.scheduler` for the theory of operation).

:class:`SchedulerState` holds the records and every transition method; the
stimuli (:mod:`.stimuli`), graph ingestion (:mod:`.graph`) and the server
(:mod:`.server`) build on it.  Nothing here does I/O: a stimulus returns an
:class:`~distributed.scheduler.records.Effects` of messages that the server sends.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from dask.utils import format_bytes

from distributed.core import Status
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.exceptions import InvalidTransition, LostDataError
from distributed.protocol import journal_records as jr
from distributed.protocol import messages as m
from distributed.protocol.messages import Key, Payload
from distributed.protocol.serialize import as_serialized
from distributed.scheduler.computations import Computation, ComputationLog
from distributed.scheduler.loads import WorkerLoads, load_of
from distributed.scheduler.priorities import rank_of
from distributed.scheduler.queue import PriorityQueue
from distributed.scheduler.records import (
    ALL_TASK_STATES,
    EMPTY,
    NO_EXTRAS,
    ClientState,
    Effects,
    ErredTask,
    TaskGroup,
    TaskPrefix,
    TaskState,
    TaskStateName,
    TransitionInputs,
    WorkerState,
    grown,
    hold,
    without,
)
from distributed.scheduler.settings import SchedulingSettings
from distributed.sharded import SHARD_ABOVE, ShardedDict
from distributed.utils import key_split_uncached

logger = logging.getLogger("distributed.scheduler")

__all__ = ["PluginKwargs", "SchedulerState", "priority_key", "state_of"]

#: Extra keyword arguments a transition passes to the plugins' ``transition`` hook.
PluginKwargs = dict[str, Any] | None


def _startstops(msg: m.TaskFinished | m.WorkerTaskErred) -> list[dict[str, Any]]:
    """The intervals a worker reported for a task (transfers of its inputs, then its compute), for plugins."""
    spans: list[dict[str, Any]] = []
    for t in msg.get("transfers", ()):
        spans.append(
            {"action": "transfer", "start": t["start"], "stop": t["stop"], "source": t["source"], "nbytes": t["nbytes"]}
        )
    start = msg.get("start")
    stop = msg.get("stop")
    if start is not None and stop is not None and stop > 0:
        spans.append({"action": "compute", "start": start, "stop": stop})
    return spans


#: Up to this many workers, a task with no dependencies and no restrictions goes where it should start
#: soonest, each worker weighed (``decide_worker``); past it, to the least loaded per thread (O(1)).
SCAN_WORKERS = 20

#: Most short root tasks given to one worker in a row, in one message (see ``SchedulerState._worker_for_root``).
ROOT_RUN = 8

#: Entries of tasks no longer queued that the queue may hold beyond as many as it has live ones.
STALE_QUEUE_SLACK = 1000


def _load_per_thread(ws: WorkerState) -> tuple[float, float]:
    return load_of(ws) / ws.nthreads, ws.occupancy / ws.nthreads


def priority_key(ts: TaskState) -> float:
    """The order of ``ts`` among tasks: its rank (tasks without one first)."""
    rank = ts.rank
    return -math.inf if rank is None else rank


def _still_queued(ts: TaskState) -> bool:
    return ts.state == "queued"


def state_of(ts: TaskState) -> TaskStateName:
    """``ts.state``, read after a transition (a plain ``ts.state`` keeps the type narrowed before it)."""
    return ts.state


#: ``key_split`` of key heads (see :func:`_key_name`); cleared when it reaches ``_KEY_NAMES_MAX``.
_key_names: dict[str, str] = {}
_KEY_NAMES_MAX = 4096


def _key_name(key: str) -> str:
    """``key_split(key)``, looked up by the key without its last ``-`` word when that word is not alphabetic.

    ``key_split`` keeps leading words up to the first one that is not
    alphabetic, so such a last word never changes its result; the keys of one
    ``map`` (``"f-<token>-<i>"``) or of pure calls (``"f-<hash>"``) then share
    one entry, where ``key_split``'s own cache holds one per key and misses
    once a graph has more keys than it holds.
    """
    head, sep, tail = key.rpartition("-")
    if not sep or tail.isalpha():
        return key_split_uncached(key)
    name = _key_names.get(head)
    if name is None:
        if len(_key_names) >= _KEY_NAMES_MAX:
            _key_names.clear()
        name = _key_names[head] = key_split_uncached(head)
    return name


class SchedulerState:
    """The scheduler's state machine: its records, the transition table, and worker choice; no I/O.

    Parameters
    ----------
    validate
        Check every invariant after each transition (default:
        ``distributed.scheduler.validate``).
    allowed_failures
        How many workers may die running a task before it errs with
        :class:`~distributed.KilledWorker` (default:
        ``distributed.scheduler.allowed-failures``).
    protocol
        The scheme of the scheduler's address (``"tcp"``, ``"tls"``, ``"inproc"``).
    """

    def __init__(
        self, *, validate: bool | None = None, allowed_failures: int | None = None, protocol: str = "tcp"
    ) -> None:
        #: The scheme of the scheduler's own address: a worker restriction given as ``host:port`` gets it.
        self._protocol = protocol
        settings = SchedulingSettings.from_config(validate=validate, allowed_failures=allowed_failures)
        #: The settings read from the config; each is also an attribute of its own (read per task).
        self.settings = settings
        self.validate = settings.validate
        self.allowed_failures = settings.allowed_failures
        self.full_disk_timeout = settings.full_disk_timeout
        #: Since when (``time.time()``) every worker has been paused that way with tasks waiting; None if not so.
        self.full_disks_since: float | None = None
        self.no_workers_timeout = settings.no_workers_timeout
        #: The latest tasks that erred on a worker, newest first (``diagnostics.erred-tasks.max-history``).
        self.erred_tasks: deque[ErredTask] = deque(maxlen=settings.erred_tasks_history)
        #: Since when (``time.time()``) no worker has been running; None while one runs.
        self.no_workers_since: float | None = None
        self.bandwidth = settings.bandwidth
        self.default_data_size = settings.default_data_size
        self.unknown_duration = settings.unknown_duration
        self.default_durations = settings.default_durations
        self.root_latency_budget = settings.root_latency_budget
        self.worker_saturation = settings.worker_saturation

        #: Every task known, by key: sharded once large, so that growing it never stops the event loop for
        #: long (a dict of millions takes a quarter of a second to double; see distributed.sharded).
        self.tasks: MutableMapping[Key, TaskState] = {}
        self.workers: dict[str, WorkerState] = {}
        self.clients: dict[str, ClientState] = {}
        self.task_prefixes: dict[str, TaskPrefix] = {}
        self.task_groups: dict[str, TaskGroup] = {}
        #: Groups whose last task was forgotten in the transitions running now (dropped at their end).
        self._emptied_groups: list[TaskGroup] = []
        self.aliases: dict[Any, str] = {}
        #: The workers by load, to place root tasks without looking at every worker (see loads.py).
        self.worker_loads = WorkerLoads()
        self.total_nthreads = 0
        #: Root tasks waiting for a free thread, most urgent first (entries of tasks gone since are skipped).
        self.queued: PriorityQueue[TaskState] = PriorityQueue()
        self.n_queued = 0
        #: Tasks processing on any worker: the sum of ``len(ws.processing)``, kept so that asking whether
        #: anything runs does not look at every worker.
        self.n_processing = 0
        #: Tasks no current worker can run, with the time they became so (sharded once large, as ``tasks``).
        self.unrunnable: MutableMapping[TaskState, float] = {}
        #: Tasks in memory that have had more than one holder: every task with several holders is here
        #: (the active memory manager's ``ReduceReplicas`` walks it, and drops those back to one holder).
        self.replicated_tasks: set[TaskState] = set()
        #: Tasks a worker held when this scheduler took over from a journal, in memory and not yet
        #: described by the journal's graphs (no run_spec, no dependencies): the graph that names
        #: one gives it those (see ``GraphIngestion._add_tasks``).
        self.held_before_takeover: set[TaskState] = set()
        #: The stand-in client of ``fire_and_forget`` (made when it first asks for a key): it wants a
        #: key only until the key is done, so that nothing it asked for is kept once computed.
        self._fire_and_forget: ClientState | None = None
        #: With a journal: what the transitions decided that a successor must know, in order, for the
        #: journal to keep (see :mod:`distributed.protocol.journal_records`): errors, retries spent, and
        #: the keys ``fire_and_forget`` let go of once done (a successor must not run them again, nor
        #: give the retries back).  None without a journal.
        self.journal_records: list[jr.StateRecord] | None = None
        #: The most bytes of inputs a task may have: the largest worker memory limit, or 0 (no check)
        #: while some worker has no limit or there is none.  Kept up as workers come and go, so that
        #: the check as a task gets ready costs no pass over the workers.
        self._input_cap = 0
        self._largest_memory_limit = 0
        self._unlimited_workers = 0
        self.generation = 0
        self._run_ids = itertools.count(1)
        self.transition_counter = 0
        #: Tasks forgotten since the start (how much work has flowed through the state).
        self.tasks_forgotten = 0
        self.transition_log: deque[tuple[Key, TaskStateName, TaskStateName, str, float]] = deque(
            maxlen=settings.transition_log_length
        )
        self.plugins: dict[str, SchedulerPlugin] = {}
        #: What the cluster worked on, one batch of graphs at a time (see :mod:`distributed.scheduler.computations`).
        self.computation_log = ComputationLog(settings.computations_history)
        #: Told of each graph's new tasks (the spans extension sets it; see :mod:`distributed.scheduler.spans`).
        self.span_observer: Callable[[list[TaskState]], None] | None = None
        self.time_started = time.time()
        self.idle_since: float | None = time.time()
        #: ``hook(address, stimulus_id, out)`` of each extension that acts when a worker leaves.
        self.remove_worker_hooks: list[Callable[[str, str, Effects], None]] = []

        self._transitions_table: dict[
            tuple[TaskStateName, TaskStateName], Callable[[TaskState, Effects, TransitionInputs], PluginKwargs]
        ] = {
            ("released", "waiting"): self._released_to_waiting,
            ("released", "memory"): self._released_to_memory,
            ("released", "forgotten"): self._released_to_forgotten,
            ("released", "erred"): self._to_erred_by_blame,
            ("waiting", "processing"): self._waiting_to_processing,
            ("waiting", "released"): self._waiting_to_released,
            ("waiting", "erred"): self._to_erred_by_blame,
            ("queued", "processing"): self._queued_to_processing,
            ("queued", "waiting"): self._to_waiting_again,
            ("queued", "released"): self._waiting_to_released,
            ("queued", "erred"): self._to_erred_by_blame,
            ("no-worker", "processing"): self._waiting_to_processing,
            ("no-worker", "waiting"): self._to_waiting_again,
            ("no-worker", "released"): self._waiting_to_released,
            ("no-worker", "erred"): self._to_erred_by_blame,
            ("processing", "memory"): self._processing_to_memory,
            ("processing", "released"): self._processing_to_released,
            ("processing", "erred"): self._processing_to_erred_by_blame,
            ("memory", "released"): self._memory_to_released,
            ("memory", "erred"): self._memory_to_erred,
            ("erred", "released"): self._erred_to_released,
        }

    def _transition_hooks(self) -> list[Callable[..., None]]:
        """The ``transition`` methods of the plugins that define their own (the base one does nothing)."""
        base = SchedulerPlugin.transition
        hooks: list[Callable[..., None]] = []
        for plugin in self.plugins.values():
            hook = getattr(plugin, "transition", None)
            if hook is not None and getattr(hook, "__func__", None) is not base:
                hooks.append(hook)
        return hooks

    @property
    def computations(self) -> deque[Computation]:
        """The last computations, newest last (``distributed.diagnostics.computations.max-history``), as dask's."""
        return self.computation_log.computations

    def is_idle(self) -> bool:
        """Whether no task is processing, queued, or waiting for a worker that can run it."""
        return not self.n_queued and not self.unrunnable and not self.n_processing

    def call_plugins(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """Call method ``hook`` of every scheduler plugin with these arguments.

        A plugin whose hook raises is logged and skipped: a faulty plugin never
        stops the scheduler or the other plugins.
        """
        for plugin in list(self.plugins.values()):
            try:
                getattr(plugin, hook)(*args, **kwargs)
            except Exception:
                logger.exception("Plugin hook %s of %r failed", hook, plugin)

    def story(self, *keys_or_tasks: Any) -> list[tuple[Key, TaskStateName, TaskStateName, str, float]]:
        """The transitions of these keys: ``(key, start, finish, stimulus_id, time)``."""
        keys = {k.key if isinstance(k, TaskState) else k for k in keys_or_tasks}
        return [t for t in self.transition_log if t[0] in keys]

    # ======================================================================
    # The transition engine
    # ======================================================================
    def transitions(
        self,
        recommendations: Mapping[TaskState, TaskStateName],
        stimulus_id: str,
        out: Effects | None = None,
        given: TransitionInputs | None = None,
    ) -> Effects:
        """Apply recommendations, and those they produce, until none are left.

        The one entry point of the state machine: every change of a task's
        state happens in a table method called from here, counted, logged
        for :meth:`story`, shown to plugins and (in validation mode) checked.
        Once no recommendation is left, queued root tasks go to the workers
        in ``given.opened`` while they have free slots.

        Parameters
        ----------
        out
            Where to add the messages (default: a new :class:`Effects`).
        given
            What the stimulus tells the transitions (a worker's report, workers
            with free threads; see :class:`TransitionInputs`).

        Returns the messages to send (``out.workers``, ``out.clients``).
        """
        if out is None:
            out = Effects()
        if given is None:
            given = TransitionInputs()
        recs = out.recs
        recs.update(recommendations)
        opened = given.opened
        table = self._transitions_table
        log = self.transition_log
        # Bound once per stimulus, not per transition: only plugins that watch transitions.
        hooks = self._transition_hooks() if self.plugins else None
        validate = self.validate
        touched: list[TaskState] = []
        pull_ws: WorkerState | None = None
        pull_room = 0
        finish: TaskStateName
        while True:
            if recs:
                ts, finish = recs.popitem()
            elif pull_room > 0 and pull_ws is not None:
                # A thread freed up: hand it the next queued root task.
                qts = self._pop_queued()
                if qts is None:
                    pull_room = 0
                    opened.clear()
                    continue
                pull_room -= 1
                ts, finish = qts, "processing"
                given.target = pull_ws
            elif opened:
                pull_ws = opened.pop()
                pull_room = self._queue_room(pull_ws)
                continue
            else:
                break
            start = ts.state
            if start == finish or start == "forgotten":
                continue
            func = table.get((start, finish))
            if func is None:
                if validate or start == "released":
                    raise InvalidTransition(ts.key, start, finish, "not in the transition table")
                # Go through released, then try again.
                func = table[(start, "released")]
                recs[ts] = finish
                finish = "released"
            extra = func(ts, out, given)
            new = ts.state
            if new == start:
                continue  # nothing changed (e.g. still needed, so not forgotten)
            self.transition_counter += 1
            group_states = ts.group.states
            group_states[start] -= 1
            group_states[new] += 1
            log.append((ts.key, start, new, stimulus_id, time.time()))
            if hooks:
                for hook in hooks:
                    try:
                        if extra:
                            hook(ts.key, start, new, stimulus_id=stimulus_id, **extra)
                        else:
                            hook(ts.key, start, new, stimulus_id=stimulus_id)
                    except Exception:
                        logger.exception("Plugin hook transition %r failed", hook)
            if validate:
                touched.append(ts)
        if self._emptied_groups:
            self._drop_emptied_groups()
        for ts in touched:
            self.validate_task(ts)
        return out

    def _drop_emptied_groups(self) -> None:
        # A group per graph (its key names carry a token) would otherwise stay forever.
        emptied, self._emptied_groups = self._emptied_groups, []
        groups = self.task_groups
        for tg in emptied:
            if not tg.live and groups.get(tg.name) is tg:
                del groups[tg.name]
                tg.prefix.retire(tg)

    # -- the transition methods ------------------------------------------------
    def _released_to_waiting(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        if not ts.has_run_spec:
            if ts in self.held_before_takeover:
                # Held by a worker that left during a takeover, before the journal's graph described the
                # task: it stays released until that graph gives it its run_spec (and runs it).
                ts.state = "released"
                return
            # Scattered data that was lost: nothing can bring it back.
            ts.state = "released"
            exc = LostDataError(f"Data for {ts.key!r} was lost with its workers and cannot be recomputed")
            self._set_error(ts, as_serialized(exc), None, str(exc))
            out.recs[ts] = "erred"
            return
        ts.state = "waiting"
        erred: TaskState | None = None
        for dts in ts.dependencies:
            dts.waiters = grown(dts.waiters, ts)
            state = dts.state
            if state == "memory":
                continue
            ts.waiting_on = grown(ts.waiting_on, dts)
            if state == "released":
                out.recs.setdefault(dts, "waiting")
            elif state == "erred":
                erred = dts
        if erred is not None:
            ts.exception_blame = erred.exception_blame
            out.recs[ts] = "erred"
        elif not ts.waiting_on:
            out.recs[ts] = "processing"

    def _is_queueable(self, ts: TaskState) -> bool:
        # Actors are not queued: each goes where the fewest actors live (decide_worker).
        if ts.dependencies or self.worker_saturation == math.inf:
            return False
        extras = ts.extras  # one read: most tasks share NO_EXTRAS
        return extras is NO_EXTRAS or not (
            extras.worker_restrictions or extras.host_restrictions or extras.resource_restrictions or extras.actor
        )

    def _slots(self, ws: WorkerState, duration: float) -> int:
        """Root tasks ``ws`` may take now, for tasks expected to run ``duration`` s.

        ``worker-saturation`` bounds root tasks per thread so that their
        outputs do not pile up in memory.  Tasks measured to finish in well
        under the latency budget cannot produce much each, and with one or two
        per thread a worker would spend most of its time waiting for the next
        one: they get enough extra slots to cover the budget.
        """
        base = max(math.ceil(self.worker_saturation * ws.nthreads), 1)
        if 0 <= duration < self.root_latency_budget:
            base += min(int(ws.nthreads * self.root_latency_budget / max(duration, 1e-5)), 1000 * ws.nthreads)
        return base - len(ws.processing) + len(ws.long_running)

    def _worker_with_room(self, duration: float) -> tuple[WorkerState | None, int]:
        """The running worker with the most room for root tasks of ``duration`` s (None if none has any), and its room.

        Room depends only on a worker's thread count and load, so the least
        loaded worker of each thread count is the only one to weigh: O(thread
        counts), not O(workers).
        """
        best: WorkerState | None = None
        best_room = 0
        for ws in self.worker_loads.least_loaded():
            room = self._slots(ws, duration)
            if room > best_room:
                best, best_room = ws, room
        return best, best_room

    def _worker_for_root(self, duration: float, given: TransitionInputs) -> WorkerState | None:
        """The worker for a root task of ``duration`` s: one with room, continuing the current run if any.

        Short tasks (those given extra slots by the latency budget) go to a
        worker in runs of up to :data:`ROOT_RUN`, which reach it in one
        message: spread one by one over thousands of workers, each task cost
        a write to one worker and a read of its answer (1,000 workers: one of
        each per task, against one per 100 tasks with 10).  A run's tasks
        finish within the budget, as the extra slots are sized for it.
        """
        ws = given.run_worker
        if (
            ws is not None
            and given.run_left > 0
            and given.run_duration == duration
            and ws.status == Status.running
            and self.workers.get(ws.address) is ws
        ):
            given.run_left -= 1
            return ws
        ws, room = self._worker_with_room(duration)
        if ws is not None and 0 <= duration < self.root_latency_budget:
            given.run_worker = ws
            given.run_duration = duration
            given.run_left = min(ROOT_RUN, room) - 1
        else:
            given.run_worker = None
        return ws

    def _unqueue(self, ts: TaskState) -> None:
        """Take a queued or no-worker task off the count or set that tracks it, before it leaves that state."""
        if ts.state == "no-worker":
            self.unrunnable.pop(ts, None)
        elif ts.state == "queued":
            self._left_queue()

    def _left_queue(self) -> None:
        """A queued task left the queue's count, not the queue: its entry is skipped when popped.

        Entries of tasks released while queued (a computation cancelled before
        it ran) would keep those tasks alive, forgotten, until popped: with no
        worker to pop them, for good.  Once the queue holds more such entries
        than live ones, it drops them, in a pass that costs as much as the
        entries it drops.
        """
        self.n_queued -= 1
        queue = self.queued
        if len(queue) > 2 * self.n_queued + STALE_QUEUE_SLACK:
            queue.keep(_still_queued)

    def _waiting_to_processing(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        cap = self._input_cap
        if cap and ts.dependencies:
            total = 0
            for dts in ts.dependencies:
                total += dts.nbytes
            if total > cap:
                self._refuse_inputs(ts, total, cap, out)
                return
        # _unqueue, inlined: every task passes here.
        start = ts.state
        if start == "no-worker":
            self.unrunnable.pop(ts, None)
        elif start == "queued":
            self._left_queue()
        placements = given.placements
        if placements is not None:
            ws = placements.pop(ts, None)
            if ws is not None and ws.status == Status.running and self.workers.get(ws.address) is ws:
                self._add_to_processing(ts, ws, out)
                return
        if self._is_queueable(ts):
            duration = ts.group.prefix.duration_average
            ws = None if given.no_room_for == duration else self._worker_for_root(duration, given)
            if ws is None:
                given.no_room_for = duration
                ts.state = "queued"
                self.n_queued += 1
                self.queued.push(ts)
                return
        else:
            ws = self.decide_worker(ts)
            if ws is None:
                ts.state = "no-worker"
                unrunnable = self.unrunnable
                unrunnable[ts] = time.time()
                if type(unrunnable) is dict and len(unrunnable) > SHARD_ABOVE:
                    self.unrunnable = ShardedDict(unrunnable)
                return
        self._add_to_processing(ts, ws, out)

    def _refuse_inputs(self, ts: TaskState, total: int, cap: int, out: Effects) -> None:
        """Err ``ts``, whose inputs alone are more than any worker may hold: running it would only kill workers.

        The task stays where it is and is recommended to erred, so that the
        erred transition (and plugins, and the story) see the change.
        """
        exc = MemoryError(
            f"Task {ts.key!r} has {format_bytes(total)} worth of input dependencies, "
            f"but the largest memory_limit of any worker is {format_bytes(cap)}"
        )
        logger.error("%s", exc)
        self._set_error(ts, as_serialized(exc), None, str(exc))
        out.recs[ts] = "erred"

    def _track_memory_limit(self, ws: WorkerState, joined: bool) -> None:
        """Keep the input cap (see ``_input_cap``) as ``ws`` joins or leaves."""
        limit = ws.memory_limit
        if not limit:
            self._unlimited_workers += 1 if joined else -1
        elif joined:
            self._largest_memory_limit = max(self._largest_memory_limit, limit)
        elif limit >= self._largest_memory_limit:
            # The largest may have left: look again (a worker leaving is rare next to tasks).
            self._largest_memory_limit = max((w.memory_limit for w in self.workers.values()), default=0)
        self._input_cap = 0 if self._unlimited_workers else self._largest_memory_limit

    def _queued_to_processing(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        ws = given.target
        given.target = None
        if ws is None:
            # Recommended without a worker in mind: look for room anywhere.
            self._waiting_to_processing(ts, out, given)
            return
        self.n_queued -= 1
        self._add_to_processing(ts, ws, out)

    def _to_waiting_again(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        """A queued or no-worker task whose dependency must be computed again."""
        self._unqueue(ts)
        ts.state = "waiting"
        if not ts.waiting_on:
            out.recs[ts] = "processing"

    def _add_to_processing(self, ts: TaskState, ws: WorkerState, out: Effects) -> None:
        ts.state = "processing"
        ts.processing_on = ws
        ts.waiting_on = EMPTY
        duration = self.get_task_duration(ts)
        if ts not in ws.processing:
            self.n_processing += 1
        ws.processing[ts] = duration
        ws.occupancy += duration
        self.worker_loads.update(ws)
        self.idle_since = None
        extras = ts.extras
        resources = extras.resource_restrictions
        if resources:
            for r, amount in resources.items():
                ws.used_resources[r] = ws.used_resources.get(r, 0.0) + amount
        ts.run_id = next(self._run_ids)
        freed = out.free.get(ws.address)
        if freed and ts.key in freed:
            # Released and assigned again in one go: the worker must not drop it.
            freed.remove(ts.key)
        who_has: dict[Key, list[str]] = {}
        nbytes: dict[Key, int] = {}
        for dts in ts.dependencies:
            who_has[dts.key] = [w.address for w in dts.who_has]
            nbytes[dts.key] = dts.nbytes
        msg = m.ComputeTask(
            op="compute-task",
            key=ts.key,
            run_id=ts.run_id,
            run_spec=ts.run_spec,
            priority=ts.priority,
            who_has=who_has,
            nbytes=nbytes,
            duration=duration,
        )
        if resources:
            msg["resources"] = resources
        if ts.annotations:
            msg["annotations"] = ts.annotations
        if extras.actor:
            msg["actor"] = True
        out.workers[ws.address].append(msg)

    def get_task_duration(self, ts: TaskState) -> float:
        """Expected run time of ``ts`` in seconds, from its prefix's history."""
        prefix = ts.group.prefix
        d = prefix.duration_average
        if d >= 0:
            return d
        return self.default_durations.get(prefix.name, self.unknown_duration)

    def _exit_processing(self, ts: TaskState, out: Effects, given: TransitionInputs) -> WorkerState | None:
        """Take ``ts`` off its worker; give the freed slot to a queued task."""
        ws = ts.processing_on
        if ws is None:
            return None
        given.no_room_for = None
        ts.processing_on = None
        duration = ws.processing.pop(ts, None)
        if duration is None:
            duration = 0.0
        else:
            self.n_processing -= 1
        ws.occupancy = max(ws.occupancy - duration, 0.0) if ws.processing else 0.0
        ws.long_running.discard(ts)
        self.worker_loads.update(ws)
        resources = ts.extras.resource_restrictions
        if resources:
            for r, amount in resources.items():
                ws.used_resources[r] = ws.used_resources.get(r, 0.0) - amount
        if self.n_queued:
            given.opened.append(ws)
        if resources and self.unrunnable:
            for uts in list(self.unrunnable):
                if uts.resource_restrictions:
                    out.recs.setdefault(uts, "processing")
        return ws

    def _queue_room(self, ws: WorkerState) -> int:
        """How many queued root tasks ``ws`` may take now."""
        head = self.queued.peek() if self.n_queued else None
        if head is None or ws.status != Status.running or ws.address not in self.workers:
            return 0
        return self._slots(ws, head.group.prefix.duration_average)

    def _pop_queued(self) -> TaskState | None:
        """The most urgent queued task, off the queue (None if there is none)."""
        queue = self.queued
        while queue:
            qts = queue.pop()
            if qts.state == "queued":
                return qts
            # Released (or pulled) since it was queued: a stale entry.
        return None

    def decide_worker(self, ts: TaskState) -> WorkerState | None:
        """The worker where ``ts`` should start soonest, or None if none can run it.

        Start time is estimated as the worker's queued work per thread plus the
        time to fetch the dependencies it lacks.  A task with no dependencies
        and no restrictions, among more than :data:`SCAN_WORKERS` workers, goes
        to the least loaded per thread instead (tasks per thread, then queued
        work per thread), found without a pass over the workers.
        """
        valid = self._valid_workers(ts)
        if valid is not None and not valid:
            return None
        if not self.workers:
            return None
        if ts.extras.actor:
            return self._decide_actor_worker(valid)
        candidates: Iterable[WorkerState]
        if ts.dependencies:
            holders: set[WorkerState] = set()
            for dts in ts.dependencies:
                holders.update(dts.who_has)
            if valid is not None:
                holders &= valid
            candidates = holders or (valid if valid is not None else self.workers.values())
        elif valid is None and len(self.workers) > SCAN_WORKERS:
            # Nothing to fetch and anywhere allowed: the least loaded per thread, without a pass over the workers.
            return min(self.worker_loads.least_loaded(), key=_load_per_thread, default=None)
        else:
            candidates = valid if valid is not None else self.workers.values()
        bandwidth = self.bandwidth
        unknown_size = self.default_data_size
        best: WorkerState | None = None
        best_cost = math.inf
        deps = ts.dependencies
        for ws in candidates:
            if ws.status != Status.running:
                continue
            cost = ws.occupancy / ws.nthreads
            if deps:
                missing = 0
                for dts in deps:
                    if ws not in dts.who_has:
                        missing += dts.nbytes if dts.nbytes > 0 else unknown_size
                cost += missing / bandwidth
            cost += len(ws.processing) * 1e-9  # tie-break: fewer tasks
            if cost < best_cost:
                best, best_cost = ws, cost
        if best is None and valid is None:
            for ws in self.workers.values():
                if ws.status == Status.running:
                    return ws
        return best

    def _decide_actor_worker(self, valid: set[WorkerState] | None) -> WorkerState | None:
        """Where a new actor goes: the running worker with the fewest actors, then the least work."""
        best: WorkerState | None = None
        best_cost: tuple[float, float] = (math.inf, math.inf)
        for ws in valid if valid is not None else self.workers.values():
            if ws.status != Status.running:
                continue
            cost = (len(ws.actors) + sum(1 for pts in ws.processing if pts.actor), ws.occupancy / ws.nthreads)
            if cost < best_cost:
                best, best_cost = ws, cost
        return best

    def valid_workers(self, ts: TaskState) -> set[WorkerState] | None:
        """Workers allowed to run ``ts`` now (restrictions, free resources), or None for all of them."""
        return self._valid_workers(ts)

    def _valid_workers(self, ts: TaskState) -> set[WorkerState] | None:
        """Workers allowed to run ``ts``, or None for all of them."""
        if not ts.has_restrictions:
            return None
        result: set[WorkerState] | None = None
        if ts.worker_restrictions or ts.host_restrictions:
            allowed: set[WorkerState] = set()
            for w in ts.worker_restrictions or ():
                ws = (self.workers.get(w) if isinstance(w, str) else None) or self.worker_by_name(w)
                if ws is not None:
                    allowed.add(ws)
            for h in ts.host_restrictions or ():
                allowed.update(ws for ws in self.workers.values() if ws.host == h)
            result = allowed
        if ts.resource_restrictions:
            ok = {
                ws
                for ws in self.workers.values()
                if all(
                    ws.resources.get(r, 0.0) - ws.used_resources.get(r, 0.0) >= amount
                    for r, amount in ts.resource_restrictions.items()
                )
            }
            result = ok if result is None else result & ok
        if result is not None and not result and ts.loose_restrictions:
            return None
        return result

    def worker_by_name(self, name: Any) -> WorkerState | None:
        """The worker called ``name`` (its ``Worker(name=...)``), or None.

        A name that is not a string also matches its ``str()`` (``"0"`` finds
        the worker LocalCluster names ``0``), since names given as strings on
        the command line or in JSON lose their type.
        """
        addr = self.aliases.get(name)
        if addr is not None:
            return self.workers.get(addr)
        if isinstance(name, str):
            # A name that is not a string may arrive as one (``workers=["0"]``
            # for the worker LocalCluster names 0).
            for ws in self.workers.values():
                if not isinstance(ws.name, str) and str(ws.name) == name:
                    return ws
        return None

    def _notify_in_memory(self, ts: TaskState, out: Effects) -> None:
        recs = out.recs
        for dts in ts.dependents:
            dts.waiting_on = without(dts.waiting_on, ts)
            if dts.state == "waiting" and not dts.waiting_on:
                recs[dts] = "processing"
        for dts in ts.dependencies:
            dts.waiters = without(dts.waiters, ts)
            if not dts.waiters and not dts.who_wants and dts.state == "memory":
                recs[dts] = "released"
        if ts.who_wants and self._fire_and_forget is not None:
            self._done_for_fire_and_forget(ts)
        if ts.who_wants:
            workers = [ws.address for ws in ts.who_has]
            msg = m.KeyInMemory(op="key-in-memory", key=ts.key, workers=workers, type=ts.type)
            for cs in ts.who_wants:
                out.clients[cs.client_key].append(msg)
        elif not ts.waiters:
            recs[ts] = "released"

    def _processing_to_memory(self, ts: TaskState, out: Effects, given: TransitionInputs) -> PluginKwargs:
        finished = given.finished
        if finished is None:
            raise InvalidTransition(ts.key, ts.state, "memory", "only when its worker reports it finished")
        given.finished = None
        nbytes = finished["nbytes"]
        type_ = finished["type"]
        ws = self._exit_processing(ts, out, given)
        assert ws is not None
        ts.state = "memory"
        ts.nbytes = nbytes
        ts.type = type_
        extras = ts.extras
        if extras is not NO_EXTRAS:
            extras.exception_blame = None
            if extras.actor:
                ws.actors.add(ts)
        ts.who_has = grown(ts.who_has, ws)
        hold(ws, ts)
        ws.nbytes += nbytes
        ts.group.nbytes_total += nbytes
        self._notify_in_memory(ts, out)
        if self.plugins:
            return {
                "worker": ws.address,
                "nbytes": nbytes,
                "type": type_,
                "typename": type_,
                "startstops": _startstops(finished),
            }
        return None

    def _released_to_memory(self, ts: TaskState, out: Effects, given: TransitionInputs) -> PluginKwargs:
        scattered = given.scattered
        if scattered is None:
            raise InvalidTransition(ts.key, ts.state, "memory", "only when it was scattered")
        given.scattered = None
        holders, nbytes, type_ = scattered
        ts.state = "memory"
        ts.nbytes = nbytes
        ts.type = type_
        for ws in holders:
            ts.who_has = grown(ts.who_has, ws)
            hold(ws, ts)
            ws.nbytes += nbytes
        self.note_replicas(ts)
        if ts.rank is None:
            ts.rank = rank_of(0, self.generation, 0)
        self._notify_in_memory(ts, out)
        if self.plugins:
            return {"workers": [ws.address for ws in holders], "nbytes": nbytes, "type": type_}
        return None

    def _after_release(self, ts: TaskState, out: Effects) -> None:
        """A released task that is still needed waits again; an unneeded one is forgotten."""
        if ts.who_wants or ts.waiters:
            out.recs.setdefault(ts, "waiting")
        elif not ts.dependents:
            out.recs.setdefault(ts, "forgotten")

    def _release_dependencies(self, ts: TaskState, out: Effects) -> None:
        for dts in ts.dependencies:
            dts.waiters = without(dts.waiters, ts)
            if (
                not dts.waiters
                and not dts.who_wants
                and dts.state in ("memory", "erred", "waiting", "queued", "no-worker", "processing")
            ):
                out.recs.setdefault(dts, "released")

    def _waiting_to_released(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        self._unqueue(ts)
        ts.state = "released"
        ts.waiting_on = EMPTY
        if not (ts.who_wants or ts.waiters):
            self._release_dependencies(ts, out)
        self._after_release(ts, out)

    def _processing_to_released(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        ws = self._exit_processing(ts, out, given)
        if ws is not None and ws.address in self.workers:
            out.free[ws.address].append(ts.key)
        ts.state = "released"
        ts.waiting_on = EMPTY
        if not (ts.who_wants or ts.waiters):
            self._release_dependencies(ts, out)
        self._after_release(ts, out)

    def _memory_to_released(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        # A key still wanted leaves memory only when its data was lost: its
        # clients wait again (it is recomputed, or errs if it cannot be).
        for cs in ts.who_wants:
            out.clients[cs.client_key].append(m.LostData(op="lost-data", key=ts.key))
        self._drop_holders(ts, out)
        ts.state = "released"
        for dts in ts.dependents:
            if dts.state in ("waiting", "queued", "no-worker"):
                dts.waiting_on = grown(dts.waiting_on, ts)
                if dts.state != "waiting":
                    out.recs[dts] = "waiting"
            elif dts.state == "processing":
                # Its worker may not be able to fetch this key any more.
                out.recs[dts] = "released"
        self._after_release(ts, out)

    def _drop_holders(self, ts: TaskState, out: Effects) -> None:
        """Forget every copy of ``ts``; the workers still here are told to drop theirs."""
        for ws in ts.who_has:
            del ws.has_what[ts]
            ws.nbytes -= max(ts.nbytes, 0)
            if ts.actor:
                ws.actors.discard(ts)
            if ws.address in self.workers:
                out.free[ws.address].append(ts.key)
        ts.who_has = EMPTY
        self.replicated_tasks.discard(ts)

    def _memory_to_erred(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        """An actor whose worker left: its state cannot be recomputed, so its key errs (error set before)."""
        self._drop_holders(ts, out)
        if ts.exception_blame is None:
            ts.exception_blame = ts
        self._mark_erred(ts, out)

    def _erred_to_released(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        ts.state = "released"
        ts.exception = None
        ts.traceback = None
        ts.exception_text = ""
        ts.exception_blame = None
        for dts in ts.dependents:
            if dts.state == "erred":
                out.recs.setdefault(dts, "released")
        self._after_release(ts, out)

    def _released_to_forgotten(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        if ts.who_wants or ts.dependents:
            # Still needed after all: keep it released.
            return
        ts.state = "forgotten"
        for dts in ts.dependencies:
            dts.dependents = without(dts.dependents, ts)
            dts.waiters = without(dts.waiters, ts)
            if not dts.who_wants and not dts.dependents:
                if dts.state == "released":
                    out.recs.setdefault(dts, "forgotten")
                elif dts.state != "forgotten" and not dts.waiters:
                    out.recs.setdefault(dts, "released")
            elif not dts.waiters and not dts.who_wants and dts.state == "memory":
                out.recs.setdefault(dts, "released")
        ts.dependencies = EMPTY
        ts.forget_alone()  # nothing refers to it now; it refers to the task: a cycle the collector would wait on
        del self.tasks[ts.key]
        self.tasks_forgotten += 1
        tg = ts.group
        tg.live -= 1
        if not tg.live:
            self._emptied_groups.append(tg)

    def _done_for_fire_and_forget(self, ts: TaskState) -> None:
        """``ts`` is done (in memory or erred): ``fire_and_forget`` wants it no more.

        Called by the transitions into memory and erred, which then release
        it if nothing else wants it.
        """
        ff = self._fire_and_forget
        if ff is not None and ff in ts.who_wants:
            ts.who_wants = without(ts.who_wants, ff)
            ff.wants_what.discard(ts)
            if self.journal_records is not None:
                self.journal_records.append(done_for_fire_and_forget(ts.key))

    def _set_error(self, ts: TaskState, exception: Payload, traceback: Any, text: str) -> None:
        """``ts`` erred on its own, with this error (kept for the journal, if there is one)."""
        self._put_error(ts, exception, traceback, text)
        if self.journal_records is not None:
            self.journal_records.append(
                jr.TaskErredRecord(op="erred-before", key=ts.key, exception=exception, traceback=traceback, text=text)
            )

    def _put_error(self, ts: TaskState, exception: Payload, traceback: Any, text: str) -> None:
        ts.exception = exception
        ts.traceback = traceback
        ts.exception_text = text
        ts.exception_blame = ts

    def _mark_erred(self, ts: TaskState, out: Effects) -> None:
        ts.state = "erred"
        ts.waiting_on = EMPTY
        blame = ts.exception_blame or ts
        for dts in ts.dependents:
            if dts.state in ("waiting", "queued", "no-worker", "released", "processing"):
                dts.exception_blame = blame
                out.recs[dts] = "erred"
        for dts in ts.dependencies:
            dts.waiters = without(dts.waiters, ts)
            if not dts.waiters and not dts.who_wants and dts.state == "memory":
                out.recs.setdefault(dts, "released")
        if ts.who_wants and self._fire_and_forget is not None:
            self._done_for_fire_and_forget(ts)
            if not ts.who_wants and not ts.dependents:
                # Only fire_and_forget wanted it, and no dependent's error points here: let it go.
                out.recs[ts] = "released"
        if ts.who_wants:
            msg = self._task_erred(ts)
            if msg is not None:
                for cs in ts.who_wants:
                    out.clients[cs.client_key].append(msg)

    def _to_erred_by_blame(self, ts: TaskState, out: Effects, given: TransitionInputs) -> None:
        self._unqueue(ts)
        if ts.exception_blame is None:
            ts.exception_blame = ts
        self._mark_erred(ts, out)

    def _processing_to_erred_by_blame(self, ts: TaskState, out: Effects, given: TransitionInputs) -> PluginKwargs:
        ws = self._exit_processing(ts, out, given)
        if ws is not None and ws.address in self.workers:
            out.free[ws.address].append(ts.key)
        if ts.exception_blame is None:
            ts.exception_blame = ts
        self._mark_erred(ts, out)
        if not self.plugins:
            return None
        erred = given.erred
        given.erred = None
        extra: dict[str, Any] = {"worker": ws.address if ws is not None else None}
        if erred is not None and erred["key"] == ts.key:
            extra["startstops"] = _startstops(erred)
            extra["text"] = erred["text"]
        return extra

    # ======================================================================
    # Stimuli (pure: they change state and return what to send)
    # ======================================================================
    def _get_group(self, key: Key) -> TaskGroup:
        if isinstance(key, tuple) and key and isinstance(key[0], str):
            group_name = key[0]
        elif type(key) is str:
            group_name = _key_name(key)
        else:
            group_name = key_split_uncached(key)
        tg = self.task_groups.get(group_name)
        if tg is None:
            name = key_split_uncached(key)
            tp = self.task_prefixes.get(name)
            if tp is None:
                tp = self.task_prefixes[name] = TaskPrefix(name)
            tg = self.task_groups[group_name] = TaskGroup(group_name, tp)
        return tg

    def new_task(self, key: Key, run_spec: Payload | None) -> TaskState:
        """Create the record of a new task (its run_spec kept compact once the scheduler holds many)."""
        tasks = self.tasks
        ts = TaskState(key, run_spec, self._get_group(key), type(tasks) is not dict)
        tasks[key] = ts
        if type(tasks) is dict and len(tasks) > SHARD_ABOVE:
            self.tasks = ShardedDict(tasks)
        return ts

    @staticmethod
    def _key_in_memory(ts: TaskState) -> m.KeyInMemory:
        return m.KeyInMemory(op="key-in-memory", key=ts.key, workers=[ws.address for ws in ts.who_has], type=ts.type)

    def _report_erred(self, ts: TaskState, cs: ClientState, out: Effects) -> None:
        msg = self._task_erred(ts)
        if msg is not None:
            out.clients[cs.client_key].append(msg)

    @staticmethod
    def _task_erred(ts: TaskState) -> m.ClientTaskErred | None:
        """What clients learn of erred ``ts``: the error of the task to blame (None when it has none)."""
        blame = ts.exception_blame or ts
        if blame.exception is None:
            return None
        msg = m.ClientTaskErred(
            op="task-erred", key=ts.key, exception=blame.exception, traceback=blame.traceback, text=blame.exception_text
        )
        if blame.erred_on:
            msg["where"] = f"Raised in task {blame.key!r} on worker {', '.join(sorted(blame.erred_on))}"
        return msg

    def _runs_on(self, ts: TaskState, address: str, run_id: int) -> bool:
        ws = ts.processing_on
        return ts.state == "processing" and ws is not None and ws.address == address and ts.run_id == run_id

    def note_replicas(self, ts: TaskState) -> None:
        """Keep :attr:`replicated_tasks` up after ``ts`` gained holders."""
        if len(ts.who_has) > 1:
            self.replicated_tasks.add(ts)

    # ======================================================================
    # Validation
    # ======================================================================
    def validate_task(self, ts: TaskState) -> None:
        """Check the invariants of one task (raises AssertionError)."""
        state = ts.state
        assert state in ALL_TASK_STATES, (ts, state)
        if state == "forgotten":
            assert ts.key not in self.tasks or self.tasks[ts.key] is not ts, ts
            return
        assert self.tasks.get(ts.key) is ts, ("task not in scheduler.tasks", ts)
        for dts in ts.dependencies:
            assert ts in dts.dependents, ("dependency link", ts, dts)
        for dts in ts.dependents:
            assert ts in dts.dependencies, ("dependent link", ts, dts)
        for cs in ts.who_wants:
            assert ts in cs.wants_what, ("who_wants link", ts, cs)
        if state == "memory":
            assert ts.who_has, ("memory without who_has", ts)
            for ws in ts.who_has:
                assert ts in ws.has_what, ("who_has link", ts, ws)
        else:
            assert not ts.who_has, ("who_has outside memory", ts, ts.who_has)
        if state == "processing":
            proc = ts.processing_on
            assert proc is not None and ts in proc.processing, ("processing link", ts)
            assert proc.address in self.workers, ("processing on a removed worker", ts)
            for dts in ts.dependencies:
                assert dts.state == "memory", ("processing with a dependency not in memory", ts, dts)
        else:
            assert ts.processing_on is None, ("processing_on outside processing", ts)
        if state == "waiting":
            assert ts.waiting_on, ("waiting on nothing", ts)
            for dts in ts.waiting_on:
                assert dts.state != "memory", ("waiting on a task in memory", ts, dts)
                assert ts in dts.waiters, ("waiters link", ts, dts)
        if state == "no-worker":
            assert ts in self.unrunnable, ("no-worker not in unrunnable", ts)
        if state == "erred":
            assert ts.exception_blame is not None, ("erred without blame", ts)
        if state in ("waiting", "queued", "no-worker", "processing", "memory"):
            assert ts.rank is not None, ("a task on its way without a priority", ts)
        if ts.actor and state == "memory":
            # Other holders keep copies of the proxy; the instance lives on one of them.
            homes = [ws for ws in ts.who_has if ts in ws.actors]
            assert len(homes) == 1, ("an actor must live on one of its holders", ts, ts.who_has)

    def validate_state(self) -> None:
        """Check every invariant of the whole state (raises AssertionError)."""
        for ts in self.tasks.values():
            self.validate_task(ts)
        for ws in self.workers.values():
            for ts in ws.has_what:
                assert ws in ts.who_has, ("has_what link", ws, ts)
            for ts in ws.processing:
                assert ts.processing_on is ws, ("processing link", ws, ts)
        for cs in self.clients.values():
            for ts in cs.wants_what:
                assert cs in ts.who_wants, ("wants_what link", cs, ts)
        assert self.total_nthreads == sum(ws.nthreads for ws in self.workers.values())
        self.worker_loads.validate(self.workers.values())
        assert self.n_processing == sum(len(ws.processing) for ws in self.workers.values()), "processing count"
        assert self.n_queued == sum(1 for ts in self.tasks.values() if ts.state == "queued"), "queued count"
        assert set(self.unrunnable) == {ts for ts in self.tasks.values() if ts.state == "no-worker"}, "unrunnable set"
        for ts in self.tasks.values():
            assert len(ts.who_has) < 2 or ts in self.replicated_tasks, ("replicated task not tracked", ts)
        for ts in self.replicated_tasks:
            assert ts.state == "memory" and self.tasks.get(ts.key) is ts, ("replicated_tasks holds a task gone", ts)
        limits = [ws.memory_limit for ws in self.workers.values()]
        assert self._input_cap == (0 if not limits or 0 in limits else max(limits)), "input cap"
        ff = self._fire_and_forget
        if ff is not None:
            for ts in ff.wants_what:
                assert ts.state not in ("memory", "erred"), ("fire_and_forget still wants a task done", ts)

    def on_worker_joined(self, ws: WorkerState) -> None:
        """Called as ``ws`` joins the state (the server wakes those waiting for workers)."""

    def on_worker_left(self, address: str) -> None:
        """Called as the worker at ``address`` leaves the state (the server drops its connections to it)."""


def done_for_fire_and_forget(key: Key) -> m.ClientKeys:
    """The journal's record that ``fire_and_forget`` let go of ``key`` once done."""
    return m.ClientKeys(op="client-releases-keys", client=m.FIRE_AND_FORGET, keys=[key])
