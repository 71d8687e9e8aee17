"""Versions across a cluster: reported by each part, compared on connecting and by get_versions(check=True)."""

from __future__ import annotations

import copy
import sys
from typing import Any, Literal

import pytest

import distributed.client.debugging
import distributed.client.link
from distributed import Client, Scheduler, Worker
from distributed.utils_test import gen_cluster
from distributed.versions import VersionMismatchWarning, error_message, get_versions


def with_package(info: dict[str, Any], name: str, version: str | None) -> dict[str, Any]:
    changed = copy.deepcopy(info)
    changed["packages"][name] = version
    return changed


def test_versions_of_this_process() -> None:
    info = get_versions(packages=["pytest", "no-such-package-here"])
    assert info["packages"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["packages"]["distributed"] == distributed.__version__
    assert info["packages"]["pytest"] == pytest.__version__
    assert info["packages"]["no-such-package-here"] is None
    assert info["host"]["python-bits"] in (32, 64) and info["host"]["OS"]


def test_error_message_tells_required_from_optional() -> None:
    same = get_versions()
    assert error_message(same, {"w": same}, same) == {"warning": "", "error": ""}
    old_numpy = with_package(same, "numpy", "0.0.1")
    found = error_message(same, {"a": same, "b": old_numpy}, same)
    assert "numpy" in found["warning"] and found["error"] == ""
    old_dask = with_package(same, "dask", "0.0.1")
    found = error_message(same, {"a": same}, old_dask, source_name="Client")
    assert found["error"].startswith("Mismatched versions found") and "dask" in found["error"]
    assert "| 0.0.1" in found["error"] and "Client" in found["error"]
    # A required package missing on one side differs too; a side that reported nothing is left out.
    no_msgpack = with_package(same, "msgpack", None)
    assert "msgpack" in error_message(same, {"a": no_msgpack}, same)["error"]
    assert error_message(same, {"a": same}, None) == {"warning": "", "error": ""}


@gen_cluster(client=True)
async def test_get_versions_of_the_whole_cluster(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    versions = await c.get_versions(check=True)
    assert set(versions) == {"client", "scheduler", "workers"}
    assert set(versions["workers"]) == {a.address, b.address}
    assert versions["scheduler"]["packages"]["dask"] == versions["client"]["packages"]["dask"]
    asked = await c.get_versions(packages=["pytest"])
    assert asked["scheduler"]["packages"]["pytest"] == pytest.__version__
    assert all(w["packages"]["pytest"] == pytest.__version__ for w in asked["workers"].values())
    assert "pytest" not in versions["workers"][a.address]["packages"]


@gen_cluster(client=True)
async def test_check_raises_on_a_required_package_and_warns_on_another(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = get_versions
    monkeypatch.setattr(
        distributed.client.debugging, "get_versions", lambda p=None: with_package(real(p), "numpy", "0.1")
    )
    with pytest.warns(VersionMismatchWarning, match="numpy"):
        await c.get_versions(check=True)
    monkeypatch.setattr(
        distributed.client.debugging, "get_versions", lambda p=None: with_package(real(p), "dask", "0.1")
    )
    with pytest.raises(ValueError, match="(?s)Mismatched versions found.*dask"):
        await c.get_versions(check=True)
    await c.get_versions()  # without check: no complaint


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_a_client_warns_on_connecting_when_versions_differ(
    s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = get_versions
    monkeypatch.setattr(distributed.client.link, "get_versions", lambda: with_package(real(), "cloudpickle", "0.1"))
    with pytest.warns(VersionMismatchWarning, match="cloudpickle"):
        async with Client(s.address, asynchronous=True):
            pass
