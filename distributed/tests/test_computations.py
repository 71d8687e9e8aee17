"""``Scheduler.computations``: the graphs a cluster worked on, batch by batch, with the code that sent them."""

from __future__ import annotations

from typing import Literal

import dask.config
import pytest

from distributed import Client, Event, Scheduler, wait
from distributed.client.source_code import computation_code
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)

#: The default patterns skip every module of this package, tests included: these keep the tests' frames.
KEEP_TESTS = {
    "distributed.diagnostics.computations.ignore-modules": [
        "asyncio",
        "dask",
        r"distributed\.(?!tests)",
        "_pytest",
        "pluggy",
    ]
}


def add_ten(x: int) -> int:
    return x + 10


def blocked(ev: Event) -> int:
    ev.wait()
    return 1


@gen_cluster(client=True)
async def test_graphs_sent_while_busy_make_one_computation(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    event = Event()
    first = c.submit(blocked, event)
    await async_poll_for(lambda: not s.is_idle(), 10)
    second = c.map(inc, range(3))
    await event.set()
    await wait([first, *second])
    assert len(s.computations) == 1
    (computation,) = s.computations
    assert computation.states["memory"] == 4
    assert computation.stop is not None and computation.stop >= computation.start
    # Idle again: the next graph starts a new computation.
    await async_poll_for(s.is_idle, 10)
    assert await c.submit(add_ten, 1) == 11
    assert len(s.computations) == 2
    # Task groups are shared by computations that ran tasks of the same name; this one has its own.
    assert s.computations[-1].states["memory"] == 1


@gen_cluster(client=True, config={"distributed.diagnostics.computations.max-history": 1})
async def test_only_max_history_computations_are_kept(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    for i in range(3):
        assert await c.submit(inc, i) == i + 1
        await async_poll_for(s.is_idle, 10)
    assert len(s.computations) == 1


@gen_cluster(client=True, config={"distributed.diagnostics.computations.max-history": 0})
async def test_no_history(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    assert await c.submit(inc, 1) == 2
    assert len(s.computations) == 0


@gen_cluster(client=True, config={**KEEP_TESTS, "distributed.diagnostics.computations.nframes": 1})
async def test_the_code_that_sent_a_graph_is_kept(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    assert await c.submit(inc, 1) == 2  # a marker: this line is in the code sent
    ((frame,),) = s.computations[-1].code
    source, lineno, relative, filename = frame
    assert "a marker: this line is in the code sent" in source
    assert filename == __file__ and lineno > relative >= 0


@gen_cluster(client=True)
async def test_no_code_by_default(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    assert await c.submit(inc, 1) == 2
    assert s.computations[-1].code == []


def test_computation_code_skips_what_the_patterns_name() -> None:
    with dask.config.set(KEEP_TESTS):
        (frame,) = computation_code(1)
        assert frame[3] == __file__ and "test_computation_code_skips_what_the_patterns_name" in frame[0]
    # With the defaults, this module (distributed.tests...) is skipped: the frames are pytest's callers'.
    assert all(f[3] != __file__ for f in computation_code(3))
    assert computation_code(0) == ()
    with pytest.raises(ValueError, match="nframes"):
        computation_code(-1)
    with dask.config.set({"distributed.diagnostics.computations.ignore-files": "runpy"}):
        with pytest.raises(ValueError, match="ignore-files"):
            computation_code(1)
