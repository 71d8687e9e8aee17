"""Turning what a user submits into tasks, and tasks into a :class:`GraphPlan`.

``submit``, ``map``, ``compute``, ``persist`` and ``get`` all end in the same
place: a mapping of keys to dask ``GraphNode`` tasks, their priorities (from
``dask.order`` for collections), their annotations (per task from the
collection, plus those of the call and of ``dask.annotate``), and the keys the
client wants futures for.  This module makes those, and the
:class:`~distributed.client.graph_parts.GraphPlan` that cuts them into
``update-graph`` messages.  It does no I/O and holds no state: everything here
is tested without a cluster.

Invariants:

- A plan lists every task after the tasks it depends on (so the scheduler can
  take a graph part by part); a graph no larger than one part keeps its order.
- Keys of pure calls are tokens of the function and its arguments (equal
  calls share a key, and the cluster computes them once); impure calls get
  keys nobody else makes.
- Annotations that are callables (dask's per-key form) never reach the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.config
from dask._task_spec import GraphNode, Task, convert_legacy_graph, parse_input
from dask._task_spec import cull as cull_graph
from dask.base import collections_to_expr, tokenize
from dask.core import validate_key
from dask.utils import funcname

from distributed.client.future import Future
from distributed.client.graph_parts import GraphPlan, dependencies_first
from distributed.dask_api import (
    as_delayed,
    expr_keys,
    finalize_compute,
    flatten_keys,
    get_annotations,
    is_dask_collection,
)
from distributed.gc_pause import collector_paused
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.shuffle._core import describe_shuffles

__all__ = [
    "CollectionGraph",
    "TaskOptions",
    "actor_keys",
    "expr_plan",
    "for_compute",
    "for_persist",
    "graph_chunk_size",
    "graph_plan",
    "keys_of",
    "make_task",
    "map_keys",
    "map_plan",
    "materialize",
    "pack_keys",
    "submit_key",
    "task_annotations",
    "worker_list",
]


def graph_chunk_size() -> int:
    """Tasks per ``update-graph`` message (``distributed.client.graph-chunk-size``, at least 1)."""
    return max(int(dask.config.get("distributed.client.graph-chunk-size", 1000)), 1)


def worker_list(workers: Any) -> list[str] | None:
    """Workers named by one address/name or several, as a list of strings (None for any worker)."""
    if workers is None:
        return None
    if isinstance(workers, (str, int)):
        return [str(workers)]
    return [str(w) for w in workers]


def task_annotations(workers: Any, resources: Any, retries: Any, allow_other_workers: Any) -> dict[str, Any]:
    """The annotations of every task of one call: those of ``dask.annotate`` and the call's own.

    Examples
    --------
    >>> task_annotations(["tcp://a:1"], None, 2, False)
    {'workers': ['tcp://a:1'], 'retries': 2}
    """
    ann: dict[str, Any] = get_annotations()
    if workers is not None:
        ann["workers"] = worker_list(workers)
    if resources:
        ann["resources"] = dict(resources)
    if retries:
        ann["retries"] = int(retries)
    if allow_other_workers:
        ann["allow_other_workers"] = True
    return {k: v for k, v in ann.items() if not callable(v)}


@dataclass(frozen=True)
class TaskOptions:
    """Where and how the tasks of one ``compute``/``persist``/``get`` call run."""

    workers: Any = None
    resources: Any = None
    retries: int | None = None
    allow_other_workers: bool = False
    priority: int = 0
    #: Keys whose tasks make actors (``True``: every key futures are made for).
    actors: bool | Collection[Key] = False

    def annotations(self) -> dict[str, Any]:
        """The annotations these options give every task (see :func:`task_annotations`)."""
        return task_annotations(self.workers, self.resources, self.retries, self.allow_other_workers)


def actor_keys(actors: Any) -> bool | Collection[Key]:
    """What ``actors=`` of ``compute``/``persist``/``get`` names: every wanted key (``True``), none, or these.

    A list or set gives several; a dask collection (a delayed object), or a
    future, gives its keys; anything else is one key.
    """
    if actors is None or actors is False:
        return False
    if actors is True:
        return True
    keys: list[Key] = []
    for item in list(actors) if isinstance(actors, (list, set, frozenset)) else [actors]:
        if is_dask_collection(item):
            keys.extend(flatten_keys(item.__dask_keys__()))
        elif isinstance(item, Future):
            keys.append(item.key)
        else:
            keys.append(item)
    for k in keys:
        validate_key(k)
    return keys


#: Argument types ``parse_input`` returns unchanged (no futures can hide in them).
_PLAIN_ARGS: frozenset[type] = frozenset({int, float, str, bytes, bool, type(None)})


def make_task(key: Key, func: Callable[..., Any], args: Iterable[Any], kwargs: Mapping[str, Any]) -> Task:
    """A Task whose futures, also inside lists and dicts, are dependencies."""
    if not kwargs:
        args = tuple(args)
        plain = _PLAIN_ARGS
        for a in args:
            if type(a) not in plain:
                break
        else:
            # The common map over numbers or strings: nothing to parse.
            return Task(key, func, *args)
    kw: dict[str, Any] = {k: parse_input(v) for k, v in kwargs.items()}
    return Task(key, func, *(parse_input(a) for a in args), **kw)


def submit_key(func: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], pure: bool) -> str:
    """The key of ``submit(func, *args, **kwargs)``: a token of the call when pure, else unique."""
    if pure:
        return f"{funcname(func)}-{tokenize(func, kwargs, *args)}"
    return f"{funcname(func)}-{uuid.uuid4()}"


def map_keys(
    func: Callable[..., Any],
    seqs: list[list[Any]],
    kwargs: Mapping[str, Any],
    key: str | list[Key] | None,
    pure: bool,
) -> list[Key]:
    """The keys of ``map(func, *seqs, **kwargs)``, one per element of the shortest sequence.

    ``key`` is either the keys themselves (a list) or a prefix replacing the
    function's name.
    """
    if isinstance(key, list):
        return list(key)
    prefix = key or funcname(func)
    if pure:
        ftoken = tokenize(func, kwargs)
        return [f"{prefix}-{tokenize(ftoken, *args)}" for args in zip(*seqs)]
    # One random token per call and a counter: as unique as a token per
    # task, at a fraction of the cost for a long map.
    token = uuid.uuid4().hex
    return [f"{prefix}-{token}-{i}" for i in range(min(len(s) for s in seqs))]


def graph_plan(
    client_id: str,
    tasks: Mapping[Key, GraphNode],
    keys: list[Key],
    *,
    priorities: Mapping[Key, int] | None = None,
    annotations: Mapping[str, Mapping[Key, Any]] | None = None,
    global_annotations: Mapping[str, Any] | None = None,
    user_priority: int = 0,
    actors: bool | Collection[Key] = False,
    shuffles: Sequence[m.ShuffleDescription] = (),
) -> GraphPlan:
    """The plan of a graph of GraphNodes, futures wanted for ``keys``.

    A graph larger than one part is put in dependency order (each task after
    its dependencies), so that its parts can be sent one by one.
    """
    chunk_size = graph_chunk_size()
    order = dependencies_first(tasks, priorities) if len(tasks) > chunk_size else list(tasks)
    return GraphPlan(
        client_id,
        order,
        tasks.__getitem__,
        keys,
        chunk_size=chunk_size,
        priorities=priorities,
        annotations=annotations,
        global_annotations=global_annotations,
        user_priority=user_priority,
        actors=actors,
        shuffles=shuffles,
    )


def map_plan(
    client_id: str,
    func: Callable[..., Any],
    keys: list[Key],
    seqs: list[list[Any]],
    kwargs: Mapping[str, Any],
    *,
    batch_size: int | None,
    global_annotations: Mapping[str, Any],
    user_priority: int,
    actors: bool = False,
) -> GraphPlan:
    """The plan of ``map``: one independent task per key, every one wanted.

    Tasks are made lazily, per part, from the arguments (the background
    thread making later parts calls back here).
    """
    args_of = dict(zip(keys, zip(*seqs)))

    def node(k: Key) -> GraphNode:
        return make_task(k, func, args_of[k], kwargs)

    return GraphPlan(
        client_id,
        list(args_of),
        node,
        keys,
        chunk_size=max(int(batch_size), 1) if batch_size else graph_chunk_size(),
        all_wanted=True,
        global_annotations=global_annotations,
        user_priority=user_priority,
        actors=actors,
    )


def materialize(expr: Any) -> tuple[dict[Key, GraphNode], dict[str, dict[Key, Any]]]:
    """The tasks of an expression and their per-task annotations."""
    dsk = expr.__dask_graph__()
    try:
        annotations = expr.__dask_annotations__()
    except AttributeError:
        annotations = {}
    return convert_legacy_graph(dict(dsk)), annotations or {}


def expr_plan(client_id: str, expr: Any, keys: list[Key], options: TaskOptions, *, cull: bool = False) -> GraphPlan:
    """The plan of an expression's graph, futures wanted for ``keys``.

    With ``cull``, only the tasks ``keys`` need are kept.  Priorities come from
    ``dask.order``.  The collector is paused throughout (see
    :mod:`distributed.client.gc_pause`): the graph, its culled copy and its
    order are alive until sent, and a full collection meanwhile took a fifth of
    the time of planning 16,383 tasks in a process that also ran a cluster.
    """
    with collector_paused():
        return _expr_plan(client_id, expr, keys, options, cull)


def _expr_plan(client_id: str, expr: Any, keys: list[Key], options: TaskOptions, cull: bool) -> GraphPlan:
    graph, annotations = materialize(expr)
    if cull and keys:
        graph = cull_graph(graph, keys)
    priorities = dask.order.order(graph) if graph else {}
    return graph_plan(
        client_id,
        graph,
        keys,
        priorities={k: int(v) if isinstance(v, int) else int(getattr(v, "priority", 0)) for k, v in priorities.items()},
        annotations=annotations,
        global_annotations=options.annotations(),
        user_priority=int(options.priority or 0),
        actors=options.actors,
        shuffles=describe_shuffles(graph),
    )


@dataclass
class CollectionGraph:
    """The dask collections among what ``compute`` or ``persist`` was given, as one expression.

    Attributes
    ----------
    items
        What was given, as a list (one item for a single argument).
    single
        Whether one argument was given, not a container of them.
    positions
        Where in ``items`` the dask collections are.
    expr
        Their one expression (None when there is no collection).
    keys
        The keys futures are made for, flat, collection after collection.
    per_collection
        The keys of each collection (for ``persist`` to rebuild them).
    """

    items: list[Any]
    single: bool
    positions: list[int]
    expr: Any = None
    keys: list[Key] | None = None
    per_collection: list[list[Key]] | None = None

    def place(self, futures: list[Future]) -> Any:
        """``items`` with each collection replaced by its future; one item when ``single``."""
        out = list(self.items)
        for i, f in zip(self.positions, futures):
            out[i] = f
        return out[0] if self.single else out

    def rebuild(self, futures: list[Future]) -> Any:
        """``items`` with each collection rebuilt on the futures of its keys; one item when ``single``."""
        assert self.keys is not None and self.per_collection is not None
        by_key = dict(zip(self.keys, futures))
        out = list(self.items)
        for i, ks in zip(self.positions, self.per_collection):
            rebuild, state = self.items[i].__dask_postpersist__()
            out[i] = rebuild({k: by_key[k] for k in ks}, *state)
        return out[0] if self.single else out


def for_compute(collections: Any, optimize_graph: bool, traverse: bool) -> CollectionGraph:
    """What ``compute`` submits: each collection finalised to one key.

    A list, tuple or set gives one entry per element; an iterator is read
    into a list.  With ``traverse``, containers among the entries become one
    delayed collection each (computed to the container of their results).
    """
    if isinstance(collections, Iterator):
        collections = list(collections)
    single = not isinstance(collections, (list, tuple, set))
    seq = [collections] if single else list(collections)
    if traverse:
        seq = [as_delayed(c) if isinstance(c, (list, tuple, set, frozenset, dict, Iterator)) else c for c in seq]
    graph = CollectionGraph(seq, single, [i for i, c in enumerate(seq) if is_dask_collection(c)])
    if graph.positions:
        expr = collections_to_expr([seq[i] for i in graph.positions], optimize_graph)
        graph.expr = finalize_compute(expr).optimize()
        graph.keys = flatten_keys(expr_keys(graph.expr))
    return graph


def for_persist(collections: Any, optimize_graph: bool) -> CollectionGraph:
    """What ``persist`` submits: every key of each collection (a list or tuple gives one entry per element)."""
    single = not isinstance(collections, (list, tuple))
    seq = [collections] if single else list(collections)
    graph = CollectionGraph(seq, single, [i for i, c in enumerate(seq) if is_dask_collection(c)])
    if graph.positions:
        colls = [seq[i] for i in graph.positions]
        graph.expr = collections_to_expr(colls, optimize_graph).optimize()
        per_collection = [flatten_keys(k) for k in expr_keys(graph.expr)]
        if len(per_collection) != len(colls):
            per_collection = [flatten_keys(c.__dask_keys__()) for c in colls]
        graph.per_collection = per_collection
        graph.keys = [k for ks in per_collection for k in ks]
    return graph


def pack_keys(keys: Any, by_key: Mapping[Key, Future]) -> Any:
    """The futures of ``keys`` (a key, or nested lists of keys) in the same nesting."""
    if isinstance(keys, list):
        return [pack_keys(k, by_key) for k in keys]
    return by_key[keys]


def keys_of(keys: Any) -> Collection[Key]:
    """The keys of ``get(dsk, keys)``: flat, in order."""
    return flatten_keys(keys) if isinstance(keys, list) else [keys]
