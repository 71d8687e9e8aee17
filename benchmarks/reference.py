"""The gate's reference side: the baseline's own code, measured on this machine in the same run.

A ratio recorded on one machine is a poor bar on another: the threads floor and
the scheduler's round trips do not slow down alike when the hardware changes
(the baseline's ``submit_chain`` round trip was 4.2x the floor where it was
recorded and 4.4x to 7.1x on a slower machine, for the same code). So when the
clone holds the commit the baseline was measured at, the gate runs that
commit's ``distributed`` with this checkout's ``benchmarks`` beside it, case by
case with this checkout's, and compares the two directly.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from benchmarks.clusters import BENCH_ROOT
from benchmarks.runner import run_case
from benchmarks.suites import Case


def has_commit(commit: str, repo: Path = BENCH_ROOT) -> bool:
    """Whether ``repo`` is a git checkout that holds ``commit``."""
    if shutil.which("git") is None:
        return False
    done = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return done.returncode == 0


def reference_tree(commit: str, dest: Path, repo: Path = BENCH_ROOT) -> Path:
    """Write ``commit``'s ``distributed`` package and this checkout's ``benchmarks`` into ``dest``.

    The workloads are this checkout's, so both sides time the same code paths;
    only the package under test differs.
    """
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "distributed"],
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    shutil.copytree(repo / "benchmarks", dest / "benchmarks", ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    return dest


def run_side_by_side(
    cases: list[Case], tree: Path, log: Any = sys.stderr
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each case on the reference ``tree`` and then on this checkout: ``(reference records, records)``.

    Alternating case by case keeps a change of load on the machine from
    landing on one side only.
    """
    ref: list[dict[str, Any]] = []
    this: list[dict[str, Any]] = []
    for c in cases:
        print("  reference", end="", file=log, flush=True)
        ref.append(run_case(c, None, log, root=tree))
        print("  this     ", end="", file=log, flush=True)
        this.append(run_case(c, None, log))
    return ref, this
