"""Published datasets, from the client: publishing, getting, and ``client.datasets``.

A dataset is any picklable object, typically futures or a persisted dask
collection, published under a name so that other clients can get it.  It is
pickled here and travels as frames that only a getter unpickles; the futures
inside it travel as their keys, which the scheduler keeps in memory while the
dataset is published (see
:mod:`distributed.coordination.publish_extension`).  A getter's copy of the
dataset holds futures of the getter's client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

from dask.typing import no_default

from distributed.client.waiting import futures_of
from distributed.coordination.names import check_name
from distributed.protocol import messages as m
from distributed.protocol.schema import checker
from distributed.protocol.serialize import as_serialized, unwrap

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Datasets", "get_dataset", "publish"]

_CHECK_GET: Final = checker(m.PublishGetReply)


async def publish(client: Client, datasets: Mapping[Any, Any], override: bool) -> None:
    """Publish each of ``datasets`` (name -> object) through ``client``.

    Raises
    ------
    KeyError
        When a name is taken and ``override`` is false.
    """
    names = [check_name(name) for name in datasets]
    # The tasks of the futures inside must be known to the scheduler before it can hold them.
    await client.link.stream_handled()
    requests = []
    for name, data in zip(names, datasets.values()):
        keys = [f.key for f in futures_of(data)]
        msg = m.PublishPut(
            op="publish_put",
            name=name,
            keys=keys,
            # Pickled now even when the scheduler is in this process: a getter
            # unpickles a copy, whose futures then belong to the getter's client.
            data=as_serialized(data, client.transfer.serializers),
            override=override,
            client=client.id,
        )
        requests.append(client.link.request(msg))
    await asyncio.gather(*requests)


async def get_dataset(client: Client, name: Any, default: Any = no_default) -> Any:
    """The dataset ``name``, its futures bound to ``client``; ``default`` when there is none.

    Raises
    ------
    KeyError
        When there is no dataset ``name`` and no ``default``.
    """
    reply = await client.link.checked_request(
        m.PublishGet(op="publish_get", name=check_name(name), client=client.id), _CHECK_GET
    )
    if "data" not in reply:
        if default is no_default:
            raise KeyError(f"Dataset '{name}' not found")
        return default
    with client.as_current():
        data = unwrap(reply["data"], client.transfer.deserializers)
    # The scheduler counts the client as wanting the keys already; each future
    # new to this client asks for its key's status as it binds (see FutureRegistry.acquire).
    for future in futures_of(data):
        if future.bound_client is not client:
            future.bind_client(client)
    return data


class Datasets(MutableMapping[Any, Any]):
    """``client.datasets``: the published datasets as a mapping from names to datasets.

    Getting an item gets the dataset (an awaitable with an asynchronous
    client); setting one publishes it, deleting unpublishes it.  Setting,
    deleting, ``len`` and ``iter`` need a synchronous client (use ``async for``
    and the client's methods with an asynchronous one).

    Parameters
    ----------
    client
        The client to go through.

    Examples
    --------
    >>> client.datasets["x"] = client.submit(inc, 1)  # doctest: +SKIP
    >>> "x" in client.datasets  # doctest: +SKIP
    True
    >>> client.datasets["x"].result()  # doctest: +SKIP
    2
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    def _refuse_async(self, what: str, instead: str) -> None:
        if self._client.asynchronous:
            raise TypeError(f"Can't use {what} when the client is asynchronous; {instead}")

    def __getitem__(self, key: Any) -> Any:
        return self._client.get_dataset(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._refuse_async("'client.datasets[name] = value'", "use 'await client.publish_dataset(value, name=name)'")
        self._client.publish_dataset(value, name=key)

    def __delitem__(self, key: Any) -> None:
        self._refuse_async("'del client.datasets[name]'", "use 'await client.unpublish_dataset(name)'")
        self._client.unpublish_dataset(key)

    def __contains__(self, key: object) -> bool:
        self._refuse_async("'name in client.datasets'", "use 'name in await client.list_datasets()'")
        names = self._client.list_datasets()
        assert isinstance(names, list)
        return key in names

    def __iter__(self) -> Iterator[Any]:
        self._refuse_async("iter() or 'for' on client.datasets", "use 'async for' instead")
        names = self._client.list_datasets()
        assert isinstance(names, list)
        yield from names

    def __aiter__(self) -> AsyncIterator[Any]:
        if not self._client.asynchronous:
            raise TypeError(
                "Can't use 'async for' on client.datasets when the client is synchronous; use 'for' instead"
            )
        return self._names()

    async def _names(self) -> AsyncIterator[Any]:
        names = await self._client.list_datasets(asynchronous=True)
        for name in names:
            yield name

    def __len__(self) -> int:
        self._refuse_async("len(client.datasets)", "use 'len(await client.list_datasets())' instead")
        names = self._client.list_datasets()
        assert isinstance(names, list)
        return len(names)
