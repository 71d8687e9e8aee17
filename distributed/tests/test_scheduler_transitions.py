"""Every change of a task's state goes through the scheduler's transition table.

A plugin that records every ``transition`` call must see exactly the
``(start, finish)`` pairs that ``story(key)`` shows, in the same order, on the
paths that used to change state by hand: the queue handing root tasks out,
a task finishing, a worker lost mid-run, ``KilledWorker``, scattered data and
lost dependencies.  Most tests drive the state machine without sockets; one
runs a real cluster.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import dask
import pytest

from distributed import Client, SchedulerPlugin
from distributed.exceptions import InvalidTransition, KilledWorker
from distributed.protocol import messages as m
from distributed.protocol import unwrap
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.scheduler.records import Effects
from distributed.tests.machines import compute_tasks, done, scattered, validating_scheduler
from distributed.tests.machines import task_spec as spec
from distributed.utils_test import async_poll_for, gen_cluster, slowinc
from distributed.worker import Worker

A = "tcp://10.0.0.1:1234"
B = "tcp://10.0.0.2:1234"


class TransitionRecorder(SchedulerPlugin):
    """Records every transition the scheduler reports, per key."""

    name = "transition-recorder"

    def __init__(self) -> None:
        self.seen: defaultdict[Key, list[tuple[str, str]]] = defaultdict(list)
        self.kwargs: dict[tuple[Key, str, str], dict[str, Any]] = {}

    def transition(self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any) -> None:
        assert isinstance(stimulus_id, str) and stimulus_id
        self.seen[key].append((start, finish))
        self.kwargs[(key, start, finish)] = kwargs


def assert_plugin_saw_the_story(s: Scheduler, rec: TransitionRecorder) -> None:
    """The plugin saw exactly the transitions of every key's story, in order, and the counter counted them."""
    keys = set(rec.seen) | {t[0] for t in s.transition_log}
    assert keys
    for key in keys:
        story = [(start, finish) for _, start, finish, _, _ in s.story(key)]
        assert rec.seen[key] == story, key
        # Each step starts where the previous one finished.
        for (_, f1), (s2, _) in itertools.pairwise(story):
            assert f1 == s2, (key, story)
    assert s.transition_counter == len(s.transition_log) == sum(len(v) for v in rec.seen.values())


def new_scheduler() -> tuple[Scheduler, TransitionRecorder]:
    s = validating_scheduler()
    rec = TransitionRecorder()
    s.plugins[rec.name or "recorder"] = rec
    return s, rec


def run_all(s: Scheduler, out: Effects) -> None:
    """Finish every task handed out, and those handed out in turn, until none is left."""
    todo = compute_tasks(out)
    while todo:
        addr, key, run_id = todo.pop(0)
        out = s.task_finished(addr, done(key, run_id, 8, "int", 0.01), f"finished-{key}")
        s.validate_state()
        todo.extend(compute_tasks(out))


# -- (a) queued root tasks ------------------------------------------------------------
def test_queued_root_tasks_pass_through_the_table() -> None:
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
        s, rec = new_scheduler()
    s.add_worker_state(A, 1)
    tasks: dict[Key, m.TaskSpec] = {f"x-{i}": spec(order=i) for i in range(10)}
    out = s.update_graph("c1", tasks, list(tasks), stimulus_id="graph")
    assert s.n_queued == 9
    run_all(s, out)
    assert all(s.tasks[k].state == "memory" for k in tasks)
    # Nine tasks went from the queue to the worker as threads freed up, and the plugin saw each.
    pulled = [k for k, steps in rec.seen.items() if ("queued", "processing") in steps]
    assert len(pulled) == 9
    for k in tasks:
        assert ("processing", "memory") in rec.seen[k]
        assert rec.kwargs[(k, "processing", "memory")] == {
            "worker": A,
            "nbytes": 8,
            "type": "int",
            "typename": "int",
            "startstops": [{"action": "compute", "start": 1000.0, "stop": 1000.01}],
        }
    assert_plugin_saw_the_story(s, rec)
    assert s.task_groups["x"].states["memory"] == 10


def test_queued_tasks_go_to_a_worker_that_joins() -> None:
    s, rec = new_scheduler()
    out = s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="graph")
    assert s.tasks["x"].state == "queued"
    out = s.add_worker_state(A, 1, stimulus_id="join")
    assert compute_tasks(out) == [(A, "x", s.tasks["x"].run_id)]
    assert rec.seen["x"][-1] == ("queued", "processing")
    assert s.story("x")[-1][3] == "join"
    assert_plugin_saw_the_story(s, rec)


# -- (b) a worker lost mid-run -----------------------------------------------------
def test_lost_worker_reruns_through_the_table() -> None:
    s, rec = new_scheduler()
    s.add_worker_state(A, 1)
    s.add_worker_state(B, 1)
    tasks: dict[Key, m.TaskSpec] = {"a": spec(), "b": spec(["a"], 1), "c": spec(["b"], 2)}
    out = s.update_graph("c1", tasks, ["c"], stimulus_id="graph")
    [(addr, key, run_id)] = compute_tasks(out)
    out = s.task_finished(addr, done(key, run_id, 8, "int", 0.01), "finished-a")
    [(addr_b, key_b, _)] = compute_tasks(out)
    assert key_b == "b"
    # The worker holding "a" and running "b" leaves: both go back and run again.
    out = s.remove_worker_state(addr, stimulus_id="lost")
    s.validate_state()
    run_all(s, out)
    assert s.tasks["c"].state == "memory"
    assert rec.seen["a"].count(("processing", "memory")) == 2
    assert ("memory", "released") in rec.seen["a"]
    assert_plugin_saw_the_story(s, rec)


# -- (c) KilledWorker ------------------------------------------------------------------
@pytest.mark.parametrize("allowed_failures", [0, 1])
def test_killed_worker_goes_through_the_table(allowed_failures: int) -> None:
    s, rec = new_scheduler()
    s.allowed_failures = allowed_failures
    s.add_worker_state(A, 1)
    out = s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="graph")
    for i in range(allowed_failures + 1):
        [(addr, _, _)] = compute_tasks(out)
        out = s.remove_worker_state(addr, stimulus_id=f"lost-{i}")
        s.validate_state()
        out2 = s.add_worker_state(f"tcp://10.0.1.{i}:1", 1, stimulus_id=f"join-{i}")
        out.workers.update(out2.workers)
    ts = s.tasks["x"]
    assert ts.state == "erred"
    assert rec.seen["x"][-1] == ("processing", "erred")
    [msg] = out.clients["c1"]
    assert msg["op"] == "task-erred"
    assert isinstance(unwrap(msg["exception"]), KilledWorker)
    assert_plugin_saw_the_story(s, rec)


# -- the other paths that used to bypass the table --------------------------------------
def test_scattered_data_goes_to_memory_through_the_table() -> None:
    s, rec = new_scheduler()
    s.add_worker_state(A, 1)
    out = s.update_data_state(scattered("c1", {"x": [A]}, {"x": 10}, {"x": "int"}), "scatter")
    assert s.tasks["x"].state == "memory"
    assert rec.seen["x"] == [("released", "memory")]
    assert [msg["op"] for msg in out.clients["c1"]] == ["key-in-memory"]
    # Releasing it forgets it, through the table too.
    s.client_releases_keys("c1", ["x"], "release")
    assert "x" not in s.tasks
    assert rec.seen["x"] == [("released", "memory"), ("memory", "released"), ("released", "forgotten")]
    assert_plugin_saw_the_story(s, rec)


def test_lost_dependencies_are_forgotten_through_the_table() -> None:
    s, rec = new_scheduler()
    s.add_worker_state(A, 1)
    tasks: dict[Key, m.TaskSpec] = {"a": spec(), "b": spec(["a", "missing"], 1), "c": spec(["b"], 2)}
    out = s.update_graph("c1", tasks, ["c"], stimulus_id="graph")
    s.validate_state()
    assert not s.tasks
    assert rec.seen["b"] == [("released", "forgotten")]
    assert rec.seen["c"] == [("released", "forgotten")]
    assert rec.seen["a"] == [("released", "forgotten")]
    assert [msg["op"] for msg in out.clients["c1"]] == ["cancelled-keys"]
    assert_plugin_saw_the_story(s, rec)
    assert "b" not in s.task_groups  # all its tasks forgotten: dropped, its count kept by its prefix
    assert (
        s.task_prefixes["b"].state_counts()["forgotten"] == 1 and s.task_prefixes["b"].state_counts()["released"] == 0
    )


# -- the table itself --------------------------------------------------------------------
def test_illegal_transition_raises_in_validation_mode() -> None:
    s, _ = new_scheduler()
    s.add_worker_state(A, 1)
    s.update_graph("c1", {"x": spec(), "y": spec(["x"], 1)}, ["y"], stimulus_id="graph")
    assert s.tasks["y"].state == "waiting"
    with pytest.raises(InvalidTransition, match="waiting -> memory"):
        s.transitions({s.tasks["y"]: "memory"}, "bad")
    # processing -> memory only with a worker's report.
    with pytest.raises(InvalidTransition, match="reports it finished"):
        s.transitions({s.tasks["x"]: "memory"}, "bad")


def test_illegal_transition_goes_through_released_outside_validation() -> None:
    s = Scheduler(validate=False)
    s.add_worker_state(A, 1)
    out = s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="graph")
    [(addr, key, run_id)] = compute_tasks(out)
    s.task_finished(addr, done(key, run_id, 8, "int", 0.01), "done")
    # memory -> waiting is not in the table: it goes memory -> released -> waiting -> processing.
    out = s.transitions({s.tasks["x"]: "waiting"}, "again")
    assert [(start, finish) for _, start, finish, sid, _ in s.story("x") if sid == "again"] == [
        ("memory", "released"),
        ("released", "waiting"),
        ("waiting", "processing"),
    ]
    assert compute_tasks(out)


def test_no_state_change_outside_the_table() -> None:
    """No module assigns ``.state`` of a task outside the scheduler's table methods."""
    import ast
    import importlib
    import inspect
    import pkgutil

    import distributed.scheduler as package

    modules = [
        importlib.import_module(f"{package.__name__}.{info.name}") for info in pkgutil.iter_modules(package.__path__)
    ]
    assert len(modules) >= 10

    table_methods = {f.__name__ for f in Scheduler(validate=False)._transitions_table.values()}
    # Helpers that only table methods call.
    table_methods |= {"_add_to_processing", "_mark_erred", "_waiting_to_processing"}
    for mod in modules:
        tree = ast.parse(inspect.getsource(mod))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, (ast.Assign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if (
                            isinstance(t, ast.Attribute)
                            and t.attr == "state"
                            and isinstance(t.value, ast.Name)
                            and t.value.id in ("ts", "qts", "dts")
                        ):
                            assert func.name in table_methods, (mod.__name__, func.name)


# -- a real cluster ---------------------------------------------------------------------
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_plugin_sees_every_transition_on_a_real_cluster(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    rec = TransitionRecorder()
    await s.add_plugin(rec)
    futures = c.map(slowinc, range(30), delay=0.01)
    assert await c.gather(futures) == list(range(1, 31))
    # Root tasks were queued (queuing is on by default) and handed out through the table.
    assert any(("queued", "processing") in steps for steps in rec.seen.values())
    assert_plugin_saw_the_story(s, rec)
    del futures
    await async_poll_for(lambda: not s.tasks, 5)
    assert_plugin_saw_the_story(s, rec)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)], scheduler_kwargs={"allowed_failures": 0})
async def test_plugin_sees_killed_worker_on_a_real_cluster(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    rec = TransitionRecorder()
    await s.add_plugin(rec)
    x = c.submit(slowinc, 1, delay=5, workers=[a.address])
    await async_poll_for(lambda: x.key in s.tasks and s.tasks[x.key].state == "processing", 5)
    await a.close()
    with pytest.raises(KilledWorker):
        await x
    assert rec.seen[x.key][-1] == ("processing", "erred")
    assert_plugin_saw_the_story(s, rec)


# -- plugins watching transitions -----------------------------------------------------
def test_transition_hooks_skip_the_base_method_and_survive_a_failing_plugin() -> None:
    """Only plugins with their own ``transition`` are called; one that raises stops neither the rest nor the graph."""

    class Quiet(SchedulerPlugin):
        """Defines no ``transition``: the scheduler need not call it."""

    class Failing(SchedulerPlugin):
        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("plugin bug")

    class DuckTyped:
        """Not a SchedulerPlugin subclass: still called, as dask calls any object with the hook."""

        def __init__(self) -> None:
            self.calls = 0

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            self.calls += 1

    s, rec = new_scheduler()
    duck = DuckTyped()
    s.plugins["quiet"] = Quiet()
    s.plugins["failing"] = Failing()
    s.plugins["duck"] = duck  # type: ignore[assignment]  # dask accepts any object with the hooks
    s.add_worker_state(A, 1)
    run_all(s, s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="graph"))
    assert s.tasks["x"].state == "memory"
    assert_plugin_saw_the_story(s, rec)
    assert duck.calls == s.transition_counter > 0
