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
``GET /status`` (``/`` redirects there)
    A minimal HTML summary; the full dashboard is not part of this package.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import TYPE_CHECKING

import tornado.web

from distributed.http.scheduler_metrics import prometheus_metrics
from distributed.http.server import DEFAULT_HTTP_PORT, HTTPServerHandle, Route, common_routes, serve

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


def make_routes(scheduler: Scheduler) -> list[Route]:
    """The routes serving ``scheduler``: the common ones, ``/status``, and ``/`` redirecting to it."""
    return [
        *common_routes(scheduler.identity, lambda: prometheus_metrics(scheduler)),
        (r"/status/?", StatusHandler, {"scheduler": scheduler}),
        (r"/", tornado.web.RedirectHandler, {"url": "status", "permanent": False}),
    ]


async def start_http_server(scheduler: Scheduler, address: str | int | None) -> HTTPServerHandle:
    """Serve ``scheduler``'s HTTP routes at ``address`` (``":8787"``, ``"127.0.0.1:0"``).

    Must be called from the running loop the scheduler uses; raises as
    :func:`~distributed.http.server.serve` does (``OSError``, ``ValueError``).
    """
    return serve(make_routes(scheduler), address, default_port=DEFAULT_HTTP_PORT)
