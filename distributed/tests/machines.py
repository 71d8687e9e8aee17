"""Driving the scheduler's state machine in tests, without a socket.

The scheduler's stimuli (``update_graph``, ``task_finished``, ...) are plain
methods that change state and return the :class:`~distributed.scheduler.records.Effects`
to send.  These helpers make what the tests feed them: task specs whose run
specification is *not* a pickle (were the scheduler ever to unpickle user
code, the test using it would fail), a machine in validation mode, and the
``compute-task`` messages of an output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from distributed.protocol import Serialized
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.scheduler.graph import GraphIngestion
from distributed.scheduler.records import Effects

#: A message as the tests read it.
Msg = dict[str, Any]

__all__ = [
    "A",
    "B",
    "C",
    "RecordingStream",
    "cancel",
    "check",
    "client_ops",
    "compute_of",
    "compute_tasks",
    "computed_keys",
    "computes",
    "done",
    "finish",
    "freed",
    "opaque_spec",
    "report_erred",
    "scattered",
    "state",
    "state_machine",
    "task_spec",
    "validating_scheduler",
]


def opaque_spec() -> Serialized:
    """A run_spec whose frames are not a pickle: unpickling it would raise."""
    return Serialized({"s": "pickle"}, [b"not a pickle"])


def task_spec(
    deps: Sequence[Key] | None = (),
    order: int = 0,
    run_spec: Serialized | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> m.TaskSpec:
    """One task of an update-graph, depending on ``deps``."""
    t: m.TaskSpec = {
        "run_spec": run_spec if run_spec is not None else opaque_spec(),
        "dependencies": list(deps or ()),
        "order": order,
    }
    if annotations:
        t["annotations"] = dict(annotations)
    return t


def state_machine(**kwargs: Any) -> GraphIngestion:
    """The scheduler's whole state machine (state, stimuli, graphs) in validation mode, with no server at all."""
    return GraphIngestion(validate=True, **kwargs)


def validating_scheduler(**kwargs: Any) -> Scheduler:
    """A scheduler in validation mode, never started: its machine and its shell, without a socket."""
    return Scheduler(validate=True, **kwargs)


def compute_tasks(out: Effects) -> list[tuple[str, Key, int]]:
    """The ``compute-task`` messages of ``out``: (worker, key, run id) each."""
    return [
        (addr, msg["key"], msg["run_id"])
        for addr, msgs in out.workers.items()
        for msg in msgs
        if msg["op"] == "compute-task"
    ]


A = "tcp://10.0.0.1:1234"
B = "tcp://10.0.0.2:1234"
C = "tcp://10.0.0.3:1234"


# -- helpers ---------------------------------------------------------------------------
def check(s: GraphIngestion, out: Effects) -> Effects:
    """Validate the whole state after a step and pass the step's output on."""
    s.validate_state()
    return out


def computes(out: Effects, worker: str | None = None) -> list[m.ComputeTask]:
    """The compute-task messages of ``out`` (to one worker, or to any)."""
    result: list[m.ComputeTask] = []
    for addr, msgs in out.workers.items():
        if worker is not None and addr != worker:
            continue
        result.extend(msg for msg in msgs if msg["op"] == "compute-task")
    return result


def computed_keys(out: Effects, worker: str | None = None) -> list[Key]:
    return [msg["key"] for msg in computes(out, worker)]


def compute_of(out: Effects, key: Key) -> tuple[str, m.ComputeTask]:
    """The one worker asked to compute ``key``, and the message."""
    found = [
        (addr, msg)
        for addr, msgs in out.workers.items()
        for msg in msgs
        if msg["op"] == "compute-task" and msg["key"] == key
    ]
    assert len(found) == 1, found
    return found[0]


def freed(out: Effects) -> dict[str, set[Key]]:
    return {addr: set(keys) for addr, keys in out.free.items() if keys}


def client_ops(out: Effects, client: str, op: str) -> list[Msg]:
    """The messages of one op to ``client`` (as plain dicts, to read any field)."""
    return [cast(Msg, msg) for msg in out.clients.get(client, []) if msg["op"] == op]


def done(key: Key, run_id: int, nbytes: int = 100, type_: str = "int", duration: float = 0.1) -> m.TaskFinished:
    """A worker's task-finished report."""
    return m.TaskFinished(
        op="task-finished", key=key, run_id=run_id, nbytes=nbytes, type=type_, start=1000.0, stop=1000.0 + duration
    )


def report_erred(key: Key, run_id: int, exception: Any, traceback: Any, text: str) -> m.WorkerTaskErred:
    """A worker's task-erred report."""
    return m.WorkerTaskErred(
        op="task-erred", key=key, run_id=run_id, exception=exception, traceback=traceback, text=text
    )


def scattered(
    client: str, who_has: Mapping[Key, Sequence[str]], nbytes: Mapping[Key, int], types: Mapping[Key, str]
) -> m.UpdateData:
    """A client's update-data after scattering."""
    return m.UpdateData(op="update-data", client=client, who_has=who_has, nbytes=nbytes, types=types)


def cancel(client: str, keys: Sequence[Key], reason: str, force: bool = False) -> m.CancelKeys:
    """A client's cancel-keys request."""
    return m.CancelKeys(op="cancel-keys", client=client, keys=keys, reason=reason, force=force)


def state(s: GraphIngestion, key: Key) -> str:
    """The state of ``key`` now (a function, so that mypy does not narrow it across steps)."""
    return s.tasks[key].state


def finish(s: GraphIngestion, key: Key, nbytes: int = 100, type_: str = "int", duration: float = 0.1) -> Effects:
    """The worker processing ``key`` reports it finished (with the current run_id)."""
    ts = s.tasks[key]
    assert ts.state == "processing", ts
    assert ts.processing_on is not None
    return check(
        s, s.task_finished(ts.processing_on.address, done(key, ts.run_id, nbytes, type_, duration), f"finish-{key}")
    )


class RecordingStream:
    """Stands in for a worker's BatchedSend: records what send_all sends, in order."""

    def __init__(self) -> None:
        self.sent: list[Msg] = []

    def send(self, *msgs: Msg) -> None:
        self.sent.extend(msgs)

    def send_now(self, *msgs: Msg) -> None:
        self.sent.extend(msgs)
