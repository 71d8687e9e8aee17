"""Skip every microbenchmark unless ``distributed`` is this project's package.

They drive internals (``Scheduler.update_graph`` / ``task_finished`` without
sockets, ``distributed.protocol.dumps``) whose signatures are ours only, so
against another ``distributed`` they skip instead of failing.
"""

from __future__ import annotations

import inspect

import pytest


def is_this_project() -> bool:
    try:
        from distributed import scheduler
        from distributed.protocol import framing  # noqa: F401
    except ImportError:
        return False
    sched = getattr(scheduler, "Scheduler", None)
    if sched is None or not hasattr(scheduler, "Effects"):
        return False
    try:
        params = inspect.signature(sched.task_finished).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return list(params)[:4] == ["self", "worker", "msg", "stimulus_id"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if is_this_project():
        return
    skip = pytest.mark.skip(reason="microbenchmarks drive this project's internals; another distributed is installed")
    for item in items:
        item.add_marker(skip)
