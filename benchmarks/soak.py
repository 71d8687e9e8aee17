"""A soak test: a mixed workload on worker processes while faults hit the workers.

``python -m benchmarks soak --minutes 10 --out soak.json`` starts a cluster and, until the
time is up, runs rounds of work (``client.map``/``submit`` chains, ``dask.array``
reductions, ``dask.dataframe`` groupby and task shuffle, ``scatter`` and ``gather``, a P2P
shuffle, a stream of ``fire_and_forget`` tasks). Each round's result is checked against a
value computed in this process.

Meanwhile one thread injects faults, one at a time: every ``--kill-every`` seconds it
SIGKILLs a random worker process, and every ``--fault-every`` seconds it takes the next of
the other faults in turn (``soak_faults.py``): freeze a worker (SIGSTOP past the worker
TTL, then SIGCONT), cut a worker host's link past the TTL, fill the disk under a worker
that must spill.  With the ``scheduler`` fault (``--faults kill,scheduler``: a scheduler
with a journal and workers from their command lines), every ``--scheduler-kill-every``
seconds it SIGKILLs the scheduler and starts another on its journal at the same address. After each fault it times how long until the scheduler lists every
worker again and each of them answers. ``--faults`` chooses the faults; by default all
that this machine can do (``cut`` needs network namespaces, ``disk`` a tmpfs mount: both
root); the ``cut`` fault runs the cluster on test hosts, else it is a ``LocalCluster``.
Worker PIDs come from ``client.run(os.getpid)`` and a PID is only signalled when it is a
descendant of this process.

A round that fails is counted by error type and retried, up to ``--retries`` times; a
round that outlives every timeout is abandoned and counted as hung. Some scattered and
computed futures are kept until the end; then each is fetched again: it must come back
with the right value or fail with an error (lost data), never hang. Every minute the RSS
of the scheduler and of each worker is sampled. At the end every future is released and
the scheduler must hold no task.

It uses the public API only (a :class:`~distributed.diagnostics.plugin.SchedulerPlugin`
counts transitions on the scheduler), so it runs against any ``distributed``.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
    hung: list[str] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    ff: dict[str, Any] = field(default_factory=lambda: collections.Counter())
    ff_forget_s: list[float] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, float) or isinstance(b, float):
        return bool(np.isclose(a, b, rtol=1e-9, atol=1e-9))
    return bool(a == b)


def work_map_chain(client: Any, rng: random.Random, timeout: float, held: list[Held], st: Stats) -> bool:
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


def work_array(client: Any, rng: random.Random, timeout: float, held: list[Held], st: Stats) -> bool:
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


def work_dataframe(client: Any, rng: random.Random, timeout: float, held: list[Held], st: Stats) -> bool:
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


def work_scatter(client: Any, rng: random.Random, timeout: float, held: list[Held], st: Stats) -> bool:
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


def partition_keys(part: Any) -> Any:
    """The distinct values of ``k`` in one partition."""
    return part["k"].drop_duplicates()


def work_p2p_shuffle(client: Any, rng: random.Random, timeout: float, held: list[Held], st: Stats) -> bool:
    """``df.shuffle("k", shuffle_method="p2p")``: the same rows as pandas, each key in one partition."""
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    g = np.random.default_rng(rng.randrange(2**32))
    rows = 40_000
    pdf = pd.DataFrame({"k": g.integers(0, 200, rows), "v": g.integers(0, 10**6, rows)})
    df = dd.from_pandas(pdf, npartitions=10)  # type: ignore[no-untyped-call]  # dask leaves it untyped
    shuffled = df.shuffle("k", npartitions=8, shuffle_method="p2p")
    got = client.compute(shuffled).result(timeout=timeout)
    order = ["k", "v"]
    ok = bool(got.sort_values(order).reset_index(drop=True).equals(pdf.sort_values(order).reset_index(drop=True)))
    keys = client.compute(shuffled.map_partitions(partition_keys, meta=("k", "int64"))).result(timeout=timeout)
    # A shuffle puts every row of a key in the same partition: no key in two partitions.
    return ok and len(keys) == pdf["k"].nunique()


FF_QUEUE = "soak-fire-and-forget"


def ff_bytes(seed: int, i: int) -> bytes:
    """The ``i``-th block of a fire-and-forget stream: 1 MiB of seeded random bytes."""
    import numpy as np

    return np.random.default_rng([seed, i]).bytes(1 << 20)


def ff_report(block: bytes, token: str, i: int) -> None:
    """Put ``(token, i, crc32(block))`` on the soak's queue (run by a fire-and-forget task)."""
    import zlib

    from distributed import Queue

    Queue(FF_QUEUE).put((token, i, zlib.crc32(block)))


def _count_prefix(prefix: str, dask_scheduler: Any = None) -> int:
    return sum(1 for k in dask_scheduler.tasks if str(k).startswith(prefix))


class FireAndForgetMissing(RuntimeError):
    """Some fire-and-forget tasks never reported."""


def work_fire_and_forget(client: Any, rng: random.Random, timeout: float, held: list[Held], st: Stats) -> bool:
    """Fire and forget 40 pairs (a 1 MiB block, a task reporting its CRC to a ``Queue``); all must
    report, with the right CRC, and the scheduler must forget every key afterwards."""
    import zlib

    from distributed import Queue, fire_and_forget

    n = 40
    token = f"soak-ff-{rng.randrange(16**8):08x}"
    seed = rng.randrange(2**31)
    queue = Queue(FF_QUEUE, client=client)
    for i in range(n):
        block = client.submit(ff_bytes, seed, i, key=f"{token}-block-{i}")
        fire_and_forget(client.submit(ff_report, block, token, i, key=f"{token}-report-{i}"))
    del block
    st.ff["rounds"] += 1
    st.ff["tasks_fired"] += 2 * n
    got: dict[int, int] = {}
    ok = True
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        try:
            item = queue.get(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
        except TimeoutError:
            continue
        tok, i, crc = item
        if tok != token:  # a late duplicate of an earlier round (a task run twice after a fault)
            st.ff["late_reports"] += 1
            continue
        if i in got:
            st.ff["duplicate_reports"] += 1
        elif crc != zlib.crc32(ff_bytes(seed, i)):
            ok = False
        got[i] = crc
    st.ff["reported"] += len(got)
    if len(got) < n:
        st.ff["missing"] += n - len(got)
        raise FireAndForgetMissing(f"{n - len(got)} of {n} fire-and-forget tasks never reported in {timeout} s")
    t0 = time.monotonic()
    while True:
        left = client.run_on_scheduler(_count_prefix, token)
        if left == 0:
            st.ff_forget_s.append(round(time.monotonic() - t0, 2))
            break
        if time.monotonic() - t0 > 30:
            st.ff["rounds_not_forgotten"] += 1
            st.ff["keys_not_forgotten"] += left
            break
        time.sleep(0.1)
    return ok


WORK: dict[str, Callable[[Any, random.Random, float, list[Held], Stats], bool]] = {
    "map_chain": work_map_chain,
    "array": work_array,
    "dataframe": work_dataframe,
    "scatter": work_scatter,
    "p2p_shuffle": work_p2p_shuffle,
    "fire_and_forget": work_fire_and_forget,
}


# -- faults -----------------------------------------------------------------------------------
def fault_loop(
    ctx: Any,
    faults: list[str],
    kill_every: float,
    fault_every: float,
    deadline: float,
    rng: random.Random,
    st: Stats,
    scheduler_every: float = 120.0,
) -> None:
    """Inject faults, one at a time, until ``deadline`` or ``ctx.stop``."""
    from benchmarks.soak_faults import FAULT_FUNCTIONS

    t0 = time.monotonic()
    inf = float("inf")
    next_kill = t0 + kill_every if "kill" in faults else inf
    next_scheduler = t0 + scheduler_every if "scheduler" in faults else inf
    others = [f for f in faults if f not in ("kill", "scheduler")]
    next_other = t0 + fault_every / 2 if others else inf
    turn = 0
    while True:
        due = min(next_kill, next_other, next_scheduler)
        if due == inf or ctx.stop.wait(max(0.0, due - time.monotonic())) or time.monotonic() >= deadline:
            return
        if next_scheduler <= min(next_kill, next_other):
            kind = "scheduler"
            next_scheduler += scheduler_every
        elif next_other <= next_kill:
            kind = others[turn % len(others)]
            turn += 1
            next_other += fault_every
        else:
            kind = "kill"
            next_kill += kill_every
        t = time.monotonic()
        try:
            record = FAULT_FUNCTIONS[kind](ctx, rng)
        except Exception as e:
            record = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        record = {"kind": kind, "t": round(t - t0, 1), **record}
        st.faults.append(record)
        print(f"{t - t0:6.0f}s fault {json.dumps(record, default=str)}", file=sys.stderr, flush=True)
        # A long fault (a hold past the TTL and the recovery) pushes the next kill back.
        next_kill = max(next_kill, time.monotonic() + 1) if next_kill != inf else inf


def fault_summary(records: list[dict[str, Any]], wanted: list[str]) -> dict[str, Any]:
    """Per fault: how many injected, how many recovered and how fast, what happened."""
    import statistics

    out: dict[str, Any] = {}
    for kind in wanted:
        mine = [r for r in records if r["kind"] == kind]
        injected = [r for r in mine if "skipped" not in r and "error" not in r]
        recovered = [r["recovery_s"] for r in injected if r.get("recovery_s") is not None]
        entry: dict[str, Any] = {
            "injected": len(injected),
            "recovered": len(recovered),
            "not_recovered": len(injected) - len(recovered),
            "recovery_s_median": round(statistics.median(recovered), 2) if recovered else None,
            "recovery_s_max": max(recovered) if recovered else None,
            "skipped": dict(collections.Counter(r["skipped"] for r in mine if "skipped" in r)),
            "errors": dict(collections.Counter(r["error"] for r in mine if "error" in r)),
        }
        if any("removed_during" in r for r in injected):
            entry["removed_by_scheduler_during_fault"] = sum(1 for r in injected if r.get("removed_during"))
        if any("outcome" in r for r in injected):
            entry["outcomes"] = dict(collections.Counter(str(r.get("outcome")) for r in injected))
        out[kind] = entry
    return out


# -- memory -----------------------------------------------------------------------------------
def _scheduler_sample(dask_scheduler: Any) -> dict[str, Any]:
    import gc

    import psutil

    s = dask_scheduler
    return {
        "rss": psutil.Process().memory_info().rss,
        "tasks": len(s.tasks),
        # What the RSS is made of: bytes malloc hands out (a leak grows them) and keeps free
        # (fragmentation grows those), and Python's own count of blocks and objects.
        **_malloc_info(),
        "py_blocks": sys.getallocatedblocks(),
        "gc_objects": len(gc.get_objects()),
        "sizes": {
            "task_groups": len(s.task_groups),
            "task_prefixes": len(s.task_prefixes),
            "clients": len(s.clients),
            "workers": len(s.workers),
            "aliases": len(s.aliases),
            "pool_addresses": len(s.rpc.available) + len(s.rpc.occupied),
            "event_topics": len(s.events),
            "events": sum(len(v) for v in s.events.values()),
        },
    }


def _malloc_info() -> dict[str, int]:
    """glibc's ``mallinfo2``: bytes in use and bytes free in the heap (empty where there is none)."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
        ] + [("keepcost", ctypes.c_size_t)]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return {"heap_in_use": int(info.uordblks + info.hblkhd), "heap_free": int(info.fordblks)}


def memory_sample(client: Any, t0: float) -> dict[str, Any]:
    """The RSS (MB) of the scheduler and of each worker, and the scheduler's task count, now."""
    import psutil

    from benchmarks.soak_faults import call, worker_pids

    sample: dict[str, Any] = {"t_min": round((time.monotonic() - t0) / 60, 2)}
    try:
        s = call(client.run_on_scheduler, 30.0, _scheduler_sample)
        sample["scheduler_rss_mb"] = round(s["rss"] / 2**20, 1)
        sample["scheduler_tasks"] = s["tasks"]
        for key in ("heap_in_use", "heap_free"):
            if key in s:
                sample[f"scheduler_{key}_mb"] = round(s[key] / 2**20, 1)
        sample["scheduler_py_blocks"] = s["py_blocks"]
        sample["scheduler_gc_objects"] = s["gc_objects"]
        sample["scheduler_sizes"] = s["sizes"]
    except Exception as e:
        sample["scheduler_rss_mb"] = None
        sample["scheduler_error"] = type(e).__name__
    rss: dict[str, float] = {}
    for addr, pid in sorted(worker_pids(client, timeout=10.0).items()):
        try:
            rss[addr] = round(psutil.Process(pid).memory_info().rss / 2**20, 1)
        except psutil.Error:
            pass
    sample["workers_rss_mb"] = rss
    sample["worker_rss_mean_mb"] = round(sum(rss.values()) / len(rss), 1) if rss else None
    sample["worker_rss_max_mb"] = max(rss.values()) if rss else None
    return sample


def sampler(client: Any, every: float, stop: threading.Event, t0: float, st: Stats) -> None:
    """Sample memory every ``every`` seconds (the first at once) until ``stop``."""
    while True:
        sample = memory_sample(client, t0)
        st.memory.append(sample)
        print(
            f"{sample['t_min'] * 60:6.0f}s memory: scheduler {sample['scheduler_rss_mb']} MB"
            f" ({sample.get('scheduler_tasks')} tasks; heap in use {sample.get('scheduler_heap_in_use_mb')} MB,"
            f" free {sample.get('scheduler_heap_free_mb')} MB; {sample.get('scheduler_py_blocks')} Python blocks,"
            f" {sample.get('scheduler_gc_objects')} objects), workers mean {sample['worker_rss_mean_mb']} MB"
            f" max {sample['worker_rss_max_mb']} MB",
            file=sys.stderr,
            flush=True,
        )
        if stop.wait(every):
            return


def trend(samples: list[dict[str, Any]], name: str, since_min: float = 1.0) -> dict[str, Any]:
    """First, last and the least-squares slope (MB per minute) of one memory series.

    From the first sample at or after ``since_min`` minutes (the warm-up: imports, first
    graphs), when at least two are there; else over every sample."""
    pts = [(s["t_min"], s[name]) for s in samples if s.get(name) is not None]
    if len([p for p in pts if p[0] >= since_min]) >= 2:
        pts = [p for p in pts if p[0] >= since_min]
    if not pts:
        return {"first": None, "last": None, "slope_mb_per_min": None}
    out: dict[str, Any] = {"from_min": pts[0][0], "first": pts[0][1], "last": pts[-1][1]}
    out["min"] = min(v for _, v in pts)
    out["max"] = max(v for _, v in pts)
    out["slope_mb_per_min"] = _slope(pts)
    # The second half alone: past the time the held futures (and their keys) reach their cap.
    out["second_half_slope_mb_per_min"] = _slope(pts[len(pts) // 2 :])
    return out


def _slope(pts: list[tuple[float, float]]) -> float | None:
    if len(pts) < 2:
        return None
    mt = sum(t for t, _ in pts) / len(pts)
    mv = sum(v for _, v in pts) / len(pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    return round(sum((t - mt) * (v - mv) for t, v in pts) / den, 3) if den else None


# -- the driver -------------------------------------------------------------------------------
def _run_round(
    client: Any, name: str, rng: random.Random, timeout: float, retries: int, held: list[Held], st: Stats
) -> None:
    from benchmarks.soak_faults import CallTimeout, call
    from distributed import KilledWorker

    fn = WORK[name]
    st.rounds[name] += 1
    for attempt in range(retries + 1):
        try:
            # Every wait inside has a timeout; past all of them the round is abandoned as hung.
            ok = call(fn, 3 * timeout + 60, client, rng, timeout, held, st)
        except CallTimeout:
            st.hung.append(name)
            return
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


def _tasks_left(dask_scheduler: Any) -> dict[str, Any]:
    states = collections.Counter(ts.state for ts in dask_scheduler.tasks.values())
    examples = [f"{k!s}: {ts.state}" for k, ts in list(dask_scheduler.tasks.items())[:10]]
    return {"n": len(dask_scheduler.tasks), "by_state": dict(states), "examples": examples}


def _wait_no_tasks(client: Any, timeout: float) -> dict[str, Any]:
    """Wait until the scheduler holds no task (``timeout`` at most); what was left."""
    from benchmarks.soak_faults import call

    t0 = time.monotonic()
    left: dict[str, Any] = {"n": None}
    while time.monotonic() - t0 < timeout:
        try:
            left = call(client.run_on_scheduler, 30.0, _tasks_left)
        except Exception as e:
            left = {"n": None, "error": type(e).__name__}
        if left["n"] == 0:
            break
        time.sleep(0.5)
    left["waited_s"] = round(time.monotonic() - t0, 1)
    return left


def _log_tails(directory: Path, chars: int = 3000) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): p.read_text(errors="replace")[-chars:] for p in sorted(directory.rglob("*.log"))
    }


def _join_all(threads: list[threading.Thread], timeout: float) -> None:
    for t in threads:
        t.join(timeout=timeout)


def run_soak(args: Any) -> dict[str, Any]:
    """Run the soak from parsed arguments and return its report."""
    import contextlib
    import gc
    import shutil
    import tempfile

    from benchmarks.soak_faults import (
        DEFAULT_FAULTS,
        FAULTS,
        FaultContext,
        Undo,
        start_cluster,
        unavailable,
        wait_recovered,
    )

    wanted = (
        [f.strip() for f in args.faults.split(",") if f.strip()] if args.faults is not None else list(DEFAULT_FAULTS)
    )
    bad = [f for f in wanted if f not in FAULTS]
    if bad:
        raise SystemExit(f"unknown faults: {', '.join(bad)} (known: {', '.join(FAULTS)})")
    skipped = unavailable(wanted)
    active = [f for f in wanted if f not in skipped]
    for fault, why in skipped.items():
        print(f"soak: skipping the {fault} fault: {why}", file=sys.stderr, flush=True)
    topology = args.topology or ("cli" if "scheduler" in active else "hosts" if "cut" in active else "local")
    if topology == "hosts" and args.topology and "cut" in skipped:
        raise SystemExit(f"the hosts topology {skipped['cut'].removeprefix('needs ')}")
    if topology != "hosts" and "cut" in active:
        active.remove("cut")
        skipped["cut"] = "needs the hosts topology"
    if topology != "cli" and "scheduler" in active:
        active.remove("scheduler")
        skipped["scheduler"] = "needs the cli topology"
    if topology == "cli" and "disk" in active:
        active.remove("disk")
        skipped["disk"] = "runs on the local or hosts topology"

    rng = random.Random(args.seed)
    st = Stats()
    held: list[Held] = []
    undo = Undo()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    logs: dict[str, str] = {}
    cluster_notes: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="soak-"))
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        stack.callback(lambda: logs.update(_log_tails(workdir)) if args.logs else None)
        cl = start_cluster(stack, topology, "disk" in active, args.ttl, workdir, args.disk_mb)
        client = cl.client
        # Stop the threads and undo a fault in progress before the cluster goes (runs first).
        stack.callback(undo.run)
        stack.callback(_join_all, threads, args.recover_timeout + 60)
        stack.callback(stop.set)
        client.register_plugin(SoakCounter(), name=PLUGIN_NAME)
        initial = sorted(client.scheduler_info(n_workers=-1)["workers"])
        t_start = time.monotonic()
        deadline = t_start + args.minutes * 60
        ctx = FaultContext(cl, undo, stop, args.hold, args.recover_timeout, args.timeout, args.disk_burst_mb)
        threads.append(
            threading.Thread(
                target=fault_loop,
                args=(
                    ctx,
                    active,
                    args.kill_every,
                    args.fault_every,
                    deadline,
                    random.Random(args.seed + 1),
                    st,
                    args.scheduler_kill_every,
                ),
                name="soak-faults",
                daemon=True,
            )
        )
        threads.append(
            threading.Thread(target=sampler, args=(client, args.sample_every, stop, t_start, st), daemon=True)
        )
        for t in threads:
            t.start()
        names = list(WORK)
        i = 0
        next_progress = t_start + 10
        while time.monotonic() < deadline:
            _run_round(client, names[i % len(names)], rng, args.timeout, args.retries, held, st)
            i += 1
            if len(held) > args.max_held:
                del held[: len(held) - args.max_held]
            if time.monotonic() >= next_progress:
                next_progress += 10
                injected = collections.Counter(f["kind"] for f in st.faults if "skipped" not in f)
                print(
                    f"{time.monotonic() - t_start:6.0f}s rounds={i} checked={st.checked} correct={st.correct} "
                    f"faults={dict(injected)} KilledWorker={st.killed_worker_errors} "
                    f"other_errors={sum(st.errors.values())} hung={len(st.hung)}",
                    file=sys.stderr,
                    flush=True,
                )
        t_work = time.monotonic() - t_start
        stop.set()
        for t in threads:
            t.join(timeout=args.recover_timeout + 60)
        undo.run()
        # Let the nannies bring every worker back before the final checks.
        back_s = wait_recovered(client, cl.n_workers, set(), 120)
        final = _check_held(held, args.timeout)
        st.memory.append(memory_sample(client, t_start))
        counters = client.run_on_scheduler(_plugin_summary)
        n_workers_end = len(client.scheduler_info(n_workers=-1)["workers"])
        # Release everything this client holds; the scheduler must then forget every task.
        held.clear()
        gc.collect()
        left = _wait_no_tasks(client, args.end_timeout)
        cluster_notes = {"topology": cl.topology, "n_workers": cl.n_workers, "scheduler_pid": cl.scheduler_pid}
    seen = counters.pop("worker_addresses_seen")
    faults = fault_summary(st.faults, active)
    unrecovered = sum(f["not_recovered"] for f in faults.values())
    mem = {
        "samples": st.memory,
        "scheduler_rss_mb": trend(st.memory, "scheduler_rss_mb"),
        "scheduler_heap_in_use_mb": trend(st.memory, "scheduler_heap_in_use_mb"),
        "scheduler_heap_free_mb": trend(st.memory, "scheduler_heap_free_mb"),
        "worker_rss_mean_mb": trend(st.memory, "worker_rss_mean_mb"),
        "note": (
            "local topology: the scheduler runs in the soak's own process, its RSS includes the client"
            if topology == "local"
            else "the scheduler is a process of its own (on the first test host, with the hosts topology)"
        ),
    }
    checks = {
        "every_result_correct": not st.wrong,
        "no_round_given_up": not st.gave_up,
        "nothing_lost_silently": final["nothing_lost_silently"],
        "nothing_hung": not st.hung and final["hung"] == 0,
        "every_fault_recovered": unrecovered == 0,
        "all_workers_back": back_s is not None,
        "no_task_left_on_the_scheduler": left.get("n") == 0,
        "fire_and_forget_all_reported": st.ff["missing"] == 0,
        "fire_and_forget_all_forgotten": st.ff["rounds_not_forgotten"] == 0,
    }
    doc: dict[str, Any] = {
        "config": {
            "minutes": args.minutes,
            "faults_wanted": wanted,
            "faults": active,
            "faults_skipped": skipped,
            "kill_every_s": args.kill_every,
            "fault_every_s": args.fault_every,
            "hold_s": args.hold,
            "worker_ttl_s": args.ttl,
            "recover_timeout_s": args.recover_timeout,
            "disk_tmpfs_mb": args.disk_mb,
            "disk_burst_mb": args.disk_burst_mb,
            "seed": args.seed,
            "threads_per_worker": 1,
            "allowed_failures": 3,
            "result_timeout_s": args.timeout,
            "retries": args.retries,
            **cluster_notes,
        },
        "checks": checks,
        "passed": all(checks.values()),
        "wall_s": round(t_work, 1),
        "rounds": dict(st.rounds),
        "results_checked": st.checked,
        "results_correct": st.correct,
        "results_wrong": st.wrong,
        "rounds_given_up": st.gave_up,
        "rounds_hung": st.hung,
        "retries": st.retries,
        "killed_worker_errors": st.killed_worker_errors,
        "other_errors_by_type": dict(st.errors),
        "error_examples": st.error_examples,
        "faults": faults,
        "fault_events": st.faults,
        "workers_killed": faults.get("kill", {}).get("injected", 0),
        "workers_restarted": len(set(seen) - set(initial)),
        "workers_at_end": n_workers_end,
        "all_workers_back": back_s is not None,
        "tasks_completed": counters["tasks_to_memory"],
        "fire_and_forget": {
            **dict(st.ff),
            "forget_s_max": max(st.ff_forget_s) if st.ff_forget_s else None,
        },
        "memory": mem,
        "tasks_left_at_end": left,
        "scheduler": counters,
        "nothing_lost": final,
    }
    if logs and not doc["passed"]:
        doc["logs"] = logs
    return doc


def summary_text(doc: dict[str, Any]) -> str:
    """A few lines with the headline figures."""
    nl = doc["nothing_lost"]
    cfg = doc["config"]
    lines = [
        f"soak: {doc['wall_s']} s of work on the {cfg['topology']} topology ({cfg['n_workers']} workers),"
        f" {sum(doc['rounds'].values())} rounds {doc['rounds']}",
        f"faults: {', '.join(cfg['faults']) or 'none'}"
        + "".join(f"; skipped {f}: {why}" for f, why in cfg["faults_skipped"].items()),
    ]
    for kind, f in doc["faults"].items():
        line = (
            f"  {kind}: injected {f['injected']}, recovered {f['recovered']}"
            f" (median {f['recovery_s_median']} s, max {f['recovery_s_max']} s)"
        )
        if "removed_by_scheduler_during_fault" in f:
            line += f", removed by the scheduler during it {f['removed_by_scheduler_during_fault']}"
        if f.get("outcomes"):
            line += f", outcomes {f['outcomes']}"
        if f["skipped"] or f["errors"]:
            line += f", skipped {f['skipped']}, errors {f['errors']}"
        lines.append(line)
    ff = doc["fire_and_forget"]
    mem = doc["memory"]
    s, w = mem["scheduler_rss_mb"], mem["worker_rss_mean_mb"]
    left = doc["tasks_left_at_end"]
    lines += [
        f"tasks completed (to memory on the scheduler): {doc['tasks_completed']}",
        f"results checked / correct: {doc['results_checked']} / {doc['results_correct']}"
        f" (wrong: {len(doc['results_wrong'])}, given up: {len(doc['rounds_given_up'])},"
        f" hung: {len(doc['rounds_hung'])})",
        f"workers restarted (new addresses): {doc['workers_restarted']}, at the end: {doc['workers_at_end']}",
        f"keys recomputed: {doc['scheduler']['keys_recomputed']} of {doc['scheduler']['memory_keys_lost_with_worker']}"
        f" keys in memory lost with their worker;"
        f" running tasks rescheduled: {doc['scheduler']['running_tasks_rescheduled']}",
        f"KilledWorker (retried): {doc['killed_worker_errors']}, other errors: {doc['other_errors_by_type']}",
        f"fire-and-forget: {ff.get('rounds', 0)} rounds, {ff.get('reported', 0)} reports, missing {ff.get('missing', 0)},"
        f" duplicates {ff.get('duplicate_reports', 0)}, rounds not forgotten {ff.get('rounds_not_forgotten', 0)}",
        f"memory (MB, from minute {s.get('from_min')}, first -> last, slope per minute, slope over the second half):"
        f" scheduler {s['first']} -> {s['last']} ({s['slope_mb_per_min']}, {s.get('second_half_slope_mb_per_min')}),"
        f" worker mean {w['first']} -> {w['last']} ({w['slope_mb_per_min']}, {w.get('second_half_slope_mb_per_min')});"
        f" {len(mem['samples'])} samples",
        f"held futures: {nl['held']}, retrievable: {nl['retrievable']}, reported lost: {nl['reported_lost']},"
        f" hung: {nl['hung']}, wrong: {nl['wrong']} -> nothing lost silently: {nl['nothing_lost_silently']}",
        f"tasks on the scheduler at the end: {left.get('n')} (waited {left.get('waited_s')} s)"
        + (f" {left.get('by_state')}" if left.get("n") else ""),
        "checks: " + ", ".join(f"{k}={v}" for k, v in doc["checks"].items()),
        f"passed: {doc['passed']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.soak``: the same options as ``python -m benchmarks soak``."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p)
    return cmd_soak(p.parse_args(argv))


def add_arguments(p: Any) -> None:
    """The soak's command-line options."""
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run the workload (default 10)")
    p.add_argument(
        "--faults",
        default=None,
        help="comma-separated faults out of kill,freeze,cut,disk,scheduler (default: all but scheduler that this"
        " machine can do; cut and disk need root; scheduler runs on the cli topology; an empty string for none)",
    )
    p.add_argument("--kill-every", type=float, default=20.0, help="seconds between worker kills (default 20)")
    p.add_argument(
        "--scheduler-kill-every",
        type=float,
        default=120.0,
        help="seconds between scheduler kills, each followed by another scheduler on its journal (default 120)",
    )
    p.add_argument(
        "--fault-every", type=float, default=60.0, help="seconds between the other faults, taken in turn (default 60)"
    )
    p.add_argument("--ttl", type=float, default=8.0, help="the scheduler's worker TTL in seconds (default 8)")
    p.add_argument(
        "--hold",
        type=float,
        default=15.0,
        help="seconds a freeze, a cut or a full disk lasts (default 15, past the TTL)",
    )
    p.add_argument(
        "--recover-timeout", type=float, default=120.0, help="seconds a fault has to be recovered from (default 120)"
    )
    p.add_argument(
        "--topology",
        choices=["local", "hosts", "cli"],
        default=None,
        help="local: a LocalCluster on 127.0.0.1; hosts: test hosts in network namespaces; cli: a scheduler with a"
        " journal and workers from their command lines (default: hosts when the cut fault runs, cli when the"
        " scheduler fault does)",
    )
    p.add_argument("--disk-mb", type=int, default=96, help="size of the disk worker's tmpfs in MB (default 96)")
    p.add_argument(
        "--disk-burst-mb", type=int, default=160, help="data pushed onto the disk worker while its disk is full"
    )
    p.add_argument("--sample-every", type=float, default=60.0, help="seconds between memory samples (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for any one result (default 60)")
    p.add_argument("--retries", type=int, default=3, help="retries of a failed round (default 3)")
    p.add_argument("--max-held", type=int, default=200, help="futures kept to the end and checked again")
    p.add_argument(
        "--end-timeout", type=float, default=60.0, help="seconds for the scheduler to forget every task at the end"
    )
    p.add_argument(
        "--no-logs", dest="logs", action="store_false", help="leave the processes' log tails out of a failing report"
    )
    p.add_argument("--out", help="write the report as JSON to this file")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def cmd_soak(args: Any) -> int:
    """Run the soak from parsed arguments; exit 1 when a check failed."""
    previous = signal.signal(signal.SIGTERM, _interrupt)  # clean up on SIGTERM as on Ctrl-C
    try:
        doc = run_soak(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(summary_text(doc))
    if args.out:
        print(f"wrote {args.out}")
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
