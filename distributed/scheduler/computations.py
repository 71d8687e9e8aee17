"""Computations: what a cluster worked on, one batch of graphs at a time (``Scheduler.computations``).

A computation starts with the first graph a client submits while the cluster
has nothing to do, and takes in every graph submitted until it is idle again.
It keeps the task groups of its tasks (their states, start and stop) and the
code that submitted them: with ``distributed.diagnostics.computations.nframes``
above 0 a client sends the source of that many frames of its caller's stack
(see :mod:`distributed.client.source_code`).  The scheduler keeps the last
``distributed.diagnostics.computations.max-history`` computations.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from distributed.scheduler.records import TaskGroup, TaskState

__all__ = ["Computation", "ComputationLog", "SourceCode"]

#: One frame's source as a client sends it: ``(code, lineno_frame, lineno_relative, filename)``.
SourceCode = tuple[str, int, int, str]


class Computation:
    """The task groups of graphs submitted from one idle moment of the cluster to the next, and their code."""

    __slots__ = ("_id", "start", "groups", "code")

    def __init__(self) -> None:
        self._id: str | None = None
        #: When the first graph arrived (``time.time()``).
        self.start = time.time()
        self.groups: set[TaskGroup] = set()
        #: The code of each graph that brought tasks (each distinct stack once), in order.
        self.code: list[tuple[SourceCode, ...]] = []

    def __repr__(self) -> str:
        return f"<Computation {self.id}: {len(self.groups)} task groups>"

    @property
    def id(self) -> str:
        """A unique id (made when first asked for: a serial client starts a computation per round trip)."""
        if self._id is None:
            self._id = uuid.uuid4().hex
        return self._id

    @property
    def states(self) -> dict[str, int]:
        """Tasks of its groups in each state."""
        out: dict[str, int] = {}
        for tg in self.groups:
            for state, n in tg.states.items():
                out[state] = out.get(state, 0) + n
        return out

    @property
    def stop(self) -> float | None:
        """When its last task finished; None before any did."""
        stops = [tg.stop for tg in self.groups if tg.stop]
        return max(stops) if stops else None

    def add_code(self, code: Sequence[Any]) -> None:
        """Remember the code of a graph (a stack already seen is not kept twice)."""
        frames = tuple((str(c[0]), int(c[1]), int(c[2]), str(c[3])) for c in code)
        if frames and frames not in self.code:
            self.code.append(frames)


class ComputationLog:
    """The last ``max_history`` computations, the newest last.

    Parameters
    ----------
    max_history
        How many to keep (0: none is recorded).
    """

    def __init__(self, max_history: int) -> None:
        if max_history < 0:
            raise ValueError(f"distributed.diagnostics.computations.max-history must be 0 or more, got {max_history}")
        self.computations: deque[Computation] = deque(maxlen=max_history)

    def observe(self, new: Iterable[TaskState], code: Sequence[Any] | None, idle: bool) -> None:
        """Take in a graph's new tasks; a new computation starts when the cluster was ``idle`` before it."""
        computations = self.computations
        if computations.maxlen == 0:
            return
        if idle or not computations:
            computations.append(Computation())
        computation = computations[-1]
        if code:
            computation.add_code(code)
        groups = computation.groups
        last: TaskGroup | None = None
        for ts in new:
            group = ts.group
            if group is not last:  # a graph's tasks come group by group: one set lookup per run of them
                groups.add(group)
                last = group
