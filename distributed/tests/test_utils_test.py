"""The test harness itself: gen_test, gen_cluster, run_async."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import dask
import pytest

from distributed import Client, Scheduler, Security, Worker
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc, run_async


# -- parametrize and fixtures after the harness's own arguments ----------------------------------
@pytest.mark.parametrize("x", [1, 2])
@gen_cluster(client=True)
async def test_parametrize_outside(c: Client, s: Scheduler, a: Worker, b: Worker, x: int) -> None:
    assert x in (1, 2)
    assert await c.submit(lambda v: v + 1, x) == x + 1


@gen_cluster(client=True)
@pytest.mark.parametrize("x", ["p", "q"])
async def test_parametrize_inside(c: Client, s: Scheduler, a: Worker, b: Worker, x: str) -> None:
    assert x in ("p", "q")


@pytest.mark.parametrize("x", [10, 20])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 3)
async def test_parametrize_after_star_workers(c: Client, s: Scheduler, *workers: Worker, x: int) -> None:
    assert len(workers) == 3 and all(isinstance(w, Worker) for w in workers)
    assert x in (10, 20)


@pytest.mark.parametrize("x", [3])
@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_fixture_and_parametrize_without_client(s: Scheduler, a: Worker, tmp_path: Path, x: int) -> None:
    assert tmp_path.is_dir()
    assert x == 3


def test_signature_pytest_sees() -> None:
    async def f(c: Any, s: Any, *workers: Any, x: int, y: int = 0) -> None:
        pass

    async def g(s: Any, a: Any, b: Any, tmp_path: Path, x: int) -> None:
        pass

    assert list(inspect.signature(gen_cluster(client=True)(f)).parameters) == ["x", "y"]
    assert list(inspect.signature(gen_cluster()(g)).parameters) == ["tmp_path", "x"]


# -- config= ------------------------------------------------------------------------------------
@gen_test(config={"distributed.scheduler.allowed-failures": 11, "harness-test.value": "v"})
async def test_gen_test_config() -> None:
    assert dask.config.get("harness-test.value") == "v"
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        assert s.allowed_failures == 11


def test_gen_test_config_is_undone() -> None:
    @gen_test(config={"harness-test.value": "inside"})
    async def inner() -> str:
        return str(dask.config.get("harness-test.value"))

    assert inner() == "inside"
    assert dask.config.get("harness-test.value", None) is None


@gen_cluster(client=True, config={"distributed.scheduler.allowed-failures": 9})
async def test_gen_cluster_config(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    assert s.allowed_failures == 9


@gen_cluster(client=True, security=Security.temporary())
async def test_gen_cluster_with_security(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    # The scheduler, the workers and the client all get it: everything is TLS.
    assert [s.address[:6], a.address[:6], b.address[:6]] == ["tls://"] * 3
    assert await c.submit(inc, 1) == 2


# -- run_async ------------------------------------------------------------------------------------
def test_run_async_returns_and_cleans_up() -> None:
    started: list[asyncio.Task[Any]] = []

    async def main() -> int:
        started.append(asyncio.create_task(asyncio.sleep(60)))  # still pending when main returns
        return 7

    assert run_async(main) == 7
    assert started[0].cancelled()


def test_run_async_fails_on_errors_the_loop_reports() -> None:
    def boom(ran: asyncio.Event) -> None:
        ran.set()
        raise RuntimeError("in a callback")

    async def main() -> None:
        ran = asyncio.Event()
        asyncio.get_running_loop().call_soon(boom, ran)
        await asyncio.wait_for(ran.wait(), 5)  # the callback ran (and raised) before main returns

    with pytest.raises(pytest.fail.Exception, match="in a callback"):
        run_async(main)
    run_async(main, check_loop_errors=False)


def test_run_async_deadline() -> None:
    with pytest.raises(TimeoutError):
        run_async(lambda: asyncio.sleep(10), timeout=0.05)


def test_async_poll_for_fails_after_deadline() -> None:
    async def main() -> None:
        await async_poll_for(lambda: False, timeout=0.05)

    with pytest.raises(pytest.fail.Exception, match="0.05"):
        run_async(main)


# -- the helpers downstream test suites import ---------------------------------------------
def test_slow_and_small_task_functions() -> None:
    from distributed.utils_test import double, randominc, slowdec, slowidentity, slowsum

    assert slowdec(3, delay=0) == 2 and slowsum([1, 2, 3], delay=0) == 6 and double(4) == 8
    assert slowidentity(5, delay=0) == 5 and slowidentity(1, 2, delay=0) == (1, 2)
    assert randominc(1, scale=0) == 2


def test_captured_logger_and_handler() -> None:
    import logging

    from distributed.utils_test import captured_handler, captured_logger

    log = logging.getLogger("distributed.test-captured")
    with captured_logger("distributed.test-captured", level=logging.WARNING) as text:
        log.info("not at this level")
        log.warning("seen")
    log.warning("after the block")
    assert text.getvalue() == "seen\n"
    handler = logging.StreamHandler()
    log.addHandler(handler)
    try:
        with captured_handler(handler) as stream:
            log.error("through the handler")
        assert stream.getvalue() == "through the handler\n"
    finally:
        log.removeHandler(handler)


def test_new_config_and_reset_config() -> None:
    from distributed.utils_test import new_config, reset_config

    before = dask.config.get("distributed.scheduler.allowed-failures")
    with new_config({"only": {"key": 1}}):
        assert dask.config.get("only.key") == 1
        assert dask.config.get("distributed.scheduler.allowed-failures", None) is None
    assert dask.config.get("distributed.scheduler.allowed-failures") == before
    dask.config.set({"distributed.scheduler.allowed-failures": before + 7})
    reset_config()
    assert dask.config.get("distributed.scheduler.allowed-failures") == before


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_wait_for_state_on_a_worker_and_the_scheduler(c: Client, s: Scheduler, a: Worker) -> None:
    from distributed.utils_test import slowinc, wait_for_state

    future = c.submit(slowinc, 1, delay=0.3, key="slow")
    await wait_for_state("slow", "executing", a)
    await wait_for_state("slow", "processing", s)
    await wait_for_state("slow", ("memory", "released"), s)
    assert await future == 2
