"""Pausing the garbage collector while the client makes many objects at once.

``client.map`` of 100,000 tasks makes two objects per future and, part by
part, several per task message.  Automatic collections started meanwhile
rescan every object the process holds (the futures made so far included)
again and again: about half the time of making futures and a fifth of making
task messages.  Paused, the same objects are examined once, at the first
collection after the pause.

The collector's switch is process-wide: the pause is
:func:`distributed.gc_pause.collector_paused`, which nests across threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from distributed.gc_pause import collector_paused

__all__ = ["GC_PAUSE_MIN", "paused_gc"]

#: Futures or tasks to make below which a pause is not worth it.
GC_PAUSE_MIN = 2000


@contextmanager
def paused_gc(n: int) -> Iterator[None]:
    """No automatic garbage collection inside, when ``n`` >= :data:`GC_PAUSE_MIN` futures or tasks are made."""
    if n < GC_PAUSE_MIN:
        yield
        return
    with collector_paused():
        yield
