"""Run cases, each in its own subprocess with a timeout, and collect one JSON document."""

from __future__ import annotations

import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import SCHEMA_VERSION
from benchmarks.clusters import BENCH_ROOT, check_no_shadowing, child_env
from benchmarks.env import distributed_file, environment
from benchmarks.suites import Case, case_name


def summarize(values: list[float]) -> dict[str, float | None]:
    clean = [v for v in values if v == v]  # drop NaN
    if not clean:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean)}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def summarize_metric(m: dict[str, Any]) -> dict[str, Any]:
    """A raw metric from a workload, with median/min/max and ratios to the floors."""
    out: dict[str, Any] = {
        "metric": m["metric"],
        "unit": m["unit"],
        "repeats": len(m["values"]),
        **summarize(m["values"]),
        "values": m["values"],
        "gate": m["gate"],
        "higher_is_better": m["higher_is_better"],
        "note": m["note"],
        "floor": {},
        "ratio_threads": None,
        "ratio_sync": None,
    }
    # Ratios compare the best run on each side: the figure least moved by
    # other load on the machine, on either side.
    for sched, vals in m["floor"].items():
        s = summarize(vals)
        out["floor"][sched] = {**s, "values": vals}
        if not m["higher_is_better"]:
            out[f"ratio_{sched}"] = _ratio(out["min"], s["min"])
    return out


def run_one_inline(workload: str, params: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Body of ``python -m benchmarks _one``: run one case here and return its record."""
    from benchmarks.workloads import WORKLOADS

    t0 = time.perf_counter()
    try:
        metrics = WORKLOADS[workload](params, repeat)
        status, error = "ok", None
    except Exception:
        metrics, status, error = [], "error", traceback.format_exc()
    return {
        "status": status,
        "error": error,
        "seconds": time.perf_counter() - t0,
        "distributed_file": distributed_file(),
        "metrics": [dict(m) for m in metrics],
    }


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the case's process group (it leads its own session, with its cluster under it)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_case(c: Case, repeat: int | None, log: Any = sys.stderr, root: Path = BENCH_ROOT) -> dict[str, Any]:
    """Run one case in a subprocess; never raises for a failing or hanging case.

    The subprocess starts in ``root`` with ``root`` first on its path, so it
    runs the ``benchmarks`` and ``distributed`` packages found there (another
    tree for the gate's reference side).
    """
    reps = repeat if repeat is not None else c["repeat"]
    name = case_name(c["workload"], c["params"])
    record: dict[str, Any] = {
        "workload": c["workload"],
        "case": name,
        "params": c["params"],
        "repeat": reps,
        "timeout": c["timeout"],
    }
    print(f"  {name} ...", end="", file=log, flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-case-") as d:
        result_file = Path(d) / "result.json"
        stderr_file = Path(d) / "stderr.txt"
        cmd = [
            sys.executable,
            "-m",
            "benchmarks",
            "_one",
            c["workload"],
            json.dumps(c["params"]),
            "--repeat",
            str(reps),
            "--result-file",
            str(result_file),
        ]
        with open(stderr_file, "wb") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env(root), cwd=str(root), start_new_session=True
            )
            try:
                rc = proc.wait(c["timeout"])
                timed_out = False
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                rc, timed_out = proc.returncode, True
            else:
                # The case's own children (cluster processes) must not outlive it.
                _kill_group(proc)
        stderr_tail = stderr_file.read_text(errors="replace")[-3000:]
        raw: dict[str, Any] | None = None
        if result_file.exists():
            try:
                raw = json.loads(result_file.read_text())
            except ValueError:
                raw = None
    elapsed = time.perf_counter() - t0
    record["seconds"] = elapsed
    if timed_out:
        record.update(status="timeout", error=f"no result within {c['timeout']:.0f} s\n{stderr_tail}", metrics=[])
    elif raw is None:
        record.update(status="error", error=f"exit code {rc}, no result\n{stderr_tail}", metrics=[])
    else:
        record["status"] = raw["status"]
        record["error"] = raw["error"]
        record["distributed_file"] = raw.get("distributed_file")
        record["metrics"] = [summarize_metric(m) for m in raw["metrics"]]
    print(f" {record['status']} in {elapsed:.1f}s", file=log, flush=True)
    if record["status"] != "ok":
        first = (record["error"] or "").strip().splitlines()
        print("    " + (first[-1] if first else "unknown error"), file=log, flush=True)
    return record


def run_suite(cases: list[Case], suite: str, repeat: int | None, argv: list[str]) -> dict[str, Any]:
    check_no_shadowing()
    env = environment()
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "suite": suite,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks " + " ".join(argv),
        **env,
        "results": [],
    }
    print(
        f"distributed {env['packages']['distributed']} ({env['packages']['distributed_origin']}), "
        f"dask {env['packages']['dask']}, {env['machine']['cpu_count']} CPUs",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    for c in cases:
        doc["results"].append(run_case(c, repeat))
    doc["total_seconds"] = time.perf_counter() - t0
    return doc
