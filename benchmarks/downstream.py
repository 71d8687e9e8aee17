"""Other projects' own test suites, run against this project and against released distributed.

``python -m benchmarks downstream`` builds two virtual environments that differ
only in which ``distributed`` they hold (this checkout, installed editable, or
the pinned release), installs each suite's pinned project and test requirements
in both, runs each suite's tests in both with pytest, and prints the counts side
by side.  A suite whose tests do not ship in its package is cloned at its release
tag (``--source NAME=URL`` points a clone elsewhere, e.g. at a local mirror).

The environments and clones are kept in ``--workdir`` (``.downstream`` in the
checkout) and reused; ``--fresh`` builds them again.  Nothing here is needed by
the package itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The released distributed to compare with, and the dask both environments get (the release pins it).
RELEASED_DISTRIBUTED = "2026.8.0"
DASK = "2026.8.0"

#: Installed in both environments, whatever the suite.
COMMON = ("pytest", "pytest-timeout", f"dask[array,dataframe]=={DASK}")


@dataclass(frozen=True)
class Suite:
    """One project's tests: what to install, where the tests are, and how to run them."""

    name: str
    #: Pinned requirements: the project and what its tests import.
    packages: tuple[str, ...]
    #: pytest arguments naming the tests: paths in the clone, ``--pyargs`` modules, or paths in an installed
    #: package (``{streamz}/dataframe/tests``: the directory of package ``streamz`` in the environment).
    tests: tuple[str, ...]
    #: Git URL and tag of the project's sources, when its tests do not ship in its package.
    repo: str | None = None
    tag: str | None = None
    #: Further pytest arguments (a ``-k`` subset).
    pytest_args: tuple[str, ...] = ()
    #: Seconds for the whole suite in one environment.
    timeout: float = 1800
    #: Directories of the clone to remove: its package's sources, which would shadow the installed package
    #: (pytest puts the clone's root on ``sys.path`` for its ``tests`` package).
    shadows: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


SUITES: dict[str, Suite] = {
    s.name: s
    for s in [
        Suite(
            "xarray",
            ("xarray==2026.9.0", "netCDF4", "h5netcdf", "h5py", "cftime", "zarr", "scipy"),
            ("--pyargs", "xarray.tests.test_distributed"),
        ),
        Suite(
            "streamz",
            ("streamz==0.6.4",),
            ("{streamz}/tests/test_dask.py", "{streamz}/dataframe/tests"),
        ),
        Suite(
            "xgboost",
            ("xgboost==3.2.0", "scikit-learn==1.6.1", "scipy", "hypothesis", "pandas"),
            ("tests/test_distributed/test_with_dask/test_with_dask.py",),
            repo="https://github.com/dmlc/xgboost.git",
            tag="v3.2.0",
        ),
        Suite(
            "lightgbm",
            ("lightgbm==4.6.0", "scikit-learn==1.6.1", "scipy", "pandas"),
            ("tests/python_package_test/test_dask.py",),
            repo="https://github.com/microsoft/LightGBM.git",
            tag="v4.6.0",
            # The subset: one tree learner and boosting type of the large parametrized tests, and every other test.
            pytest_args=("-k", "data-gbdt or not (test_classifier or test_regressor or test_ranker)"),
        ),
        Suite(
            "dask-ml",
            ("dask-ml==2025.1.0", "scikit-learn==1.6.1", "scipy", "pandas", "pytest-mock"),
            # The test files that use a client (Keras and PyTorch ones left out: they need those libraries).
            (
                "tests/feature_extraction/test_text.py",
                "tests/model_selection/dask_searchcv/test_model_selection.py",
                "tests/model_selection/test_hyperband.py",
                "tests/model_selection/test_incremental.py",
                "tests/model_selection/test_incremental_warns.py",
                "tests/model_selection/test_successive_halving.py",
                "tests/test_incremental.py",
                "tests/test_model_selection.py",
            ),
            repo="https://github.com/dask/dask-ml.git",
            tag="v2025.1.0",
            shadows=("dask_ml",),
        ),
    ]
}

SIDES = ("released", "this")


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kwargs)


def build_env(workdir: Path, side: str, suites: list[Suite], fresh: bool) -> Path:
    """The virtual environment of ``side``, with every suite's requirements; its Python."""
    venv = workdir / f"venv-{side}"
    python = venv / "bin" / "python"
    stamp = venv / "requirements.json"
    distributed = str(ROOT) if side == "this" else f"distributed=={RELEASED_DISTRIBUTED}"
    wanted = sorted({*COMMON, *(p for s in suites for p in s.packages)})
    install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if fresh or not stamp.exists() or json.loads(stamp.read_text()) != {"distributed": distributed, "pkgs": wanted}:
        if venv.exists():
            _run(["rm", "-rf", str(venv)])
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([*install, distributed, *wanted])
        stamp.write_text(json.dumps({"distributed": distributed, "pkgs": wanted}))
    elif side == "this":
        # Installed, not editable: a suite's own directory named ``distributed`` (LightGBM's tests have one)
        # would shadow an editable install, as a namespace package.  So the checkout is installed anew each run.
        _run([*install, "--no-deps", "--force-reinstall", distributed])
    return python


def checkout(workdir: Path, suite: Suite, sources: dict[str, str]) -> Path:
    """Where the suite's tests run from: a clone at its tag, or an empty directory for shipped tests."""
    dest = workdir / "src" / suite.name
    if suite.repo is None:
        dest.mkdir(parents=True, exist_ok=True)
        return dest
    if not (dest / ".git").exists():
        url = sources.get(suite.name, suite.repo)
        _run(["git", "clone", "-q", "--depth", "1", "--branch", str(suite.tag), url, str(dest)])
    for shadow in suite.shadows:
        if (dest / shadow).exists():
            _run(["rm", "-rf", str(dest / shadow)])
    return dest


_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")


def parse_counts(output: str) -> dict[str, int]:
    """The counts in pytest's last summary line (``3 failed, 20 passed, 1 skipped in 4.2s``)."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "xfailed": 0, "xpassed": 0}
    for line in reversed(output.splitlines()):
        found = _COUNT.findall(line)
        if found and (" in " in line or line.startswith("=")):
            for n, what in found:
                counts["error" if what.startswith("error") else what] += int(n)
            break
    return counts


_PACKAGE_DIR = re.compile(r"\{([\w.]+)\}")


def resolve_tests(python: Path, tests: tuple[str, ...]) -> list[str]:
    """``tests`` with each ``{package}`` replaced by that package's directory in ``python``'s environment."""

    def package_dir(match: re.Match[str]) -> str:
        code = f"import importlib.util, os; print(os.path.dirname(importlib.util.find_spec({match[1]!r}).origin))"
        return _run([str(python), "-c", code]).stdout.strip()

    return [_PACKAGE_DIR.sub(package_dir, t) for t in tests]


def run_suite(python: Path, suite: Suite, cwd: Path, log: Path) -> dict[str, Any]:
    """Run ``suite`` with ``python``; its counts, wall time, and the tests that failed."""
    cmd = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--timeout=300",
        "-rfE",
        *suite.pytest_args,
        *resolve_tests(python, suite.tests),
    ]
    start = time.monotonic()
    env = {**os.environ, **suite.env, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run(cmd, cwd=cwd, text=True, capture_output=True, timeout=suite.timeout, env=env, check=False)
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        # With text=True the partial output is text, but the exception's fields are typed as bytes too.
        partial = [x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)]
        output = f"{''.join(partial)}\nTIMEOUT after {suite.timeout} s"
    log.write_text(output)
    failed = [
        line.split(" ", 1)[1].split(" - ")[0] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))
    ]
    return {"counts": parse_counts(output), "seconds": round(time.monotonic() - start, 1), "failed": failed}


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A Markdown table: each suite's passed / failed / skipped on each side."""
    lines = ["| suite | released distributed | this project |", "|---|---|---|"]
    for name, sides in results.items():
        cells = []
        for side in SIDES:
            r = sides.get(side)
            if r is None:
                cells.append("not run")
                continue
            c = r["counts"]
            cells.append(f"{c['passed']} passed, {c['failed'] + c['error']} failed, {c['skipped']} skipped")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``downstream`` command's options."""
    parser.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument("--sides", default=",".join(SIDES), help="released, this, or both (the default)")
    parser.add_argument("--workdir", default=str(ROOT / ".downstream"), help="environments, clones and logs")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=URL", help="clone NAME from URL")
    parser.add_argument("--fresh", action="store_true", help="build the environments and clones again")
    parser.add_argument("--out", help="write the results as JSON")


def cmd_downstream(args: argparse.Namespace) -> int:
    """Run the suites on each side and print the table; 2 for an unknown suite or side."""
    names = [n.strip() for n in args.suites.split(",") if n.strip()]
    sides = [n.strip() for n in args.sides.split(",") if n.strip()]
    unknown = [n for n in names if n not in SUITES] + [s for s in sides if s not in SIDES]
    if unknown:
        print(f"unknown suites or sides: {', '.join(unknown)}", file=sys.stderr)
        return 2
    suites = [SUITES[n] for n in names]
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sources = dict(s.split("=", 1) for s in args.source)
    results: dict[str, dict[str, dict[str, Any]]] = {s.name: {} for s in suites}
    for side in sides:
        print(f"building the {side} environment ...", flush=True)
        python = build_env(workdir, side, suites, args.fresh)
        for suite in suites:
            cwd = checkout(workdir, suite, sources)
            log = workdir / f"{suite.name}-{side}.log"
            print(f"  {suite.name} ({side}) ...", end=" ", flush=True)
            r = run_suite(python, suite, cwd, log)
            results[suite.name][side] = r
            c = r["counts"]
            print(f"{c['passed']} passed, {c['failed'] + c['error']} failed in {r['seconds']} s (log: {log})")
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0
