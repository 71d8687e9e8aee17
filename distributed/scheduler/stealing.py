"""Work stealing: tasks move from saturated workers to idle ones.

Theory of operation
-------------------
A task goes to the worker where it should start soonest (``decide_worker``),
usually where its inputs are.  That choice can leave some workers with a long
backlog while others sit idle.  Every ``distributed.scheduler.work-stealing-
interval`` (100 ms), :meth:`WorkStealing.balance` looks for *thieves* (running
workers with fewer tasks than threads) and *victims* (workers with more tasks
than threads).  It costs nothing while no worker is idle or none saturated,
and nothing per task: the extension keeps no per-task bookkeeping on the
scheduler's hot path and only reads ``WorkerState.processing`` when it acts.

Which tasks to move.  Moving a task costs the transfer of its inputs to the
thief plus a fixed latency (the handshake below, then ``compute-task``); it
pays when the task runs long.  The *cost multiplier* of a task is
``(compute + transfer) / compute``, with the transfer of all its inputs; its
*level* is that multiplier's rounded log2.  Tasks of lower levels move first;
a multiplier over 100 (data heavy, or shorter than the latency) never moves.
A task moves to the thief that would finish it first when that thief, with
the task, still finishes its queue before the victim does without it (so
work does not bounce back).  Estimates are the scheduler's: occupancy (the
expected run time of the tasks assigned, per thread) and per-prefix average
durations; steals in flight count on both sides.

Restrictions.  A task restricted to workers or hosts moves only to a worker
among them (unless ``allow_other_workers``); one needing resources only to a
worker with those resources free.  The check is made when the steal is
proposed and again when it is confirmed, on the state of that moment.

Confirm or refuse.  The scheduler never takes a task away by itself: it sends
``steal-request`` to the victim on its stream, after every ``compute-task``
sent before.  The victim's state machine gives the task up only if it has not
started (``waiting`` for inputs, or ``ready``), and answers ``steal-response``
with the state the task was in.  Given up: the scheduler releases the task
from the victim and places it on the thief through its transition table
(``processing -> released -> waiting -> processing``, with a new ``run_id``),
or, if the thief can no longer take it, wherever ``decide_worker`` says.
Any other state (executing, done, erred): the task stays, and whatever the
worker reports about it counts as usual.  A reply about a run that is no
longer current (the task finished, was released, or was reassigned since the
request) changes nothing: the scheduler has already told the worker what it
needs.  So a task never runs on two workers at once, and a task the victim
gave up is always placed again.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import dask.config
from dask.utils import parse_timedelta

from distributed.core import Status, StreamRoute
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler.records import Effects, TaskState, TransitionInputs, WorkerState

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["LATENCY", "MAX_COST_MULTIPLIER", "MIN_STEAL_DURATION", "Steal", "WorkStealing"]

#: Seconds a steal costs besides moving data: the request, the reply and the new ``compute-task``.
LATENCY: Final = 0.1
#: Tasks whose cost multiplier is above this never move.
MAX_COST_MULTIPLIER: Final = 100.0
#: Levels are the rounded log2 of the cost multiplier: 0 .. log2(MAX_COST_MULTIPLIER).
N_LEVELS: Final = round(math.log2(MAX_COST_MULTIPLIER)) + 1
#: The least run time of a task that may move: below it, the latency alone costs more than
#: MAX_COST_MULTIPLIER times the run (see :meth:`WorkStealing.steal_time_ratio`).
MIN_STEAL_DURATION: Final = LATENCY / (MAX_COST_MULTIPLIER - 1)
#: Most tasks of one victim looked at per balance (its most recently assigned).
MAX_SCAN: Final = 256
#: Worker states in which the victim gave the task up.
GIVEN_UP: Final = frozenset({"waiting", "ready"})
#: Worker answers meaning the victim does not hold the task at all.
NOT_HELD: Final = frozenset({None, "released", "forgotten"})


@dataclass(slots=True)
class Steal:
    """A steal asked of a victim and not answered yet."""

    victim: WorkerState
    thief: WorkerState
    #: The run the request is about; a reply about another run changes nothing.
    run_id: int
    stimulus_id: str
    #: Expected seconds of work taken off the victim / put on the thief meanwhile.
    victim_duration: float
    thief_duration: float


class WorkStealing:
    """The scheduler extension that moves tasks from saturated to idle workers.

    ``scheduler.extensions["stealing"]``, present unless
    ``distributed.scheduler.work-stealing`` is off.

    Attributes
    ----------
    in_flight
        Steals asked of victims and not answered yet, by task.
    count
        Tasks moved so far.
    log
        Recent outcomes: ``(time, key, victim, thief, outcome)`` with outcome
        ``"request"``, ``"moved"``, ``"refused"`` or ``"stale"``.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        interval = dask.config.get("distributed.scheduler.work-stealing-interval")
        self.interval = float(parse_timedelta(interval, default="ms") or 0)
        if not self.interval > 0:
            raise ValueError(f"distributed.scheduler.work-stealing-interval must be > 0, got {interval!r}")
        self.in_flight: dict[TaskState, Steal] = {}
        #: Seconds of expected work added to (or, negative, taken from) workers by steals in flight.
        self.in_flight_occupancy: dict[WorkerState, float] = {}
        self.count = 0
        self.log: deque[tuple[float, Key, str, str, str]] = deque(maxlen=10_000)
        self._ids = itertools.count(1)

    # -- extension hooks --------------------------------------------------------
    def stream_routes(self) -> Mapping[str, StreamRoute[Any]]:
        """The victims' answers arrive on their streams."""
        return {"steal-response": StreamRoute(m.StealResponse, self._stream_steal_response)}

    def on_start(self) -> None:
        """Balance every ``work-stealing-interval`` until the scheduler closes."""
        self.scheduler.periodic(self.interval, self.balance, name="work-stealing")

    def story(self, *keys: Key) -> list[tuple[float, Key, str, str, str]]:
        """The steals of these keys, as in :attr:`log`."""
        wanted = set(keys)
        return [e for e in self.log if e[1] in wanted]

    # -- estimates --------------------------------------------------------------
    def steal_time_ratio(self, ts: TaskState) -> tuple[float | None, int | None]:
        """``(cost multiplier, level)`` of moving ``ts``, or ``(None, None)`` if it must not move.

        The multiplier counts the transfer of all of its inputs, wherever
        they are: a thief already holding some pays less (see :meth:`balance`).
        """
        if ts.actor:  # an actor stays where placement put it (fewest actors first)
            return None, None
        compute = self.scheduler.get_task_duration(ts)
        if not compute > 0:
            return None, None
        nbytes = 0
        for dts in ts.dependencies:
            nbytes += max(dts.nbytes, 0)
        multiplier = (compute + nbytes / self.scheduler.bandwidth + LATENCY) / compute
        if multiplier > MAX_COST_MULTIPLIER:
            return None, None
        return multiplier, min(round(math.log2(multiplier)), N_LEVELS - 1)

    def _finish_time(self, ws: WorkerState) -> float:
        """Seconds until ``ws`` runs out of work, steals in flight counted."""
        return max(ws.occupancy + self.in_flight_occupancy.get(ws, 0.0), 0.0) / ws.nthreads

    def _transfer_time(self, ts: TaskState, thief: WorkerState) -> float:
        missing = 0
        for dts in ts.dependencies:
            if thief not in dts.who_has:
                missing += max(dts.nbytes, 0)
        return missing / self.scheduler.bandwidth + LATENCY

    def allowed(self, ts: TaskState, thief: WorkerState) -> bool:
        """Whether ``ts``'s restrictions let it run on ``thief`` now."""
        if not ts.has_restrictions:
            return True
        if (ts.worker_restrictions or ts.host_restrictions) and not ts.loose_restrictions:
            valid = self.scheduler.valid_workers(ts)  # checks resources too
            return valid is not None and thief in valid
        if ts.resource_restrictions:
            for r, amount in ts.resource_restrictions.items():
                if thief.resources.get(r, 0.0) - thief.used_resources.get(r, 0.0) < amount:
                    return False
        return True

    # -- choosing -----------------------------------------------------------------
    def balance(self) -> None:
        """Propose steals from saturated workers to idle ones (see the module's docstring)."""
        s = self.scheduler
        if self.in_flight:
            self._drop_stale()
        if len(s.workers) < 2:
            return
        # From the workers indexed by load: idle, 10,000 workers cost a pass over them all every cycle.
        # A victim whose tasks take less than a task that may move, all together, has none to give: with
        # thousands of workers each given a few short tasks, looking at those tasks ten times a second
        # took a tenth of the scheduler's time.
        victims = [ws for ws in s.worker_loads.saturated() if ws.occupancy >= MIN_STEAL_DURATION]
        if not victims:
            return
        thieves = s.worker_loads.unsaturated()
        if not thieves:
            return
        finish = {ws: self._finish_time(ws) for ws in itertools.chain(thieves, victims)}
        victims.sort(key=finish.__getitem__, reverse=True)
        out = Effects()
        for victim in victims:
            for ts in self._candidates(victim):
                compute = s.get_task_duration(ts)
                best: WorkerState | None = None
                best_finish = math.inf
                best_transfer = 0.0
                for thief in thieves:
                    transfer = self._transfer_time(ts, thief)
                    done_at = finish[thief] + (compute + transfer) / thief.nthreads
                    if done_at < best_finish and self.allowed(ts, thief):
                        best, best_finish, best_transfer = thief, done_at, transfer
                if best is None:
                    continue
                victim_after = finish[victim] - compute / victim.nthreads
                if best_finish >= victim_after:
                    continue  # no thief would finish it before the victim: no gain
                self.move_task_request(ts, victim, best, out, compute=compute, transfer=best_transfer)
                finish[victim] = victim_after
                finish[best] = best_finish
        if out.workers:
            s.send_all(out)

    def _candidates(self, victim: WorkerState) -> list[TaskState]:
        """Tasks of ``victim`` that may move, cheapest to move first (by level).

        The most recently assigned are looked at: they run last there.
        """
        levels: list[list[TaskState]] = [[] for _ in range(N_LEVELS)]
        in_flight = self.in_flight
        long_running = victim.long_running
        for ts in itertools.islice(reversed(victim.processing), MAX_SCAN):
            if ts in in_flight or ts in long_running:
                continue
            _, level = self.steal_time_ratio(ts)
            if level is not None:
                levels[level].append(ts)
        return [ts for tasks in levels for ts in tasks]

    def move_task_request(
        self,
        ts: TaskState,
        victim: WorkerState,
        thief: WorkerState,
        out: Effects | None = None,
        *,
        compute: float | None = None,
        transfer: float | None = None,
    ) -> None:
        """Ask ``victim`` to give ``ts`` up so that it runs on ``thief``.

        The request goes in ``out`` (an :class:`~distributed.scheduler.Effects`)
        when given, else it is sent at once.  The task moves only when the
        victim confirms it had not started it.
        """
        s = self.scheduler
        if ts.processing_on is not victim or ts in self.in_flight or thief is victim:
            raise ValueError(f"Cannot steal {ts.key!r} from {victim.address} to {thief.address}")
        if compute is None:
            compute = s.get_task_duration(ts)
        if transfer is None:
            transfer = self._transfer_time(ts, thief)
        sid = f"steal-{next(self._ids)}-{time.time()}"
        self.in_flight[ts] = Steal(victim, thief, ts.run_id, sid, compute, compute + transfer)
        occ = self.in_flight_occupancy
        occ[victim] = occ.get(victim, 0.0) - compute
        occ[thief] = occ.get(thief, 0.0) + compute + transfer
        self.log.append((time.time(), ts.key, victim.address, thief.address, "request"))
        msg = m.StealRequest(op="steal-request", key=ts.key, stimulus_id=sid)
        if out is not None:
            out.workers[victim.address].append(msg)
        else:
            bs = s.stream_comms.get(victim.address)
            if bs is not None:
                bs.send(msg)

    # -- the victim's answer ---------------------------------------------------------
    def _stream_steal_response(self, msg: m.StealResponse) -> None:
        self.steal_response(self.scheduler.streams.sender(), msg)

    def steal_response(self, worker: str, msg: m.StealResponse) -> None:
        """``worker`` answered a ``steal-request``: move the task if it gave it up."""
        s = self.scheduler
        ts = s.tasks.get(msg["key"])
        if ts is None:
            return
        steal = self.in_flight.get(ts)
        if steal is None or steal.stimulus_id != msg["stimulus_id"] or steal.victim.address != worker:
            return  # an answer to a request already settled
        self._settle(ts, steal)
        victim, thief = steal.victim, steal.thief
        if ts.state != "processing" or ts.processing_on is not victim or ts.run_id != steal.run_id:
            # Finished, released or reassigned since: the scheduler told the worker what it needed.
            self.log.append((time.time(), ts.key, victim.address, thief.address, "stale"))
            return
        state = msg["state"]
        if state not in GIVEN_UP and state not in NOT_HELD:
            # Started (or done) on the victim: it stays there.
            self.log.append((time.time(), ts.key, victim.address, thief.address, "refused"))
            return
        out = Effects()
        placed = thief.status == Status.running and s.workers.get(thief.address) is thief and self.allowed(ts, thief)
        given = TransitionInputs(placements={ts: thief} if placed else None)
        s.transitions({ts: "released"}, steal.stimulus_id, out, given)
        s.send_all(out)
        self.count += 1
        self.log.append((time.time(), ts.key, victim.address, thief.address, "moved"))

    def _settle(self, ts: TaskState, steal: Steal) -> None:
        """Forget the steal of ``ts`` and what it added to the estimates."""
        del self.in_flight[ts]
        occ = self.in_flight_occupancy
        for ws, delta in ((steal.victim, steal.victim_duration), (steal.thief, -steal.thief_duration)):
            left = occ.get(ws, 0.0) + delta
            if ws.address in self.scheduler.workers and abs(left) > 1e-9:
                occ[ws] = left
            else:
                occ.pop(ws, None)

    def _drop_stale(self) -> None:
        """Forget steals whose task left its victim meanwhile (their answers will change nothing)."""
        for ts, steal in list(self.in_flight.items()):
            if ts.state != "processing" or ts.processing_on is not steal.victim or ts.run_id != steal.run_id:
                self._settle(ts, steal)
