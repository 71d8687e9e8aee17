"""The scheduler's part of ``Client.benchmark_hardware``: every worker measures, the scheduler averages.

Disk and memory are measured by all workers at once; the network by pairs of
workers (shuffled; with an odd count one worker sits the network out), the
first of each pair sending to the second.  The answer holds, for each of
``"disk"``, ``"memory"`` and ``"network"``, the mean bandwidth in bytes per
second over the workers that measured it, by block size.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence

from distributed.core import ConnectionPool
from distributed.protocol import messages as m

__all__ = ["benchmark_hardware", "mean_by_size"]


def mean_by_size(results: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each size's bandwidth over ``results`` (sizes in the order first seen)."""
    sums: dict[str, list[float]] = {}
    for result in results:
        for size, value in result.items():
            sums.setdefault(size, []).append(value)
    return {size: sum(values) / len(values) for size, values in sums.items()}


async def benchmark_hardware(
    rpc: ConnectionPool, workers: Sequence[str], duration: float = 1.0
) -> dict[str, dict[str, float]]:
    """Measure the bandwidths of ``workers`` (``duration`` seconds per block size and measure).

    Raises
    ------
    ValueError
        Without workers, or for a duration that is not positive.
    """
    if not duration > 0:
        raise ValueError(f"benchmark_hardware's duration must be positive, got {duration!r}")
    if not workers:
        raise ValueError("benchmark_hardware needs at least one worker")
    out: dict[str, dict[str, float]] = {}
    for measure in ("disk", "memory"):
        results = await asyncio.gather(
            *(rpc.call(w, m.BenchmarkLocal(op=f"benchmark_{measure}", duration=duration)) for w in workers)
        )
        out[measure] = mean_by_size(results)
    shuffled = random.sample(list(workers), len(workers))
    pairs = list(zip(shuffled[0::2], shuffled[1::2]))
    network = await asyncio.gather(
        *(rpc.call(a, m.BenchmarkNetwork(op="benchmark_network", address=b, duration=duration)) for a, b in pairs)
    )
    out["network"] = mean_by_size(network)
    return out
