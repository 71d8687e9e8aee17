"""``python -m benchmarks``: run the suite, compare two result files, or gate on a baseline.

Commands
--------
``run [--quick|--full] [--out results.json] [--only name,...] [--exclude text;...] [--repeat N]``
    Run a set of workloads (each in its own subprocess, with a timeout), print
    a table and write JSON.
``compare A.json B.json``
    Side-by-side medians and ratios (e.g. this project against another
    ``distributed``).
``gate --baseline benchmarks/baseline.json --results results.json [--threshold 0.35] [--rerun N]``
    Run the gated cases on the baseline's commit, on this machine, and exit 1 when a
    gated time here grew by more than the threshold over that reference (``--stored``,
    or a clone without that commit: compare with the ratios stored in the baseline).
``baseline RUN.json [RUN.json ...] --out benchmarks/baseline.json``
    Write a baseline from one or more runs, keeping the largest ratio of each metric.
``soak [--minutes 10] [--faults kill,freeze,cut,disk] [--kill-every 20] [--out soak.json]``
    A mixed workload on worker processes while faults hit the workers (a SIGKILL every
    N seconds; a freeze, a cut link, a full disk in turn); checks every result, times
    each recovery, samples memory every minute, and reports what was lost and recomputed.
``profile [--n 100000] [--workers 2] [--rate 200] [--out DIR]``
    Map no-op tasks on a command-line cluster and report each process's CPU per task (scheduler,
    workers, client) and, with py-spy on PATH, its top functions; raw stacks for flame graphs.
``downstream [--suites xarray,streamz,...] [--sides released,this] [--source NAME=URL] [--out F]``
    Other projects' own test suites (xarray, streamz, xgboost, LightGBM, dask-ml), pinned, run
    in two environments that differ only in their ``distributed``: the release and this checkout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.suites import Case


def _load(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks.report import results_table
    from benchmarks.runner import run_suite
    from benchmarks.suites import SUITES

    suite = "full" if args.full else "quick"
    cases = SUITES[suite]
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = wanted - {c["workload"] for c in cases}
        if unknown:
            print(f"unknown workloads for the {suite} set: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        cases = [c for c in cases if c["workload"] in wanted]
    if args.exclude:
        from benchmarks.suites import case_name

        drop = [x.strip() for x in args.exclude.split(";") if x.strip()]
        cases = [c for c in cases if not any(x in case_name(c["workload"], c["params"]) for x in drop)]
    doc = run_suite(cases, suite, args.repeat, argv)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(results_table(doc))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from benchmarks.report import compare_table

    print(compare_table(_load(args.a), _load(args.b), markdown=args.markdown))
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    from benchmarks.targets import targets_table

    incumbent = _load(args.incumbent) if args.incumbent else None
    print(targets_table(_load(args.ours), incumbent, markdown=args.markdown, which=args.set))
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    from benchmarks.reference import has_commit

    if args.results and args.out:
        raise SystemExit("gate: --out writes the results the gate measures; with --results nothing is measured here")
    if args.stored and args.reference:
        raise SystemExit("gate: --stored compares with the stored ratios, --reference with a commit: choose one")
    baseline = _load(args.baseline)
    results = _load(args.results) if args.results else None
    commit = args.reference or baseline.get("commit")
    if not args.stored and commit and not has_commit(commit):
        print(
            f"the baseline's commit {commit[:12]} is not in this clone: "
            "comparing with the ratios stored in the baseline file instead",
            flush=True,
        )
    if args.stored or not commit or not has_commit(commit):
        if results is None:
            results = _run_set(args, baseline.get("suite", "quick"))
        return _gate_stored(args, baseline, results)
    return _gate_side_by_side(args, baseline, results, commit)


def _run_set(args: argparse.Namespace, suite: str) -> dict[str, Any]:
    """Run the whole set here, as ``run`` does, for a gate given no results file."""
    from benchmarks.report import results_table
    from benchmarks.runner import run_suite
    from benchmarks.suites import SUITES

    doc = run_suite(SUITES[suite], suite, None, ["gate", "--suite", suite])
    _report(args, doc, results_table)
    return doc


def _report(args: argparse.Namespace, doc: dict[str, Any], results_table: Any) -> None:
    print(results_table(doc))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")


def _cases_named(suite: str, names: set[str]) -> list[Case]:
    from benchmarks.suites import SUITES, case_name

    return [c for c in SUITES[suite] if case_name(c["workload"], c["params"]) in names]


def _gate_stored(args: argparse.Namespace, baseline: dict[str, Any], results: dict[str, Any]) -> int:
    from benchmarks.gate import failing_cases, gate, keep_best
    from benchmarks.runner import run_suite

    passed, text = gate(baseline, results, args.threshold)
    print(text)
    suite = results.get("suite", "quick")
    for attempt in range(1, args.rerun + 1):
        if passed:
            break
        cases = _cases_named(suite, set(failing_cases(baseline, results, args.threshold)))
        print(
            f"\nre-running {len(cases)} failing case(s) (attempt {attempt} of {args.rerun}); "
            "each ratio keeps its best run",
            flush=True,
        )
        results = keep_best(results, run_suite(cases, suite, None, ["gate", "--rerun"]))
        passed, text = gate(baseline, results, args.threshold)
        print(text)
    return 0 if passed else 1


def _gate_side_by_side(
    args: argparse.Namespace, baseline: dict[str, Any], results: dict[str, Any] | None, commit: str
) -> int:
    """Gate against ``commit`` run on this machine now.

    Given no results file, the whole set runs here: each gated case on the
    reference and then on this checkout, the other cases on this checkout
    only.  Given one, only the reference side runs, once per gated case.
    """
    import tempfile
    import time

    from benchmarks.gate import failing_side_by_side, gate_side_by_side, gated_cases, keep_best
    from benchmarks.reference import reference_tree, run_side_by_side
    from benchmarks.report import results_table
    from benchmarks.runner import run_case, run_suite
    from benchmarks.suites import SUITES, case_name

    suite = results.get("suite", "quick") if results is not None else baseline.get("suite", "quick")
    gated = set(gated_cases(baseline))
    with tempfile.TemporaryDirectory(prefix="bench-reference-") as d:
        tree = reference_tree(commit, Path(d))
        print(f"reference: the baseline's commit {commit[:12]}, on the {len(gated)} gated case(s)", file=sys.stderr)
        if results is None:
            t0 = time.perf_counter()
            results = run_suite([], suite, None, ["gate", "--suite", suite])
            reference: dict[str, Any] = {"commit": commit, "results": []}
            for c in SUITES[suite]:
                if case_name(c["workload"], c["params"]) in gated:
                    ref_records, records = run_side_by_side([c], tree)
                    reference["results"] += ref_records
                    results["results"] += records
                else:
                    results["results"].append(run_case(c, None))
            results["total_seconds"] = time.perf_counter() - t0
            _report(args, results, results_table)
        else:
            cases = _cases_named(suite, gated)
            reference = {"commit": commit, "results": [run_case(c, None, root=tree) for c in cases]}
        passed, text = gate_side_by_side(baseline, reference, results, args.threshold)
        print(text)
        for attempt in range(1, args.rerun + 1):
            if passed:
                break
            cases = _cases_named(suite, set(failing_side_by_side(baseline, reference, results, args.threshold)))
            print(
                f"\nre-running {len(cases)} failing case(s) on both sides, alternating "
                f"(attempt {attempt} of {args.rerun}); each side keeps its best run",
                flush=True,
            )
            ref_again, this_again = run_side_by_side(cases, tree)
            reference = keep_best(reference, {"results": ref_again}, by="time")
            results = keep_best(results, {"results": this_again}, by="time")
            passed, text = gate_side_by_side(baseline, reference, results, args.threshold)
            print(text)
    return 0 if passed else 1


def cmd_baseline(args: argparse.Namespace) -> int:
    from benchmarks.gate import merge_baseline

    doc = merge_baseline([_load(p) for p in args.runs])
    doc["commit"] = args.commit
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} from {len(args.runs)} run(s)")
    return 0


def cmd_one(args: argparse.Namespace) -> int:
    from benchmarks.runner import run_one_inline

    record = run_one_inline(args.workload, json.loads(args.params), args.repeat)
    text = json.dumps(record)
    if args.result_file:
        Path(args.result_file).write_text(text)
    else:
        print(text)
    return 0 if record["status"] == "ok" else 1


def cmd_growth(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from benchmarks.growth import SIZES, run_growth, write_outputs

    out = Path(args.out)
    if args.replot:
        records = json.loads((out / "growth.json").read_text())
        write_outputs(records, out)
    else:
        sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else list(SIZES)
        records = run_growth(sizes, out)
    print((out / "growth.md").read_text(), end="")
    return 0 if all(r["status"] == "ok" for r in records) else 1


def cmd_probe(args: argparse.Namespace) -> int:
    from benchmarks.clusters import run_probe

    run_probe(args.address, args.out, args.stop, args.ready, args.interval)
    return 0


def main(argv: list[str] | None = None) -> int:
    from benchmarks.gate import DEFAULT_THRESHOLD

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the benchmark suite")
    size = run.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, about two minutes (default)")
    size.add_argument("--full", action="store_true", help="the full sizes (tens of minutes)")
    run.add_argument("--out", help="write results as JSON to this file")
    run.add_argument("--only", help="comma-separated workload names")
    run.add_argument("--exclude", help="semicolon-separated substrings of case names to leave out, e.g. 'n=1000000]'")
    run.add_argument("--repeat", type=int, default=None, help="timed repeats per case (after one warm-up)")

    cmp = sub.add_parser("compare", help="compare two result files side by side")
    cmp.add_argument("a")
    cmp.add_argument("b")
    cmp.add_argument("--markdown", action="store_true", help="print a Markdown table")

    tg = sub.add_parser(
        "targets", help="check the speed targets (full set) against this project's and a release's results"
    )
    tg.add_argument("--ours", required=True, help="results of this project")
    tg.add_argument("--incumbent", help="results of a released distributed, run on the same machine")
    tg.add_argument("--markdown", action="store_true", help="print a Markdown table")
    tg.add_argument(
        "--set",
        choices=["first", "floor"],
        default="first",
        help="which targets: the first set, or those of the speed toward the floor",
    )

    g = sub.add_parser("gate", help="fail when a ratio to the threads floor regressed")
    g.add_argument("--baseline", required=True)
    g.add_argument(
        "--reference",
        metavar="COMMIT",
        help="commit to run side by side as the reference (default: the baseline file's 'commit')",
    )
    g.add_argument(
        "--stored", action="store_true", help="compare with the baseline file's stored ratios, not side by side"
    )
    g.add_argument("--results", help="results of this checkout to gate (default: run the set here)")
    g.add_argument("--out", help="with no --results: write this checkout's results as JSON to this file")
    g.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="allowed growth of a ratio (0.5 = 50 %%)")
    g.add_argument(
        "--rerun",
        type=int,
        nargs="?",
        const=1,
        default=0,
        metavar="N",
        help="re-run failing cases up to N times (1 when no N is given) and keep each ratio's best run",
    )

    b = sub.add_parser("baseline", help="write a gate baseline from one or more result files")
    b.add_argument("runs", nargs="+")
    b.add_argument("--out", required=True)
    b.add_argument(
        "--commit", required=True, help="the full commit the runs measured: the gate runs it as its reference"
    )

    soak = sub.add_parser(
        "soak", help="mixed workload while faults hit the workers (kill, freeze, cut link, full disk)"
    )
    from benchmarks.soak import add_arguments

    add_arguments(soak)

    ds = sub.add_parser("downstream", help="other projects' test suites, against the release and this checkout")
    from benchmarks.downstream import add_arguments as add_downstream_arguments

    add_downstream_arguments(ds)

    gr = sub.add_parser("growth", help="costs per task against the graph's size (10k to 10M tasks): table and chart")
    gr.add_argument("--out", required=True, help="directory for growth.json, growth.md and growth.svg")
    gr.add_argument("--sizes", help="comma-separated task counts (default: 10k, 100k, 1M, 10M)")
    gr.add_argument("--replot", action="store_true", help="redraw from the directory's growth.json, run nothing")

    prof = sub.add_parser("profile", help="CPU per task of each process of a map of no-op tasks, and where it goes")
    from benchmarks.profile import add_arguments as add_profile_arguments

    add_profile_arguments(prof)

    one = sub.add_parser("_one", help=argparse.SUPPRESS)
    one.add_argument("workload")
    one.add_argument("params")
    one.add_argument("--repeat", type=int, default=3)
    one.add_argument("--result-file")

    probe = sub.add_parser("_probe", help=argparse.SUPPRESS)
    probe.add_argument("address")
    probe.add_argument("out")
    probe.add_argument("stop")
    probe.add_argument("ready")
    probe.add_argument("interval", type=float)

    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args, argv)
    if args.command == "compare":
        return cmd_compare(args)
    if args.command == "targets":
        return cmd_targets(args)
    if args.command == "gate":
        return cmd_gate(args)
    if args.command == "baseline":
        return cmd_baseline(args)
    if args.command == "soak":
        from benchmarks.soak import cmd_soak

        return cmd_soak(args)
    if args.command == "downstream":
        from benchmarks.downstream import cmd_downstream

        return cmd_downstream(args)
    if args.command == "growth":
        return cmd_growth(args)
    if args.command == "profile":
        from benchmarks.profile import main as cmd_profile

        return cmd_profile(args)
    if args.command == "_one":
        return cmd_one(args)
    return cmd_probe(args)


if __name__ == "__main__":
    sys.exit(main())
