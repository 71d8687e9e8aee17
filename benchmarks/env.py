"""Machine and package information recorded with every result file."""

from __future__ import annotations

import importlib
import os
import platform
import sys
from typing import Any

_PACKAGES = ("distributed", "dask", "numpy", "pandas", "pyarrow", "msgpack", "tornado", "cloudpickle", "psutil")


def machine_info() -> dict[str, Any]:
    """CPU count, platform and Python of this machine (no host names or paths)."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }
    try:
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info["cpu_affinity"] = None
    try:
        import psutil

        info["memory_total_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover - psutil is a dependency of distributed
        info["memory_total_gb"] = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def package_versions() -> dict[str, Any]:
    """Versions of the packages that matter, and where ``distributed`` came from."""
    out: dict[str, Any] = {}
    for name in _PACKAGES:
        try:
            mod = importlib.import_module(name)
        except Exception as e:
            out[name] = f"unavailable: {type(e).__name__}"
            continue
        out[name] = str(getattr(mod, "__version__", "unknown"))
    try:
        import distributed

        out["distributed_origin"] = _origin(getattr(distributed, "__file__", "") or "")
    except Exception:
        out["distributed_origin"] = "unavailable"
    return out


def distributed_file() -> str:
    """Where this interpreter's ``distributed`` came from, e.g. ``site-packages: distributed/__init__.py``.

    Only the origin and the last path components are kept, so result files
    hold no machine-specific paths.
    """
    import distributed

    path = str(getattr(distributed, "__file__", "") or "")
    tail = "/".join(path.replace("\\", "/").split("/")[-2:])
    return f"{_origin(path)}: {tail}"


def _origin(path: str) -> str:
    """Where a package file lives, without machine-specific path prefixes.

    ``site-packages`` for an installed wheel, otherwise ``source checkout``.
    """
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return "site-packages"
    return "source checkout"


def environment() -> dict[str, Any]:
    """Both of the above, plus the interpreter executable's prefix kind."""
    return {
        "machine": machine_info(),
        "packages": package_versions(),
        "virtualenv": sys.prefix != sys.base_prefix,
    }
