"""Config keys of dask.distributed that this package does not honour yet, refused by name.

dask.config takes any key: a user's YAML file written for released
dask.distributed, an environment variable or ``dask.config.set`` puts its keys
in, whether anything reads them or not.  A key this package does not act on
would then be accepted and ignored.  Each such key is listed here, and the
server (or client, or cluster) it concerns refuses to start while the key holds
anything but released dask.distributed's default, with an error naming the key.

``released_config_keys.yaml`` beside this module lists released
dask.distributed's keys with their defaults; the test of this module walks it
and checks that each key is honoured (in ``distributed.yaml`` and read), listed
in :data:`NOT_HONOURED`, or in :data:`INERT`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import dask.config
import yaml
from dask.utils import parse_bytes, parse_timedelta

__all__ = [
    "INERT",
    "NOT_HONOURED",
    "NotHonoured",
    "Role",
    "UnhonouredConfigError",
    "refuse_unhonoured_config",
    "released_aliases",
    "released_defaults",
]

#: What checks a key: the process or object that would act on it.
Role = Literal["scheduler", "worker", "nanny", "client", "cluster"]

_SERVERS: Final[tuple[Role, ...]] = ("scheduler", "worker", "nanny", "client")


@dataclass(frozen=True)
class NotHonoured:
    """A released key this package does not act on: who refuses it, why, and the values it takes all the same.

    ``accepted`` holds values that ask for what this package does anyway
    (``comm.offload: false`` where nothing is offloaded); the default is
    always accepted.
    """

    roles: tuple[Role, ...]
    why: str
    accepted: tuple[Any, ...] = ()


class UnhonouredConfigError(NotImplementedError):
    """A config key that this package does not honour holds a value other than dask.distributed's default."""


#: Released keys with nothing to act on, in dask.distributed either.
INERT: Final[Mapping[str, str]] = {
    "distributed.version": "the schema's version number; dask.distributed does not read it",
    "distributed.scheduler.allowed-imports": (
        "which modules the scheduler may import to decode a message; this scheduler imports none, whatever the list"
    ),
    "distributed.comm.websockets.shard": "read only by the websocket comm, which this package does not have",
}


def _keys(roles: tuple[Role, ...], why: str, *keys: str, accepted: tuple[Any, ...] = ()) -> dict[str, NotHonoured]:
    return {key: NotHonoured(roles, why, accepted) for key in keys}


#: Released dask.distributed keys not honoured yet.
NOT_HONOURED: Final[Mapping[str, NotHonoured]] = {
    **_keys(
        ("scheduler",),
        "root-ish task groups are told by their size against the cluster's threads",
        "distributed.scheduler.rootish-taskgroup",
        "distributed.scheduler.rootish-taskgroup-dependencies",
    ),
    **_keys(
        ("scheduler",),
        "the scheduler's HTTP routes are fixed",
        "distributed.scheduler.http.routes",
    ),
    **_keys(
        ("worker",),
        "the worker's HTTP routes are fixed",
        "distributed.worker.http.routes",
    ),
    **_keys(_SERVERS, "frames are not split into shards", "distributed.comm.shard"),
    **_keys(
        ("worker",),
        "there is no GPU monitoring",
        "distributed.diagnostics.nvml",
        "distributed.diagnostics.cudf",
        accepted=(False,),
    ),
    **_keys(("scheduler",), "the dashboard has no export tool", "distributed.dashboard.export-tool"),
    **_keys(("worker",), "there is no RMM pool", "distributed.rmm.pool-size"),
}

_RELEASED_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "released_config_keys.yaml")


@functools.cache
def _released() -> dict[str, Any]:
    # libyaml's loader when PyYAML has it: the pure-Python one takes some 30 ms over this file.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(_RELEASED_PATH) as f:
        loaded: dict[str, Any] = yaml.load(f, Loader=loader)  # a safe loader, either way
    return loaded


def released_defaults() -> dict[str, Any]:
    """Released dask.distributed's config keys (dotted) with their defaults."""
    return dict(_released()["keys"])


def released_aliases() -> dict[str, str]:
    """The old key names released dask.distributed renames, each to the key it stands for."""
    return dict(_released()["aliases"])


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` means ``default`` (``"2000ms"`` means ``"2s"``, ``"1 KiB"`` means ``1024``)."""
    if value == default:
        return True
    scalar = (str, int, float)
    if isinstance(value, scalar) and isinstance(default, scalar) and not isinstance(value, bool | type(None)):
        for parse in (parse_timedelta, parse_bytes):
            try:
                if parse(value) == parse(default):
                    return True
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
    return False


@functools.cache
def _for_role(role: Role) -> tuple[tuple[str, tuple[str, ...], NotHonoured], ...]:
    """The refused keys ``role`` checks, each with its path of sections."""
    return tuple((key, tuple(key.split(".")), r) for key, r in NOT_HONOURED.items() if role in r.roles)


def refuse_unhonoured_config(role: Role) -> None:
    """Raise if a key that ``role`` would act on in dask.distributed, but this package does not, is set.

    Called as a scheduler, worker, nanny, client or cluster is made.

    Raises
    ------
    UnhonouredConfigError
        Naming the first such key holding a value other than released dask.distributed's default.
    """
    missing = object()
    for key, path, refusal in _for_role(role):
        # dask.config.get, without its parsing of the key: this runs as every server starts.
        value: Any = dask.config.config
        for part in path:
            value = value.get(part, missing) if isinstance(value, dict) else missing
            if value is missing:
                break
        if value is missing:
            continue  # the usual case: the released defaults are read only when a key is set
        defaults = _released()["keys"]
        if _same(value, defaults[key]) or any(_same(value, a) for a in refusal.accepted):
            continue
        raise UnhonouredConfigError(
            f"Config key {key!r} is set to {value!r}, which this package does not honour yet ({refusal.why}); "
            f"unset it or set it to dask.distributed's default, {defaults[key]!r}"
        )
