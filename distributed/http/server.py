"""A small tornado HTTP server exposing a scheduler's state.

Routes
------
``GET /health``
    ``ok`` as ``text/plain`` while the server runs (for load balancers and probes).
``GET /info``
    :meth:`Scheduler.identity` as JSON, made JSON-safe (tuple keys become
    strings, non-finite floats become ``null``, unknown objects their ``str``).
``GET /metrics``
    Prometheus text exposition: ``dask_scheduler_workers``,
    ``dask_scheduler_clients`` and ``dask_scheduler_tasks{state=...}``.
``GET /status`` (``/`` redirects there)
    A minimal HTML summary; the full dashboard is not part of this package.

The server runs on the scheduler's own asyncio loop (tornado's IOLoop wraps the
running asyncio loop), so handlers read scheduler state directly without locks:
they run between the scheduler's own callbacks, never concurrently with them.
"""

from __future__ import annotations

import errno
import html
import json
import math
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any

import dask.config
import tornado.httpserver
import tornado.web
from tornado.log import access_log

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = [
    "HTTPServerHandle",
    "bind_sockets",
    "json_safe",
    "parse_http_address",
    "prometheus_metrics",
    "start_http_server",
]

DEFAULT_HTTP_PORT = 8787

#: Task states always reported by ``/metrics``, even at zero, so dashboards see every series.
TASK_STATES = ("released", "waiting", "no-worker", "queued", "processing", "memory", "erred", "forgotten")

#: Client ids the scheduler uses internally rather than for connected clients.
_PSEUDO_CLIENTS = frozenset({"fire-and-forget"})


def parse_http_address(address: str | int | None, default_port: int = DEFAULT_HTTP_PORT) -> tuple[str, int]:
    """Split an HTTP listen address into ``(host, port)``; ``""`` means all interfaces.

    Accepts ``":8787"``, ``"8787"``, ``"127.0.0.1:0"``, ``"[::1]:8787"``,
    ``"localhost"`` and ``"http://host:port"``.

    Raises
    ------
    ValueError
        On a port that is not a number in 0-65535.

    Examples
    --------
    >>> parse_http_address(":8787")
    ('', 8787)
    >>> parse_http_address("127.0.0.1:0")
    ('127.0.0.1', 0)
    """
    if address is None:
        return "", default_port
    if isinstance(address, int):
        host, port_s = "", str(address)
    else:
        text = address.strip()
        if "://" in text:
            text = text.split("://", 1)[1]
        text = text.split("/", 1)[0]
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port_s = rest[1:] if rest.startswith(":") else ""
        elif text.count(":") == 1:
            host, _, port_s = text.partition(":")
        elif ":" in text:
            host, port_s = text, ""  # a bare IPv6 literal
        elif text.isdigit():
            host, port_s = "", text
        else:
            host, port_s = text, ""
    if not port_s:
        return host, default_port
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"Invalid port in HTTP address {address!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"Port out of range in HTTP address {address!r}")
    return host, port


def json_safe(obj: Any) -> Any:
    """``obj`` converted to something :func:`json.dumps` accepts and writes as valid JSON."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {_json_key(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        return [json_safe(v) for v in items]
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    return str(obj)


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return str(key)


def _metric_namespace() -> str:
    return str(dask.config.get("distributed.dashboard.prometheus.namespace", "dask") or "dask")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_metrics(scheduler: Scheduler) -> str:
    """The scheduler's metrics in Prometheus text exposition format (version 0.0.4)."""
    ns = _metric_namespace()
    lines: list[str] = []

    def gauge(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        full = f"{ns}_scheduler_{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} gauge")
        for labels, value in samples:
            lines.append(f"{full}{labels} {value:g}")

    n_clients = sum(1 for c in scheduler.clients if c not in _PSEUDO_CLIENTS)
    gauge("workers", "Number of workers connected.", [("", len(scheduler.workers))])
    gauge("clients", "Number of clients connected.", [("", n_clients)])
    counts = Counter[str](ts.state for ts in scheduler.tasks.values())
    states = list(TASK_STATES) + sorted(s for s in counts if s not in TASK_STATES)
    gauge(
        "tasks",
        "Number of tasks known by the scheduler, by state.",
        [(f'{{state="{_escape_label(s)}"}}', counts.get(s, 0)) for s in states],
    )
    return "\n".join(lines) + "\n"


def bind_sockets(host: str, port: int, backlog: int = 128) -> list[socket.socket]:
    """Listening sockets for every address ``host`` resolves to (all interfaces for ``""``).

    With ``port=0`` the first socket picks a free port and the others (say IPv6
    next to IPv4) reuse it, so one port number reaches them all. A socket that
    fails to bind is closed before the error propagates, as are those already
    bound: nothing leaks when the port is taken.

    Raises
    ------
    OSError
        When an address cannot be bound (e.g. the port is taken).
    """
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    bound_port = port
    try:
        for family, socktype, proto, _, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6) or (family, sockaddr) in seen:
                continue
            seen.add((family, sockaddr))
            if bound_port:
                sockaddr = (sockaddr[0], bound_port, *sockaddr[2:])
            sock = socket.socket(family, socktype, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    # Keep IPv6 sockets off IPv4, which has a socket of its own.
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.setblocking(False)
                sock.bind(sockaddr)
                sock.listen(backlog)
            except OSError as e:
                sock.close()
                # "localhost" may resolve to ::1 on a host without IPv6; IPv4 is enough then.
                if e.errno == errno.EADDRNOTAVAIL and family == socket.AF_INET6:
                    continue
                raise
            sockets.append(sock)
            bound_port = int(sock.getsockname()[1])
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"No address to listen on for host {host!r}")
    return sockets


class _SchedulerHandler(tornado.web.RequestHandler):
    scheduler: Scheduler

    def initialize(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler


class HealthHandler(_SchedulerHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.write("ok")


class InfoHandler(_SchedulerHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(json_safe(self.scheduler.identity())))


class MetricsHandler(_SchedulerHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.write(prometheus_metrics(self.scheduler))


class StatusHandler(_SchedulerHandler):
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


class HTTPServerHandle:
    """A running HTTP server: its bound :attr:`port` and a way to stop it."""

    def __init__(self, server: tornado.httpserver.HTTPServer, sockets: list[socket.socket], host: str) -> None:
        self.server = server
        self.sockets = sockets
        self.host = host
        #: The port actually bound (useful when asked for port 0).
        self.port: int = int(sockets[0].getsockname()[1])
        self._stopped = False

    def stop(self) -> None:
        """Stop accepting connections (idempotent). Open keep-alive connections end with the loop."""
        if self._stopped:
            return
        self._stopped = True
        self.server.stop()

    async def close(self) -> None:
        """Stop accepting connections and close the open ones."""
        self.stop()
        await self.server.close_all_connections()

    def __repr__(self) -> str:
        return f"<HTTPServerHandle {self.host or '*'}:{self.port}{' stopped' if self._stopped else ''}>"


def make_application(scheduler: Scheduler) -> tornado.web.Application:
    """The tornado application serving ``scheduler``'s routes."""
    kw = {"scheduler": scheduler}
    return tornado.web.Application(
        [
            (r"/health/?", HealthHandler, kw),
            (r"/info/?", InfoHandler, kw),
            (r"/metrics/?", MetricsHandler, kw),
            (r"/status/?", StatusHandler, kw),
            (r"/", tornado.web.RedirectHandler, {"url": "status", "permanent": False}),
        ],
        log_function=_quiet_log,
    )


def _quiet_log(handler: tornado.web.RequestHandler) -> None:
    # Access logs for every probe would drown the scheduler's own log; keep errors only.
    status = handler.get_status()
    if status >= 500:
        access_log.error("%d %s %s", status, handler.request.method, handler.request.uri)


async def start_http_server(scheduler: Scheduler, address: str | int | None) -> HTTPServerHandle:
    """Serve ``scheduler``'s HTTP routes at ``address`` (``":8787"``, ``"127.0.0.1:0"``).

    Must be called from the running loop the scheduler uses.

    Raises
    ------
    OSError
        When the address cannot be bound (e.g. the port is taken).
    ValueError
        When ``address`` cannot be parsed.
    """
    host, port = parse_http_address(address)
    sockets = bind_sockets(host, port)
    server = tornado.httpserver.HTTPServer(make_application(scheduler))
    server.add_sockets(sockets)
    return HTTPServerHandle(server, sockets, host)
