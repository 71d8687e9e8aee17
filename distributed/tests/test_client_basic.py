from __future__ import annotations

import operator

import pytest

from distributed import Client, Future
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc, throws


@gen_cluster(client=True)
async def test_submit(c: Client, s: Scheduler, a: object, b: object) -> None:
    x = c.submit(inc, 1)
    assert isinstance(x, Future)
    assert await x == 2
    y = c.submit(operator.add, x, 10)
    assert await y == 12
    assert s.story(y.key)


@gen_cluster(client=True)
async def test_exception(c: Client, s: Scheduler, a: object, b: object) -> None:
    x = c.submit(throws, 1)
    with pytest.raises(RuntimeError, match="hello!"):
        await x
    assert x.status == "error"
    y = c.submit(inc, 10)
    assert await y == 11
