"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import dask.config
import pytest

from distributed.tests.hosts import TestHosts, require_hosts


@pytest.fixture
def test_hosts(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[int], TestHosts]]:
    """Make ``n`` test hosts (network namespaces on a bridge): ``hosts = test_hosts(3)``.

    Skips without root (fails under ``CI=true``).  Everything made is taken
    down when the test ends, pass or fail; a failing test's report carries
    the hosts' process logs.
    """
    require_hosts()
    made: list[TestHosts] = []

    def make(n: int) -> TestHosts:
        hosts = TestHosts(n, tmp_path / f"hosts{len(made)}")
        made.append(hosts)
        return hosts

    yield make
    failed = getattr(request.node, "rep_call", None)
    for hosts in made:
        if failed is not None and failed.failed:
            print(hosts.logs())
        hosts.close()


@pytest.fixture
def saturation_one() -> Iterator[None]:
    """``distributed.scheduler.worker-saturation: 1.0``: one root task per thread, the rest queued."""
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
        yield


@pytest.fixture
def no_queuing() -> Iterator[None]:
    """``distributed.scheduler.worker-saturation: inf``: root tasks are not queued."""
    with dask.config.set({"distributed.scheduler.worker-saturation": "inf"}):
        yield


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # Lets a fixture's teardown know whether the test itself failed (to print logs only then).
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
