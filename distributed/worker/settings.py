"""The worker's settings, read from dask's config in one place and typed.

Read once, when a worker is made; a ``Worker`` keyword given wins over its
config key.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

import dask.config
from dask.utils import parse_bytes, parse_timedelta

__all__ = ["WorkerSettings"]


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What a worker reads of the config (``distributed.worker.*`` unless said otherwise).

    Attributes
    ----------
    validate
        Check the state machine's invariants after each event (``validate``).
    resources
        Abstract resources this worker offers, by name (``resources``).
    directory_base
        Where the worker's own scratch directory goes (``temporary-directory``, else the system's).
    memory_monitor_interval
        Seconds between two memory checks (``memory.monitor-interval``).
    heartbeat_interval
        Seconds between two heartbeats to the scheduler (``heartbeat-interval``).
    blocked_handlers
        Requests refused (``blocked-handlers``).
    transfer_limit
        Most bytes asked of one peer at once (``transfer.message-bytes-limit``).
    fetch_concurrency
        Most peers fetched from at once (``connections.outgoing``).
    serve_concurrency
        Most replies to peers' get_data in flight at once; past it peers are told to come back
        (``connections.incoming``).
    connect_timeout, tcp_timeout
        Seconds to connect to a peer, and to wait on a connection
        (``distributed.comm.timeouts.connect``, ``.tcp``).
    lifetime
        Seconds the worker lives before it closes, or None (``lifetime.duration``).
    lifetime_stagger
        Up to this many seconds more or less, at random (``lifetime.stagger``).
    lifetime_restart
        At the end of its lifetime the worker asks its nanny for a new one (``lifetime.restart``).
    transfer_fraction
        Bytes in flight from peers stay under this fraction of the memory limit, or None for no bound
        (``memory.transfer``).
    spill_compression
        How spilled values are compressed on disk (``memory.spill-compression``).
    reconnect_timeout
        Seconds a worker that lost its scheduler (without being asked to close) keeps trying to
        register again at the same address, holding on to its results, before it closes
        (``reconnect-timeout``; the worker's ``death_timeout`` wins).
    """

    validate: bool = False
    resources: dict[str, float] = field(default_factory=dict)
    directory_base: str = field(default_factory=tempfile.gettempdir)
    memory_monitor_interval: float = 0.1
    heartbeat_interval: float = 1.0
    blocked_handlers: tuple[str, ...] = ()
    transfer_limit: int = 50 * 2**20
    fetch_concurrency: int = 50
    serve_concurrency: int = 10
    connect_timeout: float = 30.0
    tcp_timeout: float = 30.0
    lifetime: float | None = None
    lifetime_stagger: float = 0.0
    lifetime_restart: bool = False
    transfer_fraction: float | None = 0.1
    spill_compression: str | bool | None = "auto"
    reconnect_timeout: float = 60.0

    @classmethod
    def from_config(
        cls,
        *,
        validate: bool | None = None,
        resources: Mapping[str, float] | None = None,
        local_directory: str | None = None,
        memory_monitor_interval: float | str | None = None,
        heartbeat_interval: float | str | None = None,
        lifetime: float | str | None = None,
        lifetime_stagger: float | str | None = None,
        lifetime_restart: bool | None = None,
    ) -> WorkerSettings:
        """The settings in dask's config now, with the keywords given instead of theirs."""

        monitor = (
            memory_monitor_interval
            if memory_monitor_interval is not None
            else dask.config.get("distributed.worker.memory.monitor-interval")
        )
        heartbeat = (
            heartbeat_interval
            if heartbeat_interval is not None
            else dask.config.get("distributed.worker.heartbeat-interval", "1s")
        )
        duration = lifetime if lifetime is not None else dask.config.get("distributed.worker.lifetime.duration")
        stagger = (
            lifetime_stagger if lifetime_stagger is not None else dask.config.get("distributed.worker.lifetime.stagger")
        )
        restart = (
            lifetime_restart if lifetime_restart is not None else dask.config.get("distributed.worker.lifetime.restart")
        )
        transfer = dask.config.get("distributed.worker.memory.transfer")
        return cls(
            validate=bool(dask.config.get("distributed.worker.validate", False) if validate is None else validate),
            resources={
                k: float(v) for k, v in (resources or dask.config.get("distributed.worker.resources", {}) or {}).items()
            },
            directory_base=local_directory or dask.config.get("temporary-directory", None) or tempfile.gettempdir(),
            memory_monitor_interval=float(parse_timedelta(monitor) or 0.1),
            heartbeat_interval=float(parse_timedelta(heartbeat) or 1.0),
            blocked_handlers=tuple(dask.config.get("distributed.worker.blocked-handlers", []) or ()),
            transfer_limit=int(parse_bytes(str(dask.config.get("distributed.worker.transfer.message-bytes-limit")))),
            fetch_concurrency=int(dask.config.get("distributed.worker.connections.outgoing")),
            serve_concurrency=_at_least_one("distributed.worker.connections.incoming"),
            connect_timeout=float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) or 30),
            tcp_timeout=float(parse_timedelta(dask.config.get("distributed.comm.timeouts.tcp")) or 30),
            lifetime=float(parse_timedelta(duration)) if duration is not None else None,
            lifetime_stagger=float(parse_timedelta(stagger) or 0) if stagger is not None else 0.0,
            lifetime_restart=bool(restart),
            transfer_fraction=float(transfer) if transfer is not False and transfer else None,
            spill_compression=dask.config.get("distributed.worker.memory.spill-compression"),
            reconnect_timeout=_seconds_at_least_zero("distributed.worker.reconnect-timeout"),
        )


def _at_least_one(key: str) -> int:
    """The whole number at ``key``, refused (naming it) below 1."""
    value = dask.config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a whole number of at least 1, got {value!r}")
    return value


def _seconds_at_least_zero(key: str) -> float:
    """The duration at ``key`` in seconds, refused (naming it) when missing or negative."""
    value = parse_timedelta(dask.config.get(key))
    if value is None or value < 0:
        raise ValueError(f"{key} must be a duration of at least 0, got {dask.config.get(key)!r}")
    return float(value)
