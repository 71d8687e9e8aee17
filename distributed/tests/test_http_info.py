"""The scheduler's info pages: sizes as people read them, links between the pages, call stacks and logs per worker."""

from __future__ import annotations

import asyncio
import html
import logging
import re
import urllib.parse
from typing import Any, Literal

import numpy as np
import pytest
from dask.utils import format_bytes
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from distributed import Client, Event, Scheduler, Worker, wait
from distributed.core import Route
from distributed.http import scheduler_info
from distributed.http.scheduler_info import find_task
from distributed.protocol import messages as m
from distributed.utils_test import async_poll_for, gen_cluster, inc

pytestmark = pytest.mark.timeout(60)

DASHBOARD: dict[str, Any] = {"dashboard": True, "dashboard_address": "127.0.0.1:0"}


async def page(s: Scheduler, path: str, code: int = 200) -> str:
    """The page at ``path`` of the scheduler's HTTP server (it must answer ``code``), as HTML."""
    r: HTTPResponse = await AsyncHTTPClient().fetch(
        f"http://127.0.0.1:{s.http_server.port}{path}", request_timeout=20, raise_error=False
    )
    assert r.code == code, (path, r.code, r.body[:500])
    return r.body.decode()


def text_of(markup: str) -> str:
    """What a reader sees of ``markup``: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", " ", markup))


def q(value: Any) -> str:
    return urllib.parse.quote(str(value), safe="")


def wait_here(ev: Event) -> int:
    """A task that stays in this function until ``ev`` is set (its name shows in its call stack)."""
    ev.wait()
    return 1


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD, worker_kwargs={"dashboard": True})
async def test_pages_show_sizes_as_people_read_them(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    big = c.submit(np.ones, 3_000_000, key="big", workers=[a.address])  # 24 MB, 22.89 MiB
    await wait(big)
    nbytes = s.tasks["big"].nbytes
    assert nbytes >= 24_000_000
    # As of a heartbeat since the result arrived.
    await async_poll_for(lambda: s.workers[a.address].memory.process > s.workers[a.address].memory.managed >= nbytes)
    ws = s.workers[a.address]
    raw = {str(n) for n in (nbytes, a.memory_limit, ws.memory.process, ws.memory.managed, ws.nbytes)}
    for path in ("/info/main/workers.html", f"/info/worker/{q(a.address)}.html", "/info/task/big.html"):
        shown = text_of(await page(s, path))
        assert "MiB" in shown, path
        # No byte count is shown as such: the sizes are written as 22.89 MiB.
        assert not [n for n in raw if n in shown], (path, raw)
    worker_page = text_of(await page(s, f"/info/worker/{q(a.address)}.html"))
    assert format_bytes(nbytes) in worker_page  # the held result's size, in its row
    assert format_bytes(a.memory_limit) in worker_page


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD, worker_kwargs={"dashboard": True})
async def test_workers_page_links_each_workers_pages(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    markup = await page(s, "/info/main/workers.html")
    for w in (a, b):
        assert w.http_server is not None
        assert f'href="http://127.0.0.1:{w.http_server.port}/status"' in markup  # the worker's own dashboard
        for kind in ("worker", "logs", "call-stacks"):
            assert f'href="../{kind}/{q(w.address)}.html"' in markup
    # The dashboard's navigation bar, its links leading back to the server's root.
    assert 'href="../../status"' in markup
    # A worker serving no dashboard has no such link.
    async with Worker(s.address, dashboard=False) as bare:
        markup = await page(s, f"/info/worker/{q(bare.address)}.html")
        assert "/status" not in re.sub(r'href="\.\./\.\./status"', "", markup)
    await page(s, f"/info/worker/{q('tcp://127.0.0.1:1')}.html", code=404)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_task_pages_find_keys_of_every_kind(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    keys: list[Any] = [("x", 1), "a/b %41 c", 7, ("nested", ("y", 2.5))]
    futures = [c.submit(inc, i, key=k) for i, k in enumerate(keys)]
    total = c.submit(sum, futures, key="total")
    await wait(total)
    for key in keys:
        assert find_task(s, str(key)) is s.tasks[key]
        markup = await page(s, f"/info/task/{q(key)}.html")
        assert f"Task {key}" in text_of(markup)
        # Each links to its dependent, and back.
        assert 'href="../task/total.html"' in markup
        assert f'href="../task/{q(key)}.html"' in await page(s, "/info/task/total.html")
    for missing in ("nowhere", "('x', 2)", "(", "[1, 2]", "__import__('os')"):
        assert find_task(s, missing) is None
        await page(s, f"/info/task/{q(missing)}.html", code=404)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_erred_task_shows_its_exception_and_traceback(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    def fails(x: int) -> int:
        raise ValueError(f"<b>{x}</b> is not welcome")

    future = c.submit(fails, 1, key="fails")
    await wait(future)
    for path in ("/info/task/fails.html", "/info/main/exceptions.html"):
        markup = await page(s, path)
        assert "&lt;b&gt;1&lt;/b&gt; is not welcome" in markup  # escaped, not markup of the page
        assert "<b>1</b>" not in markup
        assert "Traceback" in markup and "in fails" in markup


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], scheduler_kwargs=DASHBOARD)
async def test_call_stacks_of_a_worker_and_of_a_task(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    ev = Event()
    running = c.submit(wait_here, ev, key="running")
    queued = c.submit(inc, 1, key="later", workers=[a.address])
    await async_poll_for(lambda: bool(a.active_threads))
    worker_stacks = await page(s, f"/info/call-stacks/{q(a.address)}.html")
    assert "in wait_here" in worker_stacks and 'href="../task/running.html"' in worker_stacks
    task_stack = await page(s, "/info/call-stack/running.html")
    assert "in wait_here" in task_stack
    assert "not running now" in await page(s, "/info/call-stack/later.html")
    # The worker and task pages link to them.
    assert f'href="../call-stacks/{q(a.address)}.html"' in await page(s, f"/info/worker/{q(a.address)}.html")
    assert 'href="../call-stack/running.html"' in await page(s, "/info/task/running.html")
    await ev.set()
    await wait([running, queued])
    assert "No task is running" in await page(s, f"/info/call-stacks/{q(a.address)}.html")
    await page(s, f"/info/call-stacks/{q('tcp://127.0.0.1:1')}.html", code=404)


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    scheduler_kwargs=DASHBOARD,
    config={"distributed.scheduler.pickle": False},
)
async def test_call_stacks_are_not_unpickled_when_the_scheduler_may_not(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    ev = Event()
    running = c.submit(wait_here, ev, key="running")
    await async_poll_for(lambda: bool(a.active_threads))
    markup = await page(s, f"/info/call-stacks/{q(a.address)}.html")
    assert "distributed.scheduler.pickle" in markup and "wait_here" not in markup
    await ev.set()
    await wait(running)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_logs_of_a_worker_and_of_the_scheduler(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    def log_on_worker(dask_worker: Worker) -> None:
        logging.getLogger("distributed.worker").warning("a mark <i>in</i> %s's log", dask_worker.address)

    await c.run(log_on_worker, workers=[a.address])
    markup = await page(s, f"/info/logs/{q(a.address)}.html")
    assert f"a mark &lt;i&gt;in&lt;/i&gt; {a.address}" in markup
    assert "WARNING" in markup
    scheduler_logs = text_of(await page(s, "/info/main/logs.html"))
    assert f"Register worker {a.address}" in scheduler_logs
    await page(s, f"/info/logs/{q('tcp://127.0.0.1:1')}.html", code=404)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], scheduler_kwargs=DASHBOARD)
async def test_long_lists_are_capped(
    c: Client[Literal[True]], s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_info, "MAX_LISTED", 3)
    futures = c.map(inc, range(10))
    total = c.submit(sum, futures, key="total")
    await wait(total)
    worker = text_of(await page(s, f"/info/worker/{q(a.address)}.html"))
    assert "In memory (11," in worker and "and 8 more, not listed" in worker
    task = text_of(await page(s, "/info/task/total.html"))
    assert "Dependencies (10)" in task and "and 7 more, not listed" in task


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_a_worker_that_does_not_answer_is_reported(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_info, "WORKER_TIMEOUT", 0.5)

    async def slow_logs(comm: Any, msg: m.GetLogs) -> list[Any]:
        await asyncio.sleep(5)  # a worker slower than the page waits for
        return []

    a.handlers["get_logs"] = Route(m.GetLogs, slow_logs)
    markup = await page(s, f"/info/logs/{q(a.address)}.html", code=502)
    assert "did not answer within 0.5 s" in markup
    assert "WARNING" not in text_of(markup)
