"""Metadata on the scheduler: a nested dict clients write and read by key paths (``Client.set_metadata``).

A path is a list of keys (a single key is a path of one); setting a path
makes the dicts along it that are missing.  Values are plain msgpack data:
the scheduler never unpickles them.

Also the tasks' own metadata as a client collects it
(:class:`distributed.get_task_metadata`): a :class:`TaskMetadataCollector`
plugin, started and stopped by name, notes each task wanted while it runs and
keeps its metadata and final state once it is in memory or erred.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distributed.comm import Comm
from distributed.core import Route
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol import messages as m
from distributed.protocol.messages import Key

__all__ = ["MetadataStore", "TaskMetadataCollector"]


def _path(keys: Any) -> list[Any]:
    return list(keys) if isinstance(keys, (list, tuple)) and not isinstance(keys, str) else [keys]


class MetadataStore:
    """The scheduler's metadata, and the requests that write and read it."""

    def __init__(self) -> None:
        #: The metadata: nested dicts.
        self.values: dict[Any, Any] = {}

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests the store answers."""
        return {
            "set_metadata": Route(m.SetMetadata, self.handle_set),
            "get_metadata": Route(m.GetMetadata, self.handle_get),
        }

    def set(self, keys: Any, value: Any) -> None:
        """Put ``value`` at the path ``keys``, making the dicts along it (replacing a non-dict in the way)."""
        path = _path(keys)
        if not path:
            raise ValueError("set_metadata needs at least one key")
        level = self.values
        for key in path[:-1]:
            if not isinstance(level.get(key), dict):
                level[key] = {}
            level = level[key]
        level[path[-1]] = value

    def get(self, keys: Any) -> Any:
        """The value at the path ``keys``.

        Raises
        ------
        KeyError
            When there is nothing at that path.
        """
        value: Any = self.values
        for key in _path(keys):
            if not isinstance(value, dict) or key not in value:
                raise KeyError(keys)
            value = value[key]
        return value

    def handle_set(self, comm: Comm, msg: m.SetMetadata) -> None:
        """Answer ``set_metadata``."""
        self.set(msg["keys"], msg["value"])

    def handle_get(self, comm: Comm, msg: m.GetMetadata) -> dict[str, Any]:
        """Answer ``get_metadata``: ``{"value": ...}``, or ``{}`` when there is nothing at the path."""
        try:
            return {"value": self.get(msg["keys"])}
        except KeyError:
            return {}


class TaskMetadataCollector(SchedulerPlugin):
    """Collect the metadata and final state of the tasks wanted while it runs (``get_task_metadata``).

    Parameters
    ----------
    tasks
        The scheduler's tasks by key, read as each one finishes.
    name
        The plugin's name, under which a client stops it.
    """

    def __init__(self, tasks: Mapping[Key, Any], name: str) -> None:
        self.name = name
        self._tasks = tasks
        self._keys: set[Key] = set()
        #: Each finished task's metadata (``TaskState.metadata``, empty when it has none).
        self.metadata: dict[Key, Any] = {}
        #: Each finished task's final state: ``memory`` or ``erred``.
        self.state: dict[Key, str] = {}

    def update_graph(self, scheduler: Any, *, keys: set[Any], **kwargs: Any) -> None:
        """Note the keys a client wants."""
        self._keys.update(keys)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        """Keep a noted task's metadata and state as it reaches memory or erred."""
        if finish in ("memory", "erred") and key in self._keys:
            ts = self._tasks.get(key)
            if ts is not None:
                self.metadata[key] = dict(ts.metadata or {})
                self.state[key] = finish
                self._keys.discard(key)
