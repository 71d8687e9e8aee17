"""The garbage collector pause of large client.map calls."""

from __future__ import annotations

import gc

import pytest

from distributed.client.gc_pause import GC_PAUSE_MIN, paused_gc


def test_pause_only_for_many_objects_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with paused_gc(GC_PAUSE_MIN - 1):
        assert gc.isenabled()
    with paused_gc(GC_PAUSE_MIN):
        assert not gc.isenabled()
        # A pause inside another does not switch the collector back on early.
        with paused_gc(GC_PAUSE_MIN):
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), paused_gc(GC_PAUSE_MIN):
        1 / 0
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_user_stays_off() -> None:
    gc.disable()
    try:
        with paused_gc(GC_PAUSE_MIN):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("ntasks, paused", [(GC_PAUSE_MIN, True), (GC_PAUSE_MIN - 1, False)])
def test_the_parts_of_a_large_graph_are_made_paused_however_small(ntasks: int, paused: bool) -> None:
    """A map of 100,000 tasks comes in parts of 1,000: the size of the graph decides, not the part's."""
    from dask._task_spec import GraphNode, Task

    from distributed.client.graph_parts import GraphPlan
    from distributed.protocol.messages import Key
    from distributed.utils_test import inc

    seen: list[bool] = []

    def node(key: Key) -> GraphNode:
        seen.append(gc.isenabled())
        return Task(key, inc, 1)

    keys: list[Key] = [f"k-{i}" for i in range(ntasks)]
    plan = GraphPlan("client", keys, node, keys, chunk_size=100, all_wanted=True)
    assert len(plan) > 1 and all(len(chunk) <= 100 for chunk in plan.chunks)
    plan.message(0)
    plan.message(1)
    assert seen and set(seen) == {not paused}
    assert gc.isenabled()


def test_the_collector_stays_paused_between_the_parts_made_in_the_background() -> None:
    """Switched back on between parts, the collector examined each part, and the futures again and again."""
    from dask._task_spec import Task

    from distributed.client.graph_parts import GraphPlan, PendingParts, start_background_parts
    from distributed.protocol.messages import Key
    from distributed.utils_test import inc

    keys: list[Key] = [f"k-{i}" for i in range(GC_PAUSE_MIN)]
    plan = GraphPlan("client", keys, lambda key: Task(key, inc, 1), keys, chunk_size=100, all_wanted=True)
    parts = PendingParts()
    between_parts: list[bool] = []
    failed: list[BaseException] = []
    thread = start_background_parts(
        plan, parts, kick=lambda: between_parts.append(gc.isenabled()), fail=lambda keys, e: failed.append(e)
    )
    thread.join(60)
    assert not thread.is_alive() and not failed
    assert parts.done and len(parts.ready) == len(plan) - 1
    # A kick after each part made, then one as the thread ends (the pause is over by then).
    assert len(between_parts) == len(plan)
    assert not any(between_parts[:-1])
    assert between_parts[-1] and gc.isenabled()


def test_a_collection_graph_is_planned_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Materialising, culling and ordering a collection's graph: a full collection meanwhile took a fifth of it."""
    from typing import Any

    import dask.order
    from dask.base import collections_to_expr
    from dask.delayed import delayed

    from distributed.client import graphs
    from distributed.utils_test import inc

    seen: list[bool] = []
    real_order = dask.order.order

    def order(graph: Any) -> Any:
        seen.append(gc.isenabled())
        return real_order(graph)

    monkeypatch.setattr(dask.order, "order", order)
    value = delayed(inc)(1)
    plan = graphs.expr_plan("client", collections_to_expr([value]), [value.key], graphs.TaskOptions(), cull=True)
    assert len(plan) == 1 and seen == [False]
    assert gc.isenabled()
