"""Unit tests of the scheduler's state machine, driven without any socket.

Every stimulus (``update_graph``, ``task_finished``, ``remove_worker_state``,
...) is a plain method that changes state and returns an :class:`Effects` with the
messages to send; these tests call them directly on a scheduler that is never
started, check the messages, and validate the whole state after every step.

Run specifications are frames that are *not* a pickle: if the scheduler ever
tried to unpickle user code, these tests would fail.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import dask
import dask.config
import pytest

from distributed.batched import BatchedSend
from distributed.exceptions import KilledWorker
from distributed.protocol import Serialized, unwrap
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.scheduler.records import Effects
from distributed.scheduler.state import ROOT_RUN
from distributed.tests.machines import (
    A,
    B,
    C,
    Msg,
    RecordingStream,
    cancel,
    check,
    client_ops,
    compute_of,
    computed_keys,
    computes,
    done,
    finish,
    freed,
    opaque_spec,
    report_erred,
    scattered,
    state,
)
from distributed.tests.machines import task_spec as spec
from distributed.tests.machines import validating_scheduler as new_scheduler

# -- fixtures ---------------------------------------------------------------------------


# -- a chain -----------------------------------------------------------------------------
def test_chain_runs_in_order_and_is_forgotten_after_release() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    rs = {k: opaque_spec() for k in "abc"}
    tasks: dict[Key, m.TaskSpec] = {
        "a": spec(order=0, run_spec=rs["a"]),
        "b": spec(["a"], order=1, run_spec=rs["b"]),
        "c": spec(["b"], order=2, run_spec=rs["c"]),
    }
    out = check(s, s.update_graph("client-1", tasks, ["c"]))
    assert computed_keys(out) == ["a"]
    addr, msg = compute_of(out, "a")
    assert addr == A
    # The run_spec is forwarded as the very object the client sent.
    assert msg["run_spec"] is rs["a"]
    assert msg["who_has"] == {}
    assert s.tasks["b"].state == "waiting"
    assert s.tasks["c"].state == "waiting"
    assert not out.clients

    out = finish(s, "a", nbytes=1000)
    assert s.tasks["a"].state == "memory"
    addr, msg = compute_of(out, "b")
    assert addr == A
    assert msg["run_spec"] is rs["b"]
    assert msg["who_has"] == {"a": [A]}
    assert msg["nbytes"] == {"a": 1000}
    assert not freed(out), "a is still needed by b"
    assert not out.clients, "nobody wants a"

    out = finish(s, "b")
    addr, msg = compute_of(out, "c")
    assert msg["run_spec"] is rs["c"]
    assert msg["who_has"] == {"b": [A]}
    # a is no longer needed by anything: released and freed on its worker.
    assert freed(out) == {A: {"a"}}
    assert state(s, "a") == "released"
    assert not s.workers[A].has_what.keys() - {s.tasks["b"]}

    out = finish(s, "c", type_="str")
    assert freed(out) == {A: {"b"}}
    [kim] = client_ops(out, "client-1", "key-in-memory")
    assert kim["key"] == "c"
    assert list(kim["workers"]) == [A]
    assert kim["type"] == "str"
    assert state(s, "c") == "memory"
    assert [ts.key for ts in s.workers[A].has_what] == ["c"]

    out = check(s, s.client_releases_keys("client-1", ["c"], "release"))
    assert freed(out) == {A: {"c"}}
    assert s.tasks == {}
    assert not s.workers[A].has_what
    assert not s.workers[A].processing
    assert not s.clients["client-1"].wants_what

    transitions = [(start, finish) for _, start, finish, _, _ in s.story("b")]
    assert transitions == [
        ("released", "waiting"),
        ("waiting", "processing"),
        ("processing", "memory"),
        ("memory", "released"),
        ("released", "forgotten"),
    ]


def test_story_records_stimulus_ids() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"], stimulus_id="graph-1"))
    ts = s.tasks["x"]
    check(s, s.task_finished(A, done("x", ts.run_id, 8, "int", 0.1), "done-1"))
    story = s.story("x")
    assert [(key, start, finish, sid) for key, start, finish, sid, _ in story] == [
        ("x", "released", "waiting", "graph-1"),
        ("x", "waiting", "processing", "graph-1"),
        ("x", "processing", "memory", "done-1"),
    ]
    times = [t for *_, t in story]
    assert times == sorted(times)
    # A TaskState works as well as its key; other keys are not mixed in.
    assert s.story(ts) == story
    assert s.story("unknown") == []


def test_scheduler_never_unpickles_run_spec_or_error() -> None:
    # Both the run_spec and the exception payload are garbage frames: any
    # attempt to open them on the scheduler would raise.
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    rs = opaque_spec()
    check(s, s.update_graph("c1", {"x": spec(run_spec=rs)}, ["x"]))
    assert s.tasks["x"].run_spec is rs
    exc = Serialized({"s": "pickle"}, [b"not a pickled exception"])
    ts = s.tasks["x"]
    out = check(s, s.task_erred(A, report_erred("x", ts.run_id, exc, None, "boom"), "err"))
    [msg] = client_ops(out, "c1", "task-erred")
    assert msg["exception"] is exc
    assert msg["text"] == "boom"


# -- worker choice ---------------------------------------------------------------------
@pytest.mark.parametrize("big_on", [A, B])
def test_worker_choice_prefers_holder_of_large_dependency(big_on: str) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    small_on = B if big_on == A else A
    check(
        s,
        s.update_data_state(
            scattered("c1", {"big": [big_on], "small": [small_on]}, {"big": 10**9, "small": 10}, {}), "scatter"
        ),
    )
    out = check(s, s.update_graph("c1", {"z": spec(["big", "small"])}, ["z"]))
    addr, msg = compute_of(out, "z")
    assert addr == big_on
    assert {k: list(v) for k, v in msg["who_has"].items()} == {"big": [big_on], "small": [small_on]}
    assert msg["nbytes"] == {"big": 10**9, "small": 10}


def test_dependent_runs_where_its_dependency_was_computed() -> None:
    s = new_scheduler()
    for addr in (A, B, C):
        check(s, s.add_worker_state(addr, 1))
    check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["y"]))
    x_on = s.tasks["x"].processing_on
    assert x_on is not None
    out = finish(s, "x", nbytes=10**8)
    addr, _ = compute_of(out, "y")
    assert addr == x_on.address


# -- priorities and queuing ---------------------------------------------------------------
def test_root_tasks_are_queued_and_handed_out_by_priority(saturation_one: None) -> None:
    s = new_scheduler()
    assert s.worker_saturation == 1.0
    check(s, s.add_worker_state(A, 1))
    tasks: dict[Key, m.TaskSpec] = {f"t-{i}": spec(order=i) for i in range(5)}
    out = check(s, s.update_graph("c1", tasks, list(tasks)))
    assert computed_keys(out) == ["t-0"]
    assert s.n_queued == 4
    assert sorted(ts.key for ts in s.tasks.values() if ts.state == "queued") == ["t-1", "t-2", "t-3", "t-4"]
    handed_out: list[Key] = ["t-0"]
    for i in range(5):
        out = finish(s, handed_out[-1])
        keys = computed_keys(out, A)
        if i < 4:
            assert len(keys) == 1, keys
            handed_out.extend(keys)
        else:
            assert keys == []
    assert handed_out == [f"t-{i}" for i in range(5)]
    assert s.n_queued == 0
    assert all(ts.state == "memory" for ts in s.tasks.values())


def test_user_priority_goes_first_in_queue(saturation_one: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {f"low-{i}": spec(order=i) for i in range(3)}, [f"low-{i}" for i in range(3)]))
    # A later graph with a higher user priority jumps the queue.
    check(s, s.update_graph("c1", {"high": spec(order=0)}, ["high"], user_priority=10))
    assert s.tasks["high"].state == "queued"
    out = finish(s, "low-0")
    assert computed_keys(out) == ["high"]


def test_first_root_task_handed_out_is_highest_priority(saturation_one: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    # The graph arrives with its tasks in reverse priority order.
    tasks: dict[Key, m.TaskSpec] = {f"t-{i}": spec(order=i) for i in reversed(range(4))}
    out = check(s, s.update_graph("c1", tasks, list(tasks)))
    assert computed_keys(out) == ["t-0"]


def test_saturation_fills_every_thread(saturation_one: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    check(s, s.add_worker_state(B, 1))
    tasks: dict[Key, m.TaskSpec] = {f"t-{i}": spec(order=i) for i in range(10)}
    out = check(s, s.update_graph("c1", tasks, list(tasks)))
    assert len(computed_keys(out, A)) == 2
    assert len(computed_keys(out, B)) == 1
    assert s.n_queued == 7


def _root_placements(duration: float | None, nworkers: int = 20, ntasks: int = 80) -> tuple[Scheduler, Effects]:
    """A map of ``ntasks`` root tasks over ``nworkers`` one-thread workers, its prefix measured at ``duration`` s."""
    s = new_scheduler()
    workers = [f"tcp://10.0.0.{i}:1" for i in range(1, nworkers + 1)]
    for addr in workers:
        check(s, s.add_worker_state(addr, 1))
    if duration is not None:
        check(s, s.update_graph("c1", {"t-1000": spec(order=0)}, ["t-1000"]))  # the same prefix, "t"
        finish(s, "t-1000", duration=duration)
    tasks: dict[Key, m.TaskSpec] = {f"t-{i}": spec(order=i) for i in range(ntasks)}
    return s, check(s, s.update_graph("c1", tasks, list(tasks)))


def test_short_root_tasks_go_to_a_worker_in_runs() -> None:
    # Measured far under the latency budget: each worker takes ROOT_RUN in a row, in one message.
    s, out = _root_placements(duration=1e-4)
    assert 0 <= s.tasks["t-0"].group.prefix.duration_average < s.root_latency_budget
    per_worker = {addr: computed_keys(out, addr) for addr in out.workers if computed_keys(out, addr)}
    assert len(per_worker) == 80 // ROOT_RUN, per_worker
    for keys in per_worker.values():
        assert len(keys) == ROOT_RUN
        orders = sorted(int(str(k).rsplit("-", 1)[1]) for k in keys)
        assert orders == list(range(orders[0], orders[0] + ROOT_RUN)), keys  # a run is consecutive in priority
    assert s.n_queued == 0


@pytest.mark.parametrize("duration", [None, 1.0], ids=["unmeasured", "long"])
def test_root_tasks_without_extra_slots_are_spread_one_by_one(duration: float | None) -> None:
    # Unmeasured, or longer than the budget: worker-saturation alone (ceil(1.1) = 2 a thread), spread evenly.
    s, out = _root_placements(duration)
    counts = sorted(len(computes(out, addr)) for addr in s.workers)
    assert counts == [2] * len(s.workers), counts
    assert s.n_queued == 80 - 2 * len(s.workers)


def test_a_run_stops_at_the_workers_room() -> None:
    # 1 ms tasks under the default 5 ms budget: 2 + 5 slots a worker, fewer than a run; the rest queue.
    s, out = _root_placements(duration=1e-3, nworkers=2, ntasks=3 * ROOT_RUN)
    assert ROOT_RUN > 2 + 5
    assert sorted(len(computes(out, addr)) for addr in s.workers) == [7, 7]
    assert s.n_queued == 3 * ROOT_RUN - 14


# -- no workers ----------------------------------------------------------------------------
def test_no_workers_queues_root_tasks_until_a_worker_arrives() -> None:
    s = new_scheduler()
    out = check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["y"]))
    assert not out.workers
    assert s.tasks["x"].state in ("queued", "no-worker")
    assert s.tasks["y"].state == "waiting"
    out = check(s, s.add_worker_state(A, 1))
    assert computed_keys(out, A) == ["x"]
    out = finish(s, "x")
    assert computed_keys(out, A) == ["y"]


def test_no_workers_without_queuing_goes_to_no_worker(no_queuing: None) -> None:
    s = new_scheduler()
    tasks: dict[Key, m.TaskSpec] = {f"r-{i}": spec(order=i) for i in range(3)}
    out = check(s, s.update_graph("c1", tasks, list(tasks)))
    assert not out.workers
    assert {ts.state for ts in s.tasks.values()} == {"no-worker"}
    assert set(s.unrunnable) == set(s.tasks.values())
    out = check(s, s.add_worker_state(A, 1))
    assert sorted(computed_keys(out, A)) == ["r-0", "r-1", "r-2"]
    assert not s.unrunnable


def test_unrunnable_tasks_err_after_the_no_workers_timeout() -> None:
    with dask.config.set({"distributed.scheduler.no-workers-timeout": "10s"}):
        s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(annotations={"workers": [B]}), "y": spec(["x"])}, ["y"]))
    x = s.tasks["x"]
    assert x.state == "no-worker"
    since = s.unrunnable[x]
    check(s, s.fail_unrunnable_tasks(since + 9, stimulus_id="early"))
    assert x.state == "no-worker"
    check(s, s.fail_unrunnable_tasks(since + 10, stimulus_id="late"))
    assert [s.tasks[k].state for k in ("x", "y")] == ["erred", "erred"]
    assert x.exception_text is not None and "no-workers-timeout" in x.exception_text and B in x.exception_text


def test_tasks_err_when_no_worker_runs_for_the_no_workers_timeout() -> None:
    with dask.config.set({"distributed.scheduler.no-workers-timeout": "10s"}):
        s = new_scheduler()
    tasks: dict[Key, m.TaskSpec] = {f"r-{i}": spec(order=i) for i in range(3)}
    check(s, s.update_graph("c1", tasks, list(tasks)))
    first_seen = max([time.time(), *s.unrunnable.values()])
    check(s, s.fail_unrunnable_tasks(first_seen, stimulus_id="first"))  # no worker since now
    check(s, s.fail_unrunnable_tasks(first_seen + 9, stimulus_id="early"))
    assert {ts.state for ts in s.tasks.values()} <= {"queued", "no-worker"}
    check(s, s.fail_unrunnable_tasks(first_seen + 10, stimulus_id="late"))
    assert {ts.state for ts in s.tasks.values()} == {"erred"}


def test_without_the_no_workers_timeout_unrunnable_tasks_wait() -> None:
    s = new_scheduler()
    check(s, s.update_graph("c1", {"x": spec(annotations={"workers": [B]})}, ["x"]))
    check(s, s.fail_unrunnable_tasks(time.time() + 1e6, stimulus_id="much-later"))
    assert s.tasks["x"].state in ("queued", "no-worker")


def test_worker_restriction_waits_for_that_worker(no_queuing: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    out = check(s, s.update_graph("c1", {"x": spec(annotations={"workers": [B]})}, ["x"]))
    assert not out.workers
    assert s.tasks["x"].state == "no-worker"
    out = check(s, s.add_worker_state(C, 1))
    assert not computes(out)
    out = check(s, s.add_worker_state(B, 1))
    assert computed_keys(out, B) == ["x"]


@pytest.mark.parametrize("default_size, chosen", [("1kiB", B), ("1MB", A)])
def test_a_result_of_unknown_size_is_priced_at_the_default_data_size(
    no_queuing: None, default_size: str, chosen: str
) -> None:
    # y needs x1 (on A, size unknown) and x2 (on B, 2000 bytes): it runs where less must move.
    with dask.config.set({"distributed.scheduler.default-data-size": default_size}):
        s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    graph: dict[Key, m.TaskSpec] = {
        "x1": spec(annotations={"workers": [A]}),
        "x2": spec(annotations={"workers": [B]}),
        "y": spec(["x1", "x2"]),
    }
    check(s, s.update_graph("c1", graph, ["y"]))
    finish(s, "x1", nbytes=0)
    out = finish(s, "x2", nbytes=2000)
    assert computed_keys(out, chosen) == ["y"]


# -- errors ------------------------------------------------------------------------------
def test_task_erred_reports_payload_and_blames_dependents() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    tasks: dict[Key, m.TaskSpec] = {"a": spec(order=0), "b": spec(["a"], order=1), "c": spec(["b"], order=2)}
    check(s, s.update_graph("c1", tasks, ["a", "c"]))
    ts = s.tasks["a"]
    exc = Serialized({"s": "pickle"}, [b"exception frames"])
    tb = Serialized({"s": "pickle"}, [b"traceback frames"])
    out = check(s, s.task_erred(A, report_erred("a", ts.run_id, exc, tb, "ZeroDivisionError: boom"), "err-a"))
    assert not computes(out)
    assert {k: s.tasks[k].state for k in "abc"} == {"a": "erred", "b": "erred", "c": "erred"}
    assert s.tasks["b"].exception_blame is ts
    assert s.tasks["c"].exception_blame is ts
    erred = {msg["key"]: msg for msg in client_ops(out, "c1", "task-erred")}
    assert set(erred) == {"a", "c"}  # b is not wanted by the client
    for msg in erred.values():
        assert msg["exception"] is exc
        assert msg["traceback"] is tb
        assert msg["text"] == "ZeroDivisionError: boom"
    assert not s.workers[A].processing

    # A client asking later for an erred key hears about the error at once.
    out = check(s, s.client_desires_keys("c2", ["c"], "desire"))
    [msg] = client_ops(out, "c2", "task-erred")
    assert msg["exception"] is exc

    check(s, s.client_releases_keys("c1", ["a", "c"], "release-1"))
    check(s, s.client_releases_keys("c2", ["c"], "release-2"))
    assert s.tasks == {}


def test_erred_dependency_releases_sibling_data() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    tasks: dict[Key, m.TaskSpec] = {"ok": spec(order=0), "bad": spec(order=1), "z": spec(["ok", "bad"], order=2)}
    check(s, s.update_graph("c1", tasks, ["z"]))
    out = finish(s, "ok")
    assert s.tasks["ok"].state == "memory"
    ts = s.tasks["bad"]
    out = check(s, s.task_erred(A, report_erred("bad", ts.run_id, opaque_spec(), None, "err"), "err-bad"))
    assert s.tasks["z"].state == "erred"
    # Nothing can use "ok" any more.
    assert s.tasks["ok"].state != "memory"
    assert "ok" in freed(out).get(A, set())


def test_retries_rerun_once_then_err() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(annotations={"retries": 1})}, ["x"]))
    assert s.tasks["x"].retries == 1
    run_ids = [s.tasks["x"].run_id]
    out = check(s, s.task_erred(A, report_erred("x", run_ids[0], opaque_spec(), None, "first"), "err-1"))
    assert not client_ops(out, "c1", "task-erred")
    ts = s.tasks["x"]
    assert ts.state == "processing"
    assert ts.run_id != run_ids[0]
    assert ts.retries == 0
    msgs = computes(out)
    assert msgs, "the task must be sent again"
    assert msgs[-1]["run_id"] == ts.run_id
    # A stale report of the failed run changes nothing.
    check(s, s.task_erred(A, report_erred("x", run_ids[0], opaque_spec(), None, "stale"), "err-stale"))
    assert s.tasks["x"].state == "processing"

    exc = opaque_spec()
    out = check(s, s.task_erred(A, report_erred("x", ts.run_id, exc, None, "second"), "err-2"))
    assert state(s, "x") == "erred"
    [msg] = client_ops(out, "c1", "task-erred")
    assert msg["exception"] is exc
    assert msg["text"] == "second"
    assert not computes(out)


def _worker_keeps_running(sent: Sequence[Msg], key: Key) -> bool:
    """Whether ``key`` is still to be computed once the worker applied ``sent`` in order."""
    running = False
    for msg in sent:
        if msg["op"] == "compute-task" and msg["key"] == key:
            running = True
        elif msg["op"] == "free-keys" and key in msg["keys"]:
            running = False
    return running


def test_retry_is_sent_once_and_not_freed_after_it() -> None:
    # Through the I/O shell: free-keys go after compute-task on the stream, so a
    # key released and reassigned to the same worker must not be freed there.
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    stream = RecordingStream()
    s.stream_comms[A] = cast(BatchedSend, stream)
    check(s, s.update_graph("c1", {"x": spec(annotations={"retries": 1})}, ["x"]))
    first = s.tasks["x"].run_id
    out = check(s, s.task_erred(A, report_erred("x", first, opaque_spec(), None, "first"), "err-1"))
    s.send_all(out)
    assert len([msg for msg in stream.sent if msg["op"] == "compute-task"]) == 1, stream.sent
    assert _worker_keeps_running(stream.sent, "x"), stream.sent


# -- worker removal ------------------------------------------------------------------------
def test_removed_worker_tasks_are_rescheduled() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    out = check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    assert computed_keys(out, A) == ["x"]
    check(s, s.add_worker_state(B, 1))
    old_run = s.tasks["x"].run_id
    out = check(s, s.remove_worker_state(A, stimulus_id="remove-a"))
    assert A not in s.workers
    assert A not in out.workers and A not in out.free
    addr, msg = compute_of(out, "x")
    assert addr == B
    assert msg["run_id"] != old_run
    assert s.tasks["x"].suspicious == 1
    # The removed worker's late report is ignored.
    check(s, s.task_finished(A, done("x", old_run, 8, "int", 0.1), "late"))
    assert s.tasks["x"].state == "processing"
    out = finish(s, "x")
    assert [msg["key"] for msg in client_ops(out, "c1", "key-in-memory")] == ["x"]


def test_key_held_only_by_removed_worker_is_recomputed() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["x", "y"]))
    finish(s, "x")
    finish(s, "y")
    check(s, s.add_worker_state(B, 1))
    out = check(s, s.remove_worker_state(A, stimulus_id="remove-a", safe=True))
    # Both results were lost; only x can start (y waits for it again).
    assert "x" in computed_keys(out, B)
    assert s.tasks["x"].state == "processing"
    assert s.tasks["y"].state == "waiting"
    out = finish(s, "x")
    assert [msg["key"] for msg in client_ops(out, "c1", "key-in-memory")] == ["x"]
    addr, msg = compute_of(out, "y")
    assert addr == B
    assert msg["who_has"] == {"x": [B]}


def test_lost_keys_do_not_start_dependents_with_no_holder() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["x", "y"]))
    finish(s, "x")
    finish(s, "y")
    check(s, s.add_worker_state(B, 1))
    out = check(s, s.remove_worker_state(A, stimulus_id="remove-a", safe=True))
    for msg in computes(out):
        for dep, holders in msg["who_has"].items():
            assert holders, f"compute-task {msg['key']!r} sent with no holder of {dep!r}"
    assert computed_keys(out) == ["x"]
    assert not freed(out)


def test_removed_replica_keeps_key_in_memory() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    check(s, s.update_data_state(scattered("c1", {"x": [A, B]}, {"x": 10}, {"x": "int"}), "scatter"))
    out = check(s, s.remove_worker_state(A, stimulus_id="remove-a"))
    assert not computes(out)
    assert not out.clients
    assert s.tasks["x"].state == "memory"
    assert s.tasks["x"].who_has == {s.workers[B]}


def test_lost_scattered_data_is_reported_to_the_client() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_data_state(scattered("c1", {"x": [A]}, {"x": 10}, {"x": "int"}), "scatter"))
    out = check(s, s.remove_worker_state(A, stimulus_id="remove-a"))
    assert [msg["key"] for msg in client_ops(out, "c1", "lost-data")] == ["x"]
    assert not computes(out)


def test_killed_worker_after_allowed_failures() -> None:
    s = new_scheduler(allowed_failures=1)
    workers = [f"tcp://10.0.1.{i}:1234" for i in range(3)]
    check(s, s.add_worker_state(workers[0], 1))
    check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["y"]))
    for i in range(2):
        check(s, s.add_worker_state(workers[i + 1], 1))
        assert s.tasks["x"].processing_on is s.workers[workers[i]]
        out = check(s, s.remove_worker_state(workers[i], stimulus_id=f"remove-{i}"))
        if i == 0:
            # One death is allowed: the task runs on the next worker.
            assert computed_keys(out, workers[1]) == ["x"]
            assert not client_ops(out, "c1", "task-erred")
    ts = s.tasks["x"]
    assert ts.state == "erred"
    assert ts.suspicious == 2
    assert s.tasks["y"].state == "erred"
    assert not computes(out)
    [msg] = client_ops(out, "c1", "task-erred")
    assert msg["key"] == "y"
    assert isinstance(msg["exception"], Serialized)
    exc = unwrap(msg["exception"])
    assert isinstance(exc, KilledWorker)
    assert exc.task == "x"
    assert exc.last_worker == workers[1]
    assert not s.workers[workers[2]].processing


def test_safe_removal_does_not_count_as_suspicious() -> None:
    s = new_scheduler(allowed_failures=0)
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    check(s, s.add_worker_state(B, 1))
    out = check(s, s.remove_worker_state(A, stimulus_id="retire", safe=True))
    assert computed_keys(out, B) == ["x"]
    assert s.tasks["x"].suspicious == 0


# -- lost dependencies ----------------------------------------------------------------------
def test_unknown_dependency_cancels_with_lost_dependencies() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    tasks: dict[Key, m.TaskSpec] = {
        "ok": spec(order=0),
        "x": spec(["ok", "never-seen"], order=1),
        "y": spec(["x"], order=2),
    }
    out = check(s, s.update_graph("c1", tasks, ["y"]))
    cancelled = client_ops(out, "c1", "cancelled-keys")
    assert [list(msg["keys"]) for msg in cancelled] == [["y"]]
    assert cancelled[0]["reason"] == "lost dependencies"
    assert not computes(out)
    assert s.tasks == {}
    assert not s.clients["c1"].wants_what


def test_lost_dependencies_leave_the_rest_of_the_graph_running() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    tasks: dict[Key, m.TaskSpec] = {"good": spec(order=0), "bad": spec(["never-seen"], order=1)}
    out = check(s, s.update_graph("c1", tasks, ["good", "bad"]))
    cancelled = client_ops(out, "c1", "cancelled-keys")
    assert [list(msg["keys"]) for msg in cancelled] == [["bad"]]
    assert computed_keys(out) == ["good"]
    assert set(s.tasks) == {"good"}
    out = finish(s, "good")
    assert [msg["key"] for msg in client_ops(out, "c1", "key-in-memory")] == ["good"]


# -- cancellation ------------------------------------------------------------------------------
def test_forced_cancel_cancels_dependents_for_every_client() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"a": spec(order=0), "b": spec(["a"], order=1)}, ["a", "b"]))
    check(s, s.update_graph("c2", {"a": spec(order=0), "b": spec(["a"], order=1), "c": spec(["b"], order=2)}, ["c"]))
    assert s.tasks["a"].state == "processing"
    out = check(s, s.cancel_keys(cancel("c1", ["a"], "cancelled by a client", force=True), "cancel"))
    c1 = {k for msg in client_ops(out, "c1", "cancelled-keys") for k in msg["keys"]}
    c2 = {k for msg in client_ops(out, "c2", "cancelled-keys") for k in msg["keys"]}
    assert c1 == {"a", "b"}
    assert c2 == {"c"}
    for msg in client_ops(out, "c1", "cancelled-keys") + client_ops(out, "c2", "cancelled-keys"):
        assert msg["reason"] == "cancelled by a client"
    assert not computes(out), "a cancelled task must not be sent again"
    assert freed(out) == {A: {"a"}}
    assert s.tasks == {}
    assert not s.workers[A].processing
    assert not s.clients["c1"].wants_what and not s.clients["c2"].wants_what


def test_cancel_without_force_keeps_what_another_client_wants() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"a": spec(order=0), "b": spec(["a"], order=1)}, ["a", "b"]))
    check(s, s.update_graph("c2", {"a": spec(order=0), "b": spec(["a"], order=1), "c": spec(["b"], order=2)}, ["c"]))
    out = check(s, s.cancel_keys(cancel("c1", ["a"], "cancelled by a client"), "cancel"))
    # c1's futures of a and b are cancelled; c2's c, which needs them, is not.
    assert {k for msg in client_ops(out, "c1", "cancelled-keys") for k in msg["keys"]} == {"a", "b"}
    assert not client_ops(out, "c2", "cancelled-keys")
    assert not freed(out), "a is still needed by c"
    assert s.tasks["a"].state == "processing"
    assert not s.clients["c1"].wants_what
    out = finish(s, "a")
    out = finish(s, "b")
    out = finish(s, "c")
    assert [msg["key"] for msg in client_ops(out, "c2", "key-in-memory")] == ["c"]
    assert not client_ops(out, "c1", "key-in-memory")


def test_cancel_without_force_of_a_shared_key_drops_only_that_client() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    check(s, s.update_graph("c2", {"x": spec()}, ["x"]))
    out = check(s, s.cancel_keys(cancel("c1", ["x"], "cancel"), "cancel"))
    assert [list(msg["keys"]) for msg in client_ops(out, "c1", "cancelled-keys")] == [["x"]]
    assert not client_ops(out, "c2", "cancelled-keys")
    assert {cs.client_key for cs in s.tasks["x"].who_wants} == {"c2"}
    out = finish(s, "x")
    assert [msg["key"] for msg in client_ops(out, "c2", "key-in-memory")] == ["x"]
    # With force, it is cancelled for every client.
    out = check(s, s.cancel_keys(cancel("c1", ["x"], "cancel", force=True), "cancel-force"))
    assert [list(msg["keys"]) for msg in client_ops(out, "c2", "cancelled-keys")] == [["x"]]
    assert "x" not in s.tasks


def test_cancel_keeps_computed_dependents_and_unrelated_keys() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    tasks: dict[Key, m.TaskSpec] = {"a": spec(order=0), "b": spec(["a"], order=1), "other": spec(order=2)}
    check(s, s.update_graph("c1", tasks, ["a", "b", "other"]))
    finish(s, "a")
    finish(s, "b")
    out = check(s, s.cancel_keys(cancel("c1", ["a"], "cancel"), "cancel"))
    # b is already computed: it stays; other is unrelated.
    assert {k for msg in client_ops(out, "c1", "cancelled-keys") for k in msg["keys"]} == {"a"}
    assert s.tasks["b"].state == "memory"
    assert s.tasks["other"].state == "processing"
    assert "a" not in s.tasks or s.tasks["a"].state == "released"
    assert freed(out) == {A: {"a"}}


# -- scattered data -------------------------------------------------------------------------
def test_update_data_state_marks_keys_in_memory() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    out = check(s, s.update_data_state(scattered("c1", {"x": [B]}, {"x": 123}, {"x": "numpy.ndarray"}), "scatter"))
    ts = s.tasks["x"]
    assert ts.state == "memory"
    assert ts.run_spec is None
    assert ts.who_has == {s.workers[B]}
    assert ts.nbytes == 123
    assert ts in s.workers[B].has_what
    assert s.clients["c1"] in ts.who_wants
    assert [msg["key"] for msg in client_ops(out, "c1", "key-in-memory")] == ["x"]

    out = check(s, s.update_graph("c1", {"y": spec(["x"])}, ["y"]))
    addr, msg = compute_of(out, "y")
    assert addr == B
    assert msg["who_has"] == {"x": [B]}
    assert msg["nbytes"] == {"x": 123}
    out = finish(s, "y")
    assert not freed(out), "the client still wants x"
    check(s, s.client_releases_keys("c1", ["x", "y"], "release"))
    assert s.tasks == {}


# -- several clients --------------------------------------------------------------------------
def test_two_clients_wanting_the_same_key() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    out1 = check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    out2 = check(s, s.update_graph("c2", {"x": spec()}, ["x"]))
    assert computed_keys(out1) == ["x"]
    assert not computes(out2), "a key names one computation"
    out = finish(s, "x")
    assert [msg["key"] for msg in client_ops(out, "c1", "key-in-memory")] == ["x"]
    assert [msg["key"] for msg in client_ops(out, "c2", "key-in-memory")] == ["x"]

    out = check(s, s.client_releases_keys("c1", ["x"], "release-1"))
    assert not freed(out)
    assert s.tasks["x"].state == "memory"
    assert {cs.client_key for cs in s.tasks["x"].who_wants} == {"c2"}

    out = check(s, s.client_releases_keys("c2", ["x"], "release-2"))
    assert freed(out) == {A: {"x"}}
    assert s.tasks == {}


def test_second_client_asking_for_computed_key_hears_at_once() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    finish(s, "x")
    out = check(s, s.update_graph("c2", {"x": spec()}, ["x"]))
    assert not computes(out)
    [msg] = client_ops(out, "c2", "key-in-memory")
    assert list(msg["workers"]) == [A]
    out = check(s, s.client_desires_keys("c3", ["x", "nope"], "desire"))
    assert [msg["key"] for msg in client_ops(out, "c3", "key-in-memory")] == ["x"]
    assert [list(msg["keys"]) for msg in client_ops(out, "c3", "cancelled-keys")] == [["nope"]]


def test_remove_client_releases_what_it_wanted() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec(order=0), "y": spec(["x"], order=1)}, ["y"]))
    out = check(s, s.remove_client_state("c1", "client-gone"))
    assert freed(out) == {A: {"x"}}
    assert s.tasks == {}
    assert "c1" not in s.clients


# -- stale reports -------------------------------------------------------------------------
def _snapshot(s: Scheduler) -> dict[Key, tuple[str, str | None, int]]:
    return {
        k: (ts.state, ts.processing_on.address if ts.processing_on else None, ts.run_id) for k, ts in s.tasks.items()
    }


def test_task_finished_from_another_worker_changes_nothing() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    ts = s.tasks["x"]
    on = ts.processing_on
    assert on is not None
    other = B if on.address == A else A
    before = _snapshot(s)
    out = check(s, s.task_finished(other, done("x", ts.run_id, 8, "int", 0.1), "stale"))
    assert _snapshot(s) == before
    assert not out.clients
    assert not computes(out)
    assert on.address not in out.free
    assert not s.workers[other].has_what
    # Unknown workers and unknown keys are ignored too.
    out = check(s, s.task_finished("tcp://10.9.9.9:1", done("x", ts.run_id, 8, "int", 0.1), "unknown-worker"))
    assert _snapshot(s) == before and not out.workers and not out.clients
    check(s, s.task_finished(on.address, done("nope", 1, 8, "int", 0.1), "unknown-key"))
    assert _snapshot(s) == before


def test_task_finished_with_stale_run_id_changes_nothing() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    ts = s.tasks["x"]
    before = _snapshot(s)
    out = check(s, s.task_finished(A, done("x", ts.run_id - 1, 8, "int", 0.1), "stale"))
    assert _snapshot(s) == before
    assert not out.clients
    # The worker is still (legitimately) running x: it must not be told to drop it.
    assert "x" not in out.free.get(A, [])


def test_task_finished_with_stale_run_id_keeps_state() -> None:
    # The state part of the check above (the messages are the xfail's business).
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    ts = s.tasks["x"]
    before = _snapshot(s)
    out = check(s, s.task_finished(A, done("x", ts.run_id + 5, 8, "int", 0.1), "stale"))
    assert _snapshot(s) == before
    assert not out.clients
    assert not computes(out)
    assert not s.workers[A].has_what


def test_task_erred_stale_changes_nothing() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    ts = s.tasks["x"]
    on = ts.processing_on
    assert on is not None
    other = B if on.address == A else A
    before = _snapshot(s)
    for addr, run_id in [(other, ts.run_id), (on.address, ts.run_id + 1)]:
        out = check(s, s.task_erred(addr, report_erred("x", run_id, opaque_spec(), None, "stale"), "stale"))
        assert _snapshot(s) == before
        assert not out.clients and not out.workers and not out.free


def test_duplicate_finish_after_memory_adds_replica() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    check(s, s.update_graph("c1", {"x": spec()}, ["x"]))
    ts = s.tasks["x"]
    on = ts.processing_on
    assert on is not None
    other = B if on.address == A else A
    run_id = ts.run_id
    finish(s, "x")
    out = check(s, s.task_finished(other, done("x", run_id, 8, "int", 0.1), "duplicate"))
    assert ts.state == "memory"
    assert {ws.address for ws in ts.who_has} == {A, B}
    assert not out.clients


# -- graph resubmission and forgetting -----------------------------------------------------
def test_released_keys_are_forgotten_and_can_be_resubmitted() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    rs1 = opaque_spec()
    check(s, s.update_graph("c1", {"x": spec(run_spec=rs1)}, ["x"]))
    out = check(s, s.client_releases_keys("c1", ["x"], "release"))
    assert freed(out) == {A: {"x"}}
    assert s.tasks == {}
    rs2 = opaque_spec()
    out = check(s, s.update_graph("c1", {"x": spec(run_spec=rs2)}, ["x"]))
    _, msg = compute_of(out, "x")
    assert msg["run_spec"] is rs2
    assert [(a, b) for _, a, b, _, _ in s.story("x")][-4:] == [
        ("processing", "released"),
        ("released", "forgotten"),
        ("released", "waiting"),
        ("waiting", "processing"),
    ]


def test_a_group_whose_tasks_are_all_forgotten_is_dropped_and_its_totals_kept() -> None:
    # One group per graph (the key names carry a token): kept forever, a long-running
    # scheduler grew by about 1 MB a minute.
    s = new_scheduler()
    check(s, s.add_worker_state(A, 4))
    for round_ in range(3):
        name = f"inc-{round_}"
        keys = [(name, i) for i in range(2)]
        check(s, s.update_graph("c1", {k: spec(order=i) for i, k in enumerate(keys)}, keys))
        for k in keys:
            finish(s, k, nbytes=10, duration=1.0)
        assert s.task_groups[name].live == 2
        check(s, s.client_releases_keys("c1", keys, stimulus_id=f"release-{round_}"))
        assert name not in s.task_groups and name not in s.task_prefixes["inc"].groups
    tp = s.task_prefixes["inc"]
    assert tp.state_counts()["forgotten"] == 6 and tp.state_counts()["memory"] == 0
    assert tp.totals() == (6.0, 60)
    # The same key again makes a new group.
    check(s, s.update_graph("c1", {("inc-0", 0): spec()}, [("inc-0", 0)]))
    assert s.task_groups["inc-0"].live == 1 and s.task_groups["inc-0"] is tp.groups["inc-0"]
    assert tp.state_counts()["forgotten"] == 6


def test_graph_after_graph_leaves_nothing_in_dask_key_split_cache() -> None:
    # key_split keeps its last 100,000 keys: filled by a scheduler that named each new
    # graph's group with it, about 20 MB that grew for an hour of a fault soak.
    from dask.utils import key_split

    s = new_scheduler()
    check(s, s.add_worker_state(A, 4))
    key_split.cache_clear()
    for round_ in range(20):
        token = f"{round_:032x}"
        keys: list[Key] = [(f"sum-{token}", 0), (f"inc-{token}", 1), f"f-{token}", f"plain{round_}", f"a-b-{round_}x"]
        check(s, s.update_graph("c1", {k: spec(order=i) for i, k in enumerate(keys)}, keys))
        assert s.tasks[keys[0]].group.prefix.name == "sum" and s.tasks[keys[2]].group.prefix.name == "f"
        check(s, s.client_releases_keys("c1", keys, stimulus_id=f"release-{round_}"))
    assert key_split.cache_info().currsize == 0


def test_task_groups_count_states() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 4))
    keys = [("inc-abc", i) for i in range(3)]
    out = check(s, s.update_graph("c1", {k: spec(order=i) for i, k in enumerate(keys)}, keys))
    tg = s.task_groups["inc-abc"]
    assert tg.states["processing"] + tg.states["queued"] == 3
    for k in computed_keys(out):
        finish(s, k, duration=2.0)
    while any(s.tasks[k].state == "processing" for k in keys):
        finish(s, next(k for k in keys if s.tasks[k].state == "processing"), duration=2.0)
    assert tg.states["memory"] == 3
    assert len(tg) == 3
    assert s.task_prefixes[tg.prefix.name] is tg.prefix
    assert tg.prefix.duration_average == pytest.approx(2.0)
    assert tg.duration == pytest.approx(6.0)


# -- messages from workers about their data -------------------------------------------
def test_worker_data_messages_are_stimuli() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    tasks: dict[Key, m.TaskSpec] = {"a": spec(order=0), "b": spec(["a"], order=1)}
    out = check(s, s.update_graph("client-1", tasks, ["b"]))
    holder, _ = compute_of(out, "a")
    other = B if holder == A else A
    out = finish(s, "a")
    runner, msg = compute_of(out, "b")
    # Another worker fetched "a" and says so; an unknown key is freed on it.
    out = check(s, s.add_keys(other, ["a", "no-such-key"]))
    assert {w.address for w in s.tasks["a"].who_has} == {A, B}
    assert freed(out) == {other: {"no-such-key"}}
    # It drops its copy again: "a" stays in memory on the first worker.
    check(s, s.release_worker_data(other, ["a"], "release"))
    assert {w.address for w in s.tasks["a"].who_has} == {holder}
    # The runner of "b" could not find "a" where we said: the only copy is
    # gone, so "a" is recomputed and "b" waits for it.
    out = check(
        s,
        s.missing_data(
            runner, m.MissingData(op="missing-data", key="b", run_id=msg["run_id"], missing={"a": [holder]}), "missing"
        ),
    )
    assert s.tasks["a"].state == "processing" and s.tasks["b"].state == "waiting"
    assert computed_keys(out) == ["a"]
    out = finish(s, "a")
    runner, msg = compute_of(out, "b")
    # A reschedule with a stale run_id is ignored; with the current one, "b" runs again.
    assert not check(
        s, s.reschedule(runner, m.Reschedule(op="reschedule", key="b", run_id=msg["run_id"] - 1), "stale")
    ).workers
    assert state(s, "b") == "processing"
    out = check(s, s.reschedule(runner, m.Reschedule(op="reschedule", key="b", run_id=msg["run_id"]), "reschedule"))
    assert computed_keys(out) == ["b"]
    finish(s, "b")
    assert state(s, "b") == "memory"
    # Messages from a worker the scheduler does not know change nothing.
    assert not check(s, s.add_keys(C, ["a"])).free
    assert not check(s, s.release_worker_data(C, ["a"], "unknown")).recs


# -- one send per batch of stream messages ------------------------------------------------
class CallRecordingStream:
    """Stands in for a worker's or client's batched stream: records each send call."""

    def __init__(self, calls: list[tuple[str, list[Msg]]], name: str) -> None:
        self.calls = calls
        self.name = name

    def send(self, *msgs: Any) -> None:
        self.calls.append((self.name, list(msgs)))

    def send_lazy(self, *msgs: Any) -> None:
        self.send(*msgs)

    def send_now(self, *msgs: Any) -> None:
        self.send(*msgs)
        self.calls.append((f"{self.name} (now)", []))


def test_held_sends_go_out_once_per_batch_and_in_stimulus_order(saturation_one: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    check(s, s.update_graph("c1", {f"x{i}": spec(order=i) for i in range(6)}, [f"x{i}" for i in range(6)]))
    calls: list[tuple[str, list[Msg]]] = []
    s.stream_comms[A] = cast(BatchedSend, CallRecordingStream(calls, "worker"))
    s.client_comms["c1"] = cast(BatchedSend, CallRecordingStream(calls, "client"))
    running = [k for k in s.tasks if state(s, k) == "processing"]
    assert len(running) == 2  # two threads, saturation 1.0
    with s.holding_sends():
        for key in running:
            ts = s.tasks[key]
            out = s.task_finished(A, done(key, ts.run_id), f"finish-{key}", s.held_out)
            assert out is s.held_out
            s.validate_state()
        assert calls == []  # nothing leaves before the batch ends
    # One send to the worker (the next queued tasks) and one to the client (both results).
    calls[:] = [(name, msgs) for name, msgs in calls if msgs]
    assert [name for name, _ in calls] == ["worker", "client"]
    assert [msg["key"] for msg in calls[1][1]] == running
    assert len(calls[0][1]) == len(running)
    # Another stimulus's send_all inside the batch flushes what was held first.
    calls.clear()
    running = [k for k in s.tasks if state(s, k) == "processing"]
    with s.holding_sends():
        ts = s.tasks[running[0]]
        s.task_finished(A, done(running[0], ts.run_id), "finish-first", s.held_out)
        s.send_all(s.release_worker_data(A, ["no-such-key"], "other"))
        calls[:] = [(name, msgs) for name, msgs in calls if msgs]
        assert [name for name, _ in calls] == ["worker", "client"]
    assert calls[1][1][0]["key"] == running[0]


def test_root_tasks_past_every_workers_room_queue_without_rescanning_workers(saturation_one: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    check(s, s.add_worker_state(B, 1))
    scans = 0
    scan = s._worker_with_room

    def counting(duration: float) -> Any:
        nonlocal scans
        scans += 1
        return scan(duration)

    s._worker_with_room = counting  # type: ignore[method-assign]  # count the scans of the workers
    n = 500
    check(s, s.update_graph("c1", {f"x{i}": spec(order=i) for i in range(n)}, [f"x{i}" for i in range(n)]))
    queued = sum(state(s, f"x{i}") == "queued" for i in range(n))
    assert queued > n // 2
    # One scan per task placed, plus the one that found no room; not one per queued task.
    assert scans == n - queued + 1
    # A task leaving processing makes room again: the next queued task goes there.
    ts = next(s.tasks[k] for k in s.tasks if state(s, k) == "processing")
    assert ts.processing_on is not None
    out = check(s, s.task_finished(ts.processing_on.address, done(ts.key, ts.run_id), "done"))
    assert len(computes(out)) == 1


def test_compute_tasks_to_a_worker_without_backlog_are_not_batched(no_queuing: None) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    calls: list[tuple[str, list[Msg]]] = []
    s.stream_comms[A] = cast(BatchedSend, CallRecordingStream(calls, "worker"))
    # One task for one thread: the worker waits for it, so it goes at once.
    s.send_all(check(s, s.update_graph("c1", {"a": spec()}, ["a"])))
    assert [name for name, _ in calls] == ["worker", "worker (now)"]
    # A backlog of tasks: they may wait for the stream's next batch.
    calls.clear()
    s.send_all(check(s, s.update_graph("c1", {f"x{i}": spec(order=i) for i in range(5)}, [f"x{i}" for i in range(5)])))
    assert [name for name, _ in calls] == ["worker"]


# -- large graphs, added in slices -----------------------------------------------------
def test_graph_in_slices_ends_as_one_update_graph(no_queuing: None) -> None:
    keys: list[Key] = [f"noop-abc-{i}" for i in range(25)]
    graph = {k: spec(order=i) for i, k in enumerate(keys)}
    whole = new_scheduler()
    whole.update_graph("c1", graph, keys)
    s = new_scheduler()
    outs = []
    made = []
    for out in s.update_graph_slices("c1", graph, keys, size=10):
        outs.append(check(s, out))
        made.append(len(s.tasks))
    # The graph is checked and cut in a step of its own, which makes no task; then three slices.
    assert made == [0, 10, 20, 25]
    # Each slice hands out its own tasks; together they are the whole graph, with the same priorities.
    assert [len(o.clients.get("c1", [])) for o in outs] == [0, 0, 0, 0]
    assert set(s.tasks) == set(whole.tasks)
    assert [s.tasks[k].priority[1:] for k in keys] == [whole.tasks[k].priority[1:] for k in keys]
    assert len({s.tasks[k].priority for k in keys}) == 25
    assert len({s.tasks[k].priority[1] for k in keys}) == 1
    check(s, s.add_worker_state(A, 1))
    assert {s.tasks[k].state for k in keys} == {"processing"}


def test_graph_in_slices_holds_tasks_nobody_wants_until_the_last_slice(no_queuing: None) -> None:
    # A chain of 25 tasks, only the last one wanted: the first slices' tasks
    # must survive until their dependents arrive.
    keys: list[Key] = [f"inc-{i}" for i in range(25)]
    graph = {k: spec(deps=keys[i - 1 : i], order=i) for i, k in enumerate(keys)}
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    steps = s.update_graph_slices("c1", graph, [keys[-1]], size=10)
    check(s, next(steps))  # checked and cut
    check(s, next(steps))  # the first slice
    assert s.tasks["inc-0"].state == "processing"
    check(s, s.task_finished(A, done("inc-0", s.tasks["inc-0"].run_id), "finish"))
    # Nobody wants inc-0 yet but inc-1 needs it: it stays in memory.
    assert state(s, "inc-0") == "memory"
    assert s.tasks["inc-9"].who_wants
    for out in steps:
        check(s, out)
    assert set(s.tasks) == set(keys)
    assert s.clients["c1"].wants_what == {s.tasks[keys[-1]]}
    assert {k for k in keys if s.tasks[k].who_wants} == {keys[-1]}
    assert len(s.clients) == 1


def test_the_tasks_held_for_a_graph_in_parts_are_let_go_of_a_slice_at_a_time() -> None:
    # A wide tree: 60 leaves nobody wants, summed by one wanted root; sent as two parts.
    leaves: list[Key] = [f"leaf-{i}" for i in range(60)]
    graph: dict[Key, m.TaskSpec] = {k: spec(order=i) for i, k in enumerate(leaves)}
    root = spec(deps=leaves, order=60)
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    for out in s.update_graph_slices("c1", graph, [], graph="g", final=False, size=10):
        check(s, out)
    holder = s.clients["c1/graph-g"]
    assert len(holder.wants_what) == 60
    sizes = []
    for out in s.update_graph_slices("c1", {"root": root}, ["root"], graph="g", final=True, size=10):
        check(s, out)
        held = s.clients.get("c1/graph-g")
        sizes.append(len(held.wants_what) if held is not None else None)
    # The final part, then six slices of ten, then the stand-in client goes.
    assert sizes == [60, 50, 40, 30, 20, 10, 0, None]
    assert all(s.tasks[k].state in ("processing", "queued", "memory") for k in leaves)
    assert s.tasks["root"].state == "waiting" and s.tasks["root"].who_wants == {s.clients["c1"]}


def test_graph_out_of_dependency_order_is_added_in_one_go() -> None:
    keys: list[Key] = [f"x-{i}" for i in range(25)]
    # x-0 depends on x-24, which comes last.
    graph = {k: spec(deps=[keys[-1]] if i == 0 else [], order=i) for i, k in enumerate(keys)}
    s = new_scheduler()
    outs = [check(s, out) for out in s.update_graph_slices("c1", graph, keys, size=10)]
    assert len(outs) == 1
    assert s.tasks["x-0"].dependencies == {s.tasks["x-24"]}


def test_graph_in_slices_with_a_cycle_is_refused_whole() -> None:
    keys: list[Key] = [f"x-{i}" for i in range(25)]
    graph = {k: spec(deps=[keys[i + 1]] if i == 20 else [], order=i) for i, k in enumerate(keys)}
    graph[keys[21]] = spec(deps=[keys[20]], order=21)
    s = new_scheduler()
    outs = [check(s, out) for out in s.update_graph_slices("c1", graph, keys, size=10)]
    assert len(outs) == 1
    assert not s.tasks
    assert len(client_ops(outs[0], "c1", "task-erred")) == 25


def test_who_wants_of_one_client_is_shared_and_released() -> None:
    s = new_scheduler()
    keys = ["a-1", "a-2"]
    check(s, s.update_graph("c1", {k: spec() for k in keys}, keys))
    cs = s.clients["c1"]
    assert s.tasks["a-1"].who_wants is s.tasks["a-2"].who_wants
    check(s, s.client_desires_keys("c2", ["a-1"], "c2-wants"))
    assert {c.client_key for c in s.tasks["a-1"].who_wants} == {"c1", "c2"}
    assert s.tasks["a-2"].who_wants == {cs}
    check(s, s.client_releases_keys("c1", keys, "release"))
    assert {c.client_key for c in s.tasks["a-1"].who_wants} == {"c2"}
    assert "a-2" not in s.tasks
    assert cs.alone == {cs}


def test_who_has_of_one_worker_is_shared_and_replicas_come_and_go() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    check(s, s.add_worker_state(B, 2))
    keys = ["a-1", "a-2"]
    check(s, s.update_graph("c1", {k: spec() for k in keys}, keys))
    for k in keys:
        ts = s.tasks[k]
        assert ts.processing_on is not None
        check(s, s.task_finished(ts.processing_on.address, done(k, ts.run_id), f"finish-{k}"))
    holder = next(iter(s.tasks["a-1"].who_has))
    other = B if holder.address == A else A
    assert s.tasks["a-1"].who_has is holder.alone
    # A replica elsewhere, then the first copy goes: one holder again.
    check(s, s.add_keys(other, ["a-1"]))
    assert {ws.address for ws in s.tasks["a-1"].who_has} == {A, B}
    check(s, s.release_worker_data(holder.address, ["a-1"], "drop-first"))
    assert {ws.address for ws in s.tasks["a-1"].who_has} == {other}
    assert s.tasks["a-1"] not in holder.has_what
    # The only holder of the other key leaves: it is recomputed.
    a2 = s.tasks["a-2"]
    only = next(iter(a2.who_has))
    check(s, s.remove_worker_state(only.address, stimulus_id="gone"))
    assert only not in a2.who_has
    assert state(s, "a-2") in ("processing", "memory")


@pytest.mark.parametrize(
    "key",
    ["x", "x-1", "x-1-2-3", "hello-world-1", "ae05086432ca935f6eba409a8ecd4896", "x-abcdefab", "x-abcdefab-7",
     "_(x)-3", "-5", "-", "a--1", "<module.sub.myclass object at 0xdaf372-1", "('x-2', 1)", "inc-" + "9" * 32,
     "ae05086432ca935f6eba409a8ecd4896-1", "x-y-12ab", "abcdefab-x", "a-abcdefab-b"],
)  # fmt: skip
def test_task_prefix_names_are_those_of_key_split(key: str) -> None:
    from dask.utils import key_split

    s = new_scheduler()
    s.update_graph("c1", {key: spec()}, [key])
    assert s.tasks[key].group.name == key_split(key)
    assert s.tasks[key].prefix.name == key_split(key)


def test_the_state_machine_runs_a_graph_without_a_server() -> None:
    from distributed.core import Server
    from distributed.tests.machines import state_machine

    s = state_machine()
    assert not isinstance(s, Server)
    check(s, s.add_worker_state(A, 1))
    out = check(s, s.update_graph("c", {"x": spec(), "y": spec(["x"])}, ["y"]))
    (cx,) = computes(out, A)
    assert cx["key"] == "x"
    out = check(s, s.task_finished(A, done("x", cx["run_id"]), "s1"))
    (cy,) = computes(out, A)
    assert cy["key"] == "y"
    check(s, s.task_finished(A, done("y", cy["run_id"]), "s2"))
    assert s.tasks["y"].state == "memory" and s.tasks["x"].state == "released"
