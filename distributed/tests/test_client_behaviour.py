"""Client behaviours users rely on, each pinned by a test that failed before its fix."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import dask.bag as db
import pytest

import distributed
from distributed import Client, LocalCluster, futures_of
from distributed.exceptions import FutureCancelledError
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster
from distributed.worker import Worker

#: Tasks block on this (workers run in this process); tests set it when done.
RELEASE = threading.Event()


def block(x: Any = None) -> int:
    RELEASE.wait(10)
    return 1


@pytest.fixture(autouse=True)
def _release_blocked_tasks() -> Any:
    RELEASE.clear()
    yield
    RELEASE.set()


# -- cancelled futures raise an Exception -------------------------------------------------
def test_cancelled_error_is_an_exception() -> None:
    assert issubclass(distributed.CancelledError, Exception)
    assert issubclass(FutureCancelledError, distributed.CancelledError)
    assert not issubclass(FutureCancelledError, asyncio.CancelledError)


@gen_cluster(client=True)
async def test_cancelled_future_caught_by_except_exception(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    f = c.submit(block, pure=False)
    await c.cancel(f)
    caught: BaseException | None = None
    try:
        await f
    except Exception as e:
        caught = e
    RELEASE.set()
    assert isinstance(caught, distributed.CancelledError)
    assert isinstance(caught, FutureCancelledError)


# -- Client.current ----------------------------------------------------------------------
def test_client_current_inside_with_block() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            assert Client.current(allow_global=False) is client
        with pytest.raises(ValueError):
            Client.current(allow_global=False)


@gen_cluster()
async def test_client_current_inside_async_with_block(s: Scheduler, a: Worker, b: Worker) -> None:
    async with Client(s.address, asynchronous=True) as client:
        assert Client.current(allow_global=False) is client
    with pytest.raises(ValueError):
        Client.current(allow_global=False)


# -- cancel ------------------------------------------------------------------------------
@gen_cluster(client=True)
async def test_cancel_persisted_collection(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = db.from_sequence(range(5), npartitions=5).map(block)  # type: ignore[no-untyped-call]  # dask.bag is untyped
    x = c.persist(x)
    futures = futures_of(x)
    assert len(futures) == 5
    await c.cancel(x)
    assert all(f.cancelled() for f in futures)
    RELEASE.set()
    await async_poll_for(lambda: not any(f.key in s.tasks for f in futures), timeout=5)
