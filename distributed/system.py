"""What this machine gives a process: its CPU count and the memory it may use.

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

__all__ = ["CPU_COUNT", "MEMORY_LIMIT", "memory_limit"]

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
