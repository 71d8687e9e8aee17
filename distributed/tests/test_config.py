"""Config defaults: every key in distributed.yaml is read by the package."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import dask
import pytest
import yaml

import distributed
from distributed import Client, Scheduler, Worker
from distributed.config import log_length
from distributed.utils_test import gen_cluster, inc

PACKAGE = Path(distributed.__file__).parent


#: Top-level sections read as a whole mapping (their keys are logger names, not settings).
WHOLE_MAPPINGS = {"distributed.logging"}

#: The keys distributed/config.py reads (it applies the logging config).
READ_BY_CONFIG = WHOLE_MAPPINGS | {"distributed.admin.log-format", "distributed.admin.low-level-log-length"}


def _source_strings() -> set[str]:
    """Every string literal in the package's modules (tests and the harness excluded)."""
    strings: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        found = re.findall(r"\"([a-z0-9_.\-]+)\"", path.read_text())
        if rel.name == "config.py":
            # config.py registers and renames keys; it reads only the logging ones.
            strings.update(k for k in found if k in READ_BY_CONFIG)
            continue
        if rel.name == "config_refusals.py":
            continue  # it names the keys that nothing reads
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


class _NoDuplicatesLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key repeated in one mapping (PyYAML keeps the last silently)."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    keys = [loader.construct_object(k) for k, _ in node.value]
    repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
    if repeated:
        raise yaml.constructor.ConstructorError(None, None, f"repeated keys {repeated}", node.start_mark)
    return loader.construct_mapping(node)


_NoDuplicatesLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def test_no_key_is_repeated_in_a_section() -> None:
    """A section written twice (say after merging two changes) would silently lose the first one's keys."""
    text = (PACKAGE / "distributed.yaml").read_text()
    yaml.load(text, Loader=_NoDuplicatesLoader)
    with pytest.raises(yaml.constructor.ConstructorError, match="repeated keys"):
        yaml.load("a:\n  b: 1\na:\n  c: 2\n", Loader=_NoDuplicatesLoader)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.admin.low-level-log-length": 5})
async def test_low_level_log_length_bounds_the_developer_logs(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    assert s.transition_log.maxlen == 5
    assert s.event_log.length == 5
    assert a.state is not None and a.state.log.maxlen == 5
    await c.gather(c.map(inc, range(10)))
    assert len(s.transition_log) == 5


def test_a_log_s_own_key_wins_and_bad_lengths_are_refused_by_name() -> None:
    with dask.config.set(
        {"distributed.admin.low-level-log-length": 5, "distributed.scheduler.transition-log-length": 7}
    ):
        assert log_length("distributed.scheduler.transition-log-length") == 7
        assert log_length("distributed.scheduler.events-log-length") == 5
        assert log_length() == 5
    with dask.config.set({"distributed.admin.low-level-log-length": 0}):
        with pytest.raises(ValueError, match=r"distributed\.admin\.low-level-log-length"):
            log_length()
    # dask's old name for the transition log is renamed to the key, as dask does.
    with pytest.warns(FutureWarning), dask.config.set({"transition-log-length": 9}):
        assert log_length() == 9
