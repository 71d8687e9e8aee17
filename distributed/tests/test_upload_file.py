"""Client.upload_file: a .py, .zip or .egg reaches every worker process, present and future."""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
from pathlib import Path
from typing import Any, Literal

import pytest

from distributed import Client, LocalCluster, Nanny, Scheduler, UploadFile, get_worker
from distributed.uploads import import_uploaded, save_upload
from distributed.utils_test import gen_cluster


def call_uploaded(name: str, attr: str = "value") -> tuple[Any, bool, bool]:
    """In a task: (the module's ``attr`` called or read, whether it was imported before, whether it came from the worker's directory)."""
    imported_before = name in sys.modules
    module = importlib.import_module(name)
    value = getattr(module, attr)
    origin = os.path.abspath(module.__file__ or "")
    local = os.path.abspath(get_worker().local_directory)
    return (value() if callable(value) else value), imported_before, origin.startswith(local)


def test_upload_py_to_worker_processes_and_one_that_joins_later(tmp_path: Path) -> None:
    path = tmp_path / "uploaded_mod_a.py"
    path.write_text("def value():\n    return 1\n")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            replies = c.upload_file(str(path))
            assert isinstance(replies, dict) and set(replies) == set(c.scheduler_info()["workers"])
            (first,) = replies
            assert c.submit(call_uploaded, "uploaded_mod_a", workers=[first], pure=False).result() == (1, True, True)
            # A new version replaces the module where it was imported.
            path.write_text("def value():\n    return 2\n")
            c.upload_file(str(path))
            assert c.submit(call_uploaded, "uploaded_mod_a", workers=[first], pure=False).result() == (2, True, True)
            # A worker joining later gets the uploads too, in order.
            cluster.scale(2)
            c.wait_for_workers(2)
            (second,) = set(c.scheduler_info()["workers"]) - {first}
            assert c.submit(call_uploaded, "uploaded_mod_a", workers=[second], pure=False).result() == (2, True, True)
            saved = c.run(lambda dask_worker: os.listdir(dask_worker.local_directory))
            assert all("uploaded_mod_a.py" in names for names in saved.values())


@gen_cluster(client=True, nthreads=[])
async def test_upload_archives_zip_and_egg(c: Client[Literal[True]], s: Scheduler, tmp_path: Path) -> None:
    for ext in ("zip", "egg"):
        with zipfile.ZipFile(tmp_path / f"archive_{ext}.{ext}", "w") as z:
            z.writestr(f"pkg_{ext}/__init__.py", f"VALUE = {ext!r}\n")
            z.writestr(f"pkg_{ext}/sub.py", "def value():\n    return 'sub'\n")
    async with Nanny(s.address, nthreads=1) as nanny:
        await c.wait_for_workers(1)
        await c.upload_file(str(tmp_path / "archive_zip.zip"))
        await c.upload_file(str(tmp_path / "archive_egg.egg"))
        w = [nanny.worker_address]
        for ext in ("zip", "egg"):
            value, imported_before, _ = await c.submit(call_uploaded, f"pkg_{ext}", "VALUE", workers=w, pure=False)
            assert (value, imported_before) == (ext, True)
            value, _, _ = await c.submit(call_uploaded, f"pkg_{ext}.sub", workers=w, pure=False)
            assert value == "sub"


@gen_cluster(client=True, nthreads=[])
async def test_upload_without_loading(c: Client[Literal[True]], s: Scheduler, tmp_path: Path) -> None:
    path = tmp_path / "uploaded_not_loaded.py"
    path.write_text("def value():\n    return 'late'\n")
    async with Nanny(s.address, nthreads=1) as nanny:
        await c.wait_for_workers(1)
        await c.upload_file(str(path), load=False)
        # Saved in the worker's directory, which is on sys.path: importable by tasks.
        result = await c.submit(call_uploaded, "uploaded_not_loaded", workers=[nanny.worker_address], pure=False)
        assert result == ("late", False, True)


@gen_cluster(client=True, nthreads=[])
async def test_an_upload_that_fails_to_import_raises(c: Client[Literal[True]], s: Scheduler, tmp_path: Path) -> None:
    path = tmp_path / "uploaded_broken.py"
    path.write_text("1 / 0\n")
    async with Nanny(s.address, nthreads=1):
        await c.wait_for_workers(1)
        with pytest.raises(ZeroDivisionError):
            await c.upload_file(str(path))


def test_upload_file_plugin_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "some_mod.py"
    path.write_bytes(b"X = 1\n")
    plugin = UploadFile(path, load=False)
    assert (plugin.filename, plugin.data, plugin.load, plugin.name) == ("some_mod.py", b"X = 1\n", False, "upload_file")


def test_save_upload_refuses_paths(tmp_path: Path) -> None:
    for bad in ("../escape.py", "sub/dir.py", "", "..", "/abs.py"):
        with pytest.raises(ValueError, match="plain file name"):
            save_upload(str(tmp_path), bad, b"")
    assert not (tmp_path.parent / "escape.py").exists()


def test_import_uploaded_of_other_files_imports_nothing(tmp_path: Path) -> None:
    path = save_upload(str(tmp_path), "notes.txt", "text")
    try:
        assert import_uploaded(path) == []
        assert Path(path).read_text() == "text"
    finally:
        sys.path.remove(str(tmp_path))
