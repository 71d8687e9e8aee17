"""Turning submissions and collections into tasks and graph plans, without a cluster."""

from __future__ import annotations

import operator
from typing import Any

import dask.array as da
import dask.config
from dask.base import annotate
from dask.delayed import delayed

from distributed.client.graphs import (
    TaskOptions,
    expr_plan,
    for_compute,
    for_persist,
    graph_plan,
    make_task,
    map_keys,
    map_plan,
    pack_keys,
    submit_key,
    task_annotations,
    worker_list,
)
from distributed.dask_api import graph_expr
from distributed.protocol.messages import Key
from distributed.protocol.serialize import unwrap
from distributed.utils_test import inc


def test_pure_keys_are_tokens_of_the_call() -> None:
    assert submit_key(inc, (1,), {}, pure=True) == submit_key(inc, (1,), {}, pure=True)
    assert submit_key(inc, (1,), {}, pure=True) != submit_key(inc, (2,), {}, pure=True)
    assert submit_key(inc, (1,), {}, pure=True).startswith("inc-")
    assert submit_key(inc, (1,), {}, pure=False) != submit_key(inc, (1,), {}, pure=False)


def test_map_keys_follow_the_shortest_sequence_and_share_equal_calls() -> None:
    keys = map_keys(operator.add, [[1, 2, 1], [10, 20, 10, 40]], {}, None, pure=True)
    assert len(keys) == 3
    assert keys[0] == keys[2] != keys[1]
    assert all(str(k).startswith("add-") for k in keys)
    impure = map_keys(operator.add, [[1, 1]], {}, "x", pure=False)
    assert len(set(impure)) == 2 and all(str(k).startswith("x-") for k in impure)
    assert map_keys(operator.add, [[1, 2]], {}, ["a", "b"], pure=True) == ["a", "b"]


def test_annotations_of_a_call_join_dask_annotate_without_callables() -> None:
    assert worker_list("tcp://a:1") == ["tcp://a:1"]
    assert worker_list(None) is None
    with annotate(priority=3, retries=lambda k: 1):
        ann = task_annotations(("tcp://a:1", 7), {"GPU": 1}, 2, True)
    assert ann == {
        "priority": 3,
        "workers": ["tcp://a:1", "7"],
        "resources": {"GPU": 1},
        "retries": 2,
        "allow_other_workers": True,
    }
    assert TaskOptions().annotations() == {}


def test_a_large_graph_is_planned_dependencies_first() -> None:
    # A chain given backwards: each task names the one before it.
    dsk: dict[Key, Any] = {f"x-{i}": (inc, f"x-{i - 1}") for i in range(9, 0, -1)}
    dsk["x-0"] = 0
    expr = graph_expr(dsk)
    with dask.config.set({"distributed.client.graph-chunk-size": 4}):
        plan = expr_plan("c", expr, ["x-9"], TaskOptions(priority=5))
    assert len(plan) > 1
    sent: list[Key] = []
    for i in range(len(plan)):
        msg = plan.message(i)
        assert msg["priority"] == 5
        for key, spec in msg["tasks"]:
            assert all(dep in sent for dep in spec["dependencies"])
            sent.append(key)
    assert sorted(sent) == sorted(dsk)
    # The wanted key is the last one; a graph in parts is held until its final part.
    assert plan.message(len(plan) - 1)["keys"] == ["x-9"]
    assert plan.message(0).get("final") is False


def test_culling_keeps_only_what_the_keys_need() -> None:
    expr = graph_expr({"a": 1, "b": (inc, "a"), "c": (inc, 10)})
    plan = expr_plan("c", expr, ["b"], TaskOptions(), cull=True)
    assert len(plan) == 1
    assert {key for key, _ in plan.message(0)["tasks"]} == {"a", "b"}


def test_per_task_annotations_and_priorities_of_a_collection() -> None:
    with annotate(retries=2):
        x = da.ones(4, chunks=2) + 1
    graph = for_compute(x, optimize_graph=False, traverse=True)
    assert graph.single and graph.positions == [0] and graph.keys is not None and len(graph.keys) == 1
    plan = expr_plan("c", graph.expr, graph.keys, TaskOptions(workers="tcp://a:1"))
    msg = plan.message(0)
    assert msg["annotations"] == {"workers": ["tcp://a:1"]}
    assert msg["keys"] == graph.keys
    orders = [spec["order"] for _, spec in msg["tasks"]]
    assert len(set(orders)) == len(orders)  # dask.order gives every task its own place
    assert any(spec.get("annotations", {}).get("retries") == 2 for _, spec in msg["tasks"])


def test_compute_finds_collections_in_containers_and_passes_the_rest() -> None:
    x = delayed(inc)(1)
    graph = for_compute([x, 5, [x, 1]], optimize_graph=True, traverse=True)
    assert not graph.single
    # 5 is no collection; the inner list becomes one (traverse).
    assert graph.positions == [0, 2]
    assert graph.keys is not None and len(graph.keys) == 2
    placed = graph.place(["F0", "F2"])  # type: ignore[list-item]  # stand-ins for futures
    assert placed == ["F0", 5, "F2"]
    untraversed = for_compute([[x]], optimize_graph=True, traverse=False)
    assert untraversed.positions == [] and untraversed.keys is None
    assert for_compute(iter([x]), optimize_graph=True, traverse=True).positions == [0]


def test_persist_wants_every_key_of_each_collection() -> None:
    x = da.ones(6, chunks=2)
    y = x + 1
    graph = for_persist((x, "not a collection", y), optimize_graph=True)
    assert graph.positions == [0, 2]
    assert graph.per_collection is not None and [len(ks) for ks in graph.per_collection] == [3, 3]
    assert graph.keys == [k for ks in graph.per_collection for k in ks]


def test_map_plan_makes_each_task_from_its_arguments() -> None:
    keys = map_keys(operator.add, [[1, 2, 3], [10, 20, 30]], {}, None, pure=True)
    plan = map_plan(
        "c", operator.add, keys, [[1, 2, 3], [10, 20, 30]], {}, batch_size=2, global_annotations={}, user_priority=0
    )
    assert len(plan) == 2
    tasks = {**dict(plan.message(0)["tasks"]), **dict(plan.message(1)["tasks"])}
    assert list(tasks) == keys
    assert [unwrap(tasks[k]["run_spec"])({}) for k in keys] == [11, 22, 33]
    # Every task of a map is wanted: no part is held for a final one.
    assert "graph" not in plan.message(0)


def test_make_task_of_plain_and_nested_arguments() -> None:
    from dask._task_spec import Alias, Task, TaskRef

    plain = make_task("k", operator.add, (1, "a", 2.5, None, True, b"x"), {})
    assert type(plain) is Task and plain.args == (1, "a", 2.5, None, True, b"x") and not plain.dependencies
    # A reference inside a list or in a keyword is still a dependency.
    nested = make_task("k", operator.add, ([TaskRef("dep")],), {})
    assert nested.dependencies == {"dep"}
    keyword = make_task("k", operator.add, (1,), {"y": TaskRef("other")})
    assert keyword.dependencies == {"other"} and isinstance(keyword.kwargs["y"], (Alias, TaskRef))
    # A subclass of a plain type goes through parsing like anything else.
    assert make_task("k", operator.add, (type("Int", (int,), {})(3),), {}).args[0] == 3


def test_a_small_graph_keeps_its_order() -> None:
    expr = graph_expr({"b": (inc, "a"), "a": 1})
    graph_tasks = expr.__dask_graph__()
    assert list(graph_plan("c", dict(graph_tasks), ["b"]).chunks[0]) == list(graph_tasks)


def test_pack_keys_keeps_the_nesting() -> None:
    by_key: dict[Key, Any] = {"a": 1, "b": 2, "c": 3}
    assert pack_keys([["a"], "b", ["c", ["a"]]], by_key) == [[1], 2, [3, [1]]]
    assert pack_keys("c", by_key) == 3
