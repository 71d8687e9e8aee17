"""Worker plugins: set up on every worker, told of every transition."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from distributed import Client, WorkerPlugin
from distributed.protocol import messages as m
from distributed.protocol.serialize import Serialize, Serialized
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker
from distributed.worker.state_machine import (
    ComputeTaskEvent,
    ExecuteSuccess,
    InvalidTransition,
    WorkerStateMachine,
)


class RecordTransitions(WorkerPlugin):
    """Keeps every ``transition`` call it gets."""

    name = "record-transitions"

    def __init__(self) -> None:
        self.seen: list[tuple[Any, str, str]] = []
        self.stimuli: list[str] = []

    def setup(self, worker: Worker) -> None:
        self.worker = worker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        self.seen.append((key, start, finish))
        self.stimuli.append(kwargs["stimulus_id"])


def pairs(story: list[tuple[Any, ...]], keys: set[Any]) -> list[tuple[Any, str, str]]:
    return [(e[0], e[1], e[2]) for e in story if e[0] in keys]


@gen_cluster(client=True)
async def test_plugin_sees_every_transition_of_a_graph_with_a_fetched_dependency(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    await c.register_plugin(RecordTransitions())
    x = c.submit(inc, 1, key="x", workers=[a.address])
    y = c.submit(inc, x, key="y", workers=[b.address])
    assert await y == 3
    on_b = b.plugins["record-transitions"]
    assert isinstance(on_b, RecordTransitions)
    keys = {"x", "y"}
    assert pairs(b.story("x", "y"), keys) == [t for t in on_b.seen if t[0] in keys]
    # x was fetched from a, y computed here.
    assert ("x", "fetch", "flight") in on_b.seen
    assert ("x", "flight", "memory") in on_b.seen
    assert [t for t in on_b.seen if t[0] == "y"] == [
        ("y", "released", "waiting"),
        ("y", "waiting", "ready"),
        ("y", "ready", "executing"),
        ("y", "executing", "memory"),
    ]
    on_a = a.plugins["record-transitions"]
    assert isinstance(on_a, RecordTransitions)
    assert pairs(a.story("x"), {"x"}) == [t for t in on_a.seen if t[0] == "x"]
    assert all(sid for sid in on_b.stimuli)


@gen_cluster(client=True, nthreads=[])
async def test_plugin_given_to_worker_constructor_sees_transitions(c: Client[Literal[True]], s: Scheduler) -> None:
    plugin = RecordTransitions()
    async with Worker(s.address, nthreads=1, plugins=[plugin], validate=True) as w:
        assert await c.submit(inc, 1, key="k") == 2
        assert [t for t in plugin.seen if t[0] == "k"] == [
            ("k", "released", "ready"),
            ("k", "ready", "executing"),
            ("k", "executing", "memory"),
        ]
        assert plugin.seen == pairs(w.story("k"), {"k"})


class Broken(WorkerPlugin):
    name = "broken"

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        raise ZeroDivisionError("plugin bug")


@gen_cluster(client=True)
async def test_failing_plugin_transition_does_not_stop_tasks(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    await c.register_plugin(Broken())
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_removed_plugin_is_no_longer_called(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    plugin = RecordTransitions()
    await a.add_plugin(plugin)
    await c.submit(inc, 1, key="one")
    n = len(plugin.seen)
    assert n > 0
    await a.remove_plugin("record-transitions")
    assert a.state is not None and a.state.transition_hook is None
    await c.submit(inc, 2, key="two")
    assert len(plugin.seen) == n


def test_invalid_transition_raises_in_validation_mode() -> None:
    ws = WorkerStateMachine("tcp://10.0.0.1:1", 1, validate=True)
    ws.handle_stimulus(
        ComputeTaskEvent(
            stimulus_id="compute",
            key="x",
            run_id=1,
            run_spec=Serialized({"s": "pickle"}, [b"opaque"]),
            priority=(0,),
            who_has={},
            nbytes={},
        )
    )
    ts = ws.tasks["x"]
    assert ts.state == "executing"
    with pytest.raises(InvalidTransition, match="executing -> fetch"):
        ws.transitions({ts: "fetch"}, stimulus_id="bad")
    assert ts.state == "executing"
    ws.handle_stimulus(
        ExecuteSuccess(stimulus_id="done", key="x", run_id=1, value=1, nbytes=28, type="int", start=0.0, stop=1.0)
    )
    assert str(ts.state) == "memory"  # str(): mypy narrowed the state at the assert above
    with pytest.raises(InvalidTransition, match="memory -> executing"):
        ws.transitions({ts: "executing"}, stimulus_id="bad")
    ws.validate_state()


# -- plugins kept by the scheduler for workers that join later -----------------------------------
class SetupRecorder(WorkerPlugin):
    """Notes which worker set it up (each worker unpickles its own copy)."""

    def __init__(self) -> None:
        self.set_up_on: str | None = None
        self.torn_down = False

    def setup(self, worker: Worker) -> None:
        self.set_up_on = worker.address

    def teardown(self, worker: Worker) -> None:
        self.torn_down = True


async def register_worker_plugin(s: Scheduler, plugin: WorkerPlugin, name: str, idempotent: bool = False) -> Any:
    """What a client sends to register a worker plugin."""
    msg = m.RegisterWorkerPlugin(op="register_worker_plugin", plugin=Serialize(plugin), name=name)
    if idempotent:
        msg["idempotent"] = True
    return await s.rpc.call(s.address, msg)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_worker_plugin_registered_before_a_worker_joins_is_set_up_there(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    replies = await register_worker_plugin(s, SetupRecorder(), "recorder")
    assert replies == {a.address: {"status": "OK"}}
    on_a = a.plugins["recorder"]
    assert isinstance(on_a, SetupRecorder) and on_a.set_up_on == a.address

    async with Worker(s.address, nthreads=1, validate=True) as late:
        on_late = late.plugins.get("recorder")
        assert isinstance(on_late, SetupRecorder)
        assert on_late.set_up_on == late.address
    assert on_late.torn_down


@gen_cluster(client=True, nthreads=[])
async def test_late_worker_plugin_sees_the_transitions_of_its_first_task(
    c: Client[Literal[True]], s: Scheduler
) -> None:
    await register_worker_plugin(s, RecordTransitions(), "record-transitions")
    async with Worker(s.address, nthreads=1, validate=True) as w:
        assert await c.submit(inc, 1, key="first") == 2
        plugin = w.plugins["record-transitions"]
        assert isinstance(plugin, RecordTransitions)
        assert ("first", "executing", "memory") in plugin.seen


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_idempotent_worker_plugin_keeps_the_first(s: Scheduler, a: Worker) -> None:
    await register_worker_plugin(s, SetupRecorder(), "once")
    first = a.plugins["once"]
    assert await register_worker_plugin(s, SetupRecorder(), "once", idempotent=True) == {}
    assert a.plugins["once"] is first
    await register_worker_plugin(s, SetupRecorder(), "once")
    assert a.plugins["once"] is not first
    assert isinstance(first, SetupRecorder) and first.torn_down


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_unregistered_worker_plugin_is_torn_down_and_not_given_to_new_workers(s: Scheduler, a: Worker) -> None:
    await register_worker_plugin(s, SetupRecorder(), "gone")
    plugin = a.plugins["gone"]
    await s.rpc.call(s.address, m.UnregisterWorkerPlugin(op="unregister_worker_plugin", name="gone"))
    assert "gone" not in a.plugins
    assert isinstance(plugin, SetupRecorder) and plugin.torn_down
    async with Worker(s.address, nthreads=1) as late:
        assert "gone" not in late.plugins


@gen_cluster(client=True, nthreads=[])
async def test_client_register_plugin_reaches_workers_that_join_later(c: Client[Literal[True]], s: Scheduler) -> None:
    await c.register_plugin(SetupRecorder(), name="via-client")
    async with Worker(s.address, nthreads=1) as late:
        assert "via-client" in late.plugins


def test_task_state_is_only_set_inside_the_transition_table_methods() -> None:
    import ast
    import inspect

    from distributed.worker import state_machine as worker_state

    table_methods = {f.__name__ for f in worker_state.TRANSITION_TABLE.values()}
    tree = ast.parse(inspect.getsource(worker_state))
    setters: set[str] = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef):
            for node in ast.walk(func):
                targets = node.targets if isinstance(node, ast.Assign) else []
                if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets):
                    setters.add(func.name)
    setters.discard("__init__")  # a new WorkerTask starts released
    assert setters and setters <= table_methods, setters - table_methods
