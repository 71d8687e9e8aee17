"""Events and topics: log_event from clients, workers and tasks; get_events; subscribe_topic."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import socket
import sys
import threading
import time
import warnings
from typing import Any, Literal

import pytest

import distributed
import distributed.scheduler.events
import distributed.worker
from distributed import Client, LocalCluster, Scheduler, SchedulerPlugin, Worker, get_worker
from distributed.tests.logs import caught_logs
from distributed.utils_test import async_poll_for, gen_cluster, poll_for


@gen_cluster(client=True, nthreads=[])
async def test_log_and_get_events(c: Client[Literal[True]], s: Scheduler) -> None:
    before = time.time()
    await c.log_event("topic-a", {"x": 1})
    await c.log_event(["topic-a", "topic-b"], "both")
    events = await c.get_events("topic-a")
    assert isinstance(events, tuple)
    assert [msg for _, msg in events] == [{"x": 1}, "both"]
    assert all(isinstance(e, tuple) and before <= e[0] <= time.time() for e in events)
    everything = await c.get_events()
    assert [msg for _, msg in everything["topic-b"]] == ["both"]
    assert "topic-a" in everything
    assert await c.get_events("never-logged") == ()
    # The scheduler's own view.
    on_scheduler = s.get_events("topic-b")
    assert isinstance(on_scheduler, tuple)
    assert [msg for _, msg in on_scheduler] == ["both"]
    assert s.events is s.event_log.events


@gen_cluster(client=True, nthreads=[])
async def test_event_messages_must_be_msgpack(c: Client[Literal[True]], s: Scheduler) -> None:
    with pytest.raises(TypeError, match="msgpack serializable"):
        c.log_event("t", {1, 2})
    with pytest.raises(TypeError, match="msgpack serializable"):
        c.log_event("t", object())
    assert "t" not in s.events


@gen_cluster(client=True, nthreads=[], config={"distributed.scheduler.events-log-length": 3})
async def test_the_log_of_each_topic_is_bounded(c: Client[Literal[True]], s: Scheduler) -> None:
    for i in range(10):
        await c.log_event("bounded", i)
    await c.log_event("other", "kept")
    assert [msg for _, msg in await c.get_events("bounded")] == [7, 8, 9]
    assert [msg for _, msg in await c.get_events("other")] == ["kept"]


def log_from_task(topic: str, value: int) -> str:
    get_worker().log_event(topic, {"value": value})
    # As dask code calls it.
    distributed.worker.get_worker().log_event([topic, "second-topic"], "plain")
    return get_worker().address


@gen_cluster(client=True)
async def test_worker_and_task_events(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    a.log_event("from-worker", {"n": 1})
    a.log_event("from-worker", [1, 2])
    address = await c.submit(log_from_task, "from-task", 5, workers=[b.address])
    assert address == b.address
    await async_poll_for(lambda: len(s.events["second-topic"]) == 1 and len(s.events["from-worker"]) == 2, 5)
    # A dict says which worker logged it; other messages are kept as they are.
    assert [msg for _, msg in await c.get_events("from-worker")] == [{"n": 1, "worker": a.address}, (1, 2)]
    assert [msg for _, msg in await c.get_events("from-task")] == [{"value": 5, "worker": b.address}, "plain"]
    assert [msg for _, msg in await c.get_events("second-topic")] == ["plain"]
    with pytest.raises(TypeError, match="msgpack serializable"):
        a.log_event("t", {1})


def log_one(topic: str, value: int) -> None:
    get_worker().log_event(topic, {"value": value})


@gen_cluster(client=True)
async def test_subscribe_topic(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    got: list[tuple[Any, ...]] = []
    loops: list[asyncio.AbstractEventLoop] = []

    def handler(event: tuple[float, Any]) -> None:
        loops.append(asyncio.get_running_loop())
        got.append(event)

    c.subscribe_topic("news", handler)
    await async_poll_for(lambda: c.id in s.event_subscriber["news"], 5)
    await c.log_event("news", "from-client")
    a.log_event("news", {"from": "worker"})
    await c.submit(log_one, "news", 7, workers=[b.address])
    await async_poll_for(lambda: len(got) == 3, 5)
    msgs = [e[1] for e in got]
    assert "from-client" in msgs
    assert {"from": "worker", "worker": a.address} in msgs
    assert {"value": 7, "worker": b.address} in msgs
    assert all(isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], float) for e in got)
    assert set(loops) == {c.event_loop}
    # Unsubscribed: the scheduler stops sending, the handler hears nothing more.
    c.unsubscribe_topic("news")
    await async_poll_for(lambda: "news" not in s.event_subscriber, 5)
    flushed: list[Any] = []
    c.subscribe_topic("flush", flushed.append)
    await async_poll_for(lambda: c.id in s.event_subscriber["flush"], 5)
    await c.log_event("news", "unheard")
    await c.log_event("flush", "x")
    # Events reach the client in order: once the later one is here, the earlier would be.
    await async_poll_for(lambda: len(flushed) == 1, 5)
    assert len(got) == 3
    with pytest.raises(ValueError, match="No event handler known for topic news"):
        c.unsubscribe_topic("news")


@gen_cluster(client=True, nthreads=[])
async def test_async_handler_is_awaited(c: Client[Literal[True]], s: Scheduler) -> None:
    done = asyncio.Event()
    got: list[Any] = []

    async def handler(event: tuple[float, Any]) -> None:
        await asyncio.sleep(0)
        got.append(event[1])
        done.set()

    c.subscribe_topic("async-topic", handler)
    await async_poll_for(lambda: c.id in s.event_subscriber["async-topic"], 5)
    await c.log_event("async-topic", {"a": 1})
    await asyncio.wait_for(done.wait(), 5)
    assert got == [{"a": 1}]


@gen_cluster(client=True, nthreads=[])
async def test_a_failing_handler_does_not_stop_later_events(c: Client[Literal[True]], s: Scheduler) -> None:
    got: list[Any] = []

    def handler(event: tuple[float, Any]) -> None:
        got.append(event[1])
        if event[1] == "bad":
            raise RuntimeError("handler failed")

    c.subscribe_topic("t", handler)
    await async_poll_for(lambda: c.id in s.event_subscriber["t"], 5)
    await c.log_event("t", "bad")
    await c.log_event("t", "good")
    await async_poll_for(lambda: got == ["bad", "good"], 5)


@gen_cluster(client=True, nthreads=[])
async def test_subscribers_that_left_are_dropped(c: Client[Literal[True]], s: Scheduler) -> None:
    async with Client(s.address, asynchronous=True, set_as_default=False) as other:
        other.subscribe_topic("t", lambda event: None)
        await async_poll_for(lambda: other.id in s.event_subscriber["t"], 5)
        gone = other.id
    await async_poll_for(lambda: gone not in s.client_comms, 5)
    await c.log_event("t", 1)
    assert "t" not in s.event_subscriber


class RecordEvents(SchedulerPlugin):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def log_event(self, topic: str, msg: Any) -> None:
        self.seen.append((topic, msg))


@gen_cluster(client=True, nthreads=[])
async def test_scheduler_plugins_see_events(c: Client[Literal[True]], s: Scheduler) -> None:
    plugin = RecordEvents()
    await s.add_plugin(plugin, name="record")
    await c.log_event(["x", "y"], 1)
    assert plugin.seen == [("x", 1), ("y", 1)]


def log_in_process(topic: str) -> int:
    import os

    get_worker().log_event(topic, {"pid": os.getpid()})
    return os.getpid()


def test_events_from_worker_processes_reach_a_sync_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            got: list[tuple[Any, ...]] = []
            threads: list[int] = []

            def handler(event: tuple[float, Any]) -> None:
                threads.append(threading.get_ident())
                got.append(event)

            c.subscribe_topic("proc", handler)
            poll_for(lambda: c.id in c.run_on_scheduler(lambda dask_scheduler: dask_scheduler.event_subscriber["proc"]))
            pid = c.submit(log_in_process, "proc").result()
            poll_for(lambda: len(got) == 1, timeout=10)
            assert got[0][1]["pid"] == pid
            assert got[0][1]["worker"] in c.scheduler_info()["workers"]
            # The handler ran on the client's event loop thread, not this one.
            assert threads[0] != threading.get_ident()
            assert c.get_events("proc")[0][1] == got[0][1]


@gen_cluster(client=True, nthreads=[])
async def test_only_the_last_departed_workers_keep_their_topics(
    c: Client[Literal[True]], s: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers come and go at new addresses: without a bound the log grows a topic per worker ever seen."""
    monkeypatch.setattr(distributed.scheduler.events, "DEPARTED_WORKER_TOPICS", 2)
    addresses = []
    # A departed worker's port stays bound (not listening) by us, so the next worker cannot be given it.
    with contextlib.ExitStack() as held:
        for i in range(5):
            async with Worker(s.address, nthreads=1, name=f"w{i}") as w:
                addresses.append(w.address)
                await async_poll_for(lambda: w.address in s.workers, 10)
                if i == 0:
                    c.subscribe_topic(w.address, lambda event: None)
                    await async_poll_for(lambda: c.id in s.event_subscriber[w.address], 5)
            await async_poll_for(lambda: w.address not in s.workers, 10)
            port = held.enter_context(socket.socket())
            port.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            port.bind(("127.0.0.1", int(w.address.rsplit(":", 1)[1])))
    assert len(set(addresses)) == 5
    # The first is kept for its subscriber; of the rest, the last two to leave.
    assert [a for a in addresses if a in s.events] == [addresses[0], addresses[3], addresses[4]]
    last = await c.get_events(addresses[4])
    assert isinstance(last, tuple)
    assert [msg["action"] for _, msg in last] == ["add-worker", "remove-worker"]
    assert list(s.event_log.departed) == addresses[3:]
    # A worker back at an address that left is no longer among the departed.
    s.event_log.worker_joined(addresses[3])
    assert list(s.event_log.departed) == addresses[4:]
    everything = s.get_events("all")
    assert isinstance(everything, tuple)
    assert len([e for _, e in everything if e["action"] == "remove-worker"]) == 5


@gen_cluster(client=True, nthreads=[], config={"distributed.scheduler.events-cleanup-delay": "1h"})
async def test_departed_workers_topics_go_after_the_cleanup_delay(c: Client[Literal[True]], s: Scheduler) -> None:
    log = s.event_log
    assert log.cleanup_delay == 3600
    for i, address in enumerate(["tcp://10.0.0.1:1", "tcp://10.0.0.2:1", "tcp://10.0.0.3:1"]):
        s.log_event(address, {"action": "something"})
        log.worker_left(address, now=1000.0 + 1000 * i)
    log.subscribe("tcp://10.0.0.1:1", c.id)
    log.clean_up(now=4599.0)  # the first left 3599 s before: kept
    assert list(log.departed) == ["tcp://10.0.0.1:1", "tcp://10.0.0.2:1", "tcp://10.0.0.3:1"]
    log.clean_up(now=5600.0)  # the first two left an hour ago or more; the first is subscribed to
    assert list(log.departed) == ["tcp://10.0.0.3:1"]
    assert "tcp://10.0.0.1:1" in s.events and "tcp://10.0.0.2:1" not in s.events and "tcp://10.0.0.3:1" in s.events


@gen_cluster(client=True, nthreads=[], config={"distributed.scheduler.events-cleanup-delay": "200ms"})
async def test_the_scheduler_cleans_up_departed_topics_by_itself(c: Client[Literal[True]], s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1) as w:
        address = w.address
        await async_poll_for(lambda: address in s.workers, 10)
    await async_poll_for(lambda: address not in s.workers, 10)
    await async_poll_for(lambda: address not in s.events, 10)
    assert not s.event_log.departed


def print_and_warn(x: int) -> int:
    distributed.print("from the task", x, sep="|")
    distributed.print("to stderr", file=sys.stderr)
    distributed.warn(f"careful with {x}", RuntimeWarning)
    distributed.warn("plain")
    return x + 1


@pytest.mark.timeout(120)
def test_print_and_warn_in_a_task_show_on_the_client(capsys: pytest.CaptureFixture[str]) -> None:
    seen = {"out": "", "err": ""}

    def printed(text: str, stream: str) -> bool:
        captured = capsys.readouterr()  # takes what was captured so far: kept in seen
        seen["out"] += captured.out
        seen["err"] += captured.err
        return text in seen[stream]

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        # The worker is another process: what shows here, the client printed from the events.
        assert client.submit(print_and_warn, 1).result(timeout=60) == 2
        poll_for(lambda: printed("from the task|1\n", "out") and printed("to stderr\n", "err"), 30)
        poll_for(lambda: len(caught) >= 2, 30)
    assert [(type(w.message), str(w.message)) for w in caught[:2]] == [
        (RuntimeWarning, "careful with 1"),
        (UserWarning, "plain"),
    ]
    # Outside a task: the builtins, nothing logged.
    distributed.print("local", "line", sep="-")
    assert capsys.readouterr().out == "local-line\n"
    with pytest.warns(UserWarning, match="local warning"):
        distributed.warn("local warning")


@gen_cluster(client=True)
async def test_print_in_a_task_refuses_a_file_the_clients_cannot_print_to(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    def to_a_file() -> None:
        distributed.print("x", file=io.StringIO())

    with pytest.raises(TypeError, match="sys.stdout or sys.stderr only"):
        await c.submit(to_a_file)


def log_on_worker(n: int) -> int:
    import logging

    logging.getLogger("test.forwarded").warning("from the worker: %d", n)
    try:
        raise KeyError("inside")
    except KeyError:
        logging.getLogger("test.forwarded").exception("with a traceback")
    logging.getLogger("test.other").warning("not forwarded")
    return n


@pytest.mark.timeout(120)
def test_forward_logging_shows_worker_records_in_the_client() -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
        caught_logs("test", logging.INFO) as records,
    ):
        client.forward_logging("test.forwarded", level=logging.INFO)
        assert client.submit(log_on_worker, 7).result(timeout=60) == 7
        poll_for(lambda: any(r.getMessage() == "with a traceback" for r in records), 30)
        forwarded = [r for r in records if r.name == "test.forwarded"]
        assert [r.getMessage() for r in forwarded] == ["from the worker: 7", "with a traceback"]
        assert forwarded[0].levelname == "WARNING" and forwarded[0].process != os.getpid()  # made on the worker
        assert "KeyError: 'inside'" in (forwarded[1].exc_text or "")
        assert not any(r.name == "test.other" for r in records)
        client.unforward_logging("test.forwarded")
        assert "forward-logging-test.forwarded" not in cluster.scheduler.requests.worker_plugins
