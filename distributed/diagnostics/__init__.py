"""Diagnostics: plugins, progress and task streams."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from distributed.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin
from distributed.utils import lazy_attribute

if TYPE_CHECKING:
    from distributed.diagnostics.memory_sampler import MemorySampler

#: Names of this face from the client side, imported on first use (so that a scheduler does not load it).
_SOURCES: Final = {"MemorySampler": "distributed.diagnostics.memory_sampler"}

__all__ = ["MemorySampler", "NannyPlugin", "SchedulerPlugin", "WorkerPlugin"]


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, _SOURCES, name)
