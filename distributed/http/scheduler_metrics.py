"""The scheduler's Prometheus metrics (``GET /metrics`` on its HTTP server).

Read when scraped, from counters the scheduler keeps anyway: the per-group
state counts of :class:`~distributed.scheduler.records.TaskGroup` (never the task
table), the workers' last heartbeats, and the event-loop tick statistics.
Names follow dask.distributed where it has the metric:

``dask_scheduler_clients``, ``dask_scheduler_workers{state}``
    Connected clients; workers by state (``idle``, ``partially_saturated``,
    ``saturated``, ``paused_or_retiring``).
``dask_scheduler_tasks{state}``, ``dask_scheduler_tasks_forgotten_total``
    Tasks by state; tasks forgotten so far.
``dask_scheduler_prefix_tasks{task_prefix_name,state}``
    Tasks of each key prefix in each state now (dask.distributed's
    ``prefix_state_totals`` counts transitions instead, which would cost work
    on every transition).
``dask_scheduler_tasks_compute_seconds_total{task_prefix_name}``,
``dask_scheduler_tasks_output_bytes_total{task_prefix_name}``
    Compute time and output bytes of each prefix's finished tasks.
``dask_scheduler_memory_bytes{type}``
    Workers' memory summed: ``managed``, ``unmanaged``, ``spilled``, as their heartbeats reported it.
``dask_scheduler_transfer_incoming_bytes_total``, ``dask_scheduler_transfer_outgoing_bytes_total``
    Bytes the connected workers received from / sent to each other, as their heartbeats reported it.
``dask_scheduler_tick_*``, ``dask_scheduler_event_loop_blocked_time_seconds_total``
    Event-loop health (:func:`distributed.http.prometheus.loop_health_metrics`).
``dask_scheduler_tls_refused_connections_total``
    Connections refused at the TLS handshake, logged or not (:mod:`distributed.comm.refusals`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from distributed.core import Status
from distributed.http.prometheus import (
    NodeCollector,
    loop_health_metrics,
    refused_connection_metrics,
    registry_for,
    render,
)
from distributed.protocol.messages import FIRE_AND_FORGET
from distributed.scheduler.records import ALL_TASK_STATES, TaskStateName

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["TASK_STATES", "SchedulerMetricCollector", "prometheus_metrics"]

#: Task states reported by ``dask_scheduler_tasks``, even at zero, so dashboards see every series.
TASK_STATES: tuple[TaskStateName, ...] = ("released", "waiting", "no-worker", "queued", "processing", "memory", "erred")

#: Client ids the scheduler uses internally rather than for connected clients.
PSEUDO_CLIENTS = frozenset({FIRE_AND_FORGET})


class SchedulerMetricCollector(NodeCollector["Scheduler"]):
    """Collects a scheduler's metrics when its registry is scraped."""

    subsystem = "scheduler"

    def collect(self) -> Iterator[Metric]:
        s = self.node
        if s is None:
            return
        yield GaugeMetricFamily(
            self.name("clients"),
            "Number of clients connected",
            value=sum(1 for c in s.clients if c not in PSEUDO_CLIENTS),
        )
        yield self._workers(s)
        yield from self._tasks(s)
        yield from self._memory(s)
        yield from loop_health_metrics(self, s.loop_health)
        yield from refused_connection_metrics(self, s.listeners)

    def _workers(self, s: Scheduler) -> Metric:
        idle = partial = saturated = other = 0
        for ws in s.workers.values():
            if ws.status != Status.running:
                other += 1
            elif not ws.processing:
                idle += 1
            elif len(ws.processing) < ws.nthreads:
                partial += 1
            else:
                saturated += 1
        workers = GaugeMetricFamily(self.name("workers"), "Number of workers known by scheduler", labels=["state"])
        workers.add_metric(["idle"], idle)
        workers.add_metric(["partially_saturated"], partial)
        workers.add_metric(["saturated"], saturated)
        workers.add_metric(["paused_or_retiring"], other)
        return workers

    def _tasks(self, s: Scheduler) -> Iterator[Metric]:
        totals = dict.fromkeys(ALL_TASK_STATES, 0)
        by_prefix = GaugeMetricFamily(
            self.name("prefix_tasks"),
            "Number of tasks of each key prefix in each state",
            labels=["task_prefix_name", "state"],
        )
        compute = CounterMetricFamily(
            self.name("tasks_compute"),
            "Total compute time of the finished tasks of each prefix",
            labels=["task_prefix_name"],
            unit="seconds",
        )
        output = CounterMetricFamily(
            self.name("tasks_output"),
            "Total size of the results of the finished tasks of each prefix",
            labels=["task_prefix_name"],
            unit="bytes",
        )
        for name, tp in s.task_prefixes.items():
            states = tp.state_counts()
            duration, nbytes = tp.totals()
            for state, n in states.items():
                totals[state] += n
                if n and state != "forgotten":
                    by_prefix.add_metric([name, state], n)
            compute.add_metric([name], duration)
            output.add_metric([name], nbytes)
        tasks = GaugeMetricFamily(self.name("tasks"), "Number of tasks known by scheduler", labels=["state"])
        for state in TASK_STATES:
            tasks.add_metric([state], totals[state])
        yield tasks
        yield CounterMetricFamily(
            self.name("tasks_forgotten"),
            "Total number of tasks forgotten by the scheduler (done with and released)",
            value=totals["forgotten"],
        )
        yield by_prefix
        yield compute
        yield output

    def _memory(self, s: Scheduler) -> Iterator[Metric]:
        managed = unmanaged = spilled = incoming = outgoing = 0
        for ws in s.workers.values():
            mem = ws.memory
            managed += mem.managed
            unmanaged += mem.unmanaged
            spilled += mem.spilled
            transfer = ws.metrics.get("transfer")
            if transfer:
                incoming += int(transfer.get("incoming_bytes_total", 0) or 0)
                outgoing += int(transfer.get("outgoing_bytes_total", 0) or 0)
        memory = GaugeMetricFamily(
            self.name("memory_bytes"),
            "Memory of the workers summed, as their heartbeats reported it",
            labels=["type"],
        )
        memory.add_metric(["managed"], managed)
        memory.add_metric(["unmanaged"], unmanaged)
        memory.add_metric(["spilled"], spilled)
        yield memory
        yield CounterMetricFamily(
            self.name("transfer_incoming_bytes"),
            "Total bytes the connected workers received from other workers, as their heartbeats reported it",
            value=incoming,
        )
        yield CounterMetricFamily(
            self.name("transfer_outgoing_bytes"),
            "Total bytes the connected workers sent to other workers, as their heartbeats reported it",
            value=outgoing,
        )


def prometheus_metrics(scheduler: Scheduler) -> str:
    """The scheduler's metrics in the Prometheus text exposition format."""
    return render(registry_for(scheduler, lambda s: [SchedulerMetricCollector(s)]))
