"""Methods written once for both forms: values on a synchronous client, awaitables on an asynchronous one.

A :class:`~distributed.Client` is synchronous (``Client()``, typed
``Client[Literal[False]]``) or asynchronous (``Client(asynchronous=True)``,
``Client[Literal[True]]``), and most of its methods take ``asynchronous=`` to
ask for the other form once.  The coordination primitives (``Lock``,
``Queue``, ...) follow the client they talk through.  Such a method is
written once, decorated with :class:`dual_method`: its body checks the
arguments at once, in the caller's thread (so that bad arguments raise where
the call is, on either kind of client), and returns the work to run on the
client's loop as a coroutine function of no arguments.  The descriptor runs
it through the host's ``sync``, which awaits it on a synchronous client and
hands back the awaitable on an asynchronous one.

For the type checker, the method bound to a synchronous host is a
:class:`SyncCall` (the body's parameters, returning ``T``) and bound to an
asynchronous one an :class:`AsyncCall` (returning ``Awaitable[T]``);
``asynchronous=True`` or ``False`` switches the form of one call.  Arguments
are checked against the body's own signature except in such a switched call
(a keyword cannot follow a parameter specification's ``*args``).  A
primitive made without a client (``Lock("x")``) does not know its mode
statically: its methods are :class:`AnyModeCall`, returning ``Any``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, Protocol, Self, TypeVar, overload

if TYPE_CHECKING:
    from distributed.client.base import ClientBase
    from distributed.coordination.primitive import ClientBound

__all__ = ["AnyModeCall", "AsyncCall", "BoundDual", "DualHost", "SyncCall", "Work", "dual_method"]

P = ParamSpec("P")
T = TypeVar("T")

#: What a dual method's body returns: the work to run on the client's loop.
Work = Callable[[], Awaitable[T]]


class DualHost(Protocol):
    """What a dual method runs through: a client, or a primitive (which uses its client's)."""

    def sync(self, func: Callable[..., Awaitable[Any]], *args: Any, asynchronous: bool | None = None) -> Any:
        """Await ``func(*args)`` on the client's loop, or return the awaitable (see :meth:`Client.sync`)."""


class BoundDual(Generic[P, T]):
    """A dual method bound to its host: runs the body, then the work it returns (the call types below)."""

    __slots__ = ("body", "host")

    def __init__(self, body: Callable[Concatenate[Any, P], Work[T]], host: DualHost) -> None:
        self.body = body
        self.host = host

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Check the arguments (the body), then await the work or return it as an awaitable."""
        asynchronous = kwargs.pop("asynchronous", None)
        return self.host.sync(self.body(self.host, *args, **kwargs), asynchronous=asynchronous)

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
        return f"<bound method {type(self.host).__name__}.{self.body.__name__} of {self.host!r}>"


class AnyModeCall(BoundDual[P, T]):
    """A dual method of a host whose form is not known statically (a primitive made without a client)."""

    __slots__ = ()

    @overload
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...

    @overload
    def __call__(self, *args: Any, asynchronous: bool | None, **kwargs: Any) -> Any: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(args, kwargs)


class SyncCall(BoundDual[P, T]):
    """A dual method of a synchronous host: returns the value, or an awaitable with ``asynchronous=True``."""

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
    """A dual method of an asynchronous host: returns an awaitable, or the value with ``asynchronous=False``."""

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
    """Make a method of a body that checks its arguments and returns the work to run (see the module).

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
    def __get__(self, host: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(
        self, host: ClientBase[Literal[False]] | ClientBound[Literal[False]], owner: type[Any]
    ) -> SyncCall[P, T]: ...

    @overload
    def __get__(
        self, host: ClientBase[Literal[True]] | ClientBound[Literal[True]], owner: type[Any]
    ) -> AsyncCall[P, T]: ...

    @overload
    def __get__(self, host: ClientBase[bool], owner: type[Any]) -> SyncCall[P, T] | AsyncCall[P, T]: ...

    @overload
    def __get__(self, host: ClientBound[bool], owner: type[Any]) -> AnyModeCall[P, T]: ...

    def __get__(self, host: DualHost | None, owner: type[Any]) -> Any:
        if host is None:
            return self
        # The class only names the form; both run the same way (the host's sync picks the form).
        if getattr(host, "asynchronous", False) is True:
            return AsyncCall(self.body, host)
        return SyncCall(self.body, host)

    def __call__(self, host: DualHost, /, *args: Any, **kwargs: Any) -> object:
        """Call the method on ``host`` (``Client.nthreads(client)``, as with any method read off the class)."""
        return AnyModeCall(self.body, host).run(args, kwargs)


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
