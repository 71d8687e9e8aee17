"""The scheduler's stimuli from workers and clients: each a state change that returns what to send."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from distributed.comm import (
    validate_address,
)
from distributed.core import Status
from distributed.exceptions import ActorLostError, KilledWorker, NoValidWorkerError
from distributed.protocol import journal_records as jr
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import as_serialized
from distributed.scheduler.records import (
    EMPTY,
    ClientState,
    Effects,
    ErredTask,
    TaskState,
    TaskStateName,
    TransitionInputs,
    WorkerState,
    grown,
    hold,
    want,
    without,
)
from distributed.scheduler.state import SchedulerState, done_for_fire_and_forget, priority_key, state_of

logger = logging.getLogger("distributed.scheduler")

__all__ = ["SchedulerStimuli"]


class SchedulerStimuli(SchedulerState):
    """What happens to the state from outside: workers finish or lose tasks, join and leave; clients want keys.

    Each method changes the state through :meth:`~SchedulerState.transitions`
    and returns the :class:`~distributed.scheduler.records.Effects` to send.
    """

    def task_finished(self, worker: str, msg: m.TaskFinished, stimulus_id: str, out: Effects | None = None) -> Effects:
        """``worker`` finished a task and holds its result.

        ``msg`` is the worker's report as it arrived (already checked against
        its declaration): passing it through costs nothing per task, where
        copying it into an event object would.  ``out`` gathers the result
        with that of other stimuli (see :meth:`holding_sends`).
        """
        if out is None:
            out = Effects()
        key = msg["key"]
        ts = self.tasks.get(key)
        ws = self.workers.get(worker)
        if ws is None:
            return out
        if ts is None or ts.state != "processing" or ts.processing_on is not ws or ts.run_id != msg["run_id"]:
            if ts is not None and ts.state == "processing" and ts.processing_on is ws:
                # An older run finished on the worker now running a newer one: ignore it.
                return out
            if ts is not None and ts.state == "memory" and ws not in ts.who_has:
                # Computed twice (e.g. after a reschedule): keep the replica.
                ts.who_has = grown(ts.who_has, ws)
                hold(ws, ts)
                ws.nbytes += max(msg["nbytes"], 0)
                self.note_replicas(ts)
            elif ts is None or ts.state not in ("memory",):
                out.free[worker].append(key)
            return out
        start, stop = msg["start"], msg["stop"]
        duration = stop - start
        group = ts.group
        if duration >= 0:
            ts.prefix.add_duration(duration)
            group.duration += duration
            if not group.start or start < group.start:
                group.start = start
            if stop > group.stop:
                group.stop = stop
        type_ = msg["type"]
        if type_:
            group.types.add(type_)
        return self.transitions({ts: "memory"}, stimulus_id, out, TransitionInputs(finished=msg))

    def task_erred(self, worker: str, msg: m.WorkerTaskErred, stimulus_id: str) -> Effects:
        """A task raised on ``worker`` (``msg`` is the worker's report)."""
        out = Effects()
        ts = self.tasks.get(msg["key"])
        ws = self.workers.get(worker)
        if (
            ts is None
            or ws is None
            or ts.state != "processing"
            or ts.processing_on is not ws
            or ts.run_id != msg["run_id"]
        ):
            return out
        if ts.retries > 0:
            # Released, it is wanted still, so it waits and runs again.
            ts.retries -= 1
            if self.journal_records is not None:
                self.journal_records.append(jr.TaskRetriedRecord(op="retried-before", key=ts.key, retries=ts.retries))
            return self.transitions({ts: "released"}, stimulus_id, out)
        self._set_error(ts, msg["exception"], msg["traceback"], msg["text"])
        if ts.erred_on is None:
            ts.erred_on = set()
        ts.erred_on.add(worker)
        self.erred_tasks.appendleft(
            ErredTask(ts.key, time.time(), frozenset(ts.erred_on), msg["text"], msg.get("traceback_text", ""))
        )
        given = TransitionInputs(erred=msg) if self.plugins else None
        return self.transitions({ts: "erred"}, stimulus_id, out, given)

    def add_worker_state(
        self,
        address: str,
        nthreads: int,
        *,
        name: Any = None,
        memory_limit: int = 0,
        pid: int = 0,
        nanny: str | None = None,
        resources: Mapping[str, float] | None = None,
        keys: Sequence[Key] = (),
        nbytes: Mapping[Key, int] | None = None,
        stimulus_id: str | None = None,
    ) -> Effects:
        """A worker joined: record it and give it work."""
        stimulus_id = stimulus_id or f"add-worker-{time.time()}"
        _check_worker_fields(address, nthreads, name, memory_limit)
        if address in self.workers:
            raise ValueError(f"Worker {address} is already registered")
        if name is not None and name in self.aliases and self.aliases[name] != address:
            raise ValueError(f"A worker named {name!r} already exists")
        ws = WorkerState(
            address, nthreads, name=name, memory_limit=memory_limit, pid=pid, nanny=nanny, resources=resources
        )
        ws.last_seen = time.time()
        self.workers[address] = ws
        self.worker_loads.add(ws)
        self.aliases[ws.name] = address
        self.total_nthreads += nthreads
        self._track_memory_limit(ws, joined=True)
        out = Effects()
        for key in keys:
            ts = self.tasks.get(key)
            if ts is not None and ts.state == "memory":
                ts.who_has = grown(ts.who_has, ws)
                hold(ws, ts)
                ws.nbytes += (nbytes or {}).get(key, ts.nbytes)
                self.note_replicas(ts)
            else:
                out.free[address].append(key)
        recs: dict[TaskState, TaskStateName] = {ts: "processing" for ts in self.unrunnable if self._can_run_on(ts, ws)}
        self.transitions(recs, stimulus_id, out, TransitionInputs(opened=[ws]))
        if self.plugins:
            self.call_plugins("add_worker", self, address)
        self.on_worker_joined(ws)
        return out

    def _can_run_on(self, ts: TaskState, ws: WorkerState) -> bool:
        valid = self._valid_workers(ts)
        return valid is None or ws in valid

    def remove_worker_state(self, address: str, *, stimulus_id: str, safe: bool = False) -> Effects:
        """A worker left: rerun what it was running and recompute what only it held."""
        out = Effects()
        ws = self.workers.pop(address, None)
        if ws is None:
            return out
        ws.status = Status.closed
        self.worker_loads.discard(ws)
        self.total_nthreads -= ws.nthreads
        self._track_memory_limit(ws, joined=False)
        if self.aliases.get(ws.name) == address:
            del self.aliases[ws.name]
        recs: dict[TaskState, TaskStateName] = {}
        for ts in list(ws.processing):
            if not safe:
                ts.suspicious += 1
            if ts.suspicious > self.allowed_failures:
                exc = KilledWorker(ts.key, address, self.allowed_failures)
                self._set_error(ts, as_serialized(exc), None, str(exc))
                recs[ts] = "erred"
            else:
                recs[ts] = "released"
        lost: list[TaskState] = []
        for ts in list(ws.has_what):
            if ts.actor and ts in ws.actors:
                continue  # see below
            if len(ts.who_has) > 1 or ts.state != "memory":
                ts.who_has = without(ts.who_has, ws)
                del ws.has_what[ts]
                continue
            # Held only here: released (which clears who_has) before its
            # dependents move, so none of them starts with no holder to fetch from.
            lost.append(ts)
        ws.nbytes = 0
        # Recommendations pop last-in first: lost data goes before the reruns,
        # and dependencies (earlier priority) before their dependents.
        for ts in sorted(lost, key=priority_key, reverse=True):
            recs[ts] = "released"
        for ts in list(ws.actors):
            # The instance lived there (other holders have only proxies): a new
            # instance would silently start afresh, so the key errs instead.
            lost_actor = ActorLostError(ts.key, address)
            self._set_error(ts, as_serialized(lost_actor), None, str(lost_actor))
            recs[ts] = "erred"
        self.transitions(recs, stimulus_id, out)
        self.on_worker_left(address)
        for hook in self.remove_worker_hooks:
            hook(address, stimulus_id, out)
        if self.plugins:
            self.call_plugins("remove_worker", self, address, stimulus_id=stimulus_id)
        return out

    def reopen_worker_state(self, address: str, *, stimulus_id: str) -> Effects:
        """A worker that was to retire stays: it takes tasks again (queued ones and those waiting for it)."""
        out = Effects()
        ws = self.workers.get(address)
        if ws is None or ws.status == Status.running:
            return out
        ws.status = Status.running
        recs: dict[TaskState, TaskStateName] = {ts: "processing" for ts in self.unrunnable if self._can_run_on(ts, ws)}
        return self.transitions(recs, stimulus_id, out, TransitionInputs(opened=[ws]))

    def report_holders(self, tasks: Iterable[TaskState]) -> Effects:
        """Tell the clients wanting these keys where they are now (they moved: their old holders left)."""
        out = Effects()
        for ts in tasks:
            if ts.state == "memory" and ts.who_wants:
                msg = self._key_in_memory(ts)
                for cs in ts.who_wants:
                    out.clients[cs.client_key].append(msg)
        return out

    def fail_tasks_restricted_to(self, gone: Mapping[str, Any], *, stimulus_id: str, reason: str) -> Effects:
        """Err the tasks that may run only on workers that left for good.

        ``gone`` maps the departed workers' addresses to their names.  A task
        waiting or unrunnable, without ``allow_other_workers``, whose worker
        restrictions name one of them, and which no worker left can run, errs with
        :class:`~distributed.exceptions.NoValidWorkerError` instead of waiting
        for a worker that will not come back.
        """
        out = Effects()
        idents = set(gone) | {str(n) for n in gone.values()}
        recs: dict[TaskState, TaskStateName] = {}
        # Rare (a retirement), so a pass over the tasks is fine: waiting ones would end up unrunnable too.
        for ts in [t for t in self.tasks.values() if t.state in ("no-worker", "waiting")]:
            restrictions = ts.worker_restrictions
            if ts.loose_restrictions or not restrictions:
                continue
            if not any(str(w) in idents for w in restrictions) or self._valid_workers(ts):
                continue
            exc = NoValidWorkerError(ts.key, sorted(str(w) for w in restrictions), reason)
            self._set_error(ts, as_serialized(exc), None, str(exc))
            recs[ts] = "erred"
        return self.transitions(recs, stimulus_id, out)

    def fail_unrunnable_tasks(self, now: float, *, stimulus_id: str) -> Effects:
        """Err the tasks no worker could run for ``distributed.scheduler.no-workers-timeout``.

        A task is unrunnable while no worker satisfies its restrictions
        (``no-worker``), or, for a queued task, while no worker runs at all.
        Such tasks err with :class:`~distributed.exceptions.NoValidWorkerError`
        once unrunnable that long; those depending on them err by blame.
        """
        out = Effects()
        timeout = self.no_workers_timeout
        if timeout is None:
            return out
        running = any(ws.status == Status.running for ws in self.workers.values())
        if running:
            self.no_workers_since = None
        elif self.no_workers_since is None:
            self.no_workers_since = now
        stuck = [ts for ts, since in self.unrunnable.items() if now - since >= timeout]
        if self.n_queued and self.no_workers_since is not None and now - self.no_workers_since >= timeout:
            # Rare (a cluster without workers), so a pass over the tasks is fine.
            stuck += [ts for ts in self.tasks.values() if ts.state == "queued"]
        if not stuck:
            return out
        reason = f"none could for {timeout} s (distributed.scheduler.no-workers-timeout)"
        recs: dict[TaskState, TaskStateName] = {}
        for ts in stuck:
            exc = NoValidWorkerError(ts.key, sorted(str(w) for w in ts.worker_restrictions or ()), reason)
            self._set_error(ts, as_serialized(exc), None, str(exc))
            recs[ts] = "erred"
        logger.error("%d tasks found no worker to run them within %s s; they err", len(stuck), timeout)
        return self.transitions(recs, stimulus_id, out)

    def workers_stuck_on_full_disks(self) -> bool:
        """Whether tasks wait while every worker is paused and cannot spill (its spill disk failed).

        Such a cluster goes on only if clients release results or someone frees
        the disk; otherwise every future waits forever.  Past
        ``distributed.scheduler.full-disk-timeout`` of this, the waiting tasks
        err (:meth:`fail_tasks_stuck_on_full_disks`).
        """
        workers = self.workers.values()
        if not workers:
            return False
        for ws in workers:
            if ws.status != Status.paused or "spill_disk_error" not in ws.metrics:
                return False
        return bool(self.n_queued or self.unrunnable or self.n_processing)

    def fail_tasks_stuck_on_full_disks(self, *, stimulus_id: str) -> Effects:
        """Err, with :class:`MemoryError`, the tasks that wait for workers paused on full memory and a failed disk.

        Tasks queued, waiting for a worker, or assigned to one (a paused worker
        starts none) err; those depending on them err by blame, as after any
        error.  Results already in memory stay and can be fetched.
        """
        out = Effects()
        if not self.workers_stuck_on_full_disks():
            return out
        example = next(iter(self.workers.values()))
        why = (
            f"every worker has been paused for {self.full_disk_timeout} s with its memory full, unable to spill "
            f"to disk after a disk error ({example.address}: {example.metrics['spill_disk_error']}); "
            f"free disk space or release results (distributed.scheduler.full-disk-timeout)"
        )
        logger.error("Failing the tasks that wait: %s", why)
        recs: dict[TaskState, TaskStateName] = {}
        # Rare (a cluster that cannot go on), so a pass over the tasks is fine.
        for ts in [t for t in self.tasks.values() if t.state in ("queued", "no-worker", "processing")]:
            exc = MemoryError(f"Task {ts.key!r} cannot run: {why}")
            self._set_error(ts, as_serialized(exc), None, str(exc))
            recs[ts] = "erred"
        return self.transitions(recs, stimulus_id, out)

    def erred_from_journal(self, record: jr.TaskErredRecord, stimulus_id: str) -> Effects:
        """A successor replaying its journal: ``record``'s task erred before (unless it is done, or gone).

        Its dependents err with it, as they did then.  The journal holds the
        record already: it is not kept again.
        """
        out = Effects()
        ts = self.tasks.get(record["key"])
        if ts is None or ts.state not in ("released", "waiting", "queued", "no-worker"):
            return out
        self._put_error(ts, record["exception"], record["traceback"], record["text"])
        return self.transitions({ts: "erred"}, stimulus_id, out)

    def client_releases_keys(self, client: str, keys: Iterable[Key], stimulus_id: str) -> Effects:
        """A client no longer wants ``keys``."""
        out = Effects()
        cs = self.clients.get(client)
        if cs is not None:
            self._release_for(cs, keys, stimulus_id, out)
        return out

    def _release_for(self, cs: ClientState, keys: Iterable[Key], stimulus_id: str, out: Effects) -> None:
        recs: dict[TaskState, TaskStateName] = {}
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None or cs not in ts.who_wants:
                continue
            ts.who_wants = without(ts.who_wants, cs)
            cs.wants_what.discard(ts)
            if not ts.who_wants:
                if ts.state == "released":
                    recs[ts] = "forgotten"
                elif not ts.waiters:
                    recs[ts] = "released"
        self.transitions(recs, stimulus_id, out)

    def client_desires_keys(self, client: str, keys: Iterable[Key], stimulus_id: str) -> Effects:
        """A client wants ``keys`` (already known to the scheduler).

        The stand-in client :data:`~distributed.protocol.messages.FIRE_AND_FORGET`
        wants a key only until it is done: the transitions into memory and
        erred drop its want, and a key already done is not wanted at all.
        """
        out = Effects()
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        forget_when_done = client == m.FIRE_AND_FORGET
        if forget_when_done:
            self._fire_and_forget = cs
        recs: dict[TaskState, TaskStateName] = {}
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None:
                if not forget_when_done:
                    out.clients[client].append(m.CancelledKeys(op="cancelled-keys", keys=[key], reason="unknown key"))
                continue
            if forget_when_done and ts.state in ("memory", "erred"):
                if self.journal_records is not None:
                    self.journal_records.append(done_for_fire_and_forget(key))  # for a successor: done as well
                continue  # done already: nothing to see through, and nobody to tell
            ts.who_wants = grown(ts.who_wants, cs)
            want(cs, ts)
            if ts.state == "memory":
                out.clients[client].append(self._key_in_memory(ts))
            elif ts.state == "erred":
                self._report_erred(ts, cs, out)
            elif ts.state == "released":
                recs[ts] = "waiting"
        return self.transitions(recs, stimulus_id, out)

    def remove_client_state(self, client: str, stimulus_id: str) -> Effects:
        """A client left: release everything it wanted.

        That includes what the stand-ins holding the parts of its graphs
        still in flight (``<client>/graph-<id>``) wanted: no final part
        will ever come to release them.
        """
        out = Effects()
        prefix = f"{client}/graph-"
        for name in [client, *(c for c in self.clients if c.startswith(prefix))]:
            cs = self.clients.get(name)
            if cs is None:
                continue
            self._release_for(cs, [ts.key for ts in cs.wants_what], stimulus_id, out)
            del self.clients[name]
            if self.plugins and name == client:
                self.call_plugins("remove_client", self, client)
        return out

    def cancel_keys(self, msg: m.CancelKeys, stimulus_id: str) -> Effects:
        """A client cancels ``msg["keys"]``.

        A key only the cancelling client wants (or nobody) is cancelled,
        with what depends on it and is not computed yet, for every client
        that wanted any of them.  A key another client wants too stays: only
        the cancelling client's interest goes.  With ``force`` the keys are
        cancelled for every client regardless (``Client.cancel(force=True)``).
        """
        out = Effects()
        reason = msg.get("reason", "cancelled by a client")
        force = msg.get("force", False)
        cs = self.clients.get(msg["client"])
        mine: list[TaskState] = []
        seen: set[TaskState] = set()
        stack = [self.tasks[k] for k in msg["keys"] if k in self.tasks]
        while stack:
            ts = stack.pop()
            if ts in seen:
                continue
            if not force and any(other is not cs for other in ts.who_wants):
                # Others want it: only the cancelling client lets go.
                if cs is not None and cs in ts.who_wants:
                    mine.append(ts)
                continue
            seen.add(ts)
            for dts in ts.dependents:
                if dts.state not in ("memory", "erred"):
                    stack.append(dts)
        if mine and cs is not None:
            for ts in mine:
                out.clients[cs.client_key].append(m.CancelledKeys(op="cancelled-keys", keys=[ts.key], reason=reason))
            self._release_for(cs, [ts.key for ts in mine], stimulus_id, out)
        recs: dict[TaskState, TaskStateName] = {}
        for ts in seen:
            for wcs in list(ts.who_wants):
                out.clients[wcs.client_key].append(m.CancelledKeys(op="cancelled-keys", keys=[ts.key], reason=reason))
                wcs.wants_what.discard(ts)
            ts.who_wants = EMPTY
        # A cancelled task still needed by one that stays (another client
        # wants it) keeps running; look at dependents before dependencies.
        releasing: set[TaskState] = set()
        for ts in sorted(seen, key=priority_key, reverse=True):
            if ts.state != "forgotten" and not ts.waiters - releasing:
                releasing.add(ts)
        # Recommendations pop last-in first: dependents (later priority) go
        # first, so a dependency is not kept alive by a dependent being cancelled.
        for ts in sorted(releasing, key=priority_key):
            recs[ts] = "released" if ts.state != "released" else "forgotten"
        return self.transitions(recs, stimulus_id, out)

    def update_data_state(self, msg: m.UpdateData, stimulus_id: str) -> Effects:
        """Data was scattered to workers: record it in memory, wanted by ``msg["client"]``."""
        out = Effects()
        client = msg["client"]
        who_has = msg["who_has"]
        nbytes = msg["nbytes"]
        types = msg.get("types", {})
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        for key, addrs in who_has.items():
            holders = [self.workers[a] for a in addrs if a in self.workers]
            if not holders:
                continue
            ts = self.tasks.get(key)
            if ts is None:
                ts = self.new_task(key, None)
            elif ts.state == "memory":
                # More replicas of data already in memory.
                for ws in holders:
                    if ws not in ts.who_has:
                        ts.who_has = grown(ts.who_has, ws)
                        hold(ws, ts)
                        ws.nbytes += max(ts.nbytes, 0)
                self.note_replicas(ts)
                if cs not in ts.who_wants:
                    ts.who_wants = grown(ts.who_wants, cs)
                    want(cs, ts)
                    out.clients[client].append(self._key_in_memory(ts))
                continue
            elif ts.state != "released":
                self.transitions({ts: "released"}, stimulus_id, out)
                if state_of(ts) != "released":
                    continue  # wanted by others, so it runs again instead
            ts.who_wants = grown(ts.who_wants, cs)
            want(cs, ts)
            scattered = TransitionInputs(scattered=(holders, nbytes.get(key, 0), types.get(key)))
            self.transitions({ts: "memory"}, stimulus_id, out, scattered)
        return out

    def scattered_data_lost(self, client: str, keys: Sequence[Key], stimulus_id: str) -> Effects:
        """Scattered ``keys`` whose holders all left while no scheduler watched: ``client``'s futures err.

        As with data lost under a running scheduler, each errs with
        ``LostDataError`` (it has no run_spec to be made again from), instead of
        being unknown to the scheduler that took over.
        """
        out = Effects()
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        recs: dict[TaskState, TaskStateName] = {}
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None:
                ts = self.new_task(key, None)
            ts.who_wants = grown(ts.who_wants, cs)
            want(cs, ts)
            if ts.state == "released":
                recs[ts] = "waiting"
        return self.transitions(recs, stimulus_id, out)

    def add_keys(self, address: str, keys: Sequence[Key]) -> Effects:
        """A worker says it holds ``keys`` (after fetching them, say)."""
        out = Effects()
        ws = self.workers.get(address)
        if ws is None:
            return out
        for key in keys:
            ts = self.tasks.get(key)
            if ts is not None and ts.state == "memory":
                if ws not in ts.who_has:
                    ts.who_has = grown(ts.who_has, ws)
                    hold(ws, ts)
                    ws.nbytes += max(ts.nbytes, 0)
                    self.note_replicas(ts)
            else:
                out.free[address].append(key)
        return out

    def drop_replicas(self, address: str, keys: Sequence[Key]) -> Effects:
        """Forget ``address``'s copies of ``keys`` and have it free them; a key's last copy is never dropped.

        The key stays in memory on its other holders, so no task changes state.
        A copy that a task processing on ``address`` needs as input is kept.
        """
        out = Effects()
        ws = self.workers.get(address)
        if ws is None:
            return out
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None or ts.state != "memory" or ws not in ts.who_has or len(ts.who_has) < 2:
                continue
            if self.needed_on(ts, ws) or (ts.actor and ts in ws.actors):
                continue  # an actor's instance lives on its home worker: that copy stays
            ts.who_has = without(ts.who_has, ws)
            del ws.has_what[ts]
            ws.nbytes -= max(ts.nbytes, 0)
            out.free[address].append(key)
        return out

    @staticmethod
    def needed_on(ts: TaskState, ws: WorkerState) -> bool:
        """Whether a task processing on ``ws`` takes ``ts`` as input."""
        return any(dts.processing_on is ws for dts in ts.dependents)

    def release_worker_data(self, address: str, keys: Sequence[Key], stimulus_id: str) -> Effects:
        """A worker dropped its copies of ``keys``."""
        ws = self.workers.get(address)
        recs: dict[TaskState, TaskStateName] = {}
        if ws is None:
            return Effects()
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None or ws not in ts.who_has:
                continue
            ts.who_has = without(ts.who_has, ws)
            del ws.has_what[ts]
            ws.nbytes -= max(ts.nbytes, 0)
            if not ts.who_has:
                recs[ts] = "released"
        return self.transitions(recs, stimulus_id)

    def missing_data(self, address: str, msg: m.MissingData, stimulus_id: str) -> Effects:
        """A worker could not fetch dependencies of ``msg["key"]`` from where we said they were."""
        recs: dict[TaskState, TaskStateName] = {}
        missing = msg["missing"]
        ts = self.tasks.get(msg["key"])
        if ts is not None and self._runs_on(ts, address, msg["run_id"]):
            # First in, so popped last: the lost dependencies are released
            # before ``ts`` looks for a worker again.
            recs[ts] = "released"
        for dep_key, addrs in missing.items():
            dts = self.tasks.get(dep_key)
            if dts is None:
                continue
            for addr in addrs:
                holder = self.workers.get(addr)
                if holder is not None and holder in dts.who_has:
                    dts.who_has = without(dts.who_has, holder)
                    holder.has_what.pop(dts, None)
                    holder.nbytes -= max(dts.nbytes, 0)
            if not dts.who_has and dts.state == "memory":
                recs[dts] = "released"
        return self.transitions(recs, stimulus_id)

    def reschedule(self, address: str, msg: m.Reschedule, stimulus_id: str) -> Effects:
        """A task asked to be run again, maybe elsewhere."""
        ts = self.tasks.get(msg["key"])
        if ts is None or not self._runs_on(ts, address, msg["run_id"]):
            return Effects()
        return self.transitions({ts: "released"}, stimulus_id)

    def long_running(self, address: str, msg: m.LongRunning, stimulus_id: str) -> Effects:
        """A task seceded from its worker's thread pool: its slot is free."""
        out = Effects()
        ws = self.workers.get(address)
        ts = self.tasks.get(msg["key"])
        if ws is None or ts is None or ts.processing_on is not ws or ts.run_id != msg["run_id"]:
            return out
        ws.long_running.add(ts)
        self.worker_loads.update(ws)
        # It no longer occupies a thread: take its expected time off the worker's load
        # (kept at zero until it finishes, so that leaving processing takes nothing more off).
        duration = ws.processing.get(ts, 0.0)
        if duration:
            ws.processing[ts] = 0.0
            ws.occupancy = max(ws.occupancy - duration, 0.0)
        return self.transitions({}, stimulus_id, out, TransitionInputs(opened=[ws]))

    def retry(self, keys: Sequence[Key], stimulus_id: str) -> tuple[list[Key], Effects]:
        """Rerun erred ``keys``: release the tasks whose own failure they inherit.

        Returns those tasks' keys and what to send.
        """
        roots: set[TaskState] = set()
        stack = [self.tasks[k] for k in keys if k in self.tasks]
        while stack:
            ts = stack.pop()
            if ts.state != "erred":
                continue
            blame = ts.exception_blame
            if blame is ts or blame is None:
                roots.add(ts)
            else:
                stack.append(blame)
        out = self.transitions({ts: "released" for ts in roots}, stimulus_id)
        for ts in list(self.tasks.values()):
            if ts.state == "released" and (ts.who_wants or ts.waiters):
                out.recs[ts] = "waiting"
        return [ts.key for ts in roots], self.transitions({}, stimulus_id, out)


def _check_worker_fields(address: object, nthreads: object, name: object, memory_limit: object) -> None:
    """Refuse a worker registration whose fields could not describe a real worker."""
    validate_address(address)
    if isinstance(nthreads, bool) or not isinstance(nthreads, int) or nthreads < 1:
        raise ValueError(f"A worker needs nthreads >= 1, got {nthreads!r}")
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 0:
        raise ValueError(f"A worker's memory_limit must be a byte count >= 0 (0: no limit), got {memory_limit!r}")
    try:
        hash(name)
    except TypeError:
        raise ValueError(
            f"A worker's name must be hashable (a string or a number), got {type(name).__name__}"
        ) from None
