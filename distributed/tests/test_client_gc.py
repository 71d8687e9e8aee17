"""The client stays live when the garbage collector frees futures at awkward moments.

A finaliser runs inside whatever the collector interrupted, including the
client's own bookkeeping; ``Future.__del__`` must therefore never block (on a
lock) or do I/O.  The reproduction runs in a child process so that a freeze
fails the test instead of hanging the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

from distributed import Client
from distributed.utils_test import cluster, inc, poll_for

REPRO = textwrap.dedent(
    """
    import gc
    import time

    from distributed import Client, LocalCluster


    def bad(x):
        raise ValueError(x)


    def inc(x):
        return x + 1


    def n_tasks(dask_scheduler):
        return len(dask_scheduler.tasks)


    if __name__ == "__main__":
        with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                # The issue's reproduction: futures kept alive only by a caught traceback.
                for i in range(20):
                    try:
                        client.submit(bad, i).result()
                    except ValueError:
                        pass
                # And a sure one: a future dropped at every collection, with a
                # collection at nearly every allocation while the client makes futures.
                pool = client.map(inc, range(5000), pure=False)
                client.gather(pool)

                def drop_one(phase, info):
                    if phase == "start" and pool:
                        pool.pop()

                gc.callbacks.append(drop_one)
                gc.set_threshold(1, 1, 1)
                try:
                    futures = client.map(inc, range(2000), pure=False)
                finally:
                    gc.set_threshold(700, 10, 10)
                    gc.callbacks.remove(drop_one)
                assert sum(client.gather(futures)) == sum(range(1, 2001))
                # The releases made by finalisers reach the scheduler.
                del futures, pool
                gc.collect()
                deadline = time.monotonic() + 20
                while client.run_on_scheduler(n_tasks):
                    assert time.monotonic() < deadline, "keys were never released"
                    time.sleep(0.01)
        print("OK")
    """
)


def test_future_finalised_while_client_makes_futures() -> None:
    proc = subprocess.run([sys.executable, "-c", REPRO], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK")


def test_client_finaliser_on_its_own_loop_hands_the_close_to_the_loop() -> None:
    """Client.__del__ run on the client's own loop thread neither blocks nor skips the close.

    (A connected client stays reachable from its loop through its stream
    task, so the finaliser is called directly here, where and as the
    collector would call it.)
    """
    with cluster(nworkers=1) as (scheduler, _):
        with Client(scheduler["address"], set_as_default=False) as watcher:

            def clients_on_scheduler(dask_scheduler: Any) -> list[str]:
                return [c for c in dask_scheduler.clients if c.startswith("Client-")]

            client = Client(scheduler["address"], set_as_default=False)
            assert client.submit(inc, 1).result() == 2
            done = threading.Event()

            def finalise() -> None:
                client.__del__()
                done.set()

            client.event_loop.call_soon_threadsafe(finalise)
            assert done.wait(10), "the finaliser blocked the loop"
            poll_for(lambda: client.id not in watcher.run_on_scheduler(clients_on_scheduler), 10)
            poll_for(lambda: client.status == "closed", 10)
