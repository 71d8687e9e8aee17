"""``fire_and_forget``: a key is computed to the end, then let go.

The client asks for such keys as the stand-in client ``FIRE_AND_FORGET``; the
scheduler wants a key for it only until the key is done (in memory or erred),
then releases and forgets it unless a client or a dependent still needs it.
The first tests drive the state machine without sockets (every change seen by a
plugin through the transition table); the last ones run a real worker and
check that nothing stays on the scheduler or in the worker's memory.
"""

from __future__ import annotations

import gc
from typing import Any, Literal

import pytest

from distributed import Client, fire_and_forget
from distributed.protocol import Serialized
from distributed.protocol import messages as m
from distributed.protocol.messages import FIRE_AND_FORGET, Key
from distributed.scheduler import Scheduler
from distributed.tests.machines import check, client_ops, finish, freed, report_erred, state
from distributed.tests.machines import task_spec as spec
from distributed.tests.test_scheduler_transitions import assert_plugin_saw_the_story, new_scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker

A = "tcp://10.0.0.1:1234"
B = "tcp://10.0.0.2:1234"

MiB = 2**20


def submit_and_forget(s: Scheduler, tasks: dict[Key, m.TaskSpec], keys: list[Key], client: str = "c1") -> None:
    """What a client does for ``fire_and_forget(futures)`` and then drops the futures."""
    check(s, s.update_graph(client, tasks, keys, stimulus_id="graph"))
    check(s, s.client_desires_keys(FIRE_AND_FORGET, keys, "fire-and-forget"))
    check(s, s.client_releases_keys(client, keys, "futures-dropped"))


def err(s: Scheduler, key: Key) -> Any:
    """The worker running ``key`` reports it raised."""
    ts = s.tasks[key]
    assert ts.processing_on is not None
    exc = Serialized({"s": "pickle"}, [b"exception frames"])
    return check(s, s.task_erred(ts.processing_on.address, report_erred(key, ts.run_id, exc, None, "boom"), "err"))


def ff_wants(s: Scheduler) -> set[Key]:
    cs = s.clients.get(FIRE_AND_FORGET)
    return {ts.key for ts in cs.wants_what} if cs is not None else set()


# -- the state machine -------------------------------------------------------------------
def test_each_key_is_forgotten_and_freed_once_in_memory() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    keys: list[Key] = [f"x-{i}" for i in range(5)]
    submit_and_forget(s, {k: spec(order=i) for i, k in enumerate(keys)}, keys)
    # Nobody else wants them, yet they run.
    assert all(state(s, k) in ("processing", "queued") for k in keys)
    assert ff_wants(s) == set(keys)
    for k in keys:
        out = finish(s, k, nbytes=MiB)
        # Done: forgotten at once, and the worker is told to drop the result.
        assert k not in s.tasks
        assert k in freed(out)[A]
        assert not client_ops(out, FIRE_AND_FORGET, "key-in-memory")
    assert s.tasks == {}
    assert ff_wants(s) == set()
    assert s.workers[A].nbytes == 0
    for k in keys:
        assert [step for step in rec.seen[k] if step[0] == "processing"] == [("processing", "memory")]
        assert rec.seen[k][-2:] == [("memory", "released"), ("released", "forgotten")]
    assert_plugin_saw_the_story(s, rec)


def test_erred_task_is_forgotten() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    submit_and_forget(s, {"x": spec()}, ["x"])
    out = err(s, "x")
    assert "x" not in s.tasks
    assert not client_ops(out, "c1", "task-erred")  # its future is gone: nobody to tell
    assert rec.seen["x"][-3:] == [("processing", "erred"), ("erred", "released"), ("released", "forgotten")]
    assert_plugin_saw_the_story(s, rec)


def test_dependency_also_forgotten_is_kept_until_its_dependent_is_done() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    submit_and_forget(s, {"x": spec(order=0), "y": spec(["x"], order=1)}, ["x", "y"])
    finish(s, "x")
    # Done, but y still needs it.
    assert state(s, "x") == "memory"
    assert ff_wants(s) == {"y"}
    out = finish(s, "y")
    assert s.tasks == {}
    assert freed(out)[A] == {"x", "y"}
    assert_plugin_saw_the_story(s, rec)


def test_dependency_wanted_by_a_client_stays_after_its_dependent_is_forgotten() -> None:
    s, _ = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="x"))
    finish(s, "x")
    submit_and_forget(s, {"y": spec(["x"])}, ["y"], client="c2")
    finish(s, "y")
    assert set(s.tasks) == {"x"}
    assert state(s, "x") == "memory"
    check(s, s.client_releases_keys("c1", ["x"], "release"))
    assert s.tasks == {}


def test_key_also_held_by_a_future_stays_until_that_future_is_released() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="graph"))
    check(s, s.client_desires_keys(FIRE_AND_FORGET, ["x"], "fire-and-forget"))
    out = finish(s, "x")
    # The client still holds a future: it hears of the result and the key stays.
    assert state(s, "x") == "memory"
    assert [msg["key"] for msg in client_ops(out, "c1", "key-in-memory")] == ["x"]
    assert ff_wants(s) == set()
    out = check(s, s.client_releases_keys("c1", ["x"], "release"))
    assert s.tasks == {}
    assert freed(out)[A] == {"x"}
    assert_plugin_saw_the_story(s, rec)


def test_key_done_before_fire_and_forget_asks_is_not_wanted() -> None:
    s, _ = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(), "y": spec()}, ["x", "y"], stimulus_id="graph"))
    finish(s, "x")
    err(s, "y")
    check(s, s.client_desires_keys(FIRE_AND_FORGET, ["x", "y", "unknown"], "fire-and-forget"))
    assert ff_wants(s) == set()
    check(s, s.client_releases_keys("c1", ["x", "y"], "release"))
    assert s.tasks == {}


def test_erred_dependency_stays_while_a_client_wants_a_dependent_it_blames() -> None:
    s, _ = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["y"], stimulus_id="graph"))
    check(s, s.client_desires_keys(FIRE_AND_FORGET, ["x"], "fire-and-forget"))
    out = err(s, "x")
    # y's error is x's: x stays (erred) so that the client hears it, now and when it asks again.
    assert state(s, "x") == state(s, "y") == "erred"
    [msg] = client_ops(out, "c1", "task-erred")
    assert msg["key"] == "y" and msg["text"] == "boom"
    out = check(s, s.client_desires_keys("c2", ["y"], "ask-again"))
    assert [msg["text"] for msg in client_ops(out, "c2", "task-erred")] == ["boom"]
    check(s, s.client_releases_keys("c1", ["y"], "release"))
    check(s, s.client_releases_keys("c2", ["y"], "release"))
    assert s.tasks == {}


def test_dependent_also_forgotten_errs_and_both_go() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    submit_and_forget(s, {"x": spec(order=0), "y": spec(["x"], order=1)}, ["x", "y"])
    err(s, "x")
    assert s.tasks == {}
    assert ff_wants(s) == set()
    assert ("waiting", "erred") in rec.seen["y"]
    assert_plugin_saw_the_story(s, rec)


def test_killed_worker_error_also_lets_the_key_go() -> None:
    s = Scheduler(validate=True, allowed_failures=0)
    check(s, s.add_worker_state(A, 1))
    submit_and_forget(s, {"x": spec()}, ["x"])
    check(s, s.remove_worker_state(A, stimulus_id="worker-died"))
    assert s.tasks == {}


def test_rerun_after_a_lost_worker_is_still_seen_through() -> None:
    s, _ = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    submit_and_forget(s, {"x": spec()}, ["x"])
    check(s, s.remove_worker_state(A, stimulus_id="worker-left"))
    # Still wanted: it waits for a worker, runs there, and only then goes.
    assert ff_wants(s) == {"x"}
    check(s, s.add_worker_state(B, 1))
    assert state(s, "x") == "processing"
    finish(s, "x")
    assert s.tasks == {}


# -- a real worker ---------------------------------------------------------------------------
def one_mib(i: int) -> bytes:
    return bytes(MiB)


def raise_value_error(x: Any) -> None:
    raise ValueError(x)


def forgotten(s: Scheduler) -> int:
    """Tasks the scheduler has forgotten so far."""
    return sum(tp.state_counts()["forgotten"] for tp in s.task_prefixes.values())


async def gone(s: Scheduler, a: Worker, n: int, timeout: float = 30) -> None:
    """Wait until ``n`` tasks were forgotten, and the scheduler holds no task and the worker no data."""
    gc.collect()
    await async_poll_for(lambda: forgotten(s) == n and not s.tasks and not a.data, timeout=timeout)


@pytest.mark.timeout(120)
@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_two_hundred_tasks_of_one_mib_leave_nothing_behind(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    futures = c.map(one_mib, range(200))
    fire_and_forget(futures)
    del futures
    await gone(s, a, 200, timeout=60)
    assert not s.clients.get(FIRE_AND_FORGET) or not s.clients[FIRE_AND_FORGET].wants_what
    assert s.workers[a.address].nbytes == 0
    assert s.task_prefixes["one_mib"].state_counts()["forgotten"] == 200
    assert not s.task_groups  # every group's tasks forgotten: none kept


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_task_and_its_dependency_both_forgotten(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    x = c.submit(one_mib, 0)
    y = c.submit(len, x)
    keys = [x.key, y.key]
    fire_and_forget([x, y])
    del x, y
    await gone(s, a, 2)
    for key in keys:
        steps = [(start, finish_) for _, start, finish_, _, _ in s.story(key)]
        # Each ran once, to the end, and went.
        assert steps.count(("processing", "memory")) == 1, steps
        assert steps[-2:] == [("memory", "released"), ("released", "forgotten")], steps


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_key_held_by_a_future_stays_until_the_future_goes(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    f = c.submit(one_mib, 1)
    fire_and_forget(f)
    assert len(await f) == MiB
    # Once fire_and_forget's want is dropped (the key is done), the future alone keeps it.
    await async_poll_for(lambda: not s.clients[FIRE_AND_FORGET].wants_what, timeout=10)
    assert s.tasks[f.key].state == "memory"
    assert f.key in a.data
    del f
    await gone(s, a, 1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_erred_task_and_its_dependent_are_forgotten(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    x = c.submit(raise_value_error, 1)
    y = c.submit(inc, x)
    fire_and_forget([x, y])
    del x, y
    await gone(s, a, 2)
    # The cluster keeps working.
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_fire_and_forget_of_a_dependent_only_keeps_its_inputs_until_done(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    x = c.submit(one_mib, 2)
    y = c.submit(len, x)
    del x
    fire_and_forget(y)
    del y
    await gone(s, a, 2)
