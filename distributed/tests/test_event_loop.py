"""``distributed.admin.event-loop``: uvloop when asked for, and a clear refusal when it cannot be."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import dask.config
import pytest

from distributed import Scheduler
from distributed.event_loop import check_event_loop, event_loop_setting
from distributed.utils_test import run_async

pytestmark = pytest.mark.timeout(120)

PROGRAM = textwrap.dedent(
    """
    import asyncio
    from distributed import Client, Scheduler, Worker

    async def main():
        async with Scheduler(dashboard=False) as s, Worker(s.address, nthreads=1):
            async with Client(s.address, asynchronous=True) as c:
                assert await c.submit(sum, [1, 2]) == 3
                print(type(asyncio.get_running_loop()).__module__)

    asyncio.run(main())
    """
)


def _run_with(setting: str) -> str:
    env = {**os.environ, "DASK_DISTRIBUTED__ADMIN__EVENT_LOOP": setting}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_uvloop_runs_the_cluster_when_set_before_import() -> None:
    pytest.importorskip("uvloop")
    assert _run_with("uvloop").startswith("uvloop")
    assert _run_with("tornado").startswith("asyncio")


def test_uvloop_set_after_the_loop_exists_is_refused_by_name() -> None:
    pytest.importorskip("uvloop")

    async def start() -> None:
        async with Scheduler(dashboard=False):
            pass

    with dask.config.set({"distributed.admin.event-loop": "uvloop"}):
        with pytest.raises(RuntimeError, match=r"distributed\.admin\.event-loop"):
            run_async(start)


def test_values() -> None:
    for value in ("tornado", "asyncio"):
        with dask.config.set({"distributed.admin.event-loop": value}):
            assert event_loop_setting() == value

            async def fine() -> None:
                check_event_loop("test")

            run_async(fine)
    with dask.config.set({"distributed.admin.event-loop": "trio"}):
        with pytest.raises(ValueError, match=r"distributed\.admin\.event-loop.*'trio'"):
            event_loop_setting()
