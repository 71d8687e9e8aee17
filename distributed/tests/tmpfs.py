"""Small real file systems for tests of a full or read-only disk.

:func:`mounted_tmpfs` mounts a ``tmpfs`` of a given size on a directory and
unmounts it when the ``with`` block ends, however it ends.  A tmpfs is the
cheapest real file system that fills up: writes past its size fail with
``ENOSPC`` as on a full disk, and ``remount,ro`` makes it read-only (``EROFS``)
even for root, whom permission bits do not stop.

Mounting needs root (``CAP_SYS_ADMIN``) and Linux.  Without them
:func:`require_tmpfs` skips the calling test with the reason, except under
``CI=true``, where it fails, as :func:`distributed.tests.hosts.require_hosts` does:
there the full-disk tests must run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["mounted_tmpfs", "remount", "require_tmpfs", "tmpfs_available"]


def tmpfs_available() -> str | None:
    """``None`` when this process can mount a tmpfs, else why not."""
    if not sys.platform.startswith("linux"):
        return "tmpfs mounts need Linux"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    return None


def require_tmpfs() -> None:
    """Skip the calling test when a tmpfs cannot be mounted; under ``CI=true``, fail instead."""
    why = tmpfs_available()
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"The full-disk tests must run in CI, but: {why}")
    pytest.skip(f"needs a real small file system: {why}")


def _run(*args: str) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


def remount(path: Path, options: str) -> None:
    """Change the mount options of the tmpfs at ``path`` (``"ro"``, ``"rw"``, ``"size=8m"``)."""
    _run("mount", "-o", f"remount,{options}", str(path))


@contextmanager
def mounted_tmpfs(path: Path, size: str = "64m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (made if missing) for the ``with`` block.

    Unmounted at the end even when the block failed; lazily (``umount -l``)
    when a process still has a file open there, so that teardown never hangs.
    """
    require_tmpfs()
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode != 0:
            _run("umount", "-l", str(path))
