"""``Client.recreate_task_locally`` and ``recreate_error_locally``: a task run again in the client's process."""

from __future__ import annotations

import threading
from typing import Any, Literal

import pytest
from dask.delayed import delayed

from distributed import Client, Scheduler, Worker
from distributed.utils_test import gen_cluster, inc

RAN_IN: list[int] = []


def divide(a: int, b: int) -> float:
    RAN_IN.append(threading.get_ident())
    return a / b


def add(a: int, b: int) -> int:
    return a + b


def test_recreate_task_and_error_locally_in_the_calling_thread() -> None:
    with Client(n_workers=1, processes=True, dashboard_address=None) as c:
        x = c.submit(inc, 1, key="x")
        zero = c.submit(add, -1, 1, key="zero")
        y = c.submit(divide, x, 4, key="y")
        bad = c.submit(divide, x, zero, key="bad")
        dependent = c.submit(inc, bad, key="dependent")
        assert y.result() == 0.5
        RAN_IN.clear()
        # The task runs here (not on the worker process), on its inputs as the cluster holds them.
        assert c.recreate_task_locally(y) == 0.5
        assert [threading.get_ident()] == RAN_IN
        with pytest.raises(ZeroDivisionError):
            dependent.result()
        # The task to blame is the dependency whose error the dependent carries.
        RAN_IN.clear()
        with pytest.raises(ZeroDivisionError) as info:
            c.recreate_error_locally(dependent)
        assert [threading.get_ident()] == RAN_IN
        assert "divide" in [tb.tb_frame.f_code.co_name for tb in _frames(info.value.__traceback__)]
        # A collection holding futures works too.
        with pytest.raises(ZeroDivisionError):
            c.recreate_error_locally([y, dependent])
        with pytest.raises(ValueError, match="No erred futures"):
            c.recreate_error_locally(y)


def _frames(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


@gen_cluster(client=True)
async def test_recreate_on_an_asynchronous_client(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, key="x")
    assert await c.recreate_task_locally(x) == 2
    d = delayed(divide)(1, 0, dask_key_name="div0")
    bad = c.compute(d)
    with pytest.raises(ZeroDivisionError):
        await bad
    with pytest.raises(ZeroDivisionError):
        await c.recreate_error_locally(bad)


@gen_cluster(client=True)
async def test_scattered_data_has_no_task_to_run(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    [f] = await c.scatter([1])
    with pytest.raises(ValueError, match="scattered"):
        await c.recreate_task_locally(f)
    with pytest.raises(ValueError, match="one future"):
        c.recreate_task_locally([])


def fail_once(x: int) -> int:
    raise RuntimeError("no")


def test_get_task_metadata_collects_the_block_s_tasks() -> None:
    from distributed import get_task_metadata

    with Client(processes=False, n_workers=1, dashboard_address=None) as c:
        before = c.submit(inc, 0, key="before")
        before.result()
        with get_task_metadata() as tasks:
            x = c.submit(inc, 1, key="x")
            bad = c.submit(fail_once, 1, key="bad")
            x.result()
            with pytest.raises(RuntimeError):
                bad.result()
        assert tasks.state == {"x": "memory", "bad": "erred"}
        assert tasks.metadata == {"x": {}, "bad": {}}
        # The collector is gone with the block.
        assert not [
            p for p in c.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins)) if "metadata" in p
        ]


@gen_cluster(client=True)
async def test_get_task_metadata_async(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    from distributed import get_task_metadata

    async with get_task_metadata() as tasks:
        await c.submit(inc, 1, key="y")
    assert tasks.state == {"y": "memory"}
    with pytest.raises(ValueError, match="No task metadata"):
        await c.scheduler.stop_task_metadata(name="never-started")
