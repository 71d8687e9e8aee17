"""Diagnostics: plugins, progress and task streams."""

from __future__ import annotations

from distributed.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin

__all__ = ["NannyPlugin", "SchedulerPlugin", "WorkerPlugin"]
