"""The scheduler's settings, read from dask's config in one place and typed.

:class:`SchedulingSettings` is what the state machine reads (how tasks are
placed and when they err); :class:`SchedulerServerSettings` what the server
reads (how it listens and watches its workers).  Each is read once, when a
scheduler is made: a ``Scheduler`` keyword given wins over its config key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.config
from dask.utils import parse_bytes, parse_timedelta

from distributed.config import log_length

__all__ = ["SchedulerServerSettings", "SchedulingSettings"]


def _seconds_or_none(value: Any) -> float | None:
    """A duration in seconds, or None for a falsy value (``null``, ``0``, ``False``: off)."""
    return parse_timedelta(value) if value else None


@dataclass(frozen=True, slots=True)
class SchedulingSettings:
    """What the scheduler's state machine reads of the config (``distributed.scheduler.*``).

    Attributes
    ----------
    validate
        Check every invariant after each transition (``validate``).
    allowed_failures
        Workers a task may see die under it before it errs with KilledWorker (``allowed-failures``).
    full_disk_timeout
        Seconds every worker may stay paused, unable to spill after a disk error, before waiting
        tasks err; None waits (``full-disk-timeout``).
    no_workers_timeout
        Seconds a task may stay unrunnable (no worker can run it, or none runs at all) before it
        errs; None waits (``no-workers-timeout``).
    bandwidth
        Bytes per second assumed between workers, to price moving inputs (``bandwidth``).
    default_data_size
        Bytes assumed for a result whose size is not known yet, in that price (``default-data-size``).
    unknown_duration
        Seconds assumed for a task of a prefix never run (``unknown-task-duration``).
    default_durations
        Assumed seconds by task prefix (``default-task-durations``).
    root_latency_budget
        Seconds of root tasks a worker may be sent beyond its threads (``root-task-latency-budget``).
    worker_saturation
        Root tasks per thread sent before the rest queue on the scheduler; ``inf``: no queue
        (``worker-saturation``).
    transition_log_length
        Transitions kept for ``story`` (``transition-log-length``; null: ``distributed.admin.low-level-log-length``).
    erred_tasks_history
        Erred tasks kept in ``erred_tasks`` (``distributed.diagnostics.erred-tasks.max-history``).
    computations_history
        Computations kept in ``computations`` (``distributed.diagnostics.computations.max-history``).
    """

    validate: bool = False
    allowed_failures: int = 3
    full_disk_timeout: float | None = 60.0
    no_workers_timeout: float | None = None
    bandwidth: float = 100e6
    default_data_size: int = 1024
    unknown_duration: float = 0.5
    default_durations: Mapping[str, float] = field(default_factory=dict)
    root_latency_budget: float = 0.005
    worker_saturation: float = 1.1
    transition_log_length: int = 100_000
    erred_tasks_history: int = 100
    computations_history: int = 100

    @classmethod
    def from_config(cls, *, validate: bool | None = None, allowed_failures: int | None = None) -> SchedulingSettings:
        """The settings in dask's config now, with the keywords given instead of theirs.

        Raises
        ------
        ValueError
            For a ``worker-saturation`` that is not positive.
        """

        saturation = dask.config.get("distributed.scheduler.worker-saturation")
        worker_saturation = float(saturation) if saturation not in (None, "inf") else math.inf
        if not worker_saturation > 0:
            raise ValueError(f"worker-saturation must be positive, got {saturation!r}")
        return cls(
            validate=bool(dask.config.get("distributed.scheduler.validate", False) if validate is None else validate),
            allowed_failures=int(
                dask.config.get("distributed.scheduler.allowed-failures")
                if allowed_failures is None
                else allowed_failures
            ),
            full_disk_timeout=_seconds_or_none(dask.config.get("distributed.scheduler.full-disk-timeout")),
            no_workers_timeout=_seconds_or_none(dask.config.get("distributed.scheduler.no-workers-timeout")),
            bandwidth=float(parse_bytes(str(dask.config.get("distributed.scheduler.bandwidth")))),
            default_data_size=int(parse_bytes(str(dask.config.get("distributed.scheduler.default-data-size")))),
            unknown_duration=float(
                parse_timedelta(dask.config.get("distributed.scheduler.unknown-task-duration")) or 0.5
            ),
            default_durations={
                k: float(parse_timedelta(v) or 0)
                for k, v in (dask.config.get("distributed.scheduler.default-task-durations", {}) or {}).items()
            },
            root_latency_budget=float(
                parse_timedelta(dask.config.get("distributed.scheduler.root-task-latency-budget", "5ms")) or 0.0
            ),
            worker_saturation=worker_saturation,
            transition_log_length=log_length("distributed.scheduler.transition-log-length"),
            erred_tasks_history=int(dask.config.get("distributed.diagnostics.erred-tasks.max-history")),
            computations_history=int(dask.config.get("distributed.diagnostics.computations.max-history")),
        )


@dataclass(frozen=True, slots=True)
class SchedulerServerSettings:
    """What the scheduler's server reads of the config.

    Attributes
    ----------
    default_scheme
        The scheme to listen with when none is given (``distributed.comm.default-scheme``).
    contact_address
        The address to announce (``distributed.scheduler.contact-address``), or None.
    allow_pickle
        Whether requests that make the scheduler unpickle what it is sent are served
        (``distributed.scheduler.pickle``).
    worker_ttl
        Seconds a worker may stay silent before it is removed; None: never (``worker-ttl``).
    idle_timeout
        Seconds without work after which the scheduler closes; None: never (``idle-timeout``).
    blocked_handlers
        Requests refused (``blocked-handlers``).
    connect_timeout
        Seconds to connect to a peer (``distributed.comm.timeouts.connect``).
    reuse_broadcast_comm
        Whether ``Client.run`` (broadcast) reaches workers over the pooled
        connections; else over connections of its own, closed after
        (``reuse-broadcast-comm``).
    journal
        The SQLite file of the scheduler's journal, or None for none (``journal``).
    recovery_timeout
        Seconds to wait, after taking over from a journal, for the workers it lists (``recovery-timeout``).
    client_reconnect_grace
        Seconds a disconnected client's wants are kept for it to connect again (``client-reconnect-grace``).
    """

    default_scheme: str | None = None
    contact_address: str | None = None
    allow_pickle: bool = True
    worker_ttl: float | None = 300.0
    idle_timeout: float | None = None
    blocked_handlers: tuple[str, ...] = ()
    connect_timeout: float = 30.0
    reuse_broadcast_comm: bool = True
    journal: str | None = None
    recovery_timeout: float = 3.0
    client_reconnect_grace: float = 30.0

    @classmethod
    def from_config(
        cls,
        *,
        contact_address: str | None = None,
        worker_ttl: float | str | None = None,
        idle_timeout: float | str | None = None,
        journal: str | None = None,
    ) -> SchedulerServerSettings:
        """The settings in dask's config now, with the keywords given instead of theirs.

        Raises
        ------
        ValueError
            For a ``distributed.scheduler.pickle`` that is not a boolean (a value such as
            ``"no"`` must not read as true: it is a security control).
        """

        allow_pickle = dask.config.get("distributed.scheduler.pickle", True)
        if not isinstance(allow_pickle, bool):
            raise ValueError(f"distributed.scheduler.pickle must be true or false, got {allow_pickle!r}")
        return cls(
            default_scheme=dask.config.get("distributed.comm.default-scheme", None),
            contact_address=contact_address or dask.config.get("distributed.scheduler.contact-address", None) or None,
            allow_pickle=allow_pickle,
            worker_ttl=_seconds_or_none(
                worker_ttl if worker_ttl is not None else dask.config.get("distributed.scheduler.worker-ttl")
            ),
            idle_timeout=_seconds_or_none(
                idle_timeout if idle_timeout is not None else dask.config.get("distributed.scheduler.idle-timeout")
            ),
            blocked_handlers=tuple(dask.config.get("distributed.scheduler.blocked-handlers", []) or ()),
            connect_timeout=float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")) or 30),
            reuse_broadcast_comm=bool(dask.config.get("distributed.scheduler.reuse-broadcast-comm")),
            journal=journal or dask.config.get("distributed.scheduler.journal", None) or None,
            recovery_timeout=float(parse_timedelta(dask.config.get("distributed.scheduler.recovery-timeout")) or 0),
            client_reconnect_grace=float(
                parse_timedelta(dask.config.get("distributed.scheduler.client-reconnect-grace")) or 0
            ),
        )
