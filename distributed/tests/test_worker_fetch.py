"""Fetching dependencies from peers: failures end in a clear outcome, never a hang."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from distributed import Client, wait
from distributed.comm import Comm
from distributed.protocol import messages as m
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker


def _refuse_to_rebuild() -> Any:
    raise ValueError("cannot rebuild this object")


class NoUnpickle:
    """Pickles fine, but fails when unpickled."""

    def __reduce__(self) -> Any:
        return (_refuse_to_rebuild, ())


def make_unpicklable() -> NoUnpickle:
    return NoUnpickle()


def type_name(x: Any) -> str:
    return type(x).__name__


@gen_cluster(client=True)
async def test_dependency_that_fails_to_deserialise_errs_its_dependent(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(make_unpicklable, key="x", workers=[a.address])
    y = c.submit(type_name, x, key="y", workers=[b.address])
    with pytest.raises(Exception, match="cannot rebuild this object"):
        await asyncio.wait_for(y, 10)
    assert s.tasks["y"].state == "erred"
    # The holder is fine: tasks on it still run.
    assert await asyncio.wait_for(c.submit(type_name, x, workers=[a.address]), 10) == "NoUnpickle"


class MalformedPeer(Worker):
    """Answers get_data with something that is not a get_data reply."""

    def handle_get_data(self, comm: Comm, msg: m.GetData) -> Any:
        return ["not", "a", "reply"]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_malformed_reply_from_a_peer_errs_the_dependent(c: Client, s: Scheduler, a: Worker) -> None:
    async with MalformedPeer(s.address, nthreads=1, validate=True) as bad:
        x = c.submit(inc, 1, key="x", workers=[bad.address])
        await wait(x)  # not gathered: the client would fetch from the same peer
        y = c.submit(inc, x, key="y", workers=[a.address])
        with pytest.raises(Exception, match="Malformed get_data reply"):
            await asyncio.wait_for(y, 10)
        assert await asyncio.wait_for(c.submit(inc, 10, workers=[a.address]), 10) == 11


@gen_cluster(client=True, config={"distributed.worker.connections.incoming": 1})
async def test_a_worker_serving_its_limit_tells_peers_to_come_back(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert a.incoming_connections_limit == 1
    x = c.submit(inc, 1, workers=[a.address])
    await x
    a.outgoing_to_peers = 1  # as if a reply to a peer were being written
    y = c.submit(inc, x, workers=[b.address])
    state = b.state
    assert state is not None
    await async_poll_for(lambda: any("gather-dep-busy" in str(t) for t in state.log), 10)
    assert not y.done()
    # A client is served whatever the count: it cannot be told to come back.
    assert await c.gather(x) == 2
    a.outgoing_to_peers = 0
    assert await y == 3
    # Each reply to a peer is counted until written, then let go.
    await async_poll_for(lambda: a.outgoing_to_peers == 0, 5)


@gen_cluster(client=True)
async def test_replies_to_peers_are_counted_until_written(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    xs = c.map(inc, range(20), workers=[a.address])
    total = c.submit(sum, xs, workers=[b.address])
    assert await total == sum(range(1, 21))
    assert a.outgoing_transfer_count >= 1 and a.outgoing_to_peers == 0
