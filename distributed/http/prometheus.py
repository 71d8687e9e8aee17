"""What the scheduler's and the worker's Prometheus metrics share, on top of prometheus_client.

Each node's metrics are a :class:`NodeCollector` subclass
(:mod:`distributed.http.scheduler_metrics`, :mod:`distributed.http.worker_metrics`)
that reads the node's state when scraped and yields metric families; nothing is
counted on the nodes' hot paths for it.  Every node gets a
``prometheus_client.CollectorRegistry`` of its own (:func:`registry_for`), not
the process-wide default one: tests and ``LocalCluster(processes=False)`` run
several schedulers and workers in one process, each with its own ``/metrics``.

Metric names are ``<namespace>_<subsystem>_<name>`` as in dask.distributed, the
namespace from ``distributed.dashboard.prometheus.namespace`` (``dask``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

import dask.config
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from distributed.comm.core import Listener
from distributed.loop_health import LoopHealth

__all__ = [
    "CONTENT_TYPE",
    "NodeCollector",
    "loop_health_metrics",
    "namespace",
    "refused_connection_metrics",
    "registry_for",
    "render",
]

#: The ``Content-Type`` of :func:`render`'s output.
CONTENT_TYPE: str = CONTENT_TYPE_LATEST

N = TypeVar("N")


def namespace() -> str:
    """The metric name prefix: ``distributed.dashboard.prometheus.namespace`` (``dask`` when unset)."""
    return str(dask.config.get("distributed.dashboard.prometheus.namespace", "dask") or "dask")


class NodeCollector(Collector, Generic[N]):
    """A collector of one node's metrics, named ``<namespace>_<subsystem>_<name>``.

    Subclasses set :attr:`subsystem` and implement :meth:`collect`.
    """

    subsystem = ""

    def __init__(self, node: N) -> None:
        # A weak reference: the registry lives in a cache keyed by the node and must not keep it alive.
        self._node = weakref.ref(node)
        self.prefix = f"{namespace()}_{self.subsystem}_"

    @property
    def node(self) -> N | None:
        """The node measured, None once it was garbage-collected."""
        return self._node()

    def name(self, name: str) -> str:
        """The full metric name of ``name``."""
        return self.prefix + name

    def collect(self) -> Iterable[Metric]:
        raise NotImplementedError


_registries: weakref.WeakKeyDictionary[object, CollectorRegistry] = weakref.WeakKeyDictionary()


def registry_for(node: N, collectors: Callable[[N], Iterable[Collector]]) -> CollectorRegistry:
    """The registry of ``node``'s metrics, made with ``collectors(node)`` on first use.

    It also holds prometheus_client's process, platform and garbage-collector
    collectors (``process_*``, ``python_info``, ``python_gc_*``), which the
    default registry would have given, as on dask.distributed's nodes.
    """
    registry = _registries.get(node)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        for collector in collectors(node):
            registry.register(collector)
        _registries[node] = registry
    return registry


def render(registry: CollectorRegistry) -> str:
    """``registry``'s metrics in the Prometheus text exposition format."""
    return generate_latest(registry).decode("utf-8")


def loop_health_metrics(c: NodeCollector[N], health: LoopHealth) -> Iterator[Metric]:
    """The event-loop tick metrics of a node, named as dask.distributed names them where it has them.

    ``tick_duration_maximum_seconds`` is the longest tick since the previous
    scrape (the scrape resets it), as in dask.distributed.
    """
    yield CounterMetricFamily(
        c.name("tick_count"), "Total number of ticks observed since the server started", value=health.count
    )
    yield GaugeMetricFamily(
        c.name("tick_duration_maximum"),
        "Maximum tick duration observed since Prometheus last scraped metrics. Far above "
        "distributed.admin.tick.interval, it shows a blocked event loop.",
        value=health.take_maximum(),
        unit="seconds",
    )
    yield GaugeMetricFamily(
        c.name("tick_duration_last"), "Duration of the last tick", value=health.last_duration, unit="seconds"
    )
    yield GaugeMetricFamily(
        c.name("tick_interval_observed"),
        "Mean tick duration over the last distributed.admin.tick.cycle; "
        "distributed.admin.tick.interval when the event loop keeps up",
        value=health.interval_observed,
        unit="seconds",
    )
    yield CounterMetricFamily(
        c.name("event_loop_blocked_time"),
        "Total time by which ticks came later than the tick interval: time the event loop was blocked",
        value=health.blocked_total,
        unit="seconds",
    )


def refused_connection_metrics(c: NodeCollector[N], listeners: Iterable[Listener]) -> Iterator[Metric]:
    """``tls_refused_connections_total``: connections the node's listeners refused at the TLS handshake.

    Every refusal counts, also those not logged (see :mod:`distributed.comm.refusals`).
    Not labelled by peer: a scan from many addresses would make a series each.
    """
    yield CounterMetricFamily(
        c.name("tls_refused_connections"),
        "Total number of connections refused at the TLS handshake (no or a bad certificate, "
        "clear text, a handshake that never finished) since the server started",
        value=sum(listener.refused_connections for listener in listeners),
    )
