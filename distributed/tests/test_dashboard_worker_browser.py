"""A worker's dashboard and the scheduler's info pages as a person sees them: headless Chromium, real worker processes.

One cluster of two worker processes computes (tasks whose inputs are on the
other worker, so data moves) while one browser visits each page in turn: every
worker page must draw its plots (their canvases hold coloured pixels: bars,
lines and boxes are coloured; axes, text and background are grey, black or
white), every info page must show what it is about, and no page may log a
console error, throw, or load a resource that fails.  A screenshot of each page
is left in the ``worker-dashboard`` artifact directory for a reviewer.  Pages
the browser left are dropped by the worker (nothing is kept per closed page).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any, Literal

import dask
import pytest

from distributed import Client, LocalCluster
from distributed.tests.chromium import HeadlessChromium, artifact_dir, bokeh_script, require_chromium
from distributed.utils_test import slowadd, slowinc

#: The plots each worker page must draw, by bokeh model name.
WORKER_PLOTS: dict[str, tuple[str, ...]] = {
    "status": ("worker_tasks", "worker_memory", "executing_history", "transfer_history"),
    "system": ("system_cpu", "system_memory", "system_network"),
    "profile": ("profile_timeline", "profile"),
    "profile-server": ("profile_timeline", "profile"),
    "counters": ("transition_counts", "task_durations", "tick_history"),
}

#: Coloured pixels of each named plot: its canvas as drawn now, counted in the page.
COLOURED_JS = bokeh_script("""
  const out = {};
  for (const name of %s) {
    const view = viewOf(doc.get_model_by_name(name));
    out[name] = view == null ? -1 : colouredPixels(view).colored;
  }
  return out;
""")

#: The visible text of a loaded plain page, and its links.
TEXT_JS = """
(() => document.readyState === "complete" && document.body
  ? {url: location.href, text: document.body.innerText, links: Array.from(document.links, (a) => a.href)}
  : null)()
"""

#: Coloured pixels a plot must have (a line across a third of a plot is several hundred).
ENOUGH = 150


async def until(browser: HeadlessChromium, js: str, ready: Any, what: str, timeout: float = 30) -> Any:
    """Evaluate ``js`` in the page until ``ready(value)``; fail naming ``what`` (with a screenshot) past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = await browser.evaluate(js)
        if value is not None and ready(value):
            return value
        if time.monotonic() > deadline:
            await browser.screenshot(artifact_dir("worker-dashboard") / f"failed-{what}.png")
            pytest.fail(f"{what}: not ready within {timeout} s: {value}")
        await asyncio.sleep(0.25)


async def visit(browser: HeadlessChromium, url: str, shot: str) -> dict[str, Any]:
    """Load a plain page; its text and links once loaded; a screenshot named ``shot``."""
    await browser.navigate(url)
    # Until the new page is the document (the previous one stays for a moment after navigating).
    page: dict[str, Any] = await until(
        browser, TEXT_JS, lambda v: bool(v["text"]) and unquote(v["url"]) == unquote(url), shot, timeout=20
    )
    await browser.screenshot(artifact_dir("worker-dashboard") / f"{shot}.png")
    return page


def unquote(url: str) -> str:
    return urllib.parse.unquote(url)


def quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


@pytest.mark.timeout(180)
def test_worker_dashboard_and_info_pages_in_a_browser(tmp_path: Path) -> None:
    require_chromium()
    shots = artifact_dir("worker-dashboard")
    quick_sessions = {
        "distributed.scheduler.dashboard.bokeh-application": {
            "check_unused_sessions_milliseconds": 500,
            "unused_session_lifetime_milliseconds": 1000,
        },
        "distributed.worker.profile.cycle": "250ms",
    }
    with (
        dask.config.set(quick_sessions),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0", dashboard=True
        ) as cluster,
        Client(cluster) as client,
    ):
        # About a minute of work (cancelled once the pages are seen): increments, and sums of
        # pairs of them wherever their inputs are, so that data moves between the workers.
        incs = client.map(slowinc, range(1200), delay=0.1, pure=False)
        sums = client.map(slowadd, incs[::2], incs[1::2], delay=0.02, pure=False)
        try:
            info = client.scheduler_info(n_workers=-1)
            workers = sorted(info["workers"])
            address = workers[0]
            port = info["workers"][address]["services"]["dashboard"]
            base = f"http://127.0.0.1:{port}"
            link = client.dashboard_link
            assert link is not None
            scheduler = link.rsplit("/", 1)[0]
            asyncio.run(browse(client, tmp_path, shots, base, scheduler, workers, incs))
        finally:
            client.cancel(incs + sums)


async def browse(
    client: Client[Literal[False]],
    tmp_path: Path,
    shots: Path,
    base: str,
    scheduler: str,
    workers: list[str],
    incs: list[Any],
) -> None:
    async with HeadlessChromium(f"{base}/status", tmp_path) as browser:
        # The worker's pages: each draws its plots while the worker computes.
        for path, names in WORKER_PLOTS.items():
            if path != "status":
                await browser.navigate(f"{base}/{path}")
            js = COLOURED_JS % json.dumps(list(names))
            drawn = await until(
                browser,
                js,
                lambda v, names=names: all(v.get(n, -1) > ENOUGH for n in names),
                f"worker-{path}",
                timeout=45,
            )
            await browser.screenshot(shots / f"worker-{path}.png")
            assert all(drawn[n] > ENOUGH for n in names), (path, drawn)
            title = await browser.evaluate("document.title")
            assert title.startswith("Dask worker") and path in title

        # The scheduler's info pages.
        page = await visit(browser, f"{scheduler}/info/main/workers.html", "info-workers")
        for w in workers:
            assert w in page["text"]
        assert "MiB" in page["text"] or "GiB" in page["text"]  # memory as people read it
        dashboards = [href for href in page["links"] if href.endswith("/status") and ":8787" not in href]
        assert f"{base}/status" in dashboards  # each worker links to its own dashboard

        page = await visit(browser, f"{scheduler}/info/worker/{quote(workers[0])}.html", "info-worker")
        assert "Processing" in page["text"] and "In memory" in page["text"]
        assert re.search(r"\b\d+(\.\d+)? (B|kiB|MiB)\b", page["text"])  # the sizes of the results it holds

        running = [f for f in incs if f.status == "pending"]
        key = str(running[-1].key)
        page = await visit(browser, f"{scheduler}/info/task/{quote(key)}.html", "info-task")
        assert key in page["text"] and "Dependents" in page["text"]

        page = await visit(browser, f"{scheduler}/info/call-stack/{quote(key)}.html", "info-call-stack")
        assert f"Call stack of {key}" in page["text"]
        assert "slowinc" in page["text"] or "not running now" in page["text"]

        page = await visit(browser, f"{scheduler}/info/call-stacks/{quote(workers[0])}.html", "info-call-stacks")
        # The task running in the worker process is asleep in slowinc or slowadd (or, for a moment, none runs).
        assert "Call stacks of the tasks running on" in page["text"]
        assert "slowinc" in page["text"] or "slowadd" in page["text"] or "No task is running" in page["text"]

        page = await visit(browser, f"{scheduler}/info/logs/{quote(workers[0])}.html", "info-logs")
        assert "Logs of" in page["text"] and "INFO" in page["text"]

        page = await visit(browser, f"{scheduler}/info/main/exceptions.html", "info-exceptions")
        assert "Exceptions" in page["text"]

        problems = await browser.errors()
        assert not problems, problems

    # The browser is closed: the worker drops its pages' sessions, and keeps nothing for them.
    def sessions(dask_worker: Any) -> int:
        return int(dask_worker.dashboard_server.session_count())

    deadline = time.monotonic() + 20
    while (counts := await asyncio.to_thread(client.run, sessions)) and any(counts.values()):
        assert time.monotonic() < deadline, counts
        await asyncio.sleep(0.5)
