"""The regression gate: compare ratios to the threads floor against a committed baseline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from benchmarks.report import table

#: A ratio may grow by this fraction over the baseline before the gate fails.
DEFAULT_THRESHOLD = 0.35


def _gated(
    baseline: dict[str, Any], results: dict[str, Any], threshold: float
) -> Iterator[tuple[str, str, float, float | None, float]]:
    """``(case, metric, baseline ratio, current ratio or None, limit)`` for every gated metric of the baseline."""
    current = {
        (r["case"], m["metric"]): m.get("ratio_threads") for r in results["results"] for m in r.get("metrics", [])
    }
    for r in baseline["results"]:
        if r["status"] != "ok":
            continue
        for m in r["metrics"]:
            if not m.get("gate") or m.get("ratio_threads") is None:
                continue
            old = float(m["ratio_threads"])
            yield r["case"], m["metric"], old, current.get((r["case"], m["metric"])), old * (1 + threshold)


def failing_cases(baseline: dict[str, Any], results: dict[str, Any], threshold: float = DEFAULT_THRESHOLD) -> list[str]:
    """Names of the cases with a gated ratio over its limit (or not measured)."""
    bad: list[str] = []
    for case, _, _, new, limit in _gated(baseline, results, threshold):
        if (new is None or new > limit) and case not in bad:
            bad.append(case)
    return bad


def keep_best(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """``first`` with each case's metrics replaced by ``second``'s where its ratio is lower.

    Used for one re-run of failing cases: noise rarely strikes the same case
    twice, a real regression does.
    """
    import copy

    out = copy.deepcopy(first)
    again = {r["case"]: r for r in second["results"]}
    for i, r in enumerate(out["results"]):
        r2 = again.get(r["case"])
        if r2 is None or r2["status"] != "ok":
            continue
        if r["status"] != "ok":
            out["results"][i] = copy.deepcopy(r2)
            continue
        by_name = {m["metric"]: m for m in r2["metrics"]}
        for j, m in enumerate(r["metrics"]):
            m2 = by_name.get(m["metric"])
            if m2 is None or m2.get("ratio_threads") is None:
                continue
            if m.get("ratio_threads") is None or m2["ratio_threads"] < m["ratio_threads"]:
                r["metrics"][j] = copy.deepcopy(m2)
    return out


def gate(baseline: dict[str, Any], results: dict[str, Any], threshold: float = DEFAULT_THRESHOLD) -> tuple[bool, str]:
    """Return ``(passed, report)``.

    Every gated metric (``"gate": true``) of the baseline with a ratio to the
    threads floor must be present in ``results`` and its ratio must not exceed
    ``baseline ratio * (1 + threshold)``.  A case that errored or timed out in
    ``results`` but was measured in the baseline fails the gate too.
    """
    status = {r["case"]: r["status"] for r in results["results"]}
    rows: list[list[Any]] = []
    failed = False
    for case, metric, old, new, limit in _gated(baseline, results, threshold):
        if new is None:
            verdict = f"FAIL ({status.get(case, 'missing')})"
            failed = True
        elif new > limit:
            verdict = f"FAIL (+{(new / old - 1) * 100:.0f} %)"
            failed = True
        else:
            verdict = f"ok ({(new / old - 1) * 100:+.0f} %)"
        rows.append([case, metric, old, new, limit, verdict])
    headers = ["case", "metric", "baseline x threads", "now x threads", "limit", "verdict"]
    summary = "PASSED" if not failed else "FAILED"
    text = "\n".join(
        [
            f"regression gate: ratio distributed/threads may grow by at most {threshold * 100:.0f} % over the baseline",
            table(headers, rows),
            f"gate {summary} ({len(rows)} ratios checked)",
        ]
    )
    return not failed, text


def merge_baseline(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """A baseline from several runs of the same set: for each metric, the run with the largest ratio.

    Taking the slowest of a few runs keeps ordinary noise from failing the gate.
    """
    import copy

    if not docs:
        raise ValueError("need at least one result file")
    base = copy.deepcopy(docs[0])
    for r in base["results"]:
        for m in r.get("metrics", []):
            for other in docs[1:]:
                for r2 in other["results"]:
                    if r2["case"] != r["case"] or r2["status"] != "ok":
                        continue
                    for m2 in r2["metrics"]:
                        if (
                            m2["metric"] == m["metric"]
                            and m2.get("ratio_threads") is not None
                            and (m.get("ratio_threads") is None or m2["ratio_threads"] > m["ratio_threads"])
                        ):
                            m.clear()
                            m.update(copy.deepcopy(m2))
        if r["status"] != "ok":
            for other in docs[1:]:
                for r2 in other["results"]:
                    if r2["case"] == r["case"] and r2["status"] == "ok":
                        r.clear()
                        r.update(copy.deepcopy(r2))
                        break
                if r["status"] == "ok":
                    break
    base["merged_from"] = [d.get("created") for d in docs]
    return base
