"""A cluster's state written to one file, for a person or a script to read later (``Client.dump_cluster_state``).

The scheduler's tasks, workers, clients and events, and each worker's
tasks and data keys, made plain data: every record becomes a dict of its
fields, a reference to another record becomes its key (a task) or address (a
worker), anything else that is not plain (a pickled function, an exception)
its ``repr``.  Written as gzipped msgpack (``.msgpack.gz``) or YAML
(``.yaml``); :func:`load_cluster_dump` reads either back.
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgpack

__all__ = ["load_cluster_dump", "record_fields", "scheduler_state", "worker_state", "write_cluster_dump"]

#: Longest ``repr`` kept for a value that is not plain data.
REPR_LIMIT = 1000


def _reference(value: Any) -> Any:
    """A record inside another as what names it: a task by its key, a worker by its address."""
    for name in ("key", "address", "client_key"):
        if hasattr(value, "__slots__") and hasattr(value, name):
            return _plain(getattr(value, name), depth=1)
    return None


def _plain(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    if isinstance(value, tuple) and depth < 4:
        return [_plain(v, depth + 1) for v in value]
    reference = _reference(value)
    if reference is not None:
        return reference
    if isinstance(value, Mapping) and depth < 4:
        return {str(_plain(k, depth + 1)): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, set, frozenset)) and depth < 4:
        items = [_plain(v, depth + 1) for v in value]
        return items if isinstance(value, list) else sorted(items, key=repr)
    return repr(value)[:REPR_LIMIT]


def _settable(attr: Any) -> bool:
    """Whether a class attribute is a field that can be set: a property with a setter, or another data descriptor."""
    if isinstance(attr, property):
        return attr.fset is not None
    return hasattr(type(attr), "__set__") and not callable(attr)


def record_fields(record: Any, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The public fields of a ``__slots__`` record as plain data (other records as their keys or addresses).

    A field is a public slot, or a public property or other descriptor that can be set (a field kept
    elsewhere, as a task's rarely set ones are).
    """
    names: list[str] = []
    for cls in type(record).__mro__:
        names.extend(n for n in getattr(cls, "__slots__", ()) if not n.startswith("_") and n != "__weakref__")
        names.extend(n for n, v in vars(cls).items() if not n.startswith("_") and _settable(v))
    return {name: _plain(getattr(record, name, None), depth=1) for name in dict.fromkeys(names) if name not in exclude}


def _key(key: Any) -> str:
    return key if isinstance(key, str) else str(key)


def worker_state(dask_worker: Any, exclude: Collection[str] = ()) -> dict[str, Any]:
    """A worker's part of the dump (run on each worker by ``Client.run``)."""
    return {
        "address": dask_worker.address,
        "name": _plain(dask_worker.name),
        "status": str(getattr(dask_worker.status, "name", dask_worker.status)),
        "nthreads": dask_worker.nthreads,
        "memory_limit": dask_worker.memory_limit,
        "tasks": {_key(k): record_fields(ts, exclude) for k, ts in dict(dask_worker.tasks).items()},
        "data": [_key(k) for k in list(dask_worker.data)],
        "logs": [list(record) for record in dask_worker.get_logs()[-1000:]],
    }


def write_cluster_dump(state: Mapping[str, Any], filename: str, format: Literal["msgpack", "yaml"]) -> str:
    """Write ``state`` to ``filename`` plus the format's suffix; the path written.

    Raises
    ------
    ValueError
        For another format.
    """
    if format == "msgpack":
        path = f"{filename}.msgpack.gz"
        with gzip.open(path, "wb") as f:
            f.write(msgpack.packb(state, use_bin_type=True))
    elif format == "yaml":
        import yaml

        path = f"{filename}.yaml"
        with open(path, "w") as f:
            yaml.safe_dump(dict(state), f)
    else:
        raise ValueError(f"dump_cluster_state(format={format!r}): 'msgpack' or 'yaml'")
    return path


def load_cluster_dump(path: str | Path) -> dict[str, Any]:
    """Read a dump written by ``Client.dump_cluster_state`` (``.msgpack.gz`` or ``.yaml``).

    Raises
    ------
    ValueError
        For a file of neither kind.
    """
    name = str(path)
    if name.endswith(".msgpack.gz"):
        with gzip.open(name, "rb") as f:
            state: dict[str, Any] = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
        return state
    if name.endswith(".yaml"):
        import yaml

        with open(name) as f:
            loaded: dict[str, Any] = yaml.safe_load(f)
        return loaded
    raise ValueError(f"{name}: not a cluster dump (.msgpack.gz or .yaml)")


def scheduler_state(scheduler: Any, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The scheduler's part of the dump."""
    left_out = set(exclude)
    return {
        "address": scheduler.address,
        "id": scheduler.id,
        "tasks": {_key(k): record_fields(ts, left_out) for k, ts in scheduler.tasks.items()},
        "workers": {a: record_fields(ws, left_out) for a, ws in scheduler.workers.items()},
        "clients": {c: record_fields(cs, left_out) for c, cs in scheduler.clients.items()},
        "events": {t: [list(_plain(e, 1)) for e in events] for t, events in scheduler.get_events().items()},
        "logs": [list(record) for record in scheduler.get_logs()[-1000:]],
    }
