"""The notebook views as a person sees them: rendered by headless Chromium, checked from inside the page.

The views of a real cluster of worker processes, its client, a future and
TLS settings are written into one HTML file and opened as a ``file://``
page.  The checks run in the browser: the tree it built is the one the
markup says (invalid HTML would be rearranged by the parser), nothing was
fetched, the dashboard links point at the cluster's dashboard, each worker
has its row, and the collapsed ``<details>`` open when their summary is
clicked.  Screenshots, collapsed and expanded, are kept as test artifacts.
"""

from __future__ import annotations

import asyncio
import html
import json
import time
from pathlib import Path
from typing import Any

import pytest

from distributed import Client, LocalCluster, Security
from distributed.tests.chromium import HeadlessChromium, artifact_dir, require_chromium
from distributed.tests.test_widgets import check_html
from distributed.utils_test import inc, poll_for
from distributed.widgets import SchedulerInfo

#: What the page says of itself, read in the browser.
STATE_JS = """
(() => {
  const views = document.getElementById("views");
  const cluster = document.querySelector("#cluster > [data-repr=cluster]");
  const firstWorker = cluster.querySelector("[data-worker]");
  return {
    tags: Array.from(views.querySelectorAll("*"), (e) => e.tagName.toLowerCase()),
    resources: performance.getEntriesByType("resource").length,
    sheets: document.styleSheets.length,
    scripts: document.scripts.length,
    clusterLink: cluster.querySelector("[data-field=dashboard] a").href,
    clientLink: document.querySelector("#client [data-repr=client] > table [data-field=dashboard] a").href,
    clusterWorkers: cluster.querySelectorAll("[data-worker]").length,
    clientWorkers: document.querySelectorAll("#client [data-worker]").length,
    workerNames: Array.from(cluster.querySelectorAll("[data-worker] > summary strong"), (e) => e.textContent),
    open: Array.from(views.querySelectorAll("details"), (d) => d.open).filter(Boolean).length,
    // The content of a closed <details> is laid out but not rendered: checkVisibility tells.
    workerTableShown: firstWorker.querySelector("table").checkVisibility(),
    workerHeight: firstWorker.getBoundingClientRect().height,
    futureStatus: document.querySelector("#future [data-field=status]").textContent,
    futureColor: getComputedStyle(document.querySelector("#future [data-field=status]")).color,
    securityCa: document.querySelector("#security [data-field=tls_ca_file]").textContent,
    text: views.innerText,
    cellAlign: getComputedStyle(cluster.querySelector("td")).textAlign,
  };
})()
"""

#: Opens the cluster's scheduler section, its workers, and the first worker, by clicking their summaries.
EXPAND_JS = """
(() => {
  const cluster = document.querySelector("#cluster > [data-repr=cluster]");
  cluster.querySelector("[data-section=scheduler] > summary").click();
  cluster.querySelector("[data-section=workers] > summary").click();
  cluster.querySelector("[data-worker] > summary").click();
  return Array.from(cluster.querySelectorAll("details"), (d) => d.open);
})()
"""


def page(views: dict[str, str]) -> str:
    body = "\n".join(
        f'<div id="{name}" style="margin: 0 0 18px 0;"><p style="margin: 0; color: #999;">{html.escape(name)}</p>\n'
        f"{text}\n</div>"
        for name, text in views.items()
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Notebook views</title></head>\n'
        '<body style="font-family: sans-serif; font-size: 14px; margin: 16px;">\n'
        f'<div id="views">\n{body}\n</div>\n</body></html>\n'
    )


async def look(url: str, tmp_path: Path, shots: Path) -> tuple[dict[str, Any], list[bool], dict[str, Any]]:
    async with HeadlessChromium(url, tmp_path, width=1100, height=1400) as browser:
        deadline = time.monotonic() + 30
        while (state := await browser.evaluate("document.readyState")) != "complete":
            if time.monotonic() > deadline:
                raise AssertionError(f"the page did not finish loading within 30 s (readyState {state!r})")
            await asyncio.sleep(0.05)
        before = await browser.evaluate(STATE_JS)
        await browser.screenshot(shots / "views-collapsed.png")
        opened = await browser.evaluate(EXPAND_JS)
        after = await browser.evaluate(STATE_JS)
        await browser.screenshot(shots / "views-expanded.png")
    return before, opened, after


@pytest.mark.timeout(180)
def test_notebook_views_render_in_chromium(tmp_path: Path) -> None:
    require_chromium()
    pytest.importorskip("cryptography")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        cluster.wait_for_workers(2, timeout=60)
        # The workers' first heartbeats bring their metrics (CPU, memory) into the views.
        poll_for(
            lambda: all("cpu" in w.get("metrics", {}) for w in client.scheduler_info()["workers"].values()),
            timeout=30,
            what="worker metrics",
        )
        future = client.submit(inc, 1)
        assert future.result() == 2
        link = cluster.dashboard_link
        assert link is not None
        info = client.scheduler_info()
        assert isinstance(info, SchedulerInfo)
        views = {
            "client": client._repr_html_(),
            "cluster": cluster._repr_html_(),
            "scheduler-info": info._repr_html_(),
            "future": future._repr_html_(),
            "security": Security.temporary()._repr_html_(),
        }
        names = sorted(str(w.get("name")) for w in cluster.scheduler_info["workers"].values())
    text = page(views)
    expected = check_html(text[text.index('<div id="views">') : text.index("</body>")])
    path = tmp_path / "views.html"
    path.write_text(text)
    shots = artifact_dir("widgets")
    before, opened, after = asyncio.run(look(path.as_uri(), tmp_path, shots))
    # The browser built exactly the elements written (no implied <tbody>, nothing moved out of a <p>).
    assert before["tags"] == expected.tags[1:], json.dumps([before["tags"], expected.tags[1:]])
    assert before["resources"] == 0 and before["sheets"] == 0 and before["scripts"] == 0
    assert before["clusterLink"] == link and before["clientLink"] == link
    assert before["clusterWorkers"] == 2 and before["clientWorkers"] == 2
    assert before["workerNames"] == [f"Worker: {n}" for n in names]
    assert before["open"] == 0 and not before["workerTableShown"]
    assert before["futureStatus"] == "finished" and before["futureColor"] == "rgb(46, 125, 50)"
    assert before["securityCa"] == "Temporary (In-memory)" and "BEGIN" not in before["text"]
    assert before["cellAlign"] == "left"
    assert "Connection method: Cluster object" in before["text"] and "Total threads: 2" in before["text"]
    # Clicking the summaries opens the scheduler's section, the workers, and the first worker's details.
    assert opened[:3] == [True, True, True]
    assert after["open"] == 3 and after["workerTableShown"] and after["workerHeight"] > 100
    assert "CPU usage:" in after["text"] and "Local directory:" in after["text"]
    for shot in ("views-collapsed.png", "views-expanded.png"):
        data = (shots / shot).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
