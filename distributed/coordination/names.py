"""Names of coordination primitives.

A name is any msgpack-able key: a string, a number, bytes, or a list or tuple
of those.  Over TCP a list arrives as a tuple (and in process it arrives as
sent), so extensions key their state by :func:`normalize_name`, under which a
list and the tuple with the same items are the same name.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from typing import Any

from distributed.protocol.coordination_messages import PrimitiveName

__all__ = ["check_name", "name_or_new", "normalize_name"]

_SCALARS = (str, bytes, int, float)


def check_name(name: Any) -> PrimitiveName:
    """``name`` if it can name a primitive, else raise ``TypeError``."""
    if not _is_name(name):
        raise TypeError(
            f"A name must be a str, bytes, int, float, or a list or tuple of those, got {type(name).__name__}: {name!r}"
        )
    result: PrimitiveName = name
    return result


def name_or_new(name: Any, prefix: str) -> Any:
    """``name`` checked by :func:`check_name`, or a new random name ``"<prefix>-<hex>"`` when it is None."""
    return check_name(name) if name is not None else f"{prefix}-{uuid.uuid4().hex}"


def _is_name(x: Any) -> bool:
    if isinstance(x, _SCALARS):
        return True
    if isinstance(x, (list, tuple)):
        return all(_is_name(v) for v in x)
    return False


def normalize_name(name: PrimitiveName) -> Hashable:
    """The hashable form of ``name`` (lists become tuples, also nested)."""
    if isinstance(name, (list, tuple)):
        return tuple(normalize_name(v) for v in name)
    if isinstance(name, (bytearray, memoryview)):
        return bytes(name)
    return name
