"""pytest plugin: skip the tests of dask's own suite listed in a file, each with its reason.

Each line of the file is ``<file>::<test id> | <reason>``; a line that starts with ``#`` is a comment.
A reason that starts with ``needs <module>`` skips its test only while ``<module>``
cannot be imported, so that installing an optional dependency brings the test back.
A listed test that is not collected fails the run: the list never goes stale.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--skip-list", default=None, help="File of test ids to skip, one '<id> | <reason>' a line")


def _read(path: str) -> dict[str, str]:
    listed: dict[str, str] = {}
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test_id, sep, reason = line.partition("|")
        if not sep or not reason.strip():
            raise pytest.UsageError(f"{path}:{n}: expected '<id> | <reason>', got {raw!r}")
        listed[test_id.strip()] = reason.strip()
    return listed


def _short_id(item: pytest.Item) -> str:
    """``<file name>::<name within the file>``, whatever the rootdir."""
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    return f"{os.path.basename(str(item.path))}::{rest}"


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption("--skip-list")
    if not path:
        return
    listed = _read(path)
    seen: set[str] = set()
    for item in items:
        test_id = _short_id(item)
        reason = listed.get(test_id)
        if reason is None:
            continue
        seen.add(test_id)
        words = reason.split()
        if len(words) >= 2 and words[0] == "needs":
            module = words[1].rstrip(":,;")
            if not _missing(module):
                continue
        item.add_marker(pytest.mark.skip(reason=f"listed in {os.path.basename(path)}: {reason}"))
    stale = sorted(set(listed) - seen)
    if stale:
        raise pytest.UsageError(f"{path} lists tests that were not collected: {', '.join(stale)}")
