"""The scheduler's HTTP routes and metrics.

Routes
------
``GET /health``
    ``ok`` as ``text/plain`` while the server runs (for load balancers and probes).
``GET /info``
    :meth:`Scheduler.identity` as JSON, made JSON-safe (tuple keys become
    strings, non-finite floats become ``null``, unknown objects their ``str``).
``GET /metrics``
    Prometheus text exposition through prometheus_client (see
    :mod:`distributed.http.scheduler_metrics` for the metrics).
``GET /status``, ``/workers``, ``/tasks``, ..., ``/individual-*`` (``/`` redirects to ``/status``)
    The bokeh dashboard (:mod:`distributed.dashboard.scheduler`); without
    bokeh, ``/status`` is a minimal HTML summary.
``GET /individual-plots.json``
    The single-pane pages, title to path, as dask-labextension reads them
    (empty without the dashboard).
``GET /json/...``, ``/sitemap.json``, ``/info/...``
    See :mod:`distributed.http.scheduler_info`.
"""

from __future__ import annotations

import errno
import html
import warnings
from collections import Counter
from typing import TYPE_CHECKING

import tornado.web

from distributed.dashboard.scheduler import IndividualPlotsJSON, individual_plots
from distributed.http.scheduler_info import info_routes
from distributed.http.scheduler_metrics import prometheus_metrics
from distributed.http.server import (
    DEFAULT_HTTP_PORT,
    HTTPServerHandle,
    Route,
    common_routes,
    parse_http_address,
    serve,
)
from distributed.security import http_ssl_context

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["make_routes", "prometheus_metrics", "start_http_server"]


class StatusHandler(tornado.web.RequestHandler):
    """A minimal HTML summary of the scheduler: its workers and its tasks by state."""

    scheduler: Scheduler

    def initialize(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def get(self) -> None:
        s = self.scheduler
        counts = Counter(ts.state for ts in s.tasks.values())
        rows = "".join(
            f"<tr><td>{html.escape(str(addr))}</td><td>{html.escape(str(ws.name))}</td><td>{ws.nthreads}</td></tr>"
            for addr, ws in s.workers.items()
        )
        states = ", ".join(f"{html.escape(k)}: {v}" for k, v in sorted(counts.items())) or "none"
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(
            "<!DOCTYPE html><html><head><title>Dask scheduler</title></head><body>"
            f"<h1>Scheduler {html.escape(s.address)}</h1>"
            f"<p>Workers: {len(s.workers)}, threads: {s.total_nthreads}, tasks: {states}</p>"
            f"<table><tr><th>Address</th><th>Name</th><th>Threads</th></tr>{rows}</table>"
            '<p><a href="info">info</a> | <a href="metrics">metrics</a> | <a href="health">health</a></p>'
            "</body></html>"
        )


def make_routes(scheduler: Scheduler, dashboard: bool = False) -> list[Route]:
    """The routes serving ``scheduler``.

    The common ones, the JSON and info routes, and ``/`` redirecting to ``/status``.

    With ``dashboard`` the bokeh pages (``/status``, ``/workers``, ...)
    are served behind these routes (see :func:`start_http_server`); without
    it ``/status`` is a minimal HTML summary.
    """
    routes: list[Route] = [*common_routes(scheduler.identity, lambda: prometheus_metrics(scheduler))]
    if not dashboard:
        routes.append((r"/status/?", StatusHandler, {"scheduler": scheduler}))
    routes.append((r"/individual-plots\.json", IndividualPlotsJSON, {"plots": individual_plots() if dashboard else {}}))
    routes.append((r"/", tornado.web.RedirectHandler, {"url": "status", "permanent": False}))

    def paths() -> list[str]:
        listed = [_route_path(r[0]) for r in routes]
        if dashboard:
            from distributed.dashboard.scheduler import PAGES

            listed.extend(PAGES)
        return sorted(set(listed))

    routes[-1:-1] = info_routes(scheduler, paths)
    return routes


def _route_path(pattern: str) -> str:
    """A route pattern written as a path: ``/info/worker/(.+)\\.html`` -> ``/info/worker/{}.html``."""
    return pattern.replace("(.+)", "{}").replace("\\", "").removesuffix("/?") or "/"


async def start_http_server(scheduler: Scheduler, address: str | int | None) -> HTTPServerHandle:
    """Serve ``scheduler``'s HTTP routes and dashboard at ``address`` (``":8787"``, ``"127.0.0.1:0"``).

    When the port is taken, serves on a free port instead and warns, as
    dask.distributed does. The bokeh dashboard is served when bokeh can be
    imported. Must be called from the running loop the scheduler uses;
    raises as :func:`~distributed.http.server.serve` does (``ValueError``, or
    ``OSError`` other than a port in use).
    """
    from distributed.dashboard.core import bokeh_available, serve_dashboard

    dashboard = bokeh_available()
    routes = make_routes(scheduler, dashboard=dashboard)
    ctx = http_ssl_context()
    try:
        handle = serve(routes, address, default_port=DEFAULT_HTTP_PORT, ssl_context=ctx)
    except OSError as e:
        host, port = parse_http_address(address, default_port=DEFAULT_HTTP_PORT)
        if e.errno != errno.EADDRINUSE or port == 0:
            raise
        handle = serve(
            routes, f"[{host}]:0" if ":" in host else f"{host}:0", default_port=DEFAULT_HTTP_PORT, ssl_context=ctx
        )
        warnings.warn(
            f"Port {port} is already in use.\n"
            "Perhaps you already have a cluster running?\n"
            f"Hosting the HTTP server on port {handle.port} instead",
            UserWarning,
            stacklevel=2,
        )
    if dashboard:
        from distributed.dashboard.scheduler import start_dashboard

        board = await serve_dashboard(handle, lambda app: start_dashboard(scheduler, app))
        if board is not None:
            scheduler.dashboard_server = board
    return handle
