"""Files uploaded to a worker (``Client.upload_file``): saved in its directory, made importable.

A worker's local directory is on ``sys.path`` once a file was uploaded to it,
so an uploaded ``.py`` is importable by tasks whether or not it was loaded;
an uploaded ``.zip``/``.egg``/``.pyz`` archive is put on ``sys.path`` itself.
Loading imports what the file provides, afresh when it was imported before,
so a new version of a module replaces the old one.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import pkgutil
import sys
from types import ModuleType

logger = logging.getLogger(__name__)

__all__ = ["ARCHIVES", "import_uploaded", "save_upload"]

#: Extensions of archives that go on ``sys.path`` as they are.
ARCHIVES = (".zip", ".egg", ".pyz")


def save_upload(directory: str, filename: str, data: bytes | str) -> str:
    """Write ``data`` as ``directory/filename`` (durably) and return the path.

    Raises
    ------
    ValueError
        When ``filename`` is not a plain file name (a path would write elsewhere).
    """
    if not filename or filename in (".", "..") or os.path.basename(filename) != filename or "\\" in filename:
        raise ValueError(f"An uploaded file needs a plain file name, got {filename!r}")
    if isinstance(data, str):
        data = data.encode()
    path = os.path.join(directory, filename)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if filename.endswith(".py"):
        # A bytecode file of an earlier upload could be newer-looking than the source.
        try:
            os.remove(importlib.util.cache_from_source(path))
        except (OSError, NotImplementedError, ValueError):
            pass
    _on_path(directory)
    return path


def import_uploaded(path: str) -> list[ModuleType]:
    """Import the modules the uploaded file ``path`` provides (re-importing those imported already).

    A ``.py`` file provides its module; an archive each module and package at
    its top level (the archive goes on ``sys.path`` first).  Other files
    provide nothing.
    """
    directory, filename = os.path.split(path)
    stem, ext = os.path.splitext(filename)
    if ext == ".py":
        _on_path(directory)
        names = [stem]
    elif ext in ARCHIVES:
        _on_path(path)
        names = [info.name for info in pkgutil.iter_modules([path])]
    else:
        names = []
    if not names:
        logger.warning("Nothing to import from uploaded file %s", filename)
        return []
    importlib.invalidate_caches()
    modules = []
    for name in names:
        old = sys.modules.get(name)
        if old is not None:
            # Archives are read through a cached directory of their contents:
            # a new archive at the same path needs that cache dropped.
            sys.path_importer_cache.pop(path, None)
            modules.append(importlib.reload(old))
        else:
            modules.append(importlib.import_module(name))
        logger.info("Imported %s from uploaded file %s", name, filename)
    return modules


def _on_path(entry: str) -> None:
    if entry not in sys.path:
        sys.path.insert(0, entry)
