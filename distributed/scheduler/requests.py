"""Requests about the cluster, and requests to run users' functions.

The scheduler's task state machine lives in :mod:`distributed.scheduler`; the
requests here read that state (who holds what, task states, stories), run a
function a user explicitly sent (on the scheduler, or on workers through it),
or manage workers and plugins.  Each is a route of the scheduler's server.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import operator
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import dask.config
from dask.utils import parse_timedelta

from distributed import profile
from distributed.comm import Comm, CommClosedError
from distributed.core import RemoteError, Status, error_message
from distributed.diagnostics.task_stream import ensure_task_stream
from distributed.exceptions import UnknownWorkerError
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize, unwrap
from distributed.scheduler import rebalance
from distributed.scheduler.hardware import benchmark_hardware
from distributed.scheduler.metadata import TaskMetadataCollector
from distributed.scheduler.records import Effects, TaskState, WorkerState
from distributed.scheduler.relay import relay_to_worker
from distributed.utils import wait_for, yield_after_io
from distributed.utils_comm import retry
from distributed.versions import get_versions

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["ClusterRequests"]

#: Seconds to reach a nanny that has no worker now before it is taken for gone.
_PENDING_NANNY_CONNECT = 2.0
T = TypeVar("T")

#: Keys gone through between two yields to the event loop while a retirement plans copies and waits for them.
COPY_CHECK_SLICE = 5_000
_NBYTES: Final = operator.attrgetter("nbytes")


class ClusterRequests:
    """The scheduler's request handlers that are not task-state stimuli."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        #: Nanny plugins by name, as registered (serialised, unopened); each nanny fetches them at start.
        self.nanny_plugins: dict[str, m.Payload] = {}
        #: Nannies that fetched the plugins (register_nanny): a plugin registered later reaches
        #: them even while they have no worker (starting, or replacing it).
        self.nannies: set[str] = set()
        #: Worker plugins by name, as registered (serialised; the scheduler never opens them).
        #: Each worker that joins sets them up (see the register-worker reply).
        self.worker_plugins: dict[str, m.Payload] = {}
        #: ``distributed.worker.memory.rebalance.*``, read (and checked) when the scheduler starts.
        self.rebalance_settings = rebalance.RebalanceSettings.from_config()
        #: Samples the scheduler's event loop, from the first ``profile(scheduler=True)`` on.
        self.loop_profiler: profile.Profiler | None = None

    def close(self) -> None:
        """Stop what the requests started (the event loop profiler)."""
        if self.loop_profiler is not None:
            self.loop_profiler.close()
            self.loop_profiler = None

    def handle_terminate(self, comm: Comm, msg: m.Empty) -> str:
        """Close the scheduler (its workers close when their streams end)."""
        asyncio.get_running_loop().call_soon(lambda: self.scheduler.spawn(self.scheduler.close(), name="terminate"))
        return "OK"

    def refuse_unpickling(self, what: str) -> None:
        """Refuse a request that would have the scheduler unpickle (run) what it was sent, if it may not.

        Raises
        ------
        ValueError
            With ``distributed.scheduler.pickle`` False, naming the request and the key.
        """
        if not self.scheduler.allow_pickle:
            raise ValueError(
                f"Cannot {what}: the scheduler has been explicitly disallowed from deserializing arbitrary "
                "bytestrings using pickle via the 'distributed.scheduler.pickle' configuration setting"
            )

    def handle_workers_to_close(self, comm: Comm, msg: m.WorkersToClose) -> list[Any]:
        if msg.get("key") is not None:
            self.refuse_unpickling("choose workers to close by a key= function")
        attribute = msg.get("attribute", "address")
        chosen = self.scheduler.workers_to_close(
            n=msg.get("n"),
            target=msg.get("target"),
            minimum=msg.get("minimum"),
            memory_ratio=msg.get("memory_ratio"),
            key=self.group_key(msg.get("key"), "workers_to_close"),
            attribute=attribute,
        )
        # The scheduler's own objects (task states, sets of them) do not leave it: only plain values travel.
        for value in chosen:
            if not _is_plain(value):
                raise TypeError(
                    f"workers_to_close(attribute={attribute!r}): over the wire only plain values "
                    f"(str, numbers, None and tuples/lists of them) are returned, not {type(value).__name__}"
                )
        return chosen

    def handle_adaptive_target(self, comm: Comm, msg: m.AdaptiveTarget) -> int:
        return self.scheduler.adaptive_target(target_duration=msg.get("target_duration"))

    @staticmethod
    def group_key(payload: m.Payload | None, what: str) -> Callable[[WorkerState], Hashable] | None:
        """The ``key=`` callable a caller sent, unpickled.

        The caller pickled it to have the scheduler run it on each worker's
        state: an explicit request to run user code here, as with
        ``run_on_scheduler`` (the scheduler never unpickles task code).
        """
        key = unwrap(payload)
        if key is not None and not callable(key):
            raise TypeError(f"{what}(key={key!r}): it must be a callable taking a WorkerState")
        return cast("Callable[[WorkerState], Hashable] | None", key)

    def handle_identity(self, comm: Comm, msg: m.IdentityRequest) -> dict[str, Any]:
        n_workers = msg.get("n_workers", -1)
        if isinstance(n_workers, bool) or not isinstance(n_workers, int):
            raise TypeError(f"identity: n_workers must be an integer, got {n_workers!r}")
        return self.scheduler.identity(n_workers)

    async def handle_versions(self, comm: Comm, msg: m.VersionsRequest) -> dict[str, Any]:
        """Answer ``versions``: the scheduler's and each worker's (asked again when ``packages`` are named)."""
        packages = msg.get("packages")
        s = self.scheduler
        if not packages:
            return {"scheduler": get_versions(), "workers": {a: ws.versions for a, ws in s.workers.items()}}

        async def of_worker(address: str) -> tuple[str, Any]:
            try:
                return address, await s.rpc.call(address, m.VersionsRequest(op="versions", packages=list(packages)))
            except (OSError, CommClosedError) as e:
                return address, {"error": error_message(e)["message"]}

        workers = dict(await asyncio.gather(*(of_worker(a) for a in list(s.workers))))
        return {"scheduler": get_versions(packages), "workers": workers}

    async def handle_start_task_metadata(self, comm: Comm, msg: m.TaskMetadataRequest) -> None:
        """Start collecting the metadata of the tasks wanted from now on, under ``name``."""
        await self.scheduler.add_plugin(TaskMetadataCollector(self.scheduler.tasks, msg["name"]), name=msg["name"])

    def handle_stop_task_metadata(self, comm: Comm, msg: m.TaskMetadataRequest) -> dict[str, Any]:
        """Stop collecting under ``name``: ``{"metadata": {key: ...}, "state": {key: "memory" | "erred"}}``.

        Raises
        ------
        ValueError
            When no collection runs under ``name``.
        """
        plugin = self.scheduler.plugins.get(msg["name"])
        if not isinstance(plugin, TaskMetadataCollector):
            raise ValueError(f"No task metadata is being collected under {msg['name']!r}")
        self.scheduler.remove_plugin(msg["name"])
        return {"metadata": plugin.metadata, "state": plugin.state}

    def handle_get_runspec(self, comm: Comm, msg: m.KeyRequest) -> m.RunSpecReply:
        """The task's run specification, unopened, and its dependencies' keys (``recreate_task_locally``).

        Raises
        ------
        KeyError
            For a key the scheduler does not hold.
        """
        ts = self.scheduler.tasks.get(msg["key"])
        if ts is None:
            raise KeyError(f"The scheduler holds no task {msg['key']!r}")
        return m.RunSpecReply(run_spec=ts.run_spec, dependencies=[dep.key for dep in ts.dependencies])

    def handle_get_error_cause(self, comm: Comm, msg: m.KeysRequest) -> Key | None:
        """The key of the task whose error the first erred one of ``keys`` carries (itself, or a dependency)."""
        for key in msg["keys"]:
            ts = self.scheduler.tasks.get(key)
            if ts is not None and ts.state == "erred":
                return (ts.exception_blame or ts).key
        return None

    def handle_who_has(self, comm: Comm, msg: m.OptionalKeysRequest) -> dict[Key, list[str]]:
        keys = msg.get("keys")
        if keys is None:
            return {k: [ws.address for ws in ts.who_has] for k, ts in self.scheduler.tasks.items()}
        return {
            k: [ws.address for ws in self.scheduler.tasks[k].who_has] if k in self.scheduler.tasks else [] for k in keys
        }

    def select_workers(self, workers: Sequence[str] | None) -> list[WorkerState]:
        if workers is None:
            return list(self.scheduler.workers.values())
        result = []
        for w in workers:
            ws = self.scheduler.workers.get(w) or self.scheduler.worker_by_name(w)
            if ws is not None:
                result.append(ws)
        return result

    def handle_has_what(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, list[Key]]:
        return {ws.address: [ts.key for ts in ws.has_what] for ws in self.select_workers(msg.get("workers"))}

    def handle_nthreads(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, int]:
        return {ws.address: ws.nthreads for ws in self.select_workers(msg.get("workers"))}

    def handle_nthreads_running(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, int]:
        """Threads of the selected workers that run tasks now (not paused, not closing)."""
        return {
            ws.address: ws.nthreads for ws in self.select_workers(msg.get("workers")) if ws.status == Status.running
        }

    def handle_processing(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, list[Key]]:
        return {ws.address: [ts.key for ts in ws.processing] for ws in self.select_workers(msg.get("workers"))}

    def handle_nbytes(self, comm: Comm, msg: m.OptionalKeysRequest) -> dict[Key, int]:
        keys = msg.get("keys")
        if keys is None:
            return {k: ts.nbytes for k, ts in self.scheduler.tasks.items() if ts.state == "memory"}
        return {k: self.scheduler.tasks[k].nbytes for k in keys if k in self.scheduler.tasks}

    async def handle_get_task_stream(self, comm: Comm, msg: m.GetTaskStream) -> list[dict[str, Any]]:
        """The task stream's records between ``start`` and ``stop`` (recording starts with the first request)."""
        plugin = await ensure_task_stream(self.scheduler)
        return plugin.collect(start=msg.get("start"), stop=msg.get("stop"), count=msg.get("count"))

    async def handle_profile(self, comm: Comm, msg: m.GetProfile) -> Any:
        """The workers' profiles merged (or by worker); the scheduler's event loop with ``scheduler``."""
        start, stop = msg.get("start"), msg.get("stop")
        if msg.get("scheduler", False):
            if self.loop_profiler is None:
                # Sampling the scheduler costs CPU: only once someone asks for it.
                settings = profile.ProfileSettings()
                self.loop_profiler = profile.Profiler({}, threading.get_ident(), settings.interval, settings.cycle)
                self.loop_profiler.start()
            return self.loop_profiler.get_profile(start=start, stop=stop, server=True)
        request = m.WorkerProfile(
            op="profile", start=start, stop=stop, key=msg.get("key"), server=msg.get("server", False)
        )
        addrs = [ws.address for ws in self.select_workers(msg.get("workers"))]
        results = await asyncio.gather(*(self._ask_worker(a, request) for a in addrs))
        if msg.get("merge_workers", True):
            return profile.merge(*(r for r in results if r is not None))
        return {a: r for a, r in zip(addrs, results, strict=True) if r is not None}

    async def handle_profile_metadata(self, comm: Comm, msg: m.GetProfileMetadata) -> dict[str, Any]:
        """The workers' sample counts per cycle, added up by cycle end (rounded to the second)."""
        request = m.WorkerProfileMetadata(op="profile_metadata", start=msg.get("start", 0), stop=msg.get("stop"))
        addrs = [ws.address for ws in self.select_workers(msg.get("workers"))]
        results = await asyncio.gather(*(self._ask_worker(a, request) for a in addrs))
        counts: dict[float, int] = {}
        keys: dict[float, dict[str, int]] = {}
        for r in results:
            if r is None:
                continue
            for t, n in r["counts"]:
                counts[round(t)] = counts.get(round(t), 0) + n
            for t, per_key in r["keys"]:
                slot = keys.setdefault(round(t), {})
                for k, n in per_key.items():
                    slot[k] = slot.get(k, 0) + n
        return {"counts": sorted(counts.items()), "keys": sorted(keys.items())}

    async def _ask_worker(self, addr: str, request: Mapping[str, Any]) -> Any:
        """A worker's reply, or None when it left or failed meanwhile (its part is missing)."""
        try:
            return await self.scheduler.rpc.call(addr, request)
        except (OSError, CommClosedError):
            logger.info("Worker %s did not answer %s", addr, request["op"])
            return None

    def handle_task_states(self, comm: Comm, msg: m.OptionalKeysRequest) -> dict[Key, str]:
        keys = msg.get("keys")
        if keys is None:
            return {k: ts.state for k, ts in self.scheduler.tasks.items()}
        return {k: self.scheduler.tasks[k].state if k in self.scheduler.tasks else "forgotten" for k in keys}

    def handle_story(self, comm: Comm, msg: m.StoryRequest) -> list[tuple[Any, ...]]:
        return [tuple(t) for t in self.scheduler.story(*msg["keys"])]

    async def handle_run_function(self, comm: Comm, msg: m.RunFunction) -> Any:
        # A user explicitly asked to run this on the scheduler.
        self.refuse_unpickling("run a function on the scheduler (run_on_scheduler)")
        func = unwrap(msg["function"])
        args = unwrap(msg.get("args")) or ()
        kwargs = unwrap(msg.get("kwargs")) or {}
        if _accepts(func, "dask_scheduler"):
            kwargs["dask_scheduler"] = self.scheduler
        result = func(*args, **kwargs)
        if inspect.isawaitable(result):
            if msg.get("wait", True):
                result = await result
            else:
                self.scheduler.spawn(_await(result))
                result = None
        return Serialize(result)

    async def handle_broadcast(self, comm: Comm, msg: m.RunFunction) -> dict[str, Any]:
        """Run a function on workers; the payload goes through unopened."""
        workers = msg.get("workers")
        selected = self.select_workers(workers)
        # With nanny=True the function runs in each worker's nanny; results stay keyed by worker.
        if msg.get("nanny", False):
            bare = [ws.address for ws in selected if not ws.nanny]
            if bare:
                raise ValueError(f"Client.run(nanny=True): these workers have no nanny: {bare}")
            targets = {ws.address: str(ws.nanny) for ws in selected}
        else:
            targets = {ws.address: ws.address for ws in selected}
        request = m.RunFunction(op="run", function=msg["function"])
        for field in ("args", "kwargs", "wait"):
            if field in msg:
                request[field] = msg[field]

        pool = self.scheduler.rpc
        send = pool.call if self.scheduler.server_settings.reuse_broadcast_comm else pool.call_once

        async def one(worker: str, addr: str) -> tuple[str, Any]:
            try:
                return worker, {"status": "OK", "result": await send(addr, request)}
            except Exception as e:
                return worker, _error_reply(e)

        results = await asyncio.gather(*(one(w, a) for w, a in targets.items()))
        return dict(results)

    async def handle_retire_workers(self, comm: Comm, msg: m.RetireWorkers) -> dict[str, Any]:
        if msg.get("key") is not None:
            self.refuse_unpickling("choose workers to retire by a key= function")
        return await self.retire_workers(msg)

    async def retire_workers(self, msg: m.RetireWorkers) -> dict[str, Any]:
        """Retire workers gracefully: the data only they hold moves to other workers first.

        The workers are chosen by ``workers`` (addresses or names) or ``names``,
        else by ``n``/``target``/``minimum``/``memory_ratio`` (see
        :meth:`workers_to_close`).  While they retire they take no new tasks.
        Each key held only by retiring workers is copied to the running worker
        holding the fewest bytes; a worker whose only copies cannot go anywhere
        (no other worker, or every other one paused or retiring, or the copies
        did not land) is not retired: it goes back to what it was (running, or
        paused) and is left out of the result, as in dask.  The others are then forgotten (``remove``;
        what they were running runs elsewhere, tasks that may run only on them
        err with :class:`~distributed.exceptions.NoValidWorkerError`) and, with
        ``close_workers``, told to close.

        Returns the retired workers' identities by address.
        """
        s = self.scheduler
        workers = msg.get("workers")
        names = msg.get("names")
        selection = {k: msg.get(k) for k in ("n", "target", "minimum", "memory_ratio", "key") if msg.get(k) is not None}
        if workers is not None and names is not None:
            raise TypeError("retire_workers: give workers= or names=, not both")
        if (workers is not None or names is not None) and selection:
            raise TypeError(
                f"retire_workers: {', '.join(sorted(selection))} choose which workers to retire; "
                "they cannot be combined with workers= or names="
            )
        if names is not None:
            wanted = {str(nm) for nm in names}
            targets = [ws for ws in s.workers.values() if str(ws.name) in wanted]
        elif workers is not None:
            targets = self.select_workers(workers)
        else:
            targets = self.workers_to_close(
                n=msg.get("n"),
                target=msg.get("target"),
                minimum=msg.get("minimum"),
                memory_ratio=msg.get("memory_ratio"),
                key=self.group_key(msg.get("key"), "retire_workers"),
            )
        # A worker already retiring (another call) is that call's to finish.
        before = {ws: ws.status for ws in dict.fromkeys(targets) if ws.status in (Status.running, Status.paused)}
        targets = list(before)
        if not targets:
            return {}
        stimulus_id = msg.get("stimulus_id") or f"retire-workers-{time.time()}"
        for ws in targets:
            ws.status = Status.closing_gracefully

        def stay(ws: WorkerState) -> None:
            # Back as it was: a paused worker stays paused until it reports it resumed.
            if before[ws] == Status.paused:
                ws.status = Status.paused
            else:
                s.send_all(s.reopen_worker_state(ws.address, stimulus_id=stimulus_id))

        moved: set[TaskState] = set()
        try:
            stuck = await self._evacuate(targets, moved)
        except BaseException:
            for ws in targets:
                stay(ws)
            raise
        retired: dict[str, Any] = {}
        gone: dict[str, Any] = {}
        for ws in targets:
            if ws in stuck:
                logger.warning("Could not retire worker %s: %s; it stays", ws.address, stuck[ws])
                stay(ws)
                continue
            retired[ws.address] = ws.identity()
            bs = s.stream_comms.get(ws.address)
            if msg.get("remove", True) and s.workers.get(ws.address) is ws:
                s.send_all(s.remove_worker_state(ws.address, stimulus_id=stimulus_id, safe=True))
                gone[ws.address] = ws.name
            if bs is not None and msg.get("close_workers", False):
                try:
                    bs.send(m.CloseWorker(op="close-worker", reason="retired"))
                except CommClosedError:
                    pass
        if gone:
            s.send_all(s.fail_tasks_restricted_to(gone, stimulus_id=stimulus_id, reason="they were retired"))
        # Clients would otherwise first try the holders that left.
        s.send_all(s.report_holders(moved))
        return retired

    def workers_to_close(
        self,
        n: int | None = None,
        target: int | None = None,
        minimum: int | None = None,
        memory_ratio: float | None = None,
        key: Callable[[WorkerState], Hashable] | None = None,
    ) -> list[WorkerState]:
        """Workers that can be closed at low cost, those holding the least data first.

        ``n`` workers (or as many as leave ``target``); without either, idle
        workers as long as those left have ``memory_ratio`` (default 2) times
        the memory limit the data held needs.  Never leaves fewer than
        ``minimum`` workers; without ``n``/``target`` a busy worker is never chosen.
        With ``key``, workers with the same ``key(ws)`` (one job's processes,
        one host) are chosen together or not at all, and count as a group for
        all of the above.
        """
        s = self.scheduler
        for what, value in (("n", n), ("target", target), ("minimum", minimum)):
            if value is not None and value < 0:
                raise ValueError(f"retire_workers({what}={value}): it must not be negative")
        if memory_ratio is not None and memory_ratio < 0:
            raise ValueError(f"retire_workers(memory_ratio={memory_ratio}): it must not be negative")
        if key is not None and not callable(key):
            raise TypeError(f"workers_to_close(key={key!r}): it must be a callable taking a WorkerState")
        live = [ws for ws in s.workers.values() if ws.status == Status.running]
        if target is not None and n is None:
            n = max(len(live) - target, 0)
        if n is None and memory_ratio is None:
            memory_ratio = 2
        held = sum(max(ws.nbytes, 0) for ws in live)
        limit = sum(ws.memory_limit for ws in live)
        groups: dict[Hashable, list[WorkerState]] = {}
        for ws in live:
            groups.setdefault(ws if key is None else key(ws), []).append(ws)
        # Idle groups first, then those holding the least data.
        order = sorted(groups.values(), key=lambda g: (any(w.processing for w in g), sum(w.nbytes for w in g)))
        chosen: list[WorkerState] = []
        for group in order:
            left = len(live) - len(chosen) - len(group)
            if minimum is not None and left < minimum:
                break
            group_limit = sum(w.memory_limit for w in group)
            if n is not None:
                if len(chosen) + len(group) > n:
                    break
            else:
                assert memory_ratio is not None
                if any(w.processing for w in group) or limit - group_limit < memory_ratio * held:
                    break
            chosen += group
            limit -= group_limit
        return chosen

    async def _evacuate(self, leaving: Sequence[WorkerState], moved: set[TaskState]) -> dict[WorkerState, str]:
        """Copy the keys only ``leaving`` workers hold to other running workers.

        Rounds repeat while tasks still finishing on the leaving workers leave
        new only copies there.  Adds the tasks copied to ``moved``.  Returns
        the leaving workers that still hold only copies, with why.
        """
        s = self.scheduler
        out = set(leaving)
        stuck: dict[WorkerState, str] = {}
        while True:
            present = [ws for ws in leaving if s.workers.get(ws.address) is ws and ws not in stuck]
            only: dict[WorkerState, list[TaskState]] = {}
            for ws in present:
                # A copy of the keys (made in C) to pass over in slices: the worker's set changes meanwhile.
                keys = [ts async for ts in _yielding(list(ws.has_what)) if ts.state == "memory" and ts.who_has <= out]
                if keys:
                    only[ws] = keys
            if not only:
                return stuck
            recipients = [ws for ws in s.workers.values() if ws not in out and ws.status == Status.running]
            if not recipients:
                why = "no other running worker can take the data only it holds"
                for ws, keys in only.items():
                    stuck[ws] = f"{why} ({len(keys)} keys)"
                return stuck
            load = {ws: max(ws.nbytes, 0) for ws in recipients}
            plan: dict[WorkerState, dict[Key, list[str]]] = {}
            placed: set[TaskState] = set()
            largest_first = itertools.chain.from_iterable(
                sorted(keys, key=_NBYTES, reverse=True) for keys in only.values()
            )
            async for ts in _yielding(largest_first):
                if ts in placed or ts.state != "memory":
                    continue  # placed already, or released while others were answered
                placed.add(ts)
                moved.add(ts)
                to = min(recipients, key=load.__getitem__)
                plan.setdefault(to, {})[ts.key] = [h.address for h in ts.who_has]
                load[to] += max(ts.nbytes, 1)
            failed = await self._copy(plan)
            # A copy whose target left meanwhile is tried again elsewhere next round;
            # one refused or not landing in time on a worker still here is not.
            refused = {k for to, k in failed if s.workers.get(to.address) is to}
            for ws, keys in only.items() if refused else ():
                n_failed = sum(ts.key in refused and ts.who_has <= out for ts in keys)
                if n_failed:
                    stuck[ws] = f"{n_failed} of the only copies it holds did not reach another worker"

    # -- replicas ------------------------------------------------------------------------------
    async def handle_replicate(self, comm: Comm, msg: m.Replicate) -> str:
        """Have ``n`` workers of the pool hold each key (all of the pool when ``n`` is None).

        Keys with fewer copies in the pool are copied, peer to peer, in rounds
        in which each holder serves at most ``branching_factor`` new copies;
        keys with more lose the extra copies of their most loaded holders in
        the pool (a holder running a task that needs the key keeps its copy, so
        a few copies more than ``n`` may remain).  Copies outside the pool are left alone.  Returns once the
        scheduler knows of every new copy.
        """
        s = self.scheduler
        n = msg.get("n")
        branching_factor = msg.get("branching_factor", 2)
        if n is not None and n < 1:
            raise ValueError(f"replicate(n={n}): n must be at least 1 (or None for every worker)")
        if branching_factor < 1:
            raise ValueError(f"replicate(branching_factor={branching_factor}): it must be at least 1")
        pool = self._known_workers(msg.get("workers"), "replicate")
        tasks = self._in_memory(msg["keys"], "replicate")
        if not pool:
            raise ValueError("replicate: there are no workers to hold copies")
        want = len(pool) if n is None else min(n, len(pool))
        members = set(pool)
        for ts in tasks:
            inside = [ws for ws in ts.who_has if ws in members]
            if len(inside) > want:
                # Holders running a task that needs the key keep theirs (drop_replicas skips them).
                order = sorted(inside, key=lambda w: (s.needed_on(ts, w), -w.nbytes))
                for ws in order[: len(inside) - want]:
                    s.send_all(s.drop_replicas(ws.address, [ts.key]))
        # Each worker is asked for a key's copy at most once per call: the active memory manager may drop
        # copies as they arrive, and asking again for them would never end.
        asked: set[tuple[WorkerState, Key]] = set()
        while True:
            live = [ws for ws in pool if s.workers.get(ws.address) is ws]
            want = len(live) if n is None else min(n, len(live))
            load = {ws: ws.nbytes for ws in live}
            plan: dict[WorkerState, dict[Key, list[str]]] = {}
            for ts in tasks:
                if ts.state != "memory":
                    continue  # released meanwhile: nothing to copy
                missing = want - sum(ws in load for ws in ts.who_has)
                if missing <= 0:
                    continue
                holders = [ws.address for ws in ts.who_has]
                count = min(missing, len(holders) * branching_factor)
                fresh = (ws for ws in live if ws not in ts.who_has and (ws, ts.key) not in asked)
                targets = sorted(fresh, key=load.__getitem__)[:count]
                for ws in targets:
                    asked.add((ws, ts.key))
                    plan.setdefault(ws, {})[ts.key] = holders
                    load[ws] += max(ts.nbytes, 0)
            if not plan:
                return "OK"
            failed = await self._copy(plan)
            if failed:
                raise RuntimeError(f"replicate: {_describe(failed)}")

    async def handle_rebalance(self, comm: Comm, msg: m.Rebalance) -> str:
        """Move keys from the workers of the pool using the most memory to those using the least.

        The plan (:func:`distributed.scheduler.rebalance.plan`) measures each worker as
        ``distributed.worker.memory.rebalance.measure`` says and moves least
        recently inserted keys from workers above the pool's mean to workers
        below it, within the ``sender-min``/``recipient-max``/``sender-recipient-gap``
        thresholds.  A key is copied first; only once the scheduler knows of the
        copy does the sender free its own, and never a last copy.  Only the
        keys asked for move (all in memory when None); copies on workers
        outside the pool are left alone, and the mean is the pool's.
        """
        s = self.scheduler
        pool = self._known_workers(msg.get("workers"), "rebalance")
        keys = msg.get("keys")
        movable = None if keys is None else set(self._in_memory(keys, "rebalance"))
        if len(pool) < 2:
            return "OK"
        settings = self.rebalance_settings
        memory = {ws: rebalance.measure(ws, settings.measure) for ws in pool}
        moves = rebalance.plan(pool, memory, settings, movable)
        plan: dict[WorkerState, dict[Key, list[str]]] = {}
        for ts, _, recipient in moves:
            plan.setdefault(recipient, {})[ts.key] = [ws.address for ws in ts.who_has]
        failed = await self._copy(plan)
        drops: dict[str, list[Key]] = {}
        for ts, sender, recipient in moves:
            if (recipient, ts.key) not in failed and recipient in ts.who_has:
                for address, freed in s.drop_replicas(sender.address, [ts.key]).free.items():
                    drops.setdefault(address, []).extend(freed)
        # As dask's: rebalance returns once the senders let their copies go.
        await asyncio.gather(*(self._free_now(address, freed) for address, freed in drops.items()))
        if failed:
            raise RuntimeError(f"rebalance: {_describe(failed)} (their data stays where it was)")
        return "OK"

    async def _free_now(self, address: str, keys: list[Key]) -> None:
        """Have the worker at ``address`` free its copies of ``keys`` (the scheduler forgot them); return once done.

        A worker that does not answer is told on its stream instead (it frees
        them when it reads that, or leaves with them).
        """
        s = self.scheduler
        request = m.FreeKeys(op="free-keys", keys=keys, stimulus_id=f"rebalance-free-{time.time()}")
        try:
            await retry(lambda: s.rpc.call(address, request), *s.comm_retry, name=f"free-keys to {address}")
        except (OSError, CommClosedError, TimeoutError) as e:
            logger.info("Worker %s did not answer free-keys (%r): telling it on its stream", address, e)
            out = Effects()
            out.free[address].extend(keys)
            s.send_all(out)

    def _known_workers(self, workers: Sequence[str] | None, what: str) -> list[WorkerState]:
        """The workers named (addresses or names), all when None; unknown ones are refused."""
        pool = self.select_workers(workers)
        if workers is not None and len(pool) < len(set(workers)):
            known = {ws.address for ws in pool} | {str(ws.name) for ws in pool}
            raise UnknownWorkerError(f"{what}: no such workers: {[w for w in workers if str(w) not in known]}")
        return list(dict.fromkeys(pool))

    def _in_memory(self, keys: Sequence[Key], what: str) -> list[TaskState]:
        """The tasks of ``keys``; each must be in memory on some worker."""
        tasks = [self.scheduler.tasks.get(k) for k in keys]
        absent = [k for k, ts in zip(keys, tasks, strict=True) if ts is None or ts.state != "memory"]
        if absent:
            raise ValueError(f"{what}: these keys are not in memory on any worker: {absent[:10]}")
        return list(dict.fromkeys(ts for ts in tasks if ts is not None))

    async def _copy(self, plan: Mapping[WorkerState, Mapping[Key, Sequence[str]]]) -> set[tuple[WorkerState, Key]]:
        """Have each worker of ``plan`` fetch its keys from the holders named; wait until the scheduler knows.

        Returns the copies that did not land: the target left or its stream
        was closed, or the copy was not reported before the deadline, which moves
        on while copies keep landing.  A key released meanwhile counts as done.
        """
        s = self.scheduler
        failed: set[tuple[WorkerState, Key]] = set()

        for ws, who_has in plan.items():
            nbytes: dict[Key, int] = {}
            async for k in _yielding(who_has):  # the plan is this call's own: nothing changes it meanwhile
                ts = s.tasks.get(k)
                if ts is not None:
                    nbytes[k] = max(ts.nbytes, 0)
            bs = s.stream_comms.get(ws.address)
            try:
                if bs is None:
                    raise CommClosedError(ws.address)
                # On the stream, behind any free-keys of the same keys sent to it before.
                bs.send(m.AcquireReplicas(op="acquire-replicas", who_has=who_has, nbytes=nbytes))
            except CommClosedError:
                failed.update((ws, k) for k in who_has)
        pending = {pair async for pair in _yielding((ws, k) for ws, who_has in plan.items() for k in who_has)}
        pending -= failed
        patience = float(parse_timedelta(dask.config.get("distributed.comm.timeouts.tcp")) or 30)
        deadline = time.monotonic() + patience
        while pending:
            started = time.monotonic()
            landed = set()
            async for ws, key in _yielding(list(pending)):
                ts = s.tasks.get(key)
                if s.workers.get(ws.address) is not ws:
                    failed.add((ws, key))
                    landed.add((ws, key))
                elif ts is None or ts.state != "memory" or ws in ts.who_has:
                    landed.add((ws, key))
            if landed:
                pending -= landed
                deadline = time.monotonic() + patience
            elif time.monotonic() > deadline:
                failed |= pending
                break
            if pending:
                # The copies are reported on the workers' streams (add-keys): look again shortly, and
                # for a long list no sooner than it took to go through, so that looking takes at most
                # half of the scheduler's time.
                await asyncio.sleep(max(0.01, time.monotonic() - started))
        return failed

    async def handle_restart(self, comm: Comm, msg: m.Restart) -> str:
        """Cancel every future of every client, then replace every worker process through its nanny.

        As in dask, a worker without a nanny is closed, not restarted (whatever
        deployed it may start another); with ``wait_for_workers`` the restart
        then waits for as many workers as there were, and fails with a
        ``TimeoutError`` saying how many came back.
        """
        s = self.scheduler
        timeout = float(msg.get("timeout") or 30)
        deadline = time.monotonic() + timeout
        workers = list(s.workers.values())
        wait = msg.get("wait_for_workers", True)
        reason = "The scheduler restarted its workers (Client.restart)"
        stimulus_id = f"restart-{time.time()}"
        for cs in list(s.clients.values()):
            keys = [ts.key for ts in cs.wants_what]
            if keys:
                cancel = m.CancelKeys(op="cancel-keys", client=cs.client_key, keys=keys, force=True, reason=reason)
                s.send_all(s.cancel_keys(cancel, stimulus_id))
        if s.plugins:
            s.call_plugins("restart", s)
        bare = [ws for ws in workers if not ws.nanny]
        if bare:
            logger.warning("Workers %s have no nanny: closed, not restarted", [ws.address for ws in bare])
            for ws in bare:
                self._close_worker(ws, "restart", stimulus_id)
        await self._restart([ws for ws in workers if ws.nanny], timeout, wait, reason)
        if wait and bare:
            try:
                await wait_for(s.wait_for_workers(len(workers)), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                raise TimeoutError(
                    f"Waited for {len(workers)} worker(s) to reconnect after restarting, but after {timeout} s only "
                    f"{len(s.workers)} have; workers without a nanny come back only if something restarts them "
                    "(or pass wait_for_workers=False)"
                ) from None
        return "OK"

    def _close_worker(self, ws: WorkerState, reason: str, stimulus_id: str) -> None:
        """Forget worker ``ws`` and tell it to close."""
        s = self.scheduler
        bs = s.stream_comms.get(ws.address)
        if s.workers.get(ws.address) is ws:
            s.send_all(s.remove_worker_state(ws.address, stimulus_id=stimulus_id))
        if bs is not None:
            try:
                bs.send(m.CloseWorker(op="close-worker", reason=reason))
            except CommClosedError:
                pass

    async def handle_restart_workers(self, comm: Comm, msg: m.RestartWorkers) -> dict[str, str]:
        """Replace these workers' processes through their nannies; their tasks run elsewhere or again."""
        workers = self.select_workers(msg["workers"])
        if len(workers) < len(set(msg["workers"])):
            known = {ws.address for ws in workers} | {str(ws.name) for ws in workers}
            raise ValueError(f"No such workers: {[w for w in msg['workers'] if str(w) not in known]}")
        _need_nannies(workers)
        await self._restart(workers, float(msg.get("timeout") or 30), True, "Client.restart_workers")
        return {ws.address: "OK" for ws in workers}

    async def _restart(self, workers: list[WorkerState], timeout: float, wait: bool, reason: str) -> None:
        # Each old process gets part of the time to close cleanly before it is killed.
        request = m.NannyRestart(op="restart", timeout=min(timeout / 4, 2.0), reason=reason, wait=wait)
        calls = [self.scheduler.rpc.call(ws.nanny, request) for ws in workers if ws.nanny]
        try:
            await wait_for(asyncio.gather(*calls), timeout)
        except TimeoutError:
            raise TimeoutError(f"{len(calls)} worker(s) did not all restart within {timeout} s") from None

    async def handle_benchmark_hardware(self, comm: Comm, msg: m.BenchmarkHardware) -> dict[str, dict[str, float]]:
        """The workers' mean memory, disk and network bandwidths (see :mod:`distributed.scheduler.hardware`)."""
        workers = [ws.address for ws in self.scheduler.workers.values() if ws.status == Status.running]
        return await benchmark_hardware(self.scheduler.rpc, workers, float(msg.get("duration", 1.0)))

    async def handle_relay_get_data(self, comm: Comm, msg: m.RelayGetData) -> m.RelayReply:
        """Fetch from a worker for a client that does not connect to workers (see :mod:`.relay`)."""
        return await relay_to_worker(self.scheduler, msg["worker"], m.GetData(op="get_data", keys=msg["keys"]))

    async def handle_relay_update_data(self, comm: Comm, msg: m.RelayUpdateData) -> m.RelayReply:
        """Put data on a worker for a client that does not connect to workers (see :mod:`.relay`)."""
        return await relay_to_worker(
            self.scheduler, msg["worker"], m.WorkerUpdateData(op="update_data", data=msg["data"])
        )

    async def handle_wait_for_workers(self, comm: Comm, msg: m.WaitForWorkers) -> str:
        await self.scheduler.wait_for_workers(msg["n_workers"])
        return "OK"

    async def handle_register_plugin(self, comm: Comm, msg: m.RegisterPlugin) -> str:
        self.refuse_unpickling("register a scheduler plugin")
        plugin = unwrap(msg["plugin"])
        await self.scheduler.add_plugin(plugin, name=msg["name"], idempotent=msg.get("idempotent", False))
        return "OK"

    def handle_unregister_plugin(self, comm: Comm, msg: m.UnregisterPlugin) -> str:
        self.scheduler.remove_plugin(msg["name"])
        return "OK"

    async def handle_register_worker_plugin(self, comm: Comm, msg: m.RegisterWorkerPlugin) -> dict[str, Any]:
        """Keep a worker plugin for workers that join later, and set it up on the current ones.

        Returns each current worker's reply (``{"status": "OK"}`` or the error its
        ``setup`` raised).  With ``idempotent``, a name already registered is left as it is.
        """
        name = msg["name"]
        if msg.get("idempotent", False) and name in self.worker_plugins:
            return {}
        self.worker_plugins[name] = msg["plugin"]
        return await self._on_workers(m.PluginAdd(op="plugin-add", plugin=msg["plugin"], name=name))

    async def handle_unregister_worker_plugin(self, comm: Comm, msg: m.UnregisterWorkerPlugin) -> dict[str, Any]:
        """Forget a worker plugin and tear it down on the current workers."""
        name = msg["name"]
        if self.worker_plugins.pop(name, None) is None:
            raise ValueError(f"No worker plugin named {name!r}")
        return await self._on_workers(m.PluginRemove(op="plugin-remove", name=name))

    async def _on_workers(self, request: m.PluginAdd | m.PluginRemove) -> dict[str, Any]:
        async def one(addr: str) -> tuple[str, Any]:
            try:
                await self.scheduler.rpc.call(addr, request)
                return addr, {"status": "OK"}
            except Exception as e:
                return addr, _error_reply(e)

        return dict(await asyncio.gather(*(one(a) for a in list(self.scheduler.workers))))

    def handle_register_nanny(self, comm: Comm, msg: m.RegisterNanny) -> dict[str, m.Payload]:
        """A starting nanny's request: the nanny plugins registered so far."""
        self.nannies.add(msg["address"])
        return dict(self.nanny_plugins)

    async def handle_register_nanny_plugin(self, comm: Comm, msg: m.RegisterNannyPlugin) -> dict[str, Any]:
        """Keep a nanny plugin for nannies that start later, and set it up on the current ones.

        Returns each current nanny's reply, by its worker's address (``{"status": "OK"}``
        or the error its ``setup`` raised, as the nanny sent it).  With ``idempotent``,
        a name already registered is left as it is.
        """
        name = msg["name"]
        if msg.get("idempotent", False) and name in self.nanny_plugins:
            return {}
        self.nanny_plugins[name] = msg["plugin"]
        return await self._on_nannies(m.NannyPluginAdd(op="plugin-add", plugin=msg["plugin"], name=name))

    async def handle_unregister_nanny_plugin(self, comm: Comm, msg: m.UnregisterNannyPlugin) -> dict[str, Any]:
        """Forget a nanny plugin and tear it down on the current nannies."""
        name = msg["name"]
        if self.nanny_plugins.pop(name, None) is None:
            raise ValueError(f"No nanny plugin named {name!r}")
        return await self._on_nannies(m.NannyPluginRemove(op="plugin-remove", name=name))

    async def _on_nannies(self, request: m.NannyPluginAdd | m.NannyPluginRemove) -> dict[str, Any]:
        by_nanny = {ws.nanny: ws.address for ws in self.scheduler.workers.values() if ws.nanny}
        # Also nannies without a worker at the moment (starting, or replacing theirs).
        targets = [*by_nanny, *(self.nannies - by_nanny.keys())]

        pool = self.scheduler.rpc

        async def one(nanny: str) -> tuple[str | None, Any]:
            try:
                if nanny not in by_nanny:
                    # Maybe gone for good: do not wait out the whole connect timeout on it.
                    pool.reuse(nanny, await wait_for(pool.connect(nanny), _PENDING_NANNY_CONNECT))
                # The nanny replies with its plugin's outcome as data: the scheduler never opens it.
                return by_nanny.get(nanny, nanny), await pool.call(nanny, request)
            except (OSError, CommClosedError, TimeoutError) as e:
                if nanny not in by_nanny:
                    self.nannies.discard(nanny)  # gone, with no worker: forgotten quietly
                    return None, None
                return by_nanny[nanny], error_message(e)

        replies = await asyncio.gather(*(one(a) for a in targets))
        return {addr: reply for addr, reply in replies if addr is not None}


def _error_reply(exc: Exception) -> Mapping[str, Any]:
    """The error reply to pass on for ``exc``: a remote one as it came, when it was left unopened."""
    if isinstance(exc, RemoteError) and exc.reply is not None:
        return exc.reply
    return error_message(exc)


def _describe(failed: Iterable[tuple[WorkerState, Key]]) -> str:
    pairs = sorted((str(k), ws.address) for ws, k in failed)
    shown = ", ".join(f"{k} -> {a}" for k, a in pairs[:10])
    return f"{len(pairs)} copies did not land ({shown})"


def _need_nannies(workers: Sequence[WorkerState]) -> None:
    """Refuse to restart workers without a nanny: nothing would start them again."""
    bare = [ws.address for ws in workers if not ws.nanny]
    if bare:
        raise ValueError(f"Restarting workers requires a nanny; these workers have none: {bare}")


def _accepts(func: Any, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


async def _await(aw: Any) -> None:
    await aw


def _is_plain(value: object) -> bool:
    """Whether ``value`` is a str, number, bool or None, or a tuple/list of such values."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, tuple | list):
        return all(_is_plain(v) for v in value)
    return False


async def _yielding(items: Iterable[T]) -> AsyncIterator[T]:
    """``items``, yielding to the event loop every :data:`COPY_CHECK_SLICE` of them.

    For passes over the keys of workers that retire with hundreds of thousands:
    the scheduler answers others in between.
    """
    for i, item in enumerate(items):
        if i and i % COPY_CHECK_SLICE == 0:
            await yield_after_io()
        yield item
