"""A soak test: a mixed workload on worker processes while workers are killed.

``python -m benchmarks soak --minutes 10 --kill-every 20 --out soak.json`` starts
``LocalCluster(processes=True, n_workers=3, threads_per_worker=1)`` on 127.0.0.1 and,
until the time is up, runs rounds of work (``client.map``/``submit`` chains,
``dask.array`` reductions, ``dask.dataframe`` groupby and task shuffle, ``scatter`` and
``gather``). Each round's result is checked against a value computed in this process.
A separate thread sends SIGKILL to one random worker process every ``--kill-every``
seconds; worker PIDs come from ``client.run(os.getpid)`` and a PID is only killed when it
is a descendant of this process. The nannies bring the workers back.

A round that fails (``KilledWorker`` when the task was running on killed workers, or any
other error) is counted by error type and retried, up to ``--retries`` times. Some
scattered and computed futures are kept until the end; then each is fetched again: it
must come back with the right value or fail with an error (lost data), never hang.

It uses the public API only (a :class:`~distributed.diagnostics.plugin.SchedulerPlugin`
counts transitions on the scheduler), so it runs against any ``distributed``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

PLUGIN_NAME = "soak-counter"


# -- task functions (module level so worker processes unpickle them by reference) -----------
def inc(x: int) -> int:
    """``x + 1``."""
    return x + 1


def double(x: int) -> int:
    """``2 * x``."""
    return 2 * x


def total(xs: list[Any]) -> Any:
    """The sum of a list (of numbers or NumPy arrays)."""
    out: Any = 0
    for x in xs:
        out = out + x
    return out


def array_total(xs: list[Any]) -> float:
    """The sum of all elements of a list of NumPy arrays."""
    return float(sum(float(x.sum()) for x in xs))


# -- scheduler-side counters ----------------------------------------------------------------
class SoakCounter(SchedulerPlugin):
    """Counts, on the scheduler, what the soak needs: tasks finished, keys that left memory
    because their worker went away and how many of them came back (recomputed), running tasks
    sent elsewhere, and worker addresses seen.

    ``keys_computed_again_after_release`` is wider: any key back in memory without having been
    forgotten in between, which also happens without failures (a released intermediate that a
    later graph needs again)."""

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.transitions = 0
        self.to_memory = 0
        self.recomputed = 0
        self.computed_again = 0
        self.memory_lost = 0
        self.rescheduled = 0
        self.erred = 0
        self.seen_in_memory: set[Any] = set()
        self.lost: set[Any] = set()
        self.workers_seen: set[str] = set()
        self.workers_removed = 0

    async def start(self, scheduler: Any) -> None:
        """Note the workers already there."""
        self.workers_seen.update(scheduler.workers)

    def transition(self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any) -> None:
        """Count one transition."""
        self.transitions += 1
        if finish == "memory":
            self.to_memory += 1
            if key in self.lost:
                self.lost.discard(key)
                self.recomputed += 1
            if key in self.seen_in_memory:
                self.computed_again += 1
            else:
                self.seen_in_memory.add(key)
        elif finish == "forgotten":
            # A key submitted again later under the same name is new work, not a recomputation.
            self.seen_in_memory.discard(key)
            self.lost.discard(key)
        elif start == "memory" and _is_worker_loss(stimulus_id):
            self.memory_lost += 1
            self.lost.add(key)
        elif start == "processing" and finish != "erred" and _is_worker_loss(stimulus_id):
            self.rescheduled += 1
        elif finish == "erred":
            self.erred += 1

    def add_worker(self, scheduler: Any, worker: str) -> None:
        """Note a (new) worker address."""
        self.workers_seen.add(worker)

    def remove_worker(self, scheduler: Any, worker: str, *, stimulus_id: str, **kwargs: Any) -> None:
        """Count a worker leaving."""
        self.workers_removed += 1

    def summary(self) -> dict[str, Any]:
        """The counters as plain data."""
        return {
            "transitions": self.transitions,
            "tasks_to_memory": self.to_memory,
            "keys_recomputed": self.recomputed,
            "memory_keys_lost_with_worker": self.memory_lost,
            "running_tasks_rescheduled": self.rescheduled,
            "keys_computed_again_after_release": self.computed_again,
            "tasks_erred": self.erred,
            "worker_addresses_seen": sorted(self.workers_seen),
            "workers_removed": self.workers_removed,
        }


def _is_worker_loss(stimulus_id: str) -> bool:
    s = stimulus_id.lower()
    return any(word in s for word in ("worker", "lost", "ttl", "closed"))


def _plugin_summary(dask_scheduler: Any) -> dict[str, Any]:
    summary: dict[str, Any] = dask_scheduler.plugins[PLUGIN_NAME].summary()
    summary["scheduler_transition_counter"] = getattr(dask_scheduler, "transition_counter", None)
    return summary


# -- the work -------------------------------------------------------------------------------
@dataclass
class Held:
    """A future kept until the end, with the value it must still give."""

    kind: str
    future: Any
    expected: Any


@dataclass
class Stats:
    """What the soak saw on the client side."""

    rounds: dict[str, int] = field(default_factory=lambda: collections.Counter())
    checked: int = 0
    correct: int = 0
    wrong: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)
    retries: int = 0
    killed_worker_errors: int = 0
    errors: dict[str, int] = field(default_factory=lambda: collections.Counter())
    error_examples: dict[str, str] = field(default_factory=dict)
    kills: list[dict[str, Any]] = field(default_factory=list)
    kill_skipped: dict[str, int] = field(default_factory=lambda: collections.Counter())


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, float) or isinstance(b, float):
        return bool(np.isclose(a, b, rtol=1e-9, atol=1e-9))
    return bool(a == b)


def work_map_chain(client: Any, rng: random.Random, timeout: float, held: list[Held]) -> bool:
    """``client.map`` twice, a ``submit`` of their sum, then a chain of ``submit``s."""
    start, n, links = rng.randrange(10**6), 200, 20
    a = client.map(inc, range(start, start + n), pure=False)
    b = client.map(double, a, pure=False)
    s = client.submit(total, b, pure=False)
    c = s
    for _ in range(links):
        c = client.submit(inc, c, pure=False)
    expected = sum(2 * (x + 1) for x in range(start, start + n)) + links
    held.append(Held("computed", s, expected - links))
    return _same(c.result(timeout=timeout), expected)


def work_array(client: Any, rng: random.Random, timeout: float, held: list[Held]) -> bool:
    """A ``dask.array`` reduction over a transposed sum, against NumPy."""
    import dask.array as da
    import numpy as np

    local = np.random.default_rng(rng.randrange(2**32)).random((600, 600))
    x = da.from_array(local, chunks=(100, 100))  # type: ignore[no-untyped-call]  # dask leaves it untyped
    y = ((x + x.T) * 2).sum(axis=1)
    expected = ((local + local.T) * 2).sum(axis=1)
    out = client.compute(y.mean())
    ok = _same(out.result(timeout=timeout), float(expected.mean()))
    z = client.compute(y)
    return ok and bool(np.allclose(z.result(timeout=timeout), expected, rtol=1e-12, atol=0))


def work_dataframe(client: Any, rng: random.Random, timeout: float, held: list[Held]) -> bool:
    """A ``dask.dataframe`` groupby and a task shuffle followed by a groupby, against pandas."""
    import dask
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    g = np.random.default_rng(rng.randrange(2**32))
    rows = 20_000
    pdf = pd.DataFrame({"k": g.integers(0, 50, rows), "v": g.integers(0, 1000, rows)})
    df = dd.from_pandas(pdf, npartitions=8)  # type: ignore[no-untyped-call]  # dask leaves it untyped
    expected = pdf.groupby("k").v.sum().sort_index()
    got = client.compute(df.groupby("k").v.sum()).result(timeout=timeout).sort_index()
    ok = bool(got.equals(expected))
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        shuffled = df.shuffle("k", npartitions=6)
        got2 = client.compute(shuffled.groupby("k").v.sum()).result(timeout=timeout).sort_index()
    return ok and bool(got2.equals(expected))


def work_scatter(client: Any, rng: random.Random, timeout: float, held: list[Held]) -> bool:
    """``scatter`` arrays, compute on them, ``gather`` them back."""
    import numpy as np

    from distributed import wait

    seed = rng.randrange(2**32)
    g = np.random.default_rng(seed)
    arrays = [g.integers(0, 100, 10_000) for _ in range(8)]
    futs = client.scatter(arrays)
    s = client.submit(array_total, futs, pure=False)
    wait([s, *futs], timeout=timeout)
    ok = _same(s.result(timeout=timeout), float(sum(int(a.sum()) for a in arrays)))
    back = client.gather(futs)
    ok = ok and all(_same(x, y) for x, y in zip(back, arrays, strict=True))
    held.append(Held("scattered", futs[0], arrays[0]))
    return ok


WORK: dict[str, Callable[[Any, random.Random, float, list[Held]], bool]] = {
    "map_chain": work_map_chain,
    "array": work_array,
    "dataframe": work_dataframe,
    "scatter": work_scatter,
}


# -- the killer -----------------------------------------------------------------------------
def _descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _worker_pids(client: Any, timeout: float) -> dict[str, int]:
    """``{address: pid}`` of the workers, from ``client.run(os.getpid)``; ``{}`` after ``timeout``."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        fut = pool.submit(client.run, os.getpid, on_error="return")
        res = fut.result(timeout=timeout)
    except Exception:
        return {}
    finally:
        pool.shutdown(wait=False)
    return {addr: pid for addr, pid in res.items() if isinstance(pid, int)}


def killer(client: Any, every: float, deadline: float, stop: threading.Event, rng: random.Random, st: Stats) -> None:
    """SIGKILL a random worker process every ``every`` seconds until ``deadline``."""
    t0 = time.monotonic()
    next_kill = time.monotonic() + every
    while not stop.wait(max(0.0, next_kill - time.monotonic())):
        if time.monotonic() >= deadline:
            return
        next_kill += every
        pids = _worker_pids(client, timeout=10.0)
        mine = _descendants()
        # Only ever a worker process this process started: never ourselves nor anything else.
        candidates = {a: p for a, p in pids.items() if p in mine and p != os.getpid()}
        if not candidates:
            st.kill_skipped["no worker process found" if not pids else "pid not a child process"] += 1
            continue
        addr = rng.choice(sorted(candidates))
        try:
            os.kill(candidates[addr], signal.SIGKILL)
        except ProcessLookupError:
            st.kill_skipped["already gone"] += 1
            continue
        st.kills.append({"t": round(time.monotonic() - t0, 1), "address": addr, "pid": candidates[addr]})


# -- the driver -----------------------------------------------------------------------------
def _run_round(
    client: Any, name: str, rng: random.Random, timeout: float, retries: int, held: list[Held], st: Stats
) -> None:
    from distributed import KilledWorker

    fn = WORK[name]
    st.rounds[name] += 1
    for attempt in range(retries + 1):
        try:
            ok = fn(client, rng, timeout, held)
        except KilledWorker as e:
            st.killed_worker_errors += 1
            st.error_examples.setdefault("KilledWorker", str(e)[:300])
        except Exception as e:
            kind = type(e).__name__
            st.errors[kind] += 1
            st.error_examples.setdefault(kind, f"{name}: {e}"[:300])
        else:
            st.checked += 1
            if ok:
                st.correct += 1
            else:
                st.wrong.append(name)
            return
        if attempt < retries:
            st.retries += 1
    st.gave_up.append(name)


def _check_held(held: list[Held], timeout: float) -> dict[str, Any]:
    """Fetch every kept future again: right value, an error (reported lost), or a hang."""
    out: dict[str, Any] = {"held": len(held), "retrievable": 0, "wrong": 0, "hung": 0}
    lost: dict[str, int] = collections.Counter()
    examples: dict[str, str] = {}
    for h in held:
        try:
            value = h.future.result(timeout=timeout)
        except TimeoutError:
            out["hung"] += 1
        except Exception as e:
            kind = f"{h.kind}: {type(e).__name__}"
            lost[kind] += 1
            examples.setdefault(kind, str(e)[:300])
        else:
            if _same(value, h.expected):
                out["retrievable"] += 1
            else:
                out["wrong"] += 1
    out["reported_lost"] = dict(lost)
    out["lost_error_examples"] = examples
    out["nothing_lost_silently"] = out["hung"] == 0 and out["wrong"] == 0
    return out


def run_soak(
    minutes: float, kill_every: float, seed: int, timeout: float, retries: int, max_held: int
) -> dict[str, Any]:
    """Run the soak and return its report."""
    import dask

    from distributed import Client, LocalCluster

    rng = random.Random(seed)
    st = Stats()
    held: list[Held] = []
    t_start = time.monotonic()
    deadline = t_start + minutes * 60
    with dask.config.set({"distributed.scheduler.allowed-failures": 3}):
        cluster = LocalCluster(
            processes=True, n_workers=3, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        )
        client = Client(cluster)
        try:
            client.wait_for_workers(3, timeout=60)
            client.register_plugin(SoakCounter(), name=PLUGIN_NAME)
            initial = sorted(client.scheduler_info()["workers"])
            stop = threading.Event()
            kthread = threading.Thread(
                target=killer,
                args=(client, kill_every, deadline, stop, random.Random(seed + 1), st),
                name="soak-killer",
                daemon=True,
            )
            kthread.start()
            names = list(WORK)
            i = 0
            next_progress = t_start + 10
            while time.monotonic() < deadline:
                _run_round(client, names[i % len(names)], rng, timeout, retries, held, st)
                i += 1
                if len(held) > max_held:
                    del held[: len(held) - max_held]
                if time.monotonic() >= next_progress:
                    next_progress += 10
                    print(
                        f"{time.monotonic() - t_start:6.0f}s rounds={i} checked={st.checked} correct={st.correct} "
                        f"kills={len(st.kills)} KilledWorker={st.killed_worker_errors} "
                        f"other_errors={sum(st.errors.values())}",
                        file=sys.stderr,
                        flush=True,
                    )
            stop.set()
            kthread.join(timeout=30)
            t_work = time.monotonic() - t_start
            # Let the nannies bring every worker back before the final checks.
            try:
                client.wait_for_workers(3, timeout=60)
                workers_back = True
            except Exception:
                workers_back = False
            final = _check_held(held, timeout)
            counters = client.run_on_scheduler(_plugin_summary)
            n_workers_end = len(client.scheduler_info()["workers"])
        finally:
            client.close(timeout=30)
            cluster.close(timeout=30)
    seen = counters.pop("worker_addresses_seen")
    return {
        "config": {
            "minutes": minutes,
            "kill_every_s": kill_every,
            "seed": seed,
            "n_workers": 3,
            "threads_per_worker": 1,
            "allowed_failures": 3,
            "result_timeout_s": timeout,
            "retries": retries,
        },
        "wall_s": round(t_work, 1),
        "rounds": dict(st.rounds),
        "results_checked": st.checked,
        "results_correct": st.correct,
        "results_wrong": st.wrong,
        "rounds_given_up": st.gave_up,
        "retries": st.retries,
        "killed_worker_errors": st.killed_worker_errors,
        "other_errors_by_type": dict(st.errors),
        "error_examples": st.error_examples,
        "workers_killed": len(st.kills),
        "kills": st.kills,
        "kills_skipped": dict(st.kill_skipped),
        "workers_restarted": len(set(seen) - set(initial)),
        "workers_at_end": n_workers_end,
        "all_workers_back": workers_back,
        "tasks_completed": counters["tasks_to_memory"],
        "scheduler": counters,
        "nothing_lost": final,
    }


def summary_text(doc: dict[str, Any]) -> str:
    """A few lines with the headline figures."""
    nl = doc["nothing_lost"]
    lines = [
        f"soak: {doc['wall_s']} s of work, {sum(doc['rounds'].values())} rounds {doc['rounds']}",
        f"tasks completed (to memory on the scheduler): {doc['tasks_completed']}",
        f"results checked / correct: {doc['results_checked']} / {doc['results_correct']}"
        f" (wrong: {len(doc['results_wrong'])}, given up: {len(doc['rounds_given_up'])})",
        f"workers killed: {doc['workers_killed']}, restarted (new addresses): {doc['workers_restarted']},"
        f" at the end: {doc['workers_at_end']}",
        f"keys recomputed: {doc['scheduler']['keys_recomputed']} of {doc['scheduler']['memory_keys_lost_with_worker']}"
        f" keys in memory lost with their worker;"
        f" running tasks rescheduled: {doc['scheduler']['running_tasks_rescheduled']}",
        f"KilledWorker (retried): {doc['killed_worker_errors']}, other errors: {doc['other_errors_by_type']}",
        f"held futures: {nl['held']}, retrievable: {nl['retrievable']}, reported lost: {nl['reported_lost']},"
        f" hung: {nl['hung']}, wrong: {nl['wrong']} -> nothing lost silently: {nl['nothing_lost_silently']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.soak``: the same options as ``python -m benchmarks soak``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    add_arguments(p)
    return cmd_soak(p.parse_args(argv))


def add_arguments(p: Any) -> None:
    """The soak's command-line options."""
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run the workload (default 10)")
    p.add_argument("--kill-every", type=float, default=20.0, help="seconds between worker kills (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for any one result (default 60)")
    p.add_argument("--retries", type=int, default=3, help="retries of a failed round (default 3)")
    p.add_argument("--max-held", type=int, default=200, help="futures kept to the end and checked again")
    p.add_argument("--out", help="write the report as JSON to this file")


def cmd_soak(args: Any) -> int:
    """Run the soak from parsed arguments; exit 1 on a wrong result or a silent loss."""
    doc = run_soak(args.minutes, args.kill_every, args.seed, args.timeout, args.retries, args.max_held)
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(summary_text(doc))
    if args.out:
        print(f"wrote {args.out}")
    ok = not doc["results_wrong"] and doc["nothing_lost"]["nothing_lost_silently"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
