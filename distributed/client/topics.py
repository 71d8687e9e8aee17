"""A client's subscriptions to event topics (``Client.subscribe_topic``).

The scheduler sends a subscribed client each new event of the topic on the
client's stream, as ``(time, msg)``; the handler given for the topic is
called with it on the client's event loop, and awaited when it returns an
awaitable.  A handler that raises is logged; the other events still arrive.

Every client handles the topics ``print`` and ``warn`` from the start
(:data:`DEFAULT_HANDLERS`): what tasks print or warn with ``distributed.print``
and ``distributed.warn`` shows where the client runs.  A handler of one's own
for either replaces the default.

Invariants: ``handlers`` holds exactly the topics the client asked the
scheduler for and has not asked to stop; an event of a topic not there (one
unsubscribed while the event travelled) is dropped.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from distributed.core import StreamRoute
from distributed.protocol import messages as m

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_HANDLERS", "EventHandler", "TopicSubscriptions", "show_print", "show_warning"]

#: Called with each event ``(time, msg)`` of a topic; may return an awaitable.
EventHandler = Callable[[tuple[float, Any]], Any]


def show_print(event: tuple[float, Any]) -> None:
    """Print what a task printed with ``distributed.print`` (an event of topic ``print``).

    An event logged by hand under ``print`` with any other message is printed as it is.
    """
    _, msg = event
    if not isinstance(msg, dict) or not isinstance(msg.get("args"), (list, tuple)):
        builtins.print(msg)
        return
    printed: m.PrintEvent = msg  # type: ignore[assignment]  # checked above: a dict with its args
    file = {1: sys.stdout, 2: sys.stderr}.get(printed.get("file", 0))
    sep, end = printed.get("sep", " "), printed.get("end", "\n")
    builtins.print(*printed["args"], sep=sep, end=end, file=file, flush=bool(printed.get("flush")))


def show_warning(event: tuple[float, Any]) -> None:
    """Warn as a task warned with ``distributed.warn`` (an event of topic ``warn``).

    The category is imported by its path when it can be (else ``UserWarning``);
    an event logged by hand with any other message is warned as text.
    """
    _, msg = event
    if not isinstance(msg, dict) or "message" not in msg:
        warnings.warn(str(msg), UserWarning, stacklevel=2)
        return
    category: type[Warning] = UserWarning
    path = msg.get("category")
    if isinstance(path, str):
        module_name, _, name = path.rpartition(".")
        found = getattr(sys.modules.get(module_name), name, None)
        if isinstance(found, type) and issubclass(found, Warning):
            category = found
    warnings.warn(str(msg["message"]), category, stacklevel=2)


#: The topics every client handles unless given a handler of its own.
DEFAULT_HANDLERS: Mapping[str, EventHandler] = {"print": show_print, "warn": show_warning}


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

    def subscribe_defaults(self) -> None:
        """Handle the topics of :data:`DEFAULT_HANDLERS` not already given a handler."""
        for topic, handler in DEFAULT_HANDLERS.items():
            if topic not in self.handlers:
                self.subscribe(topic, handler)

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
