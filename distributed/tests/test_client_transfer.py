"""Gathering and scattering: structures, targets, the failover of a fetch (without sockets),
and the failover of a scatter (without sockets, and with worker processes killed by SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import namedtuple
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

import psutil
import pytest

from distributed import Client, LocalCluster
from distributed.client.future import FutureState
from distributed.client.transfer import DataTransfer, same_container, scatter_items, spread, substitute
from distributed.comm import Comm, CommClosedError
from distributed.core import ConnectionPool
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import Check
from distributed.protocol.serialize import Serialize, Serialized
from distributed.utils_test import async_poll_for, gen_test

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

    async def get_data(self, worker: str, keys: list[Key], direct: bool = True) -> dict[Key, Any]:
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
        # The fetch asks, then waits on the key's next report at once.
        await async_poll_for(lambda: bool(link.asked) or fetch.done(), timeout=5)
        assert not fetch.done() and fs.status == "pending"
        fs.finish(["w2"], None)  # the scheduler's next report
        return await asyncio.wait_for(fetch, 5)

    assert asyncio.run(run()) == {"x": 7}


# -- the failover of a scatter ---------------------------------------------------------------------


class FakeScheduler:
    """Lists workers (``nthreads``, ``identity``) from a table; ``named`` maps names to addresses."""

    client_id = "c"
    check_replies = True

    def __init__(self, addrs: list[str]) -> None:
        self.addrs = addrs

    async def checked_request(self, msg: Any, check: Check) -> Any:
        if msg["op"] == "nthreads":
            reply: Any = {a: 1 for a in self.addrs}
        else:
            assert msg["op"] == "identity"
            reply = {"workers": {a: {"name": a[-1], "host": "h"} for a in self.addrs}}
        return reply


class FakeScatter(DataTransfer):
    """Workers that store what they are sent; those in ``dead`` cannot be reached."""

    def __init__(self, addrs: list[str], dead: set[str]) -> None:
        super().__init__(None, FakeScheduler(addrs), ConnectionPool(), 0.2)  # type: ignore[arg-type]  # placing needs no registry
        self.dead = dead
        self.stored: dict[str, set[Key]] = {}

    async def update_data(
        self, worker: str, data: Mapping[Key, Serialize | Serialized], direct: bool = True
    ) -> m.UpdateDataReply:
        if worker in self.dead:
            raise CommClosedError(f"{worker} is gone")
        self.stored.setdefault(worker, set()).update(data)
        return m.UpdateDataReply(nbytes={k: 8 for k in data}, types={k: "int" for k in data})


def _place(transfer: FakeScatter, n: int, broadcast: bool | int = False, workers: Any = None) -> dict[Key, list[str]]:
    items: dict[Key, Any] = {f"x{i}": i for i in range(n)}

    async def run() -> dict[Key, list[str]]:
        addrs = await transfer.scatter_targets(workers)
        who_has, nbytes, _ = await transfer.place(items, addrs, broadcast, workers)
        assert set(nbytes) == set(items)
        return who_has

    return asyncio.run(run())


def test_a_scatter_places_the_share_of_an_unreachable_worker_elsewhere() -> None:
    transfer = FakeScatter(["w1", "w2", "w3"], dead={"w1"})
    who_has = _place(transfer, 6)
    assert sorted(who_has) == [f"x{i}" for i in range(6)]
    assert all(len(ws) == 1 and ws[0] != "w1" for ws in who_has.values())
    assert transfer.stored.keys() == {"w2", "w3"}
    # Copies stay on distinct workers.
    transfer = FakeScatter(["w1", "w2", "w3"], dead={"w2"})
    who_has = _place(transfer, 3, broadcast=2)
    assert all(sorted(ws) == ["w1", "w3"] for ws in who_has.values())
    # A broadcast needs nothing more: every live worker got its copy.
    transfer = FakeScatter(["w1", "w2", "w3"], dead={"w3"})
    who_has = _place(transfer, 3, broadcast=True)
    assert all(sorted(ws) == ["w1", "w2"] for ws in who_has.values())


def test_a_scatter_to_named_workers_that_are_all_unreachable_names_them() -> None:
    transfer = FakeScatter(["w1", "w2", "w3"], dead={"w1", "w2"})
    with pytest.raises(CommClosedError, match=r"workers=\['w1', 'w2'\].*w1, w2 failed"):
        _place(transfer, 4, workers=["w1", "w2"])
    assert not transfer.stored  # never placed on a worker that was not named
    # Named by name: the live one among them takes everything.
    transfer = FakeScatter(["w1", "w2", "w3"], dead={"w1"})
    who_has = _place(transfer, 4, workers=["1", "2"])
    assert all(ws == ["w2"] for ws in who_has.values())


def test_a_scatter_with_no_live_worker_left_fails_naming_the_unreachable() -> None:
    transfer = FakeScatter(["w1", "w2"], dead={"w1", "w2"})
    with pytest.raises(CommClosedError, match="w1, w2"):
        _place(transfer, 2)


async def _worker_pids(c: Client[Literal[True]]) -> dict[str, int]:
    pids: dict[str, int] = await c.run(os.getpid)
    return pids


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _sigkill(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it has died (without reaping it: its nanny may be its parent)."""
    os.kill(pid, signal.SIGKILL)
    await async_poll_for(partial(_dead, pid), timeout=10)


@pytest.mark.parametrize("when", ["before-connecting", "after-connecting"])
@gen_test(timeout=60)
async def test_scatter_fails_over_from_a_worker_process_killed_during_it(
    when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, asynchronous=True, dashboard_address=None
        ) as cluster,
        Client(cluster, asynchronous=True) as c,
    ):
        pids = await _worker_pids(c)
        victim = sorted(pids)[0]  # the first of the sorted targets gets the first item
        pool = c.transfer.pool
        connect = pool.connect
        killed: list[str] = []

        async def connect_and_kill(addr: str) -> Comm:
            # The scatter is aimed at the victim: kill it (SIGKILL, no goodbye) as the
            # scatter reaches for it, before the scheduler can notice.
            if addr == victim and not killed and when == "before-connecting":
                killed.append(addr)
                await _sigkill(pids[addr])
            comm = await connect(addr)
            if addr == victim and not killed:
                killed.append(addr)
                await _sigkill(pids[addr])
            return comm

        monkeypatch.setattr(pool, "connect", connect_and_kill)
        futures = await c.scatter(list(range(10)))
        assert killed == [victim]
        assert await c.gather(futures) == list(range(10))
        who_has = await c.who_has(futures)
        assert all(ws and victim not in ws for ws in who_has.values())
        assert await c.submit(sum, futures) == 45


@gen_test(timeout=60)
async def test_scatter_to_named_workers_all_killed_raises_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    async with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, asynchronous=True, dashboard_address=None
        ) as cluster,
        Client(cluster, asynchronous=True) as c,
    ):
        pids = await _worker_pids(c)
        victim, other = sorted(pids)
        pool = c.transfer.pool
        connect = pool.connect

        async def connect_and_kill(addr: str) -> Comm:
            if addr == victim and psutil.pid_exists(pids[victim]):
                await _sigkill(pids[victim])
            return await connect(addr)

        monkeypatch.setattr(pool, "connect", connect_and_kill)
        with pytest.raises(CommClosedError, match=f"workers=\\['{victim}'\\].*{victim} failed"):
            await c.scatter([1, 2, 3], workers=[victim])
        # The other worker still takes data.
        futures = await c.scatter([1, 2, 3], workers=[other])
        assert await c.gather(futures) == [1, 2, 3]
