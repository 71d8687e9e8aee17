"""The speed targets, checked against result files of this project and of a released ``distributed``.

``python -m benchmarks targets --ours ours.json --incumbent incumbent.json`` prints one row per
target: the figure for each project, dask's ``threads`` floor where the target is relative to it,
the ratio the target is about, the target itself, and whether it is met.  The targets are those of
the full set (``--full``); a target whose case is missing from the files reads ``not measured``.
``--set floor`` checks the second set, :data:`FLOOR_TARGETS` (the speed toward the floor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.report import markdown_table, table

Doc = dict[str, Any]
Metric = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """One target: what it measures, how the ratio is formed, and the bound it must meet."""

    name: str
    case: str
    metric: str
    #: ``vs_incumbent``: ours / incumbent (speed-ups: higher is better);
    #: ``x_threads``: best run / best run on dask's threads scheduler;
    #: ``value``: our median itself; ``per_link``: our median / n;
    #: ``vs_other``: our median / our median of ``other`` (a ``"case metric"``).
    kind: str
    bound: float
    #: Whether the ratio must be at least (True) or at most (False) the bound.
    at_least: bool
    unit: str = ""
    #: The ratio and the bound are shown in ``unit``: the measured value times this.
    scale: float = 1.0
    #: For ``vs_other``: the case and metric divided by, as ``"case metric"``.
    other: str = ""


TARGETS: list[Target] = [
    Target("map_noop, defaults, worker processes", "map_noop[n=10000,processes=True]", "tasks_per_s",
           "vs_incumbent", 20, True, "x incumbent"),
    Target("map_noop, queuing off", "map_noop[n=10000,processes=True,queuing=False]", "tasks_per_s",
           "vs_incumbent", 8, True, "x incumbent"),
    Target("map_noop, in-process cluster", "map_noop[n=10000,processes=False]", "wall", "x_threads", 2, False,
           "x threads"),
    Target("scheduler CPU per task", "scheduler_cpu_per_task[n=10000]", "cpu_per_task", "vs_incumbent", 20, True,
           "x less than incumbent"),
    Target("scheduler CPU per task (aim)", "scheduler_cpu_per_task[n=10000]", "cpu_per_task", "value", 50,
           False, "us", 1e6),
    Target("submit_chain per dependent link", "submit_chain[n=2000]", "chain_wall", "per_link", 0.5, False,
           "ms per link", 1e3),
    Target("array_sum", "array_sum[chunks=200,size=20000]", "wall", "x_threads", 1.5, False, "x threads"),
    Target("delayed_tree", "delayed_tree[depth=13]", "wall", "x_threads", 2, False, "x threads"),
    Target("100k map: first result", "large_graph[n=100000]", "first_result", "value", 0.3, False, "s"),
    Target("100k map: all done", "large_graph[n=100000]", "total", "value", 10, False, "s"),
    Target("100k map: client peak RSS", "large_graph[n=100000]", "client_peak_rss", "value", 200, False, "MB"),
    Target("1M tasks: scheduler memory per task", "large_graph[n=1000000]", "scheduler_bytes_per_task", "value",
           1024, False, "B"),
    Target("1M tasks: longest scheduler stall", "large_graph[n=1000000]", "max_event_loop_stall", "value", 500,
           False, "ms"),
    Target("worker-to-worker vs local memcpy", "transfer[mb=200]", "worker_to_worker", "vs_copy", 0.5, True,
           "x memcpy"),
]  # fmt: skip


#: The targets of the speed toward the floor (the second set): ``python -m benchmarks targets --set floor``.
FLOOR_TARGETS: list[Target] = [
    Target("map_noop 100k, worker processes", "map_noop[n=100000,processes=True]", "tasks_per_s", "value",
           50_000, True, "tasks/s"),
    Target("map_noop 100k, queuing off", "map_noop[n=100000,processes=True,queuing=False]", "tasks_per_s",
           "vs_incumbent", 10, True, "x incumbent"),
    Target("scheduler CPU per task, command-line cluster", "scheduler_cpu_per_task[n=10000]", "cpu_per_task",
           "value", 10, False, "us", 1e6),
    Target("submit_chain per dependent link", "submit_chain[n=2000]", "chain_wall", "per_link", 0.2, False,
           "ms per link", 1e3),
    Target("map_noop 100k, in-process cluster", "map_noop[n=100000,processes=False]", "wall", "x_threads", 1.1,
           False, "x threads"),
    Target("array_sum", "array_sum[chunks=200,size=20000]", "wall", "x_threads", 1.2, False, "x threads"),
    Target("delayed_tree", "delayed_tree[depth=13]", "wall", "x_threads", 1.2, False, "x threads"),
    Target("worker-to-worker vs local memcpy", "transfer[mb=200]", "worker_to_worker", "vs_copy", 0.5, True,
           "x memcpy"),
    Target("test hosts: map tasks/s, one host over four", "hosts[kind=map,n=20000]", "tasks_per_s_one_host",
           "vs_other", 1.5, False, "x", other="hosts[kind=map,n=20000] tasks_per_s_hosts"),
    Target("test hosts: scheduler CPU per task, four hosts over one", "hosts[kind=map,n=20000]",
           "cpu_per_task_hosts", "vs_other", 1.5, False, "x", other="hosts[kind=map,n=20000] cpu_per_task_one_host"),
    Target("1,000 workers: scheduler CPU per task over 10 workers",
           "many_workers[n=20000,per_process=250,workers=1000]", "cpu_per_task", "vs_other", 1.5, False, "x",
           other="many_workers[n=20000,per_process=10,workers=10] cpu_per_task"),
    Target("1,000 workers: map wall over 10 workers", "many_workers[n=20000,per_process=250,workers=1000]",
           "map_wall", "vs_other", 1.5, False, "x", other="many_workers[n=20000,per_process=10,workers=10] map_wall"),
]  # fmt: skip

#: The sets ``targets --set`` chooses from.
TARGET_SETS: dict[str, list[Target]] = {"first": TARGETS, "floor": FLOOR_TARGETS}


def _metrics(doc: Doc | None) -> dict[tuple[str, str], Metric]:
    found: dict[tuple[str, str], Metric] = {}
    if doc is None:
        return found
    for r in doc.get("results", []):
        if r.get("status") == "ok":
            for m in r["metrics"]:
                found[(r["case"], m["metric"])] = m
    return found


def _n(case: str) -> float:
    inner = case[case.index("[") + 1 : -1]
    params = dict(part.split("=", 1) for part in inner.split(","))
    return float(params["n"])


def evaluate(target: Target, ours: Doc, incumbent: Doc | None) -> dict[str, Any]:
    """The row of one target: both figures, the floor, the ratio and whether the bound is met."""
    mo, mi = _metrics(ours), _metrics(incumbent)
    m = mo.get((target.case, target.metric))
    inc = mi.get((target.case, target.metric))
    row: dict[str, Any] = {
        "target": target.name,
        "case": f"{target.case} {target.metric}",
        "ours": m["median"] if m else None,
        "incumbent": inc["median"] if inc else None,
        "threads": (m or inc or {}).get("floor", {}).get("threads", {}).get("min"),
        "ratio": None,
        "bound": f"{'>=' if target.at_least else '<='} {target.bound:g} {target.unit}",
        "met": "not measured",
    }
    ratio: float | None = None
    other_case, _, other_metric = target.other.rpartition(" ")
    other = (other_case, other_metric)
    compute: dict[str, Callable[[], float | None]] = {
        "vs_incumbent": lambda: (
            None
            if not (m and inc)
            else (m["median"] / inc["median"] if m["higher_is_better"] else inc["median"] / m["median"])
        ),
        "x_threads": lambda: m.get("ratio_threads") if m else None,
        "value": lambda: m["median"] if m else None,
        "per_link": lambda: m["median"] / _n(target.case) if m else None,
        "vs_copy": lambda: (
            m["median"] / mo[(target.case, "local_copy")]["median"] if m and (target.case, "local_copy") in mo else None
        ),
        "vs_other": lambda: m["median"] / mo[other]["median"] if m and other in mo and mo[other]["median"] else None,
    }
    ratio = compute[target.kind]()
    if ratio is not None:
        ratio *= target.scale
        row["ratio"] = ratio
        met = ratio >= target.bound if target.at_least else ratio <= target.bound
        row["met"] = "yes" if met else "no"
    return row


def targets_table(ours: Doc, incumbent: Doc | None, markdown: bool = False, which: str = "first") -> str:
    """Every target of the set ``which`` (a key of :data:`TARGET_SETS`) as a table (text or Markdown)."""
    headers = ["target", "case / metric", "this project", "incumbent", "threads floor", "ratio", "target", "met"]
    rows = []
    for t in TARGET_SETS[which]:
        r = evaluate(t, ours, incumbent)
        rows.append([r["target"], r["case"], r["ours"], r["incumbent"], r["threads"], r["ratio"], r["bound"], r["met"]])
    return (markdown_table if markdown else table)(headers, rows)
