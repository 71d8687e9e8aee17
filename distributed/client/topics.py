"""A client's subscriptions to event topics (``Client.subscribe_topic``).

The scheduler sends a subscribed client each new event of the topic on the
client's stream, as ``(time, msg)``; the handler given for the topic is
called with it on the client's event loop, and awaited when it returns an
awaitable.  A handler that raises is logged; the other events still arrive.

Invariants: ``handlers`` holds exactly the topics the client asked the
scheduler for and has not asked to stop; an event of a topic not there (one
unsubscribed while the event travelled) is dropped.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from distributed.core import StreamRoute
from distributed.protocol import messages as m

logger = logging.getLogger(__name__)

__all__ = ["EventHandler", "TopicSubscriptions"]

#: Called with each event ``(time, msg)`` of a topic; may return an awaitable.
EventHandler = Callable[[tuple[float, Any]], Any]


class TopicSubscriptions:
    """The topics a client subscribed to, and their handlers.

    Parameters
    ----------
    client_id
        The client's id, as the scheduler knows it.
    post
        Queues a message on the client's stream to the scheduler (from any thread).
    """

    def __init__(self, client_id: str, post: Callable[[m.TopicSubscription], None]) -> None:
        self.client_id = client_id
        self._post = post
        #: The handler of each subscribed topic.
        self.handlers: dict[str, EventHandler] = {}
        # Handlers' awaitables still running (kept referenced until done).
        self._running: set[asyncio.Task[Any]] = set()

    def route(self) -> StreamRoute[m.TopicEvent]:
        """The route of the scheduler's ``event`` messages."""
        return StreamRoute(m.TopicEvent, self.on_event)

    def subscribe(self, topic: str, handler: EventHandler) -> None:
        """Call ``handler`` with each new event of ``topic`` (replacing the topic's previous handler)."""
        if not isinstance(topic, str):
            raise TypeError(f"A topic is a str, got {type(topic).__name__}")
        if not callable(handler):
            raise TypeError(f"The handler of topic {topic!r} is not callable: {handler!r}")
        if topic not in self.handlers:
            self._post(m.TopicSubscription(op="subscribe-topic", topic=topic, client=self.client_id))
        self.handlers[topic] = handler

    def unsubscribe(self, topic: str) -> None:
        """Stop handling the events of ``topic``.

        Raises
        ------
        ValueError
            When no handler is subscribed to ``topic``.
        """
        if topic not in self.handlers:
            raise ValueError(f"No event handler known for topic {topic}.")
        del self.handlers[topic]
        self._post(m.TopicSubscription(op="unsubscribe-topic", topic=topic, client=self.client_id))

    def on_event(self, msg: m.TopicEvent) -> None:
        """Hand an event of a subscribed topic to its handler (on the client's loop)."""
        handler = self.handlers.get(msg["topic"])
        if handler is None:
            return
        event = tuple(msg["event"])
        try:
            result = handler(event)
        except Exception:
            logger.exception("The handler of topic %r failed", msg["topic"])
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._running.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("The handler of an event failed", exc_info=task.exception())
