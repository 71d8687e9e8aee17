"""The scheduler's event log: recent events by topic, and the clients subscribed to topics.

Anyone may log an event: the scheduler itself (workers joining and leaving),
a client (``Client.log_event``), a worker or a task running on it
(``Worker.log_event``).  An event is ``(time, msg)`` with ``msg`` plain
msgpack data; each topic keeps its last ``distributed.scheduler.events-log-length``
events.  A client subscribed to a topic gets each new event of it on its
stream as it is logged.

Each worker has a topic of its own, its address, kept after it leaves so
that one can look up why it went.  Workers come and go at new addresses
(a nanny's restart, adaptive scaling), so a departed worker's topic is kept
for ``distributed.scheduler.events-cleanup-delay`` (as in dask), and only the
topics of the last :data:`DEPARTED_WORKER_TOPICS` workers to leave, unless a
client subscribed to one; without those bounds the log would grow by a topic
per worker ever seen, for as long as the scheduler runs.

Invariants: ``subscribers[topic]`` holds ids of clients that asked for
``topic`` and have not asked to stop; ids of clients that left are dropped
the next time an event of the topic is sent.  ``departed`` holds, oldest
first, the addresses of workers that left and did not come back, with when
they left, at most :data:`DEPARTED_WORKER_TOPICS` of them.
"""

from __future__ import annotations

import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dask.config
from dask.utils import parse_timedelta

from distributed.comm import Comm, CommClosedError
from distributed.config import log_length
from distributed.core import Route, StreamRoute
from distributed.protocol import messages as m

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["DEPARTED_WORKER_TOPICS", "EventLog"]

#: How many of the workers that left keep their own topic (their address) in the log.
DEPARTED_WORKER_TOPICS = 100

#: An event as it is kept and sent: when it was logged, and what.
Event = tuple[float, Any]


class EventLog:
    """Recent events by topic, and who wants to hear of new ones.

    Parameters
    ----------
    scheduler
        The scheduler whose clients receive the events they subscribed to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.length = log_length("distributed.scheduler.events-log-length")
        #: The last ``length`` events of each topic, oldest first.
        self.events: defaultdict[str, deque[Event]] = defaultdict(self._new_log)
        #: Ids of the clients subscribed to each topic.
        self.subscribers: defaultdict[str, set[str]] = defaultdict(set)
        #: Addresses of the workers that left, oldest first, with when they left (``time.time()``).
        self.departed: OrderedDict[str, float] = OrderedDict()
        #: Seconds a departed worker's topic is kept.
        self.cleanup_delay = float(parse_timedelta(dask.config.get("distributed.scheduler.events-cleanup-delay")))

    def _new_log(self) -> deque[Event]:
        return deque(maxlen=self.length)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests the log answers."""
        return {
            "log_event": Route(m.LogEvent, self.handle_log_event),
            "events": Route(m.GetEvents, self.handle_get_events),
        }

    def stream_routes(self) -> Mapping[str, StreamRoute[Any]]:
        """The stream messages the log handles (from clients and workers)."""
        return {
            "subscribe-topic": StreamRoute(m.TopicSubscription, self._on_subscription),
            "unsubscribe-topic": StreamRoute(m.TopicSubscription, self._on_subscription),
            "log-event": StreamRoute(m.WorkerLogEvent, self._on_worker_event),
        }

    # -- the log -----------------------------------------------------------------------
    def log(self, topic: str | Sequence[str], msg: Any) -> list[str]:
        """Keep ``msg`` as an event of ``topic`` (or of each topic given); send it to subscribers.

        Returns
        -------
        The topics it was logged under.
        """
        topics = [topic] if isinstance(topic, str) else list(topic)
        event = (time.time(), msg)
        for t in topics:
            self.events[t].append(event)
            subscribers = self.subscribers.get(t)
            if subscribers:
                self._send(t, event, subscribers)
        return topics

    def _send(self, topic: str, event: Event, subscribers: set[str]) -> None:
        comms = self.scheduler.client_comms
        msg = m.TopicEvent(op="event", topic=topic, event=event)
        for client in list(subscribers):
            bs = comms.get(client)
            if bs is None:
                subscribers.discard(client)  # the client left
                continue
            try:
                bs.send(msg)
            except CommClosedError:
                subscribers.discard(client)
        if not subscribers:
            del self.subscribers[topic]

    def get(self, topic: str | None = None) -> tuple[Event, ...] | dict[str, tuple[Event, ...]]:
        """The events of ``topic``, oldest first; with no topic, those of every topic by topic."""
        if topic is not None:
            log = self.events.get(topic)
            return tuple(log) if log is not None else ()
        return {t: tuple(log) for t, log in self.events.items()}

    def subscribe(self, topic: str, client: str) -> None:
        """Send ``client`` each new event of ``topic``."""
        self.subscribers[topic].add(client)

    def unsubscribe(self, topic: str, client: str) -> None:
        """Stop sending ``client`` the events of ``topic``."""
        subscribers = self.subscribers.get(topic)
        if subscribers is not None:
            subscribers.discard(client)
            if not subscribers:
                del self.subscribers[topic]

    def worker_joined(self, address: str) -> None:
        """A worker joined at ``address``: its topic is kept again (it may be one that left)."""
        self.departed.pop(address, None)

    def worker_left(self, address: str, now: float | None = None) -> None:
        """A worker left: keep its topic among those of the last workers to leave, dropping the oldest."""
        self.departed[address] = time.time() if now is None else now
        self.departed.move_to_end(address)
        while len(self.departed) > DEPARTED_WORKER_TOPICS:
            self._drop_departed()

    def clean_up(self, now: float | None = None) -> None:
        """Drop the topics of workers that left ``cleanup_delay`` or more ago (unless a client subscribed)."""
        now = time.time() if now is None else now
        departed = self.departed
        while departed and now - next(iter(departed.values())) >= self.cleanup_delay:
            self._drop_departed()

    def _drop_departed(self) -> None:
        oldest, _ = self.departed.popitem(last=False)
        if not self.subscribers.get(oldest):
            self.events.pop(oldest, None)

    # -- handlers ----------------------------------------------------------------------
    def handle_log_event(self, comm: Comm, msg: m.LogEvent) -> None:
        """Answer ``log_event`` (from a client)."""
        self.scheduler.log_event(msg["topic"], msg["msg"])

    def handle_get_events(self, comm: Comm, msg: m.GetEvents) -> tuple[Event, ...] | dict[str, tuple[Event, ...]]:
        """Answer ``events``."""
        return self.get(msg.get("topic"))

    def _on_subscription(self, msg: m.TopicSubscription) -> None:
        if msg["op"] == "subscribe-topic":
            self.subscribe(msg["topic"], msg["client"])
        else:
            self.unsubscribe(msg["topic"], msg["client"])

    def _on_worker_event(self, msg: m.WorkerLogEvent) -> None:
        worker, topic, event = msg["worker"], msg["topic"], msg["msg"]
        if isinstance(event, dict) and worker != topic:
            # As in dask.distributed: say which worker logged it (a copy: in
            # process the dict is still the worker's).
            event = {**event, "worker": worker}
        self.scheduler.log_event(topic, event)
