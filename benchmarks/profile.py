"""``python -m benchmarks profile``: where the CPU of a map of no-op tasks goes, process by process.

A cluster is started from the command line (a scheduler and ``workers``
worker processes of one thread each); this process, the client, maps ``n``
no-op tasks once to warm up, then again while the kernel's CPU clocks of every
process are read around the map, and py-spy samples each process (the
scheduler, every worker, this client) at ``rate`` Hz.  py-spy counts only the
thread holding the GIL (``--gil``): CPU spent running Python, not waiting in a
select or on a lock.

The report gives each process's CPU microseconds per task, and its top
functions by their own samples and by samples including what they call; the
JSON keeps the whole report, and the raw stacks sit beside it, one file per
process, for a flame graph (``flamegraph.pl``, speedscope).

Without py-spy on PATH the CPU figures are still measured, and the report
says that no stacks were sampled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "format_report", "main", "profile_map", "summarize_stacks"]


def summarize_stacks(path: Path, top: int = 20) -> dict[str, Any]:
    """Samples in a py-spy raw file (``frame;frame;... count`` per line): the top functions, own and inclusive.

    A function's own samples are those with it innermost; its inclusive
    samples, those with it anywhere in the stack (once per stack, however
    deep it recurses).  Functions are named as py-spy names them, without
    their line number, so that the lines of one function count together.
    """
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.strip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [_function(frame) for frame in stack.split(";")]
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count

    def ranked(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "samples": c, "share": c / samples if samples else 0.0}
            for name, c in counter.most_common(top)
        ]

    return {"samples": samples, "own": ranked(own), "inclusive": ranked(inclusive)}


def _function(frame: str) -> str:
    """``name (file.py:123)`` -> ``name (file.py)``."""
    name, sep, where = frame.partition(" (")
    if not sep:
        return frame
    return f"{name} ({where.rsplit(':', 1)[0].rstrip(')')})"


def profile_map(n: int, workers: int, out: Path, rate: int = 200, top: int = 20) -> dict[str, Any]:
    """Map ``n`` no-op tasks on a command-line cluster of ``workers`` one-thread workers, profiled (see the module)."""
    from benchmarks import tasks
    from benchmarks.clusters import CliCluster, process_cpu_seconds, settle
    from distributed import wait

    out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy")
    with CliCluster(nworkers=workers, nthreads=1, dashboard=False) as cluster:
        client = cluster.client
        wait(client.map(tasks.noop, range(min(n, 2_000)), pure=False))
        settle(client)
        pids = {"scheduler": cluster.scheduler_pid}
        for i, (_, info) in enumerate(sorted(client.scheduler_info()["workers"].items())):
            pids[f"worker-{i}"] = int(info["pid"])
        pids["client"] = os.getpid()
        samplers: dict[str, subprocess.Popen[bytes]] = {}
        if spy is not None:
            for name, pid in pids.items():
                args = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--gil"]
                args += ["--nonblocking", "--output", str(out / f"{name}.txt")]
                samplers[name] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # py-spy attaches before the map starts
        before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        start = time.perf_counter()
        futures = client.map(tasks.noop, range(n), pure=False)
        wait(futures)
        wall = time.perf_counter() - start
        after = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        del futures
        for proc in samplers.values():
            proc.send_signal(signal.SIGINT)  # py-spy writes its file and exits
        for proc in samplers.values():
            proc.wait(60)
    processes: dict[str, Any] = {}
    for name in pids:
        entry: dict[str, Any] = {"cpu_us_per_task": 1e6 * (after[name] - before[name]) / n}
        stacks = out / f"{name}.txt"
        if stacks.exists():
            entry.update(summarize_stacks(stacks, top))
        processes[name] = entry
    return {
        "n": n,
        "workers": workers,
        "wall_s": wall,
        "tasks_per_s": n / wall,
        "cpu_us_per_task": sum(p["cpu_us_per_task"] for p in processes.values()),
        "stacks": "sampled with py-spy --gil" if spy is not None else "not sampled: py-spy is not on PATH",
        "processes": processes,
    }


def format_report(doc: dict[str, Any], top: int = 12) -> str:
    """The report as text: the figures, then each process's top functions."""
    lines = [
        f"map of {doc['n']:,} no-op tasks on {doc['workers']} one-thread workers: {doc['wall_s']:.2f} s, "
        f"{doc['tasks_per_s']:,.0f} tasks/s, {doc['cpu_us_per_task']:.1f} µs of CPU per task in all",
        f"stacks: {doc['stacks']}",
    ]
    for name, p in doc["processes"].items():
        lines.append(f"\n{name}: {p['cpu_us_per_task']:.1f} µs of CPU per task")
        for kind in ("own", "inclusive"):
            if kind in p:
                lines.append(f"  top by {kind} samples (of {p['samples']}):")
                lines += [f"    {100 * f['share']:5.1f} %  {f['function']}" for f in p[kind][:top]]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``profile`` command's arguments."""
    parser.add_argument("--n", type=int, default=100_000, help="no-op tasks to map (default 100,000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, one thread each (default 2)")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second (default 200)")
    parser.add_argument("--out", default="profile", help="directory for profile.json and the raw stacks")


def main(args: argparse.Namespace) -> int:
    """Run the ``profile`` command."""
    if args.n < 1 or args.workers < 1 or args.rate < 1:
        print("profile: --n, --workers and --rate must be at least 1", file=sys.stderr)
        return 2
    out = Path(args.out)
    doc = profile_map(args.n, args.workers, out, rate=args.rate)
    (out / "profile.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(format_report(doc))
    print(f"\nwrote {out / 'profile.json'} and the raw stacks beside it")
    return 0
