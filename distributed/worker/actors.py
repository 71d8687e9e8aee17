"""The actors a worker holds: their instances, the keys made as actors, and the thread their methods run in.

A task the scheduler marks as an actor leaves its result here as a live
instance, and the worker's data store holds an :class:`~distributed.Actor`
proxy for it.  Clients and other workers call the instance's methods and read
its attributes through ``actor_execute`` / ``actor_attribute`` requests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from distributed.client.actor import Actor
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize, unwrap

__all__ = ["ActorHost"]


class ActorHost:
    """The actors of one worker.

    Parameters
    ----------
    run_method
        Calls an actor's method in the actor thread (with what a running task
        sees set up): ``run_method(method, args, kwargs)``.
    """

    __slots__ = ("executor", "instances", "keys", "run_method")

    def __init__(self, run_method: Callable[[Any, Any, Any], Any]) -> None:
        #: Actor instances by key (the worker's ``actors``).
        self.instances: dict[Key, object] = {}
        #: Keys the scheduler asked to keep as actors, until they are forgotten here.
        self.keys: set[Key] = set()
        #: Runs the actors' (non-async) methods, one call at a time.
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="Dask-Actor-Threads")
        self.run_method = run_method

    def keep(self, key: Key, instance: object, address: str) -> Actor:
        """Keep a new actor of the worker at ``address``; the proxy to store (and hand out) as the key's value."""
        self.instances[key] = instance
        return Actor(type(instance), address, key)

    def prune(self, keys: Iterable[Key], state_of: Callable[[Key], str | None]) -> None:
        """Drop the actors among ``keys`` whose task is no longer in memory (``state_of``: its state, or None)."""
        for key in keys:
            if key not in self.keys:
                continue
            state = state_of(key)
            if state != "memory":
                self.instances.pop(key, None)
            if state is None:
                self.keys.discard(key)

    def clear(self) -> None:
        """Forget every actor (the worker's state starts anew)."""
        self.instances.clear()
        self.keys.clear()

    def instance(self, key: Key, address: str) -> object:
        """The actor of ``key``, or a ``ValueError`` saying it is not held here."""
        try:
            return self.instances[key]
        except KeyError:
            raise ValueError(f"No actor {key!r} on worker {address}: it was released or never made") from None

    async def execute(self, msg: m.ActorExecute, address: str) -> Serialize:
        """Call a method of an actor: ``async def`` ones (and those asked to) on the loop, others in its thread."""
        method = getattr(self.instance(msg["key"], address), msg["function"])
        args = unwrap(msg["args"])
        kwargs = unwrap(msg["kwargs"])
        if inspect.iscoroutinefunction(method):
            result = await method(*args, **kwargs)
        elif not msg.get("separate_thread", True):
            result = method(*args, **kwargs)
        else:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.executor, functools.partial(self.run_method, method, args, kwargs))
        return Serialize(result)

    def attribute(self, msg: m.ActorAttribute, address: str) -> Serialize:
        """The value of an attribute of an actor (read on the loop: a read does not wait)."""
        return Serialize(getattr(self.instance(msg["key"], address), msg["attribute"]))
