"""The active memory manager: policies that say which replicas to make and which to drop.

Every ``interval`` (``distributed.scheduler.active-memory-manager.interval``,
2 s) the manager asks each of its policies what it wants.  A policy's
:meth:`~ActiveMemoryManagerPolicy.run` is a generator of suggestions: ``("drop",
ts, candidates)`` asks that one replica of ``ts`` go, ``("replicate", ts,
candidates)`` that one more be made, each on one of ``candidates`` (any
suitable worker when None).  The manager picks the worker and sends it back
into the generator (None when no worker fits), so that a policy may suggest
again knowing what it got.  Once all policies ran, the manager enacts the whole
plan at once:

* a replica to make goes to the running worker using the least memory (by
  ``distributed.scheduler.active-memory-manager.measure``, the same measures as
  ``rebalance``) that does not hold the key yet; the worker fetches it from the
  holders (``acquire-replicas``), and reports it once it has it;
* a replica to drop goes from the holder using the most memory, never the last
  one, never one a task processing on that worker needs, never an actor's home.

Several suggestions for the same key in one pass take different workers; the
memory of each worker is counted as if the plan so far had been carried out,
so successive suggestions spread.  The plan is derived anew each pass from the
scheduler's state, and a suggestion that no longer fits (the key was released,
the worker left) is skipped, so nothing is kept between passes.

:class:`ReduceReplicas` (the default policy) drops the replicas no task needs:
a key keeps one holder, or one per worker that runs a task waiting for it.
:class:`RetireWorker` moves the keys only one worker holds elsewhere, so that
the worker can go without losing data.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

import dask.config

from distributed.comm import CommClosedError
from distributed.config import get_interval
from distributed.core import PeriodicCallback, Route, Status
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler.rebalance import MEASURES, Measure, measure
from distributed.scheduler.records import TaskState, WorkerState
from distributed.utils import import_term

if TYPE_CHECKING:
    from distributed.comm import Comm
    from distributed.scheduler import Scheduler

__all__ = [
    "ActiveMemoryManagerExtension",
    "ActiveMemoryManagerPolicy",
    "ReduceReplicas",
    "RetireWorker",
    "Suggestion",
]

logger = logging.getLogger("distributed.active_memory_manager")


class Suggestion(NamedTuple):
    """What a policy yields: make (``"replicate"``) or drop one replica of ``ts``, on one of ``candidates``."""

    op: Literal["replicate", "drop"]
    ts: TaskState
    candidates: set[WorkerState] | None = None


#: What a policy's ``run`` is: it yields suggestions and is sent the worker chosen (or None).
PolicyRun = Generator[Suggestion | tuple[Any, ...], WorkerState | None, None]


class ActiveMemoryManagerPolicy:
    """A policy of the active memory manager; subclasses define :meth:`run`.

    ``manager`` is set when the policy is added to a manager
    (:meth:`ActiveMemoryManagerExtension.add_policy`); the scheduler is
    ``self.manager.scheduler``.
    """

    manager: ActiveMemoryManagerExtension

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def run(self) -> PolicyRun:
        """Yield suggestions (:class:`Suggestion` or ``(op, ts[, candidates])``); receive the worker chosen."""
        raise NotImplementedError(f"{type(self).__name__} must define run()")


class ActiveMemoryManagerExtension:
    """The scheduler's active memory manager (``scheduler.extensions["amm"]``).

    Parameters
    ----------
    scheduler
        The scheduler whose replicas it manages.
    policies
        The policies to run; default: those of
        ``distributed.scheduler.active-memory-manager.policies`` (each a mapping
        with ``class``, a dotted name, and the class's keyword arguments).
    register
        Put the manager in ``scheduler.extensions["amm"]`` and answer the
        ``amm_*`` requests (what :attr:`Client.amm` calls).
    start
        Run every ``interval`` from when the scheduler starts; default:
        ``distributed.scheduler.active-memory-manager.start``.
    interval
        Seconds between runs; default: ``...active-memory-manager.interval``.
    measure
        How a worker's memory is measured (``optimistic``, ``process``,
        ``managed``, ``managed_total``); default: ``...active-memory-manager.measure``.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        policies: Iterable[ActiveMemoryManagerPolicy] | None = None,
        *,
        register: bool = True,
        start: bool | None = None,
        interval: float | None = None,
        measure: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.policies: set[ActiveMemoryManagerPolicy] = set()
        if policies is None:
            policies = _policies_from_config(dask.config.get("distributed.scheduler.active-memory-manager.policies"))
        for policy in policies:
            self.add_policy(policy)
        key = "distributed.scheduler.active-memory-manager.measure"
        how = dask.config.get(key) if measure is None else measure
        if how not in MEASURES:
            raise ValueError(f"{key} must be one of {list(MEASURES)}, got {how!r}")
        self.measure: Measure = cast(Measure, how)
        key = "distributed.scheduler.active-memory-manager.interval"
        self.interval = get_interval(key) if interval is None else float(interval)
        if self.interval <= 0:
            raise ValueError(f"{key} must be positive, got {self.interval}")
        #: The plan of the pass running: per task, the workers to get a replica and those to drop one.
        self.pending: dict[TaskState, tuple[set[WorkerState], set[WorkerState]]] = {}
        #: Each worker's memory as if the plan so far were carried out (during a pass).
        self.workers_memory: dict[WorkerState, int] = {}
        self._callback: PeriodicCallback | None = None
        if start is None:
            start = bool(dask.config.get("distributed.scheduler.active-memory-manager.start"))
        self._start_with_scheduler = start
        if register:
            scheduler.extensions["amm"] = self
        if scheduler.status == Status.running:
            # Made for a scheduler already up: as the scheduler's extensions are made with it, their
            # routes are registered then (and on_start starts them once it listens).
            if register:
                scheduler.handlers.update(self.routes())
            if self._start_with_scheduler:
                self.start()

    # -- the extension's face ---------------------------------------------------------
    def routes(self) -> dict[str, Route[Any]]:
        """The requests :class:`~distributed.client.amm.AMMClientProxy` sends."""
        return {
            "amm_start": Route(m.Empty, lambda comm, msg: self.start()),
            "amm_stop": Route(m.Empty, lambda comm, msg: self.stop()),
            "amm_run_once": Route(m.Empty, lambda comm, msg: self.run_once()),
            "amm_running": Route(m.Empty, self._handle_running),
        }

    def _handle_running(self, comm: Comm, msg: m.Empty) -> bool:
        return self.running

    def on_start(self) -> None:
        """Start the periodic runs once the scheduler listens, if asked to."""
        if self._start_with_scheduler:
            self.start()

    @property
    def running(self) -> bool:
        """Whether the manager runs every ``interval``."""
        return self._callback is not None

    def start(self) -> None:
        """Run every ``interval`` from now on (nothing when already running)."""
        if self._callback is None:
            self._callback = PeriodicCallback(self.scheduler, self.run_once, self.interval, "amm")
            self._callback.start()

    def stop(self) -> None:
        """Stop the periodic runs (a pass never runs half: each is synchronous)."""
        if self._callback is not None:
            self._callback.stop()
            self._callback = None

    def add_policy(self, policy: ActiveMemoryManagerPolicy) -> None:
        """Run ``policy`` from the next pass on."""
        if not isinstance(policy, ActiveMemoryManagerPolicy):
            raise TypeError(f"Expected an ActiveMemoryManagerPolicy, got {type(policy).__name__}")
        self.policies.add(policy)
        policy.manager = self

    # -- one pass ----------------------------------------------------------------------
    def run_once(self) -> None:
        """Ask every policy, then enact the plan."""
        if not self.scheduler.workers:
            return
        # Measured at the first suggestion: a pass with nothing to do (most) costs no walk over the workers.
        self.workers_memory = {}
        self.pending = {}
        try:
            for policy in list(self.policies):
                self._run_policy(policy)
            self._enact()
        finally:
            self.pending = {}
            self.workers_memory = {}

    def _run_policy(self, policy: ActiveMemoryManagerPolicy) -> None:
        gen = policy.run()
        chosen: WorkerState | None = None
        while True:
            try:
                raw = gen.send(chosen)
            except StopIteration:
                return
            suggestion = raw if isinstance(raw, Suggestion) else Suggestion(*raw)
            if suggestion.op not in ("replicate", "drop"):
                raise ValueError(f"{policy!r} suggested {suggestion.op!r}: a policy may suggest 'replicate' or 'drop'")
            ts, candidates = suggestion.ts, suggestion.candidates
            if not self.workers_memory:
                self.workers_memory = {ws: measure(ws, self.measure) for ws in self.scheduler.workers.values()}
            to_add, to_drop = self.pending.setdefault(ts, (set(), set()))
            nbytes = max(ts.nbytes, 0)
            if suggestion.op == "replicate":
                chosen = self._find_recipient(ts, candidates, to_add)
                if chosen is not None:
                    to_add.add(chosen)
                    self.workers_memory[chosen] += nbytes
            else:
                chosen = self._find_dropper(ts, candidates, to_drop)
                if chosen is not None:
                    to_drop.add(chosen)
                    self.workers_memory[chosen] = max(0, self.workers_memory[chosen] - nbytes)

    def _find_recipient(
        self, ts: TaskState, candidates: set[WorkerState] | None, to_add: set[WorkerState]
    ) -> WorkerState | None:
        """The running worker with the least memory that lacks ``ts`` and is not getting it this pass."""
        if ts.state != "memory":
            return None
        pool = self.scheduler.workers.values() if candidates is None else candidates
        fits = [
            ws
            for ws in pool
            if ws.status == Status.running and ws in self.workers_memory and ws not in ts.who_has and ws not in to_add
        ]
        return min(fits, key=self.workers_memory.__getitem__, default=None)

    def _find_dropper(
        self,
        ts: TaskState,
        candidates: set[WorkerState] | None,
        to_drop: set[WorkerState],
    ) -> WorkerState | None:
        """The holder of ``ts`` with the most memory whose replica may go; None when the last must stay.

        The same copies are kept as :meth:`~distributed.scheduler.stimuli.SchedulerStimuli.drop_replicas`
        keeps: one a task processing there needs, and an actor's home.
        """
        if ts.state != "memory" or len(ts.who_has) - len(to_drop) < 2:
            return None
        s = self.scheduler
        pool = ts.who_has if candidates is None else candidates & ts.who_has
        fits = [
            ws
            for ws in pool
            if ws not in to_drop
            and ws in self.workers_memory
            and not s.needed_on(ts, ws)
            and not (ts.actor and ts in ws.actors)
        ]
        return max(fits, key=self.workers_memory.__getitem__, default=None)

    def _enact(self) -> None:
        """Send the drops, then the replications (from the holders that keep their copy)."""
        s = self.scheduler
        drops: defaultdict[str, list[Key]] = defaultdict(list)
        fetches: defaultdict[WorkerState, dict[Key, list[str]]] = defaultdict(dict)
        for ts, (_, to_drop) in self.pending.items():
            for ws in to_drop:
                drops[ws.address].append(ts.key)
        for address, keys in drops.items():
            s.send_all(s.drop_replicas(address, keys))
        for ts, (to_add, _) in self.pending.items():
            if ts.state != "memory" or not ts.who_has:
                continue
            holders = [ws.address for ws in ts.who_has]
            for ws in to_add:
                if s.workers.get(ws.address) is ws and ws not in ts.who_has:
                    fetches[ws][ts.key] = holders
        for ws, who_has in fetches.items():
            bs = s.stream_comms.get(ws.address)
            if bs is None:
                continue
            nbytes = {k: max(s.tasks[k].nbytes, 0) for k in who_has}
            try:
                bs.send(m.AcquireReplicas(op="acquire-replicas", who_has=who_has, nbytes=nbytes))
            except CommClosedError:
                continue  # the worker is going: the next pass plans without it
        if drops or fetches:
            logger.debug(
                "Active memory manager: dropping %d replica(s), making %d",
                sum(map(len, drops.values())),
                sum(map(len, fetches.values())),
            )


def _policies_from_config(specs: Any) -> list[ActiveMemoryManagerPolicy]:
    """The policies ``distributed.scheduler.active-memory-manager.policies`` names."""
    key = "distributed.scheduler.active-memory-manager.policies"
    if not isinstance(specs, list):
        raise TypeError(f"{key} must be a list of mappings with a 'class', got {specs!r}")
    out: list[ActiveMemoryManagerPolicy] = []
    for spec in specs:
        if not isinstance(spec, dict) or "class" not in spec:
            raise TypeError(f"{key}: each entry is a mapping with a 'class', got {spec!r}")
        kwargs = {k: v for k, v in spec.items() if k != "class"}
        cls = spec["class"]
        if isinstance(cls, str):
            cls = import_term(cls)
        policy = cls(**kwargs)
        if not isinstance(policy, ActiveMemoryManagerPolicy):
            raise TypeError(f"{key}: {spec['class']!r} is not an ActiveMemoryManagerPolicy")
        out.append(policy)
    return out


class ReduceReplicas(ActiveMemoryManagerPolicy):
    """Drop the replicas no task needs.

    A key in memory on several workers keeps one holder, or one for each
    worker that runs (or is about to run) a task waiting for it, whichever is
    more.
    """

    def run(self) -> PolicyRun:
        state = self.manager.scheduler
        gone: list[TaskState] = []
        nkeys = ndrop = 0
        for ts in state.replicated_tasks:
            if ts.state != "memory" or len(ts.who_has) < 2:
                gone.append(ts)
                continue
            if ts.actor:
                continue  # an actor's proxies are cheap, and its home must stay
            needed = len({dts.processing_on for dts in ts.waiters if dts.processing_on is not None})
            excess = len(ts.who_has) - max(1, needed)
            if excess <= 0:
                continue
            nkeys += 1
            for _ in range(excess):
                chosen = yield Suggestion("drop", ts)
                if chosen is None:
                    break
                ndrop += 1
        for ts in gone:
            if len(ts.who_has) < 2:
                state.replicated_tasks.discard(ts)
        if ndrop:
            logger.debug("ReduceReplicas: dropping %d superfluous replicas of %d keys", ndrop, nkeys)


class RetireWorker(ActiveMemoryManagerPolicy):
    """Replicate the keys only ``address`` holds to other workers, so that it can leave losing nothing.

    The policy removes itself once the worker holds no unique key
    (:meth:`done`), or when the worker is gone.  Unique keys that no other
    running worker can take stay where they are (``no_recipients``).
    """

    def __init__(self, address: str) -> None:
        self.address = address
        #: Whether the last pass found unique keys with nowhere to go.
        self.no_recipients = False

    def __repr__(self) -> str:
        return f"RetireWorker({self.address!r})"

    def run(self) -> PolicyRun:
        state = self.manager.scheduler
        ws = state.workers.get(self.address)
        if ws is None:
            self.manager.policies.discard(self)
            return
        self.no_recipients = False
        unique = 0
        for ts in list(ws.has_what):
            if len(ts.who_has) > 1:
                continue
            unique += 1
            pending_elsewhere = self.manager.pending.get(ts, (set(), set()))[0]
            if pending_elsewhere:
                continue
            chosen = yield Suggestion("replicate", ts, {w for w in state.workers.values() if w is not ws})
            if chosen is None:
                self.no_recipients = True
        if unique == 0:
            self.manager.policies.discard(self)

    def done(self) -> bool:
        """Whether the worker holds no key that only it has (or is gone)."""
        ws = self.manager.scheduler.workers.get(self.address)
        if ws is None:
            return True
        return all(len(ts.who_has) > 1 for ts in ws.has_what)
