"""The worker's thread pool: hand-off of work to idle threads, secede/rejoin, shutdown."""

from __future__ import annotations

import gc
import os
import threading

import pytest

from distributed.threadpool import ThreadPool, current_pool


def test_every_job_runs_and_no_more_threads_than_allowed() -> None:
    pool = ThreadPool(2, name="test-pool")
    lock = threading.Lock()
    running = 0
    peak = 0
    done: list[int] = []
    finished = threading.Event()

    def job(i: int) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        with lock:
            running -= 1
            done.append(i)
            if len(done) == 2_000:
                finished.set()

    def submit_from_this_thread(base: int) -> None:
        for i in range(500):
            pool.submit_nowait(job, base + i)

    submitters = [threading.Thread(target=submit_from_this_thread, args=(base,)) for base in range(0, 2_000, 500)]
    for t in submitters:
        t.start()
    for t in submitters:
        t.join()
    assert finished.wait(10)
    assert sorted(done) == list(range(2_000))
    assert peak <= 2
    assert pool.submit(lambda: current_pool()).result(5) is pool
    pool.shutdown()
    assert not any(t.is_alive() for t in pool.threads)


def test_a_seceded_thread_rejoins_when_a_slot_frees() -> None:
    pool = ThreadPool(1)
    release = threading.Event()

    def seceding() -> str:
        p = current_pool()
        assert p is not None
        p.secede_current_thread()
        # The slot went to a new thread: a job submitted now runs while this one waits.
        assert pool.submit(lambda: "other").result(5) == "other"
        pool.submit_nowait(release.wait, 5)
        p.rejoin_current_thread()  # waits for the blocked job to end
        return "rejoined"

    fut = pool.submit(seceding)
    assert not fut.done()  # blocked in rejoin until the job holding the slot ends
    release.set()
    assert fut.result(10) == "rejoined"
    pool.shutdown()


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="Linux: idle threads sleep on an eventfd")
def test_the_wakeup_descriptor_is_closed_with_the_pool() -> None:
    def eventfds() -> set[int]:
        found = set()
        for name in os.listdir("/proc/self/fd"):
            try:
                if "eventfd" in os.readlink(f"/proc/self/fd/{name}"):
                    found.add(int(name))
            except OSError:
                pass  # closed meanwhile
        return found

    before = eventfds()
    pool = ThreadPool(1)
    assert pool.submit(lambda: 1).result(5) == 1
    mine = eventfds() - before
    assert len(mine) == 1
    pool.shutdown()
    del pool
    gc.collect()
    assert not mine & eventfds(), "the pool's eventfd leaked"


def test_submit_after_shutdown_is_refused() -> None:
    pool = ThreadPool(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit_nowait(print)
