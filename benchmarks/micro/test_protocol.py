"""Encode and decode a batch of 1,000 typical messages with ``distributed.protocol``."""

from __future__ import annotations

from typing import Any

import pytest

N = 1000


def typical_batch() -> list[dict[str, Any]]:
    """What a scheduler <-> worker stream carries: compute-task and task-finished messages."""
    from distributed.protocol import Serialized

    spec = Serialized({"s": "pickle"}, [b"\x80\x05" + b"x" * 200])
    batch: list[dict[str, Any]] = []
    for i in range(N // 2):
        key = ("inc-1b2c3d4e5f", i)
        batch.append(
            {
                "op": "compute-task",
                "key": key,
                "run_id": i,
                "run_spec": spec,
                "priority": (0, 1, i),
                "who_has": {("x-9f8e7d", i): ["tcp://127.0.0.1:40001"]},
                "nbytes": {("x-9f8e7d", i): 8000},
                "duration": 0.5,
                "stimulus_id": f"update-graph-{i}",
            }
        )
        batch.append(
            {
                "op": "task-finished",
                "key": key,
                "run_id": i,
                "nbytes": 28,
                "type": "int",
                "startstops": [{"action": "compute", "start": 1.0, "stop": 1.001}],
                "stimulus_id": f"task-finished-{i}",
            }
        )
    return batch


@pytest.mark.timeout(300)
def test_dumps_batch(benchmark: Any) -> None:
    from distributed.protocol import dumps

    batch = typical_batch()
    frames = benchmark(dumps, batch)
    benchmark.extra_info["messages"] = len(batch)
    benchmark.extra_info["bytes"] = sum(len(memoryview(f)) for f in frames)


@pytest.mark.timeout(300)
def test_loads_batch(benchmark: Any) -> None:
    from distributed.protocol import dumps, loads

    batch = typical_batch()
    frames = dumps(batch)
    out = benchmark(loads, frames, deserialize=False)
    assert len(out) == len(batch)
    assert out[0]["key"] == batch[0]["key"]
    benchmark.extra_info["messages"] = len(batch)
