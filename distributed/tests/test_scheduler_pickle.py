"""``distributed.scheduler.pickle: False``: the scheduler unpickles nothing it is sent.

The scheduler keeps tasks, results, errors, datasets and coordination values
as the frames it received; the only requests that make it unpickle are those
that ask it to run code: ``run_on_scheduler``, registering a scheduler plugin,
a ``key=`` function for ``workers_to_close``/``retire_workers``.  With the key
False those are refused with a ``ValueError`` naming the key, and a worker's
error reply reaches the client without the scheduler opening it.  Everything
else works as before.
"""

from __future__ import annotations

import pickle
from typing import Any, Literal

import dask
import dask.array as da
import dask.bag as db
import pytest

from distributed import Client, Queue, SchedulerPlugin, Variable, fire_and_forget
from distributed.core import RemoteError, rebuild_exception, rpc
from distributed.protocol import Serialize, Serialized
from distributed.protocol import messages as m
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker

NO_PICKLE = {"distributed.scheduler.pickle": False}
REFUSED = r"disallowed from deserializing .*'distributed\.scheduler\.pickle'"

#: Calls of :func:`_record_unpickling`, made only when a :class:`Tripwire` is unpickled.
UNPICKLED: list[str] = []


def _record_unpickling(name: str) -> Tripwire:
    UNPICKLED.append(name)
    return Tripwire(name)


class Tripwire:
    """An object whose unpickling leaves a trace."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _record_unpickling, (self.name,)


class MarkScheduler(SchedulerPlugin):
    name = "mark-scheduler"

    async def start(self, scheduler: Any) -> None:
        scheduler.marked = True


def mark_scheduler(dask_scheduler: Any = None) -> str:
    dask_scheduler.marked = True
    return "ran"


def by_host(ws: Any) -> str:
    return str(ws.host)


def divide_by_zero() -> float:
    return 1 / 0


# -- refused requests ----------------------------------------------------------------------
@gen_cluster(client=True, config=NO_PICKLE)
async def test_run_on_scheduler_is_refused(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    with pytest.raises(ValueError, match=REFUSED) as info:
        await c.run_on_scheduler(mark_scheduler)
    assert "run_on_scheduler" in str(info.value)
    assert not hasattr(s, "marked")
    # The cluster keeps working.
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, config=NO_PICKLE)
async def test_scheduler_plugin_registration_is_refused(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    before = dict(s.plugins)
    with pytest.raises(ValueError, match=REFUSED) as info:
        await c.register_plugin(MarkScheduler())
    assert "scheduler plugin" in str(info.value)
    assert s.plugins == before
    assert not hasattr(s, "marked")
    assert await c.submit(inc, 2) == 3


@gen_cluster(client=True, config=NO_PICKLE)
async def test_key_functions_choosing_workers_are_refused(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    with pytest.raises(ValueError, match=REFUSED):
        await c.retire_workers(key=by_host)
    assert len(s.workers) == 2
    async with rpc(s.address) as r:
        with pytest.raises(ValueError, match=REFUSED):
            await r.call("workers_to_close", key=Serialize(by_host))
        # Without a key= nothing is unpickled: served.
        assert isinstance(await r.call("workers_to_close"), (list, tuple))
    # In process the scheduler's own callers hand over a live callable: nothing to unpickle.
    assert len(s.workers_to_close(key=by_host, n=2)) == 2


@gen_cluster(client=True, config=NO_PICKLE)
async def test_refused_over_the_wire_with_a_pickle_that_is_never_opened(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    tripwire = Serialized({"serializer": "pickle"}, [pickle.dumps(Tripwire("run"))])
    UNPICKLED.clear()
    async with rpc(s.address) as r:
        with pytest.raises(ValueError, match=REFUSED):
            await r.call("run_function", function=tripwire)
        with pytest.raises(ValueError, match=REFUSED):
            await r.call("register_scheduler_plugin", plugin=tripwire, name="x")
        with pytest.raises(ValueError, match=REFUSED):
            await r.call("retire_workers", key=tripwire)
    assert UNPICKLED == []


# -- worker error replies -------------------------------------------------------------------
def test_error_reply_left_unopened_is_a_remote_error_holding_it() -> None:
    exception = Serialized({"serializer": "pickle"}, [pickle.dumps(Tripwire("error"))])
    reply = {"status": "error", "exception": exception, "traceback": None, "text": "boom", "type": "ValueError"}
    UNPICKLED.clear()
    exc = rebuild_exception(reply, unpickle=False)
    assert UNPICKLED == []
    assert isinstance(exc, RemoteError)
    assert str(exc) == "ValueError: boom"
    assert exc.reply is reply


@gen_cluster(client=True, config=NO_PICKLE)
async def test_worker_errors_pass_through_the_scheduler_unopened(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert s.rpc.unpickle_errors is False
    request = m.RunFunction(op="run", function=Serialize(divide_by_zero))
    with pytest.raises(RemoteError, match="ZeroDivisionError") as info:
        await s.rpc.call(a.address, request)
    assert info.value.reply is not None
    # The client, which may unpickle, gets the worker's own exception.
    with pytest.raises(ZeroDivisionError):
        await c.run(divide_by_zero)
    results = await c.run(divide_by_zero, on_error="return")
    assert set(results) == {a.address, b.address}
    assert all(isinstance(e, ZeroDivisionError) for e in results.values())


# -- what keeps working -----------------------------------------------------------------------
@gen_cluster(client=True, config=NO_PICKLE)
async def test_ordinary_work_runs_without_the_scheduler_unpickling(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert await c.submit(inc, 1) == 2
    assert await c.gather(c.map(inc, range(10))) == list(range(1, 11))
    [x] = await c.scatter([10])
    assert await c.submit(inc, x) == 11
    arr = da.arange(100, chunks=10)
    assert int(await c.compute((arr + 1).sum())) == sum(range(1, 101))
    bag = db.from_sequence(range(10), npartitions=3).map(inc)  # type: ignore[no-untyped-call]  # dask.bag is untyped
    assert await c.compute(bag.sum()) == 55
    (persisted,) = c.persist([arr * 2])
    assert int(await c.compute(persisted.sum())) == 2 * sum(range(100))
    # Erred tasks: the error travels to the client unopened by the scheduler.
    with pytest.raises(ZeroDivisionError):
        await c.submit(divide_by_zero)
    # Datasets and coordination values are kept as the frames they came as.
    await c.publish_dataset(data=x)
    assert await (await c.get_dataset("data")) == 10
    v = Variable("v", client=c)
    await v.set({"a": [1, 2]})
    assert await v.get() == {"a": [1, 2]}
    q = Queue("q", client=c)
    await q.put({"b": 3})
    assert await q.get() == {"b": 3}
    # Functions run on workers go through the scheduler unopened.
    assert await c.run(inc, 1) == {a.address: 2, b.address: 2}
    f = c.submit(inc, 41)
    key = f.key
    fire_and_forget(f)
    del f
    await async_poll_for(lambda: key not in s.tasks, 10)


@gen_cluster(client=True, config=NO_PICKLE)
async def test_dask_compute_with_the_client_as_scheduler(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    arr = da.ones((20, 20), chunks=5)
    result = await c.compute(arr.T.dot(arr).sum())
    assert int(result) == 20 * 20 * 20


# -- the setting itself ---------------------------------------------------------------------------
def test_default_allows_pickle() -> None:
    assert dask.config.get("distributed.scheduler.pickle") is True
    assert Scheduler().allow_pickle is True


@pytest.mark.parametrize("value", ["no", "False", 0, None])
def test_only_a_boolean_is_accepted(value: Any) -> None:
    with dask.config.set({"distributed.scheduler.pickle": value}):
        with pytest.raises(ValueError, match="distributed.scheduler.pickle must be true or false"):
            Scheduler()


@gen_cluster(client=True)
async def test_run_on_scheduler_still_runs_by_default(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert await c.run_on_scheduler(mark_scheduler) == "ran"
    assert getattr(s, "marked", False) is True
