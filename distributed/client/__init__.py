"""The client side of a cluster: the :class:`Client`, futures, and waiting on them.

``distributed.client`` keeps the names users import from it in
``dask.distributed``: :class:`Client`, :class:`Future`, :func:`wait`,
:func:`as_completed`, :func:`futures_of`, :func:`fire_and_forget` and
:func:`default_client`.
"""

from __future__ import annotations

from distributed.client.client import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    Client,
    default_client,
    get_task_metadata,
)
from distributed.client.future import Future, FutureState
from distributed.client.futures import DoneAndNotDoneFutures, as_completed, fire_and_forget, futures_of, wait
from distributed.client.reports import get_task_stream, performance_report

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "Client",
    "DoneAndNotDoneFutures",
    "Future",
    "FutureState",
    "as_completed",
    "default_client",
    "fire_and_forget",
    "futures_of",
    "get_task_metadata",
    "get_task_stream",
    "performance_report",
    "wait",
]
