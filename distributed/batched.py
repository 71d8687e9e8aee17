"""Batched sends on a long-lived comm.

Many small messages (``compute-task``, ``task-finished``, client
notifications) go to the same peer in quick succession.  :class:`BatchedSend`
collects them into one list per write: the first message after a quiet spell
goes out at once (latency), and messages that arrive within ``interval`` of the
previous write wait for the next one (throughput).  The receiving side reads
lists of messages and dispatches each with ``Server.dispatch_stream``.

A large message (a part of a graph) sent with :meth:`BatchedSend.send_large`
ends its write: while the comm is slow, such messages pile up in the buffer,
and one write of all of them would have the peer decode them in one go,
deaf to everyone else meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from distributed.comm import Comm, CommClosedError

logger = logging.getLogger(__name__)

__all__ = ["BatchedSend"]


class BatchedSend:
    """Coalesce messages to one comm into lists, written at most every ``interval``.

    Parameters
    ----------
    interval
        Seconds between two writes while messages keep coming.
    name
        For logs.
    """

    def __init__(self, interval: float = 0.00025, name: str | None = None) -> None:
        self.interval = interval
        self.name = name
        self.comm: Comm | None = None
        self.buffer: list[Any] = []
        self.message_count = 0
        self.batch_count = 0
        self.byte_count = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._urgent = False
        #: Set by :meth:`send_now`: the next write does not wait out the interval.
        self._now = False
        self._lazy_timer: asyncio.TimerHandle | None = None
        # The pause between two writes; close() cuts it short to flush at once.
        self._pause: asyncio.Future[None] | None = None
        #: Sequence numbers (1-based, as message_count) of the large messages queued: each ends a write.
        self._large_ends: deque[int] = deque()

    def start(self, comm: Comm) -> None:
        """Start writing to ``comm`` (from the event loop)."""
        self.comm = comm
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name=f"batched-send-{self.name}")
        if self.buffer:
            self._wake.set()

    def closed(self) -> bool:
        """Whether the stream is closed."""
        return self._closing or self.comm is None or self.comm.closed()

    def send(self, *msgs: Any) -> None:
        """Queue messages for the next write.

        Raises
        ------
        CommClosedError
            When the stream is closed.
        """
        self._enqueue(msgs)
        self._urgent = True
        if self._wake is not None:
            self._wake.set()

    def send_now(self, *msgs: Any) -> None:
        """Queue messages and write them at the next turn of the loop, even within ``interval``.

        For a peer that has nothing to do until it reads them (a worker that
        ran out of tasks, a scheduler waiting for an idle worker's result):
        batching would only add the interval to its idle time.

        Raises
        ------
        CommClosedError
            When the stream is closed.
        """
        self.send(*msgs)
        self._now = True  # before the writer's next turn: it runs only once this returns
        if self._pause is not None:
            _wake_future(self._pause)

    def send_large(self, msg: Any) -> None:
        """Queue one large message (such as a part of a graph); no write carries two of them.

        Smaller messages before it ride along; those after it go in the next
        write, which follows at once.

        Raises
        ------
        CommClosedError
            When the stream is closed.
        """
        self.send(msg)
        self._large_ends.append(self.message_count)

    def send_lazy(self, *msgs: Any) -> None:
        """Queue messages nobody waits on (releases, notices).

        They ride along with the next write, or go out after ``interval``,
        and they do not hold back the next urgent message: a release sent
        just before a new request must not delay the request.

        Raises
        ------
        CommClosedError
            When the stream is closed.
        """
        self._enqueue(msgs)
        if self._wake is not None and self._lazy_timer is None and self._loop is not None:
            self._lazy_timer = self._loop.call_later(self.interval, self._lazy_wake)

    def hold(self, *msgs: Any) -> None:
        """Queue messages nobody waits on, without scheduling a write for them.

        They ride along with the next write; a later :meth:`send_lazy` (with
        or without messages) schedules one.  For a sender that makes many
        such messages in steps (a large release) and wants them in one write.

        Raises
        ------
        CommClosedError
            When the stream is closed.
        """
        self._enqueue(msgs)

    def last_queued(self) -> Any:
        """The message queued last and not written yet, or None.

        A sender that queues messages with :meth:`hold` may add to the last
        one while it is still this (nothing was queued after it, nothing written).
        """
        return self.buffer[-1] if self.buffer else None

    def _enqueue(self, msgs: tuple[Any, ...]) -> None:
        if self._closing or (self.comm is not None and self.comm.closed()):
            raise CommClosedError(f"Batched stream {self.name} is closed")
        self.buffer.extend(msgs)
        self.message_count += len(msgs)

    def _lazy_wake(self) -> None:
        self._lazy_timer = None
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None and self._loop is not None and self.comm is not None
        loop = self._loop
        wake = self._wake
        last = 0.0
        while True:
            await wake.wait()
            wake.clear()
            delay = last + self.interval - loop.time()
            if delay > 0 and self._urgent and not self._closing and not self._now:
                self._pause = pause = loop.create_future()
                timer = loop.call_later(delay, _wake_future, pause)
                try:
                    await pause
                finally:
                    timer.cancel()
                    self._pause = None
            if not self.buffer:
                if self._closing:
                    return
                continue
            if self._large_ends:
                # The buffer holds the messages numbered message_count - len(buffer) + 1 onwards.
                n = self._large_ends.popleft() - (self.message_count - len(self.buffer))
                payload, self.buffer = self.buffer[:n], self.buffer[n:]
                if self.buffer:
                    wake.set()  # the rest goes in the next write, without waiting out the interval
            else:
                payload, self.buffer = self.buffer, []
            urgent, self._urgent = self._urgent, False
            self._now = False
            if self._lazy_timer is not None:
                self._lazy_timer.cancel()
                self._lazy_timer = None
            try:
                self.byte_count += await self.comm.write(payload)
            except CommClosedError:
                logger.debug("Batched stream %s closed while writing", self.name)
                self._closing = True
                return
            except Exception:
                logger.exception("Batched stream %s failed to write %d messages", self.name, len(payload))
                self._closing = True
                self.comm.abort()
                return
            self.batch_count += 1
            if urgent:
                last = loop.time()
            if self._closing and not self.buffer:
                return

    async def close(self, timeout: float | None = None) -> None:
        """Flush what is queued, then close the comm.

        The writer task has ended when this returns: after ``timeout``
        seconds of a flush that does not finish (a peer that stopped reading)
        it is cancelled and awaited, and what was queued is dropped.
        """
        self._closing = True
        if self.comm is None:
            return
        if self._wake is not None:
            self._wake.set()
        if self._pause is not None:
            _wake_future(self._pause)
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait([task], timeout=timeout)
            except asyncio.CancelledError:
                self.abort()
                raise
            if not task.done():
                logger.debug("Batched stream %s: flush timed out; dropping %d messages", self.name, len(self.buffer))
                self.abort()
                # The writer only waits on the comm or the loop: it ends at its next step.
                await asyncio.wait([task])
        if not self.comm.closed():
            await self.comm.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued.

        The writer task is cancelled; it ends at its next step (``close()``
        awaits it, for a caller that must know it has ended).
        """
        self._closing = True
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
            self._lazy_timer = None
        self.buffer = []
        self._large_ends.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.comm is not None:
            self.comm.abort()


def _wake_future(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
