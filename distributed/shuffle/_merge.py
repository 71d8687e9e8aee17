"""P2P hash join of dask dataframes: both sides are shuffled by the same hash, then merged partition by partition."""

from __future__ import annotations

from typing import Any

from distributed.shuffle._core import ShuffleId, transfer_partition, unpack_partition

__all__ = ["merge_transfer", "merge_unpack"]


def merge_transfer(input: Any, id: ShuffleId, input_partition: int) -> int:
    """Transfer task of one side of a hash join (dask has added the hash partition column)."""
    return transfer_partition(id, input, int(input_partition))


def merge_unpack(
    shuffle_id_left: ShuffleId,
    shuffle_id_right: ShuffleId,
    output_partition: int,
    barrier_left: int,
    barrier_right: int,
    how: str,
    left_on: Any,
    right_on: Any,
    result_meta: Any,
    suffixes: tuple[str, str],
    left_index: bool,
    right_index: bool,
    indicator: bool,
) -> Any:
    """Unpack task of a hash join: the merge of output partition ``output_partition`` of both sides."""
    from dask.dataframe.multi import merge_chunk

    left = unpack_partition(shuffle_id_left, int(output_partition), barrier_left)
    right = unpack_partition(shuffle_id_right, int(output_partition), barrier_right)
    return merge_chunk(  # type: ignore[no-untyped-call]  # dask.dataframe.multi is untyped
        left,
        right,
        how=how,
        result_meta=result_meta,
        left_on=left_on,
        right_on=right_on,
        suffixes=suffixes,
        left_index=left_index,
        right_index=right_index,
        indicator=indicator,
    )
