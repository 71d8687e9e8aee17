"""The scheduler's half of what a Queue or Variable holds: the keys of held futures (see :mod:`.held`)."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from distributed.exceptions import FutureUnknownError
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["KeyHolds"]


class KeyHolds:
    """Keys of futures that scheduler-side primitives hold, counted per holder.

    Parameters
    ----------
    scheduler
        The scheduler whose tasks are held.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.counts: Counter[tuple[str, Any]] = Counter()

    def check_known(self, item: cm.HeldItem) -> None:
        """Refuse an item whose key the scheduler does not know: nothing could be held.

        The client has flushed its stream before sending the item (see
        :func:`distributed.coordination.held.to_item`), so an unknown key was
        cancelled or released and will not come.

        Raises
        ------
        FutureUnknownError
            For a future whose key is unknown to the scheduler.
        """
        if "key" in item and item["key"] not in self.scheduler.tasks:
            raise FutureUnknownError(
                f"Future {item['key']!r} is unknown to scheduler: it was cancelled or released before it could be held"
            )

    def hold(self, holder: str, item: cm.HeldItem) -> None:
        """``holder`` keeps ``item``: want its key (a value needs nothing)."""
        if "key" not in item:
            return
        key = item["key"]
        self.counts[holder, key] += 1
        if self.counts[holder, key] == 1:
            s = self.scheduler
            s.send_all(s.client_desires_keys(holder, [key], f"{holder}-hold-{time.time()}"))

    def drop(self, holder: str, item: cm.HeldItem) -> None:
        """``holder`` lets ``item`` go: stop wanting its key once nothing else of ``holder`` holds it."""
        if "key" not in item:
            return
        key = item["key"]
        n = self.counts[holder, key] - 1
        if n > 0:
            self.counts[holder, key] = n
            return
        del self.counts[holder, key]
        s = self.scheduler
        s.send_all(s.client_releases_keys(holder, [key], f"{holder}-drop-{time.time()}"))
        cs = s.clients.get(holder)
        if cs is not None and not cs.wants_what:
            del s.clients[holder]

    def hand_over(self, client: str | None, item: cm.HeldItem) -> None:
        """Make ``client`` (a getter) want the key of ``item`` before its holder drops it."""
        if "key" in item and client is not None:
            s = self.scheduler
            s.send_all(s.client_desires_keys(client, [item["key"]], f"hand-over-{time.time()}"))
