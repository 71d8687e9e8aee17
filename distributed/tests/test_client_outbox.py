"""The client's outbox and future registry, without sockets."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from distributed import Client
from distributed.client.future import Future
from distributed.client.graph_parts import PendingParts
from distributed.client.outbox import Outbox, StreamMessage
from distributed.client.registry import FutureRegistry
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import checker
from distributed.scheduler import Scheduler
from distributed.tests.logs import caught_logs, messages
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker


def graph(*keys: Key) -> m.UpdateGraph:
    return m.UpdateGraph(op="update-graph", client="c", tasks=[], keys=list(keys))


def everything_released(keys: Sequence[Key]) -> list[Key]:
    return list(keys)


def keys_of(msg: StreamMessage) -> list[Key]:
    assert msg["op"] in ("update-graph", "client-desires-keys", "client-releases-keys")
    return list(msg["keys"])


def test_messages_leave_in_order_with_releases_between() -> None:
    box = Outbox("c", chunk_size=100)
    box.post(graph("x"))
    box.release("a")
    box.release("b")
    box.post(graph("y"))
    box.release("c")
    out = box.take(everything_released)
    assert [msg["op"] for msg in out] == [
        "update-graph",
        "client-releases-keys",
        "update-graph",
        "client-releases-keys",
    ]
    assert keys_of(out[1]) == ["a", "b"] and keys_of(out[3]) == ["c"]
    assert len(box) == 0
    assert box.take(everything_released) == []


def test_only_keys_left_without_references_are_released() -> None:
    counts: dict[Key, int] = {"a": 2, "b": 1}

    def settle(keys: Sequence[Key]) -> list[Key]:
        gone = []
        for k in keys:
            counts[k] -= 1
            if not counts[k]:
                gone.append(k)
        return gone

    box = Outbox("c", chunk_size=100)
    box.release("a")
    box.release("b")
    assert box.take(settle) == [m.ClientKeys(op="client-releases-keys", client="c", keys=["b"])]
    box.release("a")
    assert box.take(settle) == [m.ClientKeys(op="client-releases-keys", client="c", keys=["a"])]


def test_releases_go_in_chunks() -> None:
    box = Outbox("c", chunk_size=3)
    for i in range(7):
        box.release(i)
    out = box.take(everything_released)
    assert [keys_of(msg) for msg in out] == [[0, 1, 2], [3, 4, 5], [6]]


def test_graph_in_parts_holds_back_what_follows() -> None:
    box = Outbox("c", chunk_size=100)
    parts = PendingParts()
    box.post_graph(graph("first"), parts)
    box.release("x")
    box.post(m.ClientKeys(op="client-desires-keys", client="c", keys=["y"]))
    assert box.parts_posted == 1 and box.parts_pending
    assert box.take(everything_released) == [graph("first")]
    parts.ready.append(graph("second"))
    assert box.take(everything_released) == [graph("second")]
    assert box.parts_pending
    parts.ready.append(graph("last"))
    parts.done = True
    out = box.take(everything_released)
    assert [msg["op"] for msg in out] == ["update-graph", "client-releases-keys", "client-desires-keys"]
    assert not box.parts_pending and len(box) == 0


def test_stop_parts() -> None:
    box = Outbox("c", chunk_size=100)
    parts = PendingParts()
    box.post_graph(graph("first"), parts)
    box.stop_parts()
    assert parts.stop


def test_messages_match_their_declarations() -> None:
    box = Outbox("c", chunk_size=2)
    box.post(graph("x"))
    for i in range(3):
        box.release(f"k{i}")
    check_graph, check_keys = checker(m.UpdateGraph), checker(m.ClientKeys)
    for msg in box.take(everything_released):
        assert (check_graph if msg["op"] == "update-graph" else check_keys)(msg) is None


class StubClient:
    """What a FutureRegistry and its futures need of a client: a loop and the registry."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.outbox = Outbox("stub", chunk_size=1000)
        self.registry = FutureRegistry(self, self.outbox, lambda: None)  # type: ignore[arg-type]  # a stand-in client


@pytest.fixture
def stub() -> Iterator[StubClient]:
    client = StubClient()
    yield client
    client.loop.close()


def test_registry_counts_in_now_and_out_when_released(stub: StubClient) -> None:
    reg = stub.registry
    futures = reg.make_futures(["a", "a", "b"])
    assert reg.counts == {"a": 2, "b": 1}
    assert reg.is_live("a") and set(reg.held_keys()) == {"a", "b"}
    del futures
    gc.collect()
    # Counted out only when the outbox carries the releases out.
    assert reg.counts == {"a": 2, "b": 1}
    out = stub.outbox.take(reg.settle)
    assert [sorted(map(str, keys_of(msg))) for msg in out] == [["a", "b"]]
    assert reg.counts == {} and reg.states == {}


def test_registry_keeps_a_key_wanted_again_before_its_release_left(stub: StubClient) -> None:
    reg = stub.registry
    f = reg.make_futures(["a"])[0]
    f.release()
    g = Future("a", stub)  # type: ignore[arg-type]  # a stand-in client
    assert stub.outbox.take(reg.settle) == []
    assert reg.counts == {"a": 1} and g.state is reg.states["a"]
    g.release()
    assert keys_of(stub.outbox.take(reg.settle)[0]) == ["a"]


def test_future_finalised_inside_the_registry_does_not_deadlock(stub: StubClient) -> None:
    """A collection while the registry holds its lock frees a future: its finaliser must not block."""
    reg = stub.registry
    pool: list[Any] = reg.make_futures([f"pool-{i}" for i in range(3000)])

    def drop_one(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and pool:
            pool.pop()

    result: list[int] = []

    def make() -> None:
        result.append(len(reg.make_futures([f"k-{i}" for i in range(2000)])))

    gc.callbacks.append(drop_one)
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        t = threading.Thread(target=make, daemon=True)
        t.start()
        t.join(20)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(drop_one)
    assert not t.is_alive(), "the registry deadlocked on a finaliser"
    assert result == [2000]
    assert len(pool) < 3000  # futures were indeed finalised meanwhile


# -- what the client receives ---------------------------------------------------------
@gen_cluster(client=True)
async def test_malformed_reports_from_the_scheduler_are_dropped(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1)
    assert await x == 2
    bs = s.client_comms[c.id]
    # The client's package: the link logs what it drops.
    with caught_logs("distributed.client") as logged:
        bs.send({"op": "key-in-memory", "workers": []})  # no key
        bs.send({"op": "lost-data", "key": x.key, "extra": 1}, {"op": "cancelled-keys", "keys": x.key})
        bs.send({"op": "no-such-op"}, ["not", "a", "message"])
        await async_poll_for(lambda: sum("Dropping" in line for line in messages(logged)) >= 4, 10)
    assert any("missing field 'key'" in line for line in messages(logged))
    assert any("'cancelled-keys'" in line for line in messages(logged))
    # A well-formed report among them still counts; the client keeps working.
    assert x.status == "pending"  # lost: waiting for the key to be computed again
    assert await c.submit(inc, 10) == 11
