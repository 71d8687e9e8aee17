"""``python -m benchmarks profile``: reading py-spy's raw stacks."""

from __future__ import annotations

from pathlib import Path

from benchmarks.profile import summarize_stacks


def test_own_and_inclusive_samples_by_function(tmp_path: Path) -> None:
    raw = tmp_path / "worker.txt"
    raw.write_text(
        "main (a.py:1);handle (b.py:10);decode (c.py:5) 6\n"
        "main (a.py:1);handle (b.py:12);handle (b.py:30);run (d.py:2) 3\n"  # recursion counts once
        "main (a.py:1);idle (e.py:7) 1\n"
        "not a stack line\n"
    )
    doc = summarize_stacks(raw, top=3)
    assert doc["samples"] == 10
    assert [(f["function"], f["samples"]) for f in doc["own"]] == [
        ("decode (c.py)", 6),
        ("run (d.py)", 3),
        ("idle (e.py)", 1),
    ]
    inclusive = {f["function"]: f["samples"] for f in doc["inclusive"]}
    assert inclusive == {"main (a.py)": 10, "handle (b.py)": 9, "decode (c.py)": 6}
    assert doc["own"][0]["share"] == 0.6
