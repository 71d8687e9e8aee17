"""Requests that wait in a scheduler extension, at most for their ``timeout``.

A Lock, Semaphore or MultiLock request that cannot be granted at once waits
for a future that answers it.  The future is shielded from the timeout, so
an answer that comes right at the deadline is kept rather than lost; a
request that goes away (the scheduler closes) neither keeps what it was
granted nor stays in line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

from distributed.utils import wait_for

__all__ = ["await_grant", "counted", "gives_up_at_once"]


def gives_up_at_once(timeout: float | None) -> bool:
    """Whether a request with ``timeout`` must not wait at all (a timeout of zero or less)."""
    return timeout is not None and timeout <= 0


async def await_grant(
    fut: asyncio.Future[bool],
    timeout: float | None,
    *,
    forget: Callable[[], None],
    give_back: Callable[[], None],
) -> bool:
    """The answer of ``fut`` (True: granted), waiting at most ``timeout`` for it.

    Parameters
    ----------
    fut
        Answered by whoever grants (True) or refuses (False) the request.
    timeout
        Longest wait in seconds (None: as long as it takes).
    forget
        Takes the request out of line; called when it stops waiting unanswered.
    give_back
        Gives up what was granted; called when the request was cancelled
        after it was granted.

    Returns
    -------
    bool
        The answer, or False when ``timeout`` passed first.
    """
    try:
        return await wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        if fut.done():
            return fut.result()  # answered right at the deadline
        forget()
        return False
    except asyncio.CancelledError:
        # The request went away: nobody will use or release what it was granted.
        if fut.done():
            if fut.result():
                give_back()
        else:
            forget()
        raise


@contextmanager
def counted(counts: dict[Hashable, int], name: Hashable) -> Iterator[None]:
    """Count one more waiter of ``name`` in ``counts`` while inside; a name none waits on leaves ``counts``."""
    counts[name] = counts.get(name, 0) + 1
    try:
        yield
    finally:
        counts[name] -= 1
        if not counts[name]:
            del counts[name]
