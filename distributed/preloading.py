"""Preloads: user code that a scheduler, worker or nanny runs as it starts and closes.

Theory of operation
-------------------
A preload is named by a string, read as one of (in this order, as dask.distributed reads them):

* an ``http://`` or ``https://`` address: the module's source is downloaded
  (retried a few times on 429, 502, 503 and 504) and run as a module named
  for the address;
* a path ending in ``.py``: the file is run afresh as the module named for its
  stem, which goes into ``sys.modules`` so that tasks can import it by name;
* a name without spaces: the module of that name, imported unless it was already;
* anything else: the source of a module, run as one.

The module is imported while the server is constructed, so a preload can
change what the construction reads (the config, the comm backends), and a
preload that cannot be imported stops the server from being made:
:class:`PreloadError` names it.  The module may define

``dask_setup(server)``
    run once the server listens (before a worker or nanny registers with the
    scheduler), plain or ``async``.  It may be a :func:`click.command`: its
    parameters are parsed from the preload's ``argv`` (also checked at
    construction) and passed after the server.
``dask_teardown(server)``
    run as the server closes, plain or ``async``; preloads are torn down in
    the reverse order of their setup.

A setup or teardown that raises is logged with the preload's name and its
traceback, and the server goes on starting or closing, as in dask.distributed.

This module imports no server: the server is any object, handed to the user's
functions as it is.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, overload

import click
import dask.config

logger = logging.getLogger(__name__)

__all__ = [
    "Preload",
    "PreloadError",
    "PreloadManager",
    "import_preload",
    "is_webaddress",
    "process_preloads",
    "validate_preload_argv",
]

#: HTTP statuses worth asking again for a preload's source (rate limits, a gateway between restarts).
RETRYABLE_HTTP_CODES = frozenset({429, 502, 503, 504})
#: Tries after the first, waiting 0.2 s, 0.4 s, 0.8 s before them.
DOWNLOAD_RETRIES = 3


class PreloadError(ImportError):
    """A preload could not be imported, or its ``argv`` does not parse; the message names the preload.

    An ``ImportError``, so that code catching the failure of a missing
    preload module (a ``ModuleNotFoundError`` in dask.distributed) still does.
    """


def is_webaddress(name: str) -> bool:
    """Whether preload ``name`` is an address to download it from.

    Examples
    --------
    >>> is_webaddress("https://example.com/setup.py")
    True
    >>> is_webaddress("mypackage.setup")
    False
    """
    return name.startswith(("http://", "https://"))


def _is_source(name: str) -> bool:
    # A module name has no whitespace at all; dask.distributed reads a name with a space as source.
    return any(c.isspace() for c in name)


def _describe(name: str) -> str:
    """The preload as it appears in messages: a module's source by its first line."""
    if not _is_source(name):
        return repr(name)
    first = next((line.strip() for line in name.splitlines() if line.strip()), "")
    return f"(source text starting {first[:60]!r})"


def _run_source(source: str | bytes, module_name: str, filename: str) -> ModuleType:
    module = ModuleType(module_name)
    module.__file__ = filename
    # Registered while it runs (as an import would), so that classes it defines
    # (dataclasses, pickled by reference) find their module.
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    except BaseException:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
        raise
    return module


def _import_file(path: str) -> ModuleType:
    # Run from its source every time (not from a cached .pyc, not the module of an earlier
    # import): a file rewritten between two servers' starts gives the second one the new code.
    directory, filename = os.path.split(os.path.abspath(path))
    with open(path, "rb") as f:
        source = f.read()
    # Its directory is importable while it runs, so that it can import the modules next to it.
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        importlib.invalidate_caches()
        return _run_source(source, os.path.splitext(filename)[0], path)
    finally:
        if added:
            try:
                sys.path.remove(directory)
            except ValueError:
                pass


def _download(url: str) -> bytes:
    logger.info("Downloading preload at %s", url)
    for attempt in range(DOWNLOAD_RETRIES + 1):
        try:
            with urllib.request.urlopen(url) as response:
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as e:
            if e.code not in RETRYABLE_HTTP_CODES or attempt == DOWNLOAD_RETRIES:
                raise
            # Blocking on purpose: the server is being constructed and cannot go on without its preload.
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def import_preload(name: str) -> ModuleType:
    """The module preload ``name`` names (see the module docstring for how ``name`` is read).

    Raises
    ------
    PreloadError
        When it cannot be downloaded, read or imported, or raises while it runs;
        the message names the preload and the cause, which is chained.
    """
    try:
        if is_webaddress(name):
            module = _run_source(_download(name), name, name)
        elif name.endswith(".py"):
            module = _import_file(name)
        elif not _is_source(name):
            module = sys.modules.get(name) or importlib.import_module(name)
        else:
            digest = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:16]
            module = _run_source(name, f"dask_preload_{digest}", f"<preload {digest}>")
    except Exception as e:
        raise PreloadError(f"Could not import preload {_describe(name)}: {type(e).__name__}: {e}") from e
    logger.info("Imported preload %s", _describe(name))
    return module


class Preload:
    """One preload of a server: its module, and the setup and teardown it defines.

    Parameters
    ----------
    server
        The scheduler, worker or nanny, handed to ``dask_setup`` and ``dask_teardown``.
    name
        A module name, a path to a ``.py`` file, an ``http(s)://`` address, or
        the source of a module.
    argv
        Arguments for a ``dask_setup`` that is a :func:`click.command`.

    Raises
    ------
    PreloadError
        When the module cannot be imported, or ``argv`` does not parse for its
        click command.
    """

    def __init__(self, server: object, name: str, argv: Sequence[str] = ()) -> None:
        self.server = server
        self.name = name
        self.argv = list(argv)
        self.module = import_preload(name)
        self._params: dict[str, Any] = {}
        self._args: list[str] = []
        setup = self.setup_function
        if isinstance(setup, click.Command):
            # Parsed now: arguments it does not take stop the server from being made, not only logged at start.
            try:
                context = setup.make_context("dask_setup", list(self.argv), allow_extra_args=False)
            except click.exceptions.Exit:
                context = None  # --help: click printed it
            except click.ClickException as e:
                raise PreloadError(f"Preload {_describe(name)}: bad arguments {self.argv}: {e.format_message()}") from e
            if context is not None:
                self._params = dict(context.params)
                self._args = list(context.args)

    @property
    def setup_function(self) -> Any:
        """The module's ``dask_setup`` (a function or a click command), or None."""
        return getattr(self.module, "dask_setup", None)

    @property
    def is_click_command(self) -> bool:
        """Whether its ``dask_setup`` is a click command, which takes ``argv``."""
        return isinstance(self.setup_function, click.Command)

    def __repr__(self) -> str:
        return f"<Preload {_describe(self.name)}>"

    async def start(self) -> None:
        """Run ``dask_setup(server)`` (awaited when it returns an awaitable), if defined."""
        setup = self.setup_function
        if setup is None:
            return
        logger.info("Run preload setup: %s", _describe(self.name))
        if isinstance(setup, click.Command):
            callback = setup.callback
            if callback is None:
                return
            result = callback(self.server, *self._args, **self._params)
        else:
            result = setup(self.server)
        if inspect.isawaitable(result):
            await result

    async def teardown(self) -> None:
        """Run ``dask_teardown(server)`` (awaited when it returns an awaitable), if defined."""
        teardown = getattr(self.module, "dask_teardown", None)
        if teardown is None:
            return
        logger.info("Run preload teardown: %s", _describe(self.name))
        result = teardown(self.server)
        if inspect.isawaitable(result):
            await result


class PreloadManager(Sequence[Preload]):
    """A server's preloads, set up in order and torn down in reverse.

    A setup or teardown that raises is logged (naming the preload) and the
    others still run, as in dask.distributed.  Only the preloads whose setup
    was run are torn down: a server that failed to start before its preloads
    were set up does not tear them down.
    """

    def __init__(self, preloads: Sequence[Preload] = ()) -> None:
        self._preloads = list(preloads)
        self._started: list[Preload] = []

    async def start(self) -> None:
        """Run every preload's setup."""
        for preload in self._preloads:
            # Counted as started before it runs: a setup that failed half way may have something to undo.
            self._started.append(preload)
            try:
                await preload.start()
            except Exception:
                logger.exception("Failed to start preload %s", _describe(preload.name))

    async def teardown(self) -> None:
        """Run the teardown of every preload set up, the last set up first (each once)."""
        started, self._started = self._started, []
        for preload in reversed(started):
            try:
                await preload.teardown()
            except Exception:
                logger.exception("Failed to tear down preload %s", _describe(preload.name))

    @overload
    def __getitem__(self, index: int) -> Preload: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Preload]: ...

    def __getitem__(self, index: int | slice) -> Preload | Sequence[Preload]:
        return self._preloads[index]

    def __len__(self) -> int:
        return len(self._preloads)

    def __iter__(self) -> Iterator[Preload]:
        return iter(self._preloads)

    def __repr__(self) -> str:
        return f"<PreloadManager {self._preloads!r}>"


def _per_preload_argv(names: list[str], argv: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    if not argv:
        return [[] for _ in names]
    if all(isinstance(a, str) for a in argv):
        # One list for all, as the command lines give it.
        return [[str(a) for a in argv] for _ in names]
    if any(isinstance(a, str) for a in argv):
        raise TypeError(f"preload_argv mixes strings and lists: {list(argv)!r}")
    per = [[str(x) for x in a] for a in argv]
    if len(per) != len(names):
        raise ValueError(f"preload_argv has {len(per)} lists for {len(names)} preloads")
    return per


def process_preloads(
    server: object,
    preload: str | Sequence[str] | None,
    preload_argv: Sequence[str] | Sequence[Sequence[str]] | None,
    *,
    config_preload: str,
    config_argv: str,
) -> PreloadManager:
    """Import a server's preloads (from its arguments, else from the config) and return them to start later.

    Parameters
    ----------
    server
        The server the preloads' setup and teardown get.
    preload
        One preload or a list; None reads the config key ``config_preload``.
    preload_argv
        One list of arguments for all the preloads, or one list per preload;
        None reads ``config_argv``.
    config_preload, config_argv
        The config keys (``"distributed.worker.preload"``, ``"distributed.worker.preload-argv"``).

    Raises
    ------
    PreloadError
        When a preload cannot be imported or its arguments do not parse.
    ValueError
        When there are arguments but no preload takes them (no ``dask_setup``
        is a click command), or as many argument lists as preloads are not given.
    """
    if preload is None:
        preload = dask.config.get(config_preload, None) or []
    if preload_argv is None:
        preload_argv = dask.config.get(config_argv, None) or []
    names = [preload] if isinstance(preload, str) else list(preload)
    if isinstance(preload_argv, str):
        preload_argv = [preload_argv]
    argvs = _per_preload_argv(names, preload_argv)
    preloads = [Preload(server, name, argv) for name, argv in zip(names, argvs)]
    for p in preloads:
        if p.argv and not p.is_click_command and not any(q.is_click_command for q in preloads):
            raise ValueError(
                f"preload_argv {p.argv} given, but no preload takes arguments "
                f"(none of {[_describe(q.name) for q in preloads]} has a click command as dask_setup)"
            )
    return PreloadManager(preloads)


def validate_preload_argv(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Check a command line's extra arguments against its ``--preload`` modules (a click callback).

    Extra arguments need a ``--preload`` before them whose ``dask_setup`` is
    a click command (at most one such), and must parse for it.  Without
    extra arguments nothing is imported here: the server imports its preloads.

    Raises
    ------
    click.UsageError
        When the arguments are unexpected or do not parse.
    """
    if not value:
        return value
    names = [n for n in ctx.params.get("preload") or () if not is_webaddress(n)]
    if not ctx.params.get("preload"):
        for arg in value:
            if arg.startswith("-"):
                raise click.NoSuchOption(arg)
        raise click.UsageError(
            f"Got unexpected extra argument{'s' if len(value) > 1 else ''}: ({' '.join(value)}). "
            "If they are for a --preload module, give --preload before them."
        )
    try:
        modules = {name: import_preload(name) for name in names}
    except PreloadError as e:
        raise click.UsageError(str(e)) from e
    commands = {
        n: m.dask_setup for n, m in modules.items() if isinstance(getattr(m, "dask_setup", None), click.Command)
    }
    if len(commands) > 1:
        raise click.UsageError(f"More than one --preload takes arguments: {[_describe(n) for n in commands]}")
    if not commands:
        raise click.UsageError(
            f"Got extra arguments {list(value)}, but no --preload has a click command as dask_setup to take them"
        )
    ((name, command),) = commands.items()
    try:
        command.make_context("dask_setup", list(value), allow_extra_args=False)
    except click.exceptions.Exit:
        pass
    except click.ClickException as e:
        raise click.UsageError(f"Preload {_describe(name)}: {e.format_message()}") from e
    return value
