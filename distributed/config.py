"""Configuration: registers ``distributed.yaml`` as dask config defaults.

Importing this module is idempotent: ``dask.distributed.protocol`` may load our
subpackages a second time, and registering the same defaults twice must not
change anything.
"""

from __future__ import annotations

import os
from typing import Any

import dask
import dask.config
import yaml

__all__ = ["get", "get_bytes", "get_interval", "get_seconds", "load_defaults"]

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
