"""A client's graph as ``update-graph`` messages, cut into parts.

The scheduler ingests a large graph part by part (see
``distributed.client.graph-chunk-size``), so that it answers others between
parts and starts running the first tasks while later ones are on their way.

Serialising a part costs the client about ten microseconds a task.  To keep
``client.map`` of a hundred thousand tasks from making its caller wait for all
of that, only the first part is serialised in the calling thread (so that a
function that cannot be pickled raises where it was submitted); a background
thread serialises the rest, and the client's outbox sends each part as soon as
it is ready, ahead of anything posted after the graph.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import warnings
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import dask.config
from dask._task_spec import GraphNode
from dask.utils import format_bytes, parse_bytes

from distributed.client.gc_pause import paused_gc
from distributed.client.source_code import computation_code
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import FunctionCache, Serialize, Serialized, serialize_task

logger = logging.getLogger(__name__)

#: Tasks in the first part of a graph cut into parts (at most the part size).
_FIRST_PART = 500

__all__ = ["GraphPlan", "PendingParts", "dependencies_first", "start_background_parts"]


class GraphPlan:
    """How one graph is cut into ``update-graph`` messages.

    Parameters
    ----------
    client_id
        The client the messages come from.
    order
        The graph's keys, every one after the keys it depends on.
    node
        The task of a key; called once per key, maybe in another thread.
    keys
        The keys the client wants (it holds futures for them).
    chunk_size
        Tasks per message.
    all_wanted
        Every task is wanted and every wanted key is a task (``client.map``):
        no part needs holding until the last arrives.
    priorities
        Order of each task among the graph's (default: its place in ``order``).
    annotations, global_annotations, user_priority
        Scheduling information, as in ``update-graph``.
    actors
        Keys whose tasks make actors (``True``: every wanted key).
    shuffles
        The P2P shuffles of the graph, sent with its first part.
    """

    def __init__(
        self,
        client_id: str,
        order: Sequence[Key],
        node: Callable[[Key], GraphNode],
        keys: Sequence[Key],
        *,
        chunk_size: int,
        all_wanted: bool = False,
        priorities: Mapping[Key, int] | None = None,
        annotations: Mapping[str, Mapping[Key, Any]] | None = None,
        global_annotations: Mapping[str, Any] | None = None,
        user_priority: int = 0,
        actors: bool | Collection[Key] = False,
        shuffles: Sequence[m.ShuffleDescription] = (),
    ) -> None:
        self.client_id = client_id
        self.shuffles = list(shuffles)
        self.actors: frozenset[Key]
        if actors is True:
            self.actors = frozenset(keys)
        elif actors is False:
            self.actors = frozenset()
        else:
            self.actors = frozenset(actors)
        self.node = node
        self.keys = keys
        self.all_wanted = all_wanted
        self.priorities = priorities
        self.global_annotations = dict(global_annotations or {})
        self.user_priority = user_priority
        # A short first part: the scheduler starts on it while the caller
        # is still getting its futures back.
        first = chunk_size if len(order) <= chunk_size else min(chunk_size, max(_FIRST_PART, chunk_size // 10))
        self.chunks = [order[:first]] + [order[i : i + chunk_size] for i in range(first, len(order), chunk_size)]
        #: Tasks in the whole graph: a large one has the collector paused while each part is made, however
        #: small the parts (see :mod:`distributed.client.gc_pause`).
        self.ntasks = len(order)
        # Parts of a graph whose intermediate tasks nobody wants yet are held
        # by the scheduler until the last part arrives; see Scheduler.update_graph.
        self.graph_id = uuid.uuid4().hex if len(self.chunks) > 1 and not all_wanted else None
        self._offsets = [0]
        for c in self.chunks[:-1]:
            self._offsets.append(self._offsets[-1] + len(c))
        self._wanted: set[Key] | None = None
        self._per_key: dict[Key, dict[str, Any]] = defaultdict(dict)
        for name, values in (annotations or {}).items():
            for k, v in values.items():
                self._per_key[k][name] = v
        self._functions: FunctionCache = {}
        #: Hand the task objects over as they are: the scheduler runs in this process, so its
        #: workers here get the same objects and nothing is pickled (as with dask's threads).
        self.live_specs = False
        #: Bytes of the serialised tasks made so far.
        self.nbytes = 0
        #: Past this many bytes the graph is warned about, once (``distributed.admin.large-graph-warning-threshold``).
        self.warn_above = large_graph_threshold()
        #: The caller's code, for the scheduler's computations (``distributed.diagnostics.computations.nframes``).
        self.code = computation_code()

    def __len__(self) -> int:
        return len(self.chunks)

    def message(self, i: int) -> m.UpdateGraph:
        """The message of part ``i`` (call in order: parts share a function cache)."""
        chunk = self.chunks[i]
        final = i == len(self.chunks) - 1
        with paused_gc(self.ntasks):
            specs = self._task_specs(chunk, self._offsets[i])
        if self.warn_above is not None and self.nbytes > self.warn_above:
            self.warn_above = None
            warnings.warn(
                f"Sending a large graph: its tasks take {format_bytes(self.nbytes)} serialised, which slows "
                "submitting and scheduling it. Load large data with dask itself (dask.array, dask.dataframe, "
                "...), or scatter it once and pass the futures, rather than embedding it in the tasks.",
                UserWarning,
                stacklevel=2,
            )
        if self.all_wanted:
            chunk_keys = list(chunk)
        else:
            if self._wanted is None:
                self._wanted = set(self.keys)
            chunk_keys = [k for k in chunk if k in self._wanted]
            if final:
                # Wanted keys that are not tasks of this graph (held futures).
                in_graph = {k for c in self.chunks for k in c}
                chunk_keys.extend(k for k in dict.fromkeys(self.keys) if k not in in_graph)
        msg = m.UpdateGraph(
            op="update-graph",
            client=self.client_id,
            tasks=list(specs.items()),
            keys=chunk_keys,
            priority=self.user_priority,
            stimulus_id=f"update-graph-{time.time()}",
        )
        if self.graph_id is not None:
            msg["graph"] = self.graph_id
            msg["final"] = final
        if self.global_annotations:
            msg["annotations"] = dict(self.global_annotations)
        if i == 0 and self.shuffles:
            msg["shuffles"] = self.shuffles
        if i == 0 and self.code:
            msg["code"] = self.code
        return msg

    def abandon_message(self) -> m.UpdateGraph | None:
        """The message that ends the graph early, releasing what the scheduler holds."""
        if self.graph_id is None:
            return None
        return m.UpdateGraph(
            op="update-graph",
            client=self.client_id,
            tasks=[],
            keys=[],
            graph=self.graph_id,
            final=True,
            stimulus_id=f"update-graph-abandoned-{time.time()}",
        )

    def wanted_in(self, first: int) -> list[Key]:
        """Wanted keys of the tasks in parts ``first`` onward."""
        later = [k for c in self.chunks[first:] for k in c]
        if self.all_wanted:
            return later
        if self._wanted is None:
            self._wanted = set(self.keys)
        return [k for k in later if k in self._wanted]

    def _task_specs(self, chunk: Sequence[Key], offset: int) -> dict[Key, m.TaskSpec]:
        """One entry per task, its run_spec serialised now (unless :attr:`live_specs`).

        Without ``priorities``, a task's order is its position in the graph.

        Serialising here, not when the stream writes, means an object that
        cannot be pickled raises here instead of breaking the stream.
        """
        specs: dict[Key, m.TaskSpec] = {}
        priorities = self.priorities
        per_key = self._per_key
        functions = self._functions
        actors = self.actors
        make_node = self.node
        live = self.live_specs
        nbytes = 0
        for j, key in enumerate(chunk, offset):
            node = make_node(key)
            deps = node.dependencies
            if live:
                run_spec: Serialize | Serialized = Serialize(node)
            else:
                run_spec = serialize_task(node, functions)
                nbytes += sum(map(len, run_spec.frames))
            spec = m.TaskSpec(
                run_spec=run_spec,
                dependencies=list(deps) if deps else (),
                order=priorities.get(key, 0) if priorities is not None else j,
            )
            ann = per_key.get(key)
            if ann:
                spec["annotations"] = ann
            if actors and key in actors:
                spec["actor"] = True
            specs[key] = spec
        self.nbytes += nbytes
        return specs


def large_graph_threshold() -> int | None:
    """Bytes of serialised tasks past which a graph is warned about; None: never."""
    value = dask.config.get("distributed.admin.large-graph-warning-threshold")
    return parse_bytes(value) if value else None


class PendingParts:
    """Messages of a graph that a background thread is still making.

    The client's outbox holds one of these where the graph's later parts
    belong; it sends ``ready`` messages as they come and moves past only
    once ``done``.  The making thread only appends to ``ready`` and sets
    ``done`` after its last append; the loop only pops: no lock is needed.
    """

    __slots__ = ("ready", "done", "stop")

    def __init__(self) -> None:
        self.ready: deque[m.UpdateGraph] = deque()
        self.done = False
        #: Set when the client closes: the thread stops after the current part.
        self.stop = False


def start_background_parts(
    plan: GraphPlan,
    parts: PendingParts,
    kick: Callable[[], None],
    fail: Callable[[list[Key], BaseException], None],
) -> threading.Thread:
    """Make parts ``1..`` of ``plan`` in a new daemon thread.

    Each message is appended to ``parts.ready`` and ``kick`` is called to have
    the outbox send it.  If a part cannot be made, the wanted keys of it and of
    later parts are passed to ``fail`` with the exception, and the scheduler is
    told the graph ends there.
    """

    def run() -> None:
        # Paused for all the parts, not each in turn: re-enabled between parts, the collector examined each
        # part's objects (kept until sent) and, as they piled up, went through all the futures again.
        try:
            with paused_gc(plan.ntasks):
                for i in range(1, len(plan)):
                    if parts.stop:
                        break
                    try:
                        msg = plan.message(i)
                    except Exception as e:
                        logger.debug("Part %d of a graph could not be serialised", i, exc_info=True)
                        fail(plan.wanted_in(i), e)
                        end = plan.abandon_message()
                        if end is not None:
                            parts.ready.append(end)
                        break
                    parts.ready.append(msg)
                    kick()
        finally:
            parts.done = True
            kick()

    thread = threading.Thread(target=run, name="graph-parts", daemon=True)
    thread.start()
    return thread


def dependencies_first(tasks: Mapping[Key, GraphNode], priorities: Mapping[Key, int] | None) -> list[Key]:
    """The graph's keys in an order where every task comes after its dependencies."""
    order = sorted(tasks, key=lambda k: (priorities or {}).get(k, 0))
    seen: set[Key] = set()
    for k in order:
        for dep in tasks[k].dependencies:
            if dep in tasks and dep not in seen:
                return _toposort(tasks)
        seen.add(k)
    return order


def _toposort(tasks: Mapping[Key, GraphNode]) -> list[Key]:
    result: list[Key] = []
    done: set[Key] = set()
    for root in tasks:
        if root in done:
            continue
        stack: list[tuple[Key, bool]] = [(root, False)]
        while stack:
            k, expanded = stack.pop()
            if k in done:
                continue
            if expanded:
                done.add(k)
                result.append(k)
                continue
            stack.append((k, True))
            for dep in tasks[k].dependencies:
                if dep in tasks and dep not in done:
                    stack.append((dep, False))
    return result
