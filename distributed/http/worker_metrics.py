"""A worker's Prometheus metrics (``GET /metrics`` on its HTTP server, ``dashboard=True``).

Read when scraped from the worker's state, its transfer counters, its spill
buffer and its event-loop tick statistics; names follow dask.distributed:

``dask_worker_tasks{state}``, ``dask_worker_threads``
    Tasks by state (spilled results count as ``disk``, not ``memory``); threads that run tasks.
``dask_worker_memory_bytes{type}``
    ``managed`` (results in memory, by sizeof), ``unmanaged`` (the rest of the
    process's RSS), ``spilled`` (results on disk, bytes on disk).
``dask_worker_transfer_incoming_bytes``, ``dask_worker_transfer_incoming_count``
    Data being fetched from other workers now (bytes by sizeof, peers asked).
``dask_worker_transfer_incoming_bytes_total``, ``dask_worker_transfer_incoming_count_total``,
``dask_worker_transfer_outgoing_bytes_total``, ``dask_worker_transfer_outgoing_count_total``
    Data received from and sent to other workers since the worker started.
``dask_worker_spill_bytes_total{activity}``, ``dask_worker_spill_count_total{activity}``
    ``disk_write`` and ``disk_read`` of the spill buffer, when spilling is on.
``dask_worker_spill_disk_errors``
    1 once a spill write failed (a full or read-only disk) and spilling is off, else 0.
``dask_worker_tick_*``, ``dask_worker_event_loop_blocked_time_seconds_total``
    Event-loop health (:func:`distributed.http.prometheus.loop_health_metrics`).
``dask_worker_tls_refused_connections_total``
    Connections refused at the TLS handshake, logged or not (:mod:`distributed.comm.refusals`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from distributed.http.prometheus import (
    NodeCollector,
    loop_health_metrics,
    refused_connection_metrics,
    registry_for,
    render,
)
from distributed.spill import SpillBuffer
from distributed.worker.state_machine import WORKER_TASK_STATES

if TYPE_CHECKING:
    from distributed.worker import Worker

__all__ = ["WorkerMetricCollector", "worker_prometheus_metrics"]


class WorkerMetricCollector(NodeCollector["Worker"]):
    """Collects a worker's metrics when its registry is scraped."""

    subsystem = "worker"

    def __init__(self, node: Worker) -> None:
        super().__init__(node)
        self._process = psutil.Process()

    def collect(self) -> Iterator[Metric]:
        w = self.node
        if w is None:
            return
        state = w.state
        data = w.data
        spill = data if isinstance(data, SpillBuffer) else None

        counts: Counter[str] = Counter(ts.state for ts in state.tasks.values()) if state is not None else Counter()
        n_spilled = len(spill.disk) if spill is not None else 0
        counts["memory"] -= n_spilled
        counts["disk"] = n_spilled
        tasks = GaugeMetricFamily(self.name("tasks"), "Number of tasks at worker", labels=["state"])
        for s in sorted(WORKER_TASK_STATES | {"disk"}):
            tasks.add_metric([s], max(counts.get(s, 0), 0))
        yield tasks
        yield GaugeMetricFamily(self.name("threads"), "Number of worker threads", value=w.nthreads)

        spilled_memory = spill.spilled.memory if spill is not None else 0
        spilled_disk = spill.spilled.disk if spill is not None else 0
        try:
            process = self._process.memory_info().rss
        except psutil.Error:
            process = 0
        held = state.nbytes_in_memory if state is not None else 0
        managed = max(min(process, held - spilled_memory), 0)
        memory = GaugeMetricFamily(self.name("memory_bytes"), "Memory breakdown", labels=["type"])
        memory.add_metric(["managed"], managed)
        memory.add_metric(["unmanaged"], max(process - managed, 0))
        memory.add_metric(["spilled"], spilled_disk)
        yield memory

        in_flight_bytes = 0
        in_flight_peers = 0
        if state is not None:
            in_flight_peers = len(state.in_flight_workers)
            for batch in state.in_flight_workers.values():
                in_flight_bytes += sum(ts.nbytes for ts in batch)
        yield GaugeMetricFamily(
            self.name("transfer_incoming_bytes"),
            "Total size of open data transfers from other workers",
            value=in_flight_bytes,
        )
        yield GaugeMetricFamily(
            self.name("transfer_incoming_count"),
            "Number of open data transfers from other workers",
            value=in_flight_peers,
        )
        yield CounterMetricFamily(
            self.name("transfer_incoming_count"),
            "Total number of data transfers from other workers since the worker was started",
            value=w.incoming_transfer_count,
        )
        yield CounterMetricFamily(
            self.name("transfer_incoming_bytes"),
            "Total size (by sizeof) of data received from other workers since the worker was started",
            value=w.transfer_incoming_bytes_total,
        )
        yield CounterMetricFamily(
            self.name("transfer_outgoing_count"),
            "Total number of data transfers to other workers since the worker was started",
            value=w.outgoing_transfer_count,
        )
        yield CounterMetricFamily(
            self.name("transfer_outgoing_bytes"),
            "Total size (by sizeof) of data sent to other workers since the worker was started",
            value=w.transfer_outgoing_bytes_total,
        )

        if spill is not None:
            activity = spill.activity
            spill_bytes = CounterMetricFamily(
                self.name("spill_bytes"),
                "Total size on disk of values spilled and read back since the worker was started",
                labels=["activity"],
            )
            spill_bytes.add_metric(["disk_write"], activity.write_bytes)
            spill_bytes.add_metric(["disk_read"], activity.read_bytes)
            yield spill_bytes
            spill_count = CounterMetricFamily(
                self.name("spill_count"),
                "Total number of values spilled and read back since the worker was started",
                labels=["activity"],
            )
            spill_count.add_metric(["disk_write"], activity.write_count)
            spill_count.add_metric(["disk_read"], activity.read_count)
            yield spill_count
            yield GaugeMetricFamily(
                self.name("spill_disk_errors"),
                "1 once writing a spilled value failed (a full or read-only disk) and spilling stopped, else 0",
                value=int(spill.disk_error is not None),
            )

        yield from loop_health_metrics(self, w.loop_health)
        yield from refused_connection_metrics(self, w.listeners)


def worker_prometheus_metrics(worker: Worker) -> str:
    """The worker's metrics in the Prometheus text exposition format."""
    return render(registry_for(worker, lambda w: [WorkerMetricCollector(w)]))
