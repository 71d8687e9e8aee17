"""A task's priority as one integer: its rank.

Dask orders tasks by the tuple ``(-user_priority, generation, order)``: the
user's priority (higher first), then the graph (earlier first), then the
task's place in its graph (``dask.order``).  A tuple and its ``order`` int
cost 96 bytes a task; the scheduler keeps the same order in one integer,
which for the default priority is below 2**60 and so a 32-byte int, and
compares faster than a tuple.

The rank is ``(round_down(-user_priority * 2**52) << 100) | (generation << 36) | order``:
the user's priority in units of 2**-52 (exact for integers and for any float
of magnitude 1 or more; priorities closer than that rank alike), then 64 bits
of generation and 36 of order.
"""

from __future__ import annotations

import math
import numbers
from typing import Final

__all__ = [
    "DEFAULT_PRIORITY_RANKS",
    "MAX_GENERATION",
    "MAX_ORDER",
    "ORDER_BITS",
    "priority_of",
    "priority_problem",
    "rank_of",
]

#: Bits of a rank that hold the order; the generation comes above them.
ORDER_BITS: Final = 36
_GENERATION_BITS: Final = 64
_FRACTION_BITS: Final = 52
_USER_SHIFT: Final = ORDER_BITS + _GENERATION_BITS

#: The largest ``order`` a task may have in its graph.
MAX_ORDER: Final = (1 << ORDER_BITS) - 1
#: The largest generation (graphs a scheduler takes in its life).
MAX_GENERATION: Final = (1 << _GENERATION_BITS) - 1
#: The ranks of a user priority of 0 are those from 0 to this.
DEFAULT_PRIORITY_RANKS: Final = (1 << _USER_SHIFT) - 1


def rank_of(user_priority: float, generation: int, order: int) -> int:
    """The rank of ``(-user_priority, generation, order)``, lower first.

    ``user_priority`` must be finite, ``0 <= generation <= MAX_GENERATION`` and
    ``0 <= order <= MAX_ORDER`` (see :func:`priority_problem`).
    """
    if user_priority:
        if isinstance(user_priority, numbers.Integral):
            scaled = -int(user_priority) << _FRACTION_BITS
        else:
            value = float(user_priority)
            if value.is_integer():  # every float of 2**52 or more is: scaling it could overflow
                scaled = int(-value) << _FRACTION_BITS
            else:
                scaled = math.floor(-value * (1 << _FRACTION_BITS))
        low = (generation << ORDER_BITS) | order
        if scaled < 0:
            # A negation copies at the exact size; an or with a negative operand allocates a digit more.
            return -((-scaled << _USER_SHIFT) - low)
        return (scaled << _USER_SHIFT) | low
    # Or, not plus: the fields' bits do not overlap, and a sum is made one 30-bit digit longer than it needs
    # and never shrunk, so it would take a 48-byte block where the rank needs 32 (16 bytes a task).
    return (generation << ORDER_BITS) | order


def priority_of(rank: int) -> tuple[int | float, int, int]:
    """The ``(-user_priority, generation, order)`` tuple of ``rank``, as dask writes a priority."""
    order = rank & MAX_ORDER
    generation = (rank >> ORDER_BITS) & MAX_GENERATION
    scaled = rank >> _USER_SHIFT
    if scaled & ((1 << _FRACTION_BITS) - 1):
        return scaled / (1 << _FRACTION_BITS), generation, order
    return scaled >> _FRACTION_BITS, generation, order


def priority_problem(user_priority: object, order: object = 0) -> str | None:
    """Why a task cannot be given this user priority and order, or None."""
    if not isinstance(user_priority, numbers.Real):
        return f"priority {user_priority!r} is not a number"
    if not math.isfinite(user_priority):
        return f"priority {user_priority!r} is not finite"
    if not isinstance(order, int) or not 0 <= order <= MAX_ORDER:
        return f"order {order!r} is not an integer from 0 to {MAX_ORDER}"
    return None
