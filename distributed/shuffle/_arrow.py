"""pandas <-> arrow for dataframe shuffles: shards travel as arrow IPC streams."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["check_dtype_support", "deserialize_tables", "from_tables", "serialize_table", "to_table"]


def check_dtype_support(meta: Any) -> None:
    """Raise a TypeError naming the first column (or the index) whose type arrow cannot carry.

    Parameters
    ----------
    meta
        An empty pandas DataFrame with the dtypes of the data to shuffle.
    """
    import pyarrow as pa

    for column in meta.columns:
        try:
            pa.Table.from_pandas(meta[[column]], preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise TypeError(
                f"p2p does not support data of type '{meta[column].dtype}' found in column '{column}'"
            ) from e
    try:
        pa.Table.from_pandas(meta.iloc[:, :0], preserve_index=True)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise TypeError(f"p2p does not support data of type '{meta.index.dtype}' found in the index") from e


def to_table(df: Any) -> Any:
    """A pandas DataFrame as an arrow Table (its index kept)."""
    import pyarrow as pa

    try:
        return pa.Table.from_pandas(df, preserve_index=True)
    except (pa.ArrowException, TypeError, ValueError) as e:
        check_dtype_support(df)  # names the column when its dtype is the problem
        raise TypeError(f"p2p could not convert a partition to arrow: {e}") from e


def serialize_table(table: Any) -> bytes:
    """An arrow Table as the bytes of an IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def deserialize_tables(payloads: Sequence[bytes | bytearray | memoryview]) -> list[Any]:
    """The arrow Tables in IPC stream bytes."""
    import pyarrow as pa

    return [pa.ipc.open_stream(pa.py_buffer(p)).read_all() for p in payloads]


def from_tables(tables: Sequence[Any], meta: Any) -> Any:
    """One pandas DataFrame from arrow Tables, with the columns and dtypes of ``meta``."""
    import pandas as pd
    import pyarrow as pa

    if not tables:
        return meta.copy()
    table = pa.concat_tables(tables, promote_options="permissive")
    df = table.to_pandas()
    df = df[list(meta.columns)] if list(df.columns) != list(meta.columns) else df
    for column, dtype in meta.dtypes.items():
        # Categories are a property of the dtype, not of the values a shard
        # happens to hold: restore them.  Other dtypes are what the data
        # holds (a merge may have put nulls in a bool column), as with tasks.
        if isinstance(dtype, pd.CategoricalDtype) and df[column].dtype != dtype:
            df[column] = df[column].astype(dtype)
    if isinstance(meta.index.dtype, pd.CategoricalDtype) and df.index.dtype != meta.index.dtype:
        df.index = df.index.astype(meta.index.dtype)
    if isinstance(df.index, pd.RangeIndex) or df.index.name != meta.index.name:
        df.index.name = meta.index.name
    return df
