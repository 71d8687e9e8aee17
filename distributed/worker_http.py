"""A worker's HTTP endpoints (``dashboard=True``): ``/health``, ``/info`` and ``/metrics``.

``GET /health`` answers ``ok`` while the worker runs; ``GET /info`` is
:meth:`Worker.identity` as JSON; ``GET /metrics`` is Prometheus text with the
worker's tasks by state, its threads and the bytes it holds.  The graphical
dashboard of dask.distributed is not part of this package.  The server runs on
the worker's own loop, so handlers read its state between its callbacks.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import dask.config
import tornado.httpserver
import tornado.web

from distributed.http.server import HTTPServerHandle, bind_sockets, json_safe, parse_http_address
from distributed.worker_state import WORKER_TASK_STATES

if TYPE_CHECKING:
    from distributed.worker import Worker

__all__ = ["start_worker_http_server", "worker_prometheus_metrics"]


def worker_prometheus_metrics(worker: Worker) -> str:
    """The worker's metrics in Prometheus text exposition format (version 0.0.4)."""
    ns = str(dask.config.get("distributed.dashboard.prometheus.namespace", "dask") or "dask")
    lines: list[str] = []

    def gauge(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        full = f"{ns}_worker_{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} gauge")
        for labels, value in samples:
            lines.append(f"{full}{labels} {value:g}")

    state = worker.state
    counts = Counter(ts.state for ts in state.tasks.values()) if state is not None else Counter()
    gauge(
        "tasks",
        "Number of tasks known by the worker, by state.",
        [(f'{{state="{s}"}}', counts.get(s, 0)) for s in sorted(WORKER_TASK_STATES)],
    )
    gauge("threads", "Number of threads that run tasks.", [("", worker.nthreads)])
    gauge(
        "memory_bytes",
        "Bytes of task results held (as measured by dask.sizeof).",
        [("", state.nbytes_in_memory if state is not None else 0)],
    )
    return "\n".join(lines) + "\n"


class _WorkerHandler(tornado.web.RequestHandler):
    worker: Worker

    def initialize(self, worker: Worker) -> None:
        self.worker = worker


class _HealthHandler(_WorkerHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.write("ok")


class _InfoHandler(_WorkerHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(json_safe(self.worker.identity())))


class _MetricsHandler(_WorkerHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.write(worker_prometheus_metrics(self.worker))


def _no_log(handler: tornado.web.RequestHandler) -> None:
    """Probes hit these routes often; do not log each request."""


async def start_worker_http_server(worker: Worker, address: str) -> HTTPServerHandle:
    """Serve ``worker``'s HTTP routes at ``address`` (``":0"``, ``"127.0.0.1:8789"``).

    Raises
    ------
    OSError
        When the address cannot be bound (e.g. the port is taken).
    ValueError
        When ``address`` cannot be parsed.
    """
    host, port = parse_http_address(address, default_port=0)
    sockets = bind_sockets(host, port)
    kw = {"worker": worker}
    app = tornado.web.Application(
        [(r"/health/?", _HealthHandler, kw), (r"/info/?", _InfoHandler, kw), (r"/metrics/?", _MetricsHandler, kw)],
        log_function=_no_log,
    )
    server = tornado.httpserver.HTTPServer(app)
    server.add_sockets(sockets)
    return HTTPServerHandle(server, sockets, host)
