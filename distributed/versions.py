"""Versions of Python and of the packages that must agree across a cluster.

Each server and client knows its own :func:`get_versions`; workers and
clients send theirs when they join, and a client compares them
(``Client.get_versions(check=True)``, and when it connects).  A package of
:data:`REQUIRED_PACKAGES` in different versions makes an error (objects
pickled by one version may not load in another); an optional one, a warning.
"""

from __future__ import annotations

import functools
import importlib.metadata
import locale
import os
import platform
import struct
import sys
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "OPTIONAL_PACKAGES",
    "REQUIRED_PACKAGES",
    "VersionMismatchWarning",
    "error_message",
    "get_package_info",
    "get_system_info",
    "get_versions",
]

#: Packages whose versions must be the same everywhere ("python" is the interpreter's major.minor.micro).
REQUIRED_PACKAGES = ("python", "dask", "distributed", "msgpack", "cloudpickle")
#: Packages compared when present; a difference is only a warning.
OPTIONAL_PACKAGES = ("numpy", "pandas", "pyarrow", "lz4")


class VersionMismatchWarning(Warning):
    """The client, the scheduler or the workers run different versions of a package."""


def get_system_info() -> dict[str, Any]:
    """The interpreter and the machine: what tells two environments apart."""
    return {
        "python": ".".join(map(str, sys.version_info[:3])),
        "python-bits": struct.calcsize("P") * 8,
        "OS": platform.system(),
        "OS-release": platform.release(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "byteorder": sys.byteorder,
        "LC_ALL": os.environ.get("LC_ALL", "None"),
        "LANG": os.environ.get("LANG", "None"),
        "locale": ".".join(str(part) for part in locale.getlocale() if part) or "None",
    }


@functools.cache
def _version_of(package: str) -> str | None:
    # Cached for the life of the process: reading an installed package's metadata takes a few
    # milliseconds, and the scheduler, every worker and every client of a process ask at start.
    if package == "python":
        return ".".join(map(str, sys.version_info[:3]))
    if package == "distributed":
        # This package's own version, even from a source checkout (no installed metadata); the
        # package is imported before any of its modules, so it is there.
        return str(getattr(sys.modules.get("distributed"), "__version__", None))
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        module = sys.modules.get(package)
        version = getattr(module, "__version__", None)
        return str(version) if version is not None else None


def get_package_info(packages: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each package (None where it is not installed)."""
    return {name: _version_of(name) for name in packages}


def get_versions(packages: Iterable[str] | None = None) -> dict[str, Any]:
    """``{"host": ..., "packages": ...}``: this process's system and package versions.

    Parameters
    ----------
    packages
        More packages to report, besides the required and optional ones.
    """
    names = dict.fromkeys([*REQUIRED_PACKAGES, *OPTIONAL_PACKAGES, *(packages or ())])
    return {"host": get_system_info(), "packages": get_package_info(names)}


def _packages_of(info: Mapping[str, Any] | None) -> Mapping[str, Any]:
    packages = (info or {}).get("packages")
    return packages if isinstance(packages, Mapping) else {}


def error_message(
    scheduler: Mapping[str, Any],
    workers: Mapping[str, Mapping[str, Any]],
    source: Mapping[str, Any] | None,
    source_name: str = "Client",
) -> dict[str, str]:
    """What differs between ``source`` (a client), the scheduler and the workers, as text.

    Returns
    -------
    ``{"warning": ..., "error": ...}``: the table of every package that
    differs, and of the required ones only (empty strings when all agree).
    """
    rows: list[tuple[str, str, str, str]] = []
    required_rows: list[tuple[str, str, str, str]] = []
    names = dict.fromkeys([*REQUIRED_PACKAGES, *OPTIONAL_PACKAGES, *_packages_of(scheduler), *_packages_of(source)])
    # Only those that reported versions count: a client of an older kind may have sent none.
    reporting = [info for info in (source, scheduler, *workers.values()) if _packages_of(info)]
    for name in names:
        values = {_packages_of(info).get(name) for info in reporting}
        present = values - {None}
        # A required package present somewhere and missing elsewhere differs too.
        if not (len(present) > 1 or (name in REQUIRED_PACKAGES and present and None in values)):
            continue
        at_workers = sorted({str(_packages_of(w).get(name)) for w in workers.values()})
        row = (name, str(_packages_of(source).get(name)), str(_packages_of(scheduler).get(name)), ", ".join(at_workers))
        rows.append(row)
        if name in REQUIRED_PACKAGES:
            required_rows.append(row)

    def table(body: list[tuple[str, str, str, str]]) -> str:
        if not body:
            return ""
        header = ("Package", source_name, "Scheduler", "Workers")
        widths = [max(len(r[i]) for r in (header, *body)) for i in range(4)]
        lines = [" | ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in (header, *body)]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        return "Mismatched versions found\n\n" + "\n".join(lines)

    return {"warning": table(rows), "error": table(required_rows)}
