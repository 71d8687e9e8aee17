"""The ``dashboard_scale`` workload: what open dashboard pages cost a scheduler running a large graph.

Three figures, on a scheduler in its own process (command line) with two
worker processes:

- throughput of ``map`` over ``n`` no-op tasks with no page open, and with
  ``pages`` (``/status``, ``/graph``, ``/tasks`` by default) open in tabs of
  a headless Chromium; runs alternate, so that drift of the machine falls on
  both sides alike;
- the duration of each page's periodic update, as the scheduler measures it
  (its dashboard keeps the last ones: ``dashboard_server.tick_durations(path)``),
  over the runs with the pages open: wall time (how long the loop was
  blocked, including while the process was not scheduled) and CPU time;
- the scheduler's resident memory and open file descriptors before and after
  ``visits`` openings and closings of those pages (each in a new tab, closed
  once its HTML arrived), once the closed pages' sessions are gone.

As in ``dashboard_cpu``, with two or more CPUs the cluster runs on the first
and the browser on the others, as a viewer's browser runs on another machine.
Needs ``chromium`` on PATH.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from benchmarks import tasks
from benchmarks.clusters import CliCluster, HeadlessBrowser, cluster_on_first_cpu, find_chromium, settle

if TYPE_CHECKING:
    from benchmarks.workloads import Metric

__all__ = ["dashboard_scale"]


def _title(page: str) -> str:
    """The title a page's HTML sets (``Dask: Status``...), to know it arrived."""
    return f"Dask: {page.title()}"


def _open_files(pid: int) -> int:
    import psutil

    return int(psutil.Process(pid).num_fds())


def _rss(pid: int) -> int:
    import psutil

    return int(psutil.Process(pid).memory_info().rss)


def _wait_no_sessions(client: Any, timeout: float) -> float:
    """Wait until the scheduler's dashboard holds no session of a page; the seconds it took."""
    t0 = time.monotonic()
    while client.run_on_scheduler(tasks.dashboard_session_count) > 0:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"the dashboard still holds sessions {timeout} s after the pages closed")
        time.sleep(0.5)
    return time.monotonic() - t0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def dashboard_scale(p: dict[str, Any], repeat: int) -> list[Metric]:
    """Throughput with and without pages open, the pages' update times, and memory/fds after many visits."""
    from benchmarks.workloads import metric
    from distributed import wait

    n = int(p.get("n", 200_000))
    pages = [str(x) for x in p.get("pages", ["status", "graph", "tasks"])]
    visits = int(p.get("visits", 50))
    executable = find_chromium()
    if executable is None:
        raise RuntimeError("dashboard_scale needs a Chromium browser on PATH ('chromium')")

    rate_without: list[float] = []
    rate_with: list[float] = []
    durations: dict[tuple[str, bool], list[float]] = {}
    with cluster_on_first_cpu() as browser_cpus, CliCluster(dashboard=True) as cluster:
        client = cluster.client
        base = f"http://127.0.0.1:{cluster.dashboard_port}"
        pid = cluster.scheduler_pid

        def run() -> float:
            settle(client, timeout=120)
            t0 = time.perf_counter()
            wait(client.map(tasks.noop, range(n), pure=False))
            return n / (time.perf_counter() - t0)

        run()  # warm-up
        browser = HeadlessBrowser("about:blank", executable, cpus=browser_cpus)
        try:
            for _ in range(repeat):
                rate_without.append(run())
                tabs = [browser.open_tab(f"{base}/{page}", _title(page)) for page in pages]
                paths = [f"/{page}" for page in pages]
                before = client.run_on_scheduler(tasks.dashboard_update_durations, paths) or {}
                rate_with.append(run())
                for cpu in (False, True):
                    after = client.run_on_scheduler(tasks.dashboard_update_durations, paths, cpu) or {}
                    for path, values in after.items():
                        # The updates during the run: those after the ones kept before it, while none was dropped.
                        seen = len(before.get(path, []))
                        durations.setdefault((path, cpu), []).extend(values[seen:] if seen < len(values) else values)
                for tab in tabs:
                    browser.close_tab(tab)
            settle(client, timeout=120)
            # Visits: a few first (imports, caches), then the measured ones.
            for page in pages:
                browser.close_tab(browser.open_tab(f"{base}/{page}", _title(page)))
            session_wait = _wait_no_sessions(client, timeout=120)
            rss_before, fds_before = _rss(pid), _open_files(pid)
            for i in range(visits):
                page = pages[i % len(pages)]
                browser.close_tab(browser.open_tab(f"{base}/{page}", _title(page)))
            session_wait = max(session_wait, _wait_no_sessions(client, timeout=120))
            rss_after, fds_after = _rss(pid), _open_files(pid)
        finally:
            browser.close()
    placement = "cluster on one CPU, browser on the others" if browser_cpus else "cluster and browser share the CPUs"
    out = [
        metric("tasks_per_s_no_page", "tasks/s", rate_without, higher_is_better=True),
        metric(
            "tasks_per_s_pages_open",
            "tasks/s",
            rate_with,
            higher_is_better=True,
            note=f"pages open: {', '.join(pages)} ({placement})",
        ),
        metric(
            "throughput_kept_pct",
            "%",
            [100 * max(rate_with) / max(rate_without)] if rate_with and rate_without else [],
            higher_is_better=True,
            note="best run with the pages open / best run with none",
        ),
        metric("rss_growth_after_visits", "MB", [(rss_after - rss_before) / 1e6], note=f"{visits} visits"),
        metric("fds_growth_after_visits", "count", [float(fds_after - fds_before)], note=f"{visits} visits"),
        metric("sessions_gone_after", "s", [session_wait], note="closed pages' sessions discarded by the dashboard"),
    ]
    for (path, cpu), values in sorted(durations.items()):
        what = "CPU time of the scheduler's loop" if cpu else "wall time, the loop blocked"
        out.append(
            metric(
                f"update_p99_{'cpu_' if cpu else ''}ms{path.replace('/', '_')}",
                "ms",
                [1000 * _percentile(values, 0.99)],
                note=f"{what}; {len(values)} updates; max {1000 * max(values, default=0):.1f} ms",
            )
        )
    if not durations:
        out.append(metric("update_p99_ms", "ms", [], note="this scheduler does not report its pages' update times"))
    return out
