"""P2P shuffle of dask dataframes: the spec, the per-worker run, and the task functions dask calls.

dask adds a column of output partition numbers (``column``) to each input
partition; a transfer task cuts its partition by that column into arrow
tables, one per output partition, and sends them as IPC streams; an unpack
task concatenates the tables it received for its output partition and
returns them as pandas, without that column when ``drop_column``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dask._task_spec import GraphNode, Task

from distributed.shuffle._arrow import deserialize_tables, from_tables, serialize_table, to_table
from distributed.shuffle._core import (
    PartitionId,
    RunContext,
    Shard,
    ShuffleId,
    ShuffleRun,
    ShuffleSpec,
    transfer_partition,
    unpack_partition,
)

__all__ = ["DataFrameShuffleRun", "DataFrameShuffleSpec", "shuffle_transfer", "shuffle_unpack"]


@dataclass(frozen=True, eq=False)
class DataFrameShuffleSpec(ShuffleSpec):
    """A dataframe shuffle (as dask's ``P2PShuffle`` and ``HashJoinP2P`` build it).

    Parameters
    ----------
    id
        The shuffle's id.
    npartitions
        Output partitions in the full shuffle.
    column
        The column holding each row's output partition number.
    meta
        An empty DataFrame with the input's columns and dtypes (``column`` included).
    parts_out
        The output partitions made: all ``npartitions`` when an int, else these.
    disk
        Whether shards may be spilled to disk.
    drop_column
        Whether ``column`` is dropped from the output.
    """

    id: ShuffleId
    npartitions: int
    column: str
    meta: Any
    parts_out: int | Sequence[int]
    disk: bool
    drop_column: bool

    def output_partitions(self) -> Sequence[PartitionId]:
        """The output partitions made."""
        if isinstance(self.parts_out, int):
            return range(self.parts_out)
        return [int(p) for p in self.parts_out]

    def output_partition_of(self, node: GraphNode) -> PartitionId | None:
        """The output partition read by ``node``, a ``shuffle_unpack`` or ``merge_unpack`` task."""
        if not isinstance(node, Task):
            return None
        from distributed.shuffle._merge import merge_unpack

        position = 1 if node.func is shuffle_unpack else 2 if node.func is merge_unpack else None
        if position is None or len(node.args) <= position:
            return None
        part = node.args[position]
        return int(part) if isinstance(part, int) else None

    def create_run(self, context: RunContext) -> ShuffleRun:
        """This worker's part of a run."""
        return DataFrameShuffleRun(self, context)

    def output_meta(self) -> Any:
        """The empty DataFrame the output partitions look like."""
        if self.drop_column and self.column in self.meta.columns:
            return self.meta.drop(columns=[self.column])
        return self.meta


class DataFrameShuffleRun(ShuffleRun):
    """One worker's part of one run of a dataframe shuffle."""

    spec: DataFrameShuffleSpec

    def __init__(self, spec: DataFrameShuffleSpec, context: RunContext) -> None:
        super().__init__(spec, context)
        self.spec = spec
        self._meta = spec.output_meta()

    def split(self, data: Any, input_partition: PartitionId) -> Mapping[PartitionId, Shard]:
        """One arrow IPC stream per output partition that gets rows of ``data``."""
        import numpy as np

        column = self.spec.column
        if len(data) == 0:
            return {}
        targets = np.asarray(data[column], dtype=np.int64)
        if self.spec.drop_column:
            data = data.drop(columns=[column])
        table = to_table(data)
        order = np.argsort(targets, kind="stable")
        sorted_targets = targets[order]
        table = table.take(order)
        values, starts = np.unique(sorted_targets, return_index=True)
        ends = [*starts[1:], len(sorted_targets)]
        worker_for = self.worker_for
        shards: dict[PartitionId, Shard] = {}
        for value, start, end in zip(values.tolist(), starts.tolist(), ends):
            if value in worker_for:  # partitions not made (a selection of them) get nothing
                shards[value] = serialize_table(table.slice(start, int(end) - start))
        return shards

    def assemble(self, output_partition: PartitionId, shards: Sequence[tuple[PartitionId, Shard]]) -> Any:
        """The output partition: the shards' tables, in input order, as one pandas DataFrame."""
        return from_tables(deserialize_tables([payload for _, payload in shards]), self._meta)


def shuffle_transfer(input: Any, id: ShuffleId, input_partition: int) -> int:
    """Transfer task of a dataframe shuffle: send the rows of ``input`` to their output partitions' workers."""
    return transfer_partition(id, input, int(input_partition))


def shuffle_unpack(id: ShuffleId, output_partition: int, barrier_run_id: int) -> Any:
    """Unpack task of a dataframe shuffle: output partition ``output_partition``."""
    return unpack_partition(id, int(output_partition), barrier_run_id)
