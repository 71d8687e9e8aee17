"""SSHCluster and ``dask ssh`` against real OpenSSH servers on test hosts.

Hosts 0-2 run ``sshd`` (see :mod:`distributed.tests.sshd`); the cluster, its
client and the ``dask ssh`` command run on host 3, so that every connection,
SSH and Dask alike, crosses the test network.  The checks that need no server
(argument errors, a missing asyncssh, ``dask spec``'s usage) run here.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributed.cli import dask_spec
from distributed.deploy.ssh import SSHCluster
from distributed.tests.hosts import BIN, TestHost, TestHosts, wait_for
from distributed.tests.sshd import log_of, make_key, require_sshd, start_sshd

MakeHosts = Callable[[int], TestHosts]


@dataclass
class SSHHosts:
    hosts: TestHosts
    key: Path
    sshd_pids: dict[int, int]

    @property
    def servers(self) -> list[TestHost]:
        return self.hosts.hosts[:3]

    @property
    def client(self) -> TestHost:
        return self.hosts[3]

    def connect_options(self) -> str:
        """The connect_options the client code passes, as Python source."""
        return repr({"client_keys": [str(self.key)], "known_hosts": None})


def ssh_hosts(test_hosts: MakeHosts, tmp_path: Path, refuse: Iterable[int] = ()) -> SSHHosts:
    """Four hosts, sshd on the first three (those in ``refuse`` without our key among their authorized ones)."""
    require_sshd()
    hosts = test_hosts(4)
    keys = tmp_path / "keys"
    keys.mkdir()
    key = make_key(keys / "client")
    make_key(keys / "other")
    host_key = make_key(keys / "host")
    ours = keys / "authorized_keys"
    ours.write_text((keys / "client.pub").read_text())
    theirs = keys / "authorized_keys_other"
    theirs.write_text((keys / "other.pub").read_text())
    pids = {}
    for host in hosts.hosts[:3]:
        proc = start_sshd(host, theirs if host.index in refuse else ours, host_key)
        pids[host.index] = proc.pid
    return SSHHosts(hosts, key, pids)


def leftovers(env: SSHHosts, host: TestHost) -> list[str]:
    """The processes in ``host``'s namespace other than its sshd listener, as command lines."""
    out = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True, timeout=30)
    found = []
    for pid in out.stdout.split():
        if int(pid) == env.sshd_pids[host.index]:
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:  # gone meanwhile
            continue
        found.append(f"{pid}: {cmdline}")
    return found


def assert_nothing_left(env: SSHHosts, hosts: Iterable[TestHost]) -> None:
    """Wait until nothing but sshd's listener runs on ``hosts`` (the per-connection sshd children exit too)."""
    for host in hosts:
        wait_for(lambda h=host: not leftovers(env, h), 30, f"no process but sshd on {host}")  # type: ignore[misc]


@pytest.mark.timeout(240)
def test_ssh_cluster_across_hosts(test_hosts: MakeHosts, tmp_path: Path) -> None:
    env = ssh_hosts(test_hosts, tmp_path)
    s, a, b = env.servers
    code = f"""
    import json, dask
    from distributed import Client, SSHCluster

    with dask.config.set({{"ssh-test": {{"shipped": 100}}}}):
        cluster = SSHCluster(
            [{s.ip!r}, {a.ip!r}, {b.ip!r}],
            connect_options={env.connect_options()},
            worker_options={{"n_workers": 2, "nthreads": 1}},
            scheduler_options={{"port": 0, "dashboard_address": ":0", "idle_timeout": "1 hour"}},
        )
    try:
        with Client(cluster) as client:
            client.wait_for_workers(4, timeout=60)
            total = client.submit(sum, client.map(lambda x: x + 1, range(10))).result()
            shipped = client.run(lambda: dask.config.get("ssh-test.shipped"))
            idle = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.idle_timeout)
            result = {{
                "scheduler": cluster.scheduler_address,
                "workers": sorted(client.scheduler_info(n_workers=-1)["workers"]),
                "handles": sorted(cluster.workers),
                "announced": sorted(w for h in cluster.workers.values() for w in h.worker_addresses),
                "total": total,
                "shipped": sorted(shipped.values()),
                "idle": idle,
                "repr": repr(cluster),
            }}
    finally:
        cluster.close()
    print(json.dumps(result))
    """
    out = env.client.python(code, timeout=200)
    assert out["scheduler"].startswith(f"tcp://{s.ip}:")
    hosts_of = sorted(w.split("://")[1].rsplit(":", 1)[0] for w in out["workers"])
    assert hosts_of == sorted([a.ip, a.ip, b.ip, b.ip])
    assert out["announced"] == out["workers"]
    assert out["handles"] == [0, 1]
    assert out["total"] == sum(range(1, 11))
    assert out["shipped"] == [100] * 4
    assert out["idle"] == 3600
    assert "SSHCluster" in out["repr"]
    # Closed: no scheduler, worker or nanny process is left on any host.
    assert_nothing_left(env, env.servers)


def failing_start(arguments: str) -> str:
    """Code that starts ``SSHCluster(ARGUMENTS)`` and prints ``[error type, message]`` as JSON (``null`` if it started)."""
    return f"""
    import json
    from distributed import SSHCluster

    try:
        SSHCluster({arguments})
    except Exception as e:
        print(json.dumps([type(e).__name__, str(e)]))
    else:
        print(json.dumps(None))
    """


@pytest.mark.timeout(180)
def test_ssh_cluster_start_failures_name_the_host(test_hosts: MakeHosts, tmp_path: Path) -> None:
    env = ssh_hosts(test_hosts, tmp_path, refuse=[2])
    s, a, b = env.servers
    out = env.client.python(
        failing_start(
            f"""[{s.ip!r}, {a.ip!r}, {b.ip!r}], connect_options={env.connect_options()},
                   scheduler_options={{"port": 0, "dashboard_address": ":0"}}"""
        ),
        timeout=150,
    )
    assert out is not None, "SSHCluster started although a host refused the key"
    kind, message = out
    assert kind == "ConnectionError"
    assert repr(b.ip) in message
    assert "PermissionDenied" in message
    # What did start (the scheduler, the other host's worker) was taken down.
    assert_nothing_left(env, env.servers)

    # A worker that cannot start there: the error names the host and carries the remote output.
    out = env.client.python(
        failing_start(
            f"""[{s.ip!r}, {a.ip!r}], connect_options=[{env.connect_options()}] * 2,
                   remote_python=[{sys.executable!r}] * 2,
                   worker_options={{"no_such_option": 1}},
                   scheduler_options={{"port": 0, "dashboard_address": ":0"}}"""
        ),
        timeout=150,
    )
    assert out is not None, "SSHCluster started although its worker could not"
    kind, message = out
    assert kind == "RuntimeError"
    assert f"worker on {a.ip!r} exited before it started" in message
    assert "no_such_option" in message
    assert_nothing_left(env, env.servers)


@pytest.mark.timeout(240)
def test_dask_ssh_cli(test_hosts: MakeHosts, tmp_path: Path) -> None:
    env = ssh_hosts(test_hosts, tmp_path)
    s, a, b = env.servers
    proc = env.client.popen(
        [str(BIN / "dask-ssh"), "--ssh-private-key", str(env.key), "--scheduler", s.ip, "--nworkers", "2", a.ip, b.ip]
    )
    code = f"""
    import json
    from distributed import Client

    with Client("tcp://{s.ip}:8786", timeout=120) as client:
        client.wait_for_workers(4, timeout=120)
        total = client.submit(lambda x: x * 2, 21).result()
        threads = client.nthreads()
    print(json.dumps({{"total": total, "nthreads": threads}}))
    """
    out = env.client.python(code, timeout=200)
    assert out["total"] == 42
    hosts_of = sorted(w.split("://")[1].rsplit(":", 1)[0] for w in out["nthreads"])
    assert hosts_of == sorted([a.ip, a.ip, b.ip, b.ip])
    # --nthreads 0: each of a host's two workers gets half its cores.
    cores = int(a.python("import json, os; print(json.dumps(os.cpu_count()))"))
    assert set(out["nthreads"].values()) == {max(1, cores // 2)}

    # The check below sees the remote processes while they run.
    assert any("distributed.cli.dask_spec" in p for p in leftovers(env, a)), leftovers(env, a)

    proc.send_signal(signal.SIGINT)
    try:
        code_ = proc.wait(90)
    except Exception:
        raise AssertionError(f"dask ssh did not exit after SIGINT:\n{env.hosts.logs()}") from None
    log = log_of(env.client, "dask-ssh")
    assert code_ == 0, log
    assert "Remote processes have been terminated" in log
    assert_nothing_left(env, env.servers)


# -- no servers needed -------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [None, []])
def test_ssh_cluster_needs_hosts(hosts: list[str] | None) -> None:
    with pytest.raises(ValueError, match="non empty list"):
        SSHCluster(hosts)


def test_ssh_cluster_lists_one_per_host() -> None:
    with pytest.raises(RuntimeError, match="connect_options"):
        SSHCluster(["a", "b"], connect_options=[{}, {}, {}], asynchronous=True)
    with pytest.raises(RuntimeError, match="remote_python"):
        SSHCluster(["a", "b"], remote_python=[sys.executable], asynchronous=True)


def test_ssh_cluster_refuses_the_old_api() -> None:
    with pytest.raises(TypeError, match="scheduler_addr, worker_addrs"):
        SSHCluster(scheduler_addr="a", worker_addrs=["b"])


def test_ssh_cluster_without_asyncssh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncssh", None)

    async def start() -> None:
        cluster = SSHCluster(["127.0.0.1"] * 2, asynchronous=True)
        try:
            await cluster
        finally:
            await cluster.close()

    with pytest.raises(ImportError, match="SSHCluster requires the `asyncssh` package"):
        asyncio.run(start())


def test_dask_spec_usage() -> None:
    runner = CliRunner()
    neither = runner.invoke(dask_spec.main, [])
    assert neither.exit_code == 2 and "exactly one of --spec and --spec-file" in neither.output
    bad = runner.invoke(dask_spec.main, ["--spec", json.dumps({"a": {"opts": {}}})])
    assert bad.exit_code == 2 and "'cls'" in bad.output
    one = dask_spec.parse_spec(json.dumps({"cls": "distributed.Scheduler", "opts": {"name": "s"}}), None)
    assert one == {"s": {"cls": "distributed.Scheduler", "opts": {"name": "s"}}}


@pytest.mark.parametrize("command, option", [("ssh", "--ssh-private-key"), ("spec", "--spec-file")])
def test_dask_cli_finds_ssh_and_spec(command: str, option: str, tmp_path: Path) -> None:
    # Through the `dask_cli` entry-point group, as `dask scheduler` and `dask worker`.  Run elsewhere than
    # the checkout: a build's leftover metadata there (*.egg-info) would stand for the installed package's.
    r = subprocess.run(
        [sys.executable, "-m", "dask", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert option in r.stdout


def test_dask_ssh_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    from distributed.cli import dask_ssh

    runner = CliRunner()
    logs = runner.invoke(dask_ssh.main, ["--log-directory", str(tmp_path), "h1"])
    assert logs.exit_code == 2 and "--log-directory" in logs.output
    worker = runner.invoke(dask_ssh.main, ["--remote-dask-worker", "my.worker", "h1"])
    assert worker.exit_code == 2 and "--remote-dask-worker" in worker.output
    nothing = runner.invoke(dask_ssh.main, [])
    assert nothing.exit_code == 1 and "Usage:" in nothing.output
