"""``Worker(data=)``: the mapping a worker keeps its results in, as dask.distributed takes it.

``data`` is one of

* a ``MutableMapping`` (used as it is);
* a callable returning one, such as a class (called once the worker has its
  local directory; a callable with a ``worker_local_directory`` parameter
  gets that directory);
* a ``(callable, kwargs)`` pair, called with those keyword arguments (and the
  directory, as above).

A worker given ``data=`` does not spill by itself: that is the mapping's
business (as in dask.distributed, where only its own spill buffer spills).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["DataFactory", "data_factory"]

#: Makes the worker's storage given its local directory.
DataFactory = Callable[[str], MutableMapping[Any, Any]]


def data_factory(data: Any) -> DataFactory:
    """What makes the worker's mapping from a ``data=`` that is not a mapping itself.

    Raises
    ------
    TypeError
        When ``data`` is neither a callable nor a ``(callable, kwargs)`` pair,
        or the callable makes something other than a ``MutableMapping``.
    """
    if isinstance(data, tuple) and len(data) == 2 and callable(data[0]) and isinstance(data[1], Mapping):
        make, kwargs = data[0], dict(data[1])
    elif callable(data):
        make, kwargs = data, {}
    else:
        raise TypeError(
            "Worker(data=) takes a MutableMapping, a callable returning one, or a (callable, kwargs) pair; "
            f"got {type(data).__name__}"
        )
    try:
        wants_directory = "worker_local_directory" in inspect.signature(make).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        wants_directory = False

    def build(local_directory: str) -> MutableMapping[Any, Any]:
        extra = {"worker_local_directory": local_directory} if wants_directory else {}
        made = make(**kwargs, **extra)
        if not isinstance(made, MutableMapping):
            raise TypeError(f"Worker(data=) made a {type(made).__name__}, not a MutableMapping")
        return made

    return build
