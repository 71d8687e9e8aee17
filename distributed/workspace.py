"""Work directories owned by a live process, and the removal of those whose owner died.

A worker keeps its scratch files (spilled results among them) in a directory of
its own under ``<local_directory>/dask-scratch-space``, removed when it closes.
A worker process that is killed (SIGKILL, ``os._exit``, the machine's OOM
killer) cannot remove it, and the nanny starts the new worker in a new one.

So each work directory ``<name>`` has a sibling lock file ``<name>.dirlock``
on which its process holds an exclusive :func:`fcntl.flock` for as long as it
uses the directory.  The operating system drops that lock when the process
ends, however it ends.  :meth:`WorkSpace.purge` (run when a worker starts)
tries each lock file of its parent directory without blocking: one it can take
belongs to a dead process, and goes with its directory; one it cannot take is
in use (by any process on the machine, this one included: flock locks of two
opens of the same file conflict even within one process) and is left alone.
Directories without a lock file are never touched.

Several processes may purge one parent at once (workers started together):
each directory goes to the purger that takes its lock first; the others find
it locked, or gone once they have it, and skip it.  Every removal tolerates a
file already gone, and a purge never fails a worker's start: an entry it
cannot handle (an unexpected error from the file system) is logged and left.

Where ``fcntl`` is missing (Windows) directories are created without a lock
and nothing is purged: a directory is only removed when its owner is known dead.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import time
import weakref

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]  # checked before every use

__all__ = ["LOCK_SUFFIX", "WorkDir", "WorkSpace"]

logger = logging.getLogger(__name__)

#: Appended to a work directory's name to give its lock file's.
LOCK_SUFFIX = ".dirlock"


def _try_lock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; False when another open file holds it."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


def _same_file(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, or removed and made anew)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _unlink(path: str) -> None:
    """Remove ``path``; already gone is fine (a concurrent purge or release took it)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _release(path: str, lock_path: str, fd: int | None, owner: int) -> None:
    if os.getpid() != owner:
        return  # a forked child exiting normally runs the finalizers it inherited: not its directory
    # Directory first, lock file next, lock last: while the lock is held nobody
    # else removes either, and a lock file left by a crash here is purged later.
    shutil.rmtree(path, ignore_errors=True)
    if fd is not None:
        try:
            if _same_file(lock_path, fd):
                _unlink(lock_path)
        finally:
            os.close(fd)


class WorkDir:
    """A directory this process owns while it exists; see :class:`WorkSpace`.

    Attributes
    ----------
    path
        The directory.
    lock_path
        Its lock file, held locked by this process (``None`` where locks are
        unavailable).
    """

    def __init__(self, path: str, lock_path: str | None, fd: int | None) -> None:
        self.path = path
        self.lock_path = lock_path
        # Released at close, or when the owner forgets it, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _release, path, lock_path or "", fd, os.getpid())

    @property
    def released(self) -> bool:
        """Whether :meth:`release` ran (the directory is gone)."""
        return not self._finalizer.alive

    def release(self) -> None:
        """Remove the directory and its lock file, then drop the lock; idempotent."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"<WorkDir {self.path!r}{' released' if self.released else ''}>"


class WorkSpace:
    """A parent directory of work directories, each owned by a live process.

    Parameters
    ----------
    base
        The parent directory; created if missing.
    locking
        False: work directories are made without lock files (and a purge
        removes nothing), as with ``distributed.worker.use-file-locking: false``
        on file systems whose locks do not work.

    Examples
    --------
    >>> ws = WorkSpace("/tmp/dask-scratch-space")  # doctest: +SKIP
    >>> ws.purge()  # directories of processes that died  # doctest: +SKIP
    []
    >>> d = ws.new_work_dir("worker-1234")  # doctest: +SKIP
    >>> d.release()  # doctest: +SKIP
    """

    def __init__(self, base: str, locking: bool = True) -> None:
        self.base = os.path.abspath(base)
        self.locking = locking and fcntl is not None
        os.makedirs(self.base, exist_ok=True)

    def new_work_dir(self, name: str) -> WorkDir:
        """Create ``base/name``, owned by this process until :meth:`WorkDir.release`.

        Raises
        ------
        FileExistsError
            When ``name`` is taken by another work directory.
        OSError
            When the directory or its lock file cannot be made or written (a
            full or read-only disk); nothing of them is left behind.
        """
        path = os.path.join(self.base, name)
        if not self.locking:
            os.makedirs(path, exist_ok=True)
            return WorkDir(path, None, None)
        lock_path = path + LOCK_SUFFIX
        for attempt in range(10):
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if attempt == 0:
                    raise
                # A purge holds the lock file we made and has not removed it yet.
                time.sleep(0.005 * attempt)
                continue
            # A purge may take the fresh lock file before we lock it and remove
            # it: then ours is an orphan; make it again.
            if _try_lock(fd) and _same_file(lock_path, fd):
                try:
                    # For people looking; the lock is what counts.  Also the first
                    # write there: a full disk fails it here, before the worker starts.
                    os.write(fd, f"{os.getpid()}\n".encode())
                    os.makedirs(path, exist_ok=True)
                except OSError:
                    _release(path, lock_path, fd, os.getpid())
                    raise
                return WorkDir(path, lock_path, fd)
            os.close(fd)
        raise RuntimeError(f"Could not take the lock of a new work directory {path!r}")

    def purge(self) -> list[str]:
        """Remove the work directories whose owner process has ended.

        Returns
        -------
        The directories removed.
        """
        if not self.locking:
            return []
        removed: list[str] = []
        try:
            entries = [e.name for e in os.scandir(self.base) if e.name.endswith(LOCK_SUFFIX)]
        except FileNotFoundError:
            return []
        except OSError as e:
            logger.warning("Not removing the directories of ended workers in %s: %s", self.base, e)
            return []
        for lock_name in entries:
            path = os.path.join(self.base, lock_name[: -len(LOCK_SUFFIX)])
            if self._purge_one(path, path + LOCK_SUFFIX):
                removed.append(path)
        return removed

    def _purge_one(self, path: str, lock_path: str) -> bool:
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except OSError:  # removed meanwhile by its owner or another purge, or not ours to open
            return False
        try:
            if not _try_lock(fd) or not _same_file(lock_path, fd):
                return False  # in use, or released and gone since we opened it
            logger.info("Removing %s: the process that owned it has ended", path)
            shutil.rmtree(path, ignore_errors=True)
            _unlink(lock_path)
            return True
        except OSError as e:
            # Best effort: what is left is tried again by the next purge.
            logger.warning("Could not remove %s: %s", path, e)
            return False
        finally:
            os.close(fd)
