"""A worker's HTTP routes and metrics (``dashboard=True``): ``/health``, ``/info`` and ``/metrics``.

``GET /health`` answers ``ok`` while the worker runs; ``GET /info`` is
:meth:`Worker.identity` as JSON; ``GET /metrics`` is Prometheus text (see
:mod:`distributed.http.worker_metrics` for the metrics).  The graphical
dashboard of dask.distributed is not part of this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distributed.http.server import HTTPServerHandle, common_routes, serve
from distributed.http.worker_metrics import worker_prometheus_metrics
from distributed.security import http_ssl_context

if TYPE_CHECKING:
    from distributed.worker import Worker

__all__ = ["start_worker_http_server", "worker_prometheus_metrics"]


async def start_worker_http_server(worker: Worker, address: str) -> HTTPServerHandle:
    """Serve ``worker``'s HTTP routes at ``address`` (``":0"``, ``"127.0.0.1:8789"``).

    HTTPS when ``distributed.scheduler.dashboard.tls.cert`` is set (as in
    dask.distributed, the same setting serves both).  Must be called from
    the worker's running loop; raises as
    :func:`~distributed.http.server.serve` does (``OSError``, ``ValueError``).
    """
    routes = common_routes(worker.identity, lambda: worker_prometheus_metrics(worker))
    return serve(routes, address, default_port=0, ssl_context=http_ssl_context())
