"""The names users import from ``distributed.client``, as in dask.distributed, and what they do."""

from __future__ import annotations

import importlib
import pickle
from typing import Literal

import pytest

import distributed
import distributed.exceptions
from distributed import Client, Event, Scheduler, Worker
from distributed.client.defaults import get_default_client
from distributed.utils_test import gen_cluster, inc

#: Names dask.distributed's ``distributed.client`` defines or imports, that user code imports from there,
#: and where the same object lives here.
CLIENT_NAMES = {
    "Client": distributed,
    "Future": distributed,
    "as_completed": distributed,
    "wait": distributed,
    "default_client": distributed,
    "futures_of": distributed,
    "fire_and_forget": distributed,
    "performance_report": distributed,
    "get_task_metadata": distributed,
    "get_task_stream": distributed,
    "CancelledError": distributed,
    "TimeoutError": distributed,
    "FutureCancelledError": distributed.exceptions,
    "FuturesCancelledError": distributed.exceptions,
    "CancelledFuturesGroup": distributed.exceptions,
}


@pytest.mark.parametrize("name", sorted(CLIENT_NAMES))
def test_distributed_client_exports_the_names_users_import_from_it(name: str) -> None:
    client_module = importlib.import_module("distributed.client")
    assert name in client_module.__all__
    assert getattr(client_module, name) is getattr(CLIENT_NAMES[name], name)


def test_future_cancelled_error_has_both_import_paths() -> None:
    from distributed.client import FutureCancelledError as from_client
    from distributed.exceptions import FutureCancelledError as from_exceptions

    assert from_client is from_exceptions
    assert issubclass(from_client, distributed.CancelledError)


def _block(event: Event) -> int:
    event.wait()
    return 1


@gen_cluster(client=True)
async def test_result_of_a_cancelled_future_raises_future_cancelled_error(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    from distributed.client import FutureCancelledError

    event = Event()
    f = c.submit(_block, event)
    await c.cancel([f], reason="the test cancelled it")
    with pytest.raises(FutureCancelledError, match="the test cancelled it") as info:
        await f
    assert info.value.key == f.key
    await event.set()


@gen_cluster(client=True)
async def test_wait_on_cancelled_futures_raises_futures_cancelled_error(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    from distributed.client import CancelledError, FuturesCancelledError, wait

    event = Event()
    done = c.submit(inc, 1)
    assert await done == 2
    first, second = c.submit(_block, event, key="blocked-1"), c.submit(_block, event, key="blocked-2")
    await c.cancel([first, second], reason="not wanted")
    with pytest.raises(FuturesCancelledError) as info:
        await wait([done, first, second])
    err = info.value
    assert isinstance(err, CancelledError)  # ``except CancelledError`` still catches it
    (group,) = err.error_groups
    assert group.reason == "not wanted"
    assert sorted(e.key for e in group.errors) == ["blocked-1", "blocked-2"]
    assert "2 future(s) cancelled" in str(err) and "not wanted" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert [sorted(e.key for e in g.errors) for g in again.error_groups] == [["blocked-1", "blocked-2"]]
    assert str(again) == str(err)
    # Nothing cancelled among them: wait returns as before.
    assert (await wait([done])).done == {done}
    await event.set()


@gen_cluster(client=True)
async def test_temp_default_client_makes_a_client_default_for_a_block(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    from distributed.client import default_client, temp_default_client

    async with Client(s.address, asynchronous=True, set_as_default=True) as newer:
        assert default_client() is newer
        with temp_default_client(c):
            assert default_client() is c
            assert get_default_client() is c
        assert default_client() is newer
