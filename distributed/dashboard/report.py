"""The performance report: one HTML page with what a block of work did on the cluster.

:func:`report_html` lays out, as tabs, a summary, the task stream, time per
task prefix, transfers between workers, the workers' profile and the code
that ran, and returns a complete page.  By default bokeh's JavaScript is
inlined so the file opens without a network.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bokeh.embed import file_html
from bokeh.models import TabPanel, Tabs
from bokeh.models.widgets import Div
from bokeh.resources import CDN, INLINE, Resources
from dask.utils import format_bytes, format_time

from distributed.dashboard.components.profile import profile_figure
from distributed.dashboard.components.task_stream import task_stream_figure
from distributed.dashboard.components.timings import (
    prefix_timings,
    prefix_timings_figure,
    transfer_summary,
    transfer_table,
)

__all__ = ["report_html", "resources_for"]


def resources_for(mode: str | None) -> Resources:
    """bokeh resources for ``mode``: inline by default (the page opens offline), or ``"cdn"`` etc."""
    if mode is None or mode == "inline":
        return INLINE
    if mode == "cdn":
        return CDN
    return Resources(mode=mode)  # type: ignore[arg-type]  # bokeh checks the mode name and raises on others


def report_html(
    records: Sequence[Mapping[str, Any]],
    profile: Mapping[str, Any],
    *,
    start: float,
    stop: float,
    code: str = "",
    cluster: Mapping[str, Any] | None = None,
    mode: str | None = None,
    profile_interval: float = 0.010,
) -> str:
    """The HTML page of a performance report.

    Parameters
    ----------
    records
        Task stream records of the tasks that ran (``Client.get_task_stream``).
    profile
        The workers' profile over the same time (``Client.profile``).
    start, stop
        When the reported block began and ended (``time.time()``).
    code
        The source that ran, shown as is.
    cluster
        ``scheduler_info()``, for the number of workers, threads and memory.
    mode
        bokeh resources: ``None``/``"inline"`` (offline), ``"cdn"``, ...
    """
    timings = prefix_timings(records)
    transfers = transfer_summary(records)
    compute = sum(t["compute"] for t in timings)
    workers = (cluster or {}).get("workers", {})
    summary_rows = [
        ("Date", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start))),
        ("Duration", format_time(stop - start)),
        ("Tasks", str(len(records))),
        ("Erred tasks", str(sum(t["errors"] for t in timings))),
        ("Compute time", format_time(compute)),
        ("Transfers", f"{sum(t['count'] for t in transfers)} ({format_bytes(sum(t['nbytes'] for t in transfers))})"),
        ("Workers", str(len(workers))),
        ("Threads", str(sum(int(w.get("nthreads", 0)) for w in workers.values()))),
        ("Memory", format_bytes(sum(int(w.get("memory_limit", 0) or 0) for w in workers.values()))),
    ]
    prefix_rows = "".join(
        f"<tr><td>{html.escape(t['prefix'])}</td><td>{t['tasks']}</td><td>{t['errors']}</td>"
        f"<td>{format_time(t['compute'])}</td><td>{format_time(t['transfer'])}</td></tr>"
        for t in timings
    )
    summary = Div(
        text=(
            "<h2>Dask Performance Report</h2><table>"
            + "".join(f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in summary_rows)
            + "</table><h3>Task prefixes</h3>"
            "<table><tr><th>prefix</th><th>tasks</th><th>erred</th><th>compute</th><th>transfer</th></tr>"
            f"{prefix_rows}</table>"
        ),
        name="summary",
    )
    tabs = Tabs(
        tabs=[
            TabPanel(child=summary, title="Summary"),
            TabPanel(child=task_stream_figure(records, start_boundary=start), title="Task Stream"),
            TabPanel(child=prefix_timings_figure(timings), title="Task Prefixes"),
            TabPanel(child=transfer_table(transfers), title="Transfers"),
            TabPanel(
                child=profile_figure(profile, profile_interval=profile_interval, title="Worker Profile (compute)"),
                title="Worker Profile",
            ),
            TabPanel(child=Div(text=f"<pre>{html.escape(code)}</pre>", name="code"), title="Code"),
        ],
        sizing_mode="stretch_width",
    )
    return file_html(tabs, resources_for(mode), title="Dask Performance Report")
