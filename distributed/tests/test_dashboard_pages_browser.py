"""Every dashboard page as a person sees it, in headless Chromium, while worker processes compute.

One cluster (two worker processes) runs a dask array computation over and
over; one browser goes from page to page: each page of the navigation bar,
then every single-pane page that ``/individual-plots.json`` lists. On each,
the named plots must draw coloured pixels (bars, lines, boxes: axes, text
and background are grey, black or white), tables must hold the workers, and
the browser must have seen no console error, no uncaught exception and no
resource answered with an error. A screenshot of each page is kept as a test
artifact (see :func:`~distributed.tests.chromium.artifact_dir`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from distributed import Client, LocalCluster
from distributed.tests.chromium import HeadlessChromium, artifact_dir, bokeh_script, require_chromium

#: Per page: the bokeh models (by name) that must draw coloured pixels, and the tables that must list the workers.
NAV_EXPECTED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "/status": (("cluster_memory", "worker_memory", "processing", "task_stream", "task_progress"), ()),
    "/workers": (("worker_cpu", "worker_memory"), ("workers_table",)),
    "/tasks": (("task_stream",), ()),
    "/system": (("system_cpu", "system_memory", "system_bandwidth", "system_fds"), ()),
    "/profile": (("profile",), ()),
    "/graph": (("task_graph",), ()),
    "/groups": (("task_groups",), ()),
}

INDIVIDUAL_EXPECTED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "/individual-task-stream": (("task_stream",), ()),
    "/individual-progress": (("task_progress",), ()),
    "/individual-graph": (("task_graph",), ()),
    "/individual-groups": (("task_groups",), ()),
    "/individual-workers-memory": (("worker_memory",), ()),
    "/individual-cluster-memory": (("cluster_memory",), ()),
    "/individual-cpu": (("worker_cpu",), ()),
    "/individual-nprocessing": (("processing",), ()),
    "/individual-occupancy": (("occupancy",), ()),
    "/individual-workers-transfer-bytes": (("workers_transfer_bytes",), ()),
    "/individual-workers": ((), ("workers_table",)),
    "/individual-workers-cpu-timeseries": (("workers_cpu_timeseries",), ()),
    "/individual-workers-memory-timeseries": (("workers_memory_timeseries",), ()),
    "/individual-compute-time-per-key": (("compute_time_per_key",), ()),
    "/individual-scheduler-system": (("system_cpu", "system_memory", "system_bandwidth", "system_fds"), ()),
    "/individual-profile": (("profile",), ()),
}

#: Coloured pixels a plot must have: more than a legend's swatches (a bar, a line across the plot, boxes), except
#: for the graph's dots, most of them pale (released tasks).
MIN_COLORED = {"task_graph": 100}

#: For named plots: whether drawn and how many coloured pixels; for named tables: their rows.
MEASURE_JS = bokeh_script("""
  const out = {ready: true, plots: {}, tables: {}};
  for (const name of %s) {
    const model = doc.get_model_by_name(name);
    const view = viewOf(model);
    if (view == null) { out.plots[name] = {found: model != null, colored: 0}; continue; }
    out.plots[name] = {found: true, ...colouredPixels(view)};
  }
  for (const name of %s) {
    const model = doc.get_model_by_name(name);
    out.tables[name] = viewOf(model) == null ? {rows: 0} : {rows: model.source.get_length(), name: model.source.data.name};
  }
  return out;
""")

#: Links of the navigation bar and of its "More" menu, as the page has them.
NAV_JS = """
(() => ({
  nav: Array.from(document.querySelectorAll("nav.dask-nav .dask-nav-links > li > a")).map(
    (a) => [a.textContent.trim(), a.getAttribute("href")]),
  more: Array.from(document.querySelectorAll("nav.dask-nav .dask-more-menu a")).map((a) => a.getAttribute("href")),
  active: Array.from(document.querySelectorAll("nav.dask-nav a.active")).map((a) => a.getAttribute("href")),
}))()
"""


def spin_block(block: Any, seconds: float = 0.06) -> Any:
    """``block`` plus one, after keeping a core busy for ``seconds`` (so that the workers' CPU shows)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass
    return block + 1


def keep_computing(client: Client, stop: threading.Event) -> None:
    """Compute a fresh dask array graph again and again until ``stop``: work with transfers, spinning and sums."""
    import dask.array as da

    seed = 0
    while not stop.is_set():
        seed += 1
        x = da.ones((12 * 400, 12 * 400), chunks=400) * seed  # 144 blocks of 1.2 MiB
        y = x.map_blocks(spin_block, dtype=x.dtype)
        total = (y + y.T).sum()  # block (i, j) meets block (j, i): blocks move between the workers
        future = client.compute(total)
        while not stop.is_set():
            try:
                future.result(timeout=0.5)
                break
            except TimeoutError:
                continue
        if stop.is_set():
            client.cancel(future)


async def check_page(
    browser: HeadlessChromium, url: str, plots: tuple[str, ...], tables: tuple[str, ...], shot: Path, timeout: float
) -> dict[str, Any]:
    """Open ``url``, wait until ``plots`` have colour and ``tables`` list both workers; a screenshot either way."""
    await browser.navigate(url)
    js = MEASURE_JS % (json.dumps(list(plots)), json.dumps(list(tables)))
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while True:
        try:
            state = await browser.evaluate(js) or {}
        except RuntimeError:  # the page is between documents
            state = {}
        drawn = state.get("ready") and all(state["plots"][n]["colored"] > MIN_COLORED.get(n, 1000) for n in plots)
        listed = state.get("ready") and all(state["tables"][n]["rows"] >= 3 for n in tables)
        if drawn and listed:
            await browser.screenshot(shot)
            return state
        if time.monotonic() > deadline:
            await browser.screenshot(shot)
            pytest.fail(f"{url} not drawn within {timeout} s (screenshot {shot}): {state}")
        await asyncio.sleep(0.25)


@pytest.mark.timeout(240)
def test_every_page_draws_with_no_errors(tmp_path: Path) -> None:
    require_chromium()
    shots = artifact_dir("dashboard-pages")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        stop = threading.Event()
        worker = threading.Thread(target=keep_computing, args=(client, stop), daemon=True)
        worker.start()
        try:
            link = client.dashboard_link
            assert link is not None
            base = link.rsplit("/", 1)[0]
            with urllib.request.urlopen(f"{base}/individual-plots.json", timeout=10) as r:
                listed = json.loads(r.read())
            # dask-labextension's reading: title -> path, every path a page checked below.
            assert listed["Individual Task Stream"] == "/individual-task-stream"
            assert sorted(listed.values()) == sorted(INDIVIDUAL_EXPECTED)
            asyncio.run(browse(base, tmp_path, shots, sorted(cluster.scheduler_info["workers"])))
        finally:
            stop.set()
            worker.join(timeout=30)


async def browse(base: str, tmp_path: Path, shots: Path, workers: list[str]) -> None:
    async with HeadlessChromium(f"{base}/status", tmp_path) as browser:
        # The bar: the pages as dask's, this one marked, "More" listing every single pane.
        await check_page(browser, f"{base}/status", *NAV_EXPECTED["/status"], shots / "status.png", timeout=60)
        nav = await browser.evaluate(NAV_JS)
        titles = [title for title, _ in nav["nav"]]
        assert titles == ["Status", "Workers", "Tasks", "System", "Profile", "Graph", "Groups", "Info"]
        assert nav["active"] == ["/status"]
        assert sorted(nav["more"]) == sorted(INDIVIDUAL_EXPECTED)
        for path, (plots, tables) in NAV_EXPECTED.items():
            state = await check_page(browser, base + path, plots, tables, shots / f"{path[1:]}.png", timeout=30)
            if tables:
                assert state["tables"]["workers_table"]["name"][0] == "Total (2)"
            nav = await browser.evaluate(NAV_JS)
            assert nav["active"] == [path]
        # Info: a page of the same template, outside bokeh.
        await browser.navigate(f"{base}/info/main/workers.html")
        deadline = time.monotonic() + 20
        while not await browser.evaluate("document.readyState === 'complete' && !!document.querySelector('nav')"):
            assert time.monotonic() < deadline, "the info page did not load"
            await asyncio.sleep(0.1)
        text = await browser.evaluate("document.body.innerText")
        assert all(w in text for w in workers), text[:500]
        await browser.screenshot(shots / "info.png")
        for path, (plots, tables) in INDIVIDUAL_EXPECTED.items():
            await check_page(browser, base + path, plots, tables, shots / f"{path[1:]}.png", timeout=30)
            # A single pane fills its window, without the bar.
            assert not await browser.evaluate("!!document.querySelector('nav.dask-nav')")
        assert await browser.errors() == []
