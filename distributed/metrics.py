"""Clocks, as ``distributed.metrics`` offers them to code written for dask.

``time`` is wall-clock seconds since the epoch (for timestamps shown to
people and compared across machines); ``monotonic`` never goes back (for
durations).  The thread and process CPU clocks measure work done.
"""

from __future__ import annotations

import time as _clock

__all__ = ["monotonic", "process_time", "thread_time", "time"]

#: Seconds since the epoch, as ``time.time``.
time = _clock.time
#: Seconds of a clock that never goes back, as ``time.monotonic``.
monotonic = _clock.monotonic
#: CPU seconds of the calling thread.
thread_time = _clock.thread_time
#: CPU seconds of this process.
process_time = _clock.process_time
