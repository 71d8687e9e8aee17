"""Which client ``dask.compute`` uses: the current client of a context, else the newest default one.

A client made with ``set_as_default=True`` joins the process's default
clients and sets dask's ``scheduler`` config to ``"dask.distributed"`` (dask
then shuffles dataframes and rechunks large arrays peer-to-peer).  A client used as
a ``with`` block, or through :meth:`Client.as_current`, is the current client
of that context (a :class:`contextvars.ContextVar`, so threads and tasks each
see their own).  :func:`get_default_client` prefers the current client, then
the newest default one still open.

Invariants:

- The default clients are held weakly: a client nobody holds drops out.
- The config a default client set is undone when the last open default
  client leaves, not before: closing one of two default clients leaves dask
  using the other.
- A closed or closing client is never returned as the default or current one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, cast

import dask.config

from distributed.task_context import context_worker

if TYPE_CHECKING:
    from distributed.client.client import Client

__all__ = [
    "AsCurrent",
    "ClientContext",
    "current_client",
    "default_client",
    "get_default_client",
    "global_clients",
    "temp_default_client",
]

#: What a client in use sets in dask's config: dask's scheduler.  dask then
#: picks P2P (see distributed.shuffle) for dataframe shuffles, and for array
#: rechunks too large for a task-based rechunk's graph (its own rule, with
#: ``array.rechunk.method`` unset).
CLIENT_CONFIG: Final = {
    "scheduler": "dask.distributed",
}

_global_clients: weakref.WeakValueDictionary[int, Client] = weakref.WeakValueDictionary()
_global_client_index = itertools.count()
_current_client: contextvars.ContextVar[Client | None] = contextvars.ContextVar("_current_client", default=None)


def _open(c: Client | None) -> bool:
    return c is not None and c.status not in ("closed", "closing")


def global_clients() -> list[Client]:
    """The clients registered as defaults (``set_as_default=True``), oldest first."""
    return [c for _, c in sorted(_global_clients.items())]


def get_default_client() -> Client | None:
    """The client ``dask.compute`` would use now: the current one, else the newest default one; or None."""
    c = _current_client.get()
    if c is not None and _open(c):
        return c
    for key in sorted(_global_clients.keys(), reverse=True):
        c = _global_clients.get(key)
        if c is not None and _open(c):
            return c
    return None


def default_client(c: Client | None = None) -> Client:
    """The client in use (``c`` if given).

    Raises
    ------
    ValueError
        When there is none.
    """
    c = c or get_default_client()
    if c is None:
        # Inside a task (or a coroutine one runs) in a worker process: the worker's own client, which dask's
        # workers make their process's default one.
        worker = context_worker()
        if worker is not None:
            return cast("Client", worker.task_client())
    if c is None:
        raise ValueError(
            "No clients found\nStart a client and point it to the scheduler address\n"
            "  from distributed import Client\n  client = Client('ip-addr-of-scheduler:8786')\n"
        )
    return c


def current_client(allow_global: bool = True) -> Client:
    """The current client of this context; with ``allow_global``, else the default one.

    Raises
    ------
    ValueError
        When there is none.
    """
    c = _current_client.get()
    if c is not None and _open(c):
        return c
    if allow_global:
        return default_client()
    raise ValueError("No client is current in this context")


class ClientContext:
    """One client's place among the process's clients: a default one for dask, the current one of a context.

    Parameters
    ----------
    client
        The client.
    """

    __slots__ = ("client", "_config_token", "_current_tokens")

    def __init__(self, client: Client) -> None:
        self.client = client
        self._config_token: Any = None
        #: One per :meth:`enter` not yet undone: its token, and the thread and asyncio task it ran in.
        self._current_tokens: list[tuple[contextvars.Token[Client | None], int, asyncio.Task[Any] | None]] = []

    def make_default(self) -> None:
        """Make the client a default one, and dask's scheduler."""
        if self._config_token is None:
            self._config_token = dask.config.set(CLIENT_CONFIG)
        _global_clients[next(_global_client_index)] = self.client

    def leave(self) -> None:
        """The client is no default one any more; dask's config is restored once no default client is left."""
        token = self._config_token
        if token is not None:
            self._config_token = None
            # Another default client may still be active: hand the config over.
            remaining = [c for c in _global_clients.values() if c is not self.client and _open(c)]
            if not remaining:
                try:
                    token.__exit__(None, None, None)
                except Exception:
                    pass
        for k, c in list(_global_clients.items()):
            if c is self.client:
                del _global_clients[k]

    def enter(self) -> None:
        """Make the client the current one (entering its ``with`` block)."""
        self._current_tokens.append((_current_client.set(self.client), threading.get_ident(), _current_task()))

    def exit(self) -> None:
        """Undo the last :meth:`enter` (leaving its ``with`` block)."""
        if self._current_tokens:
            token, thread, task = self._current_tokens.pop()
            # As dask does: leaving elsewhere cannot undo what entering did to the current client there.
            if thread != threading.get_ident():
                warnings.warn(
                    "It is deprecated to enter and exit the Client context manager from different threads",
                    DeprecationWarning,
                    stacklevel=3,
                )
            elif task is not _current_task():
                warnings.warn(
                    "It is deprecated to enter and exit the Client context manager from different tasks",
                    DeprecationWarning,
                    stacklevel=3,
                )
            try:
                _current_client.reset(token)
            except ValueError:
                # Entered in another context (e.g. another task): nothing of ours to undo here.
                pass


def _current_task() -> asyncio.Task[Any] | None:
    """The asyncio task running now (None outside one)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class AsCurrent:
    """A context manager making ``client`` the current client, and dask's scheduler, inside it.

    Examples
    --------
    >>> with client.as_current():  # doctest: +SKIP
    ...     x.compute()
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._token: contextvars.Token[Client | None] | None = None
        self._config: Any = None

    def __enter__(self) -> Client:
        self._token = _current_client.set(self.client)
        self._config = dask.config.set(CLIENT_CONFIG)
        return self.client

    def __exit__(self, *exc: object) -> None:
        if self._config is not None:
            self._config.__exit__(None, None, None)
        if self._token is not None:
            _current_client.reset(self._token)


@contextlib.contextmanager
def temp_default_client(c: Client) -> Iterator[None]:
    """Make ``c`` the default and the current client inside a ``with`` block.

    Meant for tests of code that looks up the default client; elsewhere use
    :meth:`Client.as_current`.  Unlike that, it changes the default client
    of the whole process (every thread and task) while the block runs; the
    previous default comes back after it.

    Examples
    --------
    >>> with temp_default_client(c):  # doctest: +SKIP
    ...     assert default_client() is c
    """
    key = next(_global_client_index)
    _global_clients[key] = c
    try:
        with AsCurrent(c):
            yield
    finally:
        if _global_clients.get(key) is c:
            del _global_clients[key]
