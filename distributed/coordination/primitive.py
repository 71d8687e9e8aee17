"""What every user-side coordination primitive shares: the client it talks through.

A primitive is made anywhere (in a client, inside a task, unpickled on a
worker) and binds to a client lazily: the one it was given, else the
worker's client inside a task, else the default client.  Its methods run
their request on that client's loop, awaited there with a synchronous
client, returned as an awaitable with an asynchronous one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Acquirable", "ClientBound"]


def _bound_client(self: ClientBound) -> Client:
    if self._client is None:
        from distributed.client.client import get_client

        self._client = get_client()
    return self._client


class ClientBound:
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

    def __init__(self, client: Client | None) -> None:
        self._client = client

    @property
    def client(self) -> Client:
        """The client this primitive talks through."""
        return _bound_client(self)

    def _request(self, msg: Any) -> Any:
        """Send ``msg`` to the scheduler and answer its reply (an awaitable with an asynchronous client)."""
        return self.client.sync(self._send, msg)

    async def _send(self, msg: Any) -> Any:
        return await self.client.scheduler.call(msg)


class Acquirable(ClientBound):
    """A primitive held between ``acquire()`` and ``release()``, also as a (async) context manager."""

    def acquire(self) -> Any:
        """Acquire the primitive (an awaitable with an asynchronous client)."""
        raise NotImplementedError

    def release(self) -> Any:
        """Release the primitive (an awaitable with an asynchronous client)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Self:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
