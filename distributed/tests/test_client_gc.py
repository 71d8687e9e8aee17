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
