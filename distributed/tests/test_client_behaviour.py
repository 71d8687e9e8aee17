"""Client behaviours users rely on, each pinned by a test that failed before its fix."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import pickle
import threading
import time
import types
from typing import Any, Literal

import dask
import dask.bag as db
import pytest
from dask.base import tokenize

import distributed
from distributed import Client, Future, LocalCluster, Status, as_completed, futures_of, wait
from distributed.core import Route
from distributed.exceptions import FutureCancelledError, LostDataError
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc
from distributed.worker import Worker

#: Tasks block on this (workers run in this process); tests set it when done.
RELEASE = threading.Event()


def block(x: Any = None) -> int:
    RELEASE.wait(10)
    return 1


@pytest.fixture(autouse=True)
def _release_blocked_tasks() -> Any:
    RELEASE.clear()
    yield
    RELEASE.set()


# -- cancelled futures raise an Exception -------------------------------------------------
def test_cancelled_error_is_an_exception() -> None:
    assert issubclass(distributed.CancelledError, Exception)
    assert issubclass(FutureCancelledError, distributed.CancelledError)
    assert not issubclass(FutureCancelledError, asyncio.CancelledError)


@gen_cluster(client=True)
async def test_cancelled_future_caught_by_except_exception(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    f = c.submit(block, pure=False)
    await c.cancel(f)
    caught: BaseException | None = None
    try:
        await f
    except Exception as e:
        caught = e
    RELEASE.set()
    assert isinstance(caught, distributed.CancelledError)
    assert isinstance(caught, FutureCancelledError)


# -- Client.current ----------------------------------------------------------------------
def test_client_current_inside_with_block() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            assert Client.current(allow_global=False) is client
        with pytest.raises(ValueError):
            Client.current(allow_global=False)


@gen_cluster()
async def test_client_current_inside_async_with_block(s: Scheduler, a: Worker, b: Worker) -> None:
    async with Client(s.address, asynchronous=True) as client:
        assert Client.current(allow_global=False) is client
    with pytest.raises(ValueError):
        Client.current(allow_global=False)


# -- cancel ------------------------------------------------------------------------------
@gen_cluster(client=True)
async def test_cancel_persisted_collection(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = db.from_sequence(range(5), npartitions=5).map(block)  # type: ignore[no-untyped-call]  # dask.bag is untyped
    x = c.persist(x)
    futures = futures_of(x)
    assert len(futures) == 5
    await c.cancel(x)
    assert all(f.cancelled() for f in futures)
    RELEASE.set()
    await async_poll_for(lambda: not any(f.key in s.tasks for f in futures), timeout=5)


@gen_cluster(client=True)
async def test_cancel_right_after_submit(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    """The cancel reaches the scheduler after the graph it cancels, not before."""
    futures = [c.submit(inc, i, pure=False) for i in range(5)]
    await c.cancel(futures)
    assert all(f.cancelled() for f in futures)
    await async_poll_for(lambda: not any(f.key in s.tasks for f in futures), timeout=5)


# -- compute(traverse=), wait on collections ---------------------------------------------
@gen_cluster(client=True)
async def test_compute_traverses_containers(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = db.from_sequence([1, 2, 3], npartitions=2).map(inc)  # type: ignore[no-untyped-call]  # dask.bag is untyped
    fx, fd, fl = c.compute([x, {"a": x, "b": 1}, [x, 2]])
    assert await fx == [2, 3, 4]
    assert await fd == {"a": [2, 3, 4], "b": 1}
    assert await fl == [[2, 3, 4], 2]
    # A plain container is passed through untouched without traverse.
    assert c.compute([{"a": x}], traverse=False)[0]["a"] is x


@gen_cluster(client=True)
async def test_wait_on_persisted_collections(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.persist(db.from_sequence(range(4), npartitions=4).map(block))  # type: ignore[no-untyped-call]  # dask.bag is untyped
    y = c.persist(db.from_sequence(range(4), npartitions=2).map(inc))  # type: ignore[no-untyped-call]  # dask.bag is untyped
    with pytest.raises(TimeoutError):
        await wait([x, y], timeout=0.2)
    RELEASE.set()
    await wait([x, y], timeout=5)
    assert all(f.status == "finished" for f in futures_of([x, y]))


class BrokenGraph:
    """A collection (it has an expression) whose graph cannot be built."""

    def __init__(self) -> None:
        import dask.dataframe as dd
        import pandas as pd

        frame = dd.from_pandas(pd.DataFrame({"a": [1]}), npartitions=1)  # type: ignore[no-untyped-call]  # untyped
        self.expr = frame.expr

    def __dask_graph__(self) -> Any:
        raise ValueError("no graph for you")


@gen_cluster(client=True)
async def test_wait_raises_when_graph_cannot_be_built(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    with pytest.raises(ValueError, match="no graph for you"):
        await wait(BrokenGraph())


# -- as_completed ------------------------------------------------------------------------
@gen_cluster(client=True)
async def test_as_completed_clear_releases_futures(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    done = c.submit(inc, 1)
    await done
    ac = as_completed([done, c.submit(block, 1, pure=False), c.submit(block, 2, pure=False)])
    keys = [f.key for f in ac.futures]
    del done
    ac.clear()
    assert ac.is_empty()
    await async_poll_for(lambda: not any(k in s.tasks for k in keys), timeout=5)
    assert not c.refcount
    RELEASE.set()


@gen_cluster(client=True)
async def test_as_completed_timeout(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    fast = c.submit(inc, 1)
    await fast
    ac = as_completed([fast, c.submit(block, pure=False)], timeout=0.5)
    it = ac.__aiter__()
    assert await it.__anext__() is fast
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(it.__anext__(), 5)
    assert time.monotonic() - start < 2  # the as_completed timeout, not wait_for's
    with pytest.raises(TimeoutError):
        next(ac)
    RELEASE.set()


@gen_cluster(client=True)
async def test_as_completed_with_results_yields_cancelled(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    f = c.submit(block, pure=False)
    await c.cancel(f)
    RELEASE.set()
    for raise_errors in (True, False):
        results = [pair async for pair in as_completed([f], with_results=True, raise_errors=raise_errors)]
        assert len(results) == 1
        future, error = results[0]
        assert future is f
        assert isinstance(error, distributed.CancelledError)
        (future, error) = next(as_completed([f], with_results=True, raise_errors=raise_errors))
        assert isinstance(error, distributed.CancelledError)


# -- result(timeout=), lost holders ------------------------------------------------------
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1, {"resources": {"A": 1}}), ("127.0.0.1", 1)])
async def test_result_after_only_holder_closes(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    """The holder closes; no other worker can recompute the key until one with the resource joins."""
    x = c.submit(inc, 1, resources={"A": 1})
    assert await x == 2
    assert x.status == "finished"
    await a.close()
    start = time.monotonic()
    # The fetch must fail over within about a second, and the deadline covers it.
    with pytest.raises(TimeoutError):
        await x.result(timeout=2)
    assert time.monotonic() - start < 4
    w = Worker(s.address, nthreads=1, resources={"A": 1}, name="late", host="127.0.0.1")
    await w.start()
    try:
        assert await x.result(timeout=10) == 2
        assert x.status == "finished"
    finally:
        await w.close()


@gen_cluster(client=True)
async def test_result_when_holder_closes_recomputes(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(inc, 10, workers=[a.address], allow_other_workers=True)
    assert await x == 11
    await a.close()
    start = time.monotonic()
    assert await x.result(timeout=5) == 11
    assert time.monotonic() - start < 4


@gen_cluster(client=True)
async def test_lost_data_makes_future_pending_again(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    """The scheduler's lost-data report sends the future back to waiting for the next report."""
    x = c.submit(inc, 1)
    assert await x == 2
    # The report the scheduler sends when a key leaves memory (it then recomputes it).
    c.link.handle_report({"op": "lost-data", "key": x.key})
    assert x.status == "pending"
    assert not x.done()
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await x.result(timeout=0.3)
    assert time.monotonic() - start < 2
    waiter = asyncio.ensure_future(x.result(timeout=5))
    await asyncio.sleep(0)
    assert not waiter.done()
    c.link.handle_report(
        {"op": "key-in-memory", "key": x.key, "workers": [ws.address for ws in s.tasks[x.key].who_has]}
    )
    assert await waiter == 2


@gen_cluster(client=True)
async def test_lost_scattered_data_raises_lost_data_error(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([41], workers=[a.address])
    await a.close()
    with pytest.raises(LostDataError):
        await x.result(timeout=3)
    # Caught as dask users catch it: dask cancels such a future.
    with pytest.raises(concurrent.futures.CancelledError, match="lost with its workers"):
        await x.result(timeout=3)


# -- asynchronous clients return awaitables ----------------------------------------------
def raise_with_cause(x: int) -> int:
    empty: dict[str, int] = {}
    try:
        empty["missing"]
    except KeyError as e:
        raise ValueError("outer") from e
    return x


@gen_cluster(client=True)
async def test_async_client_returns_awaitables(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    versions = c.get_versions()
    assert inspect.isawaitable(versions)
    assert "client" in await versions
    f = c.submit(raise_with_cause, 1)
    tb = f.traceback()
    assert inspect.isawaitable(tb)
    assert isinstance(await tb, types.TracebackType)
    x = db.from_sequence([1, 2], npartitions=1).map(inc)  # type: ignore[no-untyped-call]  # dask.bag is untyped
    computed = c.compute({"x": x})
    assert inspect.isawaitable(computed)
    assert await computed == {"x": [2, 3]}


class TaskError(Exception):
    """A user exception class, unknown to pickling helpers installed at import time."""


def raise_task_error_with_cause(x: int) -> int:
    try:
        raise KeyError(x)
    except KeyError as e:
        raise TaskError("outer") from e


@gen_cluster(client=True)
async def test_task_exception_keeps_its_cause(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    f = c.submit(raise_task_error_with_cause, 1)
    with pytest.raises(TaskError) as info:
        await f
    assert isinstance(info.value.__cause__, KeyError)


# -- Future.type -------------------------------------------------------------------------
class Local:
    """A type the client has imported (this module)."""


def make_local(x: int) -> Local:
    return Local()


@gen_cluster(client=True)
async def test_future_type_is_the_type(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    np = pytest.importorskip("numpy")
    x = c.submit(inc, 1)
    y = c.submit(np.arange, 3)
    z = c.submit(make_local, 1)
    await wait([x, y, z])
    assert x.type is int
    assert y.type is np.ndarray
    assert z.type is Local
    assert "type: int" in repr(x)
    [w] = await c.scatter([{1, 2}])
    assert w.type is set


@gen_cluster(client=True)
async def test_future_type_known_after_fetch_when_not_importable(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(inc, 1)
    await x
    # As if the worker's type lived in a module this process never imported.
    x.state.type = "not_imported_module.Thing"
    assert x.type is None
    assert await x == 2
    assert x.type is int


# -- scatter -----------------------------------------------------------------------------
Point = collections.namedtuple("Point", ["x", "y"])


class MyList(list[int]):
    pass


@gen_cluster(client=True)
async def test_scatter_keeps_container_types(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    fset = await c.scatter({1, 2})
    assert isinstance(fset, set) and await c.gather(list(fset)) in ([1, 2], [2, 1])
    ffrozen = await c.scatter(frozenset([3]))
    assert isinstance(ffrozen, frozenset) and len(ffrozen) == 1
    fpoint = await c.scatter(Point(4, 5))
    assert isinstance(fpoint, Point) and await c.gather(list(fpoint)) == [4, 5]
    fmine = await c.scatter(MyList([6, 7]))
    assert type(fmine) is MyList and await c.gather(list(fmine)) == [6, 7]
    frange = await c.scatter(range(3))
    assert isinstance(frange, list) and await c.gather(frange) == [0, 1, 2]
    ftuple = await c.scatter((8, 9))
    assert isinstance(ftuple, tuple) and await c.gather(ftuple) == (8, 9)
    fdict = await c.scatter({"a": 1})
    assert isinstance(fdict, dict) and await fdict["a"] == 1
    one = await c.scatter("just one")
    assert isinstance(one, Future) and await one == "just one"


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1, {"name": "alice"}), ("127.0.0.1", 1), ("127.0.0.1", 1)],
)
async def test_scatter_broadcast_n_and_worker_names(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, w: Worker
) -> None:
    f = await c.scatter(123, broadcast=2)
    assert len(s.tasks[f.key].who_has) == 2
    g = await c.scatter(456, broadcast=True)
    assert len(s.tasks[g.key].who_has) == 3
    h = await c.scatter(789, workers="alice")
    assert {ws.address for ws in s.tasks[h.key].who_has} == {a.address}
    i = await c.scatter([10], workers=[2])
    assert {ws.address for ws in s.tasks[i[0].key].who_has} == {w.address}


# -- dashboard_link ----------------------------------------------------------------------
def test_dashboard_link_from_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHBOARD_PREFIX", "lab")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        port = cluster.scheduler_info["services"]["dashboard"]
        with Client(cluster.scheduler_address) as client:
            # Known at once, without scheduler_info(); an in-process scheduler is on this host.
            assert client.dashboard_link == f"http://127.0.0.1:{port}/status"
            with dask.config.set({"distributed.dashboard.link": "{scheme}://{host}:{port}/{DASHBOARD_PREFIX}/status"}):
                assert client.dashboard_link == f"http://127.0.0.1:{port}/lab/status"
        with Client(cluster) as client:
            assert client.dashboard_link == cluster.dashboard_link == f"http://127.0.0.1:{port}/status"


@gen_test()
async def test_dashboard_link_comes_with_the_registration_reply() -> None:
    async with Scheduler(host="127.0.0.1", port=0, dashboard=True, dashboard_address="127.0.0.1:0") as s:
        assert s.http_server is not None
        identity = s.handlers["identity"]
        asked: list[str] = []

        def counting(comm: Any, msg: Any) -> Any:
            asked.append(msg["op"])
            return identity.func(comm, msg)

        s.handlers["identity"] = Route(identity.schema, counting)
        async with Client(s.address, asynchronous=True) as c:
            # Over TCP, from the first moment, and without asking the scheduler again.
            assert c.dashboard_link == f"http://127.0.0.1:{s.http_server.port}/status"
            assert asked == []


@gen_cluster(client=True)
async def test_dashboard_link_none_without_dashboard(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert c.dashboard_link is None


# -- shutdown ----------------------------------------------------------------------------
def test_shutdown_closes_cluster_object() -> None:
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    try:
        client = Client(cluster)
        client.shutdown()
        assert client.status == "closed"
        assert cluster.status == Status.closed
        assert cluster.scheduler is not None and cluster.scheduler.status == Status.closed
    finally:
        cluster.close()


def test_shutdown_closes_own_cluster() -> None:
    client = Client(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    cluster = client.cluster
    client.shutdown()
    assert client.status == "closed"
    assert cluster.scheduler.status == Status.closed


@gen_test()
async def test_shutdown_terminates_scheduler_by_address() -> None:
    s = Scheduler(host="127.0.0.1", port=0, dashboard=False)
    await s.start()
    w = Worker(s.address, nthreads=1, host="127.0.0.1")
    await w.start()
    try:
        client = await Client(s.address, asynchronous=True)
        await client.shutdown()
        assert client.status == "closed"
        await async_poll_for(lambda: s.status == Status.closed and w.status == Status.closed, timeout=10)
    finally:
        await w.close()
        await s.close()


def test_client_not_set_as_default_is_not_current_in_its_with_block() -> None:
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as c,
        Client(cluster, set_as_default=False) as c2,
    ):
        assert Client.current() is c
        assert Client.current(allow_global=False) is c
        assert c2.submit(inc, 1).result() == 2


# -- tokenize ----------------------------------------------------------------------------
@gen_cluster(client=True)
async def test_tokenize_futures_per_object(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x, y = c.submit(inc, 1), c.submit(inc, 2)
    assert tokenize(x) != tokenize(y)
    assert tokenize([x]) != tokenize([y])
    assert tokenize(x) == tokenize(x)  # deterministic for one object
    # Distinct future objects are distinct tokens, even of one key (as in dask.distributed).
    same = Future(x.key, c)
    assert tokenize(x) != tokenize(same)
    assert tokenize(x) != tokenize(pickle.loads(pickle.dumps(x)))
    assert tokenize(x) != tokenize(x.key)
    # Graphs that take different futures get different keys.
    assert c.submit(inc, x).key != c.submit(inc, y).key
    await wait([x, y])


# -- futures made from a bare key -----------------------------------------------------------------
@gen_cluster(client=True)
async def test_future_of_a_key_on_another_client_learns_its_status(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(inc, 41)
    assert await x == 42
    async with Client(s.address, asynchronous=True) as c2:
        y = Future(x.key, c2)
        # The new client never submitted the key: the future asks the scheduler for it.
        assert await y.result(timeout=5) == 42
        assert y.status == "finished"


class _Box:
    """Hides a future from dask's argument traversal, so it travels pickled."""

    def __init__(self, future: Future) -> None:
        self.future = future


def _unbox_plus_one(box: _Box) -> int:
    return int(box.future.result(timeout=10)) + 1


@pytest.mark.timeout(60)
def test_future_unpickled_in_a_task_on_a_worker_process_binds_the_worker_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            x = c.submit(inc, 41)
            assert x.result(timeout=10) == 42
            assert c.submit(_unbox_plus_one, _Box(x)).result(timeout=30) == 43


@gen_cluster(client=True, config={"distributed.admin.large-graph-warning-threshold": "1MB"})
async def test_a_large_graph_is_warned_about_once(c: Client, s: Scheduler, a: Any, b: Any) -> None:
    import warnings

    from dask.delayed import delayed

    big = delayed(len)(b"x" * 1_500_000)
    with pytest.warns(UserWarning, match=r"large graph: its tasks take 1\.\d+ MiB") as caught:
        assert await c.compute(delayed(sum)([big, big])) == 3_000_000
    assert sum("large graph" in str(w.message) for w in caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert await c.submit(len, b"x" * 1000) == 1000  # small: no warning
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": None}):
            assert await c.compute(delayed(len)(b"y" * 1_500_000)) == 1_500_000  # off


@gen_cluster(client=False, nthreads=[])
async def test_context_manager_left_in_another_task_warns(s: Scheduler) -> None:
    c = Client(s.address, asynchronous=True)
    await asyncio.create_task(c.__aenter__())
    with pytest.warns(DeprecationWarning, match="from different tasks"):
        await asyncio.create_task(c.__aexit__(None, None, None))


@pytest.mark.timeout(60)
def test_context_manager_left_in_another_thread_warns() -> None:
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        c = Client(cluster)
        with concurrent.futures.ThreadPoolExecutor(1) as tp1, concurrent.futures.ThreadPoolExecutor(1) as tp2:
            tp1.submit(c.__enter__).result()
            with pytest.warns(DeprecationWarning, match="from different threads"):
                tp2.submit(c.__exit__, None, None, None).result()
