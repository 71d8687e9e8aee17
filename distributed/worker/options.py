"""Which :class:`~distributed.worker.Worker` keywords of dask.distributed are not honoured here.

A keyword dask.distributed's Worker takes but this package does not implement
is refused with an error naming it when given anything but its default, so a
user never believes a setting took effect when it did not.  A keyword neither
knows is a ``TypeError``, as for any function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distributed.utils import unsupported

__all__ = ["check_unsupported_worker_kwargs"]

#: dask.distributed Worker keywords not implemented yet, with the values that mean "not used".
_NOT_SUPPORTED: dict[str, tuple[Any, ...]] = {
    "services": (None, {}),
    "service_kwargs": (None, {}),
    "http_prefix": ("/",),
    "low_level_profiler": (None, False),
    "transition_counter_max": (None, False),
    "scheduler_sni": (None,),
    "WorkerStateClass": (None,),
    "connection_args": (None, {}),
}


def _is_default(value: Any, defaults: tuple[Any, ...]) -> bool:
    return any(value is d or (type(value) is type(d) and value == d) for d in defaults)


def check_unsupported_worker_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Refuse keywords the worker would otherwise ignore.

    Raises
    ------
    NotImplementedError
        For a dask.distributed keyword given a value other than its default.
    ValueError
        For ``reconnect=True``, which dask.distributed removed as well.
    TypeError
        For a keyword dask.distributed's Worker does not take either.
    """
    for name, value in kwargs.items():
        if name == "reconnect":
            if value:
                raise ValueError(
                    "Worker(reconnect=True) is not supported: a worker that loses its scheduler closes, "
                    "or with death_timeout= keeps trying to register again for that long"
                )
            continue
        defaults = _NOT_SUPPORTED.get(name)
        if defaults is None:
            raise TypeError(f"Worker() got an unexpected keyword argument {name!r}")
        if not _is_default(value, defaults):
            raise unsupported("Worker", name)
