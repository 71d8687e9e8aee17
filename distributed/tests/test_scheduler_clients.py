"""What the scheduler does for clients: graph parts, cancellation, restrictions by name, lost data.

Driven without sockets (see test_scheduler_state.py), plus real clusters
where the client's view matters.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from distributed import Client
from distributed.exceptions import LostDataError
from distributed.protocol import messages as m
from distributed.protocol import unwrap
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.tests.machines import A, B, check, client_ops, compute_of, computed_keys, finish, freed, scattered
from distributed.tests.machines import task_spec as spec
from distributed.tests.machines import validating_scheduler as new_scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc, slowinc
from distributed.worker import Worker


# -- a client gone while its graph is in flight ------------------------------------------------
def test_removed_client_releases_the_parts_of_its_unfinished_graph() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    part1: dict[Key, m.TaskSpec] = {"a": spec(order=0), "b": spec(["a"], order=1)}
    check(s, s.update_graph("c1", part1, [], graph="g1", final=False))
    assert "c1/graph-g1" in s.clients
    assert s.tasks["b"].state == "waiting"
    # The client dies before sending the final part.
    out = check(s, s.remove_client_state("c1", "client-gone"))
    assert not s.tasks, s.tasks
    assert not any(c.startswith("c1") for c in s.clients)
    assert freed(out) == {A: {"a"}}


def test_removed_client_keeps_another_clients_graph_parts() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"a": spec()}, [], graph="g1", final=False))
    check(s, s.update_graph("c10", {"z": spec()}, [], graph="g1", final=False))
    check(s, s.remove_client_state("c1", "client-gone"))
    # "c10/graph-g1" does not belong to "c1".
    assert set(s.clients) == {"c10", "c10/graph-g1"}
    assert set(s.tasks) == {"z"}


# -- restrictions by worker name -------------------------------------------------------------
def test_integer_worker_name_restriction_runs_there() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1, name=0))
    check(s, s.add_worker_state(B, 1, name=1))
    out = check(s, s.update_graph("c1", {"x": spec(annotations={"workers": [1]})}, ["x"]))
    addr, _ = compute_of(out, "x")
    assert addr == B


def test_integer_worker_name_given_as_a_string_matches() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1, name=0))
    check(s, s.add_worker_state(B, 1, name=1))
    out = check(s, s.update_graph("c1", {"x": spec(annotations={"workers": ["1"]})}, ["x"]))
    assert compute_of(out, "x")[0] == B


def test_integer_worker_name_restriction_waits_for_that_worker() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1, name=0))
    out = check(s, s.update_graph("c1", {"x": spec(annotations={"workers": [3]})}, ["x"]))
    assert not computed_keys(out)
    assert s.tasks["x"].state == "no-worker"
    out = check(s, s.add_worker_state(B, 1, name=3))
    assert compute_of(out, "x")[0] == B


# -- lost data ------------------------------------------------------------------------------
def test_lost_computed_key_is_reported_then_recomputed() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    check(s, s.update_graph("c2", {"x": spec()}, ["x"]))
    finish(s, "x")
    check(s, s.add_worker_state(B, 1))
    out = check(s, s.remove_worker_state(A, stimulus_id="lost"))
    # Every client that wants it hears, then it runs again.
    for c in ("c1", "c2"):
        assert [msg["key"] for msg in client_ops(out, c, "lost-data")] == ["x"]
    assert compute_of(out, "x")[0] == B
    out = finish(s, "x")
    for c in ("c1", "c2"):
        assert [msg["key"] for msg in client_ops(out, c, "key-in-memory")] == ["x"]


def test_lost_key_released_by_its_worker_is_reported() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    finish(s, "x")
    out = check(s, s.release_worker_data(A, ["x"], "dropped"))
    assert [msg["key"] for msg in client_ops(out, "c1", "lost-data")] == ["x"]
    assert computed_keys(out) == ["x"]


def test_lost_scattered_key_is_reported_then_errs() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    check(s, s.update_data_state(scattered("c1", {"x": [A]}, {"x": 10}, {"x": "int"}), "scatter"))
    out = check(s, s.remove_worker_state(A, stimulus_id="lost"))
    ops = [msg["op"] for msg in out.clients["c1"]]
    assert ops == ["lost-data", "task-erred"]
    [erred] = client_ops(out, "c1", "task-erred")
    assert isinstance(unwrap(erred["exception"]), LostDataError)
    assert s.tasks["x"].state == "erred"


def test_released_key_nobody_wants_is_not_reported_lost() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    finish(s, "x")
    out = check(s, s.client_releases_keys("c1", ["x"], "release"))
    assert not client_ops(out, "c1", "lost-data")


# -- real clusters --------------------------------------------------------------------------
@gen_cluster(client=True)
async def test_cancel_in_one_client_keeps_the_other_clients_future(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    async with Client(s.address, asynchronous=True) as c2:
        x = c.submit(slowinc, 1, delay=0.2, key="shared")
        y = c2.submit(slowinc, 1, delay=0.2, key="shared")
        await async_poll_for(lambda: "shared" in s.tasks and len(s.tasks["shared"].who_wants) == 2, 5)
        await c.cancel(x)
        assert await asyncio.wait_for(y.result(), 5) == 2
        assert x.cancelled()


@gen_cluster(client=True)
async def test_submit_to_an_integer_worker_name(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # gen_cluster names its workers 0 and 1, as LocalCluster does.
    assert (a.name, b.name) == (0, 1)
    x = c.submit(inc, 1, workers=[1])
    assert await asyncio.wait_for(x.result(), 5) == 2
    assert s.tasks[x.key].who_has == {s.workers[b.address]}
    y = c.submit(inc, 2, workers=0)
    assert await asyncio.wait_for(y.result(), 5) == 3
    assert s.tasks[y.key].who_has == {s.workers[a.address]}


@gen_cluster(client=True)
async def test_client_hears_its_key_was_lost(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address], allow_other_workers=True)
    await x
    heard: list[str] = []
    plugin_seen = asyncio.Event()

    def on_lost(key: Key) -> None:
        heard.append(str(key))
        plugin_seen.set()

    # Watch the client's stream: the scheduler tells it the key was lost.
    handle = c.link.handle_report

    def watching(msg: object) -> None:
        if isinstance(msg, dict) and msg.get("op") == "lost-data":
            on_lost(msg["key"])
        handle(msg)

    c.link.handle_report = watching  # type: ignore[method-assign]  # spying on the stream
    await a.close()
    await asyncio.wait_for(plugin_seen.wait(), 5)
    assert heard == [x.key]
    # It is recomputed on the worker left.
    await async_poll_for(lambda: s.tasks[x.key].state == "memory", 5)
    assert s.tasks[x.key].who_has == {s.workers[b.address]}


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
