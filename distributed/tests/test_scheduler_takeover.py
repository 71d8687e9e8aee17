"""The scheduler's journal and a new scheduler taking over from it.

The journal's crash tests kill a writing process; the takeover tests here
start the successor on a copy of a running scheduler's journal (SQLite's
backup: what a killed process would have left), in one process.  Killing a
real scheduler process among real workers and clients is in
test_scheduler_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import dask.config
import pytest

from distributed import (
    Client,
    Event,
    Future,
    Lock,
    Queue,
    Scheduler,
    Semaphore,
    Variable,
    Worker,
    fire_and_forget,
    wait,
)
from distributed.protocol import messages as m
from distributed.protocol.serialize import Serialized
from distributed.scheduler.journal import Journal
from distributed.utils_test import async_poll_for, gen_test, inc, snapshot_journal


@contextlib.asynccontextmanager
async def _successor(journal: str) -> AsyncIterator[Scheduler]:
    """A scheduler (in validation mode) taking over from ``journal``, waiting 0.2 s at most for its workers."""
    with dask.config.set({"distributed.scheduler.recovery-timeout": "0.2s"}):
        async with Scheduler(journal=journal, dashboard=False, port=0, validate=True) as s:
            yield s


# -- the journal --------------------------------------------------------------------------------
def test_journal_keeps_messages_in_order_with_serialised_values(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    journal = Journal(path)
    assert not journal.has_messages
    payload = Serialized.from_packed(b"\x93\xa3abc")  # opaque to the scheduler, kept as it came
    journal.record("update-graph", {"op": "update-graph", "client": "c", "tasks": {"x": {"run_spec": payload}}})
    journal.record("client-releases-keys", {"op": "client-releases-keys", "client": "c", "keys": ["x"]})
    journal.worker_joined("tcp://10.0.0.1:1")
    journal.worker_joined("tcp://10.0.0.2:1")
    journal.worker_left("tcp://10.0.0.1:1")
    journal.close()

    again = Journal(path)
    assert again.has_messages
    ops = list(again.messages())
    assert [op for op, _ in ops] == ["update-graph", "client-releases-keys"]
    spec = ops[0][1]["tasks"]["x"]["run_spec"]
    assert isinstance(spec, Serialized)
    assert spec.packed == b"\x93\xa3abc"
    assert list(ops[1][1]["keys"]) == ["x"]  # as off the wire: sequences come back as tuples
    assert again.workers() == {"tcp://10.0.0.2:1"}
    again.record("publish_put", {"op": "publish_put", "name": "d", "keys": [], "data": payload, "override": False})
    again.forget_task_messages()
    assert again.has_messages  # the dataset's message stays
    assert [op for op, _ in again.messages()] == ["publish_put"]
    assert again.workers() == {"tcp://10.0.0.2:1"}
    again.clear()
    assert again.workers() == set()
    assert list(again.messages()) == [] and not again.has_messages
    again.close()


_WRITER = textwrap.dedent(
    """
    import sys
    from distributed.scheduler.journal import Journal
    journal = Journal(sys.argv[1])
    i = 0
    while True:
        journal.record("client-desires-keys", {"op": "client-desires-keys", "client": "c", "keys": [f"k-{i}"] * 50})
        i += 1
        if i % 100 == 0:
            print(i, flush=True)
    """
)


@pytest.mark.parametrize("torn", [False, True])
def test_journal_of_a_killed_writer_opens_with_every_message_it_committed(tmp_path: Path, torn: bool) -> None:
    """A process killed while writing leaves a journal that opens; a torn end is rolled back, not fatal."""
    path = str(tmp_path / "j.db")
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        committed = 0
        while committed < 2000:
            line = proc.stdout.readline()
            assert line, "the writer ended early"
            committed = int(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    wal = Path(path + "-wal")
    if torn:
        # The last write cut in the middle, as a crash of the host could leave it.
        assert wal.exists() and wal.stat().st_size > 10_000
        with open(wal, "r+b") as f:
            f.truncate(wal.stat().st_size - 3_000)
    journal = Journal(path)
    keys = [msg["keys"][0] for _, msg in journal.messages()]
    journal.close()
    assert keys == [f"k-{i}" for i in range(len(keys))]  # whole messages, in order, none missing between
    if torn:
        assert len(keys) > 0
    else:
        assert len(keys) >= committed


# -- taking over ----------------------------------------------------------------------------------
@gen_test(timeout=60)
async def test_successor_replays_graphs_and_runs_them(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0, validate=True) as s:
        async with Client(s.address, asynchronous=True) as c:
            futures = c.map(inc, range(50))
            total = c.submit(sum, futures)
            await async_poll_for(lambda: len(s.tasks) == 51, timeout=10)
            snapshot_journal(first, second)
            client_id = c.id
    async with _successor(second) as s2:
        assert s2.takeover is not None
        await s2.takeover.done.wait()
        assert s2.takeover.replayed == 2
        assert len(s2.tasks) == 51
        assert {ts.state for ts in s2.tasks.values()} <= {"queued", "waiting", "no-worker"}
        assert s2.tasks[total.key].who_wants == {s2.clients[client_id]}
        async with Worker(s2.address, nthreads=2):
            await async_poll_for(lambda: s2.tasks[total.key].state == "memory", timeout=20)


@gen_test(timeout=60)
async def test_results_held_by_workers_are_not_computed_again(tmp_path: Path) -> None:
    """A tree: the partial sums held by a worker stand; the leaves they came from are not run again."""
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0, validate=True) as s:
        async with Worker(s.address, nthreads=2) as w, Client(s.address, asynchronous=True) as c:
            leaves = [c.submit(inc, i, key=f"leaf-{i}") for i in range(40)]
            parts = [c.submit(sum, leaves[i * 10 : (i + 1) * 10], key=f"part-{i}") for i in range(4)]
            del leaves
            await c.gather(parts)
            await async_poll_for(lambda: not any(k.startswith("leaf") for k in w.data), timeout=10)
            gate = Event("gate", client=c)
            total = c.submit(_sum_after, parts, "gate", key="total")
            await async_poll_for(lambda: "total" in s.tasks and s.tasks["total"].state == "processing", timeout=10)
            snapshot_journal(first, second)
            held = dict(w.data)
            await gate.set()
            assert await total == sum(range(1, 41))
    assert set(held) == {f"part-{i}" for i in range(4)}
    async with _successor(second) as s2:
        # A stand-in for the worker that held the partial sums: registers with them.
        async with Worker(s2.address, nthreads=1, data=dict(held), validate=True) as w2:
            assert s2.takeover is not None
            await s2.takeover.done.wait()
            assert s2.takeover.held == 4
            states = {key: ts.state for key, ts in s2.tasks.items()}
            assert all(states[f"part-{i}"] == "memory" for i in range(4)), states
            assert all(states[f"leaf-{i}"] in ("released", "forgotten") for i in range(40)), states
            # Nothing of the tree but the total is run again.
            stories = [r for key in states if str(key).startswith("leaf") for r in s2.story(key)]
            assert not [r for r in stories if r[2] == "processing"], stories
            assert s2.tasks["part-0"].run_spec is not None  # recomputable, should its holder go
            assert {d.key for d in s2.tasks["total"].dependencies} == {f"part-{i}" for i in range(4)}
            assert w2.address in {ws.address for ws in s2.tasks["part-0"].who_has}


def _sum_after(parts: list[int], event: str) -> int:
    from distributed import Event, get_client

    Event(event, client=get_client()).wait(timeout=30)
    return sum(parts)


@gen_test(timeout=60)
async def test_keys_no_graph_names_are_freed_on_their_worker(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0) as s:
        async with Client(s.address, asynchronous=True) as c:
            futures = c.map(inc, range(3))
            await async_poll_for(lambda: len(s.tasks) == 3, timeout=10)
            snapshot_journal(first, second)
            del futures
    async with _successor(second) as s2:
        async with Worker(s2.address, nthreads=1, data={"stray": 1}) as w2:
            assert s2.takeover is not None
            await s2.takeover.done.wait()
            assert "stray" not in s2.tasks
            assert not s2.workers[w2.address].has_what


@gen_test(timeout=60)
async def test_a_scheduler_closed_on_purpose_leaves_nothing_to_take_over(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    async with Scheduler(journal=path, dashboard=False, port=0) as s:
        async with Client(s.address, asynchronous=True) as c:
            futures = c.map(inc, range(3))
            await async_poll_for(lambda: len(s.tasks) == 3, timeout=10)
            assert s.journal is not None and s.journal.has_messages
            del futures
    async with Scheduler(journal=path, dashboard=False, port=0) as s2:
        assert s2.takeover is None


@gen_test(timeout=60)
async def test_the_journal_is_emptied_when_no_task_is_left(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    async with Scheduler(journal=path, dashboard=False, port=0) as s, Worker(s.address, nthreads=1):
        async with Client(s.address, asynchronous=True) as c:
            futures = c.map(inc, range(5))
            assert await c.gather(futures) == list(range(1, 6))
            assert s.journal is not None and s.journal.has_messages
            del futures
            await async_poll_for(lambda: not s.tasks, timeout=10)
            await async_poll_for(lambda: not s.journal.has_task_messages, timeout=10)
            assert list(Journal(path).messages()) == []


@gen_test(timeout=60)
async def test_published_datasets_and_variables_survive(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0) as s, Worker(s.address, nthreads=1) as w:
        async with Client(s.address, asynchronous=True) as c:
            x = c.submit(inc, 1, key="x")
            y = c.submit(inc, 2, key="y")
            await c.gather([x, y])
            await c.publish_dataset(x, name="data")
            await Variable("v", client=c).set(y)
            await c.publish_dataset(z=3)
            await c.unpublish_dataset("z")
            held = dict(w.data)
            snapshot_journal(first, second)
    async with _successor(second) as s2:
        async with Worker(s2.address, nthreads=1, data=held):
            assert s2.takeover is not None
            await s2.takeover.done.wait()
            assert list(s2.extensions["publish"].datasets) == ["data"]
            assert {s2.tasks[k].state for k in ("x", "y")} == {"memory"}
            async with Client(s2.address, asynchronous=True) as c2:
                assert await c2.list_datasets() == ["data"]
                value = await Variable("v", client=c2).get(timeout=5)
                assert value.key == "y"
                assert await value == 3


@gen_test(timeout=60)
async def test_fire_and_forget_tasks_done_before_the_takeover_are_not_run_again(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0) as s, Worker(s.address, nthreads=1):
        async with Client(s.address, asynchronous=True) as c:
            fire_and_forget([c.submit(inc, i, key=f"ff-{i}") for i in range(5)])
            await async_poll_for(lambda: s.tasks_forgotten >= 5 and not s.tasks, timeout=10)  # done, and let go
            # A task fire_and_forget still waits for: run after the takeover.
            gate = Event("gate", client=c)
            fire_and_forget(c.submit(_wait_for, "gate", key="ff-later"))
            await async_poll_for(lambda: "ff-later" in s.tasks, timeout=10)
            snapshot_journal(first, second)
            await gate.set()
    async with _successor(second) as s2:
        assert s2.takeover is not None
        await s2.takeover.done.wait()
        assert set(s2.tasks) == {"ff-later"}
        async with Worker(s2.address, nthreads=1), Client(s2.address, asynchronous=True) as c2:
            await Event("gate", client=c2).set()
            await async_poll_for(lambda: not s2.tasks, timeout=20)


def _wait_for(event: str) -> bool:
    from distributed import Event, get_client

    return bool(Event(event, client=get_client()).wait(timeout=30))


def _fail(x: int) -> int:
    raise ValueError(f"bad input {x}")


def _fail_twice_then_wait(counter: str, event: str) -> int:
    from distributed import Event, get_client

    path = Path(counter)
    runs = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(runs))
    if runs <= 2:
        raise RuntimeError(f"run {runs} fails")
    Event(event, client=get_client()).wait(timeout=30)
    return runs


@gen_test(timeout=60)
async def test_errors_and_retries_spent_survive_and_are_not_run_again(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    counter = str(tmp_path / "runs")
    async with Scheduler(journal=first, dashboard=False, port=0, validate=True) as s, Worker(s.address, nthreads=2):
        async with Client(s.address, asynchronous=True) as c:
            bad = c.submit(_fail, 1, key="bad")
            after = c.submit(inc, bad, key="after")
            flaky = c.submit(_fail_twice_then_wait, counter, "gate", key="flaky", retries=5)
            await wait([bad, after])
            await async_poll_for(lambda: Path(counter).exists() and Path(counter).read_text() == "3", timeout=20)
            assert s.tasks["flaky"].retries == 3 and not flaky.done()
            snapshot_journal(first, second)
            client_id = c.id
            await Event("gate", client=c).set()
    async with _successor(second) as s2:
        assert s2.takeover is not None
        await s2.takeover.done.wait()
        assert s2.tasks["bad"].state == "erred" and "bad input 1" in s2.tasks["bad"].exception_text
        assert s2.tasks["after"].state == "erred" and s2.tasks["after"].exception_blame is s2.tasks["bad"]
        assert s2.tasks["flaky"].retries == 3 and s2.tasks["flaky"].state in ("waiting", "queued", "no-worker")
        assert s2.clients[client_id] in s2.tasks["bad"].who_wants
        Path(counter).write_text("2")  # the next run is the third, and waits for the gate
        async with Worker(s2.address, nthreads=2), Client(s2.address, asynchronous=True) as c2:
            await Event("gate", client=c2).set()
            assert await Future("flaky", client=c2) == 3
            with pytest.raises(ValueError, match="bad input 1"):
                await Future("bad", client=c2)
            assert not [r for r in s2.story("bad") if r[2] == "processing"]


@gen_test(timeout=60)
async def test_scattered_data_whose_holder_did_not_come_back_errs_as_lost(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0) as s, Worker(s.address, nthreads=1):
        async with Client(s.address, asynchronous=True) as c:
            [future] = await c.scatter([41])
            snapshot_journal(first, second)
            client_id = c.id
    async with _successor(second) as s2:
        assert s2.takeover is not None
        await s2.takeover.done.wait()
        ts = s2.tasks[future.key]
        assert ts.state == "erred" and "was lost with its workers" in ts.exception_text  # a LostDataError
        assert s2.clients[client_id] in ts.who_wants


@gen_test(timeout=60)
async def test_queue_items_survive_and_items_taken_stay_taken(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0) as s:
        async with Client(s.address, asynchronous=True) as c:
            q = Queue("q", client=c)
            for i in range(4):
                await q.put(i)
            assert await q.get() == 0
            assert await q.get(timeout=0.1, batch=2) == [1, 2]
            snapshot_journal(first, second)
    async with _successor(second) as s2:
        assert s2.takeover is not None
        await s2.takeover.done.wait()
        async with Client(s2.address, asynchronous=True) as c2:
            q2 = Queue("q", client=c2)
            assert await q2.qsize() == 1
            assert await q2.get(timeout=5) == 3


@gen_test(timeout=60)
async def test_events_set_and_locks_and_semaphore_leases_held_survive(tmp_path: Path) -> None:
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0) as s:
        async with Client(s.address, asynchronous=True) as c:
            await Event("set", client=c).set()
            await Event("cleared", client=c).set()
            await Event("cleared", client=c).clear()
            lock = Lock("held", client=c)
            assert await lock.acquire()
            other = Lock("let-go", client=c)
            assert await other.acquire()
            await other.release()
            sem = Semaphore(max_leases=2, name="sem", client=c)
            assert await sem.acquire()
            snapshot_journal(first, second)
            lease = s.extensions["locks"].holders["held"]
    async with _successor(second) as s2:
        assert s2.takeover is not None
        await s2.takeover.done.wait()
        assert s2.extensions["locks"].holders == {"held": lease}
        assert len(s2.extensions["semaphores"].leases["sem"]) == 1
        async with Client(s2.address, asynchronous=True) as c2:
            assert await Event("set", client=c2).is_set()
            assert not await Event("cleared", client=c2).is_set()
            assert not await Lock("held", client=c2).acquire(timeout=0.2)  # held still, by the first client's lease
            assert await Lock("let-go", client=c2).acquire(timeout=1)
            assert await Semaphore(max_leases=2, name="sem", client=c2).get_value() == 1


# -- a client's connection dropping --------------------------------------------------------------
@gen_test(timeout=60, config={"distributed.scheduler.client-reconnect-grace": "0.5s"})
async def test_a_client_that_closes_is_released_at_once_grace_or_not() -> None:
    async with Scheduler(dashboard=False, port=0, validate=True) as s, Worker(s.address, nthreads=1):
        async with Client(s.address, asynchronous=True) as c:
            await c.submit(inc, 1, key="x")
            client_id = c.id
        await async_poll_for(lambda: "x" not in s.tasks and client_id not in s.clients, timeout=0.4)


@gen_test(timeout=60, config={"distributed.scheduler.client-reconnect-grace": "0.5s"})
async def test_a_departed_clients_wants_are_kept_for_the_grace_then_released() -> None:
    async with Scheduler(dashboard=False, port=0, validate=True) as s, Worker(s.address, nthreads=1):
        async with Client(s.address, asynchronous=True) as c:
            await c.submit(inc, 1, key="x")
            # Another client, which left without a word (its stream dropped), wants x too.
            s.send_all(s.client_desires_keys("ghost", ["x"], "test"))
            s.streams.client_left("ghost")
        await asyncio.sleep(0.1)
        assert "x" in s.tasks and "ghost" in s.clients
        await async_poll_for(lambda: "x" not in s.tasks and "ghost" not in s.clients, timeout=5)


@gen_test(timeout=60, config={"distributed.scheduler.client-reconnect-grace": "0"})
async def test_without_grace_a_departed_client_is_released_at_once() -> None:
    async with Scheduler(dashboard=False, port=0, validate=True) as s:
        s.send_all(s.update_graph("ghost", {"x": _spec()}, ["x"]))
        s.streams.client_left("ghost")
        assert "ghost" not in s.clients and "x" not in s.tasks


def _spec() -> m.TaskSpec:
    from distributed.tests.machines import task_spec

    return task_spec()


def test_cli_takes_the_journal_option() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "--journal" in out.stdout


def test_a_held_key_whose_worker_leaves_before_its_graph_is_replayed_is_run_from_it() -> None:
    """Driven without sockets: the holder leaves mid-takeover; the task is neither lost nor erred, but run."""
    from distributed.scheduler.takeover import TAKEOVER_CLIENT
    from distributed.tests.machines import A, B, check, compute_of, task_spec, validating_scheduler

    s = validating_scheduler()
    check(s, s.add_worker_state(A, 1))
    held = m.UpdateData(op="update-data", client=TAKEOVER_CLIENT, who_has={"x": [A]}, nbytes={"x": 8})
    check(s, s.update_data_state(held, "takeover-held"))
    s.held_before_takeover.add(s.tasks["x"])
    check(s, s.remove_worker_state(A, stimulus_id="left-mid-takeover"))
    assert s.tasks["x"].state == "released"  # not erred with LostDataError: its graph is still to come
    check(s, s.update_graph("c1", {"x": task_spec(order=0), "y": task_spec(["x"], order=1)}, ["y"]))
    check(s, s.remove_client_state(TAKEOVER_CLIENT, "takeover-release"))
    out = check(s, s.add_worker_state(B, 1))
    assert compute_of(out, "x")[0] == B
    assert s.tasks["x"].has_run_spec and {d.key for d in s.tasks["y"].dependencies} == {"x"}


@gen_test(timeout=60)
async def test_a_new_scheduler_numbers_shuffle_runs_past_those_of_the_last() -> None:
    """Workers refuse a run not newer than one they saw: a successor's first run must be newer."""
    async with Scheduler(dashboard=False, port=0) as s:
        old = next(s.extensions["shuffle"]._run_ids)
    async with Scheduler(dashboard=False, port=0) as s2:
        assert next(s2.extensions["shuffle"]._run_ids) > old
