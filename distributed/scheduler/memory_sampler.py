"""The scheduler's part of :class:`distributed.diagnostics.MemorySampler`: the cluster's memory, sampled by name.

A client starts a sampling under a key of its own with a measure (``process``,
``managed``, ``unmanaged``, ``spilled``: a field of each worker's
:class:`~distributed.scheduler.records.MemoryState`, summed over the workers)
and an interval; the scheduler appends ``(time, bytes)`` every interval until
the client stops it and takes the samples.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from distributed.comm import Comm
from distributed.core import PeriodicCallback, Route, Server
from distributed.protocol import messages as m
from distributed.scheduler.records import WorkerState

__all__ = ["MEASURES", "MemorySamplerExtension"]

#: The measures a sampling may sum over the workers.
MEASURES = frozenset({"process", "managed", "unmanaged", "spilled"})


class MemorySamplerExtension:
    """Samplings of the cluster's memory, by key.

    Parameters
    ----------
    workers
        The scheduler's workers (read at each sample).
    server
        The scheduler, whose loop runs the samplings (they are not among its
        ``periodic_callbacks``: they come and go with clients' blocks).
    """

    def __init__(self, workers: Mapping[str, WorkerState], server: Server) -> None:
        self._workers = workers
        self._server = server
        #: The samples of each running sampling: ``(time.time(), bytes)``.
        self.samples: dict[str, list[tuple[float, int]]] = {}
        self._callbacks: dict[str, PeriodicCallback] = {}

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests the extension answers."""
        return {
            "memory_sampler_start": Route(m.MemorySamplerStart, self.handle_start),
            "memory_sampler_stop": Route(m.MemorySamplerStop, self.handle_stop),
        }

    def measure(self, measure: str) -> int:
        """The cluster's memory now, by ``measure``, summed over the workers."""
        return sum(getattr(ws.memory, measure) for ws in self._workers.values())

    def handle_start(self, comm: Comm, msg: m.MemorySamplerStart) -> None:
        """Start sampling under ``key``: one sample now, then one every ``interval`` seconds.

        Raises
        ------
        ValueError
            For an unknown measure, an interval that is not positive, or a key already sampling.
        """
        key, measure, interval = msg["key"], msg["measure"], float(msg["interval"])
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {sorted(MEASURES)}, got {measure!r}")
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        if key in self.samples:
            raise ValueError(f"A memory sampling under {key!r} runs already")
        samples = self.samples[key] = [(time.time(), self.measure(measure))]

        def sample() -> None:
            samples.append((time.time(), self.measure(measure)))

        callback = self._callbacks[key] = PeriodicCallback(self._server, sample, interval, f"memory-sampler-{key}")
        callback.start()

    def handle_stop(self, comm: Comm, msg: m.MemorySamplerStop) -> list[tuple[float, int]]:
        """Stop sampling under ``key`` and return its samples.

        Raises
        ------
        KeyError
            When nothing samples under ``key``.
        """
        key = msg["key"]
        if key not in self.samples:
            raise KeyError(f"No memory sampling under {key!r}")
        self._callbacks.pop(key).stop()
        return self.samples.pop(key)
