"""The client's outbox: what goes to the scheduler on its stream, in order.

The outbox orders graph messages, key releases and other stream messages into
the typed messages the client sends; it does no I/O (the client writes what
:meth:`Outbox.take` returns), so it is tested without sockets.

Invariants:

- Messages leave in the order they were posted.  A graph cut into parts holds
  back everything posted after it until its later parts, made by a background
  thread, are all out: a release never overtakes a graph that depends on the
  key, nor a cancel the graph it cancels.
- A release is counted down when it leaves, not when posted; only a key whose
  last reference went produces a ``client-releases-keys`` entry, and the
  releases between two messages go out in chunks of ``chunk_size`` keys.
- :meth:`Outbox.post` and :meth:`Outbox.release` take no lock and do no I/O,
  so any thread may call them, a finaliser included.  :meth:`Outbox.take` is
  called from one thread only (the client's event loop).
- The keys announced again after a reconnection (:meth:`Outbox.post_rewant`)
  leave in order too, as ``client-desires-keys``: without the keys whose last
  future was released before them (the scheduler would keep those for nobody)
  and without the keys a graph posted after them asks for (announced before
  their graph, they would be unknown to the scheduler).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Final, cast

from distributed.client.graph_parts import PendingParts
from distributed.protocol import messages as m
from distributed.protocol.messages import Key

__all__ = ["Outbox", "StreamMessage"]

#: What a client sends on its stream to the scheduler.
StreamMessage = m.UpdateGraph | m.ClientKeys | m.StreamBarrier | m.CloseClient | m.TopicSubscription

# Kinds of entries: a message, a key release, a graph's later parts, the keys to announce again.
_MESSAGE: Final = 0
_RELEASE: Final = 1
_PARTS: Final = 2
_REWANT: Final = 3

_Entry = tuple[int, "StreamMessage | Key | PendingParts | list[Key]"]


class Outbox:
    """Stream messages for the scheduler, in the order they were posted.

    Parameters
    ----------
    client_id
        The client the releases come from.
    chunk_size
        Keys per ``client-releases-keys`` message.

    Examples
    --------
    >>> box = Outbox("client-1", chunk_size=1000)
    >>> box.release("x")
    >>> box.take(lambda keys: list(keys))
    [{'op': 'client-releases-keys', 'client': 'client-1', 'keys': ['x']}]
    """

    __slots__ = ("client_id", "chunk_size", "_entries", "_lock", "_parts", "_parts_posted")

    def __init__(self, client_id: str, chunk_size: int) -> None:
        self.client_id = client_id
        self.chunk_size = max(int(chunk_size), 1)
        # Any thread appends, only the taker pops: a deque needs no lock for that.
        self._entries: deque[_Entry] = deque()
        # Guards the graphs in parts (never taken by post or release).
        self._lock = threading.Lock()
        self._parts: list[PendingParts] = []
        self._parts_posted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def post(self, msg: StreamMessage) -> None:
        """Queue a message; from any thread, without blocking."""
        self._entries.append((_MESSAGE, msg))

    def release(self, key: Key) -> None:
        """Queue one release of a reference to ``key``; safe in a finaliser."""
        self._entries.append((_RELEASE, key))

    def post_rewant(self, keys: Iterable[Key]) -> None:
        """Queue ``client-desires-keys`` for ``keys``, made when taken (after a reconnection).

        Only the keys still held then, and not wanted by a graph posted after
        this, go out (see :meth:`take`), in chunks of :attr:`chunk_size`.
        """
        self._entries.append((_REWANT, list(keys)))

    def post_graph(self, first: m.UpdateGraph, parts: PendingParts) -> None:
        """Queue the first message of a graph whose later parts ``parts`` will hold."""
        with self._lock:
            self._parts = [p for p in self._parts if not p.done]
            self._parts.append(parts)
            self._parts_posted += 1
            self._entries.append((_MESSAGE, first))
            self._entries.append((_PARTS, parts))

    @property
    def parts_posted(self) -> int:
        """How many graphs were posted in parts so far."""
        return self._parts_posted

    @property
    def parts_pending(self) -> bool:
        """Whether a graph in parts still has parts not taken."""
        with self._lock:
            return any(not p.done or p.ready for p in self._parts)

    def stop_parts(self) -> None:
        """Ask the threads making graph parts to stop (the client is closing)."""
        with self._lock:
            for p in self._parts:
                p.stop = True
            self._parts = []

    def take(
        self,
        settle: Callable[[Sequence[Key]], Sequence[Key]],
        held: Callable[[Iterable[Key]], Sequence[Key]] = list,
    ) -> list[StreamMessage]:
        """The messages to send now, in order; stops at a graph part not made yet.

        ``settle(keys)`` counts one reference of each key down and returns the
        keys left with none: only those are released.  ``held(keys)`` returns
        those of ``keys`` that still have futures (for :meth:`post_rewant`;
        by default all of them).
        """
        out: list[StreamMessage] = []
        releases: list[Key] = []
        entries = self._entries
        while entries:
            kind, item = entries[0]
            if kind == _RELEASE:
                releases.append(item)  # type: ignore[arg-type]  # a key, by kind
            else:
                if releases:
                    self._flush(settle(releases), out)
                    releases = []
                if kind == _MESSAGE:
                    out.append(item)  # type: ignore[arg-type]  # a message, by kind
                elif kind == _REWANT:
                    self._rewant(held(item), out)  # type: ignore[arg-type]  # keys, by kind
                else:
                    assert isinstance(item, PendingParts)
                    # Read ``done`` first: it is set after the last append.
                    done = item.done
                    ready = item.ready
                    while ready:
                        out.append(ready.popleft())
                    if not done:
                        break
            entries.popleft()
        if releases:
            self._flush(settle(releases), out)
        return out

    def _rewant(self, keys: Sequence[Key], out: list[StreamMessage]) -> None:
        # The entry is still first: what follows it is what was posted after it.
        later: set[Key] = set()
        for kind, item in list(self._entries)[1:]:  # a copy: other threads append meanwhile
            if kind != _MESSAGE:
                continue
            msg = cast("StreamMessage", item)  # by kind
            if msg["op"] == "update-graph":
                later.update(msg["keys"])
        if later:
            keys = [k for k in keys if k not in later]
        chunk = self.chunk_size
        for i in range(0, len(keys), chunk):
            out.append(m.ClientKeys(op="client-desires-keys", client=self.client_id, keys=list(keys[i : i + chunk])))

    def _flush(self, keys: Sequence[Key], out: list[StreamMessage]) -> None:
        # In chunks, so that the scheduler can serve others in between.
        chunk = self.chunk_size
        for i in range(0, len(keys), chunk):
            out.append(m.ClientKeys(op="client-releases-keys", client=self.client_id, keys=list(keys[i : i + chunk])))
