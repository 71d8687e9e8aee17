"""A process holding many real workers: ``python -m benchmarks.worker_pack ADDRESS COUNT [NTHREADS] [PREFIX]``.

Each is a ``distributed.Worker`` (public API, so this runs against any
``distributed``) in this process's one event loop, with one thread, no nanny,
no memory limit (so no memory monitor per worker) and no dashboard: as light
as a real worker gets, with its own TCP connections to the scheduler and the
real protocol. Many such processes give a scheduler thousands of workers on
one machine. The workers start a batch at a time; the process runs until it
is terminated (SIGTERM), then closes them.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

#: Workers started at once: enough to register quickly, few enough not to time out the handshakes.
BATCH = 50


async def run(address: str, count: int, nthreads: int, prefix: str) -> None:
    """Start ``count`` workers of ``nthreads`` threads for ``address``; close them on SIGTERM."""
    from distributed import Worker

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    workers: list[Any] = []
    for first in range(0, count, BATCH):
        batch = [
            Worker(
                address,
                nthreads=nthreads,
                memory_limit=0,
                name=f"{prefix}-{i}",
                host="127.0.0.1",
                dashboard=False,
            )
            for i in range(first, min(first + BATCH, count))
        ]
        await asyncio.gather(*(w.start() for w in batch))
        workers.extend(batch)
    print(f"started {len(workers)}", flush=True)
    await stop.wait()
    await asyncio.gather(*(w.close(timeout=10) for w in workers), return_exceptions=True)


def main(argv: list[str]) -> None:
    address, count = argv[0], int(argv[1])
    nthreads = int(argv[2]) if len(argv) > 2 else 1
    prefix = argv[3] if len(argv) > 3 else "pack"
    asyncio.run(run(address, count, nthreads, prefix))


if __name__ == "__main__":
    main(sys.argv[1:])
