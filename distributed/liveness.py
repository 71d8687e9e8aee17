"""Liveness links: how the scheduler learns in a second or two that a worker stopped answering.

Theory of operation
-------------------
A worker's own event loop cannot prove that the worker lives: a task that
holds the GIL for a minute blocks it as surely as SIGSTOP does, and the first
must never get a healthy worker removed.  So liveness comes from two things
the worker's event loop cannot block:

* **The host.**  A process that vouches for workers keeps one connection, a
  *link*, to each scheduler.  The scheduler writes a small ping on it every
  ``distributed.scheduler.liveness.interval`` and has its kernel end the
  connection when what it sent goes unacknowledged for
  ``distributed.scheduler.liveness.timeout`` (see
  :meth:`~distributed.comm.Comm.watch_peer_host`).  The peer's kernel
  acknowledges whatever its process is doing; only an unreachable host (a cut
  link, a hung or powered-off machine) goes quiet.  The scheduler then removes
  every worker the link vouched for, and what they ran runs elsewhere.
* **The process.**  A nanny looks at its worker process every
  ``distributed.worker.memory.monitor-interval``.  One found stopped (SIGSTOP,
  a debugger) for longer than ``distributed.scheduler.liveness.stopped-timeout``
  is reported (:class:`~distributed.protocol.liveness_messages.Stopped`): the
  scheduler removes it and has the nanny replace it.

A nanny vouches for its worker; a worker without a nanny vouches for itself.
Such a worker's host is watched, but its process is not: from outside, a
stopped process cannot be told from one whose task holds the GIL, so a
stopped worker without a nanny is left to ``distributed.scheduler.worker-ttl``.

A link outlives its scheduler: when its connection ends it is opened again
(after at most ``_MAX_BACKOFF`` seconds between tries) for as long as a
voucher answers for workers, and the vouch is sent again first thing (a
scheduler that does not watch links is asked again only once what a voucher
answers for changes).  So a scheduler started at the same address after the
last one died (restarted, or taking over from its journal) watches the same
workers, whether or not they have registered with it yet.

Links are shared: the vouchers of one process and event loop (the nannies of
``dask worker --nworkers``, workers packed into one process) reach a
scheduler through one connection, so the scheduler pays one connection and
one ping per process, not per worker.  A link costs nothing on the sending
side but reading the pings.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
from collections.abc import Iterable

import dask.config
from dask.utils import parse_timedelta

from distributed.comm import Comm, CommClosedError, connect
from distributed.comm.core import ConnectionArgs
from distributed.protocol import liveness_messages as lm
from distributed.protocol.schema import checker
from distributed.utils import wait_for

logger = logging.getLogger(__name__)

__all__ = ["LivenessLink", "Voucher", "process_token"]

_token: tuple[int, str] | None = None


def process_token() -> str:
    """A name for this process that no other process has, on any host (a fork gets its own)."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        _token = (pid, f"{uuid.uuid4().hex}-{pid}")
    return _token[1]


def _stopped_timeout_from_config() -> float:
    return float(parse_timedelta(dask.config.get("distributed.scheduler.liveness.stopped-timeout")) or 0.0)


_check_reply = checker(lm.LivenessHelloReply)

#: Seconds between two tries to (re)open a link, at most.
_MAX_BACKOFF = 1.0
#: Seconds one try to open a link may take (then a fresh one starts).
_CONNECT_TIMEOUT = 1.5
#: Seconds after which a try to open a link is taken for stuck when a new worker is to be vouched for.
_STUCK_CONNECT = 0.5


class LivenessLink:
    """One process's connection to one scheduler, carrying what its vouchers answer for.

    Made and shared by :class:`Voucher`; one per scheduler address and event loop.

    Parameters
    ----------
    address
        The scheduler's address.
    connection_args
        Keywords for :func:`~distributed.comm.connect` (TLS credentials).
    """

    def __init__(self, address: str, connection_args: ConnectionArgs) -> None:
        self.address = address
        self._connection_args = connection_args
        #: Voucher id -> the workers it answers for.
        self._workers: dict[int, tuple[str, ...]] = {}
        #: Stopped reports not yet sent: (workers, seconds stopped).
        self._stopped: list[tuple[tuple[str, ...], float]] = []
        self._changed = asyncio.Event()
        #: Whether the scheduler watches this link (None: not answered yet).
        self.watched: bool | None = None
        #: How long a worker process may stay stopped before it is reported, as the scheduler says.
        self.stopped_timeout = _stopped_timeout_from_config()
        self._task: asyncio.Task[None] | None = None
        #: How often the scheduler pings this link (0: never), and when it last did (monotonic).
        self._ping_interval = 0.0
        self._pinged = 0.0

    # -- what vouchers do ------------------------------------------------------------
    def set_workers(self, voucher: int, workers: Iterable[str]) -> None:
        """Have ``voucher`` answer for ``workers`` (replacing what it answered for)."""
        self._workers[voucher] = tuple(workers)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"liveness-link-{self.address}")

    def report_stopped(self, workers: Iterable[str], seconds: float) -> None:
        """Tell the scheduler these workers' processes have been stopped for ``seconds``."""
        self._stopped.append((tuple(workers), seconds))
        self._changed.set()

    def forget(self, voucher: int) -> None:
        """``voucher`` answers for nothing any more (the last one to leave closes the link: see :meth:`close`)."""
        self._workers.pop(voucher, None)
        self._changed.set()

    async def close(self) -> None:
        """End the link's connection (once no voucher is left; what was not sent no longer matters)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def empty(self) -> bool:
        """Whether no voucher uses the link."""
        return not self._workers

    def _vouched(self) -> tuple[str, ...]:
        return tuple(sorted({w for ws in self._workers.values() for w in ws}))

    # -- the connection --------------------------------------------------------------
    async def _run(self) -> None:
        backoff = 0.05
        while self._workers:
            try:
                comm = await self._connect()
            except (OSError, TimeoutError) as e:
                logger.debug("Liveness link to %s not opened: %s", self.address, e)
                await self._wait_change(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
                continue
            if comm is None:
                continue  # what we vouch for changed meanwhile: try afresh at once
            try:
                if not await wait_for(self._hello(comm), 10):
                    return  # not watched: vouchers may come and go, nothing is sent
                backoff = 0.05
                await self._serve(comm)
            except (OSError, CommClosedError, TimeoutError) as e:
                logger.debug("Liveness link to %s lost: %s", self.address, e)
            finally:
                comm.abort()
            if self._workers:
                await self._wait_change(backoff)

    async def _connect(self) -> Comm | None:
        """A new connection to the scheduler; None if what we vouch for changed first.

        A connection tried while the network was cut waits on the kernel's SYN
        retries (1, 3, 7 s...): a new worker to vouch for (its registration
        just crossed the network) starts a fresh try instead, once the pending
        one has taken longer than a sound network needs.
        """
        self._changed.clear()
        loop = asyncio.get_running_loop()
        opening = loop.create_task(
            connect(self.address, timeout=_CONNECT_TIMEOUT, name="liveness", **self._connection_args)
        )
        changed = loop.create_task(self._changed.wait())
        started = loop.time()
        try:
            await asyncio.wait([opening, changed], return_when=asyncio.FIRST_COMPLETED)
            if not opening.done():
                # Only a try stuck on SYN retries is worth a fresh one: one under way on a sound
                # network (a TLS handshake, say) is let finish rather than cut off at the peer.
                await asyncio.wait([opening], timeout=max(0.0, _STUCK_CONNECT - (loop.time() - started)))
        except BaseException:
            changed.cancel()
            opening.cancel()
            # A connection made as the link closes is closed, not leaked.
            [result] = await asyncio.gather(opening, return_exceptions=True)
            if isinstance(result, Comm):
                result.abort()
            raise
        changed.cancel()
        if not opening.done():
            opening.cancel()
        [result] = await asyncio.gather(opening, return_exceptions=True)
        if isinstance(result, asyncio.CancelledError):
            return None
        if isinstance(result, BaseException):
            raise result
        return result

    async def _hello(self, comm: Comm) -> bool:
        await comm.write(lm.LivenessHello(op="liveness", process=process_token()))
        reply = await comm.read()
        err = _check_reply(reply)
        if err is not None:
            logger.warning(
                "The scheduler at %s answered a liveness link with %r (%s); not vouching", self.address, reply, err
            )
            self.watched = False
            return False
        self.watched = bool(reply["watch"])
        self.stopped_timeout = float(reply["stopped_timeout"])
        self._ping_interval = float(reply["ping_interval"])
        return self.watched

    async def _serve(self, comm: Comm) -> None:
        # The scheduler's pings only need our kernel's acknowledgement; reading them keeps the buffer
        # empty, and their silence tells us the link is cut (the scheduler's end gave up on it and our
        # kernel cannot know): a new link is then tried, to be up as soon as the network is.
        self._pinged = time.monotonic()
        silence = max(4 * self._ping_interval, 1.0) if self._ping_interval else None
        reader = asyncio.get_running_loop().create_task(self._drain(comm), name="liveness-link-reader")
        sent: tuple[str, ...] | None = None
        try:
            while self._workers:
                self._changed.clear()
                vouched = self._vouched()
                if vouched != sent:
                    await comm.write(lm.Vouch(op="vouch", workers=list(vouched)))
                    sent = vouched
                while self._stopped:
                    workers, seconds = self._stopped.pop(0)
                    await comm.write(lm.Stopped(op="stopped", workers=list(workers), seconds=seconds))
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait([changed, reader], timeout=silence, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if reader.done():
                    reader.result()  # raises what ended it
                    return
                if silence is not None and time.monotonic() - self._pinged > silence:
                    logger.info(
                        "No ping from the scheduler at %s for %.1f s: opening a new link", self.address, silence
                    )
                    return
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _drain(self, comm: Comm) -> None:
        while True:
            await comm.read()
            self._pinged = time.monotonic()

    async def _wait_change(self, timeout: float) -> None:
        self._changed.clear()
        try:
            await wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass


#: (event loop id, scheduler address) -> the link.
_links: dict[tuple[int, str], LivenessLink] = {}
_ids = itertools.count()


class Voucher:
    """A nanny's or a worker's part in its process's liveness link to one scheduler.

    Made on the event loop it is used from.

    Parameters
    ----------
    address
        The scheduler's address.
    connection_args
        Keywords for :func:`~distributed.comm.connect` (TLS credentials).
    """

    def __init__(self, address: str, connection_args: ConnectionArgs) -> None:
        key = (id(asyncio.get_running_loop()), address)
        link = _links.get(key)
        if link is None:
            link = _links[key] = LivenessLink(address, connection_args)
        self._key = key
        self._link: LivenessLink | None = link
        self._id = next(_ids)

    @property
    def stopped_timeout(self) -> float:
        """How long a worker process may stay stopped before it is reported, as the scheduler says."""
        return self._link.stopped_timeout if self._link is not None else _stopped_timeout_from_config()

    @property
    def watched(self) -> bool | None:
        """Whether the scheduler watches this voucher's link (None: not answered yet, or closed)."""
        return self._link.watched if self._link is not None else None

    def vouch(self, workers: Iterable[str]) -> None:
        """Answer for ``workers`` (replacing what this voucher answered for)."""
        if self._link is not None:
            self._link.set_workers(self._id, workers)

    def report_stopped(self, workers: Iterable[str], seconds: float) -> None:
        """Tell the scheduler these workers' processes have been stopped for ``seconds``."""
        if self._link is not None:
            self._link.report_stopped(workers, seconds)

    async def close(self) -> None:
        """Answer for nothing any more; the last voucher of a link closes it."""
        link, self._link = self._link, None
        if link is None:
            return
        link.forget(self._id)
        if link.empty:
            if _links.get(self._key) is link:
                del _links[self._key]
            await link.close()
