"""TCP transport.

Wire format of one message, all integers unsigned 64-bit little-endian::

    n_frames | length_0 ... length_{n-1} | frame_0 ... frame_{n-1}

Reads go through :class:`asyncio.BufferedProtocol`: small frames are parsed out
of a scratch buffer, and a large frame is received straight into a buffer of
its own size, so the bytes are written to memory once.  A count or a length
above the configured maximum aborts the connection before anything is
allocated for it.

Scratch buffers are taken when bytes arrive and given back to a small shared
pool as soon as everything in them is parsed, so an idle or silent connection
holds none.  An accepted connection whose first message header has not
arrived within ``distributed.comm.timeouts.tcp`` is closed.

A connection holding part of a message is watched: when no byte of it arrives
for ``distributed.comm.timeouts.tcp`` (a peer that sent a header and went
silent, or vanished mid-transfer), the connection is closed and what was read
of the message dropped.  Only progress counts, so a large transfer that keeps
moving is never cut.  The watch is one timer armed when a read ends inside a
message and checked once per timeout; a message read whole arms nothing.

Writes: a message under 1 MiB is handed to the asyncio transport whole, with
nothing awaited before it is, so messages from concurrent writers never
interleave.  A larger one on a plain TCP connection is sent by ``sendmsg``
straight from its frames' memory (the array's own buffer), waiting for the
socket as it fills, while every other writer waits on the comm's write lock;
the transport would otherwise copy what the socket does not take at once.
Over TLS large frames go through the transport in slices instead.

Given an ``ssl.SSLContext``, connecting and listening run the same protocol
over TLS: that is the ``tls://`` transport (:mod:`distributed.comm.tls`).
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import socket
import ssl
import struct
import time
from asyncio.trsock import TransportSocket
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import dask.config

from distributed.comm.addressing import concrete_host, parse_host_port, unparse_host_port
from distributed.comm.core import Comm, CommClosedError, CommHandler, Listener, run_handler_task
from distributed.comm.refusals import RefusalLog, refused_log_interval
from distributed.protocol.compression import Codec, codec_for
from distributed.protocol.framing import ProtocolError, dumps, loads
from distributed.protocol.serialize import Frame
from distributed.utils import wait_for

logger = logging.getLogger(__name__)

__all__ = ["TCPComm", "TCPListener", "tcp_connect"]

_U64: Final = struct.Struct("<Q")
#: Messages of up to this many frames may take the parser's one-go path (see ``_FrameProtocol._whole_message``).
_FAST_FRAMES: Final = 8
_LENGTHS: Final = [struct.Struct(f"<{n}Q") for n in range(_FAST_FRAMES + 1)]
SCRATCH_SIZE: Final = 256 * 1024
LARGE_FRAME: Final = 64 * 1024
_WRITE_SLICE: Final = 1 << 22
_JOIN_LIMIT: Final = 64 * 1024
# Messages from this size on are sent from their own memory by the socket (see TCPComm.write).
_DIRECT_LIMIT: Final = 1 << 20
# Most buffers one sendmsg call takes (Linux IOV_MAX).
_IOV_MAX: Final = 1024
_PAUSE_QUEUE: Final = 256
# ... or once the messages read and not yet taken hold this many bytes (a client's graph
# parts, say, arriving faster than the scheduler adds them: the rest waits in the kernel).
_PAUSE_BYTES: Final = 16 << 20
# Empty scratch buffers kept for reuse.  Taking one and giving it back are
# single list operations, safe with event loops in several threads.
_SCRATCH_POOL: list[bytearray] = []
_SCRATCH_POOL_SIZE: Final = 16
_NO_BUFFER: Final = bytearray()


#: How a connection ends when the peer's host stops answering (the kernel gave up, or was told there is no route).
_UNREACHABLE = frozenset({errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH})


def _limits() -> tuple[int, int]:
    from dask.utils import parse_bytes

    size = dask.config.get("distributed.comm.max-frame-size", "2GiB")
    count = dask.config.get("distributed.comm.max-frames", 1_000_000)
    return int(parse_bytes(size) if isinstance(size, str) else size), int(count)


def _compression() -> Codec | None:
    """The codec messages' large frames go out compressed with (``distributed.comm.compression``; None: none)."""
    return codec_for(dask.config.get("distributed.comm.compression", False), "distributed.comm.compression")


def _tcp_timeout() -> float | None:
    """Seconds a connection may stay silent before its first message, or mid-message (None: forever)."""
    from dask.utils import parse_timedelta

    value = dask.config.get("distributed.comm.timeouts.tcp", None)
    seconds = parse_timedelta(value, default="seconds") if value is not None else None
    return float(seconds) if seconds else None


def _take_scratch() -> bytearray:
    try:
        return _SCRATCH_POOL.pop()
    except IndexError:
        return bytearray(SCRATCH_SIZE)


def _give_scratch(buf: bytearray) -> None:
    if len(buf) == SCRATCH_SIZE and len(_SCRATCH_POOL) < _SCRATCH_POOL_SIZE:
        _SCRATCH_POOL.append(buf)


def _frame_buffer(n: int) -> bytearray | memoryview:
    """Writable memory for a large incoming frame.

    NumPy's allocator when NumPy is installed: it asks the kernel for huge
    pages for large blocks, so filling the buffer takes a fraction of the page
    faults of a ``bytearray`` of the same size (five times the bandwidth here
    for a 200 MB frame).  The frame is received straight into it.
    """
    try:
        import numpy
    except ImportError:
        return bytearray(n)
    return numpy.empty(n, dtype=numpy.uint8).data


def _tls_hint(buf: bytearray, start: int) -> str:
    """Why a header is nonsense, when it is the start of a TLS record (handshake or alert)."""
    if buf[start] in (0x15, 0x16) and buf[start + 1] == 0x03:
        return ": the peer speaks TLS, reach it with a tls:// address and a Security"
    return ""


class _FrameProtocol(asyncio.BufferedProtocol):
    """Parses the byte stream into lists of frames and buffers writes."""

    def __init__(self, max_frame_size: int, max_frames: int, stall_timeout: float | None) -> None:
        self.max_frame_size = max_frame_size
        self.max_frames = max_frames
        self.stall_timeout = stall_timeout
        self.transport: asyncio.Transport | None = None
        # Taken from the pool when bytes arrive, given back once all is parsed.
        self._buf = _NO_BUFFER
        self._start = 0
        self._end = 0
        # Parsing state of the message being received.
        self._nframes = -1
        self._lengths: tuple[int, ...] = ()
        self._frames: list[Frame] = []
        self._target: bytearray | memoryview | None = None
        self._target_view: memoryview | None = None
        self._target_pos = 0
        # Completed messages and the reader waiting for one.
        self._messages: collections.deque[list[Frame]] = collections.deque()
        #: Bytes in ``_messages``.
        self._queued_bytes = 0
        self._read_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        # While a reader takes each message as it completes (TCPComm.read_each): what hands it the
        # frames, whether it holds them back for now (they queue meanwhile), and what its end is told
        # with (False: the connection closed, every message given).
        self._deliver: Callable[[list[Frame]], None] | None = None
        self._delivery_held = False
        self._delivery_done: asyncio.Future[bool] | None = None
        # Write flow control.
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        # Held by a write that awaits part-way through its message, so that
        # no other message is interleaved with it; made on first need.
        self._write_lock: asyncio.Lock | None = None
        # The duplicate of the socket a large message is being sent through.
        self._direct_sock: socket.socket | None = None
        self.closed = False
        self.close_reason: BaseException | None = None
        self.on_connection: Any = None
        # Set on accepted connections: closed if no message header arrives in time.
        self._silence_timer: asyncio.TimerHandle | None = None
        # Armed while a message is partly read: closed if no byte arrives in time.
        self._stall_timer: asyncio.TimerHandle | None = None
        # Set by every read, cleared by the stall timer: whether bytes came in since it last looked.
        self._progress = False

    # -- asyncio callbacks --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A read-write transport: asyncio's, or another loop's (uvloop's are no subclasses of asyncio's).
        self.transport = cast(asyncio.Transport, transport)
        if self.on_connection is not None:
            timeout = self.stall_timeout
            if timeout is not None:
                loop = asyncio.get_running_loop()
                self._silence_timer = loop.call_later(timeout, self._silent_too_long, timeout)
            self.on_connection(self)

    def _silent_too_long(self, timeout: float) -> None:
        self._silence_timer = None
        if not self.closed:
            self._fail(ProtocolError(f"No message header within {timeout} s of connecting"))

    def _spoke(self) -> None:
        if self._silence_timer is not None:
            self._silence_timer.cancel()
            self._silence_timer = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._target_view is not None:
            return self._target_view[self._target_pos :]
        if not self._buf:
            self._buf = _take_scratch()
        if len(self._buf) - self._end < 4096:
            self._compact()
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._progress = True
        if self._target_view is not None:
            self._target_pos += nbytes
            if self._target_pos < len(self._target_view):
                if self._stall_timer is None:
                    self._watch_stall()
                return
            assert self._target is not None
            self._frames.append(self._target)
            self._target = None
            self._target_view.release()
            self._target_view = None
        else:
            self._end += nbytes
        try:
            self._parse()
        except ProtocolError as e:
            self._fail(e)

    def _watch_stall(self) -> None:
        timeout = self.stall_timeout
        if timeout is not None and not self.closed:
            loop = asyncio.get_running_loop()
            self._progress = False
            self._stall_timer = loop.call_later(timeout, self._check_stall)

    def _check_stall(self) -> None:
        self._stall_timer = None
        if self.closed:
            return
        if self._nframes < 0 and self._start == self._end and self._target_view is None:
            return  # the message was completed meanwhile; nothing is partly read
        if not self._progress and not self._reading_paused:
            # Reading paused on our side is not the peer's stall.
            self._fail(ProtocolError(f"No progress for {self.stall_timeout} s in the middle of a message; dropping it"))
            return
        self._watch_stall()

    def connection_lost(self, exc: Exception | None) -> None:
        self._spoke()
        self._stop_stall_timer()
        self._end_direct_send()
        self._release_scratch()
        self.closed = True
        if self.close_reason is None:
            self.close_reason = exc
        self._wake_reader()
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    # -- parsing ------------------------------------------------------------
    def _compact(self) -> None:
        live = self._end - self._start
        if self._start:
            self._buf[:live] = self._buf[self._start : self._end]
            self._start, self._end = 0, live
        if len(self._buf) - self._end < 4096:
            self._grow(len(self._buf) + max(SCRATCH_SIZE, len(self._buf)))

    def _ensure_capacity(self, need: int) -> None:
        if len(self._buf) - self._start < need:
            self._compact()
            if len(self._buf) < need:
                self._grow(need)

    def _grow(self, size: int) -> None:
        # asyncio keeps the view returned by get_buffer() alive while it calls
        # buffer_updated(), and a bytearray with a live view cannot be resized:
        # move the bytes into a new buffer instead of extending this one.
        new = bytearray(size)
        new[: self._end] = self._buf[: self._end]
        self._buf = new

    def _parse(self) -> None:
        buf = self._buf
        while True:
            avail = self._end - self._start
            if self._nframes < 0 and avail >= 16 and self._whole_message(buf, avail):
                continue
            if self._nframes < 0:
                if avail < 8:
                    break
                (n,) = _U64.unpack_from(buf, self._start)
                if n < 1 or n > self.max_frames:
                    raise ProtocolError(
                        f"Message announces {n} frames (limit {self.max_frames}){_tls_hint(buf, self._start)}"
                    )
                self._start += 8
                self._nframes = n
                self._lengths = ()
                self._frames = []
                continue
            if not self._lengths:
                need = 8 * self._nframes
                if avail < need:
                    self._ensure_capacity(need)
                    break
                lengths = struct.unpack_from(f"<{self._nframes}Q", buf, self._start)
                for length in lengths:
                    if length > self.max_frame_size:
                        raise ProtocolError(f"Frame of {length} bytes exceeds the limit of {self.max_frame_size}")
                if self._silence_timer is not None:
                    self._spoke()
                self._start += need
                self._lengths = lengths
                continue
            i = len(self._frames)
            if i == self._nframes:
                frames, lengths = self._frames, self._lengths
                self._nframes = -1
                self._lengths = ()
                self._frames = []
                if self._deliver is not None and not self._delivery_held and not self._messages:
                    self._deliver(frames)
                    continue
                self._messages.append(frames)
                self._queued_bytes += sum(lengths)  # counted only for what waits in the queue
                self._wake_reader()
                if (
                    (len(self._messages) > _PAUSE_QUEUE or self._queued_bytes > _PAUSE_BYTES)
                    and self.transport
                    and not self._reading_paused
                ):
                    self._reading_paused = True
                    self.transport.pause_reading()
                continue
            length = self._lengths[i]
            if length <= avail:
                self._frames.append(buf[self._start : self._start + length])  # a bytearray slice: one copy
                self._start += length
                continue
            if length > LARGE_FRAME:
                target = _frame_buffer(length)
                target[:avail] = buf[self._start : self._end]
                self._start = self._end = 0
                self._target = target
                self._target_view = memoryview(target)
                self._target_pos = avail
                break
            self._ensure_capacity(length)
            break
        if self._start == self._end:
            self._start = self._end = 0
            self._release_scratch()
            if self._nframes < 0:
                return  # between messages: nothing to watch
        # A message is partly read: watch that it keeps coming.
        if self._stall_timer is None:
            self._watch_stall()

    def _whole_message(self, buf: bytearray, avail: int) -> bool:
        """Hand on, in one go, a message that lies whole in the buffer from ``_start``; False if none does.

        The common case (a heartbeat, a batch of results): the general parse
        takes the header, the lengths and each frame in a turn of its own.
        Anything unusual (a bad header, a frame past a limit, delivery held
        or messages queued) is left to it.
        """
        start = self._start
        (n,) = _U64.unpack_from(buf, start)
        head = 8 + 8 * n
        deliver = self._deliver
        if (
            n > _FAST_FRAMES
            or n < 1
            or n > self.max_frames
            or avail < head
            or deliver is None
            or self._delivery_held
            or self._messages
        ):
            return False
        lengths = _LENGTHS[n].unpack_from(buf, start + 8)
        if head + sum(lengths) > avail or max(lengths) > self.max_frame_size:
            return False
        if self._silence_timer is not None:
            self._spoke()
        frames: list[Frame] = []
        pos = start + head
        for length in lengths:
            frames.append(buf[pos : pos + length])
            pos += length
        self._start = pos
        deliver(frames)
        return True

    def _release_scratch(self) -> None:
        # Only called with nothing left to parse in the buffer.
        buf = self._buf
        if buf:
            self._buf = _NO_BUFFER
            self._start = self._end = 0
            _give_scratch(buf)

    def _stop_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _fail(self, exc: BaseException) -> None:
        logger.warning("Closing connection: %s", exc)
        self._spoke()
        self._stop_stall_timer()
        self.close_reason = exc
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._end_direct_send()
        self._wake_reader()

    def _end_direct_send(self) -> None:
        # The duplicate descriptor keeps the connection open after the
        # transport closes its own: shut it down, which fails the send.
        sock = self._direct_sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _wake_reader(self) -> None:
        w = self._read_waiter
        if w is not None and not w.done():
            w.set_result(None)
        if self._deliver is not None:
            self._end_delivery_if_closed()

    def _end_delivery_if_closed(self) -> None:
        done = self._delivery_done
        if self.closed and not self._messages and not self._delivery_held and done is not None and not done.done():
            done.set_result(False)

    def _next_queued(self) -> list[Frame]:
        frames = self._messages.popleft()
        self._queued_bytes -= sum(f.nbytes if isinstance(f, memoryview) else len(f) for f in frames)
        if (
            self._reading_paused
            and len(self._messages) < _PAUSE_QUEUE // 4
            and self._queued_bytes < _PAUSE_BYTES // 4
            and self.transport
        ):
            self._reading_paused = False
            self.transport.resume_reading()
        return frames

    # -- used by TCPComm ----------------------------------------------------
    async def read_frames(self) -> list[Frame]:
        while not self._messages:
            if self.closed:
                reason = self.close_reason
                raise CommClosedError(f"Connection closed{': ' + repr(reason) if reason else ''}")
            loop = asyncio.get_running_loop()
            self._read_waiter = loop.create_future()
            try:
                await self._read_waiter
            finally:
                self._read_waiter = None
        return self._next_queued()

    def start_delivery(self, deliver: Callable[[list[Frame]], None], done: asyncio.Future[bool]) -> None:
        """Hand each message to ``deliver`` as it completes, those queued first; ``done`` is told the end."""
        self._deliver = deliver
        self._delivery_done = done
        self.resume_delivery()

    def hold_delivery(self) -> None:
        """Queue the messages that complete, until :meth:`resume_delivery`."""
        self._delivery_held = True

    def resume_delivery(self) -> None:
        """Hand the queued messages over, then each as it completes."""
        self._delivery_held = False
        while self._messages and self._deliver is not None and not self._delivery_held:
            self._deliver(self._next_queued())
        if self._deliver is not None:
            self._end_delivery_if_closed()

    def stop_delivery(self, outcome: bool | BaseException | None = None) -> None:
        """Hand no more messages over (they queue), and tell ``done`` the ``outcome`` if any: True when
        the reader stopped, or the error that ended the reading."""
        done = self._delivery_done
        self._deliver = None
        self._delivery_done = None
        self._delivery_held = False
        if done is not None and not done.done():
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            elif outcome is not None:
                done.set_result(outcome)

    async def drain(self) -> None:
        while self._write_paused and not self.closed:
            fut = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Wait until ``sock`` can take more bytes (or has failed)."""
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()
    loop.add_writer(fd, _set_done, fut)
    try:
        await fut
    finally:
        # Before the duplicate is closed: the kernel keeps an epoll entry for
        # as long as any descriptor of the socket is open.
        loop.remove_writer(fd)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class TCPComm(Comm):
    """A comm over one TCP connection."""

    def __init__(
        self,
        protocol: _FrameProtocol,
        local: str,
        peer: str,
        tls_client: bool = False,
        compression: Codec | None = None,
    ) -> None:
        self._protocol = protocol
        #: Compresses the large frames this side writes (the peer reads any codec, whatever its own setting).
        self._compression = compression
        self._local = local
        self._peer = peer
        # Until the first message arrives on a TLS comm we opened, a close
        # without a reason is most likely the server refusing our certificate:
        # it drops the connection without telling us (asyncio sends no alert).
        self._unanswered = tls_client

    @property
    def local_address(self) -> str:
        return self._local

    @property
    def peer_address(self) -> str:
        return self._peer

    def watch_peer_host(self, timeout: float) -> bool:
        transport = self._protocol.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None or not hasattr(socket, "TCP_USER_TIMEOUT"):
            return False
        try:
            # Keep-alive probes make an idle connection send something the peer's kernel must
            # acknowledge (once a second, the least the kernel allows); the user timeout ends the
            # connection when that, or any data we sent, goes unacknowledged for ``timeout``.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1, round(timeout * 1000)))
        except OSError:
            logger.debug("Could not set keep-alive on the connection to %s", self._peer, exc_info=True)
            return False
        return True

    @property
    def peer_unreachable(self) -> bool:
        reason = self._protocol.close_reason
        return isinstance(reason, OSError) and reason.errno in _UNREACHABLE

    async def read(self) -> Any:
        try:
            frames = await self._protocol.read_frames()
        except CommClosedError as e:
            if self._looks_refused():
                raise self._refused(str(e)) from e
            raise
        self._unanswered = False
        try:
            return loads(frames, deserialize=False)
        except ProtocolError as e:
            self._protocol._fail(e)
            raise

    async def read_each(self, handle: Callable[[Any], bool]) -> None:
        # Called from the protocol's parse, in the transport's read callback, as each message completes.
        protocol = self._protocol
        if protocol._deliver is not None or protocol._read_waiter is not None:
            raise RuntimeError(f"{self!r} is already being read")
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def deliver(frames: list[Frame]) -> None:
            self._unanswered = False
            try:
                msg = loads(frames, deserialize=False)
            except ProtocolError as e:
                protocol.stop_delivery(e)
                protocol._fail(e)
                return
            try:
                more = handle(msg)
            except Exception as e:
                protocol.stop_delivery(e)
                return
            if not more:
                protocol.stop_delivery(True)

        protocol.start_delivery(deliver, done)
        try:
            stopped = await done
        finally:
            protocol.stop_delivery()
        if stopped:
            return
        reason = protocol.close_reason
        if self._looks_refused():
            raise self._refused("Connection closed")
        raise CommClosedError(f"Connection closed{': ' + repr(reason) if reason else ''}")

    def hold_messages(self) -> None:
        self._protocol.hold_delivery()

    def release_messages(self) -> None:
        self._protocol.resume_delivery()

    def _looks_refused(self) -> bool:
        """Whether the connection ended as a server refusing our certificate ends it.

        Before its first message, on a TLS comm we opened: a close with no reason (the
        server dropped it), or a reset (it dropped it after we had written: its kernel
        answered our bytes with a reset, which may come before the close is seen).
        """
        if not self._unanswered:
            return False
        reason = self._protocol.close_reason
        return reason is None or isinstance(reason, (ConnectionResetError, BrokenPipeError))

    def _refused(self, what: str) -> CommClosedError:
        return CommClosedError(
            f"{what}: {self._peer} closed the TLS connection before answering; it may not accept this side's "
            "certificate (not signed by its CA, expired, or none given): its log says why"
        )

    async def write(self, msg: Any) -> int:
        self._check_open()
        return await self._write_framed(*self._framed(msg))

    def write_nowait(self, msg: Any) -> int | Awaitable[int]:
        p = self._protocol
        self._check_open()
        header, frames, lengths, total = self._framed(msg)
        if self._may_write_whole(total) and not p._write_paused:
            self._write_now(header, frames, lengths, total)
            return total + len(header)
        return self._write_framed(header, frames, lengths, total)

    def _may_write_whole(self, total: int) -> bool:
        """Whether a message of ``total`` bytes may be handed to the transport whole, now.

        Small, and no large message is being written part by part (it would be interleaved with it).
        """
        lock = self._protocol._write_lock
        return total < _DIRECT_LIMIT and (lock is None or not lock.locked())

    def _framed(self, msg: Any) -> tuple[bytes, list[Frame], list[int], int]:
        """``msg``'s header, frames, their lengths and their total."""
        frames = dumps(msg, compression=self._compression)
        lengths = [f.nbytes if isinstance(f, memoryview) else len(f) for f in frames]
        if max(lengths) > self._protocol.max_frame_size:
            # The peer would drop the connection on reading it, and a retry would
            # send it again: refuse here, before a byte is written.
            raise ValueError(
                f"A frame of {max(lengths)} bytes exceeds distributed.comm.max-frame-size "
                f"({self._protocol.max_frame_size} bytes)"
            )
        header = struct.pack(f"<{len(frames) + 1}Q", len(frames), *lengths)
        return header, frames, lengths, sum(lengths)

    async def _write_framed(self, header: bytes, frames: list[Frame], lengths: list[int], total: int) -> int:
        p = self._protocol
        lock = p._write_lock
        if self._may_write_whole(total):
            # Written whole before anything is awaited: never interleaved with another message.
            self._write_now(header, frames, lengths, total)
        else:
            if lock is None:
                lock = p._write_lock = asyncio.Lock()
            async with lock:
                self._check_open()
                if total < _DIRECT_LIMIT:
                    self._write_now(header, frames, lengths, total)
                elif not self._can_send_direct() or not await self._send_direct([header, *frames]):
                    await self._write_slices(header, frames, lengths)
        if p._write_paused:
            await p.drain()
            if p.closed:
                raise CommClosedError(f"Connection to {self._peer} closed while writing")
        return total + len(header)

    def _check_open(self) -> None:
        p = self._protocol
        if p.closed or p.transport is None or p.transport.is_closing():
            if self._looks_refused():
                raise self._refused(f"Connection to {self._peer} is closed")
            raise CommClosedError(f"Connection to {self._peer} is closed")

    def _write_now(self, header: bytes, frames: list[Frame], lengths: list[int], total: int) -> None:
        transport = self._protocol.transport
        assert transport is not None
        if total <= _JOIN_LIMIT:
            transport.write(b"".join([header, *frames]))
            return
        transport.write(header)
        for f, n in zip(frames, lengths, strict=True):
            if n:
                transport.write(f)

    async def _write_slices(self, header: bytes, frames: list[Frame], lengths: list[int]) -> None:
        """Write through the transport, a large frame in slices, each once the last is sent.

        Handed over whole, what the socket does not take at once would be
        copied into the transport's buffer (fresh memory the size of the frame).
        """
        p = self._protocol
        transport = p.transport
        assert transport is not None
        transport.write(header)
        for f, n in zip(frames, lengths, strict=True):
            if n <= _WRITE_SLICE:
                if n:
                    transport.write(f)
                continue
            view = memoryview(f).cast("B")
            for start in range(0, n, _WRITE_SLICE):
                if p._write_paused:
                    await p.drain()
                    if p.closed:
                        raise CommClosedError(f"Connection to {self._peer} closed while writing")
                transport.write(view[start : start + _WRITE_SLICE])

    def _can_send_direct(self) -> bool:
        """Whether the socket can take a message itself: plain TCP, nothing left in the transport's buffer."""
        transport = self._protocol.transport
        return (
            transport is not None
            and transport.get_write_buffer_size() == 0
            and transport.get_extra_info("ssl_object") is None
            # asyncio's own socket (another loop's, uvloop's, is a stand-in this path does not use).
            and isinstance(transport.get_extra_info("socket"), (socket.socket, TransportSocket))
        )

    async def _send_direct(self, buffers: list[Frame]) -> bool:
        """Send ``buffers`` with ``sendmsg`` from their own memory, waiting for the socket as it fills.

        Returns False, having sent nothing, when no descriptor is left to duplicate the socket.

        asyncio's transport copies whatever the socket does not take at once
        into a buffer of its own; a large frame would be copied once more than
        needed.  The socket is used through a duplicate of its descriptor (the
        loop lets no one else watch the transport's), while the transport's own
        buffer is empty and every other write waits for the lock.
        """
        p = self._protocol
        assert p.transport is not None
        try:
            sock = p.transport.get_extra_info("socket").dup()
        except OSError:
            return False  # out of descriptors: the transport's path needs none
        p._direct_sock = sock
        pending = [v for v in (memoryview(b).cast("B") for b in buffers) if v.nbytes]
        i = 0  # pending[i:] is left to send
        loop = asyncio.get_running_loop()
        try:
            sock.setblocking(False)
            while True:
                try:
                    sent = sock.sendmsg(pending[i : i + _IOV_MAX])
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError as e:
                    raise CommClosedError(f"Connection to {self._peer} closed while writing: {e!r}") from e
                while sent:
                    first = pending[i]
                    if sent < first.nbytes:
                        pending[i] = first[sent:]
                        break
                    sent -= first.nbytes
                    i += 1
                if i == len(pending):
                    return True
                if p.closed:
                    raise CommClosedError(f"Connection to {self._peer} closed while writing")
                await _writable(loop, sock)
        except BaseException:
            # Part of a message is on the wire: the connection cannot carry another.
            self.abort()
            raise
        finally:
            p._direct_sock = None
            sock.close()

    async def close(self) -> None:
        p = self._protocol
        if p.transport is not None and not p.closed:
            p.closed = True
            p.transport.close()
        p._wake_reader()

    def abort(self) -> None:
        p = self._protocol
        p.closed = True
        if p.transport is not None:
            p.transport.abort()
        p._wake_reader()

    def closed(self) -> bool:
        p = self._protocol
        return p.closed or p.transport is None or p.transport.is_closing()


def _sockname(transport: asyncio.BaseTransport, which: str, scheme: str, default: str = "<unknown>") -> str:
    addr = transport.get_extra_info(which)
    if not addr:
        return f"{scheme}://{default}"
    host, port = addr[0], addr[1]
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


async def tcp_connect(loc: str, timeout: float, ssl_context: ssl.SSLContext | None = None) -> TCPComm:
    """Connect over TCP, retrying refused connections until ``timeout``.

    With ``ssl_context`` the connection is TLS (a ``tls://`` comm): a failed
    handshake (a certificate the context does not accept, or the server
    refusing ours) is raised at once, never retried.
    """
    host, port = parse_host_port(loc)
    scheme = "tcp" if ssl_context is None else "tls"
    loop = asyncio.get_running_loop()
    max_size, max_frames = _limits()
    stall_timeout = _tcp_timeout()
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            if ssl_context is None:
                connecting = loop.create_connection(
                    lambda: _FrameProtocol(max_size, max_frames, stall_timeout), host, port
                )
            else:
                connecting = loop.create_connection(
                    lambda: _FrameProtocol(max_size, max_frames, stall_timeout),
                    host,
                    port,
                    ssl=ssl_context,
                    ssl_handshake_timeout=remaining,
                )
            transport, protocol = await wait_for(connecting, timeout=remaining)
            break
        except (TimeoutError, OSError) as e:
            if ssl_context is not None and isinstance(e, (ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                raise OSError(f"TLS handshake with tls://{loc} failed: {e}") from e
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OSError(f"Timed out trying to connect to {scheme}://{loc} after {timeout} s: {e!r}") from e
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)
    return TCPComm(
        protocol,
        _sockname(transport, "sockname", scheme),
        # A TLS transport the server dropped at once no longer knows the peer.
        _sockname(transport, "peername", scheme, default=loc),
        tls_client=ssl_context is not None,
        compression=_compression(),
    )


async def _serve_all_interfaces(
    loop: asyncio.AbstractEventLoop, factory: Callable[[], _FrameProtocol], port: int, backlog: int
) -> asyncio.base_events.Server:
    """Listen on every interface, IPv4 and IPv6, on one port.

    Left to itself, ``create_server(None, 0)`` binds one socket per address
    family, each on a random port of its own, and the address advertised can
    only name one of them: clients of the other family are refused.  One
    dual-stack socket answers both families on one port; where the system has
    none, listen on IPv4 only.
    """
    if socket.has_dualstack_ipv6():
        try:
            sock = socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=backlog, reuse_port=False, dualstack_ipv6=True
            )
        except OSError:
            # IPv6 switched off at run time: IPv4 only (a port in use fails there too).
            logger.debug("No dual-stack socket on port %d; listening on IPv4 only", port, exc_info=True)
        else:
            try:
                return await loop.create_server(factory, sock=sock, backlog=backlog)
            except BaseException:
                sock.close()
                raise
    return await loop.create_server(factory, "0.0.0.0", port, backlog=backlog, reuse_address=True)


class TCPListener(Listener):
    """Listens for TCP connections.

    With ``ssl_context`` the connections are TLS (``tls://``): a connection
    reaches ``handler`` only once its handshake succeeded, so a peer the
    context does not accept never has a byte of its read as a message.
    """

    def __init__(
        self,
        loc: str,
        handler: CommHandler,
        ssl_context: ssl.SSLContext | None = None,
        default_host: str | None = None,
    ) -> None:
        host, port = parse_host_port(loc, default_port=0)
        self.host = host
        self.port = port
        #: The host announced when listening on every interface (None: the outward interface's).
        self.default_host = default_host
        self._contact_host: str | None = None
        self.handler = handler
        self.ssl_context = ssl_context
        self.scheme = "tcp" if ssl_context is None else "tls"
        self._handshake_timeout: float | None = None
        self._compression: Codec | None = None
        self.server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # TLS handshakes under way: ended by stop(), as no comm exists yet to close.
        self._handshakes: set[asyncio.Task[None]] = set()
        # Refused TLS peers: all counted, logged at most once per host per interval.
        self.refusals = RefusalLog(refused_log_interval())

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        max_size, max_frames = _limits()
        stall_timeout = _tcp_timeout()
        backlog = int(dask.config.get("distributed.comm.socket-backlog", 2048))

        def factory() -> _FrameProtocol:
            p = _FrameProtocol(max_size, max_frames, stall_timeout)
            p.on_connection = self._on_connection
            return p

        self._handshake_timeout = stall_timeout
        self._compression = _compression()
        if self.host in ("", "::"):
            self.server = await _serve_all_interfaces(loop, factory, self.port, backlog)
        else:
            self.server = await loop.create_server(factory, self.host, self.port, backlog=backlog, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]
        # Once, not per call: the route lookup behind it is a system call, and peers must see one address.
        self._contact_host = concrete_host(self.host, self.default_host)

    def _on_connection(self, protocol: _FrameProtocol) -> None:
        assert protocol.transport is not None
        if self.ssl_context is not None:
            # Not a byte is parsed before the handshake: the protocol gets the
            # decrypted stream only once the peer's certificate is accepted.
            protocol.transport.pause_reading()
            task = asyncio.get_running_loop().create_task(self._handshake(protocol, protocol.transport))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)
            return
        self._hand_over(protocol)

    async def _handshake(self, protocol: _FrameProtocol, raw: asyncio.Transport) -> None:
        assert self.ssl_context is not None
        peer = _sockname(raw, "peername", "tcp")
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                raw, protocol, self.ssl_context, server_side=True, ssl_handshake_timeout=self._handshake_timeout
            )
        except OSError as e:  # TimeoutError and ssl.SSLError included
            # asyncio drops the peer without a word; the operator needs to know who was refused and why.
            self._log_refusal(raw, peer, str(e) or repr(e))
            raw.abort()
            protocol.connection_lost(e)
            return
        except asyncio.CancelledError:
            raw.abort()
            protocol.connection_lost(None)
            raise
        if tls is None or protocol.closed:
            raw.abort()
            return
        protocol.transport = tls
        self._hand_over(protocol)

    def _log_refusal(self, raw: asyncio.BaseTransport, peer: str, reason: str) -> None:
        addr = raw.get_extra_info("peername")
        host = str(addr[0]) if addr else peer
        interval = self.refusals.interval
        left_out = self.refusals.refused(host, time.monotonic())
        if left_out is None:
            # A peer retrying in a loop: one warning per interval says it all.
            logger.debug("Refused a TLS connection from %s: %s", peer, reason)
        elif left_out:
            logger.warning(
                "Refused a TLS connection from %s: %s (and %d more from this host since the last line, not logged)",
                peer,
                reason,
                left_out,
            )
        elif interval > 0:
            logger.warning(
                "Refused a TLS connection from %s: %s (more from this host are logged at most once per %.0f s)",
                peer,
                reason,
                interval,
            )
        else:
            logger.warning("Refused a TLS connection from %s: %s", peer, reason)

    @property
    def refused_connections(self) -> int:
        return self.refusals.total

    def _hand_over(self, protocol: _FrameProtocol) -> None:
        assert protocol.transport is not None
        comm = TCPComm(
            protocol,
            _sockname(protocol.transport, "sockname", self.scheme),
            _sockname(protocol.transport, "peername", self.scheme),
            compression=self._compression,
        )
        run_handler_task(self.handler, comm, self._tasks)

    def stop(self) -> None:
        for task in self._handshakes:
            task.cancel()
        if self.server is not None:
            self.server.close()
            self.server = None

    @property
    def listen_address(self) -> str:
        return f"{self.scheme}://{unparse_host_port(self.host or '0.0.0.0', self.port)}"

    @property
    def contact_address(self) -> str:
        host = self._contact_host if self._contact_host is not None else concrete_host(self.host, self.default_host)
        return f"{self.scheme}://{unparse_host_port(host, self.port)}"
