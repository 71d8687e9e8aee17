"""What this machine gives a process: its CPU count, the memory it may use, the files it may open.

A container caps memory below what the machine has (a cgroup limit), and so
may ``ulimit -m``; a worker's ``memory_limit="auto"`` and the share of each
worker of a ``LocalCluster`` are taken from :data:`MEMORY_LIMIT`, the smallest
of these, as in dask.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
from dask.system import CPU_COUNT

__all__ = ["CPU_COUNT", "MEMORY_LIMIT", "memory_limit", "open_file_limit", "raise_open_file_limit"]

#: cgroup v2 first (one file), then v1; "max" (v2) or a huge number (v1) means no limit.
_CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def _cgroup_limit(files: tuple[str, ...] = _CGROUP_LIMIT_FILES) -> int | None:
    for name in files:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def memory_limit() -> int:
    """Bytes of memory this process may use: the machine's, or less under a cgroup or an RSS rlimit."""
    limit = int(psutil.virtual_memory().total)
    if sys.platform.startswith("linux"):
        cgroup = _cgroup_limit()
        if cgroup is not None and 0 < cgroup < limit:
            limit = cgroup
    try:
        import resource

        hard_or_soft = resource.getrlimit(resource.RLIMIT_RSS)[0]
        if 0 < hard_or_soft < limit:
            limit = hard_or_soft
    except (ImportError, OSError, ValueError, AttributeError):  # no resource module (Windows), or no such limit
        pass
    return limit


#: :func:`memory_limit` as this process started.
MEMORY_LIMIT = memory_limit()


#: The most open files Linux lets a process have, whatever its hard limit says (``fs.nr_open``).
_NR_OPEN = Path("/proc/sys/fs/nr_open")


def open_file_limit() -> int | None:
    """This process's soft limit of open files (``ulimit -n``), or None where there is none to read."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_open_file_limit() -> tuple[int, int] | None:
    """Raise this process's soft limit of open files as far as its hard limit allows.

    A scheduler holds a connection or two per worker and client: the common
    default soft limit of 1,024 stops it at a few hundred workers, while the
    hard limit, which a process may rise to unaided, is often far higher.

    Returns
    -------
    tuple of int, or None
        The soft limit before and after (equal when it could not rise), or None
        where there is no such limit (Windows).
    """
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            return soft, soft
        return soft, target
    return soft, soft
