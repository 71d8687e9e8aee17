"""``direct_to_workers=False`` and ``direct=False``: results and scattered data go through the scheduler."""

from __future__ import annotations

from typing import Any, Literal

import dask
import numpy as np
import pytest

from distributed import Client
from distributed.core import Route
from distributed.protocol import messages as m
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)


def count_relays(s: Scheduler) -> dict[str, int]:
    """Wrap the scheduler's relay handlers to count the requests they serve."""
    counts = {"relay_get_data": 0, "relay_update_data": 0}
    for op in counts:
        route = s.handlers[op]

        def counting(comm: Any, msg: Any, original: Any = route.func, op: str = op) -> Any:
            counts[op] += 1
            return original(comm, msg)

        s.handlers[op] = Route(route.schema, counting)
    return counts


@gen_cluster(client=False)
async def test_a_client_not_direct_to_workers_never_connects_to_them(s: Scheduler, a: Worker, b: Worker) -> None:
    counts = count_relays(s)
    async with Client(s.address, asynchronous=True, direct_to_workers=False) as c:
        assert c.direct_to_workers is False
        x = await c.scatter(np.arange(10))
        y = c.submit(inc, 1)
        assert (await x).sum() == 45
        assert await y == 2
        assert (await c.gather([x, y]))[1] == 2
        assert await c.compute(dask.delayed(inc)(y)) == 3  # type: ignore[attr-defined]  # untyped in dask
        # The client's pool never opened a connection to a worker.
        assert not set(c.pool.available) & {a.address, b.address}
        assert not set(c.pool.occupied) & {a.address, b.address}
    assert counts["relay_update_data"] >= 1 and counts["relay_get_data"] >= 3


@gen_cluster(client=True)
async def test_direct_false_per_call(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    counts = count_relays(s)
    futures = await c.scatter([1, 2, 3], direct=False)
    assert counts["relay_update_data"] >= 1
    assert await c.gather(futures, direct=False) == [1, 2, 3]
    assert counts["relay_get_data"] >= 1
    before = dict(counts)
    assert await c.gather(futures) == [1, 2, 3]  # the client's default: straight from the workers
    assert counts == before


@gen_cluster(client=False)
async def test_config_key_sets_the_default(s: Scheduler, a: Worker, b: Worker) -> None:
    with dask.config.set({"distributed.client.direct-to-workers": False}):
        async with Client(s.address, asynchronous=True) as c:
            assert c.direct_to_workers is False
            assert await c.submit(inc, 1) == 2


@gen_cluster(client=True)
async def test_a_relay_to_an_unknown_address_is_refused(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    reply = await c.link.request(m.RelayGetData(op="relay_get_data", worker="tcp://127.0.0.1:9", keys=["x"]))
    assert reply["status"] == "unreachable" and "not a worker" in reply["error"]


@pytest.mark.parametrize("direct", [True, False])
@gen_cluster(client=False, nthreads=[("127.0.0.1", 1)])
async def test_a_dead_holder_is_failed_over_through_the_relay(s: Scheduler, a: Worker, direct: bool) -> None:
    async with Client(s.address, asynchronous=True, direct_to_workers=direct) as c:
        async with Worker(s.address, nthreads=1) as b:
            x = c.submit(inc, 1, workers=[b.address], allow_other_workers=True)
            assert await x == 2
            assert [ws.address for ws in s.tasks[x.key].who_has] == [b.address]
        # b is gone with x: the relay cannot reach it; x is computed again on a and fetched through the scheduler.
        assert await x == 2


@gen_cluster(client=True)
async def test_get_direct_false(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    counts = count_relays(s)
    assert await c.get({"a": (inc, 1)}, "a", direct=False) == 2
    assert counts["relay_get_data"] == 1
