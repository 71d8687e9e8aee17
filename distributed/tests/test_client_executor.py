"""``Client.get_executor()``: the client as a standard-library executor."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Iterator

import pytest

from distributed import Client
from distributed.client.executor import ClientExecutor
from distributed.utils_test import inc, poll_for


def fail(x: int) -> int:
    raise ValueError(f"bad {x}")


#: Gates that block tasks (the workers run in this process); each test opens its own at its end.
GATES: dict[str, threading.Event] = {}


def wait_for_event(name: str) -> int:
    GATES.setdefault(name, threading.Event()).wait(60)
    return 1


def open_gates() -> None:
    for name in list(GATES):
        GATES.setdefault(name, threading.Event()).set()


@pytest.fixture(autouse=True)
def gates() -> Iterator[None]:
    GATES.clear()
    yield
    open_gates()


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client(processes=False, n_workers=2, threads_per_worker=2, dashboard_address=None) as c:
        yield c


def test_submit_gives_standard_futures(client: Client) -> None:
    ex = client.get_executor(pure=False)
    assert isinstance(ex, ClientExecutor) and isinstance(ex, cf.Executor)
    futures = [ex.submit(inc, i) for i in range(10)]
    assert all(isinstance(f, cf.Future) for f in futures)
    done, not_done = cf.wait(futures, timeout=30)
    assert not not_done
    assert sorted(f.result() for f in cf.as_completed(futures)) == list(range(1, 11))


def test_a_failed_call_raises_its_exception(client: Client) -> None:
    f = client.get_executor().submit(fail, 3)
    with pytest.raises(ValueError, match="bad 3"):
        f.result(timeout=30)
    assert isinstance(f.exception(), ValueError)


def test_map_yields_results_in_order_and_times_out(client: Client) -> None:
    ex = client.get_executor()
    assert list(ex.map(inc, range(20))) == list(range(1, 21))
    assert list(ex.map(pow, [2, 3], [3, 2], timeout=30)) == [8, 9]
    for name in ("never-set-a", "never-set-b"):
        GATES[name] = threading.Event()
    results = ex.map(wait_for_event, ["never-set-a", "never-set-b"], timeout=0.2)
    with pytest.raises(cf.TimeoutError):
        next(results)
    # Leaving the iterator cancels the calls not read.
    blocked = [k for k in client.futures if str(k).startswith("wait_for_event")]
    assert len(blocked) == 2
    poll_for(lambda: all(k not in client.futures or client.futures[k].status == "cancelled" for k in blocked), 10)


def test_cancelling_the_standard_future_cancels_the_task(client: Client) -> None:
    ex = client.get_executor()
    f = ex.submit(wait_for_event, "executor-cancel")
    key_of = next(k for k in client.futures if str(k).startswith("wait_for_event"))
    assert f.cancel()
    poll_for(lambda: key_of not in client.futures or client.futures[key_of].status == "cancelled", 10)
    done, _ = cf.wait([f], timeout=10)
    assert f in done and f.cancelled()


def test_shutdown_waits_or_cancels(client: Client) -> None:
    ex = client.get_executor(pure=False)
    slow = [ex.submit(time.sleep, 0.2) for _ in range(3)]
    ex.shutdown(wait=True)
    assert all(f.done() for f in slow)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(inc, 1)
    ex.shutdown()  # a second call does nothing

    ex2 = client.get_executor(pure=False)
    stuck = ex2.submit(wait_for_event, "executor-never")
    ex2.shutdown(wait=False)
    done, _ = cf.wait([stuck], timeout=10)
    assert stuck in done and stuck.cancelled()


def test_unknown_keyword_is_refused(client: Client) -> None:
    with pytest.raises(TypeError, match="priority"):
        client.get_executor(priority=1)


def test_calls_from_several_threads(client: Client) -> None:
    ex = client.get_executor(pure=False)
    out: list[int] = []

    def run() -> None:
        out.extend(f.result(timeout=30) for f in [ex.submit(inc, i) for i in range(5)])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(out) == sorted(list(range(1, 6)) * 4)
