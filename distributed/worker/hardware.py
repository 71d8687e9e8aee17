"""How fast a worker's memory, disk and network move data (``Client.benchmark_hardware``).

Each measure repeats one operation on a block of each size for ``duration``
seconds and reports bytes per second by size (keyed by the size as given,
``"1 MiB"``):

- memory: copying a block into another buffer;
- disk: writing a block of random bytes to a new file in a scratch directory
  (under the worker's local directory), flushed, then reading it back;
- network: sending a block to a peer, which echoes it back (the bytes of one
  direction are counted per round trip).

Memory and disk run in a thread, so the worker's event loop stays free meanwhile.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence

from dask.utils import parse_bytes

from distributed.core import ConnectionPool
from distributed.protocol import messages as m

__all__ = [
    "DISK_SIZES",
    "MEMORY_SIZES",
    "NETWORK_SIZES",
    "benchmark_disk",
    "benchmark_memory",
    "benchmark_network",
]

#: The block sizes each measure uses, as dask.distributed's.
MEMORY_SIZES = ("2 kiB", "10 kiB", "100 kiB", "1 MiB", "10 MiB")
DISK_SIZES = ("1 kiB", "100 kiB", "1 MiB", "10 MiB", "100 MiB")
NETWORK_SIZES = ("1 kiB", "10 kiB", "1 MiB", "10 MiB", "50 MiB")


def _bandwidth(moved: int, started: float) -> float:
    return moved / max(time.perf_counter() - started, 1e-9)


def benchmark_memory(sizes: Sequence[str] = MEMORY_SIZES, duration: float = 1.0) -> dict[str, float]:
    """Bytes per second copied in memory, by block size."""
    out: dict[str, float] = {}
    for size in sizes:
        n = parse_bytes(size)
        source, target = bytearray(os.urandom(n)), bytearray(n)
        moved, started = 0, time.perf_counter()
        while moved == 0 or time.perf_counter() - started < duration:
            target[:] = source
            moved += n
        out[size] = _bandwidth(moved, started)
    return out


def benchmark_disk(
    rootdir: str | None = None, sizes: Sequence[str] = DISK_SIZES, duration: float = 1.0
) -> dict[str, float]:
    """Bytes per second written to and read back from files under ``rootdir``, by block size.

    The scratch directory and its files are removed afterwards.
    """
    scratch = tempfile.mkdtemp(prefix="benchmark-disk-", dir=rootdir)
    try:
        out: dict[str, float] = {}
        for size in sizes:
            n = parse_bytes(size)
            block = os.urandom(n)
            moved, count, started = 0, 0, time.perf_counter()
            while moved == 0 or time.perf_counter() - started < duration:
                path = os.path.join(scratch, f"{count}.bin")
                with open(path, "wb") as f:
                    f.write(block)
                    f.flush()
                with open(path, "rb") as f:
                    f.read()
                os.remove(path)
                moved, count = moved + n, count + 1
            out[size] = _bandwidth(moved, started)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def benchmark_network(
    address: str, rpc: ConnectionPool, sizes: Sequence[str] = NETWORK_SIZES, duration: float = 1.0
) -> dict[str, float]:
    """Bytes per second sent to the server at ``address`` (which echoes them back), by block size."""
    out: dict[str, float] = {}
    for size in sizes:
        block = os.urandom(parse_bytes(size))
        moved, started = 0, time.perf_counter()
        while moved == 0 or time.perf_counter() - started < duration:
            echoed = await rpc.call(address, m.Echo(op="echo", data=block))
            if len(echoed) != len(block):
                raise RuntimeError(f"{address} echoed {len(echoed)} bytes of {len(block)}")
            moved += len(block)
        out[size] = _bandwidth(moved, started)
    return out
