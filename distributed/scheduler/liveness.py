"""The scheduler's end of the liveness links (see :mod:`distributed.liveness`).

Each link is one process that vouches for workers: the scheduler pings it,
has its kernel end the connection when the peer's host stops acknowledging,
and then removes the workers the link vouched for.  A nanny's report that
its worker process is stopped removes that worker at once.  Removal is
:meth:`~distributed.scheduler.Scheduler.remove_unresponsive_worker`, as for
``worker-ttl``: what the workers ran runs elsewhere, and their nannies are
asked to replace them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask.config
from dask.utils import parse_timedelta

from distributed.comm import Comm, CommClosedError
from distributed.core import Route
from distributed.liveness import process_token
from distributed.protocol import liveness_messages as lm
from distributed.protocol.schema import checker

if TYPE_CHECKING:
    from distributed.scheduler.server import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["LivenessSettings", "LivenessWatch"]

_checks = {"vouch": checker(lm.Vouch), "stopped": checker(lm.Stopped)}


@dataclass(frozen=True, slots=True)
class LivenessSettings:
    """What the scheduler reads of ``distributed.scheduler.liveness``.

    Attributes
    ----------
    enabled
        Whether links are watched at all (``enabled``); without, only ``worker-ttl`` removes silent workers.
    interval
        Seconds between two pings on a link (``interval``).
    timeout
        Seconds the peer's host may leave a ping unacknowledged before the link ends (``timeout``).
    stopped_timeout
        Seconds a nanny's worker process may stay stopped before it is reported (``stopped-timeout``).
    """

    enabled: bool = True
    interval: float = 0.25
    timeout: float = 1.0
    stopped_timeout: float = 0.5

    @classmethod
    def from_config(cls) -> LivenessSettings:
        """The settings in dask's config now.

        Raises
        ------
        ValueError
            For a timeout or interval that is not positive.
        """

        def seconds(key: str) -> float:
            value = parse_timedelta(dask.config.get(key))
            if value is None or value <= 0:
                raise ValueError(f"{key} must be a positive duration, got {value!r}")
            return float(value)

        return cls(
            enabled=bool(dask.config.get("distributed.scheduler.liveness.enabled")),
            interval=seconds("distributed.scheduler.liveness.interval"),
            timeout=seconds("distributed.scheduler.liveness.timeout"),
            stopped_timeout=seconds("distributed.scheduler.liveness.stopped-timeout"),
        )


class LivenessWatch:
    """The liveness links open to one scheduler, and what each vouches for.

    Parameters
    ----------
    scheduler
        The scheduler whose workers are watched.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.settings = LivenessSettings.from_config()
        #: Each open link -> the addresses of the workers it vouches for.
        self.links: dict[Comm, frozenset[str]] = {}

    def routes(self) -> dict[str, Route[Any]]:
        """The request that opens a link."""
        return {"liveness": Route(lm.LivenessHello, self.handle_link, takes_comm=True)}

    def vouched(self) -> dict[str, str]:
        """Worker address -> the address of the process that vouches for it (for each worker watched)."""
        return {worker: comm.peer_address for comm, workers in self.links.items() for worker in workers}

    async def handle_link(self, comm: Comm, msg: lm.LivenessHello) -> None:
        """Serve a link: answer, ping until it ends, and remove its workers if its host stopped answering."""
        settings = self.settings
        # A process on the scheduler's own host and in its process needs no watching of its host (a
        # nanny there still reports its stopped worker); nor does a comm the kernel cannot watch.
        ping = settings.enabled and msg["process"] != process_token() and comm.watch_peer_host(settings.timeout)
        await comm.write(
            lm.LivenessHelloReply(
                status="OK",
                watch=settings.enabled,
                stopped_timeout=settings.stopped_timeout,
                ping_interval=settings.interval if ping else 0.0,
            )
        )
        if not settings.enabled:
            await comm.close()
            return
        self.links[comm] = frozenset()
        pinger = asyncio.get_running_loop().create_task(self._ping(comm), name="liveness-ping") if ping else None
        try:
            while True:
                self._handle(comm, await comm.read())
        except CommClosedError:
            if comm.peer_unreachable:
                host = comm.peer_address
                self._remove(
                    self.links.get(comm, ()),
                    f"is on a host that stopped answering ({host}: nothing acknowledged for {settings.timeout} s)",
                    "worker-host-unreachable",
                )
        finally:
            self.links.pop(comm, None)
            if pinger is not None:
                pinger.cancel()
                await asyncio.gather(pinger, return_exceptions=True)
            comm.abort()

    def _handle(self, comm: Comm, msg: Any) -> None:
        op = msg.get("op") if isinstance(msg, dict) else None
        check = _checks.get(op) if isinstance(op, str) else None
        err = check(msg) if check is not None else f"unknown message {msg!r:.200}"
        if err is not None:
            logger.warning("Closing the liveness link from %s: %s", comm.peer_address, err)
            raise CommClosedError(f"malformed liveness message: {err}")
        if op == "vouch":
            self.links[comm] = frozenset(msg["workers"])
        else:
            seconds = float(msg["seconds"])
            self._remove(msg["workers"], f"has been stopped for {seconds:.1f} s (its nanny says)", "worker-stopped")

    def _remove(self, workers: Iterable[str], why: str, action: str) -> None:
        s = self.scheduler
        for address in sorted(workers):
            if address in s.workers:
                s.remove_unresponsive_worker(address, why, {"action": action, "workers": [address], "reason": why})

    async def _ping(self, comm: Comm) -> None:
        ping = lm.LivenessPing(op="ping")
        interval = self.settings.interval
        try:
            while True:
                await comm.write(ping)
                await asyncio.sleep(interval)
        except CommClosedError:
            pass
