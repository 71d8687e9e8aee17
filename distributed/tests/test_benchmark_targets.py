"""``python -m benchmarks targets``: how a target's ratio is formed from result files."""

from __future__ import annotations

from typing import Any

from benchmarks.targets import FLOOR_TARGETS, TARGET_SETS, Target, evaluate, targets_table


def _doc(*results: tuple[str, str, float]) -> dict[str, Any]:
    return {
        "results": [
            {
                "case": case,
                "status": "ok",
                "metrics": [{"metric": metric, "median": median, "higher_is_better": metric.startswith("tasks")}],
            }
            for case, metric, median in results
        ]
    }


def test_ratio_to_another_case_of_ours() -> None:
    target = Target("spread over together", "hosts[kind=map]", "tasks_per_s_one_host", "vs_other", 1.5, False, "x",
                    other="hosts[kind=map] tasks_per_s_hosts")  # fmt: skip
    ours = _doc(
        ("hosts[kind=map]", "tasks_per_s_one_host", 12_000.0), ("hosts[kind=map]", "tasks_per_s_hosts", 6_000.0)
    )
    row = evaluate(target, ours, None)
    assert row["ratio"] == 2.0
    assert row["met"] == "no"
    ours = _doc(
        ("hosts[kind=map]", "tasks_per_s_one_host", 12_000.0), ("hosts[kind=map]", "tasks_per_s_hosts", 9_000.0)
    )
    assert evaluate(target, ours, None)["met"] == "yes"
    # The other figure missing: not measured, not met or failed.
    assert evaluate(target, _doc(("hosts[kind=map]", "tasks_per_s_one_host", 1.0)), None)["met"] == "not measured"


def test_floor_set_values_and_incumbent_ratios() -> None:
    ours = _doc(
        ("map_noop[n=100000,processes=True]", "tasks_per_s", 14_000.0),
        ("map_noop[n=100000,processes=True,queuing=False]", "tasks_per_s", 15_000.0),
        ("scheduler_cpu_per_task[n=10000]", "cpu_per_task", 36e-6),
        ("submit_chain[n=2000]", "chain_wall", 0.3),
    )
    incumbent = _doc(("map_noop[n=100000,processes=True,queuing=False]", "tasks_per_s", 1_000.0))
    rows = {t.name: evaluate(t, ours, incumbent) for t in FLOOR_TARGETS}
    assert rows["map_noop 100k, worker processes"]["met"] == "no"  # 14,000 < 50,000 tasks/s
    assert rows["map_noop 100k, queuing off"]["ratio"] == 15.0
    assert rows["map_noop 100k, queuing off"]["met"] == "yes"
    assert abs(rows["scheduler CPU per task, command-line cluster"]["ratio"] - 36.0) < 1e-9
    assert abs(rows["submit_chain per dependent link"]["ratio"] - 0.15) < 1e-9
    assert rows["array_sum"]["met"] == "not measured"
    table = targets_table(ours, incumbent, markdown=True, which="floor")
    assert table.count("\n") == len(FLOOR_TARGETS) + 1
    assert set(TARGET_SETS) == {"first", "floor"}
