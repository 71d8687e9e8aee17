"""The C heap of this process: hand the memory glibc keeps free back to the OS.

glibc's ``malloc`` keeps freed blocks in its heap for reuse, and returns to
the OS only what is free at the top of it.  A process that made and freed
many objects (a worker that spilled, a scheduler that forgot a graph) can so
hold tens of MB it does not use, counted in its RSS.  ``malloc_trim(0)``
gives back every free page.  Elsewhere (musl, macOS, Windows) there is
nothing to call and :func:`trim` does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = ["can_trim", "trim"]


def _load_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        malloc_trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return malloc_trim


_malloc_trim = _load_malloc_trim()


def can_trim() -> bool:
    """Whether this process's C library can give free heap memory back (glibc)."""
    return _malloc_trim is not None


def trim() -> bool:
    """Give the heap's free pages back to the OS.

    Takes tens of milliseconds on a fragmented heap of a GB; ctypes releases
    the GIL meanwhile, so it may run in a thread.

    Returns
    -------
    Whether any memory was given back (False also where there is no ``malloc_trim``).
    """
    if _malloc_trim is None:
        return False
    return bool(_malloc_trim(0))
