"""distributed.Event: a flag shared by name; wait with timeouts, from clients and tasks."""

from __future__ import annotations

import asyncio
import pickle

import pytest

import distributed
from distributed import Client, Event, LocalCluster, Scheduler, Worker
from distributed.coordination import EventExtension
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster


def test_event_import_paths() -> None:
    assert distributed.Event is Event
    assert DEFAULT_EXTENSIONS["events"] is EventExtension


@gen_cluster(client=True)
async def test_set_clear_wait(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["events"]
    assert isinstance(ext, EventExtension)
    event = Event("x", client=c)
    assert await event.is_set() is False
    for timeout in (0, 0.05, "50ms"):
        assert await event.wait(timeout=timeout) is False
    waiting = [asyncio.ensure_future(Event("x", client=c).wait(timeout=10)) for _ in range(3)]
    await async_poll_for(lambda: ext.waiters.get("x") == 3, timeout=5)
    assert await event.set() is None
    assert await asyncio.gather(*waiting) == [True, True, True]
    assert await event.is_set() is True
    assert await event.wait() is True
    await event.clear()
    assert await event.is_set() is False
    assert await event.wait(timeout=0.05) is False
    assert not ext.events and not ext.waiters


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_event_between_tasks(c: Client, s: Scheduler, a: Worker) -> None:
    def wait_for(event: Event) -> bool:
        got: bool = event.wait(timeout=10)
        return got

    def set_it(name: str) -> None:
        Event(name).set()

    event = Event("go", client=c)
    waiter = c.submit(wait_for, event, key="waiter")
    await async_poll_for(lambda: s.extensions["events"].waiters.get("go") == 1, timeout=5)
    await c.submit(set_it, "go", key="setter")
    assert await waiter is True
    copy = pickle.loads(pickle.dumps(event))
    assert copy.name == "go"


def test_event_on_a_synchronous_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            event = Event(client=client)
            assert event.is_set() is False
            assert event.wait(timeout=0.05) is False
            assert event.set() is None
            assert event.wait() is True
            assert client.submit(lambda name: Event(name).is_set(), event.name).result() is True
            assert event.clear() is None
            assert event.is_set() is False
            with pytest.raises(TypeError, match="name"):
                Event(object())
