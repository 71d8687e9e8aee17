"""``span``: tasks marked in a block are reported together by the scheduler, with their metrics."""

from __future__ import annotations

import time
from typing import Literal

import dask.array as da
import pytest
from dask.delayed import delayed

from distributed import Client, Event, span
from distributed.scheduler import Scheduler
from distributed.spans import DEFAULT_SPAN, SpansSchedulerExtension
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)


def slow_inc(x: int) -> int:
    time.sleep(0.02)  # the task's own work: the compute time the span adds up
    return x + 1


def extension(s: Scheduler) -> SpansSchedulerExtension:
    ext = s.extensions["spans"]
    assert isinstance(ext, SpansSchedulerExtension)
    return ext


@gen_cluster(client=True)
async def test_nested_spans_report_their_tasks(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    with span("etl") as outer_id:
        with span("load") as inner_id:
            loaded = c.map(slow_inc, range(4))
        total = c.submit(sum, loaded)
    assert await total == 10
    ext = extension(s)
    outer, inner = ext.spans[outer_id], ext.spans[inner_id]
    assert outer.name == ("etl",) and inner.name == ("etl", "load")
    assert inner.parent is outer and outer.children == [inner] and outer in ext.root_spans
    assert inner.states["memory"] == 4 and inner.done
    # The outer span counts its own task and its child's.
    assert outer.states["memory"] == 5
    assert inner.all_durations["compute"] >= 4 * 0.02
    assert outer.active_cpu_seconds >= inner.active_cpu_seconds
    assert inner.nbytes_total > 0
    assert outer.start <= inner.start <= inner.stop <= outer.stop
    assert 0 <= inner.duration <= outer.duration
    assert ext.merge_by_tags("load").states["memory"] == 4
    assert ext.merge_by_name("etl", "load").states["memory"] == 4
    # The merges count a group once, even when a span and its child are both in it.
    assert ext.merge_by_tags("etl", "load").states["memory"] == 5


@gen_cluster(client=True)
async def test_tasks_outside_spans_go_to_the_default_span(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert await c.submit(inc, 1) == 2
    (default,) = extension(s).spans_search_by_name[DEFAULT_SPAN]
    assert default.states["memory"] == 1


@gen_cluster(client=True)
async def test_a_collection_computed_in_a_span(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    with span("array") as span_id:
        x = da.ones((10, 10), chunks=5).sum()
        assert await c.compute(x) == 100
        y = delayed(inc)(1)
        assert await c.compute(y) == 2
    sp = extension(s).spans[span_id]
    assert sp.states["memory"] + sp.states["forgotten"] + sp.states["released"] >= 5
    assert sp.done


@gen_cluster(client=True)
async def test_a_span_with_running_tasks_is_not_done(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    event = Event()

    def wait_for_event(ev: Event) -> int:
        ev.wait()
        return 1

    with span("blocked") as span_id:
        blocked = c.submit(wait_for_event, event)
    await async_poll_for(
        lambda: span_id in extension(s).spans and extension(s).spans[span_id].states["processing"] == 1, 10
    )
    sp = extension(s).spans[span_id]
    assert not sp.done
    assert sp.stop >= time.time() - 1  # still running: stop is now
    await event.set()
    assert await blocked == 1
    assert sp.done


def test_span_tags() -> None:
    with pytest.raises(ValueError, match="at least one tag"):
        with span():
            pass
    with pytest.raises(ValueError, match="tags"):
        with span(""):
            pass
    import dask

    with span("a", "b") as b_id:
        annotation = dask.get_annotations()["span"]  # type: ignore[attr-defined]  # untyped in dask
        assert annotation["name"] == ("a", "b")
        assert len(annotation["ids"]) == 2 and annotation["ids"][-1] == b_id
        with span("c"):
            inner = dask.get_annotations()["span"]  # type: ignore[attr-defined]  # untyped in dask
            assert inner["name"] == ("a", "b", "c") and inner["ids"][:2] == annotation["ids"]
