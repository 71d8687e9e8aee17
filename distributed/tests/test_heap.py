"""Free heap memory handed back to the OS: by the heap module itself, and by the scheduler after it forgot tasks."""

from __future__ import annotations

import asyncio
import os
from typing import Literal

import psutil
import pytest

from distributed import Client, Scheduler, Worker, heap
from distributed.utils_test import async_poll_for, gen_cluster

needs_glibc = pytest.mark.skipif(not heap.can_trim(), reason="malloc_trim is glibc's")

MB = 2**20


@needs_glibc
@pytest.mark.timeout(60)
def test_trim_gives_back_what_glibc_kept_free() -> None:
    # 200 MB of blocks malloc serves from its heap (not Python's small-object arenas); every 64th
    # kept, so the freed ones sit between live ones and free() alone returns nothing to the OS.
    process = psutil.Process()
    blocks = [os.urandom(4000) for _ in range(50_000)]
    kept = blocks[::64]
    del blocks
    before = process.memory_info().rss
    assert heap.trim()
    after = process.memory_info().rss
    assert before - after > 100 * MB, (before / MB, after / MB)
    assert len(kept) == 782


@needs_glibc
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_the_scheduler_trims_its_heap_once_tasks_were_forgotten(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    await s.trim_heap()  # whatever start-up left
    assert not await s.trim_heap()  # nothing forgotten since
    futures = c.map(lambda x: x + 1, range(50))
    assert sum(await c.gather(futures)) == sum(range(1, 51))
    del futures
    await async_poll_for(lambda: not s.tasks, 10)
    assert await s.trim_heap()
    assert not await s.trim_heap()
    assert any(t.get_name() == "heap-trim" for t in asyncio.all_tasks())  # and it is called periodically
