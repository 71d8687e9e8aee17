"""``distributed.Variable``: one value shared by every client and task of a cluster, by name."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.client.base import AsyncT
from distributed.client.dual import Work, dual_method
from distributed.coordination.held import before_get, from_item, to_item
from distributed.coordination.names import name_or_new
from distributed.coordination.primitive import ClientBound
from distributed.exceptions import FutureUnknownError
from distributed.protocol import coordination_messages as cm
from distributed.utils import wait_for

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Variable"]


class Variable(ClientBound[AsyncT], noun="variable"):
    """A value shared by every client and task of a cluster, by name.

    The value is a :class:`~distributed.Future` or any picklable object.  A
    future stays computed (its result in memory) while the variable holds it,
    even after every future of it is gone; a getter receives a future of its
    own client.  Other values are pickled where they are set and unpickled
    where they are got: the scheduler only keeps their bytes.

    Parameters
    ----------
    name
        Variables with the same name are the same variable: a string, bytes,
        a number, or a list or tuple of those (default: a new random name).
    client
        The client to use (default: the worker's client inside a task, else
        the default client, found when first used).

    Examples
    --------
    >>> x = Variable("x")  # doctest: +SKIP
    >>> x.set(123)  # doctest: +SKIP
    >>> x.get()  # doctest: +SKIP
    123
    >>> x.set(client.submit(inc, 1))  # a future, kept alive  # doctest: +SKIP
    >>> x.get().result()  # doctest: +SKIP
    2
    """

    def __init__(self, name: Any = None, client: Client[AsyncT] | None = None) -> None:
        super().__init__(client)
        self.name: Any = name_or_new(name, "variable")

    @dual_method
    def set(self, value: Any, timeout: float | str | timedelta | None = "30 s") -> Work[None]:
        """Set the value (an awaitable with an asynchronous client).

        Parameters
        ----------
        value
            A future (kept computed while it is the value) or any picklable object.
        timeout
            Longest time to wait for the scheduler (None: no limit).

        Raises
        ------
        TimeoutError
            When the scheduler did not take the value within ``timeout``.
        FutureUnknownError
            (a ``TimeoutError``) For a future the scheduler does not know:
            cancelled or released.
        """
        t = parse_timedelta(timeout) if timeout is not None else None
        return functools.partial(self._set, value, t)

    async def _set(self, value: Any, timeout: float | None) -> None:
        async def send() -> None:
            item = await to_item(self.client, value)
            await self.client.scheduler.call(cm.VariableSet(op="variable_set", name=self.name, item=item))

        try:
            await wait_for(send(), timeout)
        except FutureUnknownError:
            raise
        except TimeoutError:
            raise TimeoutError(f"Variable {self.name!r} was not set within {timeout} s") from None

    @dual_method
    def get(self, timeout: float | str | timedelta | None = None) -> Work[Any]:
        """The value, waiting until there is one (an awaitable with an asynchronous client).

        Parameters
        ----------
        timeout
            Longest wait (seconds, a string such as ``"200ms"``, or a
            ``timedelta``); None waits for as long as it takes.

        Returns
        -------
        A future of this variable's client when the value is a future, else the value.

        Raises
        ------
        TimeoutError
            When the variable had no value within ``timeout``.
        """
        t = parse_timedelta(timeout) if timeout is not None else None
        return functools.partial(self._get, t)

    async def _get(self, timeout: float | None) -> Any:
        client = self.client
        msg = cm.VariableGet(op="variable_get", name=self.name, timeout=timeout, client=client.id)
        await before_get(client)
        reply: cm.VariableGetReply = await client.scheduler.call(msg)
        if "item" not in reply:
            raise TimeoutError(f"Variable {self.name!r} had no value within {timeout} s")
        return from_item(client, reply["item"])

    @dual_method
    def is_set(self) -> Work[bool]:
        """Whether the variable has a value now (an awaitable with an asynchronous client)."""
        return self._request(cm.VariableIsSet(op="variable_is_set", name=self.name))

    @dual_method
    def delete(self) -> Work[None]:
        """Delete the variable (its value goes for every client; an awaitable with an asynchronous client)."""
        return self._request(cm.VariableDelete(op="variable_delete", name=self.name))

    def __reduce__(self) -> tuple[type[Variable[Any]], tuple[Any]]:
        return (Variable, (self.name,))

    def __repr__(self) -> str:
        return f"<Variable: {self.name}>"
