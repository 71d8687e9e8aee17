"""``distributed.comm.retry.*``: operations safe to repeat run again after a connection error."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import dask.config
import pytest

from distributed import Client, Scheduler
from distributed.comm import CommClosedError
from distributed.tests.cuts import cut_first
from distributed.utils_comm import retry, retry_operation, retry_settings
from distributed.utils_test import gen_cluster, inc, run_async
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)


def test_retry_tries_again_after_oserrors_only() -> None:
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise CommClosedError("cut")
        return "done"

    async def wrong() -> str:
        attempts.append(1)
        raise KeyError("not a connection error")

    async def main() -> None:
        assert await retry(flaky, 2, 0.001, 0.002) == "done"
        assert len(attempts) == 3
        attempts.clear()
        with pytest.raises(CommClosedError):
            await retry(flaky, 1, 0.001, 0.002)  # one retry is not enough
        assert len(attempts) == 2
        attempts.clear()
        with pytest.raises(CommClosedError):
            await retry(flaky, 0, 0.001, 0.002)  # the default: no retry
        assert len(attempts) == 1
        attempts.clear()
        with pytest.raises(KeyError):
            await retry(wrong, 5, 0.001, 0.002)
        assert len(attempts) == 1

    run_async(main)


def test_delays_double_up_to_the_maximum(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)
        await real_sleep(0)

    async def failing() -> None:
        raise OSError("down")

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)

    async def main() -> None:
        with pytest.raises(OSError):
            await retry(failing, 4, 1.0, 3.0, jitter_fraction=0)
        assert slept == [1.0, 2.0, 3.0, 3.0]
        slept.clear()
        with pytest.raises(OSError):
            await retry(failing, 3, 1.0, 100.0, jitter_fraction=0.1)
        assert all(base <= d <= base * 1.1 for d, base in zip(slept, [1.0, 2.0, 4.0], strict=True))

    run_async(main)


def test_settings_come_from_the_config_and_bad_ones_are_refused_by_name() -> None:
    with dask.config.set({"distributed.comm.retry.count": 3, "distributed.comm.retry.delay.min": "10ms"}):
        assert retry_settings() == (3, 0.01, 20.0)
    with dask.config.set({"distributed.comm.retry.count": -1}):
        with pytest.raises(ValueError, match=r"distributed\.comm\.retry\.count"):
            retry_settings()
    with dask.config.set({"distributed.comm.retry.delay.min": "1m", "distributed.comm.retry.delay.max": "1s"}):
        with pytest.raises(ValueError, match=r"delay\.min"):
            Worker("tcp://127.0.0.1:1", nthreads=1)


def test_retry_operation_reads_the_config() -> None:
    calls: list[Any] = []

    async def op(x: int, *, y: int) -> int:
        calls.append((x, y))
        if len(calls) == 1:
            raise OSError("once")
        return x + y

    async def main() -> None:
        with dask.config.set({"distributed.comm.retry.count": 1, "distributed.comm.retry.delay.min": "1ms"}):
            assert await retry_operation(op, 1, y=2) == 3
        assert calls == [(1, 2), (1, 2)]

    run_async(main)


RETRY_FAST = {"distributed.comm.retry.count": 2, "distributed.comm.retry.delay.min": "10ms"}


@gen_cluster(client=True, config=RETRY_FAST)
async def test_a_worker_fetch_is_retried(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address])
    await x
    calls = cut_first(a, "get_data")
    y = c.submit(inc, x, workers=[b.address])
    assert await y == 3
    assert len(calls) == 2
    # The retry succeeded: b never reported the fetch as failed.
    assert b.state is not None
    assert not [t for t in b.state.log if "gather-dep-failure" in str(t)]


@gen_cluster(client=True, config=RETRY_FAST)
async def test_a_client_fetch_is_retried(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address])
    await x
    calls = cut_first(a, "get_data")
    assert await c.gather(x) == 2
    assert len(calls) == 2


@gen_cluster(client=True)
async def test_without_retries_a_cut_fetch_fails_over(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(inc, 1, workers=[a.address])
    await x
    calls = cut_first(a, "get_data")
    y = c.submit(inc, x, workers=[b.address])
    assert await y == 3  # fetched again after the scheduler is told
    assert b.state is not None
    assert [t for t in b.state.log if "gather-dep-failure" in str(t)]
    assert len(calls) >= 2
