"""Summaries of task stream records: time per task prefix, and transfers between workers.

:func:`prefix_timings` and :func:`transfer_summary` compute the numbers;
:func:`prefix_timings_figure` and :func:`transfer_table` draw them.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from bokeh.models import ColumnDataSource, FactorRange, HoverTool
from bokeh.models.widgets import Div
from bokeh.plotting import figure
from dask.utils import format_bytes, key_split

from distributed.diagnostics.task_stream import color_of

__all__ = ["PrefixTiming", "Transfer", "prefix_timings", "prefix_timings_figure", "transfer_summary", "transfer_table"]


class PrefixTiming(TypedDict):
    """What the tasks of one prefix took."""

    prefix: str
    tasks: int
    errors: int
    compute: float
    transfer: float


class Transfer(TypedDict):
    """Data moved from one worker to another."""

    source: str
    destination: str
    count: int
    nbytes: int
    seconds: float


def prefix_timings(records: Iterable[Mapping[str, Any]]) -> list[PrefixTiming]:
    """Seconds of computation and of fetching inputs per task prefix, most compute first."""
    by_prefix: dict[str, PrefixTiming] = {}
    for rec in records:
        name = key_split(rec["key"])
        t = by_prefix.get(name)
        if t is None:
            t = by_prefix[name] = {"prefix": name, "tasks": 0, "errors": 0, "compute": 0.0, "transfer": 0.0}
        t["tasks"] += 1
        if rec.get("status") == "error":
            t["errors"] += 1
        for ss in rec.get("startstops", ()):
            d = max(float(ss["stop"]) - float(ss["start"]), 0.0)
            if ss.get("action") == "compute":
                t["compute"] += d
            elif ss.get("action") == "transfer":
                t["transfer"] += d
    return sorted(by_prefix.values(), key=lambda t: (-t["compute"], t["prefix"]))


def transfer_summary(records: Iterable[Mapping[str, Any]]) -> list[Transfer]:
    """Transfers by (source, destination) worker, most bytes first.

    A fetch that brought the inputs of several tasks is counted once.
    """
    seen: set[tuple[Any, ...]] = set()
    pairs: dict[tuple[str, str], Transfer] = {}
    for rec in records:
        dest = str(rec.get("worker"))
        for ss in rec.get("startstops", ()):
            if ss.get("action") != "transfer":
                continue
            source = str(ss.get("source"))
            ident = (source, dest, ss["start"], ss["stop"])
            if ident in seen:
                continue
            seen.add(ident)
            t = pairs.get((source, dest))
            if t is None:
                t = pairs[(source, dest)] = {
                    "source": source,
                    "destination": dest,
                    "count": 0,
                    "nbytes": 0,
                    "seconds": 0.0,
                }
            t["count"] += 1
            t["nbytes"] += int(ss.get("nbytes", 0))
            t["seconds"] += max(float(ss["stop"]) - float(ss["start"]), 0.0)
    return sorted(pairs.values(), key=lambda t: (-t["nbytes"], t["source"], t["destination"]))


def prefix_timings_figure(timings: list[PrefixTiming], height: int = 400, width: int = 800) -> figure:
    """Horizontal bars: compute seconds per prefix (and transfer seconds beside them)."""
    names = [t["prefix"] for t in timings]
    source = ColumnDataSource(
        data={
            "prefix": names,
            "compute": [t["compute"] for t in timings],
            "transfer": [t["transfer"] for t in timings],
            "tasks": [t["tasks"] for t in timings],
            "errors": [t["errors"] for t in timings],
            "color": [color_of(n) for n in names],
        }
    )
    fig = figure(
        title="Compute time per task prefix",
        y_range=FactorRange(factors=list(reversed(names))),
        height=max(height, 30 * len(names) + 80),
        width=width,
        sizing_mode="stretch_width",
        x_axis_label="seconds",
        tools="save",
        name="prefix_timings",
    )
    fig.hbar(source=source, y="prefix", right="compute", height=0.8, fill_color="color", line_color=None)
    fig.add_tools(
        HoverTool(
            tooltips=[
                ("prefix", "@prefix"),
                ("tasks", "@tasks (@errors erred)"),
                ("compute (s)", "@compute{0.000}"),
                ("transfer (s)", "@transfer{0.000}"),
            ]
        )
    )
    return fig


def transfer_table(transfers: list[Transfer]) -> Div:
    """An HTML table of transfers between workers."""
    if not transfers:
        return Div(text="<p>No data moved between workers.</p>", name="transfers")
    rows = "".join(
        f"<tr><td>{html.escape(t['source'])}</td><td>{html.escape(t['destination'])}</td>"
        f"<td>{t['count']}</td><td>{format_bytes(t['nbytes'])}</td><td>{t['seconds']:.3f}</td></tr>"
        for t in transfers
    )
    total = sum(t["nbytes"] for t in transfers)
    return Div(
        text=(
            f"<p>{sum(t['count'] for t in transfers)} fetches, {format_bytes(total)} in all.</p>"
            "<table><tr><th>from</th><th>to</th><th>fetches</th><th>bytes</th><th>seconds</th></tr>"
            f"{rows}</table>"
        ),
        name="transfers",
    )
