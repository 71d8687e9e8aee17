"""P2P shuffles: workers send shards of their partitions straight to each other.

dask imports its entry points from the submodules: ``_core`` (barrier task,
ids), ``_shuffle`` and ``_merge`` (dataframe shuffle and hash join),
``_arrow`` (dtype checks).  The base classes for a new kind of shuffle are
:class:`ShuffleSpec` and :class:`ShuffleRun` (see :mod:`distributed.shuffle._core`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from distributed.utils import lazy_attribute

if TYPE_CHECKING:
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

#: Where each name of this face comes from: imported on first use, so that a caller of one side loads only it.
_SOURCES: Final = {
    "P2PBarrierTask": "distributed.shuffle._core",
    "PartitionId": "distributed.shuffle._core",
    "RunContext": "distributed.shuffle._core",
    "Shard": "distributed.shuffle._core",
    "ShuffleId": "distributed.shuffle._core",
    "ShuffleRun": "distributed.shuffle._core",
    "ShuffleRunRefused": "distributed.shuffle._exceptions",
    "ShuffleSchedulerExtension": "distributed.shuffle._scheduler_plugin",
    "ShuffleSpec": "distributed.shuffle._core",
    "ShuffleWorkerExtension": "distributed.shuffle._worker_plugin",
    "barrier_key": "distributed.shuffle._core",
    "describe_shuffles": "distributed.shuffle._core",
    "id_from_key": "distributed.shuffle._core",
    "p2p_barrier": "distributed.shuffle._core",
    "rechunk_p2p": "distributed.shuffle._rechunk",
    "transfer_partition": "distributed.shuffle._core",
    "unpack_partition": "distributed.shuffle._core",
}

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


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, _SOURCES, name)


def __dir__() -> list[str]:
    return sorted(__all__)
