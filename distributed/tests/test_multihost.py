"""One cluster across several hosts: the real command-line servers, each on a host of its own.

The hosts are network namespaces on a bridge (see :mod:`distributed.tests.hosts`).
The scheduler runs on one host, nanny-managed workers on others, and the
client on yet another, in a process of its own started on that host: every
message of these tests crosses the test network, as between machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distributed.tests.hosts import BIN, TestHost, TestHosts, shaped_transfer_rates, wait_for

pytestmark = pytest.mark.timeout(240)

MakeHosts = Callable[[int], TestHosts]

#: The scheduler's environment without liveness links: only worker-ttl removes a silent worker.
LIVENESS_OFF = {"DASK_DISTRIBUTED__SCHEDULER__LIVENESS__ENABLED": "False"}


def start_cluster(
    hosts: TestHosts,
    tmp_path: Path,
    worker_hosts: list[TestHost],
    scheduler_env: dict[str, str] | None = None,
    worker_args: tuple[str, ...] = (),
) -> Path:
    """Start a scheduler on the first host and a nanny-run worker on each of ``worker_hosts``; the scheduler file."""
    scheduler_file = tmp_path / "scheduler.json"
    hosts[0].scheduler("--scheduler-file", str(scheduler_file), env=scheduler_env)
    for host in worker_hosts:
        host.worker("--scheduler-file", str(scheduler_file), "--nthreads", "2", *worker_args)
    return scheduler_file


def client_code(where: Path | str, body: str, n_workers: int = 2) -> str:
    """Python that connects a client (through a scheduler file, or to an address), waits for the workers, runs ``body``.

    ``body`` sets ``result`` (a JSON-able value), which the code prints.
    """
    target = f"scheduler_file={str(where)!r}" if isinstance(where, Path) else repr(where)
    indented = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return f"""
import json, time
from distributed import Client
with Client({target}, timeout=60) as c:
    c.wait_for_workers({n_workers}, timeout=60)
{indented}
print(json.dumps(result))
"""


def test_a_cluster_across_four_hosts(test_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = test_hosts(4)
    s, a, b, client = hosts
    scheduler_file = start_cluster(hosts, tmp_path, [a, b])
    body = """
import urllib.request
import dask, dask.array as da, dask.dataframe as dd, numpy as np, pandas as pd

info = c.scheduler_info()
workers = sorted(info["workers"])
wa = next(w for w in workers if w.startswith("tcp://" + A_IP + ":"))
wb = next(w for w in workers if w.startswith("tcp://" + B_IP + ":"))

# A value made on one host and needed on the other travels from worker to worker.
x = c.submit(np.ones, 2_000_000, workers=[wa], pure=False)
y = c.submit(lambda v: float(v.sum()), x, workers=[wb], pure=False)
y_value = y.result()
moved = c.run(lambda dask_worker: [dask_worker.transfer_incoming_bytes_total, dask_worker.transfer_outgoing_bytes_total])
ran_at = c.run(lambda dask_worker: dask_worker.address)

arr = da.arange(1_000_000, chunks=50_000).reshape(1000, 1000)
df = dd.from_pandas(pd.DataFrame({"k": np.arange(20_000) % 97, "v": np.arange(20_000)}), npartitions=8)
shuffled = df.shuffle("k", shuffle_method="p2p")
keys_per_part = c.gather(c.compute(shuffled.map_partitions(lambda p: sorted(set(p.k)), meta=("k", object)).to_delayed()))
with urllib.request.urlopen(c.dashboard_link, timeout=20) as r:
    status = r.status
result = {
    "address": info["address"],
    "file": json.load(open(SCHEDULER_FILE))["address"],
    "workers": workers,
    "nannies": sorted(w["nanny"] for w in info["workers"].values()),
    "y": y_value,
    "who_has_x": sorted(c.who_has([x])[x.key]),
    "moved": {w: moved[w] for w in workers},
    "ran_at": ran_at,
    "array": int((arr.T @ arr)[:3, :3].sum().compute()),
    "array_expected": int((np.arange(1_000_000).reshape(1000, 1000).T @ np.arange(1_000_000).reshape(1000, 1000))[:3, :3].sum()),
    "shuffle_len": int(shuffled.shape[0].compute()),
    "shuffle_sum": int(shuffled.v.sum().compute()),
    "shuffle_keys_per_part": [[int(k) for k in part] for part in keys_per_part],
    "link": c.dashboard_link,
    "status": status,
}
"""
    body = (
        body.replace("A_IP", repr(a.ip))
        .replace("B_IP", repr(b.ip))
        .replace("SCHEDULER_FILE", repr(str(scheduler_file)))
    )
    out = client.python(client_code(scheduler_file, body), timeout=180)

    # Announced addresses: each server by its own host's address, in the scheduler file too.
    assert out["address"] == out["file"] == f"tcp://{s.ip}:8786"
    assert [w.rsplit(":", 1)[0] for w in out["workers"]] == [f"tcp://{a.ip}", f"tcp://{b.ip}"]
    assert [n.rsplit(":", 1)[0] for n in out["nannies"]] == [f"tcp://{a.ip}", f"tcp://{b.ip}"]
    assert out["link"] == f"http://{s.ip}:8787/status" and out["status"] == 200
    log = next(tmp_path.glob("hosts0/h0-*-dask-scheduler.log")).read_text()
    assert f"Scheduler at:   tcp://{s.ip}:8786" in log
    # client.run reaches each worker at its announced address.
    assert out["ran_at"] == {w: w for w in out["workers"]}

    wa, wb = out["workers"]
    assert out["y"] == 2_000_000.0
    # x was made on a and copied to b; the active memory manager may since have dropped either copy.
    assert out["who_has_x"] and set(out["who_has_x"]) <= {wa, wb}
    incoming_b, _ = out["moved"][wb]
    _, outgoing_a = out["moved"][wa]
    assert incoming_b >= 16_000_000 and outgoing_a >= 16_000_000  # the 16 MB array went from a to b
    assert out["array"] == out["array_expected"]
    assert out["shuffle_len"] == 20_000 and out["shuffle_sum"] == sum(range(20_000))
    keys_seen = [k for part in out["shuffle_keys_per_part"] for k in part]
    assert sorted(keys_seen) == list(range(97))  # every key in exactly one partition


def progress_client(scheduler_file: Path, marks: Path, n: int, delay: float, wait_workers_at_end: int) -> str:
    """Client code that maps ``n`` tasks of ``delay`` s, marks progress in files, and checks the result.

    It writes ``marks/started`` once a tenth of the tasks are done, then waits
    for ``marks/go`` (the test's sign that the link is back) before it gathers,
    and at the end waits for ``wait_workers_at_end`` workers.
    """
    body = f"""
import os, pathlib
from distributed import as_completed
marks = pathlib.Path({str(marks)!r})
def slow(i):
    time.sleep({delay})
    return i * i
futures = c.map(slow, range({n}), pure=False)
done = 0
for f in as_completed(futures):
    done += 1
    if done == {n} // 10:
        (marks / "started").write_text(json.dumps(sorted(c.scheduler_info()["workers"])))
        break
deadline = time.monotonic() + 120
while not (marks / "go").exists():
    assert time.monotonic() < deadline, "the test never said go"
    (marks / "alive").write_text(json.dumps([len(c.scheduler_info()["workers"]), time.time()]))
    time.sleep(0.2)
values = c.gather(futures)
c.wait_for_workers({wait_workers_at_end}, timeout=90)
result = {{"right": values == [i * i for i in range({n})], "workers": sorted(c.scheduler_info()["workers"])}}
"""
    return client_code(scheduler_file, body)


def start_progress(
    hosts: TestHosts, tmp_path: Path, n: int, scheduler_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], Path, list[str]]:
    """A cluster over the first three hosts, and :func:`progress_client` on the fourth, a tenth through.

    Returns the client's process, its marks directory and the workers it saw.
    """
    s, a, b, client = hosts
    scheduler_file = start_cluster(hosts, tmp_path, [a, b], scheduler_env=scheduler_env)
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = client.popen([sys.executable, "-c", progress_client(scheduler_file, marks, n, 0.1, 2)])
    wait_for(lambda: (marks / "started").exists() or proc.poll() is not None, 120, "the computation to start")
    assert proc.poll() is None, client.output(proc)
    return proc, marks, json.loads((marks / "started").read_text())


def finish_progress(client: TestHost, proc: subprocess.Popen[str], marks: Path) -> Any:
    """Tell :func:`progress_client` to go on, and what it printed at its end."""
    (marks / "go").write_text("")
    proc.wait(150)
    assert proc.returncode == 0, client.output(proc)
    return json.loads(client.output(proc).strip().splitlines()[-1])


def test_a_link_cut_for_20_s_mid_computation(test_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = test_hosts(4)
    s, a, b, client = hosts
    # Unwatched links: a cut is then only a delay (with them, see test_a_cut_link_is_noticed_within_2_s).
    proc, marks, before = start_progress(hosts, tmp_path, 400, scheduler_env=LIVENESS_OFF)
    assert len(before) == 2
    b.cut()
    try:
        # The outage lasts 20 s; meanwhile the client keeps seeing both workers (nothing is removed yet).
        cut_until = time.monotonic() + 20
        wait_for(lambda: time.monotonic() >= cut_until or proc.poll() is not None, 25, "the end of the cut")
        assert proc.poll() is None, client.output(proc)
    finally:
        b.restore()
    out = finish_progress(client, proc, marks)
    assert out["right"]
    assert out["workers"] == before  # both workers, the same ones


def test_a_link_cut_past_the_worker_ttl(test_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = test_hosts(4)
    s, a, b, client = hosts
    env = {"DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "4s", **LIVENESS_OFF}
    proc, marks, before = start_progress(hosts, tmp_path, 200, scheduler_env=env)
    assert len(before) == 2
    b.cut()

    def workers_seen() -> int:
        try:
            return int(json.loads((marks / "alive").read_text())[0])
        except (OSError, ValueError):
            return -1

    try:
        wait_for(lambda: workers_seen() == 1 or proc.poll() is not None, 60, "the scheduler to remove the cut worker")
        assert proc.poll() is None, client.output(proc)
    finally:
        b.restore()
    out = finish_progress(client, proc, marks)
    assert out["right"]  # the removed worker's tasks were redone elsewhere
    # ... and the host's worker is back in the cluster once its link is.
    assert [w.rsplit(":", 1)[0] for w in out["workers"]] == [f"tcp://{a.ip}", f"tcp://{b.ip}"]


def test_a_cut_link_is_noticed_within_2_s(test_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = test_hosts(4)
    s, a, b, client = hosts
    proc, marks, before = start_progress(hosts, tmp_path, 300)
    assert len(before) == 2
    [b_worker] = [w for w in before if w.startswith(f"tcp://{b.ip}:")]
    cut_at = time.time()
    b.cut()
    try:
        # The scheduler's log says when it removed b's worker.
        log = next(tmp_path.glob("hosts0/h0-*-dask-scheduler.log"))
        wait_for(lambda: "stopped answering" in log.read_text() or proc.poll() is not None, 30, "b's removal")
        assert proc.poll() is None, client.output(proc)
    finally:
        b.restore()
    out = finish_progress(client, proc, marks)
    assert out["right"]  # b's tasks were redone on a
    events = client.python(
        client_code(
            tmp_path / "scheduler.json",
            'result = [[t, e] for t, e in c.get_events("scheduler") if e.get("action") == "worker-host-unreachable"]',
            n_workers=2,
        ),
        timeout=120,
    )
    [[removed_at, event]] = events
    assert list(event["workers"]) == [b_worker]
    assert removed_at - cut_at < 2.0, f"removed {removed_at - cut_at:.2f} s after the cut"
    # ... and b's nanny, reachable again, has a new worker in the cluster.
    assert [w.rsplit(":", 1)[0] for w in out["workers"]] == [f"tcp://{a.ip}", f"tcp://{b.ip}"]
    assert b_worker not in out["workers"]


def test_shaped_links_run_near_their_rate(test_hosts: MakeHosts) -> None:
    # 100 Mbit/s links: 40 MB takes 3.2 s at the link's rate; the bar is 80 % of it.
    fractions = shaped_transfer_rates(test_hosts(4), rate_mbit=100, mb=40, repeat=2)
    assert min(fractions["gather"]) >= 0.8, fractions
    assert min(fractions["worker_to_worker"]) >= 0.8, fractions


def test_address_options_across_hosts(test_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = test_hosts(4)
    s, a, b, client = hosts
    # b is reached at a second address (as through NAT): it listens everywhere and announces that one.
    nat_ip = f"{hosts.subnet}.100"
    subprocess.run(["ip", "-n", b.netns, "addr", "add", f"{nat_ip}/24", "dev", "eth0"], check=True)
    s.scheduler("--interface", "eth0", "--port", "8800", "--dashboard-address", ":8790")
    scheduler = f"tcp://{s.ip}:8800"
    a.worker(
        scheduler,
        *("--host", f"tcp://{a.ip}", "--nworkers", "2", "--nthreads", "1"),
        *("--worker-port", "9000:9005", "--nanny-port", "9100:9105"),
    )
    b_worker = b.worker(
        scheduler,
        *("--no-nanny", "--nthreads", "1"),
        *("--listen-address", "tcp://0.0.0.0:9300", "--contact-address", f"tcp://{nat_ip}:9300"),
    )
    body = f"""
import urllib.request
from distributed import Client
info = c.scheduler_info()
workers = sorted(info["workers"])
nat = "tcp://{nat_ip}:9300"
x = c.submit(lambda: list(range(100_000)), workers=[nat], pure=False)
y = c.submit(len, x, workers=[w for w in workers if w != nat][:1], pure=False)
with urllib.request.urlopen(c.dashboard_link, timeout=20) as r:
    status = r.status
result = {{"address": info["address"], "workers": workers, "nannies": sorted(w["nanny"] or "" for w in info["workers"].values()), "y": y.result(), "link": c.dashboard_link, "status": status}}
"""
    code = client_code(scheduler, body, n_workers=3)
    out = client.python(code, timeout=120)
    assert out["address"] == scheduler
    a_workers = [w for w in out["workers"] if w.startswith(f"tcp://{a.ip}:")]
    assert len(a_workers) == 2 and all(9000 <= int(w.rsplit(":", 1)[1]) <= 9005 for w in a_workers)
    assert f"tcp://{nat_ip}:9300" in out["workers"]
    a_nannies = [n for n in out["nannies"] if n]
    assert len(a_nannies) == 2 and all(9100 <= int(n.rsplit(":", 1)[1]) <= 9105 for n in a_nannies)
    assert out["y"] == 100_000  # fetched from the worker at its announced (NAT) address
    assert out["link"] == f"http://{s.ip}:8790/status" and out["status"] == 200
    # The worker's own endpoints are on every interface; its log names the announced host.
    assert f"dashboard at:   http://{nat_ip}:" in b.output(b_worker)


def test_a_missing_interface_is_named(test_hosts: MakeHosts) -> None:
    (host,) = test_hosts(1)
    for cmd in (
        ["dask-scheduler", "--interface", "nope0"],
        ["dask-worker", "tcp://10.0.0.1:8786", "--interface", "nope0"],
    ):
        proc = host.popen([str(BIN / cmd[0]), *cmd[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert "nope0" in err and "eth0" in err  # the missing one, and the ones there are


def test_ipv6_end_to_end(test_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = test_hosts(3)
    s, a, client = hosts
    s.scheduler("--host", f"[{s.ip6}]", "--no-dashboard")
    scheduler = f"tcp://[{s.ip6}]:8786"
    a.worker(scheduler, "--nworkers", "2", "--nthreads", "1", "--no-dashboard")
    body = """
workers = sorted(c.scheduler_info()["workers"])
x = c.submit(lambda: list(range(1000)), workers=workers[:1], pure=False)
y = c.submit(sum, x, workers=workers[1:], pure=False)
result = {"address": c.scheduler_info()["address"], "workers": workers, "y": y.result()}
"""
    code = client_code(scheduler, body)
    out = client.python(code, timeout=120)
    assert out["address"] == scheduler
    assert all(w.startswith(f"tcp://[{a.ip6}]:") for w in out["workers"]), out
    assert out["y"] == sum(range(1000))


def test_no_route_outward_falls_back_with_a_warning(test_hosts: MakeHosts) -> None:
    (host,) = test_hosts(1)
    subprocess.run(["ip", "-n", host.netns, "route", "del", "default"], check=True)
    out = host.python(
        """
        import json, warnings
        from distributed.utils import get_ip
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ip = get_ip()
        print(json.dumps([ip, [str(w.message) for w in caught]]))
        """
    )
    ip, messages = out
    assert ip and ip != "0.0.0.0"
    assert any("Could not find a local address" in m for m in messages), messages
