"""A worker's HTTP server: ``/health``, ``/info``, ``/metrics`` and, with ``dashboard=True``, its dashboard.

``GET /health`` answers ``ok`` while the worker runs; ``GET /info`` is
:meth:`Worker.identity` as JSON; ``GET /metrics`` is Prometheus text (see
:mod:`distributed.http.worker_metrics` for the metrics).  With the dashboard,
the bokeh pages of :mod:`distributed.dashboard.worker` (``/status``,
``/system``, ``/profile``, ``/profile-server``, ``/counters``) are served
behind these routes, and ``/`` redirects to ``/status``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import tornado.web

from distributed.http.server import HTTPServerHandle, Route, common_routes, serve
from distributed.http.worker_metrics import worker_prometheus_metrics
from distributed.security import http_ssl_context

if TYPE_CHECKING:
    from distributed.dashboard.worker import WorkerDashboard
    from distributed.worker import Worker

__all__ = ["start_worker_http_server", "worker_prometheus_metrics"]

logger = logging.getLogger(__name__)


async def start_worker_http_server(
    worker: Worker, address: str, dashboard: bool = False
) -> tuple[HTTPServerHandle, WorkerDashboard | None]:
    """Serve ``worker``'s HTTP routes at ``address``, and its dashboard too with ``dashboard``.

    ``address`` is as ``":0"`` or ``"127.0.0.1:8789"``.  Returns the server
    and the dashboard (None without one, or when bokeh cannot be imported: as
    in dask.distributed, the worker then runs without it, and says so in its
    log).  Stopping the server closes the dashboard.
    HTTPS when ``distributed.scheduler.dashboard.tls.cert`` is set (as in
    dask.distributed, the same setting serves both).  Must be called from
    the worker's running loop; raises as :func:`~distributed.http.server.serve`
    does (``OSError``, ``ValueError``).
    """
    from distributed.dashboard.core import bokeh_available, serve_dashboard

    pages = dashboard and bokeh_available()
    if dashboard and not pages:
        logger.warning("The worker's dashboard needs bokeh 3.1 or newer; serving /health, /info and /metrics only")
    routes: list[Route] = common_routes(worker.identity, lambda: worker_prometheus_metrics(worker))
    if pages:
        routes.append((r"/", tornado.web.RedirectHandler, {"url": "status", "permanent": False}))
    handle = serve(routes, address, default_port=0, ssl_context=http_ssl_context())
    if not pages:
        return handle, None
    from distributed.dashboard.worker import start_worker_dashboard

    return handle, await serve_dashboard(handle, lambda app: start_worker_dashboard(worker, app))
