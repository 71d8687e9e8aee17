"""What a worker reports: its own figures, and ``Worker(metrics=)`` and ``Worker(startup_information=)``.

So do ``Worker(extensions=)``'s heartbeats (:func:`extension_heartbeats`). The
metrics and the startup information map names to functions of the worker (plain or coroutine functions), as
in dask.distributed: the metrics are called at each heartbeat and sent with
the worker's own (which win a clash of names), the startup information once,
as the worker registers, and shown in the scheduler's identity of the worker.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import psutil

from distributed.protocol import messages as m
from distributed.spill import SpillBuffer

if TYPE_CHECKING:
    from distributed.worker.server import Worker

__all__ = ["call_each", "close_extensions", "extension_heartbeats", "named_callables", "own_metrics"]

logger = logging.getLogger("distributed.worker")


def named_callables(given: Mapping[str, Any] | None, parameter: str) -> dict[str, Callable[[Any], Any]]:
    """``given`` checked to be a mapping of names to callables (empty for None).

    Raises
    ------
    TypeError
        Naming ``Worker(parameter=)``, for anything else.
    """
    if given is None:
        return {}
    if not isinstance(given, Mapping) or not all(isinstance(k, str) and callable(v) for k, v in given.items()):
        raise TypeError(f"Worker({parameter}=) takes a mapping of names to callables f(worker), got {given!r}")
    return dict(given)


async def call_each(worker: Any, functions: Mapping[str, Callable[[Any], Any]], what: str) -> dict[str, Any]:
    """``{name: f(worker)}``, awaited where a coroutine; one that raises is logged and left out."""
    out: dict[str, Any] = {}
    for name, f in functions.items():
        try:
            value = f(worker)
            if inspect.isawaitable(value):
                value = await value
        except Exception:
            logger.warning("The worker's %s %r raised; left out", what, name, exc_info=True)
            continue
        out[name] = value
    return out


def own_metrics(worker: Worker) -> m.WorkerMetrics:
    """What ``worker``'s heartbeat reports of itself: memory (RSS), CPU percent since the last call, task counts."""
    proc = worker.psutil_process or psutil.Process()
    state = worker.state
    data = worker.data
    spilled = data.spilled if isinstance(data, SpillBuffer) else None
    metrics = m.WorkerMetrics(
        memory=proc.memory_info().rss,
        cpu=proc.cpu_percent(),
        executing=len(state.executing) if state is not None else 0,
        in_memory=len(data),
        managed_bytes=state.nbytes_in_memory if state is not None else 0,
        spilled_bytes=m.SpilledBytes(
            memory=spilled.memory if spilled is not None else 0,
            disk=spilled.disk if spilled is not None else 0,
        ),
        transfer=m.TransferTotals(
            incoming_bytes_total=worker.transfer_incoming_bytes_total,
            outgoing_bytes_total=worker.transfer_outgoing_bytes_total,
        ),
    )
    if isinstance(data, SpillBuffer) and data.disk_error is not None:
        metrics["spill_disk_error"] = str(data.disk_error)  # shown by the scheduler's dashboard
    return metrics


def extension_heartbeats(extensions: Mapping[str, Any]) -> dict[str, Any]:
    """``{name: ext.heartbeat()}`` for the worker's extensions that have one (sent with each heartbeat)."""
    out: dict[str, Any] = {}
    for name, ext in extensions.items():
        beat = getattr(ext, "heartbeat", None)
        if beat is None:
            continue
        try:
            out[name] = beat()
        except Exception:
            logger.warning("The heartbeat of worker extension %r raised; left out", name, exc_info=True)
    return out


async def close_extensions(extensions: Mapping[str, Any]) -> None:
    """Close the worker's extensions that have a ``close()`` (awaited where a coroutine)."""
    for name, ext in extensions.items():
        close = getattr(ext, "close", None)
        if close is None:
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("Closing worker extension %r failed", name)
