"""The client checks the replies it acts on against their declarations.

A malformed reply from a scheduler or worker in another process raises
``MessageError`` naming the request, instead of a ``KeyError`` or ``TypeError``
deep inside (or a fetch that retries forever).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from distributed import Client
from distributed.comm import Comm
from distributed.core import Route, Server
from distributed.protocol import messages as m
from distributed.protocol.schema import MessageError
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc
from distributed.worker import Worker


class NoDataWorker(Worker):
    """Answers ``get_data`` without its ``data`` field."""

    def handle_get_data(self, comm: Comm, msg: m.GetData) -> Any:
        return {"status": "OK", "nbytes": {}}


class EmptyDataWorker(Worker):
    """Answers ``get_data`` well formed, but without the keys (so the client asks who has them)."""

    def handle_get_data(self, comm: Comm, msg: m.GetData) -> Any:
        return m.GetDataReply(status="OK", data={}, nbytes={})


class NoTypesWorker(Worker):
    """Answers ``update_data`` without its ``types`` field."""

    async def handle_update_data(self, comm: Comm, msg: m.WorkerUpdateData) -> Any:
        await super().handle_update_data(comm, msg)
        return {"nbytes": {k: 1 for k in msg["data"]}}


def answer(s: Scheduler, op: str, reply: Any) -> None:
    """Make the scheduler answer ``op`` with ``reply``."""
    schema = s.handlers[op].schema
    s.handlers[op] = Route(schema, lambda comm, msg: reply)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], Worker=NoDataWorker)
async def test_get_data_reply_without_data(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    f = c.submit(inc, 1, key="x")
    with pytest.raises(MessageError, match=r"'get_data' from .*GetDataReply: missing field 'data'"):
        await asyncio.wait_for(f.result(), 5)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], Worker=EmptyDataWorker)
async def test_malformed_who_has_reply_during_fetch(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    f = c.submit(inc, 1, key="x")
    await c.wait_for_workers(1)
    await async_poll_for(lambda: f.status == "finished", timeout=5)
    answer(s, "who_has", {"x": 5})
    with pytest.raises(MessageError, match=r"'who_has' from the scheduler: entry 'x': expected a list, got int"):
        await asyncio.wait_for(f.result(), 5)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_malformed_nthreads_reply_during_scatter(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    answer(s, "nthreads", [a.address])
    with pytest.raises(MessageError, match=r"'nthreads' from the scheduler: expected a mapping, got (list|tuple)"):
        await c.scatter(1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_malformed_identity_reply_during_scatter(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    answer(s, "identity", {**s.identity(), "workers": {a.address: {"name": a.name}}})
    with pytest.raises(MessageError, match=r"'identity' from the scheduler: .*WorkerIdentity: missing field"):
        await c.scatter(1, workers=[a.name])


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_malformed_update_data_reply_from_the_scheduler(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    answer(s, "update-data", {"status": "OK"})
    with pytest.raises(
        MessageError, match=r"'update-data' from the scheduler: expected one of .*'OK'.*, got \{'status'"
    ):
        await c.scatter(1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], Worker=NoTypesWorker)
async def test_update_data_reply_without_types(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    with pytest.raises(MessageError, match=r"'update_data' from .*UpdateDataReply: missing field 'types'"):
        await c.scatter(1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_well_formed_replies_pass(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    x = await c.scatter(1)
    y = await c.scatter(2, workers=[a.name])
    assert await c.gather([x, y, c.submit(inc, x)]) == [1, 2, 2]
    info = await c.scheduler_info()
    assert list(info["workers"]) == [a.address]


@gen_test()
async def test_malformed_registration_reply() -> None:
    async def register(comm: Comm, msg: m.RegisterClient) -> None:
        await comm.write({"status": "OK", "id": "fake"})
        await comm.close()

    server = Server({"register-client": Route(m.RegisterClient, register, takes_comm=True)})
    await server.listen("tcp://127.0.0.1:0")
    try:
        client = Client(server.address, asynchronous=True, timeout=5)
        with pytest.raises(MessageError, match=r"'register-client' from the scheduler: .*missing field"):
            await client
        await client.close()
    finally:
        await server.close()
