"""A worker's data exchange with its peers: fetching a task's inputs, and serving theirs.

:class:`PeerTransfers` is a part of :class:`~distributed.worker.Worker` (a base
class of it): ``gather_dep`` fetches keys from a peer and hands the outcome to
the worker's state machine, ``handle_get_data`` answers a peer's ``get_data``.
Both count what they move, in the totals the worker reports in its heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm, CommClosedError
from distributed.core import ConnectionPool, ReplyThen, error_message
from distributed.offload import large, offload, serialize_each, unwrap_each
from distributed.protocol import messages as m
from distributed.protocol.framing import ProtocolError
from distributed.protocol.messages import Key
from distributed.protocol.schema import checker
from distributed.protocol.serialize import Serialize
from distributed.utils_comm import retry
from distributed.worker.state_machine import GatherDepBusy, GatherDepFailure, GatherDepSuccess, StateMachineEvent

if TYPE_CHECKING:
    from distributed.worker.state_machine import WorkerStateMachine

__all__ = ["PeerTransfers"]

logger = logging.getLogger("distributed.worker")


class PeerTransfers:
    """Fetching from and serving to peer workers; the :class:`~distributed.worker.Worker` provides the rest."""

    # Set by the worker.
    rpc: ConnectionPool
    data: MutableMapping[Key, Any]
    state: WorkerStateMachine | None
    #: Fetches started, and get_data requests served, so far.
    incoming_transfer_count: int
    outgoing_transfer_count: int
    #: Bytes from which data is (de)serialised off the event loop (``distributed.comm.offload``; None: never).
    offload_threshold: int | None
    #: Most replies to peers' get_data in flight at once (``distributed.worker.connections.incoming``),
    #: and how many are now.
    incoming_connections_limit: int
    outgoing_to_peers: int
    #: ``(count, delay_min, delay_max)`` of ``distributed.comm.retry``: how fetches from a peer are retried.
    comm_retry: tuple[int, float, float]
    #: Bytes fetched from and served to peers so far.
    transfer_incoming_bytes_total: int
    transfer_outgoing_bytes_total: int

    @property
    def address(self) -> str:
        """The worker's address (defined by the server)."""
        raise NotImplementedError

    def handle_stimulus(self, *events: StateMachineEvent) -> None:
        """Feed events to the state machine (defined by the worker)."""
        raise NotImplementedError

    async def gather_dep(self, worker: str, keys: tuple[Key, ...]) -> None:
        """Fetch ``keys`` from a peer and hand them to the state machine.

        A peer that cannot be reached is a plain failure (other holders are
        tried, then the scheduler is told).  A reply that cannot be used - data
        that does not deserialise, a malformed reply, an error raised by the peer -
        carries its exception, so the tasks that needed the data err with it
        rather than waiting forever.  A peer busy serving others (see
        :meth:`handle_get_data`) is asked again a little later.
        """
        self.incoming_transfer_count += 1
        ev: StateMachineEvent
        try:
            start = time.time()
            request = m.GetData(op="get_data", keys=list(keys), who=self.address, busy_ok=True)
            response = await retry(
                lambda: self.rpc.call(worker, request), *self.comm_retry, name=f"get_data from {worker}"
            )
            if isinstance(response, dict) and response.get("status") == "busy":
                self.handle_stimulus(
                    GatherDepBusy(stimulus_id=f"gather-dep-busy-{time.time()}", worker=worker, keys=keys)
                )
                return
            reply = _checked_get_data_reply(worker, response)
            values = reply["data"]
            data = await offload(unwrap_each, values) if large(values, self.offload_threshold) else unwrap_each(values)
            nbytes = dict(reply["nbytes"])
            self.transfer_incoming_bytes_total += sum(nbytes.values())
            stop = time.time()
            ev = GatherDepSuccess(
                stimulus_id=f"gather-dep-success-{stop}",
                worker=worker,
                keys=keys,
                data=data,
                nbytes=nbytes,
                start=start,
                stop=stop,
            )
        except asyncio.CancelledError:
            raise
        except (OSError, CommClosedError) as e:
            logger.info("Could not fetch %d keys from %s: %r", len(keys), worker, e)
            ev = GatherDepFailure(stimulus_id=f"gather-dep-failure-{time.time()}", worker=worker, keys=keys)
        except Exception as e:
            logger.warning("Fetching %d keys from %s failed: %r", len(keys), worker, e)
            err = error_message(e, e.__traceback__)
            ev = GatherDepFailure(
                stimulus_id=f"gather-dep-failure-{time.time()}",
                worker=worker,
                keys=keys,
                exception=err["exception"],
                traceback=err["traceback"],
                text=err["text"],
            )
        self.handle_stimulus(ev)

    async def handle_get_data(self, comm: Comm, msg: m.GetData) -> ReplyThen | m.GetDataBusy:
        """The values asked for; ``busy`` to a peer when as many peers' replies as allowed are going out.

        ``distributed.worker.connections.incoming`` bounds the replies to peers
        in flight at once (counted until each is written): a peer asking past
        it (``busy_ok``) is told to come back later, as in dask.  Clients and
        the scheduler are always served.
        """
        peer = msg.get("busy_ok", False)
        if peer and self.outgoing_to_peers >= self.incoming_connections_limit:
            return m.GetDataBusy(status="busy")
        self.outgoing_transfer_count += 1
        values: dict[Key, Any] = {}
        nbytes: dict[Key, int] = {}
        state = self.state
        for key in msg["keys"]:
            if key in self.data:
                values[key] = self.data[key]
                ts = state.tasks.get(key) if state is not None else None
                if ts is not None:
                    nbytes[key] = ts.nbytes
        total = sum(nbytes.values())
        self.transfer_outgoing_bytes_total += total
        if peer:
            self.outgoing_to_peers += 1
        threshold = self.offload_threshold
        # In process (inproc://) objects are handed over as they are: nothing to serialise.
        if threshold is None or total < threshold or comm.same_process:
            data: dict[Key, Any] = {k: Serialize(v) for k, v in values.items()}
        else:
            try:
                data = dict(await offload(serialize_each, values))
            except BaseException:
                if peer:
                    self.outgoing_to_peers -= 1
                raise
        return ReplyThen(m.GetDataReply(status="OK", data=data, nbytes=nbytes), self._reply_sent if peer else _nothing)

    def _reply_sent(self) -> None:
        self.outgoing_to_peers -= 1


def _nothing() -> None:
    pass


def _checked_get_data_reply(worker: str, response: Any) -> m.GetDataReply:
    """A peer's ``get_data`` reply, checked.

    Raises
    ------
    ProtocolError
        When the reply does not have the shape :meth:`PeerTransfers.handle_get_data` gives.
    """
    problem = _check_get_data_reply(response)
    if problem is not None:
        raise ProtocolError(f"Malformed get_data reply from {worker}: {problem}")
    reply: m.GetDataReply = response
    return reply


_check_get_data_reply = checker(m.GetDataReply)
