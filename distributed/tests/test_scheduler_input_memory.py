"""A task whose inputs are more than any worker may hold errs with ``MemoryError``.

When a task gets ready (its dependencies in memory) the scheduler adds up the
bytes of its inputs; past the largest worker memory limit the task errs, with
a message naming it, the inputs' size and that limit, instead of being sent to
worker after worker until each dies (and the task errs with ``KilledWorker``).
The largest limit is kept as workers come and go; a worker without a limit
turns the check off.  The state-machine tests drive transitions without
sockets; the last test runs a real worker with a small memory limit.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from distributed import Client
from distributed.protocol import messages as m
from distributed.protocol import unwrap
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.tests.machines import check, client_ops, finish, freed, state
from distributed.tests.machines import task_spec as spec
from distributed.tests.test_scheduler_transitions import assert_plugin_saw_the_story, new_scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker

A = "tcp://10.0.0.1:1234"
B = "tcp://10.0.0.2:1234"
C = "tcp://10.0.0.3:1234"

MiB = 2**20


def two_inputs_and_a_sum() -> dict[Key, m.TaskSpec]:
    return {"x": spec(order=0), "y": spec(order=1), "z": spec(["x", "y"], order=2), "after": spec(["z"], order=3)}


def the_error(out: Any, client: str, key: Key) -> BaseException:
    [msg] = [msg for msg in client_ops(out, client, "task-erred") if msg["key"] == key]
    exc = unwrap(msg["exception"])
    assert isinstance(exc, BaseException)
    assert msg["text"] == str(exc)
    return exc


def test_task_with_inputs_over_the_largest_limit_errs_with_memory_error() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 2, memory_limit=100 * MiB))
    check(s, s.add_worker_state(B, 2, memory_limit=150 * MiB))
    check(s, s.update_graph("c1", two_inputs_and_a_sum(), ["z", "after"], stimulus_id="graph"))
    finish(s, "x", nbytes=80 * MiB)
    out = finish(s, "y", nbytes=80 * MiB)
    # 160 MiB of inputs, and no worker may hold more than 150 MiB: never sent anywhere.
    assert state(s, "z") == "erred"
    assert not [msg for msgs in out.workers.values() for msg in msgs if msg["op"] == "compute-task"]
    exc = the_error(out, "c1", "z")
    assert type(exc) is MemoryError
    assert str(exc) == (
        "Task 'z' has 160.00 MiB worth of input dependencies, but the largest memory_limit of any worker is 150.00 MiB"
    )
    # Its dependents err with its error; its inputs, needed no more, are released.
    assert state(s, "after") == "erred"
    assert unwrap(client_ops(out, "c1", "task-erred")[-1]["exception"]).args == exc.args
    assert state(s, "x") == state(s, "y") == "released"
    assert {"x", "y"} <= set().union(*freed(out).values())
    # Through the table, where plugins and the story see it.
    assert rec.seen["z"] == [("released", "waiting"), ("waiting", "erred")]
    assert_plugin_saw_the_story(s, rec)
    # The cluster goes on: the erred keys go when released, other work runs.
    check(s, s.client_releases_keys("c1", ["z", "after"], "release"))
    assert s.tasks == {}
    check(s, s.update_graph("c1", {"w": spec()}, ["w"], stimulus_id="more"))
    finish(s, "w")
    assert state(s, "w") == "memory"


def test_inputs_up_to_the_limit_run() -> None:
    s, _ = new_scheduler()
    check(s, s.add_worker_state(A, 2, memory_limit=100 * MiB))
    check(s, s.update_graph("c1", two_inputs_and_a_sum(), ["after"], stimulus_id="graph"))
    finish(s, "x", nbytes=50 * MiB)
    finish(s, "y", nbytes=50 * MiB)
    assert state(s, "z") == "processing"


def test_a_worker_without_limit_turns_the_check_off() -> None:
    s, _ = new_scheduler()
    check(s, s.add_worker_state(A, 2, memory_limit=100 * MiB))
    check(s, s.add_worker_state(B, 2, memory_limit=0))
    check(s, s.update_graph("c1", two_inputs_and_a_sum(), ["after"], stimulus_id="graph"))
    finish(s, "x", nbytes=80 * MiB)
    finish(s, "y", nbytes=80 * MiB)
    assert state(s, "z") == "processing"


def test_largest_limit_follows_workers_joining_and_leaving() -> None:
    s, _ = new_scheduler()
    assert s._input_cap == 0  # no worker: nothing to check against
    check(s, s.add_worker_state(A, 1, memory_limit=100 * MiB))
    check(s, s.add_worker_state(B, 1, memory_limit=300 * MiB))
    check(s, s.add_worker_state(C, 1, memory_limit=200 * MiB))
    assert s._input_cap == 300 * MiB
    check(s, s.remove_worker_state(B, stimulus_id="b-left"))
    assert s._input_cap == 200 * MiB
    check(s, s.add_worker_state(B, 1, memory_limit=0))
    assert s._input_cap == 0
    check(s, s.remove_worker_state(B, stimulus_id="b-left-again"))
    assert s._input_cap == 200 * MiB
    check(s, s.remove_worker_state(C, stimulus_id="c-left"))
    check(s, s.remove_worker_state(A, stimulus_id="a-left"))
    assert s._input_cap == 0


def test_task_waiting_for_a_worker_is_checked_when_one_comes() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 1, memory_limit=300 * MiB))
    tasks: dict[Key, m.TaskSpec] = {
        "x": spec(order=0),
        "y": spec(order=1),
        # Only B may run it, and B is not there yet.
        "z": spec(["x", "y"], order=2, annotations={"workers": [B]}),
    }
    check(s, s.update_graph("c1", tasks, ["z"], stimulus_id="graph"))
    finish(s, "x", nbytes=120 * MiB)
    finish(s, "y", nbytes=120 * MiB)
    assert state(s, "z") == "no-worker"
    check(s, s.remove_worker_state(A, stimulus_id="a-left"))
    # A's results are lost; x and y run again on B, whose limit z's inputs exceed.
    check(s, s.add_worker_state(B, 1, memory_limit=200 * MiB))
    finish(s, "x", nbytes=120 * MiB)
    out = finish(s, "y", nbytes=120 * MiB)
    assert state(s, "z") == "erred"
    assert "200.00 MiB" in str(the_error(out, "c1", "z"))
    assert_plugin_saw_the_story(s, rec)


def test_task_waiting_for_a_worker_errs_when_the_only_big_worker_left() -> None:
    s, rec = new_scheduler()
    check(s, s.add_worker_state(A, 1, memory_limit=200 * MiB))
    check(s, s.add_worker_state(B, 1, memory_limit=500 * MiB))
    on_a = {"workers": [A]}
    tasks: dict[Key, m.TaskSpec] = {
        "x": spec(order=0, annotations=on_a),
        "y": spec(order=1, annotations=on_a),
        "z": spec(["x", "y"], order=2, annotations={"resources": {"GPU": 1}}),
    }
    check(s, s.update_graph("c1", tasks, ["z"], stimulus_id="graph"))
    finish(s, "x", nbytes=120 * MiB)
    finish(s, "y", nbytes=120 * MiB)
    # 240 MiB fit in B's 500 MiB, but no worker has a GPU.
    assert state(s, "z") == "no-worker"
    check(s, s.remove_worker_state(B, stimulus_id="b-left"))
    out = check(s, s.add_worker_state(C, 1, memory_limit=200 * MiB, resources={"GPU": 1}))
    # Now no worker may hold z's inputs: it errs instead of going to C.
    assert state(s, "z") == "erred"
    assert not out.workers.get(C)
    assert "240.00 MiB" in str(the_error(out, "c1", "z"))
    assert rec.seen["z"][-2:] == [("waiting", "no-worker"), ("no-worker", "erred")]
    assert_plugin_saw_the_story(s, rec)


# -- a real worker with a small memory limit ---------------------------------------------
def twelve_mib(i: int) -> bytes:
    return bytes(12 * MiB)


def total_len(a: bytes, b: bytes) -> int:
    return len(a) + len(b)


# The worker's memory monitor would pause or spill by this process's own memory (far above 20 MiB).
NO_MONITOR = {
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
}


@pytest.mark.timeout(60)
@gen_cluster(client=True, nthreads=[], config=NO_MONITOR)
async def test_real_worker_refuses_inputs_over_its_memory_limit(c: Client[Literal[True]], s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, memory_limit="20 MiB") as w:
        x = c.submit(twelve_mib, 0)
        y = c.submit(twelve_mib, 1)
        z = c.submit(total_len, x, y)
        with pytest.raises(MemoryError) as info:
            await z
        assert str(info.value) == (
            f"Task {z.key!r} has 24.00 MiB worth of input dependencies, "
            "but the largest memory_limit of any worker is 20.00 MiB"
        )
        # Never sent to the worker; the worker is alive and keeps working.
        assert not [t for t in s.story(z.key) if t[2] == "processing"]
        assert z.key not in w.tasks
        assert await c.submit(inc, 1) == 2
        assert len(s.workers) == 1
