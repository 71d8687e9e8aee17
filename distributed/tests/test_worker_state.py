"""Unit tests of the worker's task state machine, driven without any socket or thread.

Events go in through :meth:`WorkerStateMachine.handle_stimulus`; the
instructions that come out (``Execute``, ``GatherDep``, ``SendMessage``) are
what the worker shell would carry out.  Every step validates the whole state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from distributed.protocol import Serialized
from distributed.protocol.messages import Key
from distributed.worker.state_machine import (
    AcquireReplicasEvent,
    BusyWorkerRetry,
    ComputeTaskEvent,
    Execute,
    ExecuteFailure,
    ExecuteSuccess,
    FreeKeysEvent,
    GatherDep,
    GatherDepBusy,
    GatherDepFailure,
    GatherDepSuccess,
    Instruction,
    RescheduleEvent,
    RetryBusyWorkerLater,
    SecedeEvent,
    SendMessage,
    StateMachineEvent,
    UpdateDataEvent,
    WorkerStateMachine,
)

ME = "tcp://10.0.0.1:1234"
PEER1 = "tcp://10.0.0.2:1234"
PEER2 = "tcp://10.0.0.3:1234"


# -- helpers ---------------------------------------------------------------------------
class Harness:
    """A state machine with validation after every step and a stimulus counter."""

    def __init__(self, nthreads: int = 1, **kwargs: Any) -> None:
        self.ws = WorkerStateMachine(ME, nthreads, validate=True, **kwargs)
        self._n = 0
        self.run_ids: dict[Key, int] = {}

    def sid(self, name: str) -> str:
        self._n += 1
        return f"{name}-{self._n}"

    def handle(self, *events: StateMachineEvent) -> list[Instruction]:
        instructions = self.ws.handle_stimulus(*events)
        self.ws.validate_state()
        return instructions

    def compute_event(
        self,
        key: Key,
        who_has: Mapping[Key, Iterable[str]] | None = None,
        nbytes: Mapping[Key, int] | None = None,
        priority: tuple[Any, ...] = (0,),
        run_id: int | None = None,
    ) -> ComputeTaskEvent:
        if run_id is None:
            run_id = max(self.run_ids.values(), default=0) + 1
        self.run_ids[key] = run_id
        return ComputeTaskEvent(
            stimulus_id=self.sid(f"compute-{key}"),
            key=key,
            run_id=run_id,
            run_spec=Serialized({"s": "pickle"}, [b"opaque"]),
            priority=priority,
            who_has=dict(who_has or {}),
            nbytes=dict(nbytes or {}),
        )

    def compute(self, key: Key, **kwargs: Any) -> list[Instruction]:
        return self.handle(self.compute_event(key, **kwargs))

    def success(self, key: Key, value: Any = None, nbytes: int = 8, run_id: int | None = None) -> list[Instruction]:
        return self.handle(
            ExecuteSuccess(
                stimulus_id=self.sid(f"success-{key}"),
                key=key,
                run_id=self.run_ids[key] if run_id is None else run_id,
                value=value,
                nbytes=nbytes,
                type="int",
                start=1.0,
                stop=2.0,
            )
        )

    def free(self, *keys: Key) -> list[Instruction]:
        return self.handle(FreeKeysEvent(stimulus_id=self.sid("free"), keys=tuple(keys)))

    def gathered(self, worker: str, data: Mapping[Key, Any], keys: Iterable[Key] | None = None) -> list[Instruction]:
        return self.handle(
            GatherDepSuccess(
                stimulus_id=self.sid("gather-ok"),
                worker=worker,
                keys=tuple(keys if keys is not None else data),
                data=dict(data),
                nbytes={k: 8 for k in data},
            )
        )

    def gather_failed(self, worker: str, keys: Iterable[Key]) -> list[Instruction]:
        return self.handle(GatherDepFailure(stimulus_id=self.sid("gather-failed"), worker=worker, keys=tuple(keys)))

    def state(self, key: Key) -> str:
        ts = self.ws.tasks.get(key)
        return "forgotten" if ts is None else ts.state


def executes(instructions: list[Instruction]) -> list[Key]:
    return [i.key for i in instructions if isinstance(i, Execute)]


def gathers(instructions: list[Instruction]) -> list[GatherDep]:
    return [i for i in instructions if isinstance(i, GatherDep)]


def messages(instructions: list[Instruction], op: str | None = None) -> list[Any]:
    # Any: tests read fields of whichever message type they expect.
    return [i.msg for i in instructions if isinstance(i, SendMessage) and (op is None or i.msg["op"] == op)]


# -- compute and execute ---------------------------------------------------------------------
def test_compute_task_without_dependencies_executes() -> None:
    h = Harness()
    instructions = h.compute("x", run_id=7)
    assert instructions == [Execute("x", 7)]
    assert h.state("x") == "executing"
    assert not h.ws.data

    instructions = h.success("x", value=42, nbytes=28)
    [msg] = messages(instructions)
    assert msg["op"] == "task-finished"
    assert msg["key"] == "x"
    assert msg["run_id"] == 7
    assert msg["nbytes"] == 28
    assert msg["type"] == "int"
    assert (msg["start"], msg["stop"]) == (1.0, 2.0)
    assert not executes(instructions)
    assert h.ws.data["x"] == 42
    assert h.state("x") == "memory"
    assert h.ws.nbytes_in_memory == 28
    assert not h.ws.executing
    assert h.ws.executed_count == 1


def test_compute_task_for_key_in_memory_reports_at_once() -> None:
    h = Harness()
    h.compute("x", run_id=1)
    h.success("x", value=1)
    instructions = h.compute("x", run_id=5)
    assert not executes(instructions)
    [msg] = messages(instructions, "task-finished")
    assert msg["run_id"] == 5


def test_execute_failure_sends_task_erred() -> None:
    h = Harness()
    h.compute("x", run_id=3)
    exc = Serialized({"s": "pickle"}, [b"exception"])
    instructions = h.handle(
        ExecuteFailure(
            stimulus_id="fail",
            key="x",
            run_id=3,
            exception=exc,
            traceback=None,
            text="ValueError: no",
            start=1.0,
            stop=1.5,
        )
    )
    [msg] = messages(instructions)
    assert msg["op"] == "task-erred"
    assert msg["key"] == "x"
    assert msg["run_id"] == 3
    assert msg["exception"] is exc
    assert msg["text"] == "ValueError: no"
    assert h.state("x") == "error"
    assert "x" not in h.ws.data
    assert not h.ws.executing


def test_nthreads_limits_concurrent_execution() -> None:
    h = Harness(nthreads=2)
    events = [h.compute_event(f"t-{i}", priority=(0, i)) for i in range(5)]
    instructions = h.handle(*events)
    assert executes(instructions) == ["t-0", "t-1"]
    assert len(h.ws.executing) == 2
    assert sorted(k for k, ts in h.ws.tasks.items() if ts.state == "ready") == ["t-2", "t-3", "t-4"]
    instructions = h.success("t-1")
    assert executes(instructions) == ["t-2"]
    assert len(h.ws.executing) == 2
    h.success("t-0")
    h.success("t-2")
    instructions = h.success("t-3")
    assert executes(instructions) == []
    h.success("t-4")
    assert sorted(h.ws.data) == [f"t-{i}" for i in range(5)]
    assert not h.ws.executing


def test_priorities_order_execution() -> None:
    h = Harness(nthreads=1)
    instructions = h.compute("first", priority=(0, 0))
    assert executes(instructions) == ["first"]
    # Arrive in one order, run in priority order.
    for key, prio in [("low", (5,)), ("high", (-5,)), ("mid", (0, 3))]:
        assert executes(h.compute(key, priority=prio)) == []
    order: list[Key] = []
    current: Key = "first"
    for _ in range(3):
        [nxt] = executes(h.success(current))
        order.append(nxt)
        current = nxt
    assert order == ["high", "mid", "low"]


def test_next_ready_tasks_in_priority_order_up_to_one_that_needs_resources() -> None:
    h = Harness(nthreads=1, resources={"GPU": 1})
    assert executes(h.compute("running", priority=(-10,))) == ["running"]
    assert h.ws.next_ready_tasks(4) == []  # nothing waits
    for key, prio in [("c", (3,)), ("a", (1,)), ("b", (2,)), ("d", (4,)), ("e", (5,))]:
        h.compute(key, priority=prio)
    assert [ts.key for ts in h.ws.next_ready_tasks(3)] == ["a", "b", "c"]
    assert [ts.key for ts in h.ws.next_ready_tasks(10)] == ["a", "b", "c", "d", "e"]
    assert [ts.key for ts in h.ws.next_ready_tasks(1)] == ["a"]
    # Asking leaves the queue as it was: the same answer again, and tasks start in the same order.
    assert [ts.key for ts in h.ws.next_ready_tasks(3)] == ["a", "b", "c"]
    # A freed task drops out; a task that needs resources ends the list (it may have to wait for them).
    h.free("b")
    gpu = h.compute_event("gpu", priority=(3, 5))
    gpu.resources = {"GPU": 1}
    h.handle(gpu)
    assert [ts.key for ts in h.ws.next_ready_tasks(10)] == ["a", "c"]
    # The first one starts when the thread frees up; the rest are next.
    assert executes(h.success("running")) == ["a"]
    assert [ts.key for ts in h.ws.next_ready_tasks(10)] == ["c"]


def test_secede_frees_a_thread() -> None:
    h = Harness(nthreads=1)
    h.handle(h.compute_event("a", priority=(0,)), h.compute_event("b", priority=(1,)))
    assert h.state("b") == "ready"
    instructions = h.handle(SecedeEvent(stimulus_id="secede", key="a"))
    [msg] = messages(instructions, "long-running")
    assert msg["key"] == "a"
    assert executes(instructions) == ["b"]
    assert h.state("a") == "long-running"
    instructions = h.success("a")
    assert messages(instructions, "task-finished")
    assert h.state("a") == "memory"


def test_reschedule_gives_the_task_back() -> None:
    h = Harness()
    h.compute("x", run_id=4)
    instructions = h.handle(RescheduleEvent(stimulus_id="resched", key="x", run_id=4))
    assert messages(instructions) == [{"op": "reschedule", "key": "x", "run_id": 4}]
    assert h.state("x") == "forgotten"
    assert not h.ws.executing


# -- dependencies -------------------------------------------------------------------------------
def test_dependencies_are_gathered_batched_per_peer_then_executed() -> None:
    h = Harness()
    instructions = h.compute(
        "z",
        who_has={"a": [PEER1], "b": [PEER1], "c": [PEER2]},
        nbytes={"a": 100, "b": 200, "c": 300},
    )
    assert executes(instructions) == []
    by_peer = {g.worker: g for g in gathers(instructions)}
    assert set(by_peer) == {PEER1, PEER2}
    assert sorted(by_peer[PEER1].keys) == ["a", "b"]
    assert by_peer[PEER1].total_nbytes == 300
    assert list(by_peer[PEER2].keys) == ["c"]
    assert h.state("z") == "waiting"
    assert {h.state(k) for k in "abc"} == {"flight"}

    instructions = h.gathered(PEER1, {"a": 1, "b": 2})
    assert executes(instructions) == []
    [add] = messages(instructions, "add-keys")
    assert sorted(add["keys"]) == ["a", "b"]
    assert h.state("z") == "waiting"

    instructions = h.gathered(PEER2, {"c": 3})
    assert executes(instructions) == ["z"]
    assert h.ws.data["a"] == 1 and h.ws.data["c"] == 3
    assert h.state("z") == "executing"
    h.success("z", value=6)
    assert h.ws.data["z"] == 6


def test_dependency_in_memory_is_not_fetched() -> None:
    h = Harness()
    h.compute("a")
    h.success("a", value=1)
    instructions = h.compute("b", who_has={"a": [ME, PEER1]})
    assert gathers(instructions) == []
    assert executes(instructions) == ["b"]


def test_never_fetch_from_self() -> None:
    h = Harness()
    instructions = h.compute("b", who_has={"a": [ME, PEER1]})
    [g] = gathers(instructions)
    assert g.worker == PEER1


def test_two_tasks_sharing_a_dependency_fetch_it_once() -> None:
    h = Harness(nthreads=2)
    instructions = h.handle(h.compute_event("x", who_has={"d": [PEER1]}), h.compute_event("y", who_has={"d": [PEER1]}))
    [g] = gathers(instructions)
    assert list(g.keys) == ["d"]
    instructions = h.gathered(PEER1, {"d": 0})
    assert sorted(executes(instructions)) == ["x", "y"]


def test_gather_failure_refetches_from_another_holder() -> None:
    h = Harness()
    instructions = h.compute("z", who_has={"a": [PEER1, PEER2]})
    [g] = gathers(instructions)
    first = g.worker
    other = PEER2 if first == PEER1 else PEER1
    instructions = h.gather_failed(first, ["a"])
    [g2] = gathers(instructions)
    assert g2.worker == other
    assert list(g2.keys) == ["a"]
    assert not messages(instructions, "missing-data")
    instructions = h.gathered(other, {"a": 1})
    assert executes(instructions) == ["z"]


def test_a_busy_peer_is_left_alone_until_its_retry() -> None:
    h = Harness()
    [g] = gathers(h.compute("z", who_has={"a": [PEER1]}))
    assert g.worker == PEER1
    instructions = h.handle(GatherDepBusy(stimulus_id=h.sid("busy"), worker=PEER1, keys=("a",)))
    # Back to fetch, still held by the peer; nothing asked of it until the retry.
    assert h.state("a") == "fetch" and PEER1 in h.ws.tasks["a"].who_has
    assert [i.worker for i in instructions if isinstance(i, RetryBusyWorkerLater)] == [PEER1]
    assert not gathers(instructions) and not messages(instructions, "missing-data")
    # Another key it holds waits as well; one another peer holds is fetched from that one.
    instructions = h.compute("y", who_has={"b": [PEER1], "c": [PEER2]})
    assert [(g.worker, g.keys) for g in gathers(instructions)] == [(PEER2, ("c",))]
    instructions = h.handle(BusyWorkerRetry(stimulus_id=h.sid("retry"), worker=PEER1))
    [g] = gathers(instructions)
    assert g.worker == PEER1 and set(g.keys) == {"a", "b"}


def test_a_busy_peer_with_another_holder_is_skipped() -> None:
    h = Harness()
    [g] = gathers(h.compute("z", who_has={"a": [PEER1, PEER2]}))
    first = g.worker
    other = PEER2 if first == PEER1 else PEER1
    [g2] = gathers(h.handle(GatherDepBusy(stimulus_id=h.sid("busy"), worker=first, keys=("a",))))
    assert g2.worker == other


def test_key_missing_from_gather_reply_refetches_elsewhere() -> None:
    h = Harness()
    [g] = gathers(h.compute("z", who_has={"a": [PEER1, PEER2]}))
    other = PEER2 if g.worker == PEER1 else PEER1
    instructions = h.gathered(g.worker, {}, keys=["a"])
    [g2] = gathers(instructions)
    assert g2.worker == other


def test_gather_failure_with_no_holder_left_sends_missing_data() -> None:
    h = Harness()
    h.compute("z", who_has={"a": [PEER1]}, run_id=11)
    instructions = h.gather_failed(PEER1, ["a"])
    [msg] = messages(instructions)
    assert msg["op"] == "missing-data"
    assert msg["key"] == "z"
    assert msg["run_id"] == 11
    assert {k: list(v) for k, v in msg["missing"].items()} == {"a": [PEER1]}
    assert not gathers(instructions) and not executes(instructions)
    assert h.state("z") == "forgotten"
    assert h.state("a") == "forgotten"
    assert not h.ws.to_fetch and not h.ws.in_flight_workers


def test_gather_failure_forgets_the_peer_for_other_keys() -> None:
    h = Harness(fetch_concurrency=1)
    instructions = h.handle(
        h.compute_event("x", who_has={"a": [PEER1]}), h.compute_event("y", who_has={"b": [PEER2, PEER1]})
    )
    # One peer at a time; PEER1 gets both keys.
    [g] = gathers(instructions)
    assert g.worker == PEER1
    assert sorted(g.keys) == ["a", "b"]
    instructions = h.gather_failed(PEER1, ["a", "b"])
    [g2] = gathers(instructions)
    assert g2.worker == PEER2 and list(g2.keys) == ["b"]
    [msg] = messages(instructions, "missing-data")
    assert msg["key"] == "x"


def test_transfer_limit_splits_fetches() -> None:
    h = Harness(transfer_limit=150)
    instructions = h.compute("z", who_has={"a": [PEER1], "b": [PEER1]}, nbytes={"a": 100, "b": 100})
    [g] = gathers(instructions)
    assert len(g.keys) == 1
    instructions = h.gathered(PEER1, {g.keys[0]: 0})
    [g2] = gathers(instructions)
    assert set(g.keys) | set(g2.keys) == {"a", "b"}
    assert executes(h.gathered(PEER1, {g2.keys[0]: 0})) == ["z"]


def test_incoming_bytes_limit_holds_fetches_from_all_peers_together() -> None:
    h = Harness(incoming_bytes_limit=1000)
    who_has = {"a": [PEER1], "b": [PEER2]}
    instructions = h.compute("z", who_has=who_has, nbytes={"a": 600, "b": 600})
    [g] = gathers(instructions)  # both at once would be 1200 bytes in flight
    assert h.ws.in_flight_bytes == {g.worker: 600}
    [g2] = gathers(h.gathered(g.worker, {g.keys[0]: 0}))
    assert {g.keys[0], g2.keys[0]} == {"a", "b"} and h.ws.in_flight_bytes == {g2.worker: 600}
    assert executes(h.gathered(g2.worker, {g2.keys[0]: 0})) == ["z"]
    assert h.ws.in_flight_bytes == {}


def test_one_fetch_goes_ahead_whatever_its_size() -> None:
    h = Harness(incoming_bytes_limit=100)
    [g] = gathers(h.compute("z", who_has={"a": [PEER1]}, nbytes={"a": 5000}))
    assert g.keys == ("a",)


# -- freeing -----------------------------------------------------------------------------------
def test_free_keys_while_executing_cancels_and_drops_result() -> None:
    h = Harness()
    h.compute("x", run_id=2)
    instructions = h.free("x")
    assert instructions == []
    assert h.state("x") == "cancelled"
    instructions = h.success("x", value=99)
    assert messages(instructions) == []
    assert "x" not in h.ws.data
    assert h.state("x") == "forgotten"
    assert not h.ws.executing
    assert h.ws.nbytes_in_memory == 0


def test_cancelled_then_asked_again_keeps_running() -> None:
    h = Harness()
    h.compute("x", run_id=2)
    h.free("x")
    instructions = h.compute("x", run_id=3)
    assert executes(instructions) == [], "already running: no second execution"
    assert h.state("x") == "executing"
    [msg] = messages(h.success("x", value=1))
    assert msg["op"] == "task-finished"
    assert msg["run_id"] == 3
    assert h.ws.data["x"] == 1


def test_free_keys_on_memory_removes_data() -> None:
    h = Harness()
    h.compute("x")
    h.success("x", value="result", nbytes=50)
    assert h.ws.nbytes_in_memory == 50
    instructions = h.free("x")
    assert instructions == []
    assert "x" not in h.ws.data
    assert h.state("x") == "forgotten"
    assert h.ws.nbytes_in_memory == 0
    # Freeing an unknown key is harmless.
    assert h.free("x", "never-seen") == []


def test_free_keys_on_dependency_of_a_task_about_to_run_keeps_it() -> None:
    h = Harness(nthreads=1)
    h.compute("a")
    h.success("a", value=1)
    h.compute("c")
    h.compute("b", who_has={"a": [ME]})
    assert h.state("b") == "ready"
    h.free("a")
    assert h.ws.data["a"] == 1, "b still needs a"


def test_free_keys_on_dependency_of_running_task_drops_it_and_a_new_compute_runs_it() -> None:
    # The running task holds its inputs already; kept, the freed copy would answer a
    # later compute-task of the same key instead of a new run (a P2P transfer must run again).
    h = Harness(nthreads=2)
    h.compute("a")
    h.success("a", value=1)
    h.compute("b", who_has={"a": [ME]})
    assert h.state("b") == "executing"
    h.free("a")
    assert "a" not in h.ws.data
    instructions = h.compute("a")
    assert messages(instructions, "task-finished") == []
    assert h.state("a") == "executing"


def test_acquire_replicas_of_a_key_kept_for_a_task_about_to_run_reports_it_again() -> None:
    # Freed by the scheduler but kept for b: asked for a copy, the worker says it has one.
    h = Harness(nthreads=1)
    h.compute("a")
    h.success("a", value=1, nbytes=30)
    h.compute("c")
    h.compute("b", who_has={"a": [ME]})
    h.free("a")
    instructions = h.handle(
        AcquireReplicasEvent(stimulus_id=h.sid("acquire"), who_has={"a": [PEER1]}, nbytes={"a": 30})
    )
    assert [(msg["keys"], msg["nbytes"]) for msg in messages(instructions, "add-keys")] == [(["a"], {"a": 30})]
    assert gathers(instructions) == []
    # Counted by the scheduler again, it is kept until the scheduler frees it.
    h.success("c")
    h.success("b")
    h.free("b")
    assert h.ws.data["a"] == 1
    h.free("a")
    assert h.state("a") == "forgotten"


def test_free_keys_while_fetching_drops_arriving_data() -> None:
    h = Harness()
    [g] = gathers(h.compute("z", who_has={"a": [PEER1]}))
    h.free("z")
    assert h.state("z") == "forgotten"
    assert h.state("a") in ("cancelled", "forgotten")
    instructions = h.gathered(PEER1, {"a": 1})
    assert "a" not in h.ws.data
    assert h.state("a") == "forgotten"
    assert not messages(instructions, "add-keys")
    assert not executes(instructions)


def test_free_ready_task_never_executes() -> None:
    h = Harness(nthreads=1)
    h.handle(h.compute_event("a", priority=(0,)), h.compute_event("b", priority=(1,)))
    assert h.state("b") == "ready"
    h.free("b")
    assert executes(h.success("a")) == []
    assert h.state("b") == "forgotten"


def test_dependent_of_cancelled_task_does_not_hang() -> None:
    h = Harness(nthreads=2)
    h.compute("x", run_id=1)
    h.free("x")
    assert h.state("x") == "cancelled"
    # The scheduler now has x elsewhere and sends a dependent here.
    instructions = h.compute("y", who_has={"x": [PEER1]}, run_id=2)
    instructions += h.success("x", value=1, run_id=1)
    # Either the finished value is kept, or x is fetched from PEER1: y must make progress.
    progressed = executes(instructions) == ["y"] or any(
        g.worker == PEER1 and "x" in g.keys for g in gathers(instructions)
    )
    assert progressed, (instructions, h.ws.tasks)


# -- scatter and story ----------------------------------------------------------------------------
def test_update_data_stores_data() -> None:
    h = Harness()
    instructions = h.handle(UpdateDataEvent(stimulus_id="scatter", data={"b": 2}, nbytes={"b": 16}))
    assert instructions == []
    assert h.ws.data["b"] == 2
    assert h.state("b") == "memory"
    assert h.ws.nbytes_in_memory == 16
    # A task needing it runs at once, without fetching.
    instructions = h.compute("z", who_has={"b": [PEER1]})
    assert executes(instructions) == ["z"]
    assert not gathers(instructions)


def test_update_data_unblocks_a_waiting_task() -> None:
    h = Harness()
    [g] = gathers(h.compute("z", who_has={"a": [PEER1]}))
    instructions = h.handle(UpdateDataEvent(stimulus_id="scatter", data={"a": 1}, nbytes={"a": 8}))
    assert executes(instructions) == ["z"]
    # The late reply of the fetch changes nothing.
    instructions = h.gathered(PEER1, {"a": "stale"})
    assert h.ws.data["a"] == 1
    assert not executes(instructions)
    assert not h.ws.in_flight_workers


def test_story_records_transitions() -> None:
    h = Harness()
    ev = h.compute_event("z", who_has={"a": [PEER1]})
    h.handle(ev)
    h.gathered(PEER1, {"a": 1})
    h.success("z", value=2)
    story_z = [(start, finish) for _, start, finish, _, _ in h.ws.story("z")]
    assert story_z == [("released", "waiting"), ("waiting", "ready"), ("ready", "executing"), ("executing", "memory")]
    story_a = [(start, finish) for _, start, finish, _, _ in h.ws.story("a")]
    assert story_a == [("released", "fetch"), ("fetch", "flight"), ("flight", "memory")]
    assert h.ws.story("z")[0][3] == ev.stimulus_id
    assert all(e[0] == "z" for e in h.ws.story("z"))
    both = h.ws.story("a", "z")
    assert len(both) == len(story_a) + len(story_z)
    assert h.ws.story("nothing") == []


def test_unknown_event_is_rejected() -> None:
    h = Harness()
    with pytest.raises(TypeError):
        h.ws.handle_stimulus(StateMachineEvent(stimulus_id="bare"))


# -- unusable replies (the peer answered, but not with usable data) -----------------------------
def broken_reply(h: Harness, worker: str, keys: Iterable[Key]) -> list[Instruction]:
    return h.handle(
        GatherDepFailure(
            stimulus_id=h.sid("gather-broken"),
            worker=worker,
            keys=tuple(keys),
            exception=Serialized({"s": "pickle"}, [b"the error"]),
            traceback=None,
            text="ValueError: cannot rebuild",
        )
    )


def test_unusable_reply_from_the_last_holder_errs_the_dependents() -> None:
    h = Harness()
    h.compute("z", who_has={"a": [PEER1]}, run_id=11)
    instructions = broken_reply(h, PEER1, ["a"])
    [msg] = messages(instructions)
    assert msg["op"] == "task-erred"
    assert msg["key"] == "z"
    assert msg["run_id"] == 11
    assert msg["text"] == "ValueError: cannot rebuild"
    assert h.state("z") == "error"
    assert h.state("a") == "forgotten"
    assert not gathers(instructions) and not executes(instructions)
    assert ("z", "waiting", "error") in [e[:3] for e in h.ws.story("z")]


def test_unusable_reply_tries_another_holder_first() -> None:
    h = Harness()
    [g] = gathers(h.compute("z", who_has={"a": [PEER1, PEER2]}))
    other = PEER2 if g.worker == PEER1 else PEER1
    instructions = broken_reply(h, g.worker, ["a"])
    [g2] = gathers(instructions)
    assert g2.worker == other
    assert not messages(instructions)
    assert executes(h.gathered(other, {"a": 1})) == ["z"]


def test_unusable_reply_keeps_the_peer_as_holder_of_other_keys() -> None:
    # The peer is alive; only what it sent for these keys was unusable.
    h = Harness()
    h.compute("z", who_has={"a": [PEER1], "b": [PEER1, PEER2]})
    ws = h.ws
    assert PEER1 in ws.tasks["b"].who_has or ws.tasks["b"].coming_from == PEER1
    flying = {ts.key for ts in ws.in_flight_workers.get(PEER1, ())}
    broken_reply(h, PEER1, sorted(flying, key=str))
    assert h.state("z") == "error"


def test_task_asked_for_while_in_flight_gets_its_inputs_when_the_fetch_fails() -> None:
    # "y" is fetched from PEER1 for "z"; meanwhile PEER1 dies and the scheduler asks us to
    # compute "y" here (its input "x" is on PEER2).  The fetch then fails: "y" must be run with
    # "x" fetched first, not at once with no input (dask's task raises "missing keys").
    h = Harness()
    h.compute("z", who_has={"y": [PEER1]}, nbytes={"y": 10})
    assert h.state("y") == "flight"
    h.compute("y", who_has={"x": [PEER2]}, nbytes={"x": 10})
    assert h.state("y") == "cancelled"
    instructions = h.gather_failed(PEER1, ["y"])
    assert executes(instructions) == []
    assert h.state("y") == "waiting"
    assert {ts.key for ts in h.ws.tasks["y"].dependencies} == {"x"}
    [gather] = gathers(instructions)
    assert gather.worker == PEER2 and set(gather.keys) == {"x"}
    instructions = h.gathered(PEER2, {"x": 1})
    assert executes(instructions) == ["y"]
