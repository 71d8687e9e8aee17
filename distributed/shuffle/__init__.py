"""P2P shuffles: workers send shards of their partitions straight to each other.

dask imports its entry points from the submodules: ``_core`` (barrier task,
ids), ``_shuffle`` and ``_merge`` (dataframe shuffle and hash join),
``_arrow`` (dtype checks).  The base classes for a new kind of shuffle are
:class:`ShuffleSpec` and :class:`ShuffleRun` (see :mod:`distributed.shuffle._core`).
"""

from __future__ import annotations

from distributed.shuffle._core import (
    P2PBarrierTask,
    PartitionId,
    RunContext,
    Shard,
    ShuffleId,
    ShuffleRun,
    ShuffleSpec,
    barrier_key,
    describe_shuffles,
    id_from_key,
    p2p_barrier,
    transfer_partition,
    unpack_partition,
)
from distributed.shuffle._exceptions import ShuffleRunRefused
from distributed.shuffle._rechunk import rechunk_p2p
from distributed.shuffle._scheduler_plugin import ShuffleSchedulerExtension
from distributed.shuffle._worker_plugin import ShuffleWorkerExtension

__all__ = [
    "P2PBarrierTask",
    "PartitionId",
    "RunContext",
    "Shard",
    "ShuffleId",
    "ShuffleRun",
    "ShuffleRunRefused",
    "ShuffleSchedulerExtension",
    "ShuffleSpec",
    "ShuffleWorkerExtension",
    "barrier_key",
    "describe_shuffles",
    "id_from_key",
    "p2p_barrier",
    "rechunk_p2p",
    "transfer_partition",
    "unpack_partition",
]
