"""Work stealing: tasks move from saturated workers to idle ones, never running twice nor getting lost.

Most tests drive the scheduler's state and the workers' state machines
without sockets, delivering the messages by hand in the order a race would;
the others run a real cluster on TCP.
"""

from __future__ import annotations

import time
from typing import Any

import dask
import pytest

from distributed.batched import BatchedSend
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.scheduler.records import TaskState, WorkerState
from distributed.scheduler.stealing import MIN_STEAL_DURATION, WorkStealing
from distributed.tests.machines import scattered
from distributed.tests.machines import task_spec as spec
from distributed.utils_test import gen_cluster, slowinc
from distributed.worker.state_machine import (
    ComputeTaskEvent,
    Execute,
    ExecuteSuccess,
    FreeKeysEvent,
    GatherDep,
    GatherDepSuccess,
    Instruction,
    SendMessage,
    StealRequestEvent,
    UpdateDataEvent,
    WorkerStateMachine,
)

A = "tcp://10.0.0.1:1234"
B = "tcp://10.0.0.2:1234"
C = "tcp://10.0.0.3:1234"


class Recorded(BatchedSend):
    """A worker's stream that keeps what the scheduler sends instead of writing it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[m.SchedulerToWorker] = []

    def send(self, *msgs: Any) -> None:
        self.sent.extend(msgs)

    def send_lazy(self, *msgs: Any) -> None:
        self.sent.extend(msgs)

    def send_now(self, *msgs: Any) -> None:
        self.sent.extend(msgs)

    def take(self) -> list[m.SchedulerToWorker]:
        msgs, self.sent = self.sent, []
        return msgs


def stealing(s: Scheduler) -> WorkStealing:
    ext = s.extensions["stealing"]
    assert isinstance(ext, WorkStealing)
    return ext


def scheduler_with(*workers: tuple[str, int, dict[str, float] | None]) -> tuple[Scheduler, dict[str, Recorded]]:
    s = Scheduler(validate=True)
    streams: dict[str, Recorded] = {}
    for addr, nthreads, resources in workers:
        s.add_worker_state(addr, nthreads, resources=resources)
        streams[addr] = s.stream_comms[addr] = Recorded()
    return s, streams


def to_events(msgs: list[m.SchedulerToWorker]) -> list[Any]:
    """What the worker's shell makes of the scheduler's messages."""
    events: list[Any] = []
    for msg in msgs:
        if msg["op"] == "compute-task":
            events.append(
                ComputeTaskEvent(
                    stimulus_id="compute",
                    key=msg["key"],
                    run_id=msg["run_id"],
                    run_spec=msg["run_spec"],
                    priority=tuple(msg["priority"]),
                    who_has=msg["who_has"],
                    nbytes=msg["nbytes"],
                    duration=msg["duration"],
                )
            )
        elif msg["op"] == "free-keys":
            events.append(FreeKeysEvent(stimulus_id="free", keys=tuple(msg["keys"])))
        elif msg["op"] == "steal-request":
            events.append(StealRequestEvent(stimulus_id=msg["stimulus_id"], key=msg["key"]))
        else:
            raise AssertionError(f"unexpected message {msg}")
    return events


class Cluster:
    """A scheduler and worker state machines, with every Execute counted."""

    def __init__(self, s: Scheduler, streams: dict[str, Recorded]) -> None:
        self.s = s
        self.streams = streams
        self.workers = {addr: WorkerStateMachine(addr, s.workers[addr].nthreads, validate=True) for addr in streams}
        self.executed: list[tuple[str, Key]] = []
        #: Executions started and not reported yet, per worker.
        self.running: dict[str, list[Execute]] = {addr: [] for addr in streams}
        self.to_scheduler: dict[str, list[m.WorkerStreamMessage]] = {addr: [] for addr in streams}

    def handle(self, addr: str, instructions: list[Instruction]) -> None:
        for inst in instructions:
            if isinstance(inst, Execute):
                self.executed.append((addr, inst.key))
                self.running[addr].append(inst)
            elif isinstance(inst, SendMessage):
                self.to_scheduler[addr].append(inst.msg)
            elif isinstance(inst, GatherDep):
                holder = self.workers[inst.worker]
                data = {k: holder.data[k] for k in inst.keys}
                ev = GatherDepSuccess(
                    stimulus_id="gathered", worker=inst.worker, keys=inst.keys, data=data, nbytes=dict.fromkeys(data, 8)
                )
                self.handle(addr, self.workers[addr].handle_stimulus(ev))

    def deliver_to_worker(self, addr: str) -> None:
        """The worker handles what the scheduler sent it so far."""
        events = to_events(self.streams[addr].take())
        if events:
            self.handle(addr, self.workers[addr].handle_stimulus(*events))

    def finish(self, addr: str, key: Key) -> None:
        """An execution on ``addr`` ends (the worker then reports it)."""
        [inst] = [i for i in self.running[addr] if i.key == key]
        self.running[addr].remove(inst)
        ev = ExecuteSuccess(
            stimulus_id="ran", key=key, run_id=inst.run_id, value=1, nbytes=8, type="int", start=1.0, stop=1.2
        )
        self.handle(addr, self.workers[addr].handle_stimulus(ev))

    def deliver_to_scheduler(self, addr: str) -> None:
        """The scheduler handles what the worker sent it so far, in order."""
        msgs, self.to_scheduler[addr] = self.to_scheduler[addr], []
        for msg in msgs:
            if msg["op"] == "task-finished":
                self.s.send_all(self.s.task_finished(addr, msg, "finished"))
            elif msg["op"] == "steal-response":
                stealing(self.s).steal_response(addr, msg)
            elif msg["op"] in ("add-keys", "release-worker-data"):
                pass
            else:
                raise AssertionError(f"unexpected message {msg}")

    def run_to_end(self) -> None:
        """Deliver everything and finish every execution until nothing is left."""
        while True:
            for addr in self.workers:
                self.deliver_to_worker(addr)
            for addr in self.workers:
                self.deliver_to_scheduler(addr)
            pending = [(addr, inst.key) for addr, insts in self.running.items() for inst in insts]
            if not pending and not any(st.sent for st in self.streams.values()):
                if not any(self.to_scheduler.values()):
                    return
                continue
            for addr, key in pending:
                self.finish(addr, key)

    def validate(self) -> None:
        self.s.validate_state()
        for w in self.workers.values():
            w.validate_state()


def piled_on_a(n: int) -> Cluster:
    """``n`` tasks that all went to A, where their input is; B idle. A runs the first one."""
    s, streams = scheduler_with((A, 1, None), (B, 1, None))
    s.send_all(s.update_data_state(scattered("c1", {"x": [A]}, {"x": 8}, {"x": "int"}), "scatter"))
    tasks: dict[Key, m.TaskSpec] = {f"y-{i}": spec(["x"], i) for i in range(n)}
    s.send_all(s.update_graph("c1", tasks, list(tasks), stimulus_id="graph"))
    assert all(ts.processing_on is s.workers[A] for ts in s.tasks.values() if ts.key != "x")
    cl = Cluster(s, streams)
    cl.handle(A, cl.workers[A].handle_stimulus(UpdateDataEvent(stimulus_id="scatter", data={"x": 1}, nbytes={"x": 8})))
    cl.deliver_to_worker(A)
    assert len(cl.running[A]) == 1
    return cl


def test_extension_is_there_by_default() -> None:
    s = Scheduler()
    assert isinstance(s.extensions["stealing"], WorkStealing)
    assert stealing(s).interval == pytest.approx(0.1)


def test_config_off_leaves_it_out() -> None:
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        s = Scheduler()
    assert "stealing" not in s.extensions
    assert "steal-response" not in s.stream_handlers


def test_bad_interval_is_refused() -> None:
    with dask.config.set({"distributed.scheduler.work-stealing-interval": "0ms"}):
        with pytest.raises(ValueError, match="work-stealing-interval"):
            Scheduler()


def test_idle_worker_steals_a_task_the_victim_had_not_started() -> None:
    cl = piled_on_a(4)
    s, ext = cl.s, stealing(cl.s)
    ext.balance()
    assert len(ext.in_flight) == 1  # one more would leave the thief finishing after the victim
    [(ts, steal)] = ext.in_flight.items()
    assert (steal.victim.address, steal.thief.address) == (A, B)
    old_run = ts.run_id
    cl.deliver_to_worker(A)
    assert ts.key not in cl.workers[A].tasks  # given up: it had not started
    cl.deliver_to_scheduler(A)
    assert ts.processing_on is s.workers[B] and ts.run_id != old_run
    assert not ext.in_flight and ext.count == 1
    assert [(start, finish) for _, start, finish, _, _ in s.story(ts.key)][-3:] == [
        ("processing", "released"),
        ("released", "waiting"),
        ("waiting", "processing"),
    ]
    cl.run_to_end()
    assert all(s.tasks[f"y-{i}"].state == "memory" for i in range(4))
    assert s.tasks[ts.key].who_has == {s.workers[B]}
    assert sorted(k for _, k in cl.executed) == [f"y-{i}" for i in range(4)]  # each ran once
    assert not ext.in_flight_occupancy
    cl.validate()


def test_task_already_running_stays_with_the_victim() -> None:
    cl = piled_on_a(3)
    s, ext = cl.s, stealing(cl.s)
    [running] = cl.running[A]
    ts = s.tasks[running.key]
    ext.move_task_request(ts, s.workers[A], s.workers[B])
    cl.deliver_to_worker(A)
    [reply] = cl.to_scheduler[A]
    assert reply["op"] == "steal-response" and reply["state"] == "executing"
    cl.deliver_to_scheduler(A)
    assert ts.processing_on is s.workers[A] and not ext.in_flight and ext.count == 0
    assert not cl.streams[B].sent
    cl.run_to_end()
    assert [w for w, k in cl.executed if k == ts.key] == [A]
    assert all(s.tasks[f"y-{i}"].state == "memory" for i in range(3))
    cl.validate()


def test_steal_response_after_task_finished() -> None:
    """The victim finishes the task before the request reaches it: it reports both, in that order."""
    cl = piled_on_a(2)
    s, ext = cl.s, stealing(cl.s)
    [running] = cl.running[A]
    ts = s.tasks[running.key]
    ext.move_task_request(ts, s.workers[A], s.workers[B])
    sid = ext.in_flight[ts].stimulus_id
    cl.finish(A, ts.key)
    cl.deliver_to_worker(A)
    ops = [(msg["op"], msg.get("state")) for msg in cl.to_scheduler[A]]
    assert ops == [("task-finished", None), ("steal-response", "memory")]
    cl.deliver_to_scheduler(A)
    assert ts.state == "memory" and ts.who_has == {s.workers[A]} and not ext.in_flight
    # Even a reply claiming the task was given up, arriving after it finished, changes nothing.
    ext.steal_response(A, m.StealResponse(op="steal-response", key=ts.key, state="ready", stimulus_id=sid))
    assert ts.state == "memory" and not cl.streams[B].sent
    cl.run_to_end()
    assert sorted(k for _, k in cl.executed) == ["y-0", "y-1"]
    cl.validate()


def test_victim_finishes_while_the_confirmation_travels() -> None:
    """A reply naming a run that is over (finished on the victim meanwhile) does not run it again."""
    cl = piled_on_a(2)
    s, ext = cl.s, stealing(cl.s)
    [running] = cl.running[A]
    ts = s.tasks[running.key]
    ext.move_task_request(ts, s.workers[A], s.workers[B])
    sid = ext.in_flight[ts].stimulus_id
    cl.streams[A].take()  # the request is still on its way
    cl.finish(A, ts.key)
    cl.deliver_to_scheduler(A)
    assert ts.state == "memory"
    ext.steal_response(A, m.StealResponse(op="steal-response", key=ts.key, state="ready", stimulus_id=sid))
    assert ts.state == "memory" and ts.who_has == {s.workers[A]} and not cl.streams[B].sent
    assert not ext.in_flight and not ext.in_flight_occupancy
    cl.validate()


def test_victim_leaves_while_the_steal_travels() -> None:
    s, streams = scheduler_with((A, 1, None), (B, 1, None))
    loose: dict[str, Any] = {"workers": [A], "allow_other_workers": True}
    tasks: dict[Key, m.TaskSpec] = {f"z-{i}": spec(order=i, annotations=loose) for i in range(3)}
    s.send_all(s.update_graph("c1", tasks, list(tasks), stimulus_id="graph"))
    cl = Cluster(s, streams)
    cl.deliver_to_worker(A)
    ext = stealing(s)
    ext.balance()
    [ts] = ext.in_flight
    cl.deliver_to_worker(A)  # A gives it up and answers ...
    s.send_all(s.remove_worker_state(A, stimulus_id="gone"))  # ... but leaves before the answer is read
    cl.deliver_to_scheduler(A)
    assert not ext.in_flight
    sent_b = [msg["key"] for msg in streams[B].sent if msg["op"] == "compute-task"]
    assert sorted(sent_b) == sorted(tasks)  # every task placed on B once, the stolen one too
    del cl.workers[A], cl.running[A], cl.to_scheduler[A], cl.streams[A]
    cl.run_to_end()
    assert all(s.tasks[k].state == "memory" for k in tasks)
    assert ts.who_has == {s.workers[B]}
    cl.validate()


def test_thief_leaves_while_the_steal_travels() -> None:
    cl = piled_on_a(4)
    s, ext = cl.s, stealing(cl.s)
    s.add_worker_state(C, 1)
    cl.streams[C] = s.stream_comms[C] = Recorded()
    cl.workers[C] = WorkerStateMachine(C, 1, validate=True)
    cl.running[C], cl.to_scheduler[C] = [], []
    ext.balance()
    stolen = {ts: st.thief.address for ts, st in ext.in_flight.items()}
    assert stolen
    cl.deliver_to_worker(A)
    for addr in set(stolen.values()):
        s.send_all(s.remove_worker_state(addr, stimulus_id="thief-gone"))
        del cl.workers[addr], cl.running[addr], cl.to_scheduler[addr], cl.streams[addr]
    cl.deliver_to_scheduler(A)
    for ts in stolen:
        assert ts.state == "processing" and ts.processing_on is not None
        assert ts.processing_on.address in s.workers
    cl.run_to_end()
    assert all(s.tasks[f"y-{i}"].state == "memory" for i in range(4))
    assert sorted(k for _, k in cl.executed) == [f"y-{i}" for i in range(4)]
    cl.validate()


def test_victim_gives_up_a_task_still_fetching_its_input() -> None:
    w = WorkerStateMachine(A, 1, validate=True)
    ev = ComputeTaskEvent(
        stimulus_id="compute", key="y", run_id=1, run_spec=None, priority=(0,), who_has={"x": [B]}, nbytes={"x": 8}
    )
    [gather] = [i for i in w.handle_stimulus(ev) if isinstance(i, GatherDep)]
    assert [w.tasks[k].state for k in ("y", "x")] == ["waiting", "flight"]
    [reply] = [
        i.msg
        for i in w.handle_stimulus(StealRequestEvent(stimulus_id="steal-1", key="y"))
        if isinstance(i, SendMessage)
    ]
    assert reply == {"op": "steal-response", "key": "y", "state": "waiting", "stimulus_id": "steal-1"}
    assert "y" not in w.tasks and w.tasks["x"].state == "cancelled"
    # The input arrives after all: nobody here needs it any more.
    w.handle_stimulus(
        GatherDepSuccess(stimulus_id="gathered", worker=B, keys=gather.keys, data={"x": 1}, nbytes={"x": 8})
    )
    assert not w.tasks and not w.data
    # A request for a key the worker does not know is answered too: it holds nothing to give up.
    [reply] = [
        i.msg
        for i in w.handle_stimulus(StealRequestEvent(stimulus_id="steal-2", key="y"))
        if isinstance(i, SendMessage)
    ]
    assert reply == {"op": "steal-response", "key": "y", "state": None, "stimulus_id": "steal-2"}
    w.validate_state()


def test_restrictions_are_honoured() -> None:
    # Everything lands on A first; the thieves join afterwards.
    s, streams = scheduler_with((A, 1, {"R": 100.0}))
    hard: dict[Key, m.TaskSpec] = {f"hard-{i}": spec(order=i, annotations={"workers": [A]}) for i in range(3)}
    res: dict[Key, m.TaskSpec] = {f"res-{i}": spec(order=10 + i, annotations={"resources": {"R": 1}}) for i in range(4)}
    loose: dict[Key, m.TaskSpec] = {
        f"loose-{i}": spec(order=20 + i, annotations={"workers": [A], "allow_other_workers": True}) for i in range(3)
    }
    tasks: dict[Key, m.TaskSpec] = {**hard, **res, **loose}
    s.send_all(s.update_graph("c1", tasks, list(tasks), stimulus_id="graph"))
    for addr, resources in ((B, None), (C, {"R": 1.0})):
        s.add_worker_state(addr, 1, resources=resources)
        streams[addr] = s.stream_comms[addr] = Recorded()
    assert all(ts.processing_on is s.workers[A] for ts in s.tasks.values())
    ext = stealing(s)
    ext.balance()
    proposed = {ts.key: st.thief.address for ts, st in ext.in_flight.items()}
    assert proposed
    assert not any(str(k).startswith("hard") for k in proposed)
    assert all(thief == C for k, thief in proposed.items() if str(k).startswith("res"))
    # Every victim answer says "not started": each moves if its thief may still take it.
    for ts, st in list(ext.in_flight.items()):
        ext.steal_response(
            A, m.StealResponse(op="steal-response", key=ts.key, state="ready", stimulus_id=st.stimulus_id)
        )
    for key, ts in s.tasks.items():
        ws = ts.processing_on
        assert ws is not None
        if str(key).startswith("hard"):
            assert ws.address == A
        if str(key).startswith("res"):
            assert ws.address in (A, C)
    assert sum(1 for ts in s.workers[C].processing if ts.resource_restrictions) <= 1
    assert s.workers[C].used_resources["R"] <= 1
    assert any(ts.processing_on is not s.workers[A] for k, ts in s.tasks.items() if str(k).startswith("loose")) or any(
        s.tasks[k].processing_on is not s.workers[A] for k in res
    )
    s.validate_state()


def test_nothing_moves_without_an_idle_worker() -> None:
    cl = piled_on_a(3)
    s, ext = cl.s, stealing(cl.s)
    # B busy with one task of its own (as many as its threads): not a thief.
    s.send_all(s.update_graph("c1", {"w": spec(annotations={"workers": [B]})}, ["w"], stimulus_id="graph-2"))
    ext.balance()
    assert not ext.in_flight


def test_actor_tasks_never_move() -> None:
    cl = piled_on_a(4)
    s, ext = cl.s, stealing(cl.s)
    for i in range(4):
        s.tasks[f"y-{i}"].actor = True  # placed by fewest actors: stealing must not undo it
    ext.balance()
    assert not ext.in_flight


def test_tasks_too_short_for_their_data_never_move() -> None:
    s, _ = scheduler_with((A, 1, None), (B, 1, None))
    s.send_all(s.update_data_state(scattered("c1", {"big": [A]}, {"big": 10**10}, {"big": "bytes"}), "scatter"))
    tasks: dict[Key, m.TaskSpec] = {f"y-{i}": spec(["big"], i) for i in range(4)}
    s.send_all(s.update_graph("c1", tasks, list(tasks), stimulus_id="graph"))
    ext = stealing(s)
    assert ext.steal_time_ratio(s.tasks["y-0"]) == (None, None)  # 100 s of transfer for 0.5 s of work
    ext.balance()
    assert not ext.in_flight
    s.tasks["y-0"].prefix.add_duration(50.0)  # now the work takes half as long as the transfer
    multiplier, level = ext.steal_time_ratio(s.tasks["y-0"])
    assert multiplier == pytest.approx(3.002) and level == 2


def test_victims_whose_tasks_are_all_too_short_to_move_are_not_looked_at(monkeypatch: pytest.MonkeyPatch) -> None:
    # Run times known before they are placed: short ones, then ones just long enough to move.
    durations = {"short": f"{MIN_STEAL_DURATION / 10}s", "long": f"{MIN_STEAL_DURATION}s"}
    with dask.config.set({"distributed.scheduler.default-task-durations": durations}):
        s, _ = scheduler_with((A, 1, None), (B, 1, None))
    assert s.default_durations["long"] == pytest.approx(MIN_STEAL_DURATION)
    s.send_all(s.update_data_state(scattered("c1", {"x": [A]}, {"x": 8}, {"x": "int"}), "scatter"))
    ext = stealing(s)
    looked: list[str] = []

    def candidates(victim: WorkerState) -> list[TaskState]:
        looked.append(victim.address)
        return []

    monkeypatch.setattr(ext, "_candidates", candidates)
    short: dict[Key, m.TaskSpec] = {f"short-{i}": spec(["x"], i) for i in range(8)}
    s.send_all(s.update_graph("c1", short, list(short), stimulus_id="graph"))
    assert len(s.workers[A].processing) == 8  # saturated: 8 tasks for one thread
    ext.balance()
    assert looked == []
    long: dict[Key, m.TaskSpec] = {f"long-{i}": spec(["x"], i) for i in range(2)}
    s.send_all(s.update_graph("c1", long, list(long), stimulus_id="graph-2"))
    ext.balance()
    assert looked == [A]


# -- a real cluster ----------------------------------------------------------------------
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_idle_worker_takes_work_from_a_saturated_one(c: Any, s: Scheduler, a: Any, b: Any) -> None:
    x = await c.scatter(1, workers=[a.address])
    n, delay = 12, 0.25
    start = time.monotonic()
    futs = [c.submit(slowinc, x, delay=delay, pure=False) for _ in range(n)]
    assert await c.gather(futs) == [2] * n
    elapsed = time.monotonic() - start
    ran_a, ran_b = a.state.executed_count, b.state.executed_count
    assert ran_a > 0 and ran_b > 0 and ran_a + ran_b == n  # both ran tasks, none ran twice
    assert stealing(s).count >= ran_b  # every task B ran was moved there (some maybe back and forth)
    assert elapsed < 0.8 * n * delay  # serially: 3 s


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)],
    config={"distributed.scheduler.work-stealing": False},
)
async def test_no_stealing_when_turned_off(c: Any, s: Scheduler, a: Any, b: Any) -> None:
    assert "stealing" not in s.extensions
    x = await c.scatter(1, workers=[a.address])
    futs = [c.submit(slowinc, x, delay=0.05, pure=False) for _ in range(6)]
    await c.gather(futs)
    assert a.state.executed_count == 6 and b.state.executed_count == 0


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_restricted_tasks_stay_on_their_worker(c: Any, s: Scheduler, a: Any, b: Any) -> None:
    futs = [c.submit(slowinc, i, delay=0.05, workers=[a.address]) for i in range(8)]
    await c.gather(futs)
    assert a.state.executed_count == 8 and b.state.executed_count == 0
    assert not any(e[4] == "request" for e in stealing(s).log)


def slow_on(slow_address: str, x: int, delay: float) -> int:
    """Sleep ``delay``, three times longer on the worker at ``slow_address``."""
    from distributed import get_worker

    time.sleep(delay * 3 if get_worker().address == slow_address else delay)
    return x + 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_fast_worker_takes_most_work_from_a_slow_one(c: Any, s: Scheduler, a: Any, b: Any) -> None:
    # every task depends on data held only by the slow worker `a`, so without stealing all run there
    x = await c.scatter(1, workers=[a.address])
    n, delay = 16, 0.1
    start = time.monotonic()
    futs = [c.submit(slow_on, a.address, x, delay, pure=False) for _ in range(n)]
    assert await c.gather(futs) == [2] * n
    elapsed = time.monotonic() - start
    ran_slow, ran_fast = a.state.executed_count, b.state.executed_count
    assert ran_slow + ran_fast == n
    assert ran_fast > ran_slow
    assert elapsed < 0.75 * n * delay * 3  # all on the slow worker: 4.8 s
