"""``distributed.comm.offload``: large data is (de)serialised in the offload thread, off the event loop."""

from __future__ import annotations

import threading
from typing import Any, Literal

import dask.config
import pytest

from distributed import Client, Scheduler
from distributed.offload import offload_threshold, unwrap_all
from distributed.protocol.serialize import Serialized, serialize
from distributed.utils_test import gen_cluster, run_async
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)

#: Threads that pickled and unpickled a Traced object, in this process.
SEEN: list[tuple[str, str]] = []


def _rebuilt(value: int) -> Traced:
    SEEN.append(("loads", threading.current_thread().name))
    return Traced(value)


class Traced:
    """An object that notes which thread pickles and unpickles it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        SEEN.append(("dumps", threading.current_thread().name))
        return (_rebuilt, (self.value,))


def make_traced(x: int) -> Traced:
    return Traced(x)


def value_of(t: Traced) -> int:
    return t.value


def test_the_threshold_comes_from_the_config() -> None:
    assert offload_threshold() == 10 * 2**20
    with dask.config.set({"distributed.comm.offload": False}):
        assert offload_threshold() is None
    with dask.config.set({"distributed.comm.offload": "1 kiB"}):
        assert offload_threshold() == 1024
    with dask.config.set({"distributed.comm.offload": "lots"}):
        with pytest.raises(ValueError, match=r"distributed\.comm\.offload"):
            offload_threshold()


def test_unwrap_all_goes_off_the_loop_past_the_threshold() -> None:
    header, frames = serialize(Traced(1), on_error="raise")
    values = {"x": Serialized(header, frames)}

    async def main() -> None:
        SEEN.clear()
        assert (await unwrap_all(values, 0))["x"].value == 1
        assert [("loads", SEEN[0][1])] == SEEN and SEEN[0][1].startswith("Dask-Offload")
        SEEN.clear()
        assert (await unwrap_all(values, None))["x"].value == 1
        assert not SEEN[0][1].startswith("Dask-Offload")

    run_async(main)


@gen_cluster(client=True, config={"distributed.comm.offload": 1})
async def test_a_transfer_between_workers_is_offloaded(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(make_traced, 5, workers=[a.address])
    await c.wait_for_workers(2)
    SEEN.clear()
    y = c.submit(value_of, x, workers=[b.address])
    assert await y == 5
    # a pickled it for b, b unpickled it: both in the offload thread.
    assert ("dumps", "Dask-Offload_0") in SEEN and ("loads", "Dask-Offload_0") in SEEN


@gen_cluster(client=True, config={"distributed.comm.offload": False})
async def test_without_offload_the_loop_does_it(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(make_traced, 5, workers=[a.address])
    await x
    SEEN.clear()
    y = c.submit(value_of, x, workers=[b.address])
    assert await y == 5
    assert SEEN and not any(name.startswith("Dask-Offload") for _, name in SEEN)
