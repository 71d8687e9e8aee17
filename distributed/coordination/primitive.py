"""What every user-side coordination primitive shares: the client it talks through.

A primitive is made anywhere (in a client, inside a task, unpickled on a
worker) and binds to a client lazily: the one it was given, else the
worker's client inside a task, else the default client.  Its methods run
their request on that client's loop, awaited there with a synchronous
client, returned as an awaitable with an asynchronous one.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, Self, cast

from distributed.client.base import AsyncT
from distributed.client.dual import Work

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Acquirable", "ClientBound"]


def _bound_client(self: ClientBound[AsyncT]) -> Client[AsyncT]:
    if self._client is None:
        from distributed.client.client import get_client

        # A primitive made without a client takes the one found here, whatever its mode: such a
        # primitive is a ClientBound[bool] to the type checker, which then knows no form of its calls.
        self._client = cast("Client[AsyncT]", get_client())
    return self._client


class ClientBound(Generic[AsyncT]):
    """A primitive that talks to the scheduler through a client found when first used.

    Subclasses name what they are (``class Lock(ClientBound, noun="lock")``),
    which words the docstring of their :attr:`client`.

    Parameters
    ----------
    client
        The client to use (None: found when first used).
    """

    def __init_subclass__(cls, *, noun: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if noun is not None:
            # The same property under the subclass's own docstring; setattr, as
            # type checkers (rightly) refuse assigning over a declared property.
            doc = f"The client this {noun} talks through."
            setattr(cls, "client", property(_bound_client, doc=doc))  # noqa: B010

    def __init__(self, client: Client[AsyncT] | None) -> None:
        self._client = client

    @property
    def client(self) -> Client[AsyncT]:
        """The client this primitive talks through."""
        return _bound_client(self)

    def __await__(self) -> Generator[Any, None, Self]:
        """``await Semaphore(...)`` (a ``Lock``, ``Queue``, ``Event``, ...) gives the primitive, as in dask.

        The primitive exists on the scheduler from its first use, so there is
        nothing to wait for: async code written for dask, where awaiting it
        registers it, runs unchanged.
        """

        async def ready() -> Self:
            return self

        return ready().__await__()

    def sync(self, func: Callable[..., Awaitable[Any]], *args: Any, asynchronous: bool | None = None) -> Any:
        """Run ``func(*args)`` on the client's loop: await it, or return it as an awaitable (see ``Client.sync``)."""
        return self.client.sync(func, *args, asynchronous=asynchronous)

    def _request(self, msg: Any) -> Work[Any]:
        """The work of sending ``msg`` to the scheduler and answering with its reply."""
        return functools.partial(self._send, msg)

    async def _send(self, msg: Any) -> Any:
        return await self.client.scheduler.call(msg)


class Acquirable(ClientBound[AsyncT]):
    """A primitive held between ``acquire()`` and ``release()``, also as a (async) context manager.

    Subclasses give the work of ``acquire()`` with its defaults and of
    ``release()`` (:meth:`_acquiring`, :meth:`_releasing`), which the
    context managers run: ``with`` on a synchronous client, ``async with`` on
    an asynchronous one.
    """

    def _acquiring(self) -> Work[bool]:
        raise NotImplementedError

    def _releasing(self) -> Work[Any]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.sync(self._acquiring())
        return self

    def __exit__(self, *exc: object) -> None:
        self.sync(self._releasing())

    async def __aenter__(self) -> Self:
        await self.sync(self._acquiring())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sync(self._releasing())
