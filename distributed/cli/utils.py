"""Helpers shared by ``dask scheduler`` and ``dask worker``.

Theory of operation
-------------------
A command parses its options with click, so a bad value is a usage error (exit
code 2, with click's message on stderr) before anything starts. It then runs one
coroutine under :func:`asyncio.run`. That coroutine builds a
:class:`ShutdownSignal`, which turns SIGINT and SIGTERM into an
:class:`asyncio.Event` through ``loop.add_signal_handler``, so the handler runs
on the event loop and may start an orderly close. The command waits for either
that event or its servers finishing on their own, then closes the servers and
returns the exit code. A second signal while closing exits at once (code
``128 + signum``), for the user who presses Ctrl-C twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click
import dask.config
from dask.utils import parse_bytes, parse_timedelta

from distributed.config import DEFAULT_LOG_FORMAT, initialize_logging
from distributed.utils import get_ip_interface

__all__ = [
    "DEFAULT_LOG_FORMAT",
    "DurationType",
    "MemoryLimitType",
    "ShutdownSignal",
    "get_ip_interface",
    "host_in_address",
    "parse_resources",
    "pid_file",
    "run_unless_signalled",
    "security_from_options",
    "setup_logging",
    "tls_options",
    "version_line",
    "wait_for_scheduler_file",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

if TYPE_CHECKING:
    from distributed.security import Security

if TYPE_CHECKING:
    # click >= 8.2 makes ParamType generic; older releases (still supported) do not
    # at run time, so only the type checker sees the subscripted bases.
    _DurationBase = click.ParamType[float]
    _MemoryLimitBase = click.ParamType[str | float | int]
else:
    _DurationBase = click.ParamType
    _MemoryLimitBase = click.ParamType


def setup_logging() -> None:
    """Log ``distributed.*`` to stderr at the levels of the ``logging:`` config; other libraries at WARNING.

    The levels are the config's, as for ``dask scheduler`` and ``dask worker``
    in dask: ``distributed: info`` unless the config says otherwise (say
    ``distributed.worker: debug``, or ``distributed: warning`` for a quiet
    process).  Idempotent. Each record is flushed as it is written
    (``StreamHandler`` flushes after every record), so a parent process
    reading our stderr sees lines such as ``Scheduler at:`` as soon as they
    are logged.
    """
    initialize_logging()
    root = logging.getLogger()
    if not root.handlers:
        fmt = dask.config.get("distributed.admin.log-format", None) or DEFAULT_LOG_FORMAT
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(str(fmt)))
        handler.setLevel(logging.WARNING)
        root.addHandler(handler)


def version_line() -> str:
    """What a CLI logs of the versions it runs with, as it starts: ``distributed X, dask Y, Python Z``."""
    import platform

    from distributed.versions import get_package_info

    found = get_package_info(["distributed", "dask"])
    return f"distributed {found['distributed']}, dask {found['dask']}, Python {platform.python_version()}"


class ShutdownSignal:
    """SIGINT and SIGTERM as an event on the running loop.

    Examples
    --------
    >>> async def main() -> None:  # doctest: +SKIP
    ...     shutdown = ShutdownSignal()
    ...     shutdown.install()
    ...     await shutdown.wait()
    """

    signals = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.event = asyncio.Event()
        #: The first signal received, if any.
        self.received: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        """Handle the signals on the running loop (no-op where unsupported)."""
        loop = asyncio.get_running_loop()
        for sig in self.signals:
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                # Not the main thread, or a platform without signal support on loops.
                logger.debug("Cannot handle %s on this loop", sig.name)
                return
        self._loop = loop

    def uninstall(self) -> None:
        """Restore the default handlers."""
        if self._loop is None:
            return
        for sig in self.signals:
            with contextlib.suppress(Exception):
                self._loop.remove_signal_handler(sig)
        self._loop = None

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.received is not None:
            logger.warning("Received %s again while closing; exiting now", sig.name)
            logging.shutdown()
            os._exit(128 + int(sig))
        self.received = sig
        logger.info("Received signal %s (%d)", sig.name, int(sig))
        self.event.set()

    async def wait(self) -> None:
        """Return once a signal has arrived."""
        await self.event.wait()


async def run_unless_signalled(coro: Coroutine[Any, Any, T], shutdown: ShutdownSignal) -> T | None:
    """Await ``coro`` unless a signal arrives first; then cancel it and return None.

    Exceptions from ``coro`` propagate. Check ``shutdown.received`` to tell a
    ``None`` result from an interrupted one.
    """
    task: asyncio.Task[T] = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(shutdown.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
    if task.done():
        return task.result()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        logger.debug("Interrupted start-up raised", exc_info=True)
    return None


@contextlib.contextmanager
def pid_file(path: str | None) -> Iterator[None]:
    """Write our PID to ``path`` for the duration of the block (if ``path``)."""
    if not path:
        yield
        return
    pid = str(os.getpid())
    with open(path, "w") as f:
        f.write(pid)
    try:
        yield
    finally:
        # Only remove it if it is still ours (another process may have taken over).
        with contextlib.suppress(OSError):
            with open(path) as f:
                ours = f.read().strip() == pid
            if ours:
                os.remove(path)


def parse_resources(text: str | None) -> dict[str, float]:
    """Parse ``"GPU=2 MEM=10e9"`` (or comma separated) into ``{"GPU": 2.0, ...}``.

    Raises
    ------
    ValueError
        On an item that is not ``NAME=NUMBER``.

    Examples
    --------
    >>> parse_resources("GPU=2 MEM=10e9")
    {'GPU': 2.0, 'MEM': 10000000000.0}
    """
    out: dict[str, float] = {}
    if not text:
        return out
    for item in text.replace(",", " ").split():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"Expected NAME=NUMBER, got {item!r}")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"Resource {name!r} needs a number, got {value!r}") from None
    return out


def host_in_address(host: str) -> str:
    """``host`` as written inside an address (IPv6 literals bracketed)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


async def wait_for_scheduler_file(path: str, timeout: float) -> str:
    """The scheduler address from a scheduler file, waiting for it to appear.

    The file may not exist yet, or be half written, when a worker starts
    alongside its scheduler; keep reading until it parses or ``timeout`` passes.

    Raises
    ------
    TimeoutError
        When no readable file appeared in time.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            with open(path) as f:
                data = json.load(f)
            address = data["address"]
            if isinstance(address, str) and address:
                return address
            last_error = ValueError(f"no address in {path}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            last_error = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"No scheduler address in {path!r} after {timeout} s: {last_error}")
        await asyncio.sleep(0.1)


class DurationType(_DurationBase):
    """A duration such as ``"30s"``, ``"5 minutes"`` or ``10`` (seconds), as seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            seconds = parse_timedelta(str(value).strip(), default="seconds")
        except (ValueError, KeyError, TypeError):
            self.fail(f"{value!r} is not a duration (try '30s', '5 minutes' or a number of seconds)", param, ctx)
        if seconds is None or seconds < 0:
            self.fail(f"{value!r} is not a non-negative duration", param, ctx)
        return float(seconds)


class MemoryLimitType(_MemoryLimitBase):
    """``auto``, a byte count (``4GiB``, ``4e9``), a fraction of RAM (``0.5``) or ``0`` (no limit)."""

    name = "memory-limit"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str | float | int:
        if isinstance(value, (int, float)):
            return value
        text = str(value).strip()
        if text.lower() == "auto":
            return "auto"
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            if number < 0:
                self.fail(f"{value!r} is negative", param, ctx)
            return number if 0 < number <= 1 else int(number)
        try:
            return int(parse_bytes(text))
        except (ValueError, KeyError, TypeError):
            self.fail(f"{value!r} is not 'auto', a size like '4GiB', or a fraction like 0.5", param, ctx)


def tls_options(func: Any) -> Any:
    """Add ``--tls-ca-file``, ``--tls-cert`` and ``--tls-key`` to a command."""
    for option in reversed(
        [
            click.option("--tls-ca-file", type=str, default=None, help="CA certificate(s) file for TLS (PEM)"),
            click.option("--tls-cert", type=str, default=None, help="Certificate file for TLS (PEM)"),
            click.option(
                "--tls-key", type=str, default=None, help="Private key file for TLS (PEM; omit if in the cert file)"
            ),
        ]
    ):
        func = option(func)
    return func


def security_from_options(role: str, ca_file: str | None, cert: str | None, key: str | None) -> Security | None:
    """The Security the ``--tls-*`` options give ``role`` (None when none is given).

    Unset ones come from the ``distributed.comm.tls.*`` config.  Checked here,
    by building the TLS contexts once, so a missing file or a certificate
    without a CA is a usage error before anything starts.
    """
    from distributed.security import Security

    given: dict[str, Any] = {
        k: v for k, v in (("tls_ca_file", ca_file), (f"tls_{role}_cert", cert), (f"tls_{role}_key", key)) if v
    }
    if not given:
        return None
    if key and not cert:
        raise click.UsageError("--tls-key needs --tls-cert")
    try:
        security = Security(**given)
        security.get_listen_args(role)
        security.get_connection_args(role)
    except (OSError, ValueError) as e:
        raise click.UsageError(f"Bad TLS options: {e}") from None
    return security
