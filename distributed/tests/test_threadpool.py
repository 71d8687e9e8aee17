"""The worker's thread pool: hand-off of work to idle threads, secede/rejoin, shutdown."""

from __future__ import annotations

import gc
import os
import sys
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


def test_a_job_that_seceded_does_not_go_on_to_another_without_the_queue() -> None:
    # A job that seceded and rejoined took a slot given up for it, not the one it held (its caller counted it
    # apart while it was out): it must not start the next task its caller lined up, as a job that held its slot
    # throughout may.  Rejoined at once here (the pool had room), then the next job of this thread asks afresh.
    pool = ThreadPool(1)

    def plain() -> bool:
        p = current_pool()
        assert p is not None
        return p.may_continue()

    def seceding_and_rejoining() -> tuple[bool, bool]:
        p = current_pool()
        assert p is not None
        p.secede_current_thread()
        out = p.may_continue()
        p.rejoin_current_thread()  # the pool has room: rejoined at once
        return out, p.may_continue()

    assert pool.submit(plain).result(5) is True
    assert pool.submit(seceding_and_rejoining).result(5) == (False, False)
    assert pool.submit(plain).result(5) is True  # the rejoined thread's next job holds its slot throughout
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


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="Linux: idle threads sleep on an eventfd")
def test_the_wakeup_descriptor_is_closed_by_shutdown_not_by_the_collector() -> None:
    def is_open(fd: int) -> bool:
        try:
            return "eventfd" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False

    # Waiting: closed when shutdown returns, while the pool is still referenced.
    pool = ThreadPool(2)
    assert pool.submit(lambda: 1).result(5) == 1
    fd = pool._efd
    assert fd is not None and is_open(fd)
    pool.shutdown()
    assert not is_open(fd)
    # Not waiting, a job still running: closed when its thread ends, not before (it reads it next).
    pool = ThreadPool(1)
    release = threading.Event()
    running = pool.submit(release.wait, 5)
    fd = pool._efd
    assert fd is not None
    pool.shutdown(wait=False)
    assert is_open(fd)
    release.set()
    assert running.result(5)
    for thread in pool.threads:
        thread.join(5)
    assert not pool.threads
    assert not is_open(fd)
    # Shut down before any thread started.
    pool = ThreadPool(1)
    fd = pool._efd
    assert fd is not None
    pool.shutdown()
    assert not is_open(fd)


def test_submit_after_shutdown_is_refused() -> None:
    pool = ThreadPool(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit_nowait(print)


def test_shutdown_racing_submissions_stops_every_thread() -> None:
    # A worker closes its pool from one thread while its event loop may still hand it jobs: every
    # job is either refused or run, and every thread started for one is stopped.  A short switch
    # interval lets the two threads interleave at many more points.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        race_shutdown_and_submissions()
    finally:
        sys.setswitchinterval(old_interval)


def submit_until_refused(pool: ThreadPool, go: threading.Barrier, ran: list[None], accepted: list[int]) -> None:
    """Hand ``pool`` jobs from the calling thread until it refuses one; count those it took."""
    go.wait()
    n = 0
    try:
        while True:
            pool.submit_nowait(ran.append, None)
            n += 1
    except RuntimeError:
        accepted.append(n)


def race_shutdown_and_submissions() -> None:
    """Shut pools down while another thread submits to them; check no thread outlives its pool."""
    for attempt in range(200):
        name = f"race-pool-{attempt}"
        pool = ThreadPool(64, name=name)
        go = threading.Barrier(2)
        ran: list[None] = []
        accepted: list[int] = []
        submitter = threading.Thread(target=submit_until_refused, args=(pool, go, ran, accepted))
        submitter.start()
        go.wait()
        pool.shutdown(wait=True, timeout=5)
        submitter.join(5)
        # Jobs taken before shutdown are queued ahead of its stop markers: all of them ran.
        assert accepted == [len(ran)], f"attempt {attempt}: {accepted} jobs taken, {len(ran)} ran"
        alive = [t.name for t in threading.enumerate() if t.name.startswith(name + "-")]
        assert not alive, f"attempt {attempt}: threads left running after shutdown: {alive}"
