"""Configuration: registers ``distributed.yaml`` as dask config defaults.

Importing this module is idempotent: ``dask.distributed.protocol`` may load our
subpackages a second time, and registering the same defaults twice must not
change anything.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import dask
import dask.config
import yaml

__all__ = [
    "DEFAULT_LOG_FORMAT",
    "get",
    "get_bytes",
    "get_interval",
    "get_seconds",
    "initialize_logging",
    "load_defaults",
    "silence_logging",
]

DEFAULT_LOG_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"

#: Marks the stderr handler this package installed on the ``distributed`` logger.
_HANDLER_MARK = "_distributed_stderr_handler"

_here = os.path.dirname(os.path.abspath(__file__))
_defaults_path = os.path.join(_here, "distributed.yaml")

#: Old flat keys renamed into the ``distributed.*`` tree, as users of older
#: releases still write them (only for keys this package reads).
deprecations: dict[str, str] = {
    "allowed-failures": "distributed.scheduler.allowed-failures",
    "bandwidth": "distributed.scheduler.bandwidth",
    "worker-ttl": "distributed.scheduler.worker-ttl",
}


def load_defaults() -> dict[str, Any]:
    """Read ``distributed.yaml`` and register it with dask's config defaults."""
    with open(_defaults_path) as f:
        defaults: dict[str, Any] = yaml.safe_load(f)
    dask.config.update_defaults(defaults)
    dask.config.rename(deprecations)
    dask.config.deprecations.update(deprecations)
    return defaults


defaults = load_defaults()


def initialize_logging() -> None:
    """Give the loggers in ``distributed.logging`` their levels and ``distributed`` a stderr handler.

    As in dask.distributed: the ``distributed`` logger lets INFO through (so
    servers keep INFO records for ``get_logs``) and writes to stderr with its
    own handler instead of propagating to the root logger, whose handlers a
    user may have set to let everything through.  Idempotent.
    ``silence_logging`` raises that handler's level, not the logger's.
    """
    levels = dask.config.get("distributed.logging", {}) or {}
    if not isinstance(levels, Mapping):
        raise TypeError(f"distributed.logging must be a mapping of logger name to level, not {levels!r}")
    for name, level in levels.items():
        logging.getLogger(str(name)).setLevel(str(level).upper() if isinstance(level, str) else int(level))
    dist = logging.getLogger("distributed")
    if not any(getattr(h, _HANDLER_MARK, False) for h in dist.handlers):
        fmt = dask.config.get("distributed.admin.log-format", None) or DEFAULT_LOG_FORMAT
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(str(fmt)))
        setattr(handler, _HANDLER_MARK, True)
        dist.addHandler(handler)
    dist.propagate = False


def silence_logging(level: int | str) -> int:
    """Show only records at ``level`` or above on the ``distributed`` stderr handler; return its old level.

    Records below it are still kept by servers' log buffers (see ``Server.get_logs``).
    """
    initialize_logging()
    old = logging.NOTSET
    for h in logging.getLogger("distributed").handlers:
        if getattr(h, _HANDLER_MARK, False):
            old = h.level
            h.setLevel(level.upper() if isinstance(level, str) else level)
    return old


def get(key: str, default: Any = None) -> Any:
    """The config value at ``key`` (a dotted path), or ``default``."""
    return dask.config.get(key, default)


def get_seconds(key: str) -> float:
    """A duration from config (``"2ms"``, ``"5 minutes"``, ``3``) in seconds."""
    from dask.utils import parse_timedelta

    value = dask.config.get(key)
    seconds = parse_timedelta(value, default="seconds")
    return float(seconds) if seconds is not None else 0.0


def get_interval(key: str, default: float = 0.0) -> float:
    """A duration from config in seconds; 0 is a valid value, None gives ``default``."""
    from dask.utils import parse_timedelta

    value = dask.config.get(key, None)
    if value is None:
        return default
    seconds = parse_timedelta(value, default="seconds")
    return default if seconds is None else float(seconds)


def get_bytes(key: str) -> int:
    """A size from config (``"50MB"``, ``1024``) in bytes."""
    from dask.utils import parse_bytes

    value = dask.config.get(key)
    if isinstance(value, int):
        return value
    return int(parse_bytes(value))
