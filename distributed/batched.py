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
import functools
import logging
import math
from collections import deque
from typing import Any

from distributed.comm import Comm, CommClosedError

logger = logging.getLogger(__name__)

__all__ = ["BatchedSend"]


class BatchedSend:
    """Coalesce messages to one comm into lists, written at most every ``interval``.

    Writes are callbacks of the event loop: a send plans one (at once, or
    once ``interval`` has passed since the last), and the callback hands the
    list to :meth:`Comm.write_nowait`.  Only a write the comm cannot take at
    once (the peer is slow, a large message is being written) goes on as a
    task, and the next waits for it.  With thousands of streams, a writer
    task per stream woken per write (its future, coroutine and step) cost
    more than the write, and a quarter of what the young collections of the
    garbage collector looked at.

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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        #: A message sent with :meth:`send` waits: the next write is due ``interval`` after the last.
        self._urgent = False
        #: Set by :meth:`send_now`, and when a large message ended a write: the next write is due at once.
        self._now = False
        #: When the messages sent with :meth:`send_lazy` are due (loop time; inf: none waits).
        self._lazy_due = math.inf
        #: Loop time of the last write that carried an urgent message.
        self._last = -math.inf
        #: The planned write (a callback of the loop), and when it runs (-inf: at the next turn).
        self._flush_handle: asyncio.Handle | None = None
        self._flush_when = math.inf
        #: A write that had to wait (see :meth:`Comm.write_nowait`); no other starts until it ends.
        self._writer: asyncio.Future[int] | None = None
        #: Resolved once everything queued is written or dropped (for :meth:`close`).
        self._drained: asyncio.Future[None] | None = None
        #: Sequence numbers (1-based, as message_count) of the large messages queued: each ends a write.
        self._large_ends: deque[int] = deque()

    def start(self, comm: Comm) -> None:
        """Start writing to ``comm`` (from the event loop)."""
        self.comm = comm
        self._loop = asyncio.get_running_loop()
        if self.buffer:
            self._now = True  # whatever was queued before (held and lazy messages too) goes at once
            self._plan()

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
        self._plan()

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
        self._now = True  # before send() plans the write (harmless if the stream is closed: nothing is written)
        self.send(*msgs)

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
        if self._lazy_due == math.inf and self._loop is not None:
            self._lazy_due = self._loop.time() + self.interval
        self._plan()

    def hold(self, *msgs: Any) -> None:
        """Queue messages nobody waits on, without scheduling a write for them.

        They ride along with the next write; a later :meth:`send_lazy` (with
        or without messages) schedules one.  For a sender that makes many
        such messages in steps (a large release) and wants them in one write:
        it may add to a message it held while that is still the last of
        :attr:`buffer` (nothing was queued after it, nothing written).

        Raises
        ------
        CommClosedError
            When the stream is closed.
        """
        self._enqueue(msgs)

    def _enqueue(self, msgs: tuple[Any, ...]) -> None:
        if self._closing or (self.comm is not None and self.comm.closed()):
            raise CommClosedError(f"Batched stream {self.name} is closed")
        self.buffer.extend(msgs)
        self.message_count += len(msgs)

    def _plan(self) -> None:
        """Have the next write run when it is due, unless one runs or is planned as early."""
        loop = self._loop
        if loop is None or self._writer is not None or not self.buffer:
            return
        if self._now or self._closing:
            due = -math.inf
        else:
            due = self._last + self.interval if self._urgent else math.inf
            if self._lazy_due < due:
                due = self._lazy_due
            if due == math.inf:
                return  # held messages only
        if due >= self._flush_when:
            return
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        if due <= loop.time():
            self._flush_when = -math.inf
            self._flush_handle = loop.call_soon(self._flush)
        else:
            self._flush_when = due
            self._flush_handle = loop.call_at(due, self._flush)

    def _flush(self) -> None:
        """Write what is queued (up to the end of the first large message)."""
        self._flush_handle = None
        self._flush_when = math.inf
        comm = self.comm
        if comm is None or self._writer is not None or not self.buffer:
            self._note_drained()
            return
        self._now = False
        if self._large_ends:
            # The buffer holds the messages numbered message_count - len(buffer) + 1 onwards.
            n = self._large_ends.popleft() - (self.message_count - len(self.buffer))
            payload, self.buffer = self.buffer[:n], self.buffer[n:]
            self._now = bool(self.buffer)  # the rest goes in the next write, without waiting out the interval
        else:
            payload, self.buffer = self.buffer, []
        urgent, self._urgent = self._urgent, False
        self._lazy_due = math.inf
        try:
            written = comm.write_nowait(payload)
        except Exception as e:
            self._failed(e, len(payload))
            return
        if isinstance(written, int):
            self._wrote(written, urgent)
            return
        # A task of the write itself, not of a coroutine awaiting it: cancelled before its first step, the
        # write is closed with it (a wrapper would leave it never awaited).
        self._writer = writer = asyncio.ensure_future(written, loop=self._loop)
        if isinstance(writer, asyncio.Task):
            writer.set_name(f"batched-send-{self.name}")
        writer.add_done_callback(functools.partial(self._write_done, urgent, len(payload)))

    def _write_done(self, urgent: bool, count: int, writer: asyncio.Future[int]) -> None:
        if self._writer is writer:
            self._writer = None
        if writer.cancelled():
            self._note_drained()
            return
        exc = writer.exception()
        if exc is not None:
            self._failed(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)), count)
            return
        self._wrote(writer.result(), urgent)

    def _wrote(self, nbytes: int, urgent: bool) -> None:
        self.byte_count += nbytes
        self.batch_count += 1
        if urgent:
            assert self._loop is not None
            self._last = self._loop.time()
        if self.buffer:
            self._plan()
        else:
            self._note_drained()

    def _failed(self, exc: Exception, count: int) -> None:
        self._closing = True
        if isinstance(exc, CommClosedError):
            logger.debug("Batched stream %s closed while writing", self.name)
        else:
            logger.error("Batched stream %s failed to write %d messages", self.name, count, exc_info=exc)
            if self.comm is not None:
                self.comm.abort()
        self._end_close_wait()  # what is left is lost with the stream

    def _note_drained(self) -> None:
        if self._writer is None and not self.buffer:
            self._end_close_wait()

    def _end_close_wait(self) -> None:
        """Let :meth:`close` go on: all is written, or dropped."""
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def close(self, timeout: float | None = None) -> None:
        """Flush what is queued, then close the comm.

        No write is left running when this returns: after ``timeout`` seconds
        of a flush that does not finish (a peer that stopped reading) the
        write in progress is cancelled and awaited, and what was queued is
        dropped.
        """
        self._closing = True
        comm = self.comm
        if comm is None:
            return
        if (self.buffer or self._writer is not None) and not comm.closed():
            loop = asyncio.get_running_loop()
            self._drained = drained = loop.create_future()
            self._plan()
            try:
                await asyncio.wait([drained], timeout=timeout)
            except asyncio.CancelledError:
                self.abort()
                raise
            if not drained.done():
                logger.debug("Batched stream %s: flush timed out; dropping %d messages", self.name, len(self.buffer))
                self.abort()
        writer = self._writer
        if writer is not None and not writer.done():
            # Cancelled by abort() (or the comm closed under it): it ends at its next step.
            writer.cancel()
            await asyncio.wait([writer])
        if not comm.closed():
            await comm.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued.

        A write in progress is cancelled; it ends at its next step (``close()``
        awaits it, for a caller that must know it has ended).
        """
        self._closing = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
            self._flush_when = math.inf
        self.buffer = []
        self._large_ends.clear()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        if self.comm is not None:
            self.comm.abort()
        self._end_close_wait()
