"""A bokeh server application inside a server's own tornado application: the scheduler's, or a worker's.

Bokeh's server (``BokehTornado``) is a tornado application; it is put behind
the server's routes as their fallback, so the pages (``/status``,
``/workers``, ..., each a bokeh document per browser session), their websockets and
BokehJS's static files (``/static/...``, from the installed bokeh package: no
CDN) are served by the same server, on the same port and loop, as ``/health``
and the JSON routes. Documents update themselves with periodic callbacks on
that loop, at ``distributed.dashboard.update-interval``; these read the
node's state directly, between the node's own callbacks.

:class:`BokehDashboard` is generic over the node its pages are given: the
scheduler (:mod:`distributed.dashboard.scheduler`), or a worker's dashboard,
which holds the worker and what its pages share
(:mod:`distributed.dashboard.worker`).  It imports nothing of either.

Configuration: ``distributed.scheduler.dashboard.bokeh-application`` holds
keywords for ``BokehTornado`` (as in dask.distributed, for workers too), among
them ``allow_websocket_origin`` (hosts whose pages may open the websocket;
``["*"]`` by default).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

import dask.config
import tornado.routing
import tornado.web
from dask.utils import parse_timedelta
from tornado.ioloop import IOLoop

if TYPE_CHECKING:
    from bokeh.document import Document
    from bokeh.server.session import ServerSession
    from bokeh.server.tornado import BokehTornado
    from typing_extensions import TypeVar as TypeVarWithDefault

    from distributed.http.server import HTTPServerHandle
    from distributed.scheduler import Scheduler

    #: What a dashboard's pages are given: the scheduler unless said otherwise.
    NodeT = TypeVarWithDefault("NodeT", default="Scheduler")
else:
    NodeT = TypeVar("NodeT")

__all__ = ["TICKS_KEPT", "BokehDashboard", "NodeT", "Page", "bokeh_available", "serve_dashboard", "update_interval_ms"]

logger = logging.getLogger(__name__)

#: Durations of periodic updates kept per page path (:meth:`BokehDashboard.tick_durations`).
TICKS_KEPT = 10_000

#: A page: fills a new bokeh document (one per browser session) with what it shows of the node.
Page: TypeAlias = Callable[[NodeT, "Document"], None]

#: ``BokehTornado`` keywords that ``bokeh-application`` may set besides ``allow_websocket_origin``.
_BOKEH_KEYWORDS = frozenset(
    {
        "keep_alive_milliseconds",
        "check_unused_sessions_milliseconds",
        "unused_session_lifetime_milliseconds",
        "websocket_max_message_size_bytes",
    }
)


def bokeh_available() -> bool:
    """Whether bokeh (3.1 or newer) can be imported, so that the dashboard can be served."""
    try:
        import bokeh
    except ImportError:
        return False
    major, minor = (int(p) for p in bokeh.__version__.split(".")[:2])
    return (major, minor) >= (3, 1)


def update_interval_ms() -> int:
    """How often, in milliseconds, an open page re-reads its node (``distributed.dashboard.update-interval``)."""
    seconds = parse_timedelta(dask.config.get("distributed.dashboard.update-interval"), default="ms")
    if seconds is None or seconds <= 0:
        raise ValueError("distributed.dashboard.update-interval must be a positive duration")
    return max(int(seconds * 1000), 50)


def _bokeh_options() -> dict[str, Any]:
    options = dict(dask.config.get("distributed.scheduler.dashboard.bokeh-application") or {})
    unknown = set(options) - _BOKEH_KEYWORDS - {"allow_websocket_origin"}
    if unknown:
        raise ValueError(f"distributed.scheduler.dashboard.bokeh-application: unsupported keys {sorted(unknown)}")
    return options


def _log_errors_only(handler: tornado.web.RequestHandler) -> None:
    # A log line for every static file or 404 would drown the server's log.
    if handler.get_status() >= 500:
        logger.error("%d %s %s", handler.get_status(), handler.request.method, handler.request.uri)


def _make_bokeh_tornado(applications: Mapping[str, Any], **kwargs: Any) -> BokehTornado:
    """A ``BokehTornado`` that remembers its open websockets, so that closing the dashboard can close them."""
    import weakref

    from bokeh.server.tornado import BokehTornado

    class _Tornado(BokehTornado):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.websockets: weakref.WeakSet[Any] = weakref.WeakSet()

        def new_connection(self, protocol: Any, socket: Any, application_context: Any, session: Any) -> Any:
            self.websockets.add(socket)
            return super().new_connection(protocol, socket, application_context, session)

    return _Tornado(applications, **kwargs)


def _run_page(page: Page[NodeT], node: NodeT, doc: Document) -> None:
    page(node, doc)


class BokehDashboard(Generic[NodeT]):
    """A dashboard's bokeh pages, served behind an existing tornado application.

    Parameters
    ----------
    node
        What each page is given, with the new document to fill: the
        scheduler, or what a worker's pages read (the worker, and the state
        its pages share).
    pages
        URL path (``"/status"``) to the function that fills a new document.
    """

    def __init__(self, node: NodeT, pages: Mapping[str, Page[NodeT]]) -> None:
        from bokeh.application import Application
        from bokeh.application.handlers.function import FunctionHandler

        self.node = node
        self.paths = list(pages)
        #: How often open pages update (a bad interval fails here, not in every page a browser opens).
        self.interval_ms = update_interval_ms()
        options = _bokeh_options()
        origins = [str(o) for o in options.pop("allow_websocket_origin", ["*"]) or []]
        applications = {
            path: Application(FunctionHandler(functools.partial(_run_page, page, node))) for path, page in pages.items()
        }
        self.bokeh: BokehTornado = _make_bokeh_tornado(
            applications,
            extra_websocket_origins=origins,
            use_index=False,
            redirect_root=False,
            log_function=_log_errors_only,
            **options,
        )
        self._started = False
        #: Per page path: (wall, CPU) seconds of its documents' last periodic updates.
        self._ticks: dict[str, deque[tuple[float, float]]] = {}

    def record_tick(self, path: str, seconds: float, cpu_seconds: float) -> None:
        """Note that an update of a ``path`` page took ``seconds`` (``cpu_seconds`` of the loop's thread's CPU).

        The last :data:`TICKS_KEPT` are kept per path.
        """
        ticks = self._ticks.get(path)
        if ticks is None:
            ticks = self._ticks[path] = deque(maxlen=TICKS_KEPT)
        ticks.append((seconds, cpu_seconds))

    def tick_durations(self, path: str | None = None, *, cpu: bool = False) -> list[float]:
        """How long the periodic updates of ``path``'s pages took, in seconds, oldest first (of all pages: None).

        Each update runs on the node's loop: this is what a page costs the
        node, tick by tick. By default, wall-clock time (what the
        loop waited, including time the process was not running); with
        ``cpu``, the CPU time the loop's thread spent.
        """
        i = 1 if cpu else 0
        if path is None:
            return [t[i] for ticks in self._ticks.values() for t in ticks]
        return [t[i] for t in self._ticks.get(path, ())]

    def attach(self, app: tornado.web.Application) -> None:
        """Serve the pages behind ``app``: any path ``app`` does not route goes to bokeh.

        Starts bokeh's own housekeeping (dropping sessions whose browser left)
        on the current loop.
        """
        self.bokeh.initialize(IOLoop.current())
        app.wildcard_router.add_rules([(tornado.routing.AnyMatches(), self.bokeh)])
        self.bokeh.start()
        self._started = True

    def sessions(self) -> list[ServerSession]:
        """The bokeh sessions (one per page a browser opened) not yet discarded, over all pages."""
        return [session for path in self.paths for session in self.bokeh.get_sessions(path) if not session.destroyed]

    def session_count(self) -> int:
        """The number of bokeh sessions (browser tabs showing a page), over all pages."""
        return len(self.sessions())

    def close(self) -> None:
        """Stop every session's updates and bokeh's housekeeping. Idempotent.

        Sessions are not destroyed here: a browser still connected would make
        bokeh touch a destroyed session when its websocket closes. Without
        their periodic callbacks they no longer read the node.
        """
        if not self._started:
            return
        from bokeh.server.callbacks import PeriodicCallback

        self._started = False
        for session in self.sessions():
            doc = session.document
            for callback in list(doc.session_callbacks):
                if isinstance(callback, PeriodicCallback):
                    doc.remove_periodic_callback(callback)
        # The HTTP server closes its HTTP connections; websockets left it when they upgraded.
        for socket in list(getattr(self.bokeh, "websockets", ())):
            socket.close()
        self.bokeh.stop()


#: A dashboard of some node (what :func:`serve_dashboard` starts).
DashboardT = TypeVar("DashboardT", bound=BokehDashboard[Any])


async def serve_dashboard(
    handle: HTTPServerHandle, start: Callable[[tornado.web.Application], DashboardT]
) -> DashboardT | None:
    """Start a dashboard behind the routes of the running ``handle`` with ``start``; it closes as the server stops.

    Returns what ``start`` made, or None when ``handle`` has no tornado
    application to serve it behind.  If ``start`` raises, the server is
    closed and the error goes on.
    """
    if handle.application is None:
        return None
    try:
        board = start(handle.application)
    except BaseException:
        await handle.close()
        raise
    handle.on_stop.append(board.close)
    return board
