"""Client methods written once for both kinds of client: values on a synchronous one, awaitables on an asynchronous one.

A :class:`Client` is synchronous (``Client()``, typed ``Client[Literal[False]]``)
or asynchronous (``Client(asynchronous=True)``, ``Client[Literal[True]]``), and
most of its methods take ``asynchronous=`` to ask for the other form once.
Such a method is written once, decorated with :class:`dual_method`: its body
checks the arguments at once, in the caller's thread (so that bad arguments
raise where the call is, on either kind of client), and returns the work to
run on the client's loop as a coroutine function of no arguments.  The
descriptor runs it through :meth:`Client.sync`, which awaits it on a
synchronous client and hands back the awaitable on an asynchronous one.

For the type checker, the method bound to a ``Client[Literal[False]]`` is a
:class:`SyncCall` (the body's parameters, returning ``T``) and bound to a
``Client[Literal[True]]`` an :class:`AsyncCall` (returning ``Awaitable[T]``);
``asynchronous=True`` or ``False`` switches the form of one call.  Arguments
are checked against the body's own signature except in such a switched call
(a keyword cannot follow a parameter specification's ``*args``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, Self, TypeVar, overload

if TYPE_CHECKING:
    from distributed.client.client import Client

__all__ = ["AsyncCall", "SyncCall", "dual_method"]

P = ParamSpec("P")
T = TypeVar("T")

#: What a dual method's body returns: the work to run on the client's loop.
Work = Callable[[], Awaitable[T]]


class BoundDual(Generic[P, T]):
    """A dual method bound to a client; called, it runs the body, then the work it returns."""

    __slots__ = ("body", "client")

    def __init__(self, body: Callable[Concatenate[Any, P], Work[T]], client: Client[bool]) -> None:
        self.body = body
        self.client = client

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Check the arguments (the body), then await the work or return it as an awaitable."""
        asynchronous = kwargs.pop("asynchronous", None)
        return self.client.sync(self.body(self.client, *args, **kwargs), asynchronous=asynchronous)

    @property
    def __name__(self) -> str:
        """The method's name."""
        return self.body.__name__

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]  # the body's docstring, per instance
        """The method's docstring."""
        return self.body.__doc__

    @property
    def __signature__(self) -> inspect.Signature:
        """The body's parameters without ``self``, and ``asynchronous``."""
        return call_signature(self.body)

    def __repr__(self) -> str:
        return f"<bound method Client.{self.body.__name__} of {self.client!r}>"


class SyncCall(BoundDual[P, T]):
    """A dual method of a synchronous client: returns the value, or an awaitable with ``asynchronous=True``."""

    __slots__ = ()

    @overload
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T: ...

    @overload
    def __call__(self, *args: Any, asynchronous: Literal[True], **kwargs: Any) -> Awaitable[T]: ...

    @overload
    def __call__(self, *args: Any, asynchronous: Literal[False], **kwargs: Any) -> T: ...

    @overload
    def __call__(self, *args: Any, asynchronous: bool | None, **kwargs: Any) -> T | Awaitable[T]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(args, kwargs)


class AsyncCall(BoundDual[P, T]):
    """A dual method of an asynchronous client: returns an awaitable, or the value with ``asynchronous=False``."""

    __slots__ = ()

    @overload
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[T]: ...

    @overload
    def __call__(self, *args: Any, asynchronous: Literal[False], **kwargs: Any) -> T: ...

    @overload
    def __call__(self, *args: Any, asynchronous: Literal[True], **kwargs: Any) -> Awaitable[T]: ...

    @overload
    def __call__(self, *args: Any, asynchronous: bool | None, **kwargs: Any) -> T | Awaitable[T]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(args, kwargs)


class dual_method(Generic[P, T]):
    """Make a client method of a body that checks its arguments and returns the work to run (see the module).

    Parameters
    ----------
    body
        ``def method(self, ...) -> Work[T]``: called in the caller's thread;
        returns a coroutine function of no arguments that does the work.
    """

    def __init__(self, body: Callable[Concatenate[Any, P], Work[T]]) -> None:
        self.body = body
        self.__doc__ = body.__doc__
        self.__wrapped__ = body

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, client: Client[Literal[False]], owner: type[Any]) -> SyncCall[P, T]: ...

    @overload
    def __get__(self, client: Client[Literal[True]], owner: type[Any]) -> AsyncCall[P, T]: ...

    @overload
    def __get__(self, client: Client[bool], owner: type[Any]) -> SyncCall[P, T] | AsyncCall[P, T]: ...

    def __get__(self, client: Client[bool] | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        if client.asynchronous:
            return AsyncCall(self.body, client)
        return SyncCall(self.body, client)

    def __call__(self, client: Client[bool], /, *args: Any, **kwargs: Any) -> object:
        """Call the method on ``client`` (``Client.nthreads(client)``, as with any method read off the class)."""
        return BoundDual(self.body, client).run(args, kwargs)


@functools.cache
def call_signature(body: Callable[..., Any]) -> inspect.Signature:
    """``body``'s signature as callers of the bound method see it: no ``self``, a keyword ``asynchronous``."""
    params = list(inspect.signature(body).parameters.values())[1:]
    asynchronous = inspect.Parameter(
        "asynchronous", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="bool | None"
    )
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        params.insert(len(params) - 1, asynchronous)
    else:
        params.append(asynchronous)
    return inspect.Signature(params)
