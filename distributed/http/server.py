"""What the scheduler's and the worker's HTTP servers share.

Each node states its own routes and metrics (:mod:`distributed.http.scheduler`,
:mod:`distributed.http.worker`); this module has the rest: parsing the listen
address, binding one port on every address of a host, the handle that stops the
server, and the ``/health``, ``/info`` (JSON) and ``/metrics`` handlers (the
metrics themselves are collected through prometheus_client, see
:mod:`distributed.http.prometheus`).

A server runs on its node's own asyncio loop (tornado's IOLoop wraps the running
asyncio loop), so handlers read the node's state directly without locks: they
run between the node's own callbacks, never concurrently with them.
"""

from __future__ import annotations

import errno
import json
import math
import socket
import ssl
from collections.abc import Callable
from typing import Any, TypeAlias

import tornado.httpserver
import tornado.web
from tornado.log import access_log

from distributed.http.prometheus import CONTENT_TYPE

__all__ = [
    "DEFAULT_HTTP_PORT",
    "HTTPServerHandle",
    "HealthHandler",
    "InfoHandler",
    "MetricsHandler",
    "Route",
    "bind_sockets",
    "common_routes",
    "json_safe",
    "parse_http_address",
    "serve",
]

#: The scheduler's HTTP port when none is given, as in dask.distributed.
DEFAULT_HTTP_PORT = 8787

#: One tornado route: path pattern, handler class and the keywords its ``initialize`` takes.
Route: TypeAlias = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]


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


class HealthHandler(tornado.web.RequestHandler):
    """``GET``: ``ok`` as plain text while the server runs."""

    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.write("ok")


class InfoHandler(tornado.web.RequestHandler):
    """``GET``: what ``info()`` returns, made JSON-safe (:func:`json_safe`), as JSON."""

    info: Callable[[], Any]

    def initialize(self, info: Callable[[], Any]) -> None:
        self.info = info

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(json_safe(self.info())))


class MetricsHandler(tornado.web.RequestHandler):
    """``GET``: what ``metrics()`` returns, as Prometheus text (see :mod:`distributed.http.prometheus`)."""

    metrics: Callable[[], str]

    def initialize(self, metrics: Callable[[], str]) -> None:
        self.metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.write(self.metrics())


def common_routes(info: Callable[[], Any], metrics: Callable[[], str]) -> list[Route]:
    """``/health``, ``/info`` (``info()`` as JSON) and ``/metrics`` (``metrics()``), each also with a trailing slash."""
    return [
        (r"/health/?", HealthHandler, {}),
        (r"/info/?", InfoHandler, {"info": info}),
        (r"/metrics/?", MetricsHandler, {"metrics": metrics}),
    ]


class HTTPServerHandle:
    """A running HTTP server: its bound :attr:`port` and a way to stop it."""

    def __init__(
        self,
        server: tornado.httpserver.HTTPServer,
        sockets: list[socket.socket],
        host: str,
        application: tornado.web.Application | None = None,
        scheme: str = "http",
    ) -> None:
        self.server = server
        #: ``"https"`` when served over TLS, else ``"http"``.
        self.scheme = scheme
        self.sockets = sockets
        self.host = host
        #: The tornado application serving the routes (more can be added to it while it runs).
        self.application = application
        #: The port actually bound (useful when asked for port 0).
        self.port: int = int(sockets[0].getsockname()[1])
        #: Called once when the server stops, e.g. to end what was served behind it.
        self.on_stop: list[Callable[[], None]] = []
        self._stopped = False

    def stop(self) -> None:
        """Stop accepting connections (idempotent). Open keep-alive connections end with the loop."""
        if self._stopped:
            return
        self._stopped = True
        self.server.stop()
        for callback in self.on_stop:
            callback()

    async def close(self) -> None:
        """Stop accepting connections and close the open ones."""
        self.stop()
        await self.server.close_all_connections()

    def __repr__(self) -> str:
        return f"<HTTPServerHandle {self.host or '*'}:{self.port}{' stopped' if self._stopped else ''}>"


def _quiet_log(handler: tornado.web.RequestHandler) -> None:
    # Access logs for every probe would drown the node's own log; keep errors only.
    status = handler.get_status()
    if status >= 500:
        access_log.error("%d %s %s", status, handler.request.method, handler.request.uri)


def serve(
    routes: list[Route],
    address: str | int | None,
    default_port: int = DEFAULT_HTTP_PORT,
    ssl_context: ssl.SSLContext | None = None,
) -> HTTPServerHandle:
    """Serve ``routes`` at ``address`` (see :func:`parse_http_address`); call it from the node's running loop.

    With ``ssl_context`` the server speaks HTTPS only (a plain HTTP request
    fails its TLS handshake and is dropped).

    Raises
    ------
    OSError
        When the address cannot be bound (e.g. the port is taken).
    ValueError
        When ``address`` cannot be parsed.
    """
    host, port = parse_http_address(address, default_port=default_port)
    sockets = bind_sockets(host, port)
    application = tornado.web.Application(routes, log_function=_quiet_log)
    server = tornado.httpserver.HTTPServer(application, ssl_options=ssl_context)
    server.add_sockets(sockets)
    return HTTPServerHandle(server, sockets, host, application, "https" if ssl_context is not None else "http")
