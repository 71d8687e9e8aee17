"""Config defaults: every key in distributed.yaml is read by the package."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import yaml

import distributed

PACKAGE = Path(distributed.__file__).parent


#: Top-level sections read as a whole mapping (their keys are logger names, not settings).
WHOLE_MAPPINGS = {"distributed.logging"}


def _source_strings() -> set[str]:
    """Every string literal in the package's modules (tests and the harness excluded)."""
    strings: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        found = re.findall(r"\"([a-z0-9_.\-]+)\"", path.read_text())
        if rel.name == "config.py":
            # config.py registers and renames keys; it reads only whole mappings.
            strings.update(k for k in found if k in WHOLE_MAPPINGS)
            continue
        if rel.parts[0] == "tests" or rel.name == "utils_test.py":
            continue  # tests set keys
        strings.update(found)
    return strings


def _unread(node: Any, path: str, read: set[str]) -> Iterator[str]:
    """Keys under ``path`` that no source string names.

    A mapping read as a whole (``distributed.worker.resources``) counts for
    its contents; a section (``distributed.worker``) does not, as its name
    also appears for other reasons (logger names).
    """
    if path in read and (not isinstance(node, dict) or path.count(".") >= 2 or path in WHOLE_MAPPINGS):
        return
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _unread(value, f"{path}.{key}", read)
    else:
        yield path


def test_every_default_key_is_read() -> None:
    with open(PACKAGE / "distributed.yaml") as f:
        defaults = yaml.safe_load(f)
    read = _source_strings()
    unread = sorted(
        k for key, value in defaults["distributed"].items() for k in _unread(value, f"distributed.{key}", read)
    )
    assert not unread, f"keys in distributed.yaml that nothing reads: {unread}"


def test_defaults_are_registered() -> None:
    assert dask.config.get("distributed.admin.log-length") == 10000
    assert dask.config.get("distributed.scheduler.allowed-failures") == 3
