"""The client side of a cluster: the :class:`Client`, futures, and waiting on them.

``distributed.client`` keeps the names users import from it in
``dask.distributed``: :class:`Client`, :class:`Future`, :func:`wait`,
:func:`as_completed`, :func:`futures_of`, :func:`fire_and_forget`,
:func:`default_client`, :func:`temp_default_client`, and the exceptions
dask.distributed defines or imports there (:class:`FutureCancelledError`,
:class:`FuturesCancelledError`, ``CancelledError``, ``TimeoutError``), which
live in :mod:`distributed.exceptions`.
"""

from __future__ import annotations

from distributed.client.client import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    Client,
    default_client,
    get_task_metadata,
)
from distributed.client.defaults import temp_default_client
from distributed.client.future import Future, FutureState
from distributed.client.reports import get_task_stream, performance_report
from distributed.client.waiting import DoneAndNotDoneFutures, as_completed, fire_and_forget, futures_of, wait
from distributed.exceptions import (
    CancelledError,
    CancelledFuturesGroup,
    FutureCancelledError,
    FuturesCancelledError,
    TimeoutError,
)

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "CancelledError",
    "CancelledFuturesGroup",
    "Client",
    "DoneAndNotDoneFutures",
    "Future",
    "FutureCancelledError",
    "FutureState",
    "FuturesCancelledError",
    "TimeoutError",
    "as_completed",
    "default_client",
    "fire_and_forget",
    "futures_of",
    "get_task_metadata",
    "get_task_stream",
    "performance_report",
    "temp_default_client",
    "wait",
]
