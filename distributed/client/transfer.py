"""Moving data between a client and the workers: gathering results and scattering data.

A :class:`DataTransfer` belongs to one :class:`~distributed.Client`.  It
fetches values straight from the workers that hold them (``get_data``) and
puts the client's data on workers (``update_data``), then tells the scheduler
who holds what (``update-data``).  Requests to the scheduler go through the
client's :class:`~distributed.client.link.SchedulerLink`, connections to
workers come from the client's connection pool.

Invariants:

- A fetch never gives up on a key the scheduler still knows: a holder that
  cannot be reached is not tried again in that fetch, the scheduler is asked
  who else holds the key, and a key nobody holds any more (its worker died,
  it is being recomputed) is waited for until the scheduler reports on it.
  Only when every listed holder stays unreachable for the client's timeout
  does the fetch raise.
- Replies of workers in other processes are checked against their
  declarations before they are used.
- Scattered futures exist before the scheduler learns of their keys, and are
  finished (with their holders) only once it has acknowledged them.
- A scatter whose worker cannot be reached (it died, maybe before the
  scheduler noticed) places that worker's share on other live workers, among
  those named by ``workers=`` when given, for at most
  :data:`SCATTER_ROUNDS` rounds; it fails only when no such worker is left.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Final

from dask.base import tokenize
from dask.sizeof import sizeof
from dask.utils import parse_timedelta

from distributed.client.actor import Actor
from distributed.client.future import Future, FutureState, collect_futures
from distributed.client.link import SchedulerLink, raise_if_malformed
from distributed.client.registry import FutureRegistry
from distributed.comm import CommClosedError
from distributed.core import ConnectionPool
from distributed.offload import large, offload, offload_threshold, unwrap_each
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import checker
from distributed.protocol.serialize import Serialize, Serialized, serialize
from distributed.utils_comm import retry, retry_settings

logger = logging.getLogger(__name__)

__all__ = [
    "FETCH_CONNECT_TIMEOUT",
    "SCATTER_ROUNDS",
    "DataTransfer",
    "same_container",
    "scatter_items",
    "spread",
    "substitute",
]

#: Seconds a fetch waits for a holder to accept a connection before asking the scheduler again.
#: A scatter waits as long for a worker before placing its share elsewhere.
FETCH_CONNECT_TIMEOUT: Final = 1.0

#: Most rounds of sending a scatter's data, each after a worker could not be reached.
SCATTER_ROUNDS: Final = 5

_CHECK_WHO_HAS: Final = checker(m.WhoHasReply)
_CHECK_NTHREADS: Final = checker(m.NthreadsReply)
_CHECK_IDENTITY: Final = checker(m.SchedulerIdentity)
_CHECK_ACKNOWLEDGED: Final = checker(m.Acknowledged)
_CHECK_GET_DATA: Final = checker(m.GetDataReply)
_CHECK_UPDATE_DATA: Final = checker(m.UpdateDataReply)
_CHECK_RELAY: Final = checker(m.RelayReply)


class DataTransfer:
    """Gathers a client's results from workers and scatters its data to them.

    Parameters
    ----------
    registry
        The client's futures (gathered futures must be among them; scattered
        data gets futures there).
    link
        The client's connection to the scheduler, for who_has, identity and
        update-data requests.
    pool
        Connections to workers.
    timeout
        Seconds to keep trying unreachable holders, and the default wait for a
        worker to scatter to.
    """

    def __init__(
        self,
        registry: FutureRegistry,
        link: SchedulerLink,
        pool: ConnectionPool,
        timeout: float,
        serializers: Sequence[str] | None = None,
        deserializers: Sequence[str] | None = None,
        direct: bool = True,
    ) -> None:
        self.registry = registry
        self.link = link
        self.pool = pool
        self.timeout = timeout
        #: The serializer families scattered data may use, in order (None: the defaults).
        self.serializers = serializers
        #: The families gathered data may come in (None: any).
        self.deserializers = deserializers
        #: How fetches from workers and who_has requests are retried (``distributed.comm.retry.*``).
        self.comm_retry = retry_settings()
        #: Bytes from which gathered and scattered data is (de)serialised off the event loop (``comm.offload``).
        self.offload_threshold = offload_threshold()
        #: Whether data moves straight between this client and the workers; else the scheduler relays it
        #: (``direct_to_workers=False``; a call's ``direct=`` overrides it).
        self.direct = direct

    async def gather(self, futures: Any, errors: str = "raise", direct: bool | None = None) -> Any:
        """The values of ``futures``, in the same structure (lists, tuples, sets, dicts, nested).

        Waits for each future; with ``errors="raise"`` the first erred one
        raises, with ``"skip"`` erred futures are left out.  ``direct``
        (default: the client's) says whether to fetch from the workers or
        through the scheduler.

        Raises
        ------
        ValueError
            For a future of another client.
        """
        flat: list[Future] = []
        collect_futures(futures, flat)
        for f in flat:
            if f.client is not self.registry.client:
                raise ValueError("Futures from another client cannot be gathered here")
        pending = {f.key: f.state for f in flat}
        bad: set[Key] = set()
        for key, fs in pending.items():
            await fs.event().wait()
            if fs.status != "finished":
                if errors == "raise":
                    exc = fs.error()
                    assert exc is not None
                    raise exc
                bad.add(key)
        wanted = [k for k in pending if k not in bad]
        data = await self.fetch(wanted, {k: pending[k] for k in wanted}, self.direct if direct is None else direct)
        for value in data.values():
            if type(value) is Actor:
                # Calls go through this client, and the actor lives while the proxy does.
                value.bind(self.registry.client)
        if errors == "skip":
            return substitute(futures, data, skip=bad)
        return substitute(futures, data)

    async def fetch(self, keys: list[Key], states: Mapping[Key, FutureState], direct: bool = True) -> dict[Key, Any]:
        """Fetch values from the workers that hold them (straight, or relayed by the scheduler unless ``direct``).

        A holder that cannot be reached is not tried again in this fetch: the
        scheduler is asked who else holds the key.  When nobody does any more
        (the holder died and the key is being recomputed), this waits for the
        scheduler's next report on the key.  Callers bound the whole fetch
        with their own deadline (``result(timeout=)``).
        """
        data: dict[Key, Any] = {}
        missing = list(keys)
        unreachable: set[str] = set()
        attempts = 0
        stuck_since: float | None = None
        delay = 0.02
        while missing:
            attempts += 1
            by_worker: defaultdict[str, list[Key]] = defaultdict(list)
            for k in missing:
                holders = [w for w in states[k].workers if w not in unreachable]
                if holders:
                    by_worker[holders[(attempts - 1) % len(holders)]].append(k)
            results = await asyncio.gather(
                *(
                    retry(functools.partial(self.get_data, w, ks, direct), *self.comm_retry, name=f"get_data from {w}")
                    for w, ks in by_worker.items()
                ),
                return_exceptions=True,
            )
            for (w, _ks), res in zip(by_worker.items(), results):
                if isinstance(res, (OSError, CommClosedError, TimeoutError)):
                    logger.debug("Gather from %s failed: %r", w, res)
                    unreachable.add(w)
                    continue
                if isinstance(res, BaseException):
                    # The worker answered with an error (e.g. the value does not serialise).
                    raise res
                data.update(res)
                for k, v in res.items():
                    fs = states.get(k)
                    if fs is not None and not isinstance(fs.type, type):
                        fs.type = type(v)
            missing = [k for k in missing if k not in data]
            if not missing:
                break
            stale = {k: list(states[k].workers) for k in missing}
            ask = functools.partial(
                self.link.checked_request, m.OptionalKeysRequest(op="who_has", keys=missing), _CHECK_WHO_HAS
            )
            who_has: m.WhoHasReply = await retry(ask, *self.comm_retry, name="who_has")
            waited = False
            for k in missing:
                fs = states[k]
                listed = list(who_has.get(k, ()))
                if fs.status == "finished" and list(fs.workers) != stale[k]:
                    continue  # a fresh report came in meanwhile: use it
                if any(w not in unreachable for w in listed):
                    fs.workers = listed
                elif not listed:
                    # Not in memory any more (lost, recomputing): wait for the next report.
                    if fs.status == "finished":
                        fs.reset()
                    await fs.event().wait()
                    waited = True
                    if fs.status != "finished":
                        exc = fs.error()
                        assert exc is not None
                        raise exc
                    unreachable.difference_update(fs.workers)
            if waited:
                stuck_since = None
                continue
            if all(not any(w not in unreachable for w in states[k].workers) for k in missing):
                # Only unreachable holders are listed: the scheduler has not noticed yet.
                now = time.monotonic()
                if stuck_since is None:
                    stuck_since = now
                elif now - stuck_since > self.timeout:
                    raise OSError(f"Could not reach any worker holding {len(missing)} keys, e.g. {missing[:3]}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
        return data

    async def get_data(self, worker: str, keys: list[Key], direct: bool = True) -> dict[Key, Any]:
        """The values of ``keys`` held by ``worker``, from one ``get_data`` request (relayed unless ``direct``).

        Raises
        ------
        OSError, CommClosedError, TimeoutError
            When the worker cannot be reached (see :meth:`fetch`).
        MessageError
            When its reply is malformed.
        """
        # A holder that does not accept a connection at once is likely gone:
        # fail over (ask the scheduler again) instead of retrying for the
        # whole connect timeout.  The transfer itself is not limited here.
        if direct:
            async with self.pool.borrowed(worker, timeout=min(FETCH_CONNECT_TIMEOUT, self.timeout)) as comm:
                response = await comm.request(m.GetData(op="get_data", keys=keys, who=self.link.client_id))
            check = not comm.same_process
        else:
            response = await self.relayed(m.RelayGetData(op="relay_get_data", worker=worker, keys=keys))
            check = self.link.check_replies
        if check:
            raise_if_malformed(_CHECK_GET_DATA, response, f"'get_data' from {worker}")
        reply: m.GetDataReply = response
        deserializers = self.deserializers
        values = reply["data"]
        if large(values, self.offload_threshold):
            return await offload(unwrap_each, values, deserializers)
        return unwrap_each(values, deserializers)

    async def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        hash: bool = True,
        timeout: Any = None,
        direct: bool | None = None,
    ) -> Any:
        """Put ``data`` on workers; futures of it in the same structure.

        A list, tuple, set or frozenset (or a subclass, a namedtuple) gives the
        same container of futures, a dict a dict, an iterator or a ``range`` a
        list; anything else is one object and gives one future.  Each item
        goes to ``broadcast`` workers (every one for ``True``) among
        ``workers`` (see :meth:`scatter_targets`).  ``direct`` (default: the
        client's) says whether to send to the workers or through the scheduler.
        """
        if isinstance(data, (Iterator, range)):
            data = list(data)
        items, order = scatter_items(data, hash)
        addrs = await self.scatter_targets(workers, timeout)
        who_has, nbytes, types = await self.place(
            items, addrs, broadcast, workers, timeout, self.direct if direct is None else direct
        )
        futures = {k: Future(k, self.registry.client, inform=False) for k in items}
        for f in futures.values():
            fs = f.state
            if fs.status != "finished":
                fs.reset()
        await self.link.checked_request(
            m.UpdateData(
                op="update-data", client=self.link.client_id, who_has=dict(who_has), nbytes=nbytes, types=types
            ),
            _CHECK_ACKNOWLEDGED,
        )
        for k, f in futures.items():
            if f.state.status == "pending":
                f.state.finish(who_has[k], type(items[k]))
        if isinstance(data, dict):
            return futures
        if not isinstance(data, (list, tuple, set, frozenset)):
            return futures[order[0]]
        return same_container(type(data), [futures[k] for k in order])

    async def place(
        self,
        items: Mapping[Key, Any],
        addrs: list[str],
        broadcast: bool | int,
        workers: Any,
        timeout: Any = None,
        direct: bool = True,
    ) -> tuple[dict[Key, list[str]], dict[Key, int], dict[Key, str]]:
        """Put ``items`` on workers: who holds each key, and the sizes and type names the workers reported.

        Starts from ``addrs`` (see :func:`spread`).  The share of a worker that
        cannot be reached goes to live workers that do not hold those keys yet,
        chosen again as :meth:`scatter_targets` does (among ``workers`` when
        given), for at most :data:`SCATTER_ROUNDS` rounds.

        Raises
        ------
        CommClosedError
            When no worker that could take the data is left: every one named
            by ``workers``, or every one of the cluster within ``timeout``,
            could not be reached.
        """
        copies = len(addrs) if broadcast is True else max(min(int(broadcast), len(addrs)), 1)
        threshold = self.offload_threshold
        in_process = all(a.startswith("inproc://") for a in addrs)  # objects handed over as they are
        if threshold is not None and not in_process and sum(sizeof(v) for v in items.values()) >= threshold:
            # Large: serialised now, off the event loop, rather than as the messages are written on it.
            assignment = await offload(spread, items, addrs, broadcast, self.serializers, True)
        else:
            assignment = spread(items, addrs, broadcast, self.serializers)
        who_has: defaultdict[Key, list[str]] = defaultdict(list)
        nbytes: dict[Key, int] = {}
        types: dict[Key, str] = {}
        unreachable: set[str] = set()
        for _round in range(SCATTER_ROUNDS):
            replies = await asyncio.gather(
                *(self.update_data(a, d, direct) for a, d in assignment.items()), return_exceptions=True
            )
            failed: dict[Key, Serialize | Serialized] = {}
            for (a, d), reply in zip(assignment.items(), replies):
                if isinstance(reply, (OSError, TimeoutError)):  # CommClosedError is an OSError
                    logger.info("Scatter to %s failed (%r): placing its %d keys elsewhere", a, reply, len(d))
                    unreachable.add(a)
                    failed.update(d)
                    continue
                if isinstance(reply, BaseException):
                    raise reply
                for k in d:
                    who_has[k].append(a)
                    nbytes[k] = reply["nbytes"].get(k, 0)
                    types[k] = reply["types"].get(k, "")
            if not failed:
                return dict(who_has), nbytes, types
            live = await self.scatter_targets(workers, timeout, exclude=unreachable)
            assignment = {}
            for i, (k, ser) in enumerate(failed.items()):
                free = [a for a in live if a not in who_has[k]]
                for j in range(min(copies - len(who_has[k]), len(free))):
                    assignment.setdefault(free[(i + j) % len(free)], {})[k] = ser
            if not assignment:
                # Every key already has its copies on live workers (a broadcast lost one holder).
                return dict(who_has), nbytes, types
        raise CommClosedError(
            f"Could not scatter: the workers {sorted(unreachable)} could not be reached "
            f"in {SCATTER_ROUNDS} rounds of placing the data elsewhere"
        )

    async def update_data(
        self, worker: str, data: Mapping[Key, Serialize | Serialized], direct: bool = True
    ) -> m.UpdateDataReply:
        """Put ``data`` on ``worker`` with one ``update_data`` request (relayed unless ``direct``); its reply, checked.

        Raises
        ------
        OSError, CommClosedError, TimeoutError
            When the worker cannot be reached (see :meth:`place`).
        MessageError
            When its reply is malformed.
        """
        # As in get_data: a worker that does not accept a connection at once is likely gone.
        if direct:
            async with self.pool.borrowed(worker, timeout=min(FETCH_CONNECT_TIMEOUT, self.timeout)) as comm:
                response = await comm.request(m.WorkerUpdateData(op="update_data", data=data))
        else:
            response = await self.relayed(m.RelayUpdateData(op="relay_update_data", worker=worker, data=data))
        if self.link.check_replies:
            raise_if_malformed(_CHECK_UPDATE_DATA, response, f"'update_data' from {worker}")
        reply: m.UpdateDataReply = response
        return reply

    async def relayed(self, request: m.RelayGetData | m.RelayUpdateData) -> Any:
        """The worker's reply to ``request``, passed on by the scheduler.

        Raises
        ------
        OSError
            When the scheduler could not reach the worker (the caller fails over as for a worker it cannot reach).
        MessageError
            When the scheduler's reply is malformed.
        """
        reply: m.RelayReply = await self.link.checked_request(request, _CHECK_RELAY)
        if reply["status"] != "OK":
            raise OSError(reply.get("error", f"The scheduler could not reach {request['worker']}"))
        return reply.get("reply")

    async def scatter_targets(self, workers: Any, timeout: Any = None, exclude: Collection[str] = ()) -> list[str]:
        """Addresses of the workers to scatter to: all, or those named (by address, name or host).

        Waits (up to ``timeout``, default the connect timeout) until at least one such worker is connected.
        Workers in ``exclude`` (found unreachable) do not count; when ``workers``
        names some and all of them are excluded, this raises at once.

        Raises
        ------
        TimeoutError
            When no worker shows up in time.
        CommClosedError
            When every worker named by ``workers`` is excluded.
        """
        wanted = None if workers is None else [workers] if isinstance(workers, (str, int)) else list(workers)
        deadline = time.monotonic() + (self.timeout if timeout is None else parse_timedelta(timeout))
        while True:
            if wanted is None:
                nthreads: m.NthreadsReply = await self.link.checked_request(
                    m.WorkersRequest(op="nthreads"), _CHECK_NTHREADS
                )
                addrs = sorted(nthreads)
            else:
                info: m.SchedulerIdentity = await self.link.checked_request(m.Empty(op="identity"), _CHECK_IDENTITY)
                named = sorted(
                    addr
                    for addr, w in info["workers"].items()
                    if any(x == addr or x == w["name"] or x == w["host"] for x in wanted)
                )
                addrs = [a for a in named if a not in exclude]
                if exclude and not addrs:
                    raise CommClosedError(
                        f"Could not scatter to workers={workers!r}: "
                        f"none of them can be reached ({', '.join(sorted(exclude))} failed)"
                    )
            addrs = [a for a in addrs if a not in exclude]
            if addrs:
                return addrs
            if time.monotonic() > deadline:
                if exclude:
                    raise CommClosedError(
                        f"Could not scatter: no worker left to take the data of {', '.join(sorted(exclude))}, "
                        "which could not be reached"
                    )
                raise TimeoutError(f"No valid workers found to scatter to (workers={workers!r})")
            await asyncio.sleep(0.05)


def scatter_items(data: Any, hash: bool) -> tuple[dict[Key, Any], list[Key]]:
    """The items of ``data`` to scatter by key, and the key of each element in order.

    A dict keeps its keys.  Elements of a list, tuple, set or frozenset, or a
    single object, get keys from their type and a token of their value when
    ``hash`` (equal items then share one key and one copy on the cluster),
    else from a random id.

    Examples
    --------
    >>> items, order = scatter_items([1, 2, 1], hash=True)
    >>> len(items), order[0] == order[2]
    (2, True)
    """
    if isinstance(data, dict):
        return dict(data), list(data)
    seq = list(data) if isinstance(data, (list, tuple, set, frozenset)) else [data]
    if hash:
        order: list[Key] = [f"{type(x).__name__}-{tokenize(x)}" for x in seq]
    else:
        order = [f"{type(x).__name__}-{uuid.uuid4()}" for x in seq]
    return dict(zip(order, seq)), order


def spread(
    items: Mapping[Key, Any],
    addrs: list[str],
    broadcast: bool | int,
    serializers: Sequence[str] | None = None,
    eager: bool = False,
) -> dict[str, dict[Key, Serialize | Serialized]]:
    """What each worker of ``addrs`` receives: item ``i`` goes to ``addrs[i]`` and the next ones.

    ``broadcast=True`` puts every item on every worker, an int ``n`` on ``n``
    workers (at most all of them), anything else on one.  With ``serializers``
    each item is serialised now, by the first of those families that takes it
    (a ``SerializationError`` when none does); else when it is sent, by the
    defaults (now, with ``eager``).
    """
    assignment: defaultdict[str, dict[Key, Serialize | Serialized]] = defaultdict(dict)
    copies = len(addrs) if broadcast is True else max(min(int(broadcast), len(addrs)), 1)
    for i, (k, v) in enumerate(items.items()):
        if serializers is None and not eager:
            ser: Serialize | Serialized = Serialize(v)
        else:
            ser = Serialized(*serialize(v, serializers, on_error="raise"))
        for j in range(copies):
            assignment[addrs[(i + j) % len(addrs)]][k] = ser
    return dict(assignment)


def substitute(x: Any, data: Mapping[Key, Any], skip: Collection[Key] = ()) -> Any:
    """``x`` with every future replaced by its value in ``data``; futures of ``skip`` are left out of containers."""
    if isinstance(x, Future):
        return data[x.key]
    if isinstance(x, list):
        return [substitute(v, data, skip) for v in x if not (isinstance(v, Future) and v.key in skip)]
    if isinstance(x, tuple):
        if hasattr(x, "_fields"):
            return type(x)(*(substitute(v, data, skip) for v in x))
        return tuple(substitute(v, data, skip) for v in x if not (isinstance(v, Future) and v.key in skip))
    if isinstance(x, (set, frozenset)):
        return type(x)(substitute(v, data, skip) for v in x if not (isinstance(v, Future) and v.key in skip))
    if isinstance(x, dict):
        return {k: substitute(v, data, skip) for k, v in x.items() if not (isinstance(v, Future) and v.key in skip)}
    return x


def same_container(kind: type, futures: list[Future]) -> Any:
    """``futures`` in a container of type ``kind`` (a list, tuple, set, or a subclass; a namedtuple)."""
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):
        namedtuple_type: Callable[..., Any] = kind
        return namedtuple_type(*futures)
    try:
        return kind(futures)
    except TypeError:
        # A subclass whose constructor takes something else: its base type.
        for base in (list, tuple, set, frozenset):
            if issubclass(kind, base):
                return base(futures)
        raise
