"""InstallPlugin, PipInstall, CondaInstall and UploadDirectory, on real nannies with worker processes.

The nannies run in this process (as ``LocalCluster(processes=True)`` runs
them), their workers in child processes.  Nothing here reaches the network:
pip installs a wheel written here into a directory of the test, and conda is
a stand-in script (or missing).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import io
import logging
import os
import socket
import stat
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import dask.config
import pytest

import distributed
import distributed.diagnostics.plugin
from distributed import (
    Client,
    CondaInstall,
    InstallPlugin,
    Lock,
    Nanny,
    PipInstall,
    Scheduler,
    Status,
    UploadDirectory,
    Worker,
)
from distributed.diagnostics.install import METADATA_PREFIX, install_lock_name, run_installer
from distributed.tests.logs import caught_logs
from distributed.utils_test import async_poll_for, gen_cluster, gen_test

#: The module of the wheel built here (its name is unlikely to be taken by anything installed).
PROBE_PACKAGE = "distributed_install_probe"


class AppendLine:
    """An install function that appends its process id to a file: one line per install."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self) -> None:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def own_pid() -> int:
    return os.getpid()


def worker_status(dask_worker: Worker) -> str:
    return dask_worker.status.name


def import_probe(target: str) -> tuple[int, str]:
    """Import the probe package installed into ``target``; its value and file."""
    if target not in sys.path:
        sys.path.insert(0, target)
    importlib.invalidate_caches()
    module = importlib.import_module(PROBE_PACKAGE)
    return module.VALUE, str(module.__file__)


def import_uploaded(module_name: str) -> tuple[int, str, list[str]]:
    """Import an uploaded module; its value, its file, and the files around it (relative paths)."""
    importlib.invalidate_caches()
    module = importlib.import_module(module_name)
    root = os.path.dirname(str(module.__file__))
    found = sorted(
        os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
        for d, dirs, files in os.walk(root)
        for f in files
        if "__pycache__" not in d
    )
    return module.VALUE, str(module.__file__), found


def build_probe_wheel(directory: Path, value: int) -> Path:
    """A pure-Python wheel of :data:`PROBE_PACKAGE` (``VALUE = value``), written by hand."""
    dist_info = f"{PROBE_PACKAGE}-0.1.dist-info"
    files = {
        f"{PROBE_PACKAGE}/__init__.py": f"VALUE = {value}\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {PROBE_PACKAGE}\nVersion: 0.1\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = directory / f"{PROBE_PACKAGE}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


async def running_workers(s: Scheduler, n: int, not_pids: set[int | None] = frozenset()) -> set[int | None]:  # type: ignore[assignment]
    def ready() -> bool:
        ws = list(s.workers.values())
        return len(ws) == n and not ({w.pid for w in ws} & not_pids)

    await async_poll_for(ready, timeout=30)
    return {w.pid for w in s.workers.values()}


# -- faces --------------------------------------------------------------------------------------
def test_importable_where_dask_users_import_them() -> None:
    for name in ("InstallPlugin", "PipInstall", "CondaInstall", "UploadDirectory"):
        assert getattr(distributed, name) is getattr(distributed.diagnostics.plugin, name)
        assert name in distributed.__all__ and name in distributed.diagnostics.plugin.__all__
    assert issubclass(PipInstall, InstallPlugin) and issubclass(CondaInstall, InstallPlugin)
    assert issubclass(InstallPlugin, distributed.WorkerPlugin)
    assert issubclass(UploadDirectory, distributed.NannyPlugin)
    # Each plugin object is an install of its own (its name keys the scheduler's record of it).
    assert PipInstall(["x"]).name != PipInstall(["x"]).name


# -- InstallPlugin ------------------------------------------------------------------------------
@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_install_runs_once_per_host_under_the_hosts_lock(tmp_path: Path) -> None:
    record = tmp_path / "installs.txt"
    host = socket.gethostname()
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Nanny(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        await running_workers(s, 2)
        plugin = InstallPlugin(AppendLine(record), restart_workers=False)
        # The plugins' lock is a distributed.Lock: while a client holds it, no worker installs.
        lock = Lock(install_lock_name(host), client=c)
        assert await lock.acquire()
        registering = asyncio.ensure_future(c.register_plugin(plugin))
        waiters = s.extensions["locks"].waiters
        await async_poll_for(lambda: len(waiters.get(install_lock_name(host), ())) == 2, timeout=30)
        assert lines(record) == []
        await lock.release()
        replies = await registering
        assert replies == {a.worker_address: {"status": "OK"}, b.worker_address: {"status": "OK"}}
        # Two workers of one host set it up; one installed, the other found that done.
        assert len(lines(record)) == 1
        assert lines(record)[0] in {str(a.pid), str(b.pid)}
        assert await c.get_metadata([METADATA_PREFIX, plugin.name, "installed", host]) is True
        assert not await lock.locked()
        # A worker joining later sets it up too, and does not install again.
        async with Nanny(s.address, nthreads=1):
            await running_workers(s, 3)
        assert len(lines(record)) == 1


@pytest.mark.timeout(120)
@gen_test(timeout=110)
async def test_restart_workers_restarts_each_worker_once_through_its_nanny(tmp_path: Path) -> None:
    record = tmp_path / "installs.txt"
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Nanny(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        old = await running_workers(s, 2)
        plugin = InstallPlugin(AppendLine(record), restart_workers=True)
        await c.register_plugin(plugin)
        # Each nanny started a new worker, which set the plugin up again (its start includes that,
        # and the nanny knows the worker's address only once it started) without restarting again.
        await async_poll_for(lambda: a.restarts == b.restarts == 1, timeout=60)
        await async_poll_for(lambda: a.worker_address is not None and b.worker_address is not None, timeout=60)
        new = await running_workers(s, 2, not_pids=old)
        assert new == {a.pid, b.pid}
        assert set((await c.run(worker_status)).values()) == {"running"}
        assert await c.run(own_pid) == {a.worker_address: a.pid, b.worker_address: b.pid}
        assert a.restarts == b.restarts == 1
        assert len(lines(record)) == 1
        for nanny in (a, b):
            assert await c.get_metadata([METADATA_PREFIX, plugin.name, "restarted", nanny.address]) is True


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_restart_workers_needs_a_nanny(c: Client[Literal[True]], s: Scheduler, a: Worker, tmp_path: Path) -> None:
    record = tmp_path / "installs.txt"
    with pytest.raises(RuntimeError, match=f"restart_workers=True, but worker {a.address} has no nanny"):
        await c.register_plugin(InstallPlugin(AppendLine(record), restart_workers=True))
    assert lines(record) == []  # refused before installing
    assert a.status == Status.running


# -- PipInstall ---------------------------------------------------------------------------------
@pytest.mark.timeout(120)
@gen_test(timeout=110)
async def test_pip_install_of_a_local_wheel_is_importable_by_tasks(tmp_path: Path) -> None:
    wheel = build_probe_wheel(tmp_path, value=42)
    target = tmp_path / "site"
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Nanny(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        await running_workers(s, 2)
        options = ["--no-index", "--no-deps", "--disable-pip-version-check", "--target", str(target)]
        replies = await c.register_plugin(PipInstall([str(wheel)], pip_options=options))
        assert set(replies) == {a.worker_address, b.worker_address}
        assert (target / PROBE_PACKAGE / "__init__.py").read_text() == "VALUE = 42\n"
        value, where = await c.submit(import_probe, str(target), pure=False)
        assert value == 42 and Path(where).is_relative_to(target)
        assert set((await c.run(import_probe, str(target))).values()) == {(42, where)}


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_pip_failure_reaches_the_caller_with_pips_message() -> None:
    missing = f"distributed-install-probe-missing-{uuid.uuid4().hex[:8]}"
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        await running_workers(s, 1)
        plugin = PipInstall([missing], pip_options=["--no-index", "--disable-pip-version-check"])
        with pytest.raises(RuntimeError, match=f"(?s)pip install failed with exit code 1:.*{missing}"):
            await c.register_plugin(plugin)
        # Not recorded as installed: the next worker to set it up tries again.
        assert await c.get_metadata([METADATA_PREFIX, plugin.name], default=None) is None
        assert await c.submit(own_pid, pure=False) == a.pid


def test_run_installer_logs_and_raises_with_the_tools_error_output() -> None:
    failing = [
        sys.executable,
        "-c",
        "import sys; print('partial'); sys.stderr.write('boom: no such thing'); sys.exit(3)",
    ]
    with caught_logs("distributed.diagnostics.install", logging.ERROR) as records:
        with pytest.raises(RuntimeError, match="(?s)pip install failed with exit code 3:\nboom: no such thing"):
            run_installer("pip", failing)
    assert any("boom: no such thing" in r.getMessage() for r in records)
    run_installer("pip", [sys.executable, "-c", "pass"])  # success raises nothing
    with pytest.raises(RuntimeError, match="cannot run"):
        run_installer("conda", [str(Path(sys.executable).parent / "no-such-conda-executable")])


# -- CondaInstall -------------------------------------------------------------------------------
@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_conda_install_without_conda_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        # The worker's environment has no conda at all: no CONDA_EXE, nothing on PATH.
        Nanny(s.address, nthreads=1, env={"CONDA_EXE": "", "PATH": str(empty)}),
        Client(s.address, asynchronous=True) as c,
    ):
        await running_workers(s, 1)
        with pytest.raises(RuntimeError, match="conda could not be found.*CONDA_EXE is not set.*no `conda` on PATH"):
            await c.register_plugin(CondaInstall(["numpy"]))


@pytest.fixture
def fake_conda(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A stand-in conda that records its arguments, and fails for the package ``no-such-conda-package``."""
    record = tmp_path / "conda-args.txt"
    script = tmp_path / "bin" / "conda"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        '  if [ "$arg" = no-such-conda-package ]; then\n'
        '    echo "PackagesNotFoundError: no-such-conda-package" >&2\n'
        "    exit 1\n"
        "  fi\n"
        "done\n"
        f"printf '%s\\n' \"$@\" > '{record}'\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    yield script, record


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in conda is a shell script")
@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_conda_install_runs_conda_install_yes(fake_conda: tuple[Path, Path]) -> None:
    script, record = fake_conda
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1, env={"CONDA_EXE": str(script)}),
        Client(s.address, asynchronous=True) as c,
    ):
        await running_workers(s, 1)
        await c.register_plugin(CondaInstall(["numpy=1.26", "scipy"], conda_options=["-c", "conda-forge"]))
        assert lines(record) == ["install", "--yes", "-c", "conda-forge", "numpy=1.26", "scipy"]
        with pytest.raises(RuntimeError, match="(?s)conda install failed with exit code 1:.*PackagesNotFoundError"):
            await c.register_plugin(CondaInstall(["no-such-conda-package"]))


# -- UploadDirectory ----------------------------------------------------------------------------
def make_project(root: Path, module_name: str, value: int) -> Path:
    """A directory with a module, a package, and what an upload leaves out by default."""
    project = root / f"project_{uuid.uuid4().hex[:8]}"
    (project / "subpkg").mkdir(parents=True)
    (project / f"{module_name}.py").write_text(f"VALUE = {value}\n")
    (project / "subpkg" / "__init__.py").write_text("")
    (project / "compiled.pyc").write_bytes(b"\x00not really bytecode")
    for skipped in ("tests", ".git", "docs"):
        (project / skipped).mkdir()
        (project / skipped / "inside.py").write_text("raise ImportError('skipped files must not be uploaded')\n")
    return project


def test_upload_directory_zips_what_is_not_skipped(tmp_path: Path) -> None:
    project = make_project(tmp_path, "module_a", 1)
    (project / "notes.txt").write_text("left out by a skip callable\n")
    (project / "subpkg" / "tests").mkdir()
    (project / "subpkg" / "tests" / "deep.py").write_text("")
    plugin = UploadDirectory(project, skip=(lambda fn: fn.endswith((".pyc", ".txt")),))
    names = sorted(zipfile.ZipFile(io.BytesIO(plugin.data)).namelist())
    assert names == [f"{project.name}/module_a.py", f"{project.name}/subpkg/__init__.py"]
    assert plugin.name == f"upload-directory-{project.name}"
    assert not plugin.restart and not plugin.update_path
    with pytest.raises(NotADirectoryError):
        UploadDirectory(project / "module_a.py")


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A temporary-directory of this test's own (the nannies' and workers' local directories go there).

    The nannies run in this process: what an upload puts on ``sys.path`` here is taken off afterwards.
    """
    path_before = list(sys.path)
    with dask.config.set({"temporary-directory": str(tmp_path / "scratch")}):
        yield tmp_path / "scratch" / "dask-scratch-space"
    sys.path[:] = path_before


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_upload_directory_onto_the_path_of_a_running_worker(tmp_path: Path, scratch: Path) -> None:
    module_name = f"upload_probe_{uuid.uuid4().hex[:8]}"
    project = make_project(tmp_path, module_name, 7)
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        [pid] = await running_workers(s, 1)
        replies = await c.register_plugin(UploadDirectory(project, update_path=True))
        assert replies == {a.worker_address: {"status": "OK"}}
        value, where, files = await c.submit(import_uploaded, module_name, pure=False)
        assert value == 7
        # Imported from the copy in the nanny's local directory, not from the original.
        assert Path(where) == scratch / project.name / f"{module_name}.py"
        assert files == sorted([f"{module_name}.py", "subpkg/__init__.py"])
        assert a.pid == pid and a.restarts == 0  # restart=False: the same worker process


@pytest.mark.timeout(120)
@gen_test(timeout=110)
async def test_upload_directory_with_restart_reaches_new_workers_and_later_nannies(
    tmp_path: Path, scratch: Path
) -> None:
    module_name = f"upload_probe_{uuid.uuid4().hex[:8]}"
    project = make_project(tmp_path, module_name, 11)
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        old = await running_workers(s, 1)
        await c.register_plugin(UploadDirectory(project, restart=True, update_path=True))
        await running_workers(s, 1, not_pids=old)
        assert a.restarts == 1
        value, where, _ = await c.submit(import_uploaded, module_name, pure=False)
        assert (value, Path(where)) == (11, scratch / project.name / f"{module_name}.py")
        async with Nanny(s.address, nthreads=1) as late:
            await running_workers(s, 2)
            assert late.restarts == 0  # set up before its first worker started: nothing to restart
            result = await c.run(import_uploaded, module_name, workers=[str(late.worker_address)])
            assert result[str(late.worker_address)][0] == 11
