"""``dask.base.tokenize`` of futures and of what wraps them.

Futures of distinct keys must never share a token (and, as in dask.distributed,
neither do two future objects of one key), however they are wrapped
(containers, delayed objects, arrays built from delayed objects, task specs,
object arrays) or travelled (pickling, another client): a shared token would
give two different computations the same key.
"""

from __future__ import annotations

import pickle
from typing import Any, Literal

import dask
import dask.array as da
import numpy as np
from dask._task_spec import Task
from dask.base import tokenize

from distributed import Client, Future, wait
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker


def wrappings(f: Future) -> dict[str, Any]:
    """Ways user code holds a future, by name."""
    return {
        "bare": f,
        "list": [f],
        "tuple": (1, [f]),
        "dict value": {"a": f},
        "dict key": {f: 1},
        "set": {f},
        "object array": np.array([f, None], dtype=object),
        "delayed pure": dask.delayed(f, pure=True),  # type: ignore[attr-defined]  # dask.delayed is untyped
        "delayed call": dask.delayed(inc, pure=True)(f),  # type: ignore[attr-defined]
        "from_delayed": da.from_delayed(  # type: ignore[no-untyped-call]  # dask.array is untyped
            dask.delayed(f, pure=True),  # type: ignore[attr-defined]
            shape=(),
            dtype=int,
        ),
        "task": Task("t", inc, f),
        "pickled": pickle.loads(pickle.dumps(f)),
    }


@gen_cluster(client=True)
async def test_distinct_keys_never_share_a_token(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    f1, f2 = c.submit(inc, 1), c.submit(inc, 2)
    async with Client(s.address, asynchronous=True) as c2:
        g2 = c2.submit(inc, 2)  # f2's key, from another client
        assert g2.key == f2.key
        first, second = wrappings(f1), wrappings(g2)
        for name in first:
            assert tokenize(first[name]) != tokenize(second[name]), name
            # Deterministic: the same object twice gives the same token.
            assert tokenize(first[name]) == tokenize(first[name]), name
        await wait([g2])
    # A pickled copy is another future object, with a token of its own (as in dask.distributed).
    assert tokenize(pickle.loads(pickle.dumps(f1))) != tokenize(f1)
    await wait([f1, f2])


@gen_cluster(client=True)
async def test_keys_that_print_alike_get_distinct_tokens(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    pairs: list[tuple[Any, Any]] = [(1, "1"), (("x", 1), ("x", "1")), (("x", 1), "('x', 1)"), (1, 1.5)]
    for k1, k2 in pairs:
        assert tokenize(Future(k1, c)) != tokenize(Future(k2, c)), (k1, k2)
        assert tokenize([Future(k1, c)]) != tokenize([Future(k2, c)]), (k1, k2)


@gen_cluster(client=True)
async def test_tasks_on_distinct_futures_get_distinct_keys(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x, y = c.submit(inc, 1), c.submit(inc, 2)
    assert c.submit(inc, x).key != c.submit(inc, y).key
    assert c.submit(sum, [x]).key != c.submit(sum, [y]).key
    assert c.submit(len, {"a": x}).key != c.submit(len, {"a": y}).key
    px = c.persist(dask.delayed(inc)(1))  # type: ignore[attr-defined]
    py = c.persist(dask.delayed(inc)(2))  # type: ignore[attr-defined]
    assert tokenize(px) != tokenize(py)
    assert await c.compute(dask.delayed(inc)(px)) == 3  # type: ignore[attr-defined]
    assert await c.compute(dask.delayed(inc)(py)) == 4  # type: ignore[attr-defined]
