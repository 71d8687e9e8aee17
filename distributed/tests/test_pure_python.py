"""Checks that ``distributed`` stays a pure-Python, typed package.

* the source tree holds no Cython or compiled files, and the packaging
  configuration declares no extensions or build hooks;
* a wheel built from the repository is ``py3-none-any`` and carries the
  ``py.typed`` marker and the default configuration file;
* ``async def`` methods of the main classes are recognised as coroutine
  functions by the standard library.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import shutil
import subprocess
import sys
import tomllib
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "distributed"
PYPROJECT = REPO_ROOT / "pyproject.toml"
SETUP_CFG = REPO_ROOT / "setup.cfg"

COMPILED_SUFFIXES = (".pyx", ".pxd", ".c", ".so", ".pyd")
FORBIDDEN_CONFIG_WORDS = (
    "cython",
    "ext_modules",
    "ext-modules",
    "build_ext",
    "cmdclass",
    "build-hook",
    "hooks",
)

requires_source_tree = pytest.mark.skipif(
    not PYPROJECT.is_file(),
    reason="not running from a source checkout (pyproject.toml not found)",
)


# ---------------------------------------------------------------------------
# (a) no compiled sources, no extension configuration
# ---------------------------------------------------------------------------


@requires_source_tree
def test_source_tree_has_no_compiled_files() -> None:
    assert PACKAGE_DIR.is_dir()
    offenders = sorted(
        str(path.relative_to(REPO_ROOT))
        for path in PACKAGE_DIR.rglob("*")
        if path.is_file() and path.name.lower().endswith(COMPILED_SUFFIXES)
    )
    assert offenders == [], f"compiled or Cython files found: {offenders}"


@requires_source_tree
def test_no_setup_py_extensions_or_cython_sources_at_root() -> None:
    setup_py = REPO_ROOT / "setup.py"
    if setup_py.is_file():
        text = setup_py.read_text(encoding="utf-8").lower()
        for word in FORBIDDEN_CONFIG_WORDS:
            assert word not in text, f"setup.py mentions {word!r}"
    cython_files = sorted(
        path.name for path in REPO_ROOT.iterdir() if path.is_file() and path.suffix in (".pyx", ".pxd")
    )
    assert cython_files == []


@requires_source_tree
def test_pyproject_is_pure_python() -> None:
    with PYPROJECT.open("rb") as f:
        data: dict[str, Any] = tomllib.load(f)

    build_system = data["build-system"]
    assert build_system["build-backend"] == "setuptools.build_meta"
    assert "backend-path" not in build_system, "no in-tree build backends"
    for requirement in build_system["requires"]:
        assert "cython" not in str(requirement).lower(), requirement

    assert data["project"]["name"] == "distributed"
    assert data["project"]["requires-python"] == ">=3.11"

    setuptools_cfg: dict[str, Any] = data.get("tool", {}).get("setuptools", {})
    for key in ("ext-modules", "ext_modules", "cmdclass"):
        assert key not in setuptools_cfg, f"[tool.setuptools] must not set {key}"
    # Build hooks of other backends (hatch, scikit-build, meson, ...).
    for tool in ("hatch", "scikit-build", "meson-python", "cibuildwheel"):
        assert tool not in data.get("tool", {}), f"unexpected [tool.{tool}]"

    text = PYPROJECT.read_text(encoding="utf-8").lower()
    for word in FORBIDDEN_CONFIG_WORDS:
        assert word not in text, f"pyproject.toml mentions {word!r}"


@requires_source_tree
def test_setup_cfg_is_tool_configuration_only() -> None:
    text = SETUP_CFG.read_text(encoding="utf-8").lower()
    for word in FORBIDDEN_CONFIG_WORDS:
        assert word not in text, f"setup.cfg mentions {word!r}"
    # Packaging metadata belongs in pyproject.toml.
    for section in ("[metadata]", "[options]", "[build_ext]", "[bdist_wheel]"):
        assert section not in text, f"setup.cfg has a {section} section"


# ---------------------------------------------------------------------------
# (b) the built wheel is pure Python and typed
# ---------------------------------------------------------------------------


def _copy_source_tree(dest: Path) -> None:
    """Copy only what the build needs, so stale build/ dirs cannot leak in."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache", "*.egg-info")
    for name in ("pyproject.toml", "setup.cfg", "README.rst", "MANIFEST.in"):
        src = REPO_ROOT / name
        if src.is_file():
            shutil.copy2(src, dest / name)
    for license_file in REPO_ROOT.glob("LICENSE*"):
        if license_file.is_file():
            shutil.copy2(license_file, dest / license_file.name)
    shutil.copytree(PACKAGE_DIR, dest / "distributed", ignore=ignore)


@requires_source_tree
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_wheel_is_pure_python(tmp_path: Path) -> None:
    if importlib.util.find_spec("build") is None:
        pytest.skip("the 'build' package is not installed (pip install build)")

    src = tmp_path / "src"
    src.mkdir()
    _copy_source_tree(src)
    outdir = tmp_path / "dist"

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(outdir),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"wheel build failed ({proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )

    wheels = sorted(outdir.glob("*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]
    assert wheel.name.startswith("distributed-"), wheel.name
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        wheel_meta = [n for n in names if n.endswith(".dist-info/WHEEL")]
        assert len(wheel_meta) == 1, wheel_meta
        wheel_text = zf.read(wheel_meta[0]).decode()

    assert "distributed/py.typed" in names
    assert "distributed/distributed.yaml" in names
    assert "distributed/__init__.py" in names
    compiled = [n for n in names if n.lower().endswith(COMPILED_SUFFIXES)]
    assert compiled == [], f"compiled files in wheel: {compiled}"
    assert "Root-Is-Purelib: true" in wheel_text
    assert "Tag: py3-none-any" in wheel_text


# ---------------------------------------------------------------------------
# (c) async methods are real coroutine functions
# ---------------------------------------------------------------------------


def _is_async_def(func: object) -> bool:
    """True if ``func`` (or what it wraps) was written with ``async def``."""
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    if not callable(func):
        return False
    try:
        func = inspect.unwrap(func)
    except ValueError:  # wrapper cycle
        return False
    code = getattr(func, "__code__", None)
    return code is not None and bool(code.co_flags & inspect.CO_COROUTINE)


def _async_methods(cls: type) -> dict[str, object]:
    """Names resolved on ``cls`` (first match along the MRO) that are async."""
    found: dict[str, object] = {}
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            if _is_async_def(attr):
                found[name] = getattr(cls, name)
    return found


def _asyncio_iscoroutinefunction(func: object) -> bool:
    # asyncio.iscoroutinefunction is deprecated from Python 3.14 on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return asyncio.iscoroutinefunction(func)


@pytest.mark.parametrize("class_name", ["Scheduler", "Worker", "Client"])
def test_async_methods_are_coroutine_functions(class_name: str) -> None:
    distributed = importlib.import_module("distributed")
    cls = getattr(distributed, class_name)
    assert inspect.isclass(cls)

    methods = _async_methods(cls)
    assert len(methods) > 3, f"expected several async def methods on {class_name}, found {sorted(methods)}"

    not_inspect = sorted(name for name, m in methods.items() if not inspect.iscoroutinefunction(m))
    assert not_inspect == [], (
        f"{class_name} methods written with async def but not recognised by inspect.iscoroutinefunction: {not_inspect}"
    )
    not_asyncio = sorted(name for name, m in methods.items() if not _asyncio_iscoroutinefunction(m))
    assert not_asyncio == [], (
        f"{class_name} methods written with async def but not recognised by asyncio.iscoroutinefunction: {not_asyncio}"
    )


async def _async_function() -> int:
    return 1


def _plain_function() -> int:
    return 1


class _HasAsyncMethod:
    async def method(self) -> int:
        return 1


def test_utils_iscoroutinefunction() -> None:
    utils = importlib.import_module("distributed.utils")
    iscoroutinefunction: Callable[[object], bool] = utils.iscoroutinefunction

    assert iscoroutinefunction(_async_function) is True
    assert iscoroutinefunction(_HasAsyncMethod().method) is True
    assert iscoroutinefunction(_plain_function) is False
