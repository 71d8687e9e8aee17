"""A Lock or Semaphore held by a task whose worker process is killed (SIGKILL) is freed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any, Literal

import dask
import pytest

from distributed import Client, Event, LocalCluster, Lock, Semaphore


def hold_until_killed(kind: str, name: str, ready: str) -> str:
    """Take the primitive, say so, then hold it until the process is killed."""
    if Event(ready).is_set():
        return "ran again after the kill"
    primitive: Any = Lock(name) if kind == "lock" else Semaphore(max_leases=1, name=name)
    assert primitive.acquire(timeout=10) is True
    Event(ready).set()
    time.sleep(120)
    return "not killed"


@pytest.fixture(scope="module")
def client() -> Iterator[Client[Literal[False]]]:
    # Leases would time out only after a minute: a quick release shows the
    # scheduler noticed that the holder's client left.
    # A client gone without a word (the task's, in the killed process) is released after its grace: 1 s here.
    config = {
        "distributed.scheduler.locks.lease-timeout": "60s",
        "distributed.scheduler.locks.lease-validation-interval": "50ms",
        "distributed.scheduler.client-reconnect-grace": "1s",
    }
    with dask.config.set(config):
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as c:
                yield c


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_holder_killed_by_sigkill_frees_it(client: Client[Literal[False]], kind: str) -> None:
    name, ready = f"{kind}-held", f"{kind}-ready"
    holder = client.submit(hold_until_killed, kind, name, ready, key=f"holder-{kind}")
    assert Event(ready, client=client).wait(timeout=30) is True
    primitive: Any = Lock(name, client=client) if kind == "lock" else Semaphore(name=name, client=client)
    assert primitive.acquire(timeout=0.2) is False  # held by the task

    pids = set(client.run(os.getpid).values())
    assert len(pids) == 1 and os.getpid() not in pids
    os.kill(pids.pop(), signal.SIGKILL)

    start = time.monotonic()
    assert primitive.acquire(timeout=30) is True
    assert time.monotonic() - start < 30  # well before the 60 s lease timeout
    primitive.release()
    assert holder.result(timeout=60) == "ran again after the kill"
