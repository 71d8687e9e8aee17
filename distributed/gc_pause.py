"""A process-wide pause of the garbage collector that nests across threads.

The collector's switch (:func:`gc.disable`, :func:`gc.enable`) is one flag for
the whole process.  Two threads that each switch it off and back on would
switch it back on while the other still needs it off.  :func:`collector_paused`
counts the pauses under way: the first switches the collector off, the last
switches it back on, and only if it was on when the first began (a collector
the user switched off stays off).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

# Re-entrant: a finalizer run by a collection on this thread may pause too.
_lock = threading.RLock()
_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic garbage collection in the process while inside (any thread)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
