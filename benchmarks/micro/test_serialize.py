"""Serialise a 100 MB NumPy array and count the copies: there should be none."""

from __future__ import annotations

from typing import Any

import pytest

np = pytest.importorskip("numpy")

NBYTES = 100 * 2**20


def _data_frames(frames: list[Any], nbytes: int) -> list[memoryview]:
    return [memoryview(f) for f in frames if memoryview(f).nbytes >= nbytes]


def copies(arr: Any, frames: list[Any]) -> int:
    """How many frames hold the array's bytes without sharing its memory."""
    n = 0
    for f in _data_frames(frames, arr.nbytes):
        view = np.frombuffer(f, dtype=np.uint8)
        if not np.shares_memory(view, arr.view(np.uint8).reshape(-1)):
            n += 1
    return n


@pytest.mark.timeout(300)
def test_serialize_100mb_zero_copy(benchmark: Any) -> None:
    from distributed.protocol import serialize

    arr = np.ones(NBYTES // 8, dtype="f8")
    header, frames = benchmark(serialize, arr)
    big = _data_frames(frames, arr.nbytes)
    assert len(big) == 1, "the array's bytes should travel as one out-of-band frame"
    assert copies(arr, frames) == 0, "serialize copied the array"
    benchmark.extra_info["frames"] = len(frames)
    benchmark.extra_info["copies"] = 0


@pytest.mark.timeout(300)
def test_deserialize_100mb_zero_copy(benchmark: Any) -> None:
    from distributed.protocol import deserialize, serialize

    arr = np.ones(NBYTES // 8, dtype="f8")
    header, frames = serialize(arr)
    out = benchmark(deserialize, header, frames)
    assert out.shape == arr.shape
    assert np.shares_memory(out, arr), "deserialize copied the array"
    benchmark.extra_info["copies"] = 0


@pytest.mark.timeout(300)
def test_dumps_message_with_100mb_array_zero_copy(benchmark: Any) -> None:
    """A whole message carrying the array (as a worker's get_data reply would) keeps it out of band."""
    from distributed.protocol import dumps, to_serialize

    arr = np.ones(NBYTES // 8, dtype="f8")
    msg = {"status": "OK", "data": {"x": to_serialize(arr)}}
    frames = benchmark(dumps, msg)
    assert copies(arr, frames) == 0, "dumps copied the array"
    assert sum(memoryview(f).nbytes for f in frames) < arr.nbytes + 10_000
