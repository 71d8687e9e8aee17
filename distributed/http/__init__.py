"""The scheduler's HTTP endpoints (``/health``, ``/info``, ``/metrics``), served by tornado."""

from __future__ import annotations

from distributed.http.server import HTTPServerHandle, start_http_server

__all__ = ["HTTPServerHandle", "start_http_server"]
