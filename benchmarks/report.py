"""Tables: one result file, or two side by side."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4g}"
    return str(v)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(c) for c in r) + " |")
    return "\n".join(lines)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    for r in cells:
        lines.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def label(doc: dict[str, Any]) -> str:
    pk = doc.get("packages", {})
    return f"distributed {pk.get('distributed', '?')} ({pk.get('distributed_origin', '?')})"


def results_table(doc: dict[str, Any]) -> str:
    headers = ["case", "metric", "unit", "median", "min", "max", "threads min", "sync min", "x threads", "x sync"]
    rows: list[list[Any]] = []
    failures: list[str] = []
    for r in doc["results"]:
        if r["status"] != "ok":
            failures.append(f"{r['case']}: {r['status']}: {(r.get('error') or '').strip().splitlines()[-1:]}")
            rows.append([r["case"], r["status"].upper(), "", None, None, None, None, None, None, None])
            continue
        for m in r["metrics"]:
            th = m["floor"].get("threads", {}).get("min")
            sy = m["floor"].get("sync", {}).get("min")
            rows.append(
                [
                    r["case"],
                    m["metric"],
                    m["unit"],
                    m["median"],
                    m["min"],
                    m["max"],
                    th,
                    sy,
                    m["ratio_threads"],
                    m["ratio_sync"],
                ]
            )
    dask_version = doc.get("packages", {}).get("dask", "?")
    cpus = doc.get("machine", {}).get("cpu_count", "?")
    head = f"{label(doc)}, dask {dask_version}, {cpus} CPUs, suite {doc.get('suite')}"
    out = [head, "x threads / x sync: best distributed run / best local run of the same graph", table(headers, rows)]
    if "total_seconds" in doc:
        out.append(f"total {doc['total_seconds']:.1f} s")
    if failures:
        out.append("not measured:\n  " + "\n  ".join(failures))
    return "\n".join(out)


def _index(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    idx: dict[tuple[str, str], dict[str, Any]] = {}
    for r in doc["results"]:
        if r["status"] != "ok":
            idx[(r["case"], "*")] = {"status": r["status"]}
            continue
        for m in r["metrics"]:
            idx[(r["case"], m["metric"])] = m
    return idx


def compare_table(a: dict[str, Any], b: dict[str, Any], markdown: bool = False) -> str:
    """Medians of A and B side by side; ``B/A`` > 1 means B is slower (for times) or faster (throughputs)."""
    ia, ib = _index(a), _index(b)
    keys = list(dict.fromkeys([*ia, *ib]))
    headers = ["case", "metric", "unit", "A median", "B median", "B/A", "A x threads", "B x threads"]
    rows: list[list[Any]] = []
    for key in keys:
        ma, mb = ia.get(key), ib.get(key)
        if key[1] == "*":
            rows.append(
                [key[0], "(failed)", "", (ma or {}).get("status", "-"), (mb or {}).get("status", "-"), None, None, None]
            )
            continue
        unit = (ma or mb or {}).get("unit", "")
        va = ma.get("median") if ma else None
        vb = mb.get("median") if mb else None
        ratio = vb / va if va and vb is not None else None
        rows.append(
            [
                key[0],
                key[1],
                unit,
                va,
                vb,
                ratio,
                ma.get("ratio_threads") if ma else None,
                mb.get("ratio_threads") if mb else None,
            ]
        )
    return "\n".join(
        [
            f"A: {label(a)}, suite {a.get('suite')}, {a.get('created')}",
            f"B: {label(b)}, suite {b.get('suite')}, {b.get('created')}",
            "B/A: ratio of medians (for s/ms/B: >1 means B is slower or larger; for MB/s and 1/s: >1 means B is faster)",
            (markdown_table if markdown else table)(headers, rows),
        ]
    )
