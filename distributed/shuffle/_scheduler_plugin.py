"""The scheduler's side of P2P shuffles: runs, their workers, and restarts.

The scheduler never opens a shuffle's spec.  It learns what it needs of each
shuffle from the :class:`~distributed.protocol.messages.ShuffleDescription`
the client sends along with the graph (id, barrier key, number of output
partitions, which unpack task reads which output partition, the disk flag,
and the spec as opaque bytes for the workers).

A run starts when the first transfer task asks for it
(``shuffle_get_or_create``): the participating workers are the running
workers, sorted by address; output partition ``i`` goes to worker
``i % len(workers)`` (dataframes), or, when the description asks for
contiguous blocks (array rechunks), to worker ``i * len(workers) //
npartitions``; each unpack task is restricted to the worker owning its
output partition.  When a participating worker leaves before every unpack
task is done, the run is dropped (the surviving participants forget it) and
the transfer tasks and the barrier are released, so they run again under a
new run id on the workers left.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distributed.core import Route, Status
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler.records import Effects, TaskState, TaskStateName
from distributed.shuffle._exceptions import ShuffleRunRefused

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["ShuffleSchedulerExtension", "assign_workers"]

#: Seconds between two looks for finished shuffles (their runs are then dropped on the workers).
SWEEP_INTERVAL = 1.0
#: Seconds a description may wait for its barrier task to arrive before it is dropped.
UNSEEN_LIFETIME = 600.0


@dataclass
class _Described:
    desc: m.ShuffleDescription
    received: float
    #: Whether the barrier task was seen in the scheduler's tasks.
    seen: bool = False


@dataclass
class _Run:
    id: str
    run_id: int
    worker_for: list[str]
    barrier: TaskState
    participants: set[str] = field(default_factory=set)

    def info(self, spec: bytes) -> m.ShuffleRunInfo:
        return m.ShuffleRunInfo(id=self.id, run_id=self.run_id, worker_for=self.worker_for, spec=spec)


class ShuffleSchedulerExtension:
    """Runs of P2P shuffles (``scheduler.extensions["shuffle"]``)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.described: dict[str, _Described] = {}
        self.active: dict[str, _Run] = {}
        # Microseconds since the epoch, then one more per run: a scheduler that takes over from a dead one
        # numbers its runs past every run the workers saw, which they would refuse as stale otherwise.
        self._run_ids = itertools.count(time.time_ns() // 1000)
        self._tasks: set[asyncio.Task[Any]] = set()

    def routes(self) -> dict[str, Route[Any]]:
        """The requests of workers about shuffle runs."""
        return {
            "shuffle_get_or_create": Route(m.ShuffleGetOrCreate, self.handle_get_or_create),
            "shuffle_get": Route(m.ShuffleGet, self.handle_get),
            "shuffle_barrier": Route(m.ShuffleBarrierRequest, self.handle_barrier),
        }

    def on_start(self) -> None:
        """Look for finished shuffles every second."""
        self.scheduler.periodic(SWEEP_INTERVAL, self.sweep, name="shuffle-sweep")

    # -- graphs -------------------------------------------------------------------------------
    def add_descriptions(self, shuffles: Sequence[m.ShuffleDescription]) -> None:
        """Shuffles of a graph that arrived (before its tasks, or with them)."""
        now = time.monotonic()
        for desc in shuffles:
            self.described[desc["id"]] = _Described(desc, now)

    # -- requests -----------------------------------------------------------------------------
    def handle_get_or_create(self, comm: Any, msg: m.ShuffleGetOrCreate) -> m.ShuffleRunInfo:
        """The current run of a shuffle; a new one when there is none or the current one is stale."""
        shuffle_id = msg["id"]
        described = self.described.get(shuffle_id)
        if described is None:
            raise RuntimeError(f"Shuffle {shuffle_id!r} is unknown to the scheduler (its graph did not describe it)")
        desc = described.desc
        barrier = self.scheduler.tasks.get(desc["barrier"])
        if barrier is None:
            raise RuntimeError(f"Shuffle {shuffle_id!r}: its barrier task {desc['barrier']!r} is not known")
        described.seen = True
        run = self.active.get(shuffle_id)
        if run is not None and run.barrier is barrier:
            return run.info(desc["spec"])
        if run is not None:
            self._forget(run)  # the graph was submitted again: a fresh run
        return self._start(desc, barrier).info(desc["spec"])

    def handle_get(self, comm: Any, msg: m.ShuffleGet) -> m.ShuffleRunInfo | None:
        """The current run of a shuffle, None when none runs."""
        run = self.active.get(msg["id"])
        if run is None:
            return None
        return run.info(self.described[msg["id"]].desc["spec"])

    async def handle_barrier(self, comm: Any, msg: m.ShuffleBarrierRequest) -> None:
        """Every transfer is done: tell each participant, and answer once all heard it.

        The transfers must all have contributed to the current run.  A transfer
        may report an older one: a worker whose transfer was still running when
        the shuffle was restarted is asked to run it again and, as it is
        running already, reports that first run's result (its shards went to
        the old run).  Rescheduling the barrier would see the same results
        again, forever: the shuffle is restarted instead, so that every transfer
        runs again in a new run.

        This is safe whatever the order in which messages arrive: the scheduler
        compares the run ids against the one run it holds current, in one step
        of its event loop, and a run id is never reused.  A barrier that was
        released meanwhile (its run already restarted), or that runs on another
        worker now, restarts nothing.
        """
        shuffle_id = msg["id"]
        run_ids = set(msg["run_ids"])
        run = self.active.get(shuffle_id)
        if run is not None and run_ids == {run.run_id}:
            done = m.ShuffleInputsDone(op="shuffle_inputs_done", id=run.id, run_id=run.run_id)
            await asyncio.gather(*(self.scheduler.rpc.call(addr, done) for addr in sorted(run.participants)))
            return
        described = self.described.get(shuffle_id)
        barrier = None if described is None else self.scheduler.tasks.get(described.desc["barrier"])
        current = None if run is None else run.run_id
        if (
            barrier is not None
            and barrier.state == "processing"
            and barrier.processing_on is not None
            and barrier.processing_on.address == msg["worker"]
        ):
            s = self.scheduler
            logger.info(
                "Shuffle %s: transfers reported runs %s, the current run is %s: restarting it",
                shuffle_id,
                sorted(run_ids),
                current,
            )
            s.log_event(
                "p2p",
                {"action": "p2p-run-restart", "id": shuffle_id, "run_id": current, "stale": sorted(run_ids)},
            )
            if run is not None:
                self._forget(run)
            out = Effects()
            self._rerun(barrier, f"shuffle-restart-{shuffle_id}-{time.time()}", out)
            s.send_all(out)
        raise ShuffleRunRefused(
            f"Shuffle {shuffle_id!r}: the transfers reported runs {sorted(run_ids)}, not the current run {current}"
        )

    # -- runs -----------------------------------------------------------------------------------
    def _start(self, desc: m.ShuffleDescription, barrier: TaskState) -> _Run:
        s = self.scheduler
        workers = sorted(addr for addr, ws in s.workers.items() if ws.status == Status.running)
        if not workers:
            raise RuntimeError(f"Shuffle {desc['id']!r}: no running worker to take part")
        worker_for = assign_workers(workers, desc["npartitions"], desc["assignment"])
        run = _Run(desc["id"], next(self._run_ids), worker_for, barrier, set(worker_for))
        self.active[run.id] = run
        # Unpack tasks go where their output partition is: restrictions, through the transitions.
        recs: dict[TaskState, TaskStateName] = {}
        for key, position in desc["outputs"]:
            ts = s.tasks.get(_as_key(key))
            if ts is None or ts.state in ("memory", "processing"):
                continue
            ts.worker_restrictions = {worker_for[int(position)]}
            ts.loose_restrictions = False
            if ts.state == "no-worker":
                recs[ts] = "processing"
        if recs:
            s.send_all(s.transitions(recs, f"shuffle-pin-{run.id}-{time.time()}"))
        s.log_event("p2p", {"action": "p2p-run-start", "id": run.id, "run_id": run.run_id, "workers": workers})
        return run

    def _forget(self, run: _Run) -> None:
        """Drop ``run`` here and, in the background, on its participants."""
        if self.active.get(run.id) is run:
            del self.active[run.id]
        msg = m.ShuffleForget(op="shuffle_forget", id=run.id, run_id=run.run_id)
        for addr in run.participants:
            if addr in self.scheduler.workers:
                task = asyncio.get_running_loop().create_task(self._call_quietly(addr, msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _call_quietly(self, addr: str, msg: m.ShuffleForget) -> None:
        try:
            await self.scheduler.rpc.call(addr, msg)
        except Exception as e:
            logger.debug("Telling %s to forget shuffle %s failed: %r", addr, msg["id"], e)

    def on_remove_worker(self, address: str, stimulus_id: str, out: Effects) -> None:
        """A worker left: restart every unfinished shuffle it took part in."""
        for run in [r for r in self.active.values() if address in r.participants]:
            self._restart(run, address, out)

    def _restart(self, run: _Run, address: str, out: Effects) -> None:
        s = self.scheduler
        self._forget(run)
        barrier = run.barrier
        if s.tasks.get(barrier.key) is not barrier or _finished(barrier):
            return
        stimulus_id = f"shuffle-restart-{run.id}-{time.time()}"
        logger.info("Shuffle %s run %d lost worker %s: restarting it", run.id, run.run_id, address)
        s.log_event("p2p", {"action": "p2p-run-restart", "id": run.id, "run_id": run.run_id, "worker": address})
        self._rerun(barrier, stimulus_id, out)

    def _rerun(self, barrier: TaskState, stimulus_id: str, out: Effects) -> None:
        """Make every transfer of a shuffle run again, then its barrier; unpack tasks are unpinned.

        A transfer done on a worker that is asked to run it again in this
        same stimulus would answer with the result it holds, that of the old
        run: the scheduler keeps such a key off the stimulus' free-keys.  So
        the holders are told to drop the transfers' results first, ahead of
        anything else this stimulus sends them (the stream keeps the order).
        """
        s = self.scheduler
        held: dict[str, list[Key]] = {}
        recs: dict[TaskState, TaskStateName] = {}
        # Popped last-in first: the transfers go before the barrier.
        if barrier.state not in ("released", "waiting"):
            recs[barrier] = "released"
        for dts in barrier.dependencies:
            if dts.state in ("memory", "processing"):
                recs[dts] = "released"
            for ws in dts.who_has:
                held.setdefault(ws.address, []).append(dts.key)
        for dep in barrier.dependents:
            if dep.state not in ("memory", "processing"):
                dep.worker_restrictions = None
        s.transitions(recs, stimulus_id, out)
        for addr, keys in held.items():
            if addr in s.workers:
                out.workers[addr].insert(0, m.FreeKeys(op="free-keys", keys=keys))

    def sweep(self) -> None:
        """Drop the runs of finished shuffles and the descriptions of forgotten ones."""
        tasks = self.scheduler.tasks
        for run in list(self.active.values()):
            if tasks.get(run.barrier.key) is not run.barrier or _finished(run.barrier):
                self._forget(run)
        now = time.monotonic()
        for shuffle_id, described in list(self.described.items()):
            if described.desc["barrier"] in tasks:
                described.seen = True
            elif shuffle_id not in self.active and (described.seen or now - described.received > UNSEEN_LIFETIME):
                del self.described[shuffle_id]


def assign_workers(workers: Sequence[str], npartitions: int, how: str) -> list[str]:
    """The worker of each output partition, by position: round-robin, or in contiguous blocks.

    Examples
    --------
    >>> assign_workers(["a", "b"], 5, "round-robin")
    ['a', 'b', 'a', 'b', 'a']
    >>> assign_workers(["a", "b"], 5, "contiguous")
    ['a', 'a', 'a', 'b', 'b']
    """
    n = len(workers)
    if how == "contiguous":
        return [workers[i * n // npartitions] for i in range(npartitions)]
    if how == "round-robin":
        return [workers[i % n] for i in range(npartitions)]
    raise ValueError(f"Unknown assignment of shuffle outputs to workers: {how!r}")


def _finished(barrier: TaskState) -> bool:
    """Whether every unpack task of a shuffle is done (its barrier no longer needed)."""
    if barrier.state == "forgotten":
        return True
    if barrier.state not in ("memory", "released"):
        return False
    return all(dts.state == "memory" for dts in barrier.dependents)


def _as_key(key: Any) -> Key:
    """A key as it arrived over msgpack (lists for tuples)."""
    if isinstance(key, list):
        return tuple(_as_key(k) for k in key)
    if isinstance(key, (str, int, float, tuple)):
        return key
    raise TypeError(f"Not a key: {type(key).__name__}")
