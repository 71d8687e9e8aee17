"""Gathering and scattering, without sockets: structures, targets and the failover of a fetch."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import pytest

from distributed.client.future import FutureState
from distributed.client.transfer import DataTransfer, same_container, scatter_items, spread, substitute
from distributed.core import ConnectionPool
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import Check

Point = namedtuple("Point", ["x", "y"])


def test_scatter_items_share_a_key_per_equal_item_when_hashed() -> None:
    items, order = scatter_items([1, 2, 1], hash=True)
    assert len(items) == 2 and order[0] == order[2] != order[1]
    assert str(order[0]).startswith("int-")
    items, order = scatter_items([1, 1], hash=False)
    assert len(items) == 2 and order[0] != order[1]
    assert scatter_items({"a": 1}, hash=True) == ({"a": 1}, ["a"])
    items, order = scatter_items("text", hash=True)
    assert list(items.values()) == ["text"] and len(order) == 1


def test_spread_places_copies_on_consecutive_workers() -> None:
    items: dict[Key, Any] = {"a": 1, "b": 2, "c": 3}
    one = spread(items, ["w1", "w2"], broadcast=False)
    assert {w: sorted(d) for w, d in one.items()} == {"w1": ["a", "c"], "w2": ["b"]}
    every = spread(items, ["w1", "w2"], broadcast=True)
    assert {w: sorted(d) for w, d in every.items()} == {"w1": ["a", "b", "c"], "w2": ["a", "b", "c"]}
    # More copies asked than workers: each worker once.
    assert {w: len(d) for w, d in spread(items, ["w1", "w2"], broadcast=5).items()} == {"w1": 3, "w2": 3}
    two = spread(items, ["w1", "w2", "w3"], broadcast=2)
    assert {w: sorted(d) for w, d in two.items()} == {"w1": ["a", "c"], "w2": ["a", "b"], "w3": ["b", "c"]}


def test_substitute_and_same_container_keep_shapes() -> None:
    assert substitute({"a": [1, (2, {3})], "p": Point(1, 2)}, {}) == {"a": [1, (2, {3})], "p": Point(1, 2)}

    class Odd(list[Any]):
        def __init__(self, a: Any, b: Any) -> None:  # a constructor that takes something else
            super().__init__([a, b])

    assert same_container(Odd, [1, 2]) == [1, 2]  # type: ignore[list-item]  # stand-ins for futures
    assert type(same_container(Odd, [1, 2])) is list  # type: ignore[list-item]
    assert same_container(Point, [1, 2]) == Point(1, 2)  # type: ignore[list-item]
    assert same_container(frozenset, [1, 2]) == frozenset({1, 2})  # type: ignore[list-item]


class FakeLink:
    """A scheduler that answers who_has from a table."""

    client_id = "c"
    check_replies = True

    def __init__(self, who_has: dict[Key, list[str]]) -> None:
        self.who_has = who_has
        self.asked: list[list[Key]] = []

    async def checked_request(self, msg: m.OptionalKeysRequest, check: Check) -> Any:
        assert msg["op"] == "who_has" and msg["keys"] is not None
        self.asked.append(list(msg["keys"]))
        reply = {k: self.who_has.get(k, []) for k in msg["keys"]}
        assert check(reply) is None
        return reply


class FakeWorkers(DataTransfer):
    """Workers that hold ``data``; those in ``dead`` refuse connections."""

    def __init__(self, link: FakeLink, data: dict[str, dict[Key, Any]], dead: set[str], timeout: float = 5) -> None:
        super().__init__(None, link, ConnectionPool(), timeout)  # type: ignore[arg-type]  # no registry needed to fetch
        self.data = data
        self.dead = dead
        self.tried: list[str] = []

    async def get_data(self, worker: str, keys: list[Key]) -> dict[Key, Any]:
        self.tried.append(worker)
        if worker in self.dead:
            raise OSError(f"{worker} is gone")
        return {k: self.data[worker][k] for k in keys}


def finished(key: Key, workers: list[str]) -> FutureState:
    fs = FutureState(key)
    fs.finish(workers, None)
    return fs


def test_a_fetch_fails_over_to_another_holder_the_scheduler_names() -> None:
    link = FakeLink({"x": ["w2"]})
    transfer = FakeWorkers(link, {"w2": {"x": 42}}, dead={"w1"})
    states: dict[Key, FutureState] = {"x": finished("x", ["w1"])}
    assert asyncio.run(transfer.fetch(["x"], states)) == {"x": 42}
    assert transfer.tried == ["w1", "w2"]
    assert link.asked == [["x"]]
    assert states["x"].workers == ["w2"]
    assert states["x"].type is int  # known once fetched


def test_a_fetch_gives_up_when_every_holder_stays_unreachable() -> None:
    link = FakeLink({"x": ["w1"]})  # the scheduler has not noticed w1 died
    transfer = FakeWorkers(link, {}, dead={"w1"}, timeout=0.2)
    with pytest.raises(OSError, match="Could not reach any worker"):
        asyncio.run(transfer.fetch(["x"], {"x": finished("x", ["w1"])}))
    assert len(link.asked) > 1  # it kept asking until the deadline


def test_a_fetch_waits_for_a_key_nobody_holds_any_more() -> None:
    async def run() -> dict[Key, Any]:
        link = FakeLink({})  # lost: being recomputed
        transfer = FakeWorkers(link, {"w2": {"x": 7}}, dead={"w1"})
        fs = finished("x", ["w1"])
        fetch = asyncio.ensure_future(transfer.fetch(["x"], {"x": fs}))
        while not link.asked:  # the fetch asks, then waits on the key's next report at once
            await asyncio.sleep(0.001)
        assert not fetch.done() and fs.status == "pending"
        fs.finish(["w2"], None)  # the scheduler's next report
        return await asyncio.wait_for(fetch, 5)

    assert asyncio.run(run()) == {"x": 7}
