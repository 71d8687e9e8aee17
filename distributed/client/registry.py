"""The futures of one client and their reference counts.

A :class:`FutureRegistry` belongs to one :class:`~distributed.Client`.  It
holds one :class:`~distributed.client.future.FutureState` per key the client
has futures for, and how many live :class:`~distributed.Future` objects refer
to each key.  It is what a ``Future`` talks to: to count itself in, to count
itself out, and to run a callback on the client's event loop.

Invariants:

- ``states`` and ``counts`` have the same keys, changed under one lock.
- A reference is counted in at once (in the thread that makes the future)
  and counted out on the loop, when the outbox carries its release out
  (:meth:`settle`): a key whose count reaches zero loses its state and the
  scheduler is told, after every message posted before the release.
- :meth:`release` takes no lock and does no I/O: it runs in ``Future.__del__``,
  that is inside whatever the garbage collector interrupted, possibly code
  holding this registry's lock.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from distributed.client.future import Future, FutureState
from distributed.client.gc_pause import paused_gc
from distributed.client.outbox import Outbox
from distributed.protocol import messages as m
from distributed.protocol.messages import Key

if TYPE_CHECKING:
    from distributed.client.client import Client

__all__ = ["FutureRegistry"]


class FutureRegistry:
    """The futures of one client: their shared states and reference counts.

    Parameters
    ----------
    client
        The client the futures belong to.
    outbox
        Where releases go, in order with the client's other messages.
    wake
        Has the client's loop drain the outbox soon; must not block.
    """

    __slots__ = ("client", "outbox", "states", "counts", "_wake", "_lock")

    def __init__(self, client: Client, outbox: Outbox, wake: Callable[[], None]) -> None:
        self.client = client
        self.outbox = outbox
        #: The shared state of each key the client holds futures of.
        self.states: dict[Key, FutureState] = {}
        #: Live futures per key (including releases not yet carried out).
        self.counts: defaultdict[Key, int] = defaultdict(int)
        self._wake = wake
        self._lock = threading.Lock()

    # -- what a Future calls --------------------------------------------------------------
    def acquire(self, key: Key, inform: bool = False) -> FutureState:
        """The shared state of ``key``, with one more reference (thread-safe).

        With ``inform``, a key the client held no future of is announced to the
        scheduler as wanted (``client-desires-keys``), which answers with its
        status: a future made from a bare key (unpickled, or ``Future(key,
        client)``) then learns when it finishes.
        """
        with self._lock:
            fs = self.states.get(key)
            new = fs is None
            if fs is None:
                fs = self.states[key] = FutureState(key)
            self.counts[key] += 1
        if new and inform:
            self.outbox.post(m.ClientKeys(op="client-desires-keys", client=self.client.id, keys=[key]))
            self._wake()
        return fs

    def hold(self, key: Key) -> None:
        """One more reference to ``key``, whose state the caller has."""
        with self._lock:
            self.counts[key] += 1

    def release(self, key: Key) -> None:
        """One reference to ``key`` less; safe in a finaliser (no lock, no I/O)."""
        self.outbox.release(key)
        self._wake()

    def on_loop(self) -> bool:
        """Whether the caller runs on the client's event loop."""
        try:
            return asyncio.get_running_loop() is self.client.event_loop
        except RuntimeError:
            return False

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the client's loop (now, when called from it)."""
        loop = self.client.event_loop
        if self.on_loop():
            fn()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(fn)

    def keep_wanted(self, keys: Iterable[Key]) -> None:
        """Have the scheduler compute ``keys`` to the end after every future of them is gone.

        The scheduler then lets each key go once it is done (in memory or
        erred) and nothing else wants it.
        """
        self.outbox.post(m.ClientKeys(op="client-desires-keys", client=m.FIRE_AND_FORGET, keys=list(keys)))
        self._wake()

    # -- what the client calls --------------------------------------------------------------
    def get(self, key: Key) -> FutureState | None:
        """The state of ``key``, if the client holds futures of it."""
        return self.states.get(key)

    def is_live(self, key: Key) -> bool:
        """Whether a future of ``key`` exists and is pending, finished or erred."""
        with self._lock:
            fs = self.states.get(key)
            return fs is not None and fs.status in ("pending", "finished", "error")

    def make_futures(self, keys: Sequence[Key]) -> list[Future]:
        """One future per key, counted in one go under the lock.

        A key that was cancelled or lost starts over as pending.
        """
        client = self.client
        counted = Future.counted
        futures: list[Future] = []
        stale: list[FutureState] = []
        with paused_gc(len(keys)), self._lock:
            states = self.states
            counts = self.counts
            for k in keys:
                fs = states.get(k)
                if fs is None:
                    fs = states[k] = FutureState(k)
                elif fs.status == "cancelled":
                    stale.append(fs)
                counts[k] += 1
                futures.append(counted(k, client, fs))
        for fs in stale:
            self.call_soon(fs.reset)
        return futures

    def settle(self, keys: Sequence[Key]) -> list[Key]:
        """Count one reference of each key out; the keys left with none (their state goes)."""
        gone: list[Key] = []
        with self._lock:
            counts = self.counts
            states = self.states
            for key in keys:
                n = counts.get(key)
                if n is None:
                    continue  # already gone (the client closed, say)
                if n > 1:
                    counts[key] = n - 1
                else:
                    del counts[key]
                    states.pop(key, None)
                    gone.append(key)
        return gone

    def held_keys(self) -> list[Key]:
        """Every key with a live future."""
        with self._lock:
            return list(self.counts)

    def still_held(self, keys: Iterable[Key]) -> list[Key]:
        """Those of ``keys`` with a live future (or a release not yet carried out)."""
        with self._lock:
            counts = self.counts
            return [k for k in keys if k in counts]
