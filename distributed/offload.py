"""Large (de)serialisation off the event loop, as ``distributed.comm.offload`` asks.

Turning a large result into frames (pickling a DataFrame of Python objects)
or frames back into objects can take long enough to stall a server's event
loop: heartbeats, other transfers and requests wait meanwhile.  Payloads of
at least ``distributed.comm.offload`` bytes (10 MiB by default; ``false``:
never) are (de)serialised in the process's one offload thread instead, as in
dask.distributed: the data a worker sends to peers and clients and the data
it receives from them, and what a client gathers and scatters.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import dask.config
from dask.utils import parse_bytes

from distributed.protocol.serialize import Serialized, serialize, unwrap

__all__ = [
    "large",
    "offload",
    "offload_executor",
    "offload_threshold",
    "payload_bytes",
    "serialize_each",
    "unwrap_all",
    "unwrap_each",
]

K = TypeVar("K")
T = TypeVar("T")

_offload: ThreadPoolExecutor | None = None
_offload_lock = threading.Lock()


def offload_executor() -> ThreadPoolExecutor:
    """The process's one offload thread, made on first use."""
    global _offload
    with _offload_lock:
        if _offload is None:
            _offload = ThreadPoolExecutor(1, thread_name_prefix="Dask-Offload")
        return _offload


def offload_threshold() -> int | None:
    """Bytes from which (de)serialisation moves off the event loop (None: never).

    Raises
    ------
    ValueError
        For a value that is neither false nor a size, naming the key.
    """
    value = dask.config.get("distributed.comm.offload")
    if value is False or value is None:
        return None
    try:
        threshold = int(parse_bytes(value) if isinstance(value, str) else value)
    except (ValueError, TypeError) as e:
        raise ValueError(f"distributed.comm.offload must be a size or false, got {value!r}") from e
    if threshold < 0:
        raise ValueError(f"distributed.comm.offload must be a size or false, got {value!r}")
    return threshold


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the offload thread."""
    return await asyncio.get_running_loop().run_in_executor(offload_executor(), fn, *args)


def payload_bytes(values: Mapping[Any, Any]) -> int:
    """Bytes of the frames of serialised values (those not serialised yet count for nothing)."""
    total = 0
    for v in values.values():
        if isinstance(v, Serialized):
            for f in v.frames:
                total += f.nbytes if isinstance(f, memoryview) else len(f)
    return total


def large(values: Mapping[Any, Any], threshold: int | None) -> bool:
    """Whether the frames of ``values`` reach ``threshold`` bytes (never, without one)."""
    return threshold is not None and payload_bytes(values) >= threshold


def unwrap_each(values: Mapping[K, Any], deserializers: Sequence[str] | None = None) -> dict[K, Any]:
    """Each value deserialised, here."""
    return {k: unwrap(v, deserializers) for k, v in values.items()}


async def unwrap_all(
    values: Mapping[K, Any], threshold: int | None, deserializers: Sequence[str] | None = None
) -> dict[K, Any]:
    """Each value deserialised; in the offload thread when their frames reach ``threshold`` bytes.

    Callers on a hot path test :func:`large` first and call :func:`unwrap_each`
    themselves for small values, saving a coroutine.
    """
    if large(values, threshold):
        return await offload(unwrap_each, values, deserializers)
    return unwrap_each(values, deserializers)


def serialize_each(values: Mapping[K, Any]) -> dict[K, Serialized]:
    """Each value serialised, here (callers offload it for large values, as for :func:`unwrap_each`)."""
    out: dict[K, Serialized] = {}
    for k, v in values.items():
        header, frames = serialize(v, on_error="raise")
        out[k] = Serialized(header, frames)
    return out
