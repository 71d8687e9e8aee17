"""The regression gate: this checkout's times against the baseline's.

Two ways to compare, the first preferred:

* side by side (:func:`gate_side_by_side`): the baseline's commit ran the
  same cases on this machine in the same run (see :mod:`benchmarks.reference`);
  each gated time may be at most ``1 + threshold`` times the reference's.
* stored ratios (:func:`gate`): without that commit, each gated ratio to the
  threads floor may be at most ``1 + threshold`` times the ratio recorded in
  the baseline file, on whatever machine recorded it.
"""

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


def best_value(m: dict[str, Any]) -> float | None:
    """A metric's best run: the smallest, or the largest where higher is better."""
    v = m.get("max") if m.get("higher_is_better") else m.get("min")
    return None if v is None else float(v)


def _badness(m: dict[str, Any], by: str) -> float | None:
    """What :func:`keep_best` minimises: the ratio to the threads floor, or the best run (``by="time"``)."""
    if by == "ratio_threads":
        r = m.get("ratio_threads")
        return None if r is None else float(r)
    v = best_value(m)
    if v is None:
        return None
    return -v if m.get("higher_is_better") else v


def keep_best(first: dict[str, Any], second: dict[str, Any], by: str = "ratio_threads") -> dict[str, Any]:
    """``first`` with each case's metrics replaced by ``second``'s where they did better.

    ``by`` is ``"ratio_threads"`` (a lower ratio to the threads floor) or
    ``"time"`` (a better best run).  Used for re-runs of failing cases: noise
    rarely strikes the same case twice, a real regression does.
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
            new = None if m2 is None else _badness(m2, by)
            if new is None:
                continue
            old = _badness(m, by)
            if old is None or new < old:
                r["metrics"][j] = copy.deepcopy(m2)
    return out


def _verdict(old: float, new: float, past_limit: bool) -> str:
    """A gate table's verdict: ``ok (+5 %)`` or ``FAIL (+44 %)``, the change from ``old`` to ``new``."""
    change = f"{(new / old - 1) * 100:+.0f} %"
    return f"FAIL ({change})" if past_limit else f"ok ({change})"


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
        else:
            failed |= new > limit
            verdict = _verdict(old, new, new > limit)
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


def gated_cases(baseline: dict[str, Any]) -> list[str]:
    """Names of the baseline's cases that have a gated metric, in its order."""
    names: list[str] = []
    for case, _, _, _, _ in _gated(baseline, {"results": []}, 0.0):
        if case not in names:
            names.append(case)
    return names


def _side_by_side(
    baseline: dict[str, Any], reference: dict[str, Any], results: dict[str, Any], threshold: float
) -> Iterator[tuple[str, str, float | None, float | None, float | None, bool]]:
    """``(case, metric, reference best, current best, limit, higher is better)`` per gated metric."""

    def bests(doc: dict[str, Any]) -> dict[tuple[str, str], float | None]:
        return {
            (r["case"], m["metric"]): best_value(m)
            for r in doc["results"]
            if r.get("status") == "ok"
            for m in r.get("metrics", [])
        }

    ref, now = bests(reference), bests(results)
    higher = {
        (r["case"], m["metric"]): bool(m.get("higher_is_better")) for r in baseline["results"] for m in r["metrics"]
    }
    for case, metric, _, _, _ in _gated(baseline, {"results": []}, 0.0):
        old, new, up = ref.get((case, metric)), now.get((case, metric)), higher[(case, metric)]
        limit = None if old is None else (old / (1 + threshold) if up else old * (1 + threshold))
        yield case, metric, old, new, limit, up


def failing_side_by_side(
    baseline: dict[str, Any], reference: dict[str, Any], results: dict[str, Any], threshold: float = DEFAULT_THRESHOLD
) -> list[str]:
    """Cases with a gated metric past its limit, or not measured on either side."""
    bad: list[str] = []
    for case, _, old, new, limit, up in _side_by_side(baseline, reference, results, threshold):
        past = limit is not None and new is not None and (new < limit if up else new > limit)
        if (old is None or new is None or past) and case not in bad:
            bad.append(case)
    return bad


def gate_side_by_side(
    baseline: dict[str, Any], reference: dict[str, Any], results: dict[str, Any], threshold: float = DEFAULT_THRESHOLD
) -> tuple[bool, str]:
    """Return ``(passed, report)`` comparing this checkout with the reference run beside it.

    Every gated metric of the baseline must have been measured on both sides,
    and its best run here may be at most ``1 + threshold`` times the
    reference's (at least ``1 / (1 + threshold)`` times, where higher is
    better).  A case that failed on the reference side fails the gate too: it
    cannot be compared.
    """
    rows: list[list[Any]] = []
    failed = False
    for case, metric, old, new, limit, up in _side_by_side(baseline, reference, results, threshold):
        if old is None or new is None or limit is None:
            verdict = "FAIL (not measured on the reference side)" if old is None else "FAIL (not measured)"
            failed = True
        else:
            past = new < limit if up else new > limit
            failed |= past
            verdict = _verdict(old, new, past)
        rows.append([case, metric, old, new, limit, verdict])
    headers = ["case", "metric", "reference best", "now best", "limit", "verdict"]
    text = "\n".join(
        [
            f"regression gate, side by side: a gated time may grow by at most {threshold * 100:.0f} % "
            f"over the reference commit's ({str(reference.get('commit', '?'))[:12]}) on this machine",
            table(headers, rows),
            f"gate {'PASSED' if not failed else 'FAILED'} ({len(rows)} times checked)",
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
