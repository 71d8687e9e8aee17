"""Typed doors into the parts of dask that ship without annotations.

dask is the one library this package talks to at every turn; a few of its
functions are untyped.  Each is called through a wrapper here, so the rest of
the code stays strictly typed and the boundary is in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dask
import dask.base
import dask.core

from distributed.protocol.messages import Key

__all__ = [
    "as_delayed",
    "dask_version",
    "finalize_compute",
    "flatten_keys",
    "get_annotations",
    "graph_expr",
    "is_dask_collection",
]


def flatten_keys(keys: Any) -> list[Key]:
    """Keys of a (possibly nested) list of keys, flat."""
    return list(dask.core.flatten(keys))  # type: ignore[no-untyped-call]  # dask.core is untyped


def is_dask_collection(x: object) -> bool:
    """Whether ``x`` is a dask collection."""
    return bool(dask.base.is_dask_collection(x))


def get_annotations() -> dict[str, Any]:
    """The annotations set with ``dask.annotate`` in this context."""
    from dask.base import get_annotations as _get

    return dict(_get())


def dask_version() -> str:
    """The installed dask version."""
    from importlib.metadata import version

    return version("dask")


def finalize_compute(expr: Any) -> Any:
    """``FinalizeCompute(expr)``: one finalised result per collection."""
    from dask._expr import FinalizeCompute

    return FinalizeCompute(expr)  # type: ignore[no-untyped-call]  # dask._expr is untyped


def expr_keys(expr: Any) -> Any:
    """``expr.__dask_keys__()``."""
    return expr.__dask_keys__()


def graph_expr(dsk: Any) -> Any:
    """An ``Expr`` for a graph: an Expr as is, a HighLevelGraph or a dict wrapped."""
    from dask._expr import Expr, HLGExpr, LLGExpr
    from dask.highlevelgraph import HighLevelGraph

    if isinstance(dsk, Expr):
        return dsk
    if isinstance(dsk, HighLevelGraph):
        return HLGExpr(dsk)  # type: ignore[no-untyped-call]  # dask._expr is untyped
    if isinstance(dsk, Mapping):
        return LLGExpr(dict(dsk))  # type: ignore[no-untyped-call]  # dask._expr is untyped
    raise TypeError(f"Expected a graph (Expr, HighLevelGraph or dict), got {type(dsk).__name__}")


def is_low_level_expr(expr: Any) -> bool:
    """Whether ``expr`` wraps a plain dict graph (which the caller must cull)."""
    from dask._expr import LLGExpr

    return isinstance(expr, LLGExpr)


def as_delayed(obj: Any) -> Any:
    """``dask.delayed(obj)``: a container whose collections compute along with it."""
    from dask.delayed import delayed

    return delayed(obj)
