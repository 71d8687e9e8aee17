"""HTTP endpoints of the scheduler and the workers (``/health``, ``/info``, ``/metrics``), served by tornado."""

from __future__ import annotations

from distributed.http.scheduler import start_http_server
from distributed.http.server import HTTPServerHandle

__all__ = ["HTTPServerHandle", "start_http_server"]
