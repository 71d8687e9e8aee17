"""SSHCluster: a scheduler and workers started on other machines over SSH.

Theory of operation
-------------------
:func:`SSHCluster` builds a :class:`~distributed.deploy.spec.SpecCluster`
whose scheduler and workers are :class:`~distributed.deploy.spec.ProcessInterface`
handles: :class:`SSHScheduler` on the first host, one :class:`SSHWorker` per
further host.  Each handle opens its own SSH connection (``asyncssh``, imported
only when a handle starts, so the module imports without it) and runs::

    echo $$ && exec env DASK_INTERNAL_INHERIT_CONFIG=<this process's dask config> \\
        PYTHON -m distributed.cli.dask_spec [SCHEDULER] --spec '<JSON>'

on the remote host (see :mod:`distributed.cli.dask_spec`).  ``dask.config``
reads that variable when the remote interpreter imports it, so the remote
servers see the configuration the cluster was made under.  The handle reads
the remote stderr until the servers announce themselves (``Scheduler at:
ADDRESS``, one ``Start worker at: ADDRESS`` per worker); the scheduler handle
takes its ``address`` from that line, which the cluster then connects to.

After start-up the handle keeps reading the remote stdout and stderr (logged
at debug level, the last lines kept for error messages): an unread SSH
channel fills its window and the remote process would block on its next log
line.

The remote shell prints its PID before it execs Python, so that PID is
the Python process's.  Closing a handle runs ``kill -TERM PID`` there (in a
channel of its own: sshd does not relay the SSH "signal" request for a root
login), so the remote ``dask spec`` closes its servers in order; SIGKILL
follows after :data:`CLOSE_TIMEOUT` seconds.  A host that is not POSIX gets
the signals over the channel instead.  Then the connection closes.  A start that
fails tears down what it started the same way, and the error names the host.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import json
import logging
import shlex
import subprocess
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dask.config

from distributed.deploy.spec import ProcessInterface, SpecCluster
from distributed.utils import wait_for

if TYPE_CHECKING:
    import asyncssh

logger = logging.getLogger(__name__)

__all__ = [
    "CLOSE_TIMEOUT",
    "SCHEDULER_LINE",
    "WORKER_LINE",
    "SSHCluster",
    "SSHProcess",
    "SSHScheduler",
    "SSHWorker",
    "import_asyncssh",
]

#: What ``dask spec`` writes to stderr once a scheduler runs, followed by its address.
SCHEDULER_LINE = "Scheduler at:"
#: What ``dask spec`` writes to stderr once a worker runs, followed by its address.
WORKER_LINE = "Start worker at:"

#: Seconds a remote process has to exit after SIGTERM before it is killed.
CLOSE_TIMEOUT = 20.0

#: How many of the remote process's last output lines are kept for error messages.
_KEPT_LINES = 50

#: The keywords of the SSHCluster that dask.distributed once had (its "old_ssh"), which this one does not offer.
OLD_CLUSTER_KWARGS = frozenset(
    {
        "scheduler_addr",
        "scheduler_port",
        "worker_addrs",
        "nthreads",
        "nprocs",
        "n_workers",
        "ssh_username",
        "ssh_port",
        "ssh_private_key",
        "nohost",
        "logdir",
        "remote_python",
        "memory_limit",
        "worker_port",
        "nanny_port",
        "remote_dask_worker",
    }
)


def import_asyncssh() -> Any:
    """The ``asyncssh`` module, or an ImportError saying SSHCluster needs it."""
    try:
        import asyncssh
    except ImportError:
        raise ImportError(
            "Dask's SSHCluster requires the `asyncssh` package to be installed. Please install it using pip or conda."
        ) from None
    return asyncssh


def _spec_json(spec: Mapping[Any, Any], host: str, what: str) -> str:
    try:
        return json.dumps(spec)
    except (TypeError, ValueError) as e:
        raise TypeError(f"SSHCluster: the {what} for {host!r} must be JSON-serialisable to ship them there: {e}") from e


class SSHProcess(ProcessInterface):
    """A process on another host, run over an SSH connection: the base of :class:`SSHScheduler` and :class:`SSHWorker`.

    Parameters
    ----------
    address
        The host to connect to (its name or IP address).
    connect_options
        Keywords for :func:`asyncssh.connect` (``port``, ``username``,
        ``client_keys``, ``known_hosts``...).
    remote_python
        The Python to run there (default: the path of this interpreter).
    scheduler, name
        As for :class:`~distributed.deploy.spec.ProcessInterface`.
    """

    def __init__(
        self,
        address: str,
        connect_options: Mapping[str, Any] | None = None,
        remote_python: str | None = None,
        scheduler: str | None = None,
        name: Any = None,
    ) -> None:
        super().__init__(scheduler=scheduler, name=name)
        #: The host this process runs on.
        self.host = address
        self.address: str | None = address
        self.scheduler = scheduler
        self.name = name
        self.connect_options: dict[str, Any] = dict(connect_options or {})
        self.remote_python = remote_python or sys.executable
        self.connection: asyncssh.SSHClientConnection | None = None
        self.proc: asyncssh.SSHClientProcess[str] | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._output: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        #: The remote process's PID (on a POSIX host, once started).
        self.remote_pid: int | None = None
        self._posix = False

    # -- what a subclass says -------------------------------------------------------------
    def _what(self) -> str:
        return "process"

    def _remote_args(self) -> list[str]:
        """The arguments of ``python -m distributed.cli.dask_spec``."""
        raise NotImplementedError

    async def _wait_started(self, stderr: asyncssh.SSHReader[str]) -> None:
        """Read the remote stderr until the servers have announced themselves."""
        raise NotImplementedError

    # -- life cycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, start the remote process and wait until its servers run.

        Raises
        ------
        ImportError
            Without ``asyncssh``.
        ConnectionError
            When the host cannot be reached or refuses the login (naming the host).
        RuntimeError
            When the remote process exits before its servers run (with its last output).
        """
        asyncssh = import_asyncssh()
        try:
            try:
                self.connection = await asyncssh.connect(self.host, **self.connect_options)
            except (OSError, asyncssh.Error) as e:
                port = self.connect_options.get("port", 22)
                raise ConnectionError(
                    f"SSHCluster: could not connect over SSH to {self.host!r} (port {port}) "
                    f"to start a {self._what()}: {type(e).__name__}: {e}"
                ) from e
            command = await self._command()
            logger.debug("Starting a %s on %s: %s", self._what(), self.host, command)
            self.proc = await self.connection.create_process(command)
            if self._posix:
                first = await self._readline(self.proc.stdout)
                if not first.strip().isdigit():
                    raise await self._exited_early()
                self.remote_pid = int(first)
            self._readers.append(asyncio.ensure_future(self._read(self.proc.stdout)))
            await self._wait_started(self.proc.stderr)
            self._readers.append(asyncio.ensure_future(self._read(self.proc.stderr)))
        except BaseException:
            await self._teardown()
            raise
        await super().start()

    async def _command(self) -> str:
        assert self.connection is not None
        config = dask.config.serialize(dask.config.global_config)
        args = self._remote_args()
        if (await self.connection.run("uname", check=False)).exit_status == 0:
            self._posix = True
            # The shell's PID first: exec keeps it, so it is the Python process's, to signal on close.
            return " ".join(
                [
                    "echo $$ && exec env",
                    f"DASK_INTERNAL_INHERIT_CONFIG={shlex.quote(config)}",
                    self.remote_python,
                    "-m distributed.cli.dask_spec",
                    *map(shlex.quote, args),
                ]
            )
        if (await self.connection.run("cmd /c ver", check=False)).exit_status == 0:
            # Quoted whole, so no space before '&&' ends up in the value.
            return " ".join(
                [
                    f'set "DASK_INTERNAL_INHERIT_CONFIG={config}" &&',
                    self.remote_python,
                    "-m distributed.cli.dask_spec",
                    subprocess.list2cmdline(args),
                ]
            )
        raise RuntimeError(
            f"SSHCluster: {self.host!r} runs neither 'uname' nor 'cmd /c ver': "
            "cannot tell how to set DASK_INTERNAL_INHERIT_CONFIG there"
        )

    async def _readline(self, stream: asyncssh.SSHReader[str]) -> str:
        """The next line of remote output (kept for error messages), or ``""`` at its end."""
        line = await stream.readline()
        if line:
            self._output.append(line.rstrip("\n"))
            logger.debug("%s %s: %s", self._what(), self.host, line.rstrip("\n"))
        return line

    async def _read(self, stream: asyncssh.SSHReader[str]) -> None:
        while await self._readline(stream):
            pass

    async def _exited_early(self) -> RuntimeError:
        """The error for a remote process that ended before its servers ran."""
        status: Any = None
        if self.proc is not None:
            with contextlib.suppress(TimeoutError):
                await wait_for(self.proc.wait_closed(), 5)
            status = self.proc.exit_status if self.proc.exit_signal is None else self.proc.exit_signal[0]
        output = "\n".join(self._output)
        return RuntimeError(
            f"SSHCluster: the {self._what()} on {self.host!r} exited before it started (status {status}):\n{output}"
        )

    async def remote_exited(self) -> None:
        """Wait until the remote process has exited (for whatever reason)."""
        if self.proc is not None:
            await self.proc.wait_closed()

    async def close(self) -> None:
        """Stop the remote process (SIGTERM, then SIGKILL after :data:`CLOSE_TIMEOUT` s), then disconnect."""
        await self._teardown()
        await super().close()

    async def _teardown(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            for sig, timeout in (("TERM", CLOSE_TIMEOUT), ("KILL", 5.0)):
                if proc.returncode is not None or proc.is_closing():
                    break
                if not await self._signal(proc, sig):
                    break
                try:
                    await wait_for(proc.wait_closed(), timeout)
                except TimeoutError:
                    logger.warning(
                        "The %s on %s did not exit within %s s of SIG%s", self._what(), self.host, timeout, sig
                    )
            proc.close()
        readers, self._readers = self._readers, []
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.close()
            with contextlib.suppress(Exception):
                await connection.wait_closed()

    async def _signal(self, proc: asyncssh.SSHClientProcess[str], sig: str) -> bool:
        """Send ``sig`` to the remote process; False when there is no way left to."""
        try:
            if self.remote_pid is not None and self.connection is not None:
                # With kill(1) on a channel of its own: sshd refuses to relay signals
                # for the commands it runs without privilege separation (a root login's).
                await self.connection.run(f"kill -{sig} {self.remote_pid}", check=False, timeout=CLOSE_TIMEOUT)
            else:
                proc.send_signal(sig)
        except Exception as e:  # the connection is gone: nothing more to tell it
            logger.debug("Could not signal the %s on %s: %r", self._what(), self.host, e)
            return False
        return True


class SSHWorker(SSHProcess):
    """Workers on another host, started over SSH (``n_workers`` of them, default 1).

    Parameters
    ----------
    scheduler
        The address of the scheduler.
    address
        The host to run the workers on.
    connect_options
        Keywords for :func:`asyncssh.connect`.
    kwargs
        Keywords for ``worker_class`` (``nthreads``, ``memory_limit``...),
        plus ``n_workers``: how many workers to start there.  Shipped as JSON.
    worker_class
        The dotted name of the class to start (default ``"distributed.Nanny"``).
    remote_python
        The Python to run there (default: the path of this interpreter).
    loop
        Deprecated, and ignored (as in dask.distributed).
    name
        The worker's name in the cluster's ``worker_spec``.
    """

    def __init__(
        self,
        scheduler: str,
        address: str,
        connect_options: Mapping[str, Any],
        kwargs: Mapping[str, Any],
        worker_class: str = "distributed.Nanny",
        remote_python: str | None = None,
        loop: Any = None,
        name: Any = None,
    ) -> None:
        if loop is not None:
            warnings.warn(
                "The `loop` parameter has been deprecated and has no effect.", DeprecationWarning, stacklevel=2
            )
        super().__init__(address, connect_options, remote_python, scheduler=scheduler, name=name)
        self.worker_class = worker_class
        self.kwargs = copy.copy(dict(kwargs))
        self.n_workers = int(self.kwargs.pop("n_workers", 1))
        #: The addresses the remote workers announced, once started.
        self.worker_addresses: list[str] = []

    def _what(self) -> str:
        return "worker"

    def _remote_args(self) -> list[str]:
        assert self.scheduler is not None
        spec = {i: {"cls": self.worker_class, "opts": self.kwargs} for i in range(self.n_workers)}
        return [self.scheduler, "--spec", _spec_json(spec, self.host, "worker options")]

    async def _wait_started(self, stderr: asyncssh.SSHReader[str]) -> None:
        while len(self.worker_addresses) < self.n_workers:
            line = await self._readline(stderr)
            if not line:
                raise await self._exited_early()
            if WORKER_LINE in line:
                self.worker_addresses.append(line.split(WORKER_LINE, 1)[1].strip())


class SSHScheduler(SSHProcess):
    """A scheduler on another host, started over SSH; its ``address`` is the scheduler's once started.

    Parameters
    ----------
    address
        The host to run the scheduler on.
    connect_options
        Keywords for :func:`asyncssh.connect`.
    kwargs
        Keywords for :class:`~distributed.Scheduler` (``port``,
        ``dashboard_address``, ``idle_timeout``...).  Shipped as JSON.
    remote_python
        The Python to run there (default: the path of this interpreter).
    """

    def __init__(
        self,
        address: str,
        connect_options: Mapping[str, Any],
        kwargs: Mapping[str, Any],
        remote_python: str | None = None,
    ) -> None:
        super().__init__(address, connect_options, remote_python)
        self.kwargs = dict(kwargs)

    def _what(self) -> str:
        return "scheduler"

    def _remote_args(self) -> list[str]:
        spec = {"cls": "distributed.Scheduler", "opts": self.kwargs}
        return ["--spec", _spec_json(spec, self.host, "scheduler options")]

    async def _wait_started(self, stderr: asyncssh.SSHReader[str]) -> None:
        while True:
            line = await self._readline(stderr)
            if not line:
                raise await self._exited_early()
            if SCHEDULER_LINE in line:
                self.address = line.split(SCHEDULER_LINE, 1)[1].strip()
                return


# dask.distributed's names for these classes, for code that imports them from this module.
Process = SSHProcess
Worker = SSHWorker
Scheduler = SSHScheduler


def _per_host(value: Any, hosts: list[str], what: str, each: str) -> list[Any]:
    if not isinstance(value, list):
        return [value] * len(hosts)
    if len(value) != len(hosts):
        raise RuntimeError(f"When specifying a list of {what} you must provide {each} for each address.")
    return value


def SSHCluster(
    hosts: list[str] | None = None,
    connect_options: dict[str, Any] | list[dict[str, Any]] | None = None,
    worker_options: dict[str, Any] | None = None,
    scheduler_options: dict[str, Any] | None = None,
    worker_class: str = "distributed.Nanny",
    remote_python: str | list[str] | None = None,
    **kwargs: Any,
) -> SpecCluster:
    """Deploy a Dask cluster over SSH: the scheduler on the first host, workers on the others.

    Repeat the first host to run a worker beside the scheduler.  Every host
    needs this package installed; the remote processes get this process's
    dask configuration.

    Parameters
    ----------
    hosts
        Host names or addresses; the first runs the scheduler, each of the
        others ``worker_options["n_workers"]`` workers (default 1).
    connect_options
        Keywords for :func:`asyncssh.connect` (``port``, ``username``,
        ``password``, ``client_keys``, ``known_hosts``...), or a list of them,
        one per host.
    worker_options
        Keywords for the workers (see :class:`~distributed.Nanny` and
        :class:`~distributed.Worker`), plus ``n_workers`` per host.
    scheduler_options
        Keywords for the scheduler (see :class:`~distributed.Scheduler`).
    worker_class
        The dotted name of the class to run as each worker.
    remote_python
        The Python to run on the hosts (default: the path of this
        interpreter), or a list of them, one per host.
    **kwargs
        For :class:`~distributed.deploy.spec.SpecCluster` (``asynchronous``,
        ``security``, ``silence_logs``, ``name``...).

    Returns
    -------
    SpecCluster
        Started, unless ``asynchronous=True`` (then await it).

    Raises
    ------
    ValueError
        When ``hosts`` is empty.
    RuntimeError
        When a list of ``connect_options`` or ``remote_python`` does not have
        one entry per host.
    TypeError
        For a keyword of dask.distributed's older SSHCluster.

    Examples
    --------
    >>> from distributed import Client, SSHCluster
    >>> cluster = SSHCluster(
    ...     ["scheduler-host", "worker-1", "worker-2"],
    ...     connect_options={"known_hosts": None},
    ...     worker_options={"nthreads": 2, "n_workers": 2},
    ...     scheduler_options={"port": 0, "dashboard_address": ":8797"},
    ... )  # doctest: +SKIP
    >>> client = Client(cluster)  # doctest: +SKIP
    """
    old = sorted(set(kwargs) & OLD_CLUSTER_KWARGS)
    if old:
        raise TypeError(
            f"SSHCluster() got keywords of the older SSHCluster API, which is not available: {', '.join(old)}. "
            "Use SSHCluster(hosts, connect_options=..., worker_options={'n_workers': ..., 'nthreads': ...}, "
            "scheduler_options=...)"
        )
    if isinstance(hosts, str) or not hosts:
        raise ValueError(f"`hosts` must be a non empty list, value {hosts!r} found.")
    hosts = list(hosts)
    connect = _per_host(connect_options or {}, hosts, "connect_options", "a dictionary")
    pythons = _per_host(remote_python, hosts, "remote_python", "a path")
    scheduler = {
        "cls": SSHScheduler,
        "options": {
            "address": hosts[0],
            "connect_options": connect[0],
            "kwargs": scheduler_options or {},
            "remote_python": pythons[0],
        },
    }
    workers = {
        i: {
            "cls": SSHWorker,
            "options": {
                "address": host,
                "connect_options": connect[i + 1],
                "kwargs": worker_options or {},
                "worker_class": worker_class,
                "remote_python": pythons[i + 1],
            },
        }
        for i, host in enumerate(hosts[1:])
    }
    kwargs.setdefault("name", "SSHCluster")
    return SpecCluster(workers, scheduler, **kwargs)
