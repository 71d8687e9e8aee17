"""A worker's HTTP routes and metrics (``dashboard=True``): ``/health``, ``/info`` and ``/metrics``.

``GET /health`` answers ``ok`` while the worker runs; ``GET /info`` is
:meth:`Worker.identity` as JSON; ``GET /metrics`` is Prometheus text with the
worker's tasks by state, its threads and the bytes it holds.  The graphical
dashboard of dask.distributed is not part of this package.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from distributed.http.server import HTTPServerHandle, PrometheusText, common_routes, serve
from distributed.worker_state import WORKER_TASK_STATES

if TYPE_CHECKING:
    from distributed.worker import Worker

__all__ = ["start_worker_http_server", "worker_prometheus_metrics"]


def worker_prometheus_metrics(worker: Worker) -> str:
    """The worker's metrics in Prometheus text exposition format (version 0.0.4)."""
    out = PrometheusText("worker")
    state = worker.state
    counts = Counter(ts.state for ts in state.tasks.values()) if state is not None else Counter()
    out.labelled_gauge(
        "tasks",
        "Number of tasks known by the worker, by state.",
        "state",
        [(s, counts.get(s, 0)) for s in sorted(WORKER_TASK_STATES)],
    )
    out.gauge("threads", "Number of threads that run tasks.", worker.nthreads)
    out.gauge(
        "memory_bytes",
        "Bytes of task results held (as measured by dask.sizeof).",
        state.nbytes_in_memory if state is not None else 0,
    )
    return out.text()


async def start_worker_http_server(worker: Worker, address: str) -> HTTPServerHandle:
    """Serve ``worker``'s HTTP routes at ``address`` (``":0"``, ``"127.0.0.1:8789"``).

    Must be called from the worker's running loop; raises as
    :func:`~distributed.http.server.serve` does (``OSError``, ``ValueError``).
    """
    return serve(common_routes(worker.identity, lambda: worker_prometheus_metrics(worker)), address, default_port=0)
