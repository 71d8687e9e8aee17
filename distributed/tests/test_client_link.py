"""The client's link to its scheduler: reports applied to futures and the outbox drained, without sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from distributed.client.graph_parts import GraphPlan
from distributed.client.link import SchedulerLink
from distributed.client.outbox import Outbox
from distributed.client.registry import FutureRegistry
from distributed.core import ConnectionPool
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize
from distributed.tests.logs import caught_logs, messages


class CountingLoop:
    """Stands in for the client's event loop: counts what is scheduled on it, runs it on demand."""

    def __init__(self) -> None:
        self.scheduled: list[Callable[[], None]] = []

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        self.scheduled.append(fn)

    def run(self) -> None:
        todo, self.scheduled = self.scheduled, []
        for fn in todo:
            fn()


class StubClient:
    """What the registry needs of a client: a loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()


@pytest.fixture
def parts() -> Iterator[tuple[SchedulerLink, FutureRegistry, CountingLoop]]:
    client = StubClient()
    outbox = Outbox("c", chunk_size=100)
    loop = CountingLoop()
    link_box: list[SchedulerLink] = []
    registry = FutureRegistry(client, outbox, lambda: link_box[0].kick())  # type: ignore[arg-type]  # a stand-in client
    link = SchedulerLink("c", outbox, registry, ConnectionPool(), 1.0, lambda: loop)  # type: ignore[arg-type,return-value]  # a stand-in loop
    link_box.append(link)
    try:
        yield link, registry, loop
    finally:
        client.loop.close()


def test_reports_apply_to_the_futures_of_the_registry(
    parts: tuple[SchedulerLink, FutureRegistry, CountingLoop],
) -> None:
    link, registry, _ = parts
    x, y, z = (registry.acquire(k) for k in ("x", "y", "z"))
    link.handle_reports(
        [
            m.KeyInMemory(op="key-in-memory", key="x", workers=["tcp://w:1"], type="int"),
            m.CancelledKeys(op="cancelled-keys", keys=["y", "not-held"], reason="because"),
        ]
    )
    assert (x.status, x.workers, x.type) == ("finished", ["tcp://w:1"], "int")
    assert (y.status, y.reason) == ("cancelled", "because")
    link.handle_report(m.LostData(op="lost-data", key="x"))
    assert x.status == "pending" and not x.workers
    link.handle_report(
        m.ClientTaskErred(
            op="task-erred", key="z", exception=Serialize(ZeroDivisionError()), traceback=None, text="ZeroDivisionError"
        )
    )
    assert z.status == "error"
    assert isinstance(z.error(), ZeroDivisionError)


def test_malformed_and_unknown_reports_are_dropped_with_a_warning(
    parts: tuple[SchedulerLink, FutureRegistry, CountingLoop],
) -> None:
    link, registry, _ = parts
    x = registry.acquire("x")
    with caught_logs("distributed.client.link") as logged:
        link.handle_reports([{"op": "key-in-memory", "workers": []}, {"op": "no-such-op"}, "junk"])
        link.handle_reports("not a batch")
    assert x.status == "pending"
    text = "\n".join(messages(logged))
    assert "missing field 'key'" in text
    assert "'no-such-op'" in text
    assert "malformed batch" in text


def test_kicks_schedule_one_drain_and_nothing_is_sent_before_the_link_runs(
    parts: tuple[SchedulerLink, FutureRegistry, CountingLoop],
) -> None:
    link, registry, loop = parts
    for _ in range(100):
        link.post(m.ClientKeys(op="client-desires-keys", client="c", keys=["x"]))
    assert len(loop.scheduled) == 1
    loop.run()
    # Not connected: the messages wait in the outbox for ``connect`` to drain them.
    assert len(link.outbox) == 100
    registry.release("k")
    assert len(loop.scheduled) == 1  # a drain of its own for what came after


def test_a_closing_link_schedules_no_drain(parts: tuple[SchedulerLink, FutureRegistry, CountingLoop]) -> None:
    link, _, loop = parts
    link.status = "closing"
    link.post(m.ClientKeys(op="client-desires-keys", client="c", keys=["x"]))
    assert loop.scheduled == []


def test_a_graph_of_one_part_is_posted_in_order(parts: tuple[SchedulerLink, FutureRegistry, CountingLoop]) -> None:
    link, _, _ = parts
    plan = GraphPlan("c", [], lambda k: None, [], chunk_size=10)  # type: ignore[arg-type,return-value]  # no tasks
    link.post(m.ClientKeys(op="client-desires-keys", client="c", keys=["before"]))
    link.post_plan(plan)

    def nothing_settles(keys: Any) -> list[Key]:
        return []

    ops = [msg["op"] for msg in link.outbox.take(nothing_settles)]
    assert ops == ["client-desires-keys", "update-graph"]
