"""What the worker sends is built from the declared message types."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import distributed

_PKG = Path(distributed.__file__).parent
WORKER_MODULES = [
    *sorted(p for p in _PKG.glob("*.py") if p.name.startswith("worker") or p.name == "threadpool.py"),
    _PKG / "cli" / "dask_worker.py",
]


@pytest.mark.parametrize("path", WORKER_MODULES, ids=lambda p: p.name)
def test_no_op_dict_literals_in_worker_modules(path: Path) -> None:
    tree = ast.parse(path.read_text())
    found = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "op" for k in node.keys)
    ]
    assert not found, f"{path.name}: build a type from distributed.protocol.messages instead (lines {found})"
