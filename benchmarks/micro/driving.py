"""Run a scheduler's work to its end without workers: each ``compute-task`` it sends is answered as finished."""

from __future__ import annotations

from collections import deque
from typing import Any


def finish_all(s: Any, out: Any, stimulus_id: str) -> int:
    """Answer every ``compute-task`` in ``out`` (an ``Effects``), and in what those answers bring, as finished.

    Returns the number of tasks finished.
    """
    from distributed.protocol import messages as m

    todo: deque[tuple[str, Any]] = deque(
        (a, msg) for a, msgs in out.workers.items() for msg in msgs if msg["op"] == "compute-task"
    )
    finished = 0
    while todo:
        addr, msg = todo.popleft()
        report = m.TaskFinished(
            op="task-finished", key=msg["key"], run_id=msg["run_id"], nbytes=8, type="int", start=0.0, stop=0.001
        )
        out = s.task_finished(addr, report, stimulus_id)
        finished += 1
        for a, msgs in out.workers.items():
            todo.extend((a, x) for x in msgs if x["op"] == "compute-task")
    return finished
