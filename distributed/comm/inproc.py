"""In-process transport: messages are handed over as objects, never encoded.

Both ends may live on different event loops (threads): a message for a peer on
another loop is delivered with ``call_soon_threadsafe``.  Serialised values are
passed as they are, so a :class:`~distributed.protocol.Serialize` sent in
process arrives as that same live object and ``unwrap`` returns it directly.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import threading
from typing import Any

from distributed.comm.core import (
    Comm,
    CommClosedError,
    CommHandler,
    Listener,
    run_handler_task,
)

__all__ = ["InprocComm", "InprocListener", "inproc_connect", "new_inproc_address"]

_counter = itertools.count()
_lock = threading.Lock()
_listeners: dict[str, InprocListener] = {}

_CLOSE = object()


def new_inproc_address() -> str:
    """A fresh, unused ``inproc://`` location."""
    return f"{os.getpid()}/{next(_counter)}"


class InprocComm(Comm):
    """One end of an in-process channel."""

    same_process = True

    def __init__(self, local: str, peer: str, loop: asyncio.AbstractEventLoop) -> None:
        self._local = local
        self._peer = peer
        self._loop = loop
        self._queue: collections.deque[Any] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._peer_comm: InprocComm | None = None

    @property
    def local_address(self) -> str:
        return f"inproc://{self._local}"

    @property
    def peer_address(self) -> str:
        return f"inproc://{self._peer}"

    def _deliver(self, msg: Any) -> None:
        self._queue.append(msg)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _put(self, msg: Any) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._deliver(msg)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver, msg)

    async def read(self) -> Any:
        while not self._queue:
            if self._closed:
                raise CommClosedError(f"In-process comm {self.local_address} is closed")
            self._loop = asyncio.get_running_loop()
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        msg = self._queue.popleft()
        if msg is _CLOSE:
            self._closed = True
            raise CommClosedError(f"In-process comm {self.local_address} was closed by its peer")
        return msg

    async def write(self, msg: Any) -> int:
        return self.write_nowait(msg)

    def write_nowait(self, msg: Any) -> int:
        peer = self._peer_comm
        if self._closed or peer is None or peer._closed:
            raise CommClosedError(f"In-process comm {self.local_address} is closed")
        peer._put(msg)
        return 0

    async def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        peer = self._peer_comm
        if peer is not None:
            peer._put(_CLOSE)
        self._deliver(_CLOSE)

    def closed(self) -> bool:
        return self._closed


class InprocListener(Listener):
    """Accepts in-process comms at ``inproc://<loc>``."""

    def __init__(self, loc: str, handler: CommHandler) -> None:
        self.loc = loc or new_inproc_address()
        self.handler = handler
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        with _lock:
            if self.loc in _listeners:
                raise OSError(f"Address inproc://{self.loc} is already in use")
            _listeners[self.loc] = self

    def stop(self) -> None:
        with _lock:
            if _listeners.get(self.loc) is self:
                del _listeners[self.loc]

    def _accept(self, comm: InprocComm) -> None:
        run_handler_task(self.handler, comm, self._tasks)

    @property
    def listen_address(self) -> str:
        return f"inproc://{self.loc}"

    @property
    def contact_address(self) -> str:
        return f"inproc://{self.loc}"


async def inproc_connect(loc: str, timeout: float) -> InprocComm:
    """Connect to an in-process listener."""
    with _lock:
        listener = _listeners.get(loc)
    if listener is None or listener.loop is None:
        raise OSError(f"No in-process listener at inproc://{loc}")
    client_loc = new_inproc_address()
    here = asyncio.get_running_loop()
    ours = InprocComm(client_loc, loc, here)
    theirs = InprocComm(loc, client_loc, listener.loop)
    ours._peer_comm = theirs
    theirs._peer_comm = ours
    if listener.loop is here:
        listener._accept(theirs)
    else:
        listener.loop.call_soon_threadsafe(listener._accept, theirs)
    return ours
