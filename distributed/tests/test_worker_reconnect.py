"""A worker that loses its scheduler without being asked to close keeps its results and registers again.

A scheduler SIGKILLed and started again at the same address (from its
journal, or afresh) gets back the same worker processes, at the same
addresses, each reporting the keys it holds; the scheduler keeps those it
counts on and frees the rest.  A worker with no scheduler back within
``distributed.worker.reconnect-timeout`` (or its ``death_timeout``) closes;
a scheduler that closes normally still closes its workers.

The first tests drive real ``dask scheduler`` / ``dask worker`` processes:
every process started is stopped by PID at the end (SIGTERM, then SIGKILL),
and every wait polls a condition with a deadline.  The others run a scheduler and workers in this
process, cutting a worker's stream as a killed scheduler would, and the
state machine alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest

from distributed import Client, Status
from distributed.comm import connect
from distributed.core import send_recv
from distributed.liveness import Voucher
from distributed.protocol import Serialized
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.scheduler.records import WorkerState
from distributed.spill import SpillBuffer
from distributed.tests.logs import caught_logs
from distributed.utils import open_port
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc
from distributed.worker import Worker
from distributed.worker.state_machine import (
    ComputeTaskEvent,
    Execute,
    FreeKeysEvent,
    GatherDep,
    HeldDataEvent,
    UpdateDataEvent,
    WorkerStateMachine,
)

REPO_ROOT = str(Path(__file__).resolve().parents[2])
SCHEDULER = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]

# Records the keys of each register-worker message the scheduler receives, one JSON line each.
# Patched as the preload is imported, before the scheduler binds its handlers and listens:
# no registration can come before it (a dask_setup runs only once the scheduler listens).
_PRELOAD = """
import json

from distributed.scheduler.streams import SchedulerStreams

_register_worker = SchedulerStreams.handle_register_worker


async def _recording_register_worker(self, comm, msg):
    record = {{"address": msg.get("address"), "pid": msg.get("pid"), "keys": sorted(map(str, msg.get("keys") or ()))}}
    with open({path!r}, "a") as f:
        f.write(json.dumps(record) + "\\n")
    return await _register_worker(self, comm, msg)


SchedulerStreams.handle_register_worker = _recording_register_worker
"""


# -- real processes ------------------------------------------------------------------------------
class Proc:
    """A subprocess whose output goes to a file (no pipe to fill up and block it)."""

    def __init__(self, args: list[str], log: Path, env: Mapping[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self._log_file = open(log, "wb")
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, environ.get("PYTHONPATH", "")) if p)
        self.popen = subprocess.Popen(
            args, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environ, cwd=REPO_ROOT
        )
        self.pid = self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.args} did not exit within {timeout} s:\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL, as a scheduler that dies without a word."""
        if self.popen.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def close(self) -> None:
        """SIGTERM, then SIGKILL after a while: a nanny killed outright would leave its worker process behind."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log_file.close()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start subprocesses; all are stopped (by PID, the last started first) at the end of the test."""
    started: list[Proc] = []

    def start(args: list[str], name: str, env: Mapping[str, str] | None = None) -> Proc:
        p = Proc(args, tmp_path / f"{name}-{len(started)}.log", env)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in reversed(started):
            p.close()


def poll(predicate: Callable[[], Any], timeout: float, what: str, *watched: Proc) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``.

    Fails at once, with its output, when one of the ``watched`` processes exits first.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        result = predicate()
        if result:
            return result
        for proc in watched:
            if proc.poll() is not None:
                pytest.fail(f"{what}: {proc.args[2:4]} exited with {proc.poll()}:\n{proc.output()}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.args[2:4]}:\n{p.output()}" for p in watched)
            pytest.fail(f"Timed out after {timeout} s waiting for {what}\n{logs}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def start_scheduler(procs: Callable[..., Proc], port: int, preload: Path) -> Proc:
    return procs(
        [*SCHEDULER, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard", "--preload", str(preload)],
        name="scheduler",
    )


def start_worker(procs: Callable[..., Proc], address: str, nanny: bool, env: Mapping[str, str] | None = None) -> Proc:
    flag = "--nanny" if nanny else "--no-nanny"
    args = [*WORKER, address, flag, "--nthreads", "2", "--host", "127.0.0.1", "--no-dashboard"]
    return procs(args, name="worker", env=env)


def registrations(path: Path) -> list[dict[str, Any]]:
    """The register-worker messages the schedulers with the recording preload received, in order."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scheduler_workers(address: str) -> dict[str, Any]:
    """The workers the scheduler at ``address`` knows, by address (empty while it cannot be reached)."""
    try:
        with Client(address, timeout=5) as c:
            return dict(c.scheduler_info()["workers"])
    except (OSError, TimeoutError):
        return {}


def vouched(c: Client[Literal[False]]) -> list[str]:
    """The workers the scheduler's liveness links vouch for."""

    def on_scheduler(dask_scheduler: Scheduler) -> list[str]:
        return sorted(dask_scheduler.liveness.vouched())

    result: list[str] = c.run_on_scheduler(on_scheduler)
    return result


HELD = ["held-0", "held-1", "held-2"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("nanny", [False, True], ids=["no-nanny", "nanny"])
def test_worker_process_survives_its_scheduler_and_joins_the_next(
    procs: Callable[..., Proc], tmp_path: Path, nanny: bool
) -> None:
    port = open_port("127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    recorded = tmp_path / "registrations.jsonl"
    preload = tmp_path / "record_registrations.py"
    preload.write_text(_PRELOAD.format(path=str(recorded)))
    first = start_scheduler(procs, port, preload)
    worker = start_worker(procs, address, nanny)
    info = poll(lambda: scheduler_workers(address), 60, "the worker to register", first, worker)
    [worker_address] = info
    with Client(address, timeout=30) as c:
        futures = [c.submit(inc, i, key=key) for i, key in enumerate(HELD)]
        assert c.gather(futures) == [1, 2, 3]
        pid = c.run(os.getpid)[worker_address]
        assert (pid == worker.pid) != nanny  # under a nanny the worker is its child process
        poll(lambda: worker_address in vouched(c), 30, "the first scheduler to watch the worker", worker)
        # Published, the results stay wanted (and held by the worker) once this client leaves.
        c.publish_dataset(held=futures)
    first.kill()

    # Not asked to close, the worker keeps its results and tries to register again.
    poll(lambda: "keeps its 3 results" in worker.output(), 30, "the worker to notice the loss", worker)
    second = start_scheduler(procs, port, preload)
    rejoined = poll(
        lambda: [r for r in registrations(recorded)[1:] if r["address"] == worker_address],
        60,
        "the worker to register with the new scheduler",
        second,
        worker,
    )
    # The same process, at the same address, reporting what it held.
    assert rejoined[0]["pid"] == pid
    assert set(HELD) <= set(rejoined[0]["keys"])
    assert f"registered again with the scheduler at {address}, holding 3 keys" in worker.output()
    with Client(address, timeout=30) as c:
        workers = c.scheduler_info()["workers"]
        assert list(workers) == [worker_address]
        assert workers[worker_address]["pid"] == pid
        assert c.run(os.getpid) == {worker_address: pid}
        # This scheduler has no journal: it knows none of the keys, and has the worker free them.
        poll(lambda: not c.run(lambda dask_worker: list(dask_worker.data))[worker_address], 30, "the keys freed")
        # The worker (or its nanny) vouches for it again: silent-worker detection works for this scheduler.
        poll(lambda: worker_address in vouched(c), 30, "the new scheduler to watch the worker", worker)
        assert c.submit(inc, 10, pure=False).result(timeout=30) == 11
        assert c.gather(c.map(inc, range(20))) == list(range(1, 21))
    assert worker.poll() is None
    assert "Traceback" not in worker.output()


def _a_registered_worker(
    procs: Callable[..., Proc], tmp_path: Path, nanny: bool, env: Mapping[str, str] | None = None
) -> tuple[Proc, Proc]:
    """A scheduler recording registrations, and a worker (under a nanny or not) registered with it."""
    port = open_port("127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    preload = tmp_path / "record_registrations.py"
    preload.write_text(_PRELOAD.format(path=str(tmp_path / "registrations.jsonl")))
    scheduler = start_scheduler(procs, port, preload)
    worker = start_worker(procs, address, nanny, env=env)
    poll(lambda: scheduler_workers(address), 60, "the worker to register", scheduler, worker)
    return scheduler, worker


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [False, True], ids=["no-nanny", "nanny"])
def test_worker_closes_when_no_scheduler_comes_back_in_time(
    procs: Callable[..., Proc], tmp_path: Path, nanny: bool
) -> None:
    env = {"DASK_DISTRIBUTED__WORKER__RECONNECT_TIMEOUT": "2s"}
    scheduler, worker = _a_registered_worker(procs, tmp_path, nanny, env)
    scheduler.kill()
    poll(lambda: "tries to register again for 2 s" in worker.output(), 30, "the worker to notice the loss")
    lost = time.monotonic()
    # The worker gives up, and the `dask worker` process (with the nanny, if any) ends cleanly.
    assert worker.wait(timeout=60) == 0, worker.output()
    assert time.monotonic() - lost > 1.5  # it did try for the reconnect timeout
    assert "No scheduler at" in worker.output()
    if nanny:
        assert "starting a new one" not in worker.output()  # the nanny closed with its worker


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nanny", [False, True], ids=["no-nanny", "nanny"])
def test_a_scheduler_that_closes_normally_closes_its_workers(
    procs: Callable[..., Proc], tmp_path: Path, nanny: bool
) -> None:
    scheduler, worker = _a_registered_worker(procs, tmp_path, nanny)  # the default reconnect timeout: a minute
    os.kill(scheduler.pid, signal.SIGINT)
    assert scheduler.wait(timeout=30) == 0, scheduler.output()
    # Told to close (close-worker), the worker closes at once rather than waiting for another scheduler.
    assert worker.wait(timeout=30) == 0, worker.output()
    assert "Lost the scheduler" not in worker.output()


# -- in this process -------------------------------------------------------------------------------
def cut_off(s: Scheduler, w: Worker) -> WorkerState:
    """End the worker's stream to the scheduler without a word, as a scheduler killed outright does.

    Returns the scheduler's record of the worker before: it registers anew.
    """
    stream = w.batched_stream
    assert stream is not None and stream.comm is not None
    ws = s.workers[w.address]
    stream.comm.abort()
    return ws


def registered_again(s: Scheduler, w: Worker, before: WorkerState) -> bool:
    ws = s.workers.get(w.address)
    return ws is not None and ws is not before and w.batched_stream is not None


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2, worker_kwargs={"death_timeout": 30})
async def test_held_keys_are_used_served_and_freed_after_registering_again(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(inc, 1, key="x", workers=[a.address])
    await x
    await c.replicate([x])  # the scheduler still counts on x when a is gone: a's copy is wanted back
    old_state = a.state
    before = cut_off(s, a)
    await async_poll_for(lambda: registered_again(s, a, before), timeout=20)
    assert a.state is not old_state and a.status == Status.running
    assert a.tasks["x"].state == "memory" and a.data["x"] == 2
    await async_poll_for(lambda: s.workers[a.address] in s.tasks["x"].who_has, timeout=10)

    # A task on a that needs x uses a's copy: nothing is fetched.
    fetched = a.incoming_transfer_count
    y = c.submit(inc, x, key="y", workers=[a.address])
    assert await y == 3
    assert a.incoming_transfer_count == fetched
    # Peers get x from a.
    comm = await connect(a.address)
    try:
        reply = await send_recv(comm, {"op": "get_data", "keys": ["x"], "who": b.address})
    finally:
        await comm.close()
    assert reply["status"] == "OK" and set(reply["data"]) == {"x"}
    # Released by the scheduler, a frees it.
    del x, y
    await async_poll_for(lambda: "x" not in a.data and "x" not in a.tasks, timeout=10)


_gates = {1: threading.Event(), 2: threading.Event()}
_runs: list[int] = []


def _gated(n: int) -> int:
    """Which run of this task this is (1, 2, ...), once the gate of that run opens."""
    _runs.append(n)
    run = len(_runs)
    if not _gates[run].wait(timeout=30):
        raise TimeoutError(f"gate {run} never opened")
    return run


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)], worker_kwargs={"death_timeout": 30})
async def test_a_run_under_way_when_the_scheduler_is_lost_is_abandoned(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    _runs.clear()
    for gate in _gates.values():
        gate.clear()
    try:
        future = c.submit(_gated, 0, key="gated")
        await async_poll_for(lambda: len(_runs) == 1, timeout=10)
        before = cut_off(s, a)
        await async_poll_for(lambda: registered_again(s, a, before), timeout=20)
        # The scheduler gives the task to the worker again: a second run, in the other thread.
        await async_poll_for(lambda: len(_runs) == 2, timeout=10)
        _gates[1].set()
        # The first run's result is dropped: the task still runs, for the second run.
        await async_poll_for(lambda: not a._abandoned_runs, timeout=10)
        assert a.tasks["gated"].state == "executing" and not future.done()
        _gates[2].set()
        assert await future == 2
    finally:
        for gate in _gates.values():
            gate.set()


_async_runs: list[int] = []
#: Set by the test; shared by reference (a gate passed as an argument would reach the task as a copy).
_async_gate: dict[str, asyncio.Event] = {}


async def _async_gated() -> int:
    """Which run of this async task this is, once the gate is set (it runs on the worker's event loop)."""
    _async_runs.append(1)
    run = len(_async_runs)
    await _async_gate["gate"].wait()
    return run


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], worker_kwargs={"death_timeout": 30})
async def test_an_async_run_under_way_when_the_scheduler_is_lost_is_cancelled(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    _async_runs.clear()
    gate = _async_gate["gate"] = asyncio.Event()  # the worker runs on this event loop
    try:
        future = c.submit(_async_gated, key="async-gated")
        await async_poll_for(lambda: len(_async_runs) == 1, timeout=10)
        before = cut_off(s, a)
        await async_poll_for(lambda: registered_again(s, a, before), timeout=20)
        await async_poll_for(lambda: len(_async_runs) == 2, timeout=10)
        # Cancelled with its coroutine, the first run will never report: nothing is waited out for it.
        assert not a._abandoned_runs
        gate.set()
        assert await future == 2
    finally:
        gate.set()
        _async_gate.clear()


def _big(i: int) -> bytes:
    return bytes([i]) * 400_000


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)] * 2,
    worker_kwargs={
        "death_timeout": 30,
        "memory_limit": "10 MB",
        # Spill past 1 MB of results; nothing by the process's memory (this test process is larger).
        "memory_target_fraction": 0.1,
        "memory_spill_fraction": False,
        "memory_pause_fraction": False,
    },
)
async def test_spilled_results_stay_on_disk_across_the_loss(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    reported: list[dict[Key, int]] = []
    add_worker_state = s.add_worker_state

    def recording_add_worker_state(address: str, *args: Any, **kwargs: Any) -> Any:
        reported.append(dict(kwargs.get("nbytes") or {}))
        return add_worker_state(address, *args, **kwargs)

    futures = [c.submit(_big, i, key=f"big-{i}", workers=[a.address]) for i in range(5)]
    await c.gather(futures)
    await c.replicate(futures)  # wanted back from a after the loss (see the test above)
    assert isinstance(a.data, SpillBuffer)
    spilled = set(a.data.disk)
    assert len(spilled) >= 2
    s.add_worker_state = recording_add_worker_state  # type: ignore[method-assign]  # observe the registration
    before = cut_off(s, a)
    await async_poll_for(lambda: registered_again(s, a, before), timeout=20)
    [nbytes] = reported
    assert set(nbytes) == {f.key for f in futures} and all(n >= 400_000 for n in nbytes.values())
    # Known again as held, without reading the spilled ones back into memory.
    assert set(a.data.disk) == spilled
    assert all(a.tasks[f.key].state == "memory" for f in futures)
    assert a.state is not None and a.state.nbytes_in_memory == sum(nbytes.values())


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.worker.reconnect-timeout": "1s"})
async def test_reconnect_timeout_from_config_and_death_timeout_wins(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    assert a.settings.reconnect_timeout == 1.0
    assert a.death_timeout is None
    async with Worker(s.address, nthreads=1, death_timeout=7) as w:
        assert w.settings.reconnect_timeout == 1.0 and w.death_timeout == 7


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_a_worker_told_to_close_does_not_try_to_register_again(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    with caught_logs("distributed.worker") as records:
        # close-worker on its stream, then the stream ends: the two must not read as a lost scheduler.
        await c.retire_workers([a.address], close_workers=True)
        await async_poll_for(lambda: a.status == Status.closed, timeout=10)
    assert not [r for r in records if "Lost the scheduler" in r.getMessage()]
    assert a.address not in s.workers and b.status == Status.running


@gen_test(timeout=60)
async def test_a_liveness_link_vouches_again_to_the_next_scheduler_at_the_address() -> None:
    port = open_port("127.0.0.1")
    worker = "tcp://127.0.0.1:1"  # what is vouched for need not be registered (yet)
    voucher: Voucher | None = None
    try:
        async with Scheduler(host="127.0.0.1", port=port, dashboard=False) as first:
            voucher = Voucher(first.address, {})
            voucher.vouch([worker])
            await async_poll_for(lambda: worker in first.liveness.vouched(), timeout=10)
        # The link lost its scheduler; the next one at the address hears the vouch without being asked.
        async with Scheduler(host="127.0.0.1", port=port, dashboard=False) as second:
            await async_poll_for(lambda: worker in second.liveness.vouched(), timeout=10)
    finally:
        if voucher is not None:
            await voucher.close()


# -- the state machine alone ------------------------------------------------------------------------
class _NoReads(dict[Key, Any]):
    """A data store that fails any read of a value: held keys must be known without reading them."""

    def __getitem__(self, key: Key) -> Any:
        raise AssertionError(f"value of {key!r} read")


def test_held_data_event_knows_keys_as_in_memory_without_reading_them() -> None:
    data = _NoReads({"x": 1, "y": 2})
    ws = WorkerStateMachine("tcp://10.0.0.1:1", 1, data=data, validate=True)
    assert ws.handle_stimulus(HeldDataEvent(stimulus_id="held", nbytes={"x": 28, "y": 30, "gone": 5})) == []
    ws.validate_state()
    assert {k: ts.state for k, ts in ws.tasks.items()} == {"x": "memory", "y": "memory"}
    assert ws.tasks["x"].nbytes == 28 and ws.nbytes_in_memory == 58
    assert ws.story("x")[-1][1:4] == ("released", "memory", "held")


def test_held_keys_feed_a_task_without_fetching_and_are_freed() -> None:
    ws = WorkerStateMachine("tcp://10.0.0.1:1", 1, data={"x": 1}, validate=True)
    ws.handle_stimulus(HeldDataEvent(stimulus_id="held", nbytes={"x": 28}))
    compute = ComputeTaskEvent(
        stimulus_id="compute-y",
        key="y",
        run_id=1,
        run_spec=Serialized({"s": "pickle"}, [b"opaque"]),
        priority=(0,),
        who_has={"x": ["tcp://10.0.0.2:1"]},
        nbytes={"x": 28},
    )
    instructions = ws.handle_stimulus(compute)
    assert instructions == [Execute("y", 1)]
    assert not [i for i in instructions if isinstance(i, GatherDep)]
    ws.handle_stimulus(FreeKeysEvent(stimulus_id="free-y", keys=("y",)))  # cancelled while it runs
    ws.handle_stimulus(FreeKeysEvent(stimulus_id="free-x", keys=("x",)))
    assert "x" not in ws.data and "x" not in ws.tasks
    ws.validate_state()


def test_held_data_event_leaves_known_keys_alone() -> None:
    ws = WorkerStateMachine("tcp://10.0.0.1:1", 1, validate=True)
    ws.handle_stimulus(UpdateDataEvent(stimulus_id="scatter", data={"x": 1}, nbytes={"x": 28}))
    ws.handle_stimulus(HeldDataEvent(stimulus_id="held", nbytes={"x": 99}))
    assert ws.tasks["x"].nbytes == 28 and ws.nbytes_in_memory == 28
    ws.validate_state()
