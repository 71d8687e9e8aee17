"""A client keeps its futures when its connection to the scheduler drops, and connects again.

Real TCP throughout, except the outbox's own tests.  A test that needs the
client to stay disconnected for a while holds its registrations with
:func:`gate` (the scheduler is up; only the client waits), so that what
happens meanwhile is checked without timing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import pytest

from distributed import Client, Event, LocalCluster
from distributed.client.link import SchedulerLink
from distributed.client.outbox import Outbox
from distributed.comm import Comm, CommClosedError
from distributed.exceptions import FutureCancelledError
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.utils import open_port
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc, poll_for, scheduler_process
from distributed.worker import Worker

# -- the outbox: keys announced again, in order ----------------------------------------------


def _graph(keys: list[Key]) -> m.UpdateGraph:
    return m.UpdateGraph(op="update-graph", client="c", tasks=[], keys=keys)


def test_keys_announced_again_leave_out_those_released_before_and_those_of_later_graphs() -> None:
    box = Outbox("c", chunk_size=100)
    held = {"a", "b", "c", "d"}

    def settle(keys: Sequence[Key]) -> list[Key]:
        held.difference_update(keys)  # each key here has one future
        return list(keys)

    def still_held(keys: Iterable[Key]) -> list[Key]:
        return [k for k in keys if k in held]

    box.release("a")  # its last future went before the reconnection
    box.post_rewant(["a", "b", "c", "d"])
    box.post(_graph(["d"]))  # its future was made before the reconnection, its graph posted after
    box.release("b")  # released after: announced first, then released
    assert box.take(settle, still_held) == [
        m.ClientKeys(op="client-releases-keys", client="c", keys=["a"]),
        m.ClientKeys(op="client-desires-keys", client="c", keys=["b", "c"]),
        _graph(["d"]),
        m.ClientKeys(op="client-releases-keys", client="c", keys=["b"]),
    ]
    assert len(box) == 0


def test_keys_announced_again_go_in_chunks() -> None:
    box = Outbox("c", chunk_size=2)
    box.post_rewant(["a", "b", "c", "d", "e"])
    assert box.take(list, list) == [
        m.ClientKeys(op="client-desires-keys", client="c", keys=keys) for keys in (["a", "b"], ["c", "d"], ["e"])
    ]


# -- helpers ----------------------------------------------------------------------------------


class Gate:
    """Holds every registration of a reconnecting client until :attr:`opened` is set."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        #: Registrations held so far.
        self.held = 0


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    """Clients connect at once, but reconnect only once the gate is open."""
    g = Gate()
    register = SchedulerLink._register

    async def held_register(link: SchedulerLink, address: str, timeout: float) -> tuple[Comm, m.RegisterClientReply]:
        if link.reconnecting:
            g.held += 1
            await g.opened.wait()
        return await register(link, address, timeout)

    monkeypatch.setattr(SchedulerLink, "_register", held_register)
    yield g


def wait_for_event(name: str) -> int:
    """A task that finishes once the event ``name`` is set."""
    Event(name).wait(timeout=60)
    return 42


def _stream_comm(c: Client[Any]) -> Comm:
    bs = c.scheduler_comm
    assert bs is not None and bs.comm is not None
    return bs.comm


# -- the scheduler stays up -------------------------------------------------------------------


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_future_submitted_before_the_scheduler_dropped_the_stream_returns_its_result(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    """Waits on the scheduler keeping what the client wanted (``client-reconnect-grace``)."""
    done = c.submit(inc, 1, key="done")
    assert await done == 2
    pending = c.submit(wait_for_event, "go", key="pending")
    await async_poll_for(lambda: s.extensions["events"].waiters.get("go") == 1, timeout=10)
    first_id = c.id
    bs = s.client_comms[c.id]
    assert bs.comm is not None
    bs.comm.abort()
    await async_poll_for(lambda: c.link.reconnections == 1 and c.status == "running", timeout=10)
    assert c.id == first_id and c.id in s.client_comms
    assert pending.status == "pending" and done.status == "finished"
    await Event("go", client=c).set()
    assert await asyncio.wait_for(pending.result(), 10) == 42
    assert await done == 2
    assert {ts.key for ts in s.clients[c.id].wants_what} == {"done", "pending"}


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_client_that_dropped_its_stream_waits_then_carries_on(
    c: Client[Literal[True]], s: Scheduler, a: Worker, gate: Gate
) -> None:
    """The pending future finishing waits on the scheduler's grace; the rest is the client's."""
    done = c.submit(inc, 1, key="done")
    assert await done == 2
    pending = c.submit(wait_for_event, "go", key="pending")
    unwanted = c.submit(inc, 2, key="unwanted", resources={"GPU": 1})
    await c.cancel(unwanted, reason="not wanted")
    await async_poll_for(lambda: s.extensions["events"].waiters.get("go") == 1, timeout=10)
    _stream_comm(c).abort()
    await async_poll_for(lambda: gate.held == 1, timeout=10)
    # Disconnected: nothing was cancelled, and the client says what it does.
    assert c.status == "connecting" and c.scheduler_comm is None and not c.link.lost
    assert pending.status == "pending" and done.status == "finished"
    # A finished result comes straight from its worker: no scheduler needed.
    assert await c.gather(done) == 2
    # Work and requests made meanwhile wait for the new stream.
    late = c.submit(inc, 10, key="late")
    who_has = asyncio.ensure_future(c.who_has([done]))
    for _ in range(20):
        await asyncio.sleep(0)  # turns of the loop, not time: the request must be waiting, not failed
    assert not who_has.done()
    gate.opened.set()
    assert list((await asyncio.wait_for(who_has, 10))["done"]) == [a.address]
    assert c.status == "running" and c.link.reconnections == 1
    assert await asyncio.wait_for(late.result(), 10) == 11
    await Event("go", client=c).set()
    assert await asyncio.wait_for(pending.result(), 10) == 42
    # A future cancelled before the drop is not announced again: it keeps its own reason.
    assert unwanted.status == "cancelled"
    with pytest.raises(FutureCancelledError, match="not wanted"):
        await unwanted


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.client-reconnect-grace": "0s"})
async def test_scheduler_that_forgot_the_client_answers_for_each_key_again(
    c: Client[Literal[True]], s: Scheduler, a: Worker, gate: Gate
) -> None:
    """Without a grace the scheduler releases the client's keys at once: it says what became of each."""
    kept = await c.scatter(5)
    await c.publish_dataset(kept=kept)  # the dataset keeps the key wanted: in memory after the drop
    done = c.submit(inc, 1, key="done")
    assert await done == 2
    pending = c.submit(inc, 2, key="pending", resources={"GPU": 1})  # no worker can run it
    await async_poll_for(lambda: "pending" in s.tasks, timeout=10)
    # Acknowledged: not sent again on the next stream (which would make them anew).
    await async_poll_for(lambda: c.link.unacknowledged == 0, timeout=10)
    bs = s.client_comms[c.id]
    assert bs.comm is not None
    bs.comm.abort()
    await async_poll_for(lambda: gate.held == 1, timeout=10)
    await async_poll_for(lambda: "pending" not in s.tasks and "done" not in s.tasks, timeout=10)
    assert c.id not in s.clients or not s.clients[c.id].wants_what
    gate.opened.set()
    # The scheduler answers the keys the client announced: the lost ones are cancelled as unknown.
    await async_poll_for(lambda: pending.status == "cancelled" and done.status == "cancelled", timeout=10)
    with pytest.raises(FutureCancelledError, match="unknown key"):
        await pending
    with pytest.raises(FutureCancelledError, match="unknown key"):
        await done
    # The kept one is in memory, and wanted by this client again.
    assert kept.status == "finished"
    assert await kept == 5
    assert kept.key in {ts.key for ts in s.clients[c.id].wants_what}
    assert await c.submit(inc, 3) == 4
    await c.unpublish_dataset("kept")


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_topics_are_subscribed_again(c: Client[Literal[True]], s: Scheduler, a: Worker, gate: Gate) -> None:
    got: list[Any] = []
    c.subscribe_topic("news", lambda event: got.append(event[1]))
    await async_poll_for(lambda: c.id in s.event_log.subscribers.get("news", ()), timeout=10)
    bs = s.client_comms[c.id]
    assert bs.comm is not None
    bs.comm.abort()
    await async_poll_for(lambda: gate.held == 1, timeout=10)
    s.log_event("news", "while away")  # finds the client gone: the scheduler drops its subscription
    assert c.id not in s.event_log.subscribers.get("news", ())
    gate.opened.set()
    await async_poll_for(lambda: c.id in s.event_log.subscribers.get("news", ()), timeout=10)
    s.log_event("news", "back")
    await async_poll_for(lambda: got == ["back"], timeout=10)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)], config={"distributed.client.graph-chunk-size": 10})
async def test_request_made_while_disconnected_follows_the_graphs_made_meanwhile(
    c: Client[Literal[True]], s: Scheduler, a: Worker, gate: Gate
) -> None:
    _stream_comm(c).abort()
    await async_poll_for(lambda: gate.held == 1, timeout=10)
    futures = c.map(inc, range(60))
    assert c.outbox.parts_posted == 1  # in parts, the later ones made by a thread
    single = c.submit(inc, 100, key="single", resources={"GPU": 1})  # a graph of one message
    cancelling = asyncio.ensure_future(c.cancel([single, *futures[-5:]]))
    gate.opened.set()
    await asyncio.wait_for(cancelling, 10)
    assert await c.gather(futures[:-5]) == list(range(1, 56))
    # Had the cancel overtaken the graphs, the scheduler would have found nothing to cancel and
    # then made the tasks for this client.
    await c.link.stream_handled()
    assert all(f.key not in s.tasks for f in [single, *futures[-5:]])


# -- the scheduler goes away ------------------------------------------------------------------


@gen_test(timeout=90)
async def test_scheduler_killed_and_started_again_without_journal() -> None:
    port = open_port("127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    with scheduler_process(port) as proc:
        async with Worker(address, nthreads=1, death_timeout=60) as w:
            async with Client(address, asynchronous=True, timeout=30) as c:
                done = c.submit(inc, 1)
                assert await done == 2
                await async_poll_for(lambda: c.link.unacknowledged == 0, timeout=10)  # its graph acknowledged
                pending = c.submit(inc, 2, resources={"GPU": 1})  # no worker can run it
                proc.kill()  # SIGKILL: no goodbye
                proc.wait()
                await async_poll_for(lambda: c.status == "connecting", timeout=10)
                assert pending.status == "pending" and done.status == "finished"
                async with Scheduler(host="127.0.0.1", port=port, dashboard=False, validate=True) as s:
                    # The pending graph was not acknowledged by the scheduler that died: sent again, it
                    # waits on the new one.  The finished key was acknowledged; the new scheduler, with
                    # no journal, never heard of it: cancelled as unknown, not lost.
                    await async_poll_for(lambda: pending.key in s.tasks, timeout=30)
                    await async_poll_for(lambda: done.done() and done.status == "cancelled", timeout=30)
                    with pytest.raises(FutureCancelledError, match="unknown key"):
                        await done
                    assert pending.status == "pending"
                    assert c.status == "running" and c.link.reconnections == 1 and not c.link.lost
                    assert c.id in s.client_comms
                    await async_poll_for(lambda: w.address in s.workers, timeout=30)
                    assert await asyncio.wait_for(c.submit(inc, 10).result(), 20) == 11


@gen_test(timeout=60)
async def test_no_scheduler_comes_back_within_the_timeout() -> None:
    async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
        async with Worker(s.address, nthreads=1) as w:
            c = await Client(s.address, asynchronous=True, timeout=1)
            try:
                done = c.submit(inc, 1)
                assert await done == 2
                pending = c.submit(inc, 2, resources={"GPU": 1})
                await async_poll_for(lambda: pending.key in s.tasks, timeout=10)
                await w.close()
                start = time.monotonic()
                await s.close()
                await async_poll_for(lambda: c.status == "connecting", timeout=10)
                waiting = asyncio.ensure_future(c.who_has())
                await async_poll_for(lambda: c.status == "closed", timeout=15)
                elapsed = time.monotonic() - start
                assert 0.9 <= elapsed < 10, elapsed
                assert c.link.lost and not c.link.reconnecting
                with pytest.raises(CommClosedError, match="lost its connection"):
                    await asyncio.wait_for(waiting, 5)
                with pytest.raises(FutureCancelledError, match="scheduler-connection-lost"):
                    await asyncio.wait_for(pending.result(), 5)
                # The finished result was held by that scheduler's workers: out of reach now.
                assert done.status == "cancelled"
                with pytest.raises(CommClosedError, match="lost its connection"):
                    await asyncio.wait_for(c.who_has(), 5)
                with pytest.raises(RuntimeError, match="not running"):
                    c.submit(inc, 3)
            finally:
                await c.close()
            assert not c.link.connected


@gen_test(timeout=60)
async def test_close_while_reconnecting_returns_promptly() -> None:
    async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
        c = await Client(s.address, asynchronous=True, timeout=30)
        try:
            pending = c.submit(inc, 1)
            await async_poll_for(lambda: pending.key in s.tasks, timeout=10)
        finally:
            await s.close()
        try:
            await async_poll_for(lambda: c.status == "connecting", timeout=10)
            waiting = asyncio.ensure_future(c.who_has())
            start = time.monotonic()
        finally:
            await asyncio.wait_for(c.close(), 10)
        assert time.monotonic() - start < 3
        assert c.status == "closed" and not c.link.reconnecting and not c.link.connected
        with pytest.raises(CommClosedError, match="closed while connecting again"):
            await asyncio.wait_for(waiting, 5)
        with pytest.raises(FutureCancelledError, match="client-closed"):
            await pending


def test_synchronous_client_closes_promptly_while_reconnecting_and_after_giving_up() -> None:
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        reconnecting = Client(cluster.scheduler_address, timeout=30)
        giving_up = Client(cluster.scheduler_address, timeout=1)
        pending = reconnecting.submit(inc, 1)
    # The scheduler is gone with its cluster: both clients connect again ...
    poll_for(lambda: reconnecting.status == "connecting" and giving_up.status == "connecting", timeout=10)
    start = time.monotonic()
    reconnecting.close()
    assert time.monotonic() - start < 3
    assert reconnecting.status == "closed" and not reconnecting.link.connected
    assert pending.cancelled() and "client-closed" in str(pending.state.error())  # its loop has stopped
    # ... and one gives up after its timeout; closing it then still closes what it holds.
    poll_for(lambda: giving_up.status == "closed", timeout=15)
    assert giving_up.link.connected
    giving_up.close()
    assert not giving_up.link.connected


@gen_test(timeout=60)
async def test_a_graph_the_scheduler_never_handled_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Written on the stream, read by nobody (the scheduler died first): the next stream carries it again."""
    async with Scheduler(host="127.0.0.1", port=0, dashboard=False, validate=True) as s, Worker(s.address, nthreads=1):
        async with Client(s.address, asynchronous=True, timeout=30) as c:
            assert await c.submit(inc, 1) == 2
            unread: list[Any] = []

            async def lost_with_the_scheduler(msgs: Any, client: str, check: bool) -> bool:
                unread.append(msgs)
                return False

            monkeypatch.setattr(s.streams, "_client_batch", lost_with_the_scheduler)
            future = c.submit(inc, 41)
            await async_poll_for(lambda: any(msg.get("op") == "update-graph" for b in unread for msg in b), 10)
            assert future.key not in s.tasks
            monkeypatch.undo()
            s.client_comms[c.id].comm.abort()
            assert await asyncio.wait_for(future.result(), 20) == 42
            assert c.link.reconnections == 1
