"""``distributed.comm.compression``: large frames travel compressed, and any reader understands them."""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any, Literal

import dask.config
import msgpack
import numpy as np
import pytest

from distributed import Client, Scheduler
from distributed.comm import connect, listen
from distributed.comm.core import Comm
from distributed.protocol import Serialize, Serialized, unwrap
from distributed.protocol.compression import codec_for
from distributed.protocol.framing import COMPRESS_MIN, EXT_SERIALIZED, ProtocolError, dumps, loads
from distributed.utils_test import gen_cluster, run_async
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)

ZLIB = codec_for("zlib", "test")


def _marker(frames: list[Any]) -> tuple[Any, ...]:
    found: list[tuple[Any, ...]] = []

    def ext_hook(code: int, data: bytes) -> Any:
        if code == EXT_SERIALIZED:
            found.append(msgpack.unpackb(data, use_list=False))
        return None

    msgpack.unpackb(frames[0], ext_hook=ext_hook, use_list=False, strict_map_key=False)
    (marker,) = found
    return marker


def test_compressible_frames_shrink_and_come_back() -> None:
    data = np.zeros((500, 400))  # 1.6 MB of zeros, 2-D: its buffer is not of bytes
    frames = dumps({"x": Serialize(data)}, compression=ZLIB)
    assert sum(len(f) for f in frames) < data.nbytes / 100
    assert "zlib" in _marker(frames)[3]
    # The reader needs no setting: the marker names the codec.
    back = unwrap(loads(frames, deserialize=False)["x"])
    assert np.array_equal(back, data)
    assert np.array_equal(loads(frames)["x"], data)


def test_incompressible_and_small_frames_go_as_they_are() -> None:
    noise = os.urandom(COMPRESS_MIN * 20)
    frames = dumps({"x": Serialize(noise)}, compression=ZLIB)
    assert len(_marker(frames)) == 3  # no codec list: nothing was compressed
    assert unwrap(loads(frames, deserialize=False)["x"]) == noise
    # Without a codec, nothing is compressed either.
    plain = dumps({"x": Serialize(bytes(COMPRESS_MIN * 20))})
    assert len(_marker(plain)) == 3


def test_a_frame_that_does_not_decompress_is_a_protocol_error() -> None:
    frames = dumps({"x": Serialize(bytes(COMPRESS_MIN * 20))}, compression=ZLIB)
    broken = [frames[0], *(b"not zlib" for _ in frames[1:])]
    with pytest.raises(ProtocolError, match="does not decompress"):
        loads(broken, deserialize=False)
    marker = _marker(frames)
    bad = msgpack.packb((marker[0], marker[1], marker[2], ("no-such-codec",)), use_bin_type=True)
    wrong = [msgpack.packb({"x": msgpack.ExtType(EXT_SERIALIZED, bad)}, use_bin_type=True), *frames[1:]]
    with pytest.raises(ProtocolError, match="no-such-codec"):
        loads(wrong, deserialize=False)


def test_a_tcp_comm_writes_compressed_when_configured() -> None:
    payload = bytes(2_000_000)

    async def sent_bytes(setting: Any) -> int:
        got: asyncio.Queue[Any] = asyncio.Queue()

        async def handler(comm: Comm) -> None:
            await got.put(await comm.read())
            comm.abort()

        with dask.config.set({"distributed.comm.compression": setting}):
            listener = listen("tcp://127.0.0.1:0", handler)
            await listener.start()
            try:
                comm = await connect(listener.contact_address, timeout=5)
                try:
                    n = await comm.write({"data": Serialize(payload)})
                finally:
                    comm.abort()
                received = await asyncio.wait_for(got.get(), 5)
            finally:
                listener.stop()
        assert isinstance(received["data"], Serialized) and unwrap(received["data"]) == payload
        return n

    async def main() -> None:
        assert await sent_bytes(False) > len(payload)
        assert await sent_bytes("zlib") < len(payload) / 100

    run_async(main)


@gen_cluster(client=True, config={"distributed.comm.compression": "zlib"})
async def test_a_cluster_with_compression_moves_data(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(np.zeros, 1_000_000, workers=[a.address])
    y = c.submit(np.sum, x, workers=[b.address])
    assert await y == 0
    assert (await x).shape == (1_000_000,)


def test_an_unknown_codec_is_refused_naming_the_key() -> None:
    with dask.config.set({"distributed.comm.compression": "nonsense"}):
        with pytest.raises(ValueError, match="distributed.comm.compression"):
            run_async(_start_scheduler)


async def _start_scheduler() -> None:
    async with Scheduler(dashboard=False):
        pass


def test_zstd_reads_its_level_and_threads() -> None:
    try:
        importlib.import_module("zstandard")
    except ImportError:
        with pytest.raises(ValueError, match="not installed"):
            codec_for("zstd", "distributed.comm.compression")
        return
    with dask.config.set({"distributed.comm.zstd.level": 19}):
        codec = codec_for("zstd", "distributed.comm.compression")
        assert codec is not None and codec.decompress(codec.compress(b"abc" * 10_000)) == b"abc" * 10_000
