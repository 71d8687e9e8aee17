"""Placing root tasks among many workers without looking at every worker for every task.

The scheduler keeps its workers by load (:class:`WorkerLoads`); these tests
drive its state machine without sockets (as ``test_scheduler_state``), check
where tasks go, and count how many workers are weighed per task.
"""

from __future__ import annotations

from collections import Counter

import pytest

from distributed.core import Status
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.scheduler.loads import WorkerLoads, load_of
from distributed.scheduler.records import WorkerState
from distributed.scheduler.state import SCAN_WORKERS
from distributed.tests.machines import check, computed_keys, finish
from distributed.tests.machines import task_spec as spec
from distributed.tests.machines import validating_scheduler as new_scheduler


def address(i: int) -> str:
    return f"tcp://10.0.{i // 250}.{i % 250 + 1}:1234"


def with_workers(n: int, nthreads: int = 1) -> Scheduler:
    s = new_scheduler()
    for i in range(n):
        check(s, s.add_worker_state(address(i), nthreads))
    return s


def roots(n: int, prefix: str = "t") -> dict[Key, m.TaskSpec]:
    return {f"{prefix}-{i}": spec(order=i) for i in range(n)}


def placed(s: Scheduler) -> Counter[str]:
    """Tasks processing per worker address."""
    return Counter({ws.address: len(ws.processing) for ws in s.workers.values() if ws.processing})


class CountingSlots:
    """Counts the scheduler's weighing of a worker's room for root tasks."""

    def __init__(self, s: Scheduler, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        slots = s._slots

        def counted(ws: WorkerState, duration: float) -> int:
            self.calls += 1
            return slots(ws, duration)

        monkeypatch.setattr(s, "_slots", counted)


# -- the index alone ------------------------------------------------------------------------
def test_least_loaded_per_thread_count_follows_loads_and_passes_over_workers_that_do_not_run() -> None:
    loads = WorkerLoads()
    a, b, c = (WorkerState(address(i), 1) for i in range(3))
    d = WorkerState(address(3), 4)
    for ws in (a, b, c, d):
        ws.status = Status.running
        loads.add(ws)
    assert list(loads.least_loaded()) == [a, d]  # one per thread count, the first come among equals
    a.processing[object()] = 0.1  # type: ignore[index]  # any key: only the count matters
    loads.update(a)
    assert list(loads.least_loaded()) == [b, d]
    b.status = Status.paused
    assert list(loads.least_loaded()) == [c, d]
    c.status = Status.closing_gracefully
    assert list(loads.least_loaded()) == [a, d]  # the only running one, though more loaded
    a.status = Status.paused
    assert list(loads.least_loaded()) == [d]
    loads.discard(d)
    assert list(loads.least_loaded()) == []
    loads.validate([a, b, c])
    with pytest.raises(AssertionError, match="worker load"):
        a.processing.clear()  # changed without telling the index
        loads.validate([a, b, c])


def test_a_seceded_task_frees_its_slot_in_the_index() -> None:
    loads = WorkerLoads()
    a, b = WorkerState(address(0), 1), WorkerState(address(1), 1)
    for ws in (a, b):
        ws.status = Status.running
        loads.add(ws)
    task = object()
    a.processing[task] = 0.1  # type: ignore[index]
    loads.update(a)
    assert list(loads.least_loaded()) == [b]
    b.processing[object()] = 0.1  # type: ignore[index]
    loads.update(b)
    a.long_running.add(task)  # type: ignore[arg-type]
    loads.update(a)
    assert load_of(a) == 0 and list(loads.least_loaded()) == [a]


# -- the scheduler ---------------------------------------------------------------------------
def test_root_tasks_fill_every_thread_of_many_workers_weighing_few(
    saturation_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = with_workers(300)
    counter = CountingSlots(s, monkeypatch)
    check(s, s.update_graph("c1", roots(1000), [f"t-{i}" for i in range(1000)]))
    assert placed(s) == Counter({address(i): 1 for i in range(300)})  # one per thread, every worker
    assert s.n_queued == 700
    # O(1) per task: a pass over the workers per task would weigh 300 x 300.
    assert counter.calls <= 2 * 300 + 10
    # A finished task's slot goes to the next queued task on that worker.
    out = finish(s, "t-0")
    assert len(computed_keys(out, address(0))) == 1 and s.n_queued == 699


def test_workers_of_several_thread_counts_fill_by_room(saturation_one: None) -> None:
    s = new_scheduler()
    for i in range(30):
        check(s, s.add_worker_state(address(i), 1 if i % 2 else 4))
    check(s, s.update_graph("c1", roots(200), [f"t-{i}" for i in range(200)]))
    per_worker = placed(s)
    assert all(per_worker[address(i)] == (1 if i % 2 else 4) for i in range(30)), per_worker
    assert s.n_queued == 200 - 15 * 5


def test_paused_workers_get_no_root_tasks(saturation_one: None) -> None:
    s = with_workers(40)
    for i in range(0, 40, 2):
        s.workers[address(i)].status = Status.paused
    check(s, s.update_graph("c1", roots(100), [f"t-{i}" for i in range(100)]))
    assert set(placed(s)) == {address(i) for i in range(1, 40, 2)}
    assert s.n_queued == 80


def test_without_queuing_root_tasks_spread_evenly_over_many_workers(no_queuing: None) -> None:
    n = 3 * SCAN_WORKERS
    s = with_workers(n)
    check(s, s.update_graph("c1", roots(10 * n), [f"t-{i}" for i in range(10 * n)]))
    assert placed(s) == Counter({address(i): 10 for i in range(n)})
    # A worker that left gives its tasks to the others, still evenly.
    check(s, s.remove_worker_state(address(0), stimulus_id="gone"))
    assert sorted(set(placed(s).values())) == [10, 11]
