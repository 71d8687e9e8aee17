"""The ``Comm`` interface, and ``connect``/``listen`` by address (addresses themselves: :mod:`.addressing`).

A comm carries whole messages between two endpoints.  Messages read from a
comm are never unpickled by the comm itself: serialised values arrive as
:class:`~distributed.protocol.Serialized` (TCP) or as the live
:class:`~distributed.protocol.Serialize` objects that were sent (in process),
and the receiving code calls :func:`~distributed.protocol.unwrap` where it
wants an object.  This is what lets the scheduler forward task payloads without
ever running user code.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypedDict, Unpack

import dask.config

from distributed.comm.addressing import parse_address
from distributed.exceptions import CommClosedError

__all__ = [
    "Comm",
    "CommClosedError",
    "ConnectionArgs",
    "Listener",
    "connect",
    "connect_until",
    "listen",
]

CommHandler = Callable[["Comm"], Coroutine[Any, Any, None]]


class ConnectionArgs(TypedDict, total=False):
    """Keyword arguments of :func:`connect` and :func:`listen` beyond the address.

    Made by :meth:`distributed.security.Security.get_connection_args` and
    ``get_listen_args``.
    """

    #: The TLS context of ``tls://`` comms (``None``: no credentials).
    ssl_context: ssl.SSLContext | None
    #: Refuse addresses whose transport does not encrypt (``tcp://``).
    require_encryption: bool
    #: Extra arguments of other transports; always empty here.
    extra_conn_args: dict[str, Any]


#: Schemes whose comms are encrypted, or never leave the process.
_SAFE_SCHEMES = frozenset({"tls", "inproc"})


def _check_encryption(addr: str, scheme: str, args: ConnectionArgs, verb: str) -> None:
    if args.get("require_encryption") and scheme not in _SAFE_SCHEMES:
        raise RuntimeError(
            f"Encryption is required (Security(require_encryption=True) or distributed.comm.require-encryption), "
            f"refusing to {verb} {addr!r}: use a tls:// address"
        )


def _ssl_context(addr: str, args: ConnectionArgs) -> ssl.SSLContext:
    ctx = args.get("ssl_context")
    if not isinstance(ctx, ssl.SSLContext):
        raise ValueError(
            f"{addr!r} is a TLS address but no TLS credentials were given: pass security=Security(tls_ca_file=..., "
            "and the certificate and key of this role) or set distributed.comm.tls.*"
        )
    return ctx


class Comm(ABC):
    """A bidirectional message channel to one peer."""

    name: str | None = None
    #: Whether the peer is in this process: its messages were made by this
    #: package's own code, not decoded from bytes, so servers may skip
    #: checking them against their schemas (outside validation mode).
    same_process: bool = False

    @property
    @abstractmethod
    def local_address(self) -> str:
        """This end's address."""

    @property
    @abstractmethod
    def peer_address(self) -> str:
        """The other end's address."""

    @abstractmethod
    async def read(self) -> Any:
        """Read one message.

        Raises
        ------
        CommClosedError
            When the comm is closed before a whole message arrives.
        """

    async def read_each(self, handle: Callable[[Any], bool]) -> None:
        """Give each message to ``handle`` as it arrives, in order, until ``handle`` returns False.

        For a stream read for its whole life (a worker's or a client's to the
        scheduler).  A transport may call ``handle`` from its own read
        callback, as each message completes: no task wakes and no future is
        made per message, which with thousands of peers each sending one
        message at a time is much of what reading costs.  So ``handle`` must
        not block; to spread a long message over several turns of the event
        loop it calls :meth:`hold_messages`, and :meth:`release_messages` once
        done, and no message is given to it in between.

        Raises
        ------
        CommClosedError
            When the comm closes (after every message that arrived was given).
        Exception
            What ``handle`` raised; no message is given to it after that.
        """
        while True:
            msg = await self.read()
            if not handle(msg):
                return
            held = self._held_messages
            while held is not None:
                await held
                held = self._held_messages

    #: Resolved by :meth:`release_messages` while :meth:`read_each` gives no message (see :meth:`hold_messages`).
    _held_messages: asyncio.Future[None] | None = None

    def hold_messages(self) -> None:
        """Give :meth:`read_each`'s ``handle`` no message until :meth:`release_messages`."""
        if self._held_messages is None:
            self._held_messages = asyncio.get_running_loop().create_future()

    def release_messages(self) -> None:
        """Give :meth:`read_each`'s ``handle`` messages again, first those that arrived meanwhile."""
        held, self._held_messages = self._held_messages, None
        if held is not None and not held.done():
            held.set_result(None)

    @abstractmethod
    async def write(self, msg: Any) -> int:
        """Write one message; return the number of bytes written (0 in process).

        Raises
        ------
        CommClosedError
            When the comm is closed.
        """

    def write_nowait(self, msg: Any) -> int | Awaitable[int]:
        """Write one message now if the comm takes it without waiting; else start writing it.

        Returns the number of bytes written when the message was written
        whole, or an awaitable of that number for a write that must wait
        (on the peer, on a write in progress).  The awaitable must be awaited
        before the next write.  For a writer that sends often and rarely
        waits (:class:`~distributed.batched.BatchedSend`): no coroutine per
        message.  This default always returns the awaitable of :meth:`write`.

        Raises
        ------
        CommClosedError
            When the comm is closed (here, or from the awaitable).
        """
        return self.write(msg)

    @abstractmethod
    async def close(self) -> None:
        """Close the comm politely, flushing what was written."""

    @abstractmethod
    def abort(self) -> None:
        """Close the comm at once, dropping anything not yet sent."""

    @abstractmethod
    def closed(self) -> bool:
        """Whether the comm is closed."""

    def watch_peer_host(self, timeout: float) -> bool:
        """Have the kernel end this connection once the peer's host has not acknowledged for ``timeout`` seconds.

        The peer's kernel acknowledges what it receives whatever its process
        does, so a process that is busy, stopped or holding the GIL keeps the
        connection alive; an unreachable host (a cut link, a hung machine) does
        not.  The connection then fails (see :attr:`peer_unreachable`).

        Returns
        -------
        bool
            Whether the comm can be watched so: False in process and without TCP.
        """
        return False

    @property
    def peer_unreachable(self) -> bool:
        """Whether the connection ended because the peer's host stopped answering (its kernel, not its process)."""
        return False

    def __repr__(self) -> str:
        state = "closed" if self.closed() else "open"
        return f"<{type(self).__name__} {self.name or ''} {state} local={self.local_address} peer={self.peer_address}>"


class Listener(ABC):
    """Accepts comms at an address and hands each to a handler coroutine."""

    @abstractmethod
    async def start(self) -> None:
        """Start listening."""

    @abstractmethod
    def stop(self) -> None:
        """Stop listening; comms already accepted stay open."""

    @property
    @abstractmethod
    def listen_address(self) -> str:
        """The address we listen on, e.g. ``tcp://0.0.0.0:8786``."""

    @property
    @abstractmethod
    def contact_address(self) -> str:
        """An address peers can connect to, e.g. ``tcp://127.0.0.1:8786``."""

    @property
    def refused_connections(self) -> int:
        """Connections refused before any message was read (a failed TLS handshake), since it started."""
        return 0


async def connect(
    addr: str, timeout: float | None = None, name: str | None = None, **connection_args: Unpack[ConnectionArgs]
) -> Comm:
    """Connect to ``addr`` and return a comm.

    Parameters
    ----------
    addr
        ``"tcp://host:port"``, ``"tls://host:port"`` or ``"inproc://..."``.
    timeout
        Seconds to keep trying before giving up; default from config
        ``distributed.comm.timeouts.connect``.
    **connection_args
        From :meth:`distributed.security.Security.get_connection_args`:
        ``ssl_context`` (needed by ``tls://``) and ``require_encryption``.

    Raises
    ------
    OSError
        When no connection could be made within ``timeout``, or the TLS
        handshake failed (an ``ssl.SSLError`` naming the reason).
    RuntimeError
        When encryption is required and ``addr`` is not encrypted.
    """
    from dask.utils import parse_timedelta

    scheme, loc = parse_address(addr)
    _check_encryption(addr, scheme, connection_args, "connect to")
    if timeout is None:
        timeout = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
    if scheme == "tcp":
        from distributed.comm.tcp import tcp_connect

        comm: Comm = await tcp_connect(loc, float(timeout or 30))
    elif scheme == "tls":
        from distributed.comm.tls import tls_connect

        comm = await tls_connect(loc, float(timeout or 30), _ssl_context(addr, connection_args))
    elif scheme == "inproc":
        from distributed.comm.inproc import inproc_connect

        comm = await inproc_connect(loc, float(timeout or 30))
    else:
        raise ValueError(f"Unknown comm scheme {scheme!r} in address {addr!r}")
    comm.name = name
    return comm


async def connect_until(
    addr: str,
    deadline: float,
    name: str,
    first_timeout: float,
    waiting: Callable[[], None] | None = None,
    **connection_args: Unpack[ConnectionArgs],
) -> Comm:
    """Connect to ``addr``, trying again every 0.1 s until ``deadline`` (``time.monotonic()``).

    The first try gives up after ``first_timeout`` seconds, so that
    ``waiting`` (called once, when it failed) can say early that the peer is
    not up yet; later tries last until the deadline.

    Raises
    ------
    OSError
        When no connection was made by ``deadline``.
    """
    first = True
    while True:
        remaining = max(deadline - time.monotonic(), 0.1)
        try:
            return await connect(
                addr, timeout=min(remaining, first_timeout) if first else remaining, name=name, **connection_args
            )
        except OSError:
            if time.monotonic() > deadline:
                raise
            if first:
                first = False
                if waiting is not None:
                    waiting()
            await asyncio.sleep(0.1)


def listen(
    addr: str, handler: CommHandler, default_host: str | None = None, **connection_args: Unpack[ConnectionArgs]
) -> Listener:
    """A listener at ``addr`` that runs ``handler(comm)`` for each new comm.

    Call ``await listener.start()`` to start it.  ``connection_args`` come
    from :meth:`distributed.security.Security.get_listen_args`: a
    ``tls://`` listener needs its ``ssl_context``, and hands ``handler`` only
    comms whose peer completed the TLS handshake with a certificate signed
    by the CA.  A TCP or TLS listener on every interface announces
    ``default_host`` in its contact address when given (see
    :mod:`distributed.comm.addressing`).

    Raises
    ------
    RuntimeError
        When encryption is required and ``addr`` is not encrypted.
    """
    scheme, loc = parse_address(addr)
    _check_encryption(addr, scheme, connection_args, "listen at")
    if scheme == "tcp":
        from distributed.comm.tcp import TCPListener

        return TCPListener(loc, handler, default_host=default_host)
    if scheme == "tls":
        from distributed.comm.tls import TLSListener

        return TLSListener(loc, handler, _ssl_context(addr, connection_args), default_host=default_host)
    if scheme == "inproc":
        from distributed.comm.inproc import InprocListener

        return InprocListener(loc, handler)
    raise ValueError(f"Unknown comm scheme {scheme!r} in address {addr!r}")


def run_handler_task(handler: CommHandler, comm: Comm, tasks: set[asyncio.Task[None]]) -> None:
    """Run ``handler(comm)`` as a task kept in ``tasks`` until it ends."""
    task = asyncio.get_running_loop().create_task(handler(comm))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
