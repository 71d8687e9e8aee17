"""Graphs from clients: ``update_graph`` checks a graph, makes its tasks and starts them (in slices when large)."""

from __future__ import annotations

import itertools
import logging
import operator
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, cast

from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import as_serialized
from distributed.scheduler.priorities import MAX_ORDER, priority_problem, rank_of
from distributed.scheduler.records import (
    EMPTY,
    ClientState,
    Effects,
    TaskState,
    TaskStateName,
    grown,
    want,
    without,
)
from distributed.scheduler.stimuli import SchedulerStimuli

logger = logging.getLogger("distributed.scheduler")

__all__ = ["INGEST_SLICE", "GraphIngestion"]

_RANK: Final = operator.attrgetter("rank")

#: Tasks of a large graph added between two chances for others to be served
#: (see :meth:`GraphIngestion.update_graph_slices`): some 3 ms of work, 5 to 10 ms while workers
#: run the graph's first tasks, so that a request waits for less than 50 ms.
INGEST_SLICE: Final = 250


class GraphIngestion(SchedulerStimuli):
    """Graphs from clients become tasks: checked, added in slices, then sent on their way."""

    def update_graph(
        self,
        client: str,
        tasks: Mapping[Key, m.TaskSpec],
        keys: Sequence[Key],
        *,
        user_priority: int = 0,
        annotations: Mapping[str, Any] | None = None,
        stimulus_id: str | None = None,
        graph: str | None = None,
        final: bool = True,
        generation: int | None = None,
        checked: bool = False,
        code: Sequence[Any] | None = None,
        release_held: bool = True,
    ) -> Effects:
        """Add a client's graph and want its ``keys``.

        Tasks whose key is already known keep their existing state (a key
        names one computation).  Tasks whose dependencies are neither in the
        graph nor known are cancelled as "lost dependencies".

        A large graph may come in several parts sharing a ``graph`` id: the
        tasks of every part are held (wanted by a stand-in client) until the
        ``final`` part arrives, so that nothing a later part depends on is
        released in between.

        ``generation`` (default: a new one) orders these tasks after those of
        earlier graphs of the same priority; ``checked`` says the graph was
        already checked for NaN keys and cycles (see :meth:`update_graph_slices`).
        ``code`` is the client's source of the call that made the graph, for
        :attr:`computations`.  ``release_held=False`` leaves the tasks of a
        graph in parts held after its final part: the caller lets go of them
        (see :meth:`update_graph_slices`).
        """
        stimulus_id = stimulus_id or f"update-graph-{time.time()}"
        problem = None if checked else _graph_problem(tasks, keys, self.tasks, user_priority, annotations)
        if problem is not None:
            return self._refuse_graph(client, keys, problem)
        out = Effects()
        cs = self._client_state(client)
        holder = None if graph is None else self._client_state(f"{client}/graph-{graph}")
        if generation is None:
            self.generation += 1
            generation = self.generation
        log = self.computation_log
        if log.computations.maxlen:
            idle = self.is_idle()  # before these tasks: a graph sent to an idle cluster starts a computation
            new = self._add_tasks(tasks, dict(annotations or {}), user_priority, generation)
            log.observe(new, code, idle)
        else:
            new = self._add_tasks(tasks, dict(annotations or {}), user_priority, generation)
        if self.span_observer is not None:
            self.span_observer(new)
        lost = self._link_dependencies(new, tasks)
        if holder is not None and not final:
            self._hold(holder, tasks)
        wanted = self._want(cs, keys, out)
        if self.plugins:
            self._tell_plugins_of_graph(client, new, wanted, stimulus_id)
        if lost:
            self._drop_lost(lost, stimulus_id, out)
        self._start(new, wanted, stimulus_id, out)
        if holder is not None and final and release_held:
            self._stop_holding(holder, stimulus_id, out)
        return out

    # -- the phases of update_graph -------------------------------------------------------
    def _refuse_graph(self, client: str, keys: Sequence[Key], problem: str) -> Effects:
        """Err every key of a graph refused whole: nothing of it enters the state, so nothing is left behind."""
        logger.warning("Refused a graph from client %s: %s", client, problem)
        exc = ValueError(f"Graph refused: {problem}")
        payload = as_serialized(exc)
        out = Effects()
        for key in keys:
            out.clients[client].append(
                m.ClientTaskErred(op="task-erred", key=key, exception=payload, traceback=None, text=str(exc))
            )
        return out

    def _client_state(self, client: str) -> ClientState:
        """The client's record, made on its first graph (or a graph's stand-in holder, on its first part)."""
        cs = self.clients.get(client)
        if cs is None:
            cs = self.clients[client] = ClientState(client)
        return cs

    def _add_tasks(
        self, tasks: Mapping[Key, m.TaskSpec], annotations: dict[str, Any], user_priority: int, generation: int
    ) -> list[TaskState]:
        """Make the tasks of keys not known yet, with their priority and annotations; return them.

        A known key keeps its state (a key names one computation); a released
        one without a run_spec (say, scattered, then lost) takes the new one.
        A key a worker held when this scheduler took over from a journal (see
        :attr:`held_before_takeover`) is in memory already: it takes the
        graph's run_spec, priority and annotations, and is returned with the
        new tasks, for its dependencies to be linked.
        """
        new: list[TaskState] = []
        for key, spec in tasks.items():
            ts = self.tasks.get(key)
            if ts is None:
                ts = self.new_task(key, spec["run_spec"])
            elif ts.has_run_spec or spec["run_spec"] is None:
                continue
            elif ts in self.held_before_takeover:
                self.held_before_takeover.discard(ts)
                ts.run_spec = spec["run_spec"]
            else:
                if ts.state == "released":
                    ts.run_spec = spec["run_spec"]
                continue
            new.append(ts)
            if spec.get("actor"):
                ts.actor = True
            # No dict per task unless the task has annotations of its own (read only below).
            own = spec.get("annotations")
            ann = {**annotations, **own} if own else annotations
            priority = ann.get("priority", user_priority) if ann else user_priority
            ts.rank = rank_of(priority, generation, spec["order"])
            if ann:
                self._apply_annotations(ts, ann)
        return new

    def _link_dependencies(self, new: list[TaskState], tasks: Mapping[Key, m.TaskSpec]) -> set[TaskState]:
        """Link the new tasks to their dependencies; return those that cannot run, a dependency being unknown.

        Every dependent in this graph of such a task cannot run either.
        """
        lost: list[TaskState] = []
        for ts in new:
            missing = False
            for dep_key in tasks[ts.key]["dependencies"]:
                dts = self.tasks.get(dep_key)
                if dts is None:
                    missing = True
                    continue
                if dts is ts:
                    continue
                ts.dependencies = grown(ts.dependencies, dts)
                dts.dependents = grown(dts.dependents, ts)
            if missing:
                ts.has_lost_dependencies = True
                lost.append(ts)
        lost_set = set(lost)
        stack = lost
        while stack:
            for d in stack.pop().dependents:
                if d not in lost_set:
                    lost_set.add(d)
                    d.has_lost_dependencies = True
                    stack.append(d)
        return lost_set

    def _hold(self, holder: ClientState, tasks: Mapping[Key, m.TaskSpec]) -> None:
        """Have the stand-in client of a graph in parts want this part's tasks until the last part is in."""
        for key in tasks:
            hts = self.tasks.get(key)
            if hts is not None and not hts.extras.has_lost_dependencies:
                hts.who_wants = grown(hts.who_wants, holder)
                want(holder, hts)

    def _want(self, cs: ClientState, keys: Sequence[Key], out: Effects) -> list[TaskState]:
        """Have the client want ``keys``; tell it at once of those lost, in memory or erred. Return the wanted."""
        client = cs.client_key
        wanted: list[TaskState] = []
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None:
                out.clients[client].append(m.CancelledKeys(op="cancelled-keys", keys=[key], reason="lost dependencies"))
                continue
            ts.who_wants = grown(ts.who_wants, cs)
            want(cs, ts)
            wanted.append(ts)
        for ts in wanted:
            if ts.extras.has_lost_dependencies:
                ts.who_wants = without(ts.who_wants, cs)
                cs.wants_what.discard(ts)
                out.clients[client].append(
                    m.CancelledKeys(op="cancelled-keys", keys=[ts.key], reason="lost dependencies")
                )
            elif ts.state == "memory":
                out.clients[client].append(self._key_in_memory(ts))
            elif ts.state == "erred":
                self._report_erred(ts, cs, out)
        return wanted

    def _tell_plugins_of_graph(
        self, client: str, new: list[TaskState], wanted: list[TaskState], stimulus_id: str
    ) -> None:
        """The plugins' ``update_graph`` hook: the new tasks, their annotations and priorities, the keys wanted."""
        annotations: dict[str, dict[Key, Any]] = defaultdict(dict)
        for ts in new:
            for k, v in ts.annotations.items():
                annotations[k][ts.key] = v
        self.call_plugins(
            "update_graph",
            self,
            client=client,
            keys={ts.key for ts in wanted},
            tasks=[ts.key for ts in new],
            annotations=dict(annotations),
            priority={ts.key: ts.priority for ts in new},
            stimulus_id=stimulus_id,
        )

    def _start(self, new: list[TaskState], wanted: list[TaskState], stimulus_id: str, out: Effects) -> None:
        """Send the new tasks and the wanted released ones on their way (to waiting), most urgent first."""
        recs: dict[TaskState, TaskStateName] = {}
        # Recommendations pop last-in first: insert the most urgent task last.
        # New tasks all have a rank: read in C, without priority_key's call per task.
        for ts in sorted(new, key=_RANK, reverse=True):
            if ts.state == "released":
                recs[ts] = "waiting"
        for ts in wanted:
            if ts.state == "released" and not ts.extras.has_lost_dependencies:
                recs[ts] = "waiting"
        self.transitions(recs, stimulus_id, out)

    def _stop_holding(self, holder: ClientState, stimulus_id: str, out: Effects) -> None:
        """The whole graph is here: the stand-in client of its parts lets go of them."""
        released = self.remove_client_state(holder.client_key, stimulus_id)
        for addr, keys in released.free.items():
            out.free[addr].extend(keys)
        for addr, msgs in released.workers.items():
            out.workers[addr].extend(msgs)
        for c, client_msgs in released.clients.items():
            out.clients[c].extend(client_msgs)

    def update_graph_slices(
        self,
        client: str,
        tasks: Mapping[Key, m.TaskSpec],
        keys: Sequence[Key],
        *,
        user_priority: int = 0,
        annotations: Mapping[str, Any] | None = None,
        stimulus_id: str | None = None,
        graph: str | None = None,
        final: bool = True,
        size: int = INGEST_SLICE,
        code: Sequence[Any] | None = None,
    ) -> Iterator[Effects]:
        """:meth:`update_graph` in slices of ``size`` tasks: the messages of each slice in turn.

        A graph of more than one slice is checked and cut first, in a step of
        its own (which yields no message).

        The caller may let other work in between slices (the state is whole
        after each), so that a large graph does not stop the scheduler from
        answering workers and clients for as long as it takes to add it all.
        The result is that of one :meth:`update_graph`: the graph is checked
        whole first, and its tasks share one generation.  Tasks nobody wants
        yet are held (as for a graph in parts) until the last slice is in.
        A graph in which a task comes before one of its dependencies is added
        in one go.  After the final part of a graph in parts, the tasks held
        until then are let go of ``size`` at a time too.
        """
        stimulus_id = stimulus_id or f"update-graph-{time.time()}"
        slices = _slices(tasks, keys, size)
        if slices is None:
            yield self.update_graph(
                client,
                tasks,
                keys,
                user_priority=user_priority,
                annotations=annotations,
                stimulus_id=stimulus_id,
                graph=graph,
                final=final,
                code=code,
                release_held=False,
            )
            if final and graph is not None:
                yield from self._release_held(f"{client}/graph-{graph}", stimulus_id, size)
            return
        problem = _graph_problem(tasks, keys, self.tasks, user_priority, annotations)
        if problem is not None:
            yield self.update_graph(
                client, tasks, keys, user_priority=user_priority, annotations=annotations, stimulus_id=stimulus_id
            )
            return
        # Checking and cutting a part of some thousands of tasks is a step of its own: with the first
        # slice it held the loop some 20 ms.
        yield Effects()
        slice_keys, unwanted = slices
        if unwanted and graph is None:
            # Hold the slices' tasks as a graph in parts would be held.
            graph = f"slices-{uuid.uuid4().hex}"
        self.generation += 1
        generation = self.generation
        last = len(slice_keys) - 1
        items = iter(tasks.items())
        for i, wanted in enumerate(slice_keys):
            part = dict(itertools.islice(items, size))
            yield self.update_graph(
                client,
                part,
                wanted,
                user_priority=user_priority,
                annotations=annotations,
                stimulus_id=stimulus_id,
                graph=graph,
                final=final if i == last else graph is None,
                generation=generation,
                checked=True,
                code=code if i == 0 else None,
                release_held=False,
            )
        if final and graph is not None:
            yield from self._release_held(f"{client}/graph-{graph}", stimulus_id, size)

    def _release_held(self, holder_name: str, stimulus_id: str, size: int) -> Iterator[Effects]:
        """The whole graph is here: its parts' stand-in client lets go of them, ``size`` tasks at a time.

        A graph in parts of a million tasks the client does not want itself (a
        tree's leaves) took 1.4 s to let go of in one go, with nothing else served.
        """
        holder = self.clients.get(holder_name)
        if holder is None:
            return
        held = holder.wants_what
        while held:
            chunk = list(itertools.islice(held, size))
            out = Effects()
            self._release_for(holder, [ts.key for ts in chunk], stimulus_id, out)
            for ts in chunk:
                held.discard(ts)  # however it went: the loop must end
            yield out
        yield self.remove_client_state(holder_name, stimulus_id)

    def _drop_lost(self, lost: set[TaskState], stimulus_id: str, out: Effects) -> None:
        """Forget new tasks that cannot run because a dependency is unknown.

        Every dependent of a lost task is lost too: forgetting the lost
        tasks no other lost task depends on forgets the rest in turn, and
        with them the dependencies nothing else needs.
        """
        recs: dict[TaskState, TaskStateName] = {}
        for ts in lost:
            for cs in ts.who_wants:
                cs.wants_what.discard(ts)
            ts.who_wants = EMPTY
            if not ts.dependents:
                recs[ts] = "forgotten"
        self.transitions(recs, stimulus_id, out)

    def _apply_annotations(self, ts: TaskState, ann: Mapping[str, Any]) -> None:
        ts.annotations = {
            k: v for k, v in ann.items() if isinstance(v, (str, int, float, bool, tuple, list, dict, type(None)))
        }
        retries = ann.get("retries")
        if isinstance(retries, int) and not isinstance(retries, bool):
            ts.retries = retries
        workers = ann.get("workers")
        if workers:
            if isinstance(workers, (str, int)):
                workers = [workers]
            hosts: set[str] = set()
            addrs: set[Any] = set()
            for w in workers:
                if not isinstance(w, str):
                    addrs.add(w)  # a worker name that is not a string, e.g. 0
                    continue
                if "://" in w or w in self.aliases or any(ws.name == w for ws in self.workers.values()):
                    addrs.add(w)
                elif ":" in w:
                    addrs.add(f"{'tcp' if self._protocol == 'inproc' else self._protocol}://{w}")
                else:
                    hosts.add(w)
                    addrs.add(w)
            ts.worker_restrictions = addrs or None
            ts.host_restrictions = hosts or None
        resources = ann.get("resources")
        if isinstance(resources, dict) and resources:
            ts.resource_restrictions = {str(k): float(v) for k, v in resources.items()}
        if ann.get("allow_other_workers"):
            ts.loose_restrictions = True


def _nan_in_key(key: object) -> bool:
    """Whether ``key`` is or holds a NaN: a key that never equals itself cannot be looked up."""
    if isinstance(key, float):
        return key != key
    if isinstance(key, tuple):
        return any(_nan_in_key(k) for k in key)
    return False


def _slices(tasks: Mapping[Key, m.TaskSpec], keys: Sequence[Key], size: int) -> tuple[list[list[Key]], bool] | None:
    """How :meth:`Scheduler.update_graph_slices` cuts a graph: the wanted keys of each slice.

    Also whether some task is not wanted.  None when the graph is one slice
    or a task comes before a dependency of the graph (a slice could not find it).
    """
    if len(tasks) <= size:
        return None
    wanted = set(keys)
    slice_keys: list[list[Key]] = []
    seen: set[Key] = set()
    unwanted = False
    current: list[Key] = []
    for i, (key, spec) in enumerate(tasks.items()):
        if i and i % size == 0:
            slice_keys.append(current)
            current = []
        for dep in spec["dependencies"]:
            if dep in tasks and dep not in seen:
                return None
        seen.add(key)
        if key in wanted:
            current.append(key)
        else:
            unwanted = True
    # Wanted keys that are not tasks of the graph come with the last slice.
    current.extend(k for k in keys if k not in tasks)
    slice_keys.append(current)
    return slice_keys, unwanted


def _graph_problem(
    tasks: Mapping[Key, m.TaskSpec],
    keys: Sequence[Key],
    known: Mapping[Key, Any],
    user_priority: object = 0,
    annotations: Mapping[str, Any] | None = None,
) -> str | None:
    """Why the new tasks of a graph cannot run (a NaN key, a cycle, a priority that is not a finite number, an
    order out of range), or None.

    Only tasks not ``known`` count: a known key keeps the dependencies it has.
    """
    problem = priority_problem(user_priority)
    if problem is None and annotations and "priority" in annotations:
        problem = priority_problem(annotations["priority"])
    if problem is not None:
        return problem
    for key, spec in tasks.items():
        order = spec["order"]
        if not 0 <= order <= MAX_ORDER:
            return f"task {key!r}: " + cast(str, priority_problem(0, order))
        own = spec.get("annotations")
        if own and "priority" in own:
            problem = priority_problem(own["priority"])
            if problem is not None:
                return f"task {key!r}: {problem}"
    for key in keys:
        if type(key) is not str and _nan_in_key(key):
            return f"key {key!r} is NaN or holds a NaN"
    # Depth-first search for a cycle among the new tasks; 1: on the current path, 2: done.
    mark: dict[Key, int] = {}
    for root in tasks:
        if root in mark or root in known:
            continue
        if type(root) is not str and _nan_in_key(root):
            return f"key {root!r} is NaN or holds a NaN"
        mark[root] = 1
        path: list[Key] = [root]
        stack = [iter(tasks[root]["dependencies"])]
        while stack:
            for dep in stack[-1]:
                if dep == path[-1] or dep not in tasks or dep in known:
                    continue
                seen = mark.get(dep)
                if seen is None:
                    if type(dep) is not str and _nan_in_key(dep):
                        return f"key {dep!r} is NaN or holds a NaN"
                    mark[dep] = 1
                    path.append(dep)
                    stack.append(iter(tasks[dep]["dependencies"]))
                    break
                if seen == 1:
                    cycle = [*path[path.index(dep) :], dep]
                    return "cycle between the keys " + " -> ".join(map(repr, cycle))
            else:
                mark[path.pop()] = 2
                stack.pop()
    return None
