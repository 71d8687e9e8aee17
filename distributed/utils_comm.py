"""Retrying an operation over the network, as ``distributed.comm.retry.*`` asks.

By default (``count: 0``) nothing is retried.  With ``count: n`` an operation
that fails with an ``OSError`` (a closed comm, a refused or timed-out
connection) runs again, up to ``n`` more times, after a delay that doubles
from ``delay.min`` up to ``delay.max``, with up to a tenth more at random so
that many peers retrying at once spread out.  As in dask.distributed, the
operations retried are those whose repetition is harmless: fetching data
from a worker (by a client, or by a worker for its tasks' inputs), asking the
scheduler who holds keys, a worker's heartbeat, and the scheduler's requests
to a worker on a client's behalf (relayed data, freeing copies).  P2P
shuffles retry sending shards as ``distributed.p2p.comm.retry.*`` says
(receivers drop shards they already have).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import dask.config
from dask.utils import parse_timedelta

__all__ = ["ABANDON_CHECK", "JITTER_FRACTION", "retry", "retry_operation", "retry_settings"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The most, as a fraction of the delay, added at random to each delay.
JITTER_FRACTION: Final = 0.1
#: Seconds between two looks at whether a retried operation was abandoned.
ABANDON_CHECK: Final = 0.1


def retry_settings(prefix: str = "distributed.comm.retry") -> tuple[int, float, float]:
    """``(count, delay_min, delay_max)`` from the config keys under ``prefix``.

    Raises
    ------
    ValueError
        For a negative count or delays that are negative or out of order, naming the key.
    """
    count = dask.config.get(f"{prefix}.count")
    delay_min = parse_timedelta(dask.config.get(f"{prefix}.delay.min"), default="s")
    delay_max = parse_timedelta(dask.config.get(f"{prefix}.delay.max"), default="s")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"{prefix}.count must be a whole number of retries, 0 or more; got {count!r}")
    if delay_min is None or delay_max is None or delay_min < 0 or delay_max < delay_min:
        raise ValueError(
            f"{prefix}.delay.min and .delay.max must be durations with min <= max; got {delay_min!r}, {delay_max!r}"
        )
    return count, float(delay_min), float(delay_max)


async def retry(
    operation: Callable[[], Awaitable[T]],
    count: int,
    delay_min: float,
    delay_max: float,
    jitter_fraction: float = JITTER_FRACTION,
    retry_on: tuple[type[BaseException], ...] = (OSError,),
    name: str | None = None,
    abandon: Callable[[], BaseException | None] | None = None,
) -> T:
    """Await ``operation()``; on one of ``retry_on``, try again up to ``count`` more times.

    The delay before retry ``i`` (from 0) is ``min(delay_min * 2**i, delay_max)``,
    plus up to ``jitter_fraction`` of it at random.  The last failure raises.
    ``abandon``, looked at while waiting (every :data:`ABANDON_CHECK` seconds)
    and before each retry, gives an exception to raise instead when retrying
    has become pointless (the work the operation was for was dropped).
    """
    for attempt in range(count):
        try:
            return await operation()
        except retry_on as e:
            delay = min(delay_min * 2**attempt, delay_max)
            delay *= 1 + random.random() * jitter_fraction
            logger.info(
                "Retrying %s in %.2f s after attempt %d of %d failed: %r",
                name or getattr(operation, "__qualname__", "an operation"),
                delay,
                attempt + 1,
                count + 1,
                e,
            )
            await _wait(delay, abandon)
    return await operation()


async def _wait(delay: float, abandon: Callable[[], BaseException | None] | None) -> None:
    """Sleep ``delay`` seconds; raise what ``abandon`` gives as soon as it gives something."""
    if abandon is None:
        await asyncio.sleep(delay)
        return
    deadline = time.monotonic() + delay
    while True:
        stop = abandon()
        if stop is not None:
            raise stop
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(left, ABANDON_CHECK))


async def retry_operation(
    coro: Callable[..., Awaitable[T]], *args: Any, operation: str | None = None, **kwargs: Any
) -> T:
    """``coro(*args, **kwargs)``, retried as ``distributed.comm.retry.*`` says (see :func:`retry`)."""
    count, delay_min, delay_max = retry_settings()

    def attempt() -> Awaitable[T]:
        return coro(*args, **kwargs)

    return await retry(attempt, count, delay_min, delay_max, name=operation or getattr(coro, "__qualname__", None))
