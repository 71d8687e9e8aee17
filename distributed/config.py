"""Configuration: registers ``distributed.yaml`` as dask config defaults and applies the logging config.

Importing this module is idempotent: ``dask.distributed.protocol`` may load our
subpackages a second time, and registering the same defaults twice must not
change anything; the logging part of the config (:func:`initialize_logging`) is
applied once per process, on the first import, before the package's other
modules make their loggers.
"""

from __future__ import annotations

import logging
import logging.config
import os
import sys
from collections.abc import Mapping
from typing import Any

import dask
import dask.config
import yaml

from distributed.event_loop import install_event_loop_policy

__all__ = [
    "DEFAULT_LOGGER_LEVELS",
    "DEFAULT_LOG_FORMAT",
    "get",
    "get_bytes",
    "get_interval",
    "get_seconds",
    "initialize_logging",
    "load_defaults",
    "silence_logging",
    "stderr_handlers",
]

DEFAULT_LOG_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"

#: Marks the stderr handler this package installed on the ``distributed`` logger.
_HANDLER_MARK = "_distributed_stderr_handler"

_here = os.path.dirname(os.path.abspath(__file__))
_defaults_path = os.path.join(_here, "distributed.yaml")

#: Old key names renamed to the keys they stand for, as released dask.distributed renames them
#: (users of older releases still write them).  Two of its old names are keys of this package
#: (``distributed.scheduler.transition-log-length`` and ``events-log-length``): set, they override
#: ``distributed.admin.low-level-log-length`` for their log, as the renamed key would.
deprecations: dict[str, str] = {
    "allowed-failures": "distributed.scheduler.allowed-failures",
    "bandwidth": "distributed.scheduler.bandwidth",
    "default-data-size": "distributed.scheduler.default-data-size",
    "work-stealing": "distributed.scheduler.work-stealing",
    "worker-ttl": "distributed.scheduler.worker-ttl",
    "multiprocessing-method": "distributed.worker.multiprocessing-method",
    "use-file-locking": "distributed.worker.use-file-locking",
    "profile-interval": "distributed.worker.profile.interval",
    "profile-cycle-interval": "distributed.worker.profile.cycle",
    "worker-memory-target": "distributed.worker.memory.target",
    "worker-memory-spill": "distributed.worker.memory.spill",
    "worker-memory-pause": "distributed.worker.memory.pause",
    "worker-memory-terminate": "distributed.worker.memory.terminate",
    "heartbeat-interval": "distributed.client.heartbeat",
    "compression": "distributed.comm.compression",
    "connect-timeout": "distributed.comm.timeouts.connect",
    "tcp-timeout": "distributed.comm.timeouts.tcp",
    "default-scheme": "distributed.comm.default-scheme",
    "socket-backlog": "distributed.comm.socket-backlog",
    "diagnostics-link": "distributed.dashboard.link",
    "bokeh-export-tool": "distributed.dashboard.export-tool",
    "tick-time": "distributed.admin.tick.interval",
    "tick-maximum-delay": "distributed.admin.tick.limit",
    "log-length": "distributed.admin.log-length",
    "log-format": "distributed.admin.log-format",
    "pdb-on-err": "distributed.admin.pdb-on-err",
    "ucx": "distributed.comm.ucx",
    "rmm": "distributed.rmm",
    "transition-log-length": "distributed.admin.low-level-log-length",
    "recent-messages-log-length": "distributed.admin.low-level-log-length",
    "distributed.comm.recent-messages-log-length": "distributed.admin.low-level-log-length",
    "distributed.p2p.disk": "distributed.p2p.storage.disk",
}


def load_defaults() -> dict[str, Any]:
    """Read ``distributed.yaml`` and register it with dask's config defaults."""
    # libyaml's loader when PyYAML has it: the pure-Python one takes some 25 ms more, in every process.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(_defaults_path) as f:
        defaults: dict[str, Any] = yaml.load(f, Loader=loader)
    dask.config.update_defaults(defaults)
    dask.config.rename(deprecations)
    dask.config.deprecations.update(deprecations)
    return defaults


defaults = load_defaults()


#: Logger levels used unless the ``logging:`` section of the config names others, as in dask.distributed.
DEFAULT_LOGGER_LEVELS: dict[str, str] = {
    "distributed": "info",
    "distributed.client": "warning",
    "bokeh": "error",
    "tornado": "critical",
    "tornado.application": "error",
}

#: Set on the ``distributed`` logger once the config's logging section was applied in this process.
_APPLIED_MARK = "_distributed_logging_applied"


def _logging_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Where the logging keys live: ``distributed`` when it has ``logging`` or ``logging-file-config``, else the top."""
    dist = config.get("distributed")
    if isinstance(dist, Mapping) and ("logging" in dist or "logging-file-config" in dist):
        return dist
    return config


def _level(name: str, level: Any) -> int:
    if isinstance(level, bool) or not isinstance(level, (int, str)):
        raise TypeError(f"Logging level of {name!r} must be a level name or number, not {level!r}")
    if isinstance(level, int):
        return level
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ValueError(f"Unknown logging level {level!r} for logger {name!r}")
    return number


def _stderr_handler(fmt: str) -> logging.Handler:
    """The one stderr handler this package puts on the loggers it configures (shared, so one level silences all)."""
    for name in ("distributed", *DEFAULT_LOGGER_LEVELS):
        for h in logging.getLogger(name).handlers:
            if getattr(h, _HANDLER_MARK, False):
                return h
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    setattr(handler, _HANDLER_MARK, True)
    return handler


def _apply_levels(levels: Mapping[str, Any], fmt: str) -> None:
    """The mapping form: each logger gets its level; the topmost ones write to stderr and stop propagating."""
    merged: dict[str, Any] = {**DEFAULT_LOGGER_LEVELS, **{str(k): v for k, v in levels.items()}}
    handler = _stderr_handler(fmt)
    for name, level in merged.items():
        logger = logging.getLogger(name)
        logger.setLevel(_level(name, level))
        parts = name.split(".")
        if any(handler in logging.getLogger(".".join(parts[:i])).handlers for i in range(1, len(parts))):
            continue  # an ancestor writes these records already
        if handler not in logger.handlers:
            logger.addHandler(handler)
        logger.propagate = False


def initialize_logging(config: Mapping[str, Any] | None = None) -> None:
    """Apply the logging part of dask config, in one of the three forms dask.distributed accepts.

    The keys are read under ``distributed`` when it has either of them, else at
    the top level of the config:

    ``logging: {logger name: level}``
        Each logger gets its level (names such as ``info`` or numbers), on top
        of :data:`DEFAULT_LOGGER_LEVELS`. The topmost of those loggers write to
        stderr, in ``distributed.admin.log-format``, through one handler of
        this package, and do not propagate to the root logger.
    ``logging: {version: 1, ...}``
        A :func:`logging.config.dictConfig` schema, applied as given.
    ``logging-file-config: path``
        A :func:`logging.config.fileConfig` file (existing loggers stay enabled).

    Without ``config``, applies ``dask.config.config`` once per process (later
    calls do nothing); with it, applies it every time.  Importing
    ``distributed`` applies it.

    Raises
    ------
    RuntimeError
        When both ``logging`` and ``logging-file-config`` are set.
    TypeError, ValueError
        On a malformed section (as ``logging.config`` raises them, or an unknown level).
    """
    dist = logging.getLogger("distributed")
    if config is None:
        if getattr(dist, _APPLIED_MARK, False):
            return
        config = dask.config.config
    base = _logging_section(config)
    section = base.get("logging")
    file_config = base.get("logging-file-config")
    if file_config is not None:
        if section is not None:
            raise RuntimeError("Config options 'logging-file-config' and 'logging' are mutually exclusive.")
        logging.config.fileConfig(os.fspath(file_config), disable_existing_loggers=False)
    elif isinstance(section, Mapping) and "version" in section:
        # logging.config insists on an int, which environment variables do not give.
        logging.config.dictConfig({**section, "version": int(section["version"])})
    elif section is None or isinstance(section, Mapping):
        fmt = dask.config.get("distributed.admin.log-format", None, config=dict(config)) or DEFAULT_LOG_FORMAT
        _apply_levels(section or {}, str(fmt))
    else:
        raise TypeError(f"The 'logging' config must be a mapping of logger name to level, not {section!r}")
    setattr(dist, _APPLIED_MARK, True)


def silence_logging(level: int | str) -> int:
    """Show only records at ``level`` or above on the ``distributed`` logger's stderr handlers; return the old level.

    Records below it are still kept by servers' log buffers (see ``Server.get_logs``).
    """
    initialize_logging()
    old = logging.NOTSET
    first = True
    for h in stderr_handlers():
        if first:
            old, first = h.level, False
        h.setLevel(level.upper() if isinstance(level, str) else level)
    return old


def stderr_handlers() -> list[logging.Handler]:
    """The handlers of the ``distributed`` logger that :func:`silence_logging` sets the level of.

    The one stderr handler this package installs, when the logger has it.
    Otherwise (logging configured by the user) the plain ``StreamHandler``
    instances: subclasses write elsewhere (files, or the capture handlers a
    test runner puts on loggers that do not propagate), and silencing them
    would hide records from their readers.
    """
    handlers = logging.getLogger("distributed").handlers
    own = [h for h in handlers if getattr(h, _HANDLER_MARK, False)]
    return own or [h for h in handlers if type(h) is logging.StreamHandler]


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


def log_length(key: str | None = None) -> int:
    """Entries a developer log keeps: ``key`` when set, else ``distributed.admin.low-level-log-length``.

    Raises
    ------
    ValueError
        For a length below 1, naming the key it came from.
    """
    value = dask.config.get(key, None) if key is not None else None
    source = key
    if value is None:
        value, source = (
            dask.config.get("distributed.admin.low-level-log-length"),
            "distributed.admin.low-level-log-length",
        )
    length = int(value)
    if length < 1:
        raise ValueError(f"{source} must be at least 1, got {value!r}")
    return length


def get_bytes(key: str) -> int:
    """A size from config (``"50MB"``, ``1024``) in bytes."""
    from dask.utils import parse_bytes

    value = dask.config.get(key)
    if isinstance(value, int):
        return value
    return int(parse_bytes(value))


def _initialize_logging_on_import() -> None:
    # ``import distributed`` may raise only ImportError (dask probes for the package
    # and catches just that), so a broken logging config surfaces as one, naming the problem.
    try:
        initialize_logging()
    except Exception as e:
        raise ImportError(f"The logging part of dask config could not be applied: {e}") from e


_initialize_logging_on_import()
install_event_loop_policy()
