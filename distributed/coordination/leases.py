"""Leases of Locks and Semaphores: held while the holder lives.

A lease ends when its holder releases it, or else when the holder stops
showing that it lives:

* its client leaves the scheduler (the process died, or the client closed);
* it has not been refreshed for ``distributed.scheduler.locks.lease-timeout``
  (``inf``: never for that reason), checked every
  ``distributed.scheduler.locks.lease-validation-interval``.

The scheduler side is :class:`~distributed.coordination.lease_clock.LeaseClock`;
the holder side is :class:`~distributed.coordination.lease_holder.LeaseKeeper`,
which refreshes the leases one primitive object holds five times per lease
timeout.  This module holds what both read: the two settings.
"""

from __future__ import annotations

import math
from typing import Any

import dask
from dask.utils import parse_timedelta

__all__ = ["lease_timeout", "validation_interval"]


def _seconds(value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, (int, float)) and math.isinf(value):
        return math.inf
    seconds = parse_timedelta(value, default="s")
    assert seconds is not None
    return float(seconds)


def lease_timeout() -> float:
    """``distributed.scheduler.locks.lease-timeout`` in seconds (``inf`` allowed)."""
    return _seconds(dask.config.get("distributed.scheduler.locks.lease-timeout"))


def validation_interval() -> float:
    """``distributed.scheduler.locks.lease-validation-interval`` in seconds."""
    return _seconds(dask.config.get("distributed.scheduler.locks.lease-validation-interval"))
