"""Plugins that put software on the cluster's machines: packages (pip, conda) and a source directory.

Theory of operation
-------------------
:class:`InstallPlugin` (and its :class:`PipInstall` and :class:`CondaInstall`)
is a worker plugin: registered with ``Client.register_plugin``, each worker
sets it up, those running now and each one that joins later.  Workers on
one machine share its Python environment, so the install runs once per host:

1. the worker takes the scheduler's lock named :func:`install_lock_name` of
   its host (the lock ``distributed.Lock(install_lock_name(host))`` takes),
   so the workers of a host install one at a time, and a host never runs two
   installers (two pip processes) at once;
2. holding it, the worker reads the scheduler's metadata
   ``[METADATA_PREFIX, <plugin name>, "installed", <host>]``: when a worker of
   this host already installed, it skips; otherwise it runs the install
   function (in a thread: the worker's event loop keeps refreshing the lock's
   lease and answering heartbeats) and then sets that key;
3. with ``restart_workers=True``, each worker (each nanny, so each worker
   process line) is restarted once afterwards, by its nanny, so that it
   imports the new packages afresh: the worker sets
   ``[METADATA_PREFIX, <plugin name>, "restarted", <nanny address>]`` and
   closes gracefully, and its nanny starts a new worker.  That worker sets the
   plugin up again, finds both keys set, and carries on.

The lock is taken through the worker's own connections to the scheduler (a
worker needs no client for it): this module speaks the lock's requests, and
refreshes its lease while it holds it, so a worker that dies while
installing loses the lock after ``distributed.scheduler.locks.lease-timeout``.

:class:`UploadDirectory` is a nanny plugin: it zips a directory when it is
made, and each nanny unpacks it into its local directory, so the files
outlive the nanny's worker processes.  With ``update_path=True`` the unpacked
directory goes on the nanny's ``sys.path``: worker processes started after
that inherit it (the "spawn" start method hands the parent's ``sys.path`` to
the child), and a worker already running is told to add it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
import zipfile
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import dask.config

from distributed.comm import CommClosedError
from distributed.coordination.leases import lease_timeout
from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin
from distributed.protocol import coordination_messages as cm
from distributed.protocol import messages as m
from distributed.protocol.serialize import Serialize

if TYPE_CHECKING:
    from distributed.nanny import Nanny
    from distributed.worker import Worker

__all__ = [
    "METADATA_PREFIX",
    "CondaInstall",
    "InstallPlugin",
    "PipInstall",
    "UploadDirectory",
    "install_lock_name",
    "is_bytecode",
    "prepend_to_sys_path",
    "run_installer",
]

logger = logging.getLogger(__name__)

#: The first key of the scheduler metadata the install plugins keep (``Client.get_metadata``).
METADATA_PREFIX = "install-plugin"


def install_lock_name(host: str) -> str:
    """The name of the lock the install plugins hold on ``host`` while they install.

    It is the name of a :class:`distributed.Lock`: code that changes a host's
    environment itself can hold ``distributed.Lock(install_lock_name(host))``
    to keep the install plugins out meanwhile.
    """
    return f"{METADATA_PREFIX}-{host}"


class InstallPlugin(WorkerPlugin):
    """Install software once per host, then restart the workers if asked to.

    See the module's notes for how the host's workers take turns.

    Parameters
    ----------
    install_fn
        Installs; called with no arguments, in a thread of one worker of each
        host (it may block).  An exception it raises fails the setup, and
        reaches ``Client.register_plugin``; the next worker of that host
        to set the plugin up tries again.
    restart_workers
        Have each worker's nanny restart it once after the install (so it
        imports what changed).  Every worker then needs a nanny.

    Examples
    --------
    >>> def install():
    ...     subprocess.run(["apt-get", "install", "-y", "graphviz"], check=True)
    >>> client.register_plugin(InstallPlugin(install, restart_workers=False))  # doctest: +SKIP
    """

    def __init__(self, install_fn: Callable[[], None], restart_workers: bool) -> None:
        self.install_fn = install_fn
        self.restart_workers = restart_workers
        # Unique per plugin object, so that the metadata keys tell this install from any other.
        self.name = f"{type(self).__name__}-{uuid.uuid4()}"

    def installed_key(self, host: str) -> list[str]:
        """The scheduler metadata key set once this plugin installed on ``host``."""
        return [METADATA_PREFIX, str(self.name), "installed", host]

    def restarted_key(self, nanny: str) -> list[str]:
        """The scheduler metadata key set once the worker of ``nanny`` was restarted for this plugin."""
        return [METADATA_PREFIX, str(self.name), "restarted", nanny]

    async def setup(self, worker: Worker) -> None:
        """Install unless a worker of this host did, then have the worker restarted when asked to.

        Raises
        ------
        RuntimeError
            With ``restart_workers=True`` on a worker without a nanny (before
            anything is installed); or whatever ``install_fn`` raised.
        """
        if self.restart_workers and worker.nanny is None:
            raise RuntimeError(
                f"{self.name}: restart_workers=True, but worker {worker.address} has no nanny to restart it "
                "(start workers with a nanny, or register the plugin with restart_workers=False)"
            )
        host = socket.gethostname()
        async with scheduler_lock(worker, install_lock_name(host)):
            if await read_metadata(worker, self.installed_key(host), default=False):
                logger.info("%s: already installed on host %s; not installing again", self.name, host)
            else:
                logger.info("%s: installing on host %s (worker %s)", self.name, host, worker.address)
                await asyncio.to_thread(self.install_fn)
                await write_metadata(worker, self.installed_key(host), True)
        if self.restart_workers:
            assert worker.nanny is not None  # checked above
            key = self.restarted_key(worker.nanny)
            # Set before restarting: the new worker sets the plugin up again and must not restart in turn.
            if not await read_metadata(worker, key, default=False):
                await write_metadata(worker, key, True)
                logger.info("%s: restarting worker %s through its nanny %s", self.name, worker.address, worker.nanny)
                # Not awaited: setup runs while the worker starts or while the scheduler waits for its
                # reply; the restart waits for the worker to be up, then lets its nanny replace it.
                worker.spawn(restart_through_nanny(worker, reason=f"{self.name}-setup"), name="install-restart")


class PipInstall(InstallPlugin):
    """Install packages with pip once per host (``python -m pip install`` of the worker's interpreter).

    Parameters
    ----------
    packages
        What ``pip install`` is given: names with versions, URLs, paths of
        wheels or project directories.
    pip_options
        Options put before the packages (``["--upgrade"]``, ``["--no-index",
        "--find-links", "/wheels"]``).
    restart_workers
        Restart each worker once afterwards (see :class:`InstallPlugin`).

    Raises
    ------
    RuntimeError
        From ``setup`` (so from ``Client.register_plugin``), when pip fails:
        with pip's error output.

    Examples
    --------
    >>> plugin = PipInstall(packages=["scikit-learn"], pip_options=["--upgrade"])
    >>> client.register_plugin(plugin)  # doctest: +SKIP
    """

    def __init__(
        self, packages: Sequence[str], pip_options: Sequence[str] | None = None, restart_workers: bool = False
    ) -> None:
        self.packages = list(packages)
        self.pip_options = list(pip_options or ())
        super().__init__(self.install, restart_workers=restart_workers)

    def install(self) -> None:
        """Run pip (on a worker; once per host when the plugin is registered)."""
        run_installer("pip", [sys.executable, "-m", "pip", "install", *self.pip_options, *self.packages])


class CondaInstall(InstallPlugin):
    """Install packages with conda once per host (``conda install --yes``).

    The worker finds conda through the ``CONDA_EXE`` environment variable
    (which an activated conda environment sets), else as ``conda`` on its
    ``PATH``.

    Parameters
    ----------
    packages
        What ``conda install`` is given (``["numpy=1.26", "scipy"]``).
    conda_options
        Options put before the packages (``["-c", "conda-forge"]``).
    restart_workers
        Restart each worker once afterwards (see :class:`InstallPlugin`).

    Raises
    ------
    RuntimeError
        From ``setup`` (so from ``Client.register_plugin``): when conda cannot
        be found on the worker, or fails (with its error output).

    Examples
    --------
    >>> plugin = CondaInstall(packages=["scikit-learn"], conda_options=["-c", "conda-forge"])
    >>> client.register_plugin(plugin)  # doctest: +SKIP
    """

    def __init__(
        self, packages: Sequence[str], conda_options: Sequence[str] | None = None, restart_workers: bool = False
    ) -> None:
        self.packages = list(packages)
        self.conda_options = list(conda_options or ())
        super().__init__(self.install, restart_workers=restart_workers)

    def install(self) -> None:
        """Run conda (on a worker; once per host when the plugin is registered)."""
        run_installer("conda", [conda_executable(), "install", "--yes", *self.conda_options, *self.packages])


def conda_executable() -> str:
    """The conda executable of this process: ``CONDA_EXE``, else ``conda`` on ``PATH``.

    Raises
    ------
    RuntimeError
        When neither names an executable file.
    """
    from_environ = os.environ.get("CONDA_EXE")
    if from_environ and os.path.isfile(from_environ) and os.access(from_environ, os.X_OK):
        return from_environ
    on_path = shutil.which("conda")
    if on_path is not None:
        return on_path
    where = f"CONDA_EXE={from_environ!r} is no executable file" if from_environ else "CONDA_EXE is not set"
    msg = (
        f"conda install failed because conda could not be found on host {socket.gethostname()}: {where}, "
        "and there is no `conda` on PATH"
    )
    logger.error(msg)
    raise RuntimeError(msg)


def run_installer(tool: str, command: list[str]) -> None:
    """Run an installer's ``command``, logging its output.

    Raises
    ------
    RuntimeError
        When it exits with an error, with its error output (its standard
        output when it wrote nothing to standard error), or cannot be run.
    """
    logger.info("Running %s", command)
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    except OSError as e:
        msg = f"{tool} install failed: cannot run {command[0]!r}: {e}"
        logger.error(msg)
        raise RuntimeError(msg) from e
    if done.stdout.strip():
        logger.info("%s install output:\n%s", tool, done.stdout.strip())
    if done.returncode != 0:
        said = done.stderr.strip() or done.stdout.strip()
        msg = f"{tool} install failed with exit code {done.returncode}:\n{said}"
        logger.error(msg)
        raise RuntimeError(msg)


async def restart_through_nanny(worker: Worker, reason: str) -> None:
    """Once ``worker`` is up, close it gracefully so that its nanny starts a new one.

    A graceful close hands the data only this worker holds to other workers
    first, as dask's install plugins do.
    """
    try:
        # Idempotent: returns once a start under way finished; raises on a worker that closed meanwhile.
        await worker.start()
    except RuntimeError:
        logger.info("Worker %s closed before it could be restarted (%s)", worker.address, reason)
        return
    await worker.close_gracefully(restart=True, reason=reason)


# -- the scheduler's lock and metadata, over the worker's connections -----------------------------
@contextlib.asynccontextmanager
async def scheduler_lock(worker: Worker, name: str) -> AsyncIterator[None]:
    """Hold the scheduler's lock ``name`` (the one ``distributed.Lock(name)`` takes) inside the block.

    The lease is refreshed while held, so a long install keeps it; a worker
    that dies loses it once its lease times out.
    """
    lease = f"{worker.address}-{uuid.uuid4().hex}"
    await worker.rpc.call(
        worker.scheduler_addr, cm.LockAcquire(op="lock_acquire", name=name, id=lease, timeout=None, client=None)
    )
    keeper = asyncio.ensure_future(keep_lease(worker, name, lease))
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        try:
            await worker.rpc.call(worker.scheduler_addr, cm.LockRelease(op="lock_release", name=name, id=lease))
        except (OSError, CommClosedError) as e:
            # Not raised over what the block raised: the lease times out on the scheduler anyway.
            logger.warning("Could not release lock %s (lease %s): %r", name, lease, e)


async def keep_lease(worker: Worker, name: str, lease: str) -> None:
    """Refresh ``lease`` of lock ``name`` five times per lease timeout, until cancelled."""
    timeout = lease_timeout()
    if math.isinf(timeout):
        return  # leases never time out: nothing to refresh
    while True:
        await asyncio.sleep(max(timeout / 5, 0.01))
        try:
            await worker.rpc.call(
                worker.scheduler_addr, cm.LockRefresh(op="lock_refresh_leases", name=name, ids=[lease])
            )
        except (OSError, CommClosedError) as e:
            # The scheduler is out of reach: the lease ends there anyway.
            logger.debug("Refreshing lease %s of lock %s failed: %r", lease, name, e)
            return


async def read_metadata(worker: Worker, keys: list[str], default: Any) -> Any:
    """The scheduler's metadata at the path ``keys`` (``Client.get_metadata``), or ``default``."""
    reply = await worker.rpc.call(worker.scheduler_addr, m.GetMetadata(op="get_metadata", keys=keys))
    return reply["value"] if isinstance(reply, dict) and "value" in reply else default


async def write_metadata(worker: Worker, keys: list[str], value: Any) -> None:
    """Put ``value`` at the path ``keys`` of the scheduler's metadata (``Client.set_metadata``)."""
    await worker.rpc.call(worker.scheduler_addr, m.SetMetadata(op="set_metadata", keys=keys, value=value))


# -- UploadDirectory -----------------------------------------------------------------------------
#: The directory parts a :class:`UploadDirectory` leaves out by default.
DEFAULT_SKIP_WORDS = (".git", ".github", ".pytest_cache", "tests", "docs")


def is_bytecode(filename: str) -> bool:
    """Whether ``filename`` is compiled Python (``.pyc``): left out of uploads by default."""
    return os.path.splitext(filename)[1] == ".pyc"


class UploadDirectory(NannyPlugin):
    """Copy a local directory to every nanny's machine, and optionally onto ``sys.path``.

    The directory is zipped now; each nanny unpacks it into its local
    directory (``<temporary-directory>/dask-scratch-space``), as
    ``<that>/<the directory's name>``.  Files of the same name there are
    replaced, each at once, so a worker never reads half a file.

    Parameters
    ----------
    path
        The directory.
    restart
        Restart each nanny's worker after unpacking (so it imports the new
        files afresh).
    update_path
        Put the unpacked directory on ``sys.path``: its modules and
        packages become importable by the workers' tasks.
    skip_words
        Leave out the files below a directory, or named, exactly one of these.
    skip
        Leave out the files for which one of these, given the file's path, is true.

    Raises
    ------
    NotADirectoryError
        When ``path`` is not a directory.

    Examples
    --------
    >>> client.register_plugin(UploadDirectory("myproject", update_path=True))  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        restart: bool = False,
        update_path: bool = False,
        skip_words: Iterable[str] = DEFAULT_SKIP_WORDS,
        skip: Iterable[Callable[[str], bool]] = (is_bytecode,),
    ) -> None:
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if not os.path.isdir(self.path):
            raise NotADirectoryError(f"UploadDirectory needs a directory, got {self.path!r}")
        self.restart = restart
        self.update_path = update_path
        self.dirname = os.path.basename(self.path)
        self.name = f"upload-directory-{self.dirname}"
        self.data = zip_directory(self.path, frozenset(skip_words), tuple(skip))

    async def setup(self, nanny: Nanny) -> None:
        """Unpack into the nanny's local directory; put it on ``sys.path`` when asked to."""
        base = nanny_local_directory(nanny)
        unpack_replacing(self.data, base)
        if not self.update_path:
            return
        entry = os.path.join(base, self.dirname)
        prepend_to_sys_path(entry)
        # A worker started from now on inherits the nanny's sys.path; one running now is told.
        # With restart, the nanny replaces it right after this setup anyway.
        address = nanny.worker_address
        if address is not None and not self.restart:
            try:
                await nanny.rpc.call(
                    address, m.RunFunction(op="run", function=Serialize(prepend_to_sys_path), args=Serialize((entry,)))
                )
            except (OSError, CommClosedError) as e:
                # The worker ended meanwhile: its successor inherits the path.
                logger.warning("Could not put %s on the sys.path of worker %s: %r", entry, address, e)


def prepend_to_sys_path(entry: str) -> None:
    """Put ``entry`` first on this process's ``sys.path`` (unless it is there already)."""
    if entry not in sys.path:
        sys.path.insert(0, entry)


def nanny_local_directory(nanny: Nanny) -> str:
    """The nanny's local directory: its ``local_directory`` when it has one, else the default one.

    The default is where workers started without ``local_directory`` keep
    their own directories: ``<temporary-directory>/dask-scratch-space``.
    """
    given = getattr(nanny, "local_directory", None)
    if given:
        return str(given)
    base = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    return os.path.join(base, "dask-scratch-space")


def zip_directory(path: str, skip_words: frozenset[str], skip: tuple[Callable[[str], bool], ...]) -> bytes:
    """A zip of the directory ``path``, its files under ``<its name>/``, leaving out what is skipped."""
    parent = os.path.dirname(path)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, dirs, files in os.walk(path):
            # Pruned here so that skipped trees (.git) are not even walked.
            dirs[:] = sorted(d for d in dirs if d not in skip_words)
            for file in sorted(files):
                filename = os.path.join(root, file)
                if file in skip_words or any(predicate(filename) for predicate in skip):
                    continue
                archive.write(filename, os.path.relpath(filename, parent))
    return buffer.getvalue()


def unpack_replacing(data: bytes, destination: str) -> None:
    """Unpack the zip ``data`` into ``destination``, replacing each file at once.

    Nannies of one machine may unpack into the same directory while their
    workers import from it: each file is written aside and then renamed into
    place, so a reader sees the old file or the new one, whole.
    """
    os.makedirs(destination, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".upload-", dir=destination)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            archive.extractall(staging)
        for root, _, files in os.walk(staging):
            target_dir = os.path.join(destination, os.path.relpath(root, staging))
            os.makedirs(target_dir, exist_ok=True)
            for file in files:
                os.replace(os.path.join(root, file), os.path.join(target_dir, file))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
