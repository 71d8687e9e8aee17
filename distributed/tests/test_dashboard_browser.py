"""The dashboard as a person sees it: /status in headless Chromium while tasks run on worker processes.

The page is checked from inside the browser (DevTools ``Runtime.evaluate``):
the bokeh document arrived over its websocket, the plots' views exist, and
their canvases hold coloured pixels (bars and task rectangles are coloured;
axes, text and background are grey, black or white), not just that the HTML
loaded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distributed import Client, LocalCluster
from distributed.tests.chromium import HeadlessChromium, bokeh_script, require_chromium
from distributed.utils_test import slowinc

#: The plots /status must draw, by bokeh model name.
DRAWN = ("task_stream", "task_progress", "processing", "worker_memory")

#: For each named plot: whether its view exists, its size and how many of its pixels are coloured.
MEASURE_JS = bokeh_script("""
  const out = {ready: true, plots: {}};
  for (const name of %s) {
    const model = doc.get_model_by_name(name);
    if (model == null) { out.plots[name] = {found: false}; continue; }
    const view = viewOf(model);
    if (view == null) { out.plots[name] = {found: true, view: false}; continue; }
    const {colored, width, height} = colouredPixels(view);
    const rows = model.renderers.map((r) => (r.data_source ? r.data_source.get_length() || 0 : 0));
    out.plots[name] = {found: true, view: true, width, height, colored, rows: Math.max(0, ...rows)};
  }
  return out;
""")


async def measure_until_drawn(url: str, tmp_path: Path, timeout: float = 60) -> dict[str, Any]:
    """Poll ``/status`` until every plot of ``DRAWN`` has colour; a screenshot is left in ``status.png``."""
    js = MEASURE_JS % repr(list(DRAWN)).replace("'", '"')

    def drawn(state: dict[str, Any]) -> bool:
        plots = state.get("plots", {})
        return all(plots.get(n, {}).get("colored", 0) > 200 for n in DRAWN)

    return await poll_page(url, tmp_path, drawn, js=js, screenshot="status.png", timeout=timeout)


@pytest.mark.timeout(180)
def test_status_page_draws_the_task_stream_and_progress(tmp_path: Path) -> None:
    require_chromium()
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        # Tasks that keep flowing while the browser loads and draws the page (about 50 s of work).
        futures = client.map(slowinc, range(1000), delay=0.1, pure=False)
        link = client.dashboard_link
        assert link is not None
        try:
            state = asyncio.run(measure_until_drawn(link, tmp_path))
        finally:
            client.cancel(futures)
        plots = state["plots"]
        # The progress bars and the task stream hold data sent over the websocket, and drew it.
        assert plots["task_progress"]["rows"] >= 1
        assert plots["task_stream"]["rows"] >= 1
        for name in DRAWN:
            assert plots[name]["width"] > 100 and plots[name]["height"] > 50, (name, plots[name])
        assert (tmp_path / "status.png").stat().st_size > 10_000


GRAPH_AND_TABLE_JS = bokeh_script("""
  const graph = doc.get_model_by_name("task_graph");
  const table = doc.get_model_by_name("workers_table");
  const graphView = viewOf(graph);
  const out = {};
  if (graphView != null) {
    out.graph = {colored: colouredPixels(graphView).colored, nodes: graph.renderers[1].data_source.get_length()};
  }
  if (viewOf(table) != null) {
    out.table = {rows: table.source.get_length(), addresses: table.source.data.address};
  }
  return out;
""")


async def poll_page(
    url: str,
    tmp_path: Path,
    ready: Callable[[dict[str, Any]], bool],
    js: str = GRAPH_AND_TABLE_JS,
    screenshot: str = "page.png",
    timeout: float = 60,
) -> dict[str, Any]:
    """Evaluate ``js`` on the page at ``url`` until ``ready`` holds; a screenshot is left in ``screenshot`` either way."""
    async with HeadlessChromium(url, tmp_path) as browser:
        deadline = time.monotonic() + timeout
        while True:
            state = await browser.evaluate(js)
            if state and ready(state):
                await browser.screenshot(tmp_path / screenshot)
                return dict(state)
            if time.monotonic() > deadline:
                await browser.screenshot(tmp_path / screenshot)
                pytest.fail(f"{url} not drawn within {timeout} s (screenshot in {tmp_path}): {state}")
            await asyncio.sleep(0.2)


@pytest.mark.timeout(180)
def test_graph_and_workers_pages_draw(tmp_path: Path) -> None:
    require_chromium()
    from dask.delayed import delayed

    from distributed.utils_test import inc

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        parts = [delayed(inc)(i, dask_key_name=f"part-{i}") for i in range(5)]
        total = delayed(sum)(parts, dask_key_name="total")
        futures = client.compute([total, *parts])  # all six held, so all stay in the graph
        assert client.gather(futures) == [15, 1, 2, 3, 4, 5]
        link = client.dashboard_link
        assert link is not None
        base = link.rsplit("/", 1)[0]
        graph = asyncio.run(
            poll_page(f"{base}/graph", tmp_path / "graph", lambda s: s.get("graph", {}).get("colored", 0) > 50)
        )
        assert graph["graph"]["nodes"] == 6  # five parts and their sum
        table = asyncio.run(
            poll_page(f"{base}/workers", tmp_path / "workers", lambda s: s.get("table", {}).get("rows", 0) == 3)
        )
        # A row of totals, then the workers.
        assert sorted(table["table"]["addresses"][1:]) == sorted(cluster.scheduler_info["workers"])


@pytest.mark.timeout(120)
def test_closing_the_scheduler_closes_the_pages_websockets(tmp_path: Path) -> None:
    require_chromium()
    import psutil

    from distributed import Scheduler
    from distributed.utils_test import async_poll_for

    def established(port: int) -> int:
        return sum(
            1
            for c in psutil.Process().net_connections("tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
        )

    async def body() -> None:
        s = Scheduler(host="127.0.0.1", port=0, dashboard=True, dashboard_address="127.0.0.1:0")
        await s
        try:
            port = s.http_server.port
            async with HeadlessChromium(f"http://127.0.0.1:{port}/status", tmp_path) as browser:
                # The document arrives over the page's websocket.
                deadline = time.monotonic() + 60
                while not await browser.evaluate("!!(window.Bokeh && Bokeh.documents.length)"):
                    assert time.monotonic() < deadline, "the page's document never arrived"
                    await asyncio.sleep(0.1)
                assert established(port) >= 1
                await s.close()
                await async_poll_for(lambda: established(port) == 0, timeout=10)
        finally:
            await s.close()

    asyncio.run(body())
