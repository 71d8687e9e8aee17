"""``distributed.protocol.pickle``: pickle with a cloudpickle fallback."""

from __future__ import annotations

import pickle as _stdlib_pickle
from collections.abc import Callable, Sequence
from typing import Any

from distributed.protocol.serialize import Frame, pickle_dumps, pickle_loads

HIGHEST_PROTOCOL = _stdlib_pickle.HIGHEST_PROTOCOL

__all__ = ["HIGHEST_PROTOCOL", "dumps", "loads"]


def dumps(
    x: Any,
    *,
    buffer_callback: Callable[[_stdlib_pickle.PickleBuffer], Any] | None = None,
    protocol: int = HIGHEST_PROTOCOL,
) -> bytes:
    """Pickle ``x`` (standard pickle, or cloudpickle when needed)."""
    return pickle_dumps(x, buffer_callback=buffer_callback, protocol=protocol)


def loads(x: Frame, *, buffers: Sequence[Frame] = ()) -> Any:
    """Unpickle ``x`` with out-of-band ``buffers``."""
    return pickle_loads(x, buffers)
