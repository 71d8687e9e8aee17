"""Client tools about the cluster: write_scheduler_file, register_worker_callbacks, scheduler and worker logs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

import dask.config
import pytest

from distributed import Client, Nanny, Scheduler, Worker
from distributed.scheduler.settings import SchedulerServerSettings
from distributed.utils_test import async_poll_for, gen_cluster

#: Calls of the setup callbacks below made in this process (the workers of these tests run here).
CALLS: list[str] = []


def mark_worker(dask_worker: Worker) -> None:
    dask_worker.marked = True  # type: ignore[attr-defined]  # a user's attribute, as a callback would set
    CALLS.append(dask_worker.address)


def count_call() -> None:
    CALLS.append("no-arguments")


@gen_cluster(client=True)
async def test_register_worker_callbacks(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    CALLS.clear()
    await c.register_worker_callbacks(setup=mark_worker)
    await c.register_worker_callbacks(count_call)
    assert sorted(CALLS) == sorted([a.address, b.address, "no-arguments", "no-arguments"])
    assert getattr(a, "marked", False) and getattr(b, "marked", False)
    # A worker that joins later runs them too.
    async with Worker(s.address, nthreads=1) as w:
        assert getattr(w, "marked", False)
        assert CALLS.count(w.address) == 1 and CALLS.count("no-arguments") == 3
    with pytest.raises(TypeError, match="setup function"):
        c.register_worker_callbacks()
    with pytest.raises(TypeError, match="callable"):
        c.register_worker_callbacks(setup=42)  # type: ignore[call-overload]  # refused at run time


@gen_cluster(client=True, nthreads=[])
async def test_write_scheduler_file(c: Client[Literal[True]], s: Scheduler, tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    await c.write_scheduler_file(str(path))
    info = json.loads(path.read_text())
    assert info["address"] == s.address
    assert c.scheduler_file == str(path)
    async with Client(scheduler_file=str(path), asynchronous=True, set_as_default=False) as other:
        assert other.scheduler_address == s.address
        assert other.scheduler_file == str(path)
        with pytest.raises(ValueError, match="already set"):
            other.write_scheduler_file(str(tmp_path / "again.json"))
    with pytest.raises(ValueError, match="already set"):
        c.write_scheduler_file(str(tmp_path / "again.json"))


def _is_records(records: Any) -> bool:
    return isinstance(records, list) and all(
        isinstance(r, tuple) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in records
    )


@gen_cluster(client=True)
async def test_scheduler_and_worker_logs(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    logs = await c.get_scheduler_logs()
    assert _is_records(logs)
    assert any("Register worker" in text and level == "INFO" for level, text in logs)
    assert len(await c.get_scheduler_logs(n=1)) == 1
    worker_logs = await c.get_worker_logs()
    assert set(worker_logs) == {a.address, b.address}
    assert all(_is_records(records) for records in worker_logs.values())
    assert any(f"at {a.address}" in text for _, text in worker_logs[a.address])
    assert [len(r) for r in (await c.get_worker_logs(n=1)).values()] == [1, 1]
    assert set(await c.get_worker_logs(workers=[b.address])) == {b.address}
    assert set(await c.get_worker_logs(workers=[a.name])) == {a.address}  # by name
    with pytest.raises(ValueError, match="Unknown workers"):
        await c.get_worker_logs(workers=["tcp://127.0.0.1:1"])
    with pytest.raises(ValueError, match="no nanny"):
        await c.get_worker_logs(nanny=True)


@gen_cluster(client=True, nthreads=[])
async def test_nanny_logs(c: Client[Literal[True]], s: Scheduler) -> None:
    async with Nanny(s.address, nthreads=1) as nanny:
        await c.wait_for_workers(1)
        logs = await c.get_worker_logs(nanny=True)
        assert set(logs) == {nanny.worker_address}
        assert any("Nanny at" in text for _, text in logs[str(nanny.worker_address)])


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_wait_for_workers_says_how_many_arrived(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    await c.wait_for_workers(1)
    with pytest.raises(TimeoutError, match=r"^Only 1 of the 3 workers waited for had arrived after 0.2 s$"):
        await c.wait_for_workers(3, timeout=0.2)
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="n_workers must be a positive integer"):
            await c.wait_for_workers(bad)  # type: ignore[arg-type]  # the mistakes tested


@gen_cluster(client=True, nthreads=[])
async def test_metadata_on_the_scheduler(c: Client[Literal[True]], s: Scheduler) -> None:
    await c.set_metadata("x", 1)
    assert await c.get_metadata("x") == 1
    await c.set_metadata(["a", "b", "c"], {"deep": [1, 2]})
    assert await c.get_metadata(["a", "b"]) == {"c": {"deep": (1, 2)}}  # msgpack: arrays come back as tuples
    assert await c.get_metadata(["a", "b", "c", "deep"]) == (1, 2)
    await c.set_metadata(["x", "y"], 2)  # replaces the 1 in the way
    assert await c.get_metadata("x") == {"y": 2}
    assert await c.get_metadata("missing", default=None) is None
    assert await c.get_metadata(["a", "nope"], default="d") == "d"
    with pytest.raises(KeyError):
        await c.get_metadata("missing")
    with pytest.raises(TypeError, match="msgpack"):
        c.set_metadata("bad", {1, 2})
    # The scheduler's own view and methods, as in dask.
    assert s.task_metadata["a"]["b"]["c"]["deep"] == (1, 2)
    s.set_metadata(["from", "scheduler"], 3)
    assert s.get_metadata(["from", "scheduler"]) == 3 == await c.get_metadata(["from", "scheduler"])
    assert s.get_metadata("none", default=0) == 0


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_restart_closes_workers_without_a_nanny(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    future = c.submit(lambda: 1)
    await future
    with pytest.raises(TimeoutError, match=r"Waited for 2 worker\(s\) to reconnect after restarting, but .* only 0"):
        await c.restart(timeout=1)
    assert not s.workers and future.status == "cancelled"
    await a.finished()
    await b.finished()


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_restart_without_waiting_closes_a_bare_worker_and_returns(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    await c.restart(wait_for_workers=False)
    assert not s.workers
    await a.finished()
    async with Worker(s.address, nthreads=1) as w:  # what a deployment would start instead
        assert await c.submit(lambda x: x + 1, 1) == 2
        assert list(s.workers) == [w.address]


@pytest.mark.parametrize("format", ["msgpack", "yaml"])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_dump_cluster_state_is_readable_by_a_script(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, tmp_path: Path, format: Literal["msgpack", "yaml"]
) -> None:
    from distributed.cluster_dump import load_cluster_dump

    done = c.submit(lambda x: x + 1, 1, key="done", workers=[a.address])
    await done
    failed = c.submit(lambda: 1 / 0, key="failed")
    with pytest.raises(ZeroDivisionError):
        await failed
    path = await c.dump_cluster_state(str(tmp_path / "dump"), format=format, exclude=["run_spec"])
    assert path == str(tmp_path / f"dump.{'msgpack.gz' if format == 'msgpack' else 'yaml'}")
    state = load_cluster_dump(path)
    tasks = state["scheduler"]["tasks"]
    assert tasks["done"]["state"] == "memory" and tasks["done"]["who_has"] == [a.address]
    assert tasks["failed"]["state"] == "erred" and "ZeroDivisionError" in tasks["failed"]["exception_text"]
    assert "run_spec" not in tasks["done"]
    assert set(state["scheduler"]["workers"]) == set(state["workers"]) == {a.address, b.address}
    assert state["workers"][a.address]["tasks"]["done"]["state"] == "memory"
    assert "done" in state["workers"][a.address]["data"]
    assert state["versions"]["client"]["packages"]["dask"]
    assert any(e[1].get("action") == "add-worker" for e in state["scheduler"]["events"]["all"])
    with pytest.raises(NotImplementedError, match="write_from_scheduler"):
        c.dump_cluster_state(write_from_scheduler=True)


def waits_in_a_named_function(event_name: str) -> int:
    from distributed import Event

    Event(event_name).wait(timeout=30)
    return 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_call_stack_of_running_tasks(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    from distributed import Event

    event = Event("release-call-stack", client=c)
    future = c.submit(waits_in_a_named_function, "release-call-stack", key="stuck", workers=[a.address])
    await async_poll_for(lambda: "stuck" in a.active_threads.values(), 10)
    everything = await c.call_stack()
    assert set(everything) == {a.address}
    assert any("waits_in_a_named_function" in line for line in everything[a.address]["stuck"])
    assert set(await c.call_stack(futures=[future])) == {a.address}
    assert await c.call_stack(keys=["not-running"]) == {}
    await event.set()
    assert await future == 1
    assert await c.call_stack() == {}


@pytest.mark.parametrize("reuse", [True, False])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_reuse_broadcast_comm(c: Client[Literal[True]], s: Scheduler, a: Worker, reuse: bool) -> None:
    # True (dask's default): Client.run goes over the scheduler's pooled connection to the worker;
    # false: over one of its own, closed after, so the pool gains nothing.
    with dask.config.set({"distributed.scheduler.reuse-broadcast-comm": reuse}):
        assert SchedulerServerSettings.from_config().reuse_broadcast_comm is reuse
    s.server_settings = dataclasses.replace(s.server_settings, reuse_broadcast_comm=reuse)
    s.rpc.remove(a.address)
    assert await c.run(lambda: 1) == {a.address: 1}
    assert (a.address in s.rpc.available) is reuse
    assert await c.run(lambda: 2) == {a.address: 2}
