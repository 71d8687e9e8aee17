"""How the scheduler's costs per task grow with the graph: a table and a chart.

``python -m benchmarks growth --out DIR`` runs ``large_graph`` (a map, no
workers: the tasks wait in the scheduler's queue, as a graph far larger than
its cluster does) at 10k, 100k, 1M and 10M tasks, each in its own process,
and writes ``growth.json`` (the cases' records), ``growth.md`` (a table) and
``growth.svg`` (the chart: bytes per task, ingest time per task and the
longest stall, against the number of tasks).  Flat lines are the aim: a cost
per task that does not grow with the graph.  ``--replot DIR`` redraws the
table and chart from a ``growth.json`` written before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import markdown_table
from benchmarks.runner import run_case
from benchmarks.suites import case

__all__ = ["SERIES", "SIZES", "growth_rows", "run_growth", "svg_chart", "write_outputs"]

#: Tasks per graph, smallest first.
SIZES: tuple[int, ...] = (10_000, 100_000, 1_000_000, 10_000_000)

#: (chart panel, metric, label, scale from the metric's unit, unit shown): the series drawn.
SERIES: tuple[tuple[str, str, str, float, str], ...] = (
    ("memory", "scheduler_bytes_per_task", "scheduler", 1.0, "B / task"),
    ("memory", "client_bytes_per_task", "client", 1.0, "B / task"),
    ("ingest", "ingest", "ingest", 1e6, "µs / task"),
    ("stall", "max_event_loop_stall", "probe's round trip", 1.0, "ms"),
    ("stall", "longest_tick", "scheduler's own tick", 1.0, "ms"),
)

#: The issue's bars, drawn dashed: scheduler memory per task, and the longest stall while a graph is ingested.
BARS: dict[str, float] = {"memory": 400.0, "stall": 50.0}

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def run_growth(sizes: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """Run ``large_graph`` at each size (no workers), write the outputs to ``out``; return the records."""
    records = []
    for n in sizes:
        # About 30 µs a task to send and ingest, plus the client's map and teardown, with room.
        c = case("large_graph", timeout=max(300.0, n * 2e-4), repeat=1, n=n, workers=0)
        records.append(run_case(c, repeat=1))
        write_outputs(records, out)
    return records


def _value(record: dict[str, Any], metric: str) -> float | None:
    for m in record.get("metrics", []):
        if m["metric"] == metric:
            v = m.get("median")
            return float(v) if v is not None else None
    return None


def growth_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, float | None]]:
    """One row per size: ``n`` and each series' value, per task where the series is (ingest: µs a task)."""
    rows = []
    for r in records:
        n = int(r["params"]["n"])
        row: dict[str, float | None] = {"n": float(n)}
        for _, metric, _, scale, _ in SERIES:
            v = _value(r, metric)
            if v is not None and metric == "ingest":
                v = v / n
            row[metric] = None if v is None else v * scale
        rows.append(row)
    return rows


def write_outputs(records: Sequence[dict[str, Any]], out: Path) -> None:
    """``growth.json``, ``growth.md`` and ``growth.svg`` in ``out`` from the records so far."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "growth.json").write_text(json.dumps(list(records), indent=1))
    rows = growth_rows(records)
    headers = ["tasks", *(f"{metric} ({unit})" for _, metric, _, _, unit in SERIES)]
    table = [[f"{int(r['n'] or 0):,}", *(_fmt(r[metric]) for _, metric, _, _, _ in SERIES)] for r in rows]
    (out / "growth.md").write_text(markdown_table(headers, table) + "\n")
    (out / "growth.svg").write_text(svg_chart(rows))


def _fmt(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def svg_chart(rows: Sequence[dict[str, float | None]]) -> str:
    """The chart: one panel per kind of cost, tasks on a log scale across, the cost from zero up."""
    panels = list(dict.fromkeys(p for p, *_ in SERIES))
    width, height, pad = 330, 260, 48
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width * len(panels)}" height="{height}" fill="white"/>',
    ]
    ns = [n for r in rows if (n := r["n"])]
    lo, hi = (math.log10(min(ns)), math.log10(max(ns))) if ns else (0.0, 1.0)
    span = (hi - lo) or 1.0
    for i, panel in enumerate(panels):
        x0 = i * width + pad
        plot_w, plot_h = width - pad - 12, height - 2 * pad
        series = [s for s in SERIES if s[0] == panel]
        values = [r[s[1]] for s in series for r in rows]
        bar = BARS.get(panel)
        top = max([v for v in values if v is not None and v == v] + ([bar] if bar else []) or [1.0]) * 1.15

        def x(n: float, x0: int = x0, plot_w: int = plot_w) -> float:
            return x0 + (math.log10(n) - lo) / span * plot_w

        def y(v: float, top: float = top, plot_h: int = plot_h) -> float:
            return pad + plot_h - v / top * plot_h

        unit = series[0][4]
        parts.append(f'<text x="{x0}" y="{pad - 22}" font-weight="bold">{panel} ({unit})</text>')
        parts.append(
            f'<line x1="{x0}" y1="{pad + plot_h}" x2="{x0 + plot_w}" y2="{pad + plot_h}" stroke="black"/>'
            f'<line x1="{x0}" y1="{pad}" x2="{x0}" y2="{pad + plot_h}" stroke="black"/>'
        )
        for k in range(5):
            v = top * k / 4
            parts.append(f'<text x="{x0 - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
        for n in ns:
            tick = f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k"
            parts.append(f'<text x="{x(n):.1f}" y="{pad + plot_h + 14}" text-anchor="middle">{tick}</text>')
        parts.append(f'<text x="{x0 + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle">tasks</text>')
        if bar:
            parts.append(
                f'<line x1="{x0}" y1="{y(bar):.1f}" x2="{x0 + plot_w}" y2="{y(bar):.1f}" stroke="grey" '
                f'stroke-dasharray="4 3"/><text x="{x0 + plot_w}" y="{y(bar) - 3:.1f}" text-anchor="end" '
                f'fill="grey">bar {_fmt(bar)}</text>'
            )
        for j, (_, metric, label, _, _) in enumerate(series):
            colour = _COLOURS[j % len(_COLOURS)]
            points = [(x(r["n"] or 1), y(val)) for r in rows if (val := r[metric]) is not None and val == val]
            if points:
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
                parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
                parts.extend(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in points)
            parts.append(f'<text x="{x0 + 6}" y="{pad - 8 + 12 * j}" fill="{colour}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
