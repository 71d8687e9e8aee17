"""The workloads: each measures one thing on ``distributed`` and the same graph locally.

A workload is a function ``(params, repeat) -> list[Metric]``.  It runs one
warm-up and then ``repeat`` timed repetitions.  Metrics that have a local
counterpart carry a ``floor``: the same graph run with dask's ``threads`` and
``sync`` schedulers in the same process, so the ratio distributed / threads
stays comparable across machines.

Only the public API is used here (``Client``, ``LocalCluster``, ``wait``,
``dask.*`` and the command lines), so the suite runs against any
``distributed`` that is importable.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypedDict

import dask

from benchmarks import tasks
from benchmarks.clusters import (
    NTHREADS,
    NWORKERS,
    CliCluster,
    HeadlessBrowser,
    StallProbe,
    cluster_on_first_cpu,
    find_chromium,
    local_cluster,
    rss_bytes,
    rss_peak_bytes,
    settle,
    worker_peak_rss,
)
from benchmarks.dashboard_scale import dashboard_scale
from benchmarks.failover import failover
from benchmarks.many_workers import many_workers
from benchmarks.silent_worker import silent_worker

Params = dict[str, Any]


class Metric(TypedDict):
    metric: str
    unit: str
    values: list[float]
    #: Scheduler name ("threads", "sync") -> values of the same graph run locally.
    floor: dict[str, list[float]]
    #: Whether the regression gate checks this metric's ratio to the threads floor.
    gate: bool
    #: True for throughputs (MB/s, tasks/s); ratios are only formed for times.
    higher_is_better: bool
    note: str


def metric(
    name: str,
    unit: str,
    values: list[float],
    floor: dict[str, list[float]] | None = None,
    *,
    gate: bool = False,
    higher_is_better: bool = False,
    note: str = "",
) -> Metric:
    return Metric(
        metric=name,
        unit=unit,
        values=list(values),
        floor=dict(floor or {}),
        gate=gate,
        higher_is_better=higher_is_better,
        note=note,
    )


def timed(
    fn: Callable[[], object], repeat: int, warmup: int = 1, between: Callable[[], None] | None = None
) -> list[float]:
    """Wall seconds of ``fn()`` over ``repeat`` runs after ``warmup`` untimed ones.

    Whatever ``fn`` returns is kept alive until its clock stops, then dropped,
    and ``between`` runs (untimed) before the next repetition.
    """
    values: list[float] = []
    for i in range(warmup + repeat):
        t0 = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t0
        del result
        if between is not None:
            between()
        if i >= warmup:
            values.append(dt)
    return values


def local_get(scheduler: str) -> Callable[[dict[Any, Any], Any], Any]:
    """``get(dsk, keys)`` for dask's local ``threads`` or ``sync`` scheduler."""
    if scheduler == "threads":
        import dask.threaded

        return lambda dsk, keys: dask.threaded.get(dsk, keys, num_workers=NTHREADS)
    import dask.local

    return lambda dsk, keys: dask.local.get_sync(dsk, keys)


#: Local floors are cheap and noisy at small sizes: time at least this many runs.
MIN_FLOOR_REPEATS = 5


def floors(
    run: Callable[[str], object], repeat: int, warmup: int = 1, at_least: int = MIN_FLOOR_REPEATS
) -> dict[str, list[float]]:
    """Time ``run(scheduler)`` on the ``threads`` and ``sync`` schedulers."""
    n = max(repeat, at_least)
    return {s: timed(lambda s=s: run(s), n, warmup) for s in ("threads", "sync")}  # type: ignore[misc]


#: ``dask.compute`` (dask's stubs leave it untyped).
_dask_compute: Callable[..., tuple[Any, ...]] = getattr(dask, "compute")  # noqa: B009 (dask does not export it to mypy)


def compute_local(coll: Any, scheduler: str) -> Any:
    if scheduler == "threads":
        return _dask_compute(coll, scheduler="threads", num_workers=NTHREADS)[0]
    return _dask_compute(coll, scheduler="sync")[0]


def _noop_graph(n: int) -> tuple[dict[Any, Any], list[Any]]:
    keys = [("noop", i) for i in range(n)]
    return {k: (tasks.noop, i) for i, k in enumerate(keys)}, keys


# -- map_noop -------------------------------------------------------------------------
def map_noop(p: Params, repeat: int) -> list[Metric]:
    """``client.map`` of ``n`` no-op tasks, then ``wait``.

    ``queuing=False`` turns the scheduler's root-task queuing off
    (``distributed.scheduler.worker-saturation: inf``), as both projects
    spell it.  ``journal=True`` has the scheduler keep its journal (a file
    in a temporary directory; this project only).
    """
    from distributed import wait

    n = int(p["n"])
    settings: dict[str, Any] = (
        {} if p.get("queuing", True) else {"distributed.scheduler.worker-saturation": float("inf")}
    )
    journal_dir = tempfile.TemporaryDirectory(prefix="bench-journal-") if p.get("journal") else None
    if journal_dir is not None:
        settings["distributed.scheduler.journal"] = os.path.join(journal_dir.name, "journal.db")
    with dask.config.set(settings), local_cluster(bool(p.get("processes", False))) as client:

        def run() -> object:
            futures = client.map(tasks.noop, range(n), pure=False)
            wait(futures)
            return futures

        values = timed(run, repeat, between=lambda: settle(client))
    if journal_dir is not None:
        journal_dir.cleanup()

    def local(s: str) -> object:
        dsk, keys = _noop_graph(n)
        return local_get(s)(dsk, keys)

    fl = floors(local, repeat)
    return [
        metric("wall", "s", values, fl, gate=True),
        metric("tasks_per_s", "1/s", [n / v for v in values], higher_is_better=True),
    ]


# -- submit_chain ---------------------------------------------------------------------
def submit_chain(p: Params, repeat: int) -> list[Metric]:
    """``n`` dependent submits: the whole chain at once, and one round trip at a time."""
    n = int(p["n"])
    with local_cluster(False) as client:

        def chain() -> object:
            f = client.submit(tasks.inc, 0, pure=False)
            for _ in range(n - 1):
                f = client.submit(tasks.inc, f, pure=False)
            return f.result()

        def round_trips() -> object:
            x = 0
            for _ in range(n):
                x = client.submit(tasks.inc, x, pure=False).result()
            return x

        chain_values = timed(chain, repeat, between=lambda: settle(client))
        rtt_values = [v / n for v in timed(round_trips, repeat, between=lambda: settle(client))]

    def local_chain(s: str) -> object:
        dsk: dict[Any, Any] = {("inc", 0): (tasks.inc, 0)}
        for i in range(1, n):
            dsk[("inc", i)] = (tasks.inc, ("inc", i - 1))
        return local_get(s)(dsk, ("inc", n - 1))

    def local_rtt(s: str) -> object:
        get = local_get(s)
        x = 0
        for _ in range(n):
            x = get({"x": (tasks.inc, x)}, "x")
        return x

    fl_rtt = {s: [v / n for v in vs] for s, vs in floors(local_rtt, repeat).items()}
    return [
        metric("chain_wall", "s", chain_values, floors(local_chain, repeat), gate=True),
        metric("round_trip", "s", rtt_values, fl_rtt, gate=True, note="submit + result, one at a time"),
    ]


# -- array_sum ------------------------------------------------------------------------
def array_sum(p: Params, repeat: int) -> list[Metric]:
    """``da.ones((size, size), chunks=chunks).sum()``: many chunks and a tree reduction."""
    import dask.array as da

    size, chunks = int(p["size"]), int(p["chunks"])

    def build() -> Any:
        return da.ones((size, size), chunks=chunks).sum()

    with local_cluster(False) as client:
        values = timed(lambda: client.compute(build()).result(), repeat, between=lambda: settle(client))
    fl = floors(lambda s: compute_local(build(), s), repeat)
    return [metric("wall", "s", values, fl, gate=True, note=f"{(size // chunks) ** 2} chunks")]


# -- delayed_tree ---------------------------------------------------------------------
def _tree(depth: int) -> Any:
    delayed: Callable[..., Any] = getattr(dask, "delayed")  # noqa: B009 (dask does not export it to mypy)
    level = [delayed(tasks.inc)(i) for i in range(2**depth)]
    while len(level) > 1:
        level = [delayed(tasks.add)(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def delayed_tree(p: Params, repeat: int) -> list[Metric]:
    """Binary reduction of ``2**depth`` leaves built with ``dask.delayed``."""
    depth = int(p["depth"])
    with local_cluster(False) as client:
        values = timed(lambda: client.compute(_tree(depth)).result(), repeat, between=lambda: settle(client))
    fl = floors(lambda s: compute_local(_tree(depth), s), repeat)
    return [metric("wall", "s", values, fl, gate=True, note=f"{2 ** (depth + 1) - 1} tasks")]


# -- dataframe_shuffle ----------------------------------------------------------------
def dataframe_shuffle(p: Params, repeat: int) -> list[Metric]:
    """A task-based shuffle of ``npartitions`` pandas partitions."""
    import dask.dataframe as dd
    import pandas as pd

    nparts, rows = int(p["npartitions"]), int(p["rows"])
    meta = pd.DataFrame({"k": pd.Series([], dtype="i8"), "v": pd.Series([], dtype="f8")})

    def build() -> Any:
        from_map: Callable[..., Any] = dd.from_map
        df = from_map(tasks.make_partition, range(nparts), rows=rows, meta=meta, enforce_metadata=False)
        shuffled = df.shuffle("k", shuffle_method="tasks")
        return shuffled.map_partitions(tasks.partition_rows, meta=(None, "i8")).sum()

    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        with local_cluster(False) as client:
            values = timed(lambda: client.compute(build()).result(), repeat, between=lambda: settle(client))
        fl = floors(lambda s: compute_local(build(), s), repeat)
    return [metric("wall", "s", values, fl, gate=True, note=f"{nparts * rows} rows")]


# -- p2p ------------------------------------------------------------------------------
def _p2p_collection(kind: str, mb: float, nparts: int, method: str) -> Any:
    """The ``kind`` ("shuffle" or "rechunk") graph over about ``mb`` MB, moved with ``method``."""
    if kind == "shuffle":
        import dask.dataframe as dd
        import pandas as pd

        rows = max(int(mb * 1e6 / 40 / nparts), 1)
        meta = pd.DataFrame({"k": pd.Series([], dtype="i8"), **{f"v{j}": pd.Series([], dtype="f8") for j in range(4)}})
        from_map: Callable[..., Any] = dd.from_map
        df = from_map(tasks.wide_partition, range(nparts), rows=rows, meta=meta, enforce_metadata=False)
        shuffled = df.shuffle("k", shuffle_method=method)
        return shuffled.map_partitions(tasks.partition_rows, meta=(None, "i8")).sum()
    import dask.array as da

    side = int((mb * 1e6 / 8) ** 0.5)
    width = max(side // nparts, 1)
    x = da.random.random((side, side), chunks=(side, width))
    # Column blocks to row blocks: every output chunk takes a piece of every input chunk.
    y = x.rechunk((width, side), method=method)
    return y.map_blocks(tasks.block_corner, chunks=(1, 1), dtype=y.dtype).sum()


def p2p(p: Params, repeat: int) -> list[Metric]:
    """A shuffle or a rechunk of ``mb`` MB in ``npartitions`` pieces, P2P against tasks.

    Each run gets fresh worker processes, so a worker's peak RSS (``VmHWM``)
    belongs to that run alone; the methods alternate so that load on the
    machine falls on both alike.
    """
    kind, mb, nparts = str(p["kind"]), float(p["mb"]), int(p["npartitions"])
    limit = p.get("memory_limit")
    wall: dict[str, list[float]] = {"tasks": [], "p2p": []}
    peak: dict[str, list[float]] = {"tasks": [], "p2p": []}
    for _ in range(repeat):
        for method in ("tasks", "p2p"):
            with local_cluster(True, memory_limit=limit) as client:
                coll = _p2p_collection(kind, mb, nparts, method)
                t0 = time.perf_counter()
                client.compute(coll).result()
                wall[method].append(time.perf_counter() - t0)
                peak[method].append(max(worker_peak_rss(client), default=0) / 1e6)
    note = f"{kind} of {mb:g} MB in {nparts} partitions; fresh worker processes per run"
    if limit is not None:
        note += f"; workers limited to {limit}"
    return [
        metric("wall_tasks", "s", wall["tasks"], note=note),
        metric("wall_p2p", "s", wall["p2p"]),
        metric("worker_peak_rss_tasks", "MB", peak["tasks"], note="largest worker's peak RSS"),
        metric("worker_peak_rss_p2p", "MB", peak["p2p"]),
        metric("p2p_speedup", "x", [t / q for t, q in zip(wall["tasks"], wall["p2p"])], higher_is_better=True),
    ]


# -- transfer -------------------------------------------------------------------------
def transfer(p: Params, repeat: int) -> list[Metric]:
    """Move ``mb`` MB between worker processes, and scatter/gather it from the client.

    ``tls=True`` runs the same over mutual TLS.
    """
    from distributed import wait

    mb = float(p["mb"])
    nbytes = int(mb * 1e6)
    with local_cluster(True, tls=bool(p.get("tls", False))) as client:
        a, b = sorted(client.scheduler_info()["workers"])[:2]
        data = tasks.make_array(nbytes)

        w2w: list[float] = []
        graph: list[float] = []
        scatter: list[float] = []
        gather: list[float] = []
        for i in range(repeat + 1):
            src = client.submit(tasks.make_array, nbytes, workers=[a], pure=False)
            wait(src)
            t0 = time.perf_counter()
            dst = client.submit(tasks.array_nbytes, src, workers=[b], pure=False)
            assert dst.result() == data.nbytes
            t1 = time.perf_counter()
            del src, dst
            settle(client)

            t2 = time.perf_counter()
            src = client.submit(tasks.make_array, nbytes, workers=[a], pure=False)
            dst = client.submit(tasks.array_nbytes, src, workers=[b], pure=False)
            dst.result()
            t3 = time.perf_counter()
            del src, dst
            settle(client)

            t4 = time.perf_counter()
            fut = client.scatter(data, workers=[a], hash=False)
            wait(fut)
            t5 = time.perf_counter()
            back = client.gather(fut)
            t6 = time.perf_counter()
            assert back.nbytes == data.nbytes
            del fut, back
            settle(client)
            if i > 0:
                w2w.append(t1 - t0)
                graph.append(t3 - t2)
                scatter.append(t5 - t4)
                gather.append(t6 - t5)

    def local(s: str) -> object:
        dsk = {"src": (tasks.make_array, nbytes), "dst": (tasks.array_nbytes, "src")}
        return local_get(s)(dsk, "dst")

    copies: list[float] = []
    for _ in range(max(repeat, 3)):
        t0 = time.perf_counter()
        copy = data.copy()
        copies.append(time.perf_counter() - t0)
        del copy

    size = data.nbytes / 1e6
    return [
        metric(
            "worker_to_worker",
            "MB/s",
            [size / v for v in w2w],
            higher_is_better=True,
            note="dependency fetched by another worker process",
        ),
        metric(
            "local_copy",
            "MB/s",
            [size / v for v in copies],
            higher_is_better=True,
            note="the same bytes copied to new memory in one process",
        ),
        metric("scatter", "MB/s", [size / v for v in scatter], higher_is_better=True),
        metric("gather", "MB/s", [size / v for v in gather], higher_is_better=True),
        metric(
            "make_then_move_wall",
            "s",
            graph,
            floors(local, repeat),
            note="make on worker A, consume on worker B; locally nothing moves",
        ),
    ]


# -- large_graph ----------------------------------------------------------------------
def _tree_graph(n: int) -> tuple[dict[Any, Any], str]:
    """``n`` leaves reduced in two levels (groups of about sqrt(n), then one): the earliest start of a leaf."""
    from dask._task_spec import List, Task, TaskRef

    group = max(2, round(n**0.5))
    graph: dict[Any, Any] = {}
    partials = []
    for g, lo in enumerate(range(0, n, group)):
        leaves = [f"leaf-{i}" for i in range(lo, min(lo + group, n))]
        for i, k in enumerate(leaves, lo):
            graph[k] = Task(k, tasks.started_at, i)
        pk = f"partial-{g}"
        graph[pk] = Task(pk, min, List(*(TaskRef(k) for k in leaves)))
        partials.append(pk)
    graph["earliest"] = Task("earliest", min, List(*(TaskRef(k) for k in partials)))
    return graph, "earliest"


def large_graph(p: Params, repeat: int) -> list[Metric]:
    """A graph of ``n`` tasks against a scheduler in its own process, with ``workers`` workers.

    ``shape="map"`` (the default): ``client.map`` of ``n`` tasks, every
    result held.  ``shape="tree"``: ``n`` leaves reduced in two levels
    (groups of about sqrt(n), then one), submitted with ``client.get``.
    ``workers`` defaults to the clusters' usual two; with ``workers=0`` the
    tasks wait in the scheduler's queue (what a graph far larger than its
    cluster does), and only ingest, memory and stalls are measured.

    Reported: submission time; when the first task started (its own clock)
    and when the client had the first result; when the scheduler held the
    whole graph (ingest); total time; the scheduler's peak RSS and bytes per
    task; the client's; the longest ``scheduler_info()`` round trip seen from
    a separate process during ingest and after it; and the scheduler's own
    longest event-loop tick during ingest.
    """
    from distributed import wait

    n = int(p["n"])
    nworkers = int(p.get("workers", NWORKERS))
    shape = str(p.get("shape", "map"))
    if shape not in ("map", "tree"):
        raise ValueError(f"large_graph: shape must be 'map' or 'tree', not {shape!r}")
    submit_s: list[float] = []
    first_start_s: list[float] = []
    first_s: list[float] = []
    ingest_s: list[float] = []
    total_s: list[float] = []
    peak_mb: list[float] = []
    per_task: list[float] = []
    stall_ms: list[float] = []
    running_stall_ms: list[float] = []
    tick_ms: list[float] = []
    idle_ms: list[float] = []
    client_mb: list[float] = []
    client_per_task: list[float] = []
    for _ in range(repeat):
        with CliCluster(nworkers=nworkers) as cluster:
            client = cluster.client
            if nworkers:
                wait(client.map(tasks.noop, range(min(n, 1000)), pure=False))
            settle(client)
            rss0 = cluster.scheduler_rss()
            made0 = client.run_on_scheduler(tasks.scheduler_tasks_made)
            graph, out_key = _tree_graph(n) if shape == "tree" else ({}, "")
            ntasks = len(graph) or n
            client_rss0 = rss_bytes(os.getpid())
            probe = StallProbe(cluster.address)
            probe.wait_ready()
            time.sleep(0.2)
            client.run_on_scheduler(tasks.scheduler_longest_tick)
            start_wall = time.time()
            t0 = time.perf_counter()
            if shape == "tree":
                futures = [client.get(graph, out_key, sync=False)]
            else:
                futures = client.map(tasks.started_at, range(n), pure=False)
            t1 = time.perf_counter()
            first_start = float("nan")
            if shape == "map" and nworkers:
                first_start = min(client.gather(futures[:100]))
                first_s.append(time.perf_counter() - t0)
            while client.run_on_scheduler(tasks.scheduler_tasks_made) < made0 + ntasks:
                time.sleep(0.05)
            ingest_s.append(time.perf_counter() - t0)
            ingested_wall = time.time()
            tick_ms.append(1000 * client.run_on_scheduler(tasks.scheduler_longest_tick))
            for i in range(0, len(futures) if nworkers else 0, 10_000):
                wait(futures[i : i + 10_000])
            t3 = time.perf_counter()
            end_wall = time.time()
            if shape == "tree" and nworkers:
                first_start = futures[0].result()
            samples = probe.finish()
            client_peak = rss_peak_bytes(os.getpid())
            if client_peak is not None:
                client_mb.append(client_peak / 1e6)
                if client_rss0 is not None:
                    client_per_task.append(max(client_peak - client_rss0, 0) / ntasks)
            peak = cluster.scheduler_peak_rss()
            if peak is None:
                peak = cluster.scheduler_rss()
            submit_s.append(t1 - t0)
            if nworkers:
                first_start_s.append(first_start - start_wall)
                total_s.append(t3 - t0)
            peak_mb.append(peak / 1e6)
            per_task.append(max(peak - rss0, 0) / ntasks)
            during = [lat for sent, lat in samples if sent <= ingested_wall and sent + lat >= start_wall]
            after = [lat for sent, lat in samples if sent <= end_wall and sent + lat > ingested_wall]
            before = [lat for sent, lat in samples if sent + lat < start_wall]
            stall_ms.append(1000 * max(during, default=float("nan")))
            running_stall_ms.append(1000 * max(after, default=float("nan")))
            idle_ms.append(1000 * sorted(before)[len(before) // 2] if before else float("nan"))
            del futures, graph

    def local(s: str) -> object:
        if shape == "tree":
            dsk, key = _tree_graph(n)
            return local_get(s)(dsk, key)
        dsk, keys = _noop_graph(n)
        return local_get(s)(dsk, keys)

    ran: list[Metric] = []
    if nworkers:
        ran.append(
            metric(
                "first_task_start",
                "s",
                first_start_s,
                note="the first task started (its own clock), from the start of submission",
            )
        )
        if shape == "map":
            ran.append(
                metric(
                    "first_result",
                    "s",
                    first_s,
                    note="the first 100 results at the client, from the start of submission",
                )
            )
        fl = floors(local, repeat, warmup=0, at_least=1)
        ran.append(metric("total", "s", total_s, fl, note="one run per cluster: not gated"))
    return [
        metric("submit", "s", submit_s, note="client.map or client.get returns"),
        *ran,
        metric("ingest", "s", ingest_s, note="the scheduler made every task of the graph, from the start"),
        metric("scheduler_peak_rss", "MB", peak_mb),
        metric("scheduler_bytes_per_task", "B", per_task, note="(peak RSS - RSS before) / tasks"),
        metric(
            "client_peak_rss", "MB", client_mb, note="peak RSS of the client's process (it imports dask, numpy, pandas)"
        ),
        metric("client_bytes_per_task", "B", client_per_task, note="(peak RSS - RSS before submitting) / tasks"),
        metric("max_event_loop_stall", "ms", stall_ms, note="longest scheduler_info() round trip during ingest"),
        metric("longest_tick", "ms", tick_ms, note="the scheduler's longest 20 ms loop tick during ingest, its own"),
        metric("max_stall_running", "ms", running_stall_ms, note="longest round trip after ingest, to the end"),
        metric("idle_round_trip", "ms", idle_ms, note="median scheduler_info() round trip before submission"),
    ]


# -- startup --------------------------------------------------------------------------
def startup(p: Params, repeat: int) -> list[Metric]:
    """``LocalCluster`` up, first result, close."""
    from distributed import Client, LocalCluster

    processes = bool(p.get("processes", False))
    up: list[float] = []
    first: list[float] = []
    close: list[float] = []
    total: list[float] = []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None)
        client = Client(cluster)
        client.wait_for_workers(2, timeout=60)
        t1 = time.perf_counter()
        assert client.submit(tasks.inc, 1, pure=False).result() == 2
        t2 = time.perf_counter()
        client.close()
        cluster.close()
        t3 = time.perf_counter()
        if i > 0:
            up.append(t1 - t0)
            first.append(t2 - t1)
            close.append(t3 - t2)
            total.append(t3 - t0)

    def local(s: str) -> object:
        return local_get(s)({"x": (tasks.inc, 1)}, "x")

    return [
        metric("cluster_up", "s", up),
        metric("first_result", "s", first, floors(local, repeat)),
        metric("close", "s", close),
        metric("total", "s", total),
    ]


# -- scheduler_cpu_per_task -----------------------------------------------------------
def cpu_per_task_floors(n: int, repeat: int) -> dict[str, list[float]]:
    """The floors of a CPU per task: this process's CPU per task running ``n`` no-op tasks with dask's local schedulers.

    Keyed by scheduler (``threads``, ``sync``).
    """

    def local_cpu(s: str) -> list[float]:
        out: list[float] = []
        for i in range(max(repeat, MIN_FLOOR_REPEATS) + 1):
            dsk, keys = _noop_graph(n)
            c0 = time.process_time()
            local_get(s)(dsk, keys)
            c1 = time.process_time()
            if i > 0:
                out.append((c1 - c0) / n)
        return out

    return {s: local_cpu(s) for s in ("threads", "sync")}


def scheduler_cpu_per_task(p: Params, repeat: int) -> list[Metric]:
    """CPU seconds of the scheduler process per task, the scheduler in its own process."""
    from distributed import wait

    n = int(p["n"])
    values: list[float] = []
    with CliCluster() as cluster:
        client = cluster.client
        for i in range(repeat + 1):
            settle(client)
            c0 = cluster.scheduler_cpu()
            wait(client.map(tasks.noop, range(n), pure=False))
            settle(client)
            c1 = cluster.scheduler_cpu()
            if i > 0:
                values.append((c1 - c0) / n)

    fl = cpu_per_task_floors(n, repeat)
    return [
        metric(
            "cpu_per_task",
            "s",
            values,
            fl,
            gate=True,
            note="scheduler process CPU / tasks (includes a few run_on_scheduler polls); floor: whole-process CPU / tasks",
        )
    ]


def dashboard_cpu(p: Params, repeat: int) -> list[Metric]:
    """The scheduler's extra CPU with ``/status`` open in headless Chromium while ``map_noop`` runs.

    The scheduler runs in its own process (command line); its CPU time
    (psutil) is read around each ``map`` of ``n`` no-op tasks: with the
    dashboard served but no page open, then with the status page open in a
    headless browser, and on a second cluster with no dashboard at all.
    ``extra_cpu_pct`` is, per run with the page open, the CPU seconds beyond
    the median run without it, as a percentage of one core over that run's
    wall time; ``dashboard_on_cpu_pct`` compares the runs with the dashboard
    served (no page) with those without a dashboard the same way (what the
    task stream's recording costs). The idle cost (cluster idle, page open)
    is measured over ``idle_s`` seconds. Needs ``chromium`` on PATH.

    A viewer's browser runs on another machine; here it shares this one.  So
    that its drawing does not slow the scheduler down by taking its CPU (which
    would count as the dashboard's cost), the cluster and this process run on
    the first CPU and the browser on the others, when there are several.
    """

    from distributed import wait

    n = int(p["n"])
    idle_s = float(p.get("idle_s", 5.0))
    executable = find_chromium()
    if executable is None:
        raise RuntimeError("dashboard_cpu needs a Chromium browser on PATH ('chromium')")

    def runs(cluster: CliCluster) -> tuple[list[float], list[float]]:
        client = cluster.client
        cpu: list[float] = []
        wall: list[float] = []
        for i in range(repeat + 1):
            settle(client)
            c0, t0 = cluster.scheduler_cpu(), time.perf_counter()
            wait(client.map(tasks.noop, range(n), pure=False))
            c1, t1 = cluster.scheduler_cpu(), time.perf_counter()
            if i > 0:  # the first is a warm-up (and, with the page, lets it connect)
                cpu.append(c1 - c0)
                wall.append(t1 - t0)
        return cpu, wall

    def idle_pct(cluster: CliCluster) -> float:
        settle(cluster.client)
        c0, t0 = cluster.scheduler_cpu(), time.perf_counter()
        time.sleep(idle_s)
        return 100 * (cluster.scheduler_cpu() - c0) / (time.perf_counter() - t0)

    def extra_pct(cpu: list[float], wall: list[float], base_cpu: list[float]) -> list[float]:
        base = sorted(base_cpu)[len(base_cpu) // 2]
        return [100 * (c - base) / w for c, w in zip(cpu, wall, strict=True)]

    with cluster_on_first_cpu() as browser_cpus:
        with CliCluster(dashboard=False) as cluster:
            cpu_off, wall_off = runs(cluster)
        with CliCluster(dashboard=True) as cluster:
            cpu_without, wall_without = runs(cluster)
            idle_without = idle_pct(cluster)
            url = f"http://127.0.0.1:{cluster.dashboard_port}/status"
            browser = HeadlessBrowser(url, executable, cpus=browser_cpus)
            try:
                browser.wait_loaded("Status")
                cpu_with, wall_with = runs(cluster)
                idle_with = idle_pct(cluster)
            finally:
                browser.close()
    placement = "cluster on one CPU, browser on the others" if browser_cpus else "cluster and browser share the CPUs"

    return [
        metric(
            "extra_cpu_pct",
            "%",
            extra_pct(cpu_with, wall_with, cpu_without),
            note=f"page open vs dashboard served with no page: scheduler CPU beyond the median, % of a core ({placement})",
        ),
        metric(
            "dashboard_on_cpu_pct",
            "%",
            extra_pct(cpu_without, wall_without, cpu_off),
            note="dashboard served, no page, vs no dashboard: scheduler CPU beyond the median, % of a core",
        ),
        metric("cpu_no_dashboard", "s", cpu_off),
        metric("cpu_without_page", "s", cpu_without),
        metric("cpu_with_page", "s", cpu_with),
        metric("wall_no_dashboard", "s", wall_off),
        metric("wall_without_page", "s", wall_without),
        metric("wall_with_page", "s", wall_with),
        metric("idle_cpu_pct_without_page", "%", [idle_without]),
        metric("idle_cpu_pct_with_page", "%", [idle_with]),
    ]


def stealing(p: Params, repeat: int) -> list[Metric]:
    """One slow worker holding the input of ``n`` sleeping tasks: wall with work stealing on and off.

    Every task depends on data scattered to the slow worker (``factor`` times
    slower), so the scheduler places them all there; only stealing moves them
    to the idle worker.  Not gated: it shows what stealing pays.
    """
    n, seconds, factor = int(p["n"]), float(p.get("seconds", 0.02)), float(p.get("factor", 3.0))

    def run(steal: bool) -> list[float]:
        with dask.config.set({"distributed.scheduler.work-stealing": steal}), local_cluster(False) as client:
            slow = sorted(client.scheduler_info()["workers"])[0]

            def once() -> object:
                [x] = client.scatter([0], workers=[slow])
                fs = [client.submit(tasks.sleep_slower_on, x, slow, seconds, factor, pure=False) for _ in range(n)]
                return client.gather(fs)

            return timed(once, repeat, between=lambda: settle(client))

    on, off = run(True), run(False)
    return [
        metric(
            "wall_stealing_on", "s", on, note=f"both workers busy: about {n * seconds * factor / (factor + 1):.2f} s"
        ),
        metric("wall_stealing_off", "s", off, note=f"all on the slow worker: about {n * seconds * factor:.2f} s"),
        metric("off_over_on", "x", [b / a for a, b in zip(on, off, strict=True)], higher_is_better=True),
    ]


# -- hosts --------------------------------------------------------------------------------
def _test_hosts_module() -> Any:
    """This repository's test hosts (``distributed/tests/hosts.py``), loaded by path.

    By path, not by import: the ``distributed`` being measured may be another
    release, whose tests know nothing of test hosts.
    """
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "distributed" / "tests" / "hosts.py"
    spec = importlib.util.spec_from_file_location("benchmark_test_hosts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hosts(p: Params, repeat: int) -> list[Metric]:
    """A gather and a worker-to-worker transfer across test hosts whose links a token bucket limits.

    Four network namespaces on a bridge (scheduler, two nanny-run workers,
    the client), every link shaped to ``rate_mbit`` with ``tc tbf``; the
    figures are the fractions of the link's rate reached.  With
    ``kind="map"``, a map of ``n`` no-op tasks on unshaped links instead,
    spread over the hosts and on one of them (:mod:`benchmarks.hosts_map`).
    Needs root.
    """
    import tempfile
    from pathlib import Path

    mod = _test_hosts_module()
    why = mod.hosts_available()
    if why is not None:
        raise RuntimeError(f"the hosts case needs network namespaces: {why}")
    if p.get("kind") == "map":
        return _hosts_map(mod, int(p["n"]), repeat)
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as d, mod.TestHosts(4, Path(d)) as test_hosts:
        fractions = mod.shaped_transfer_rates(test_hosts, float(p["rate_mbit"]), float(p["mb"]), repeat)
    return [
        metric(
            "gather_link_fraction",
            "x link",
            fractions["gather"],
            higher_is_better=True,
            note="client.gather from a worker on another host, as a fraction of the link's rate",
        ),
        metric(
            "worker_to_worker_link_fraction",
            "x link",
            fractions["worker_to_worker"],
            higher_is_better=True,
            note="a dependency fetched from a worker on another host, as a fraction of the link's rate",
        ),
    ]


def _hosts_map(mod: Any, n: int, repeat: int) -> list[Metric]:
    import tempfile
    from pathlib import Path

    from benchmarks.clusters import BENCH_ROOT
    from benchmarks.hosts_map import map_rates

    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as d, mod.TestHosts(4, Path(d)) as test_hosts:
        got = map_rates(test_hosts, n, repeat, BENCH_ROOT)
    where = {"hosts": "spread over four test hosts", "one_host": "all on one test host"}
    out: list[Metric] = []
    for name, text in where.items():
        out.append(metric(f"tasks_per_s_{name}", "1/s", got[f"tasks_per_s_{name}"], higher_is_better=True, note=text))
        out.append(metric(f"cpu_per_task_{name}", "s", got[f"cpu_per_task_{name}"], note=f"scheduler CPU, {text}"))
    return out


WORKLOADS: dict[str, Callable[[Params, int], list[Metric]]] = {
    "map_noop": map_noop,
    "submit_chain": submit_chain,
    "array_sum": array_sum,
    "delayed_tree": delayed_tree,
    "dataframe_shuffle": dataframe_shuffle,
    "transfer": transfer,
    "p2p": p2p,
    "large_graph": large_graph,
    "startup": startup,
    "scheduler_cpu_per_task": scheduler_cpu_per_task,
    "stealing": stealing,
    "dashboard_cpu": dashboard_cpu,
    "dashboard_scale": dashboard_scale,
    "many_workers": many_workers,
    "silent_worker": silent_worker,
    "failover": failover,
    "hosts": hosts,
}
