"""performance_report: a self-contained HTML page of what a block did on the cluster."""

from __future__ import annotations

import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import dask.array as da
import pytest

from distributed import Client, LocalCluster, performance_report
from distributed.dashboard.components.timings import prefix_timings, transfer_summary
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker


def spin_for_the_report(seconds: float) -> int:
    deadline = time.time() + seconds
    n = 0
    while time.time() < deadline:
        n += 1
    return n


def plus_one(x: int) -> int:
    return x + 1


class PageParser(HTMLParser):
    """Collects script sources and checks that the elements that matter open and close."""

    def __init__(self) -> None:
        super().__init__()
        self.script_srcs: list[str] = []
        self.opened: list[str] = []
        self.closed: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.opened.append(tag)
        if tag == "script":
            self.script_srcs += [v or "" for k, v in attrs if k == "src"]

    def handle_endtag(self, tag: str) -> None:
        self.closed.append(tag)


def parse(page: str) -> PageParser:
    parser = PageParser()
    parser.feed(page)
    parser.close()
    for tag in ("html", "head", "body", "script"):
        assert parser.opened.count(tag) == parser.closed.count(tag) >= 1, tag
    return parser


@gen_cluster(client=True, config={"distributed.worker.profile.interval": "5ms"})
async def test_async_report_has_stream_prefixes_transfers_and_profile(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, tmp_path: Path
) -> None:
    filename = tmp_path / "report.html"
    async with performance_report(filename=str(filename)):
        x = c.submit(spin_for_the_report, 0.3, key="spinner-1", workers=[a.address])
        y = c.submit(plus_one, x, key="later-1", workers=[b.address])
        await y
    page = filename.read_text()
    parser = parse(page)
    assert not [src for src in parser.script_srcs if src.startswith(("http://", "https://", "//"))]
    assert "Dask Performance Report" in page
    for text in ("spinner-1", "later-1", "spinner", "later", a.address, "spin_for_the_report"):
        assert text in page, text
    assert "test_async_report_has_stream_prefixes_transfers_and_profile" in page  # the code tab


def test_report_with_processes_and_a_dask_array(tmp_path: Path) -> None:
    filename = tmp_path / "dask-report.html"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster):
            x = da.ones((200, 200), chunks=(50, 50))
            with performance_report(filename=str(filename)):
                assert (x + x.T).sum().compute() == 80000
    page = filename.read_text()
    parser = parse(page)
    assert not [src for src in parser.script_srcs if src.startswith(("http://", "https://", "//"))]
    for prefix in ("ones_like", "add", "sum"):
        assert prefix in page, prefix
    assert "assert (x + x.T).sum().compute() == 80000" in page


@gen_cluster(client=True)
async def test_report_mode_cdn_and_bad_mode(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, tmp_path: Path
) -> None:
    filename = tmp_path / "cdn.html"
    async with performance_report(filename=str(filename), mode="cdn"):
        await c.submit(inc, 1, key="inc-1")
    srcs = parse(filename.read_text()).script_srcs
    assert srcs and all(src.startswith("https://") for src in srcs)
    with pytest.raises(ValueError):
        performance_report(mode="not-a-mode")


@gen_cluster(client=True)
async def test_report_to_an_fsspec_url(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    import fsspec  # type: ignore[import-untyped]  # fsspec ships no type information

    async with performance_report(filename="memory://reports/r.html", storage_options={"auto_mkdir": True}):
        await c.submit(inc, 1, key="inc-2")
    with fsspec.open("memory://reports/r.html", "r") as f:
        assert "inc-2" in f.read()


def test_summaries_count_a_shared_fetch_once() -> None:
    fetch = {"action": "transfer", "start": 1.0, "stop": 1.5, "source": "w1", "nbytes": 100}
    records: list[dict[str, Any]] = [
        {
            "key": "a-1",
            "worker": "w2",
            "status": "OK",
            "startstops": [fetch, {"action": "compute", "start": 2, "stop": 3}],
        },
        {
            "key": "a-2",
            "worker": "w2",
            "status": "error",
            "startstops": [fetch, {"action": "compute", "start": 3, "stop": 5}],
        },
        {"key": "b-1", "worker": "w1", "status": "OK", "startstops": [{"action": "compute", "start": 0, "stop": 0.5}]},
    ]
    [t] = transfer_summary(records)
    assert (t["source"], t["destination"], t["count"], t["nbytes"], t["seconds"]) == ("w1", "w2", 1, 100, 0.5)
    timings = prefix_timings(records)
    assert [p["prefix"] for p in timings] == ["a", "b"]
    assert timings[0] == {"prefix": "a", "tasks": 2, "errors": 1, "compute": 3.0, "transfer": 1.0}
