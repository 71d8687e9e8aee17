"""A client's connection to its scheduler: the stream both ways, and requests in order with it.

A :class:`SchedulerLink` belongs to one :class:`~distributed.Client`.  It
registers the client, then keeps one long-lived batched stream: outgoing, it
sends what the client's :class:`~distributed.client.outbox.Outbox` holds
(graph parts, key releases, barriers), draining it on the client's event loop;
incoming, it checks each report of the scheduler against its declaration and
applies it to the futures of the client's
:class:`~distributed.client.registry.FutureRegistry`.  Requests (who_has,
cancel, run, ...) go on connections of their own, from the client's connection
pool, and are ordered after every graph part queued before them.

When the stream is lost while the client is not closing (the scheduler was
restarted at its address, or taken over from its journal, or the connection
dropped), the link connects and registers again at the same address with the
same client id, for up to its timeout (as dask's Client does for its
``timeout``; a scheduler that shuts down looks the same, and the client then
closes once the timeout has passed, as dask's does).  Meanwhile the client's
futures keep their state.  Once the stream runs again, what the old stream had
not written goes first, then the outbox, in which the keys of every held future
(but cancelled ones) were queued as ``client-desires-keys``: the scheduler
links them to the client again and answers each (in memory, erred, or
cancelled as an unknown key).

Invariants:

- ``status`` moves newly-created -> connecting -> running, then between
  running and connecting (a reconnection) any number of times, then to
  closing -> closed; straight to closed when the first connection is never
  made, or no reconnection succeeds within the timeout (then ``lost`` is set).
  The outbox is drained only while running.
- :meth:`kick` takes no lock, does no I/O and schedules at most one drain
  however often it is called: a finaliser may call it.
- Nothing taken from the outbox is dropped until the link closes or gives up:
  what a lost stream had not written is sent first on the next one, and
  before it the graphs, wants and releases it wrote that the scheduler did not
  acknowledge (a stream barrier sent behind them comes back once it has
  handled them): a scheduler killed with them unread took them along.  Some
  may have been handled (by it, or by the journal a successor replays): sent
  again in order they end in the same state.
- A request made after a graph was queued in parts reaches the scheduler after
  the scheduler has handled every one of those parts (:meth:`graphs_sent`):
  a stream barrier sent behind the parts comes back first.  A barrier that
  the lost stream took is answered False, and the wait starts again on the
  next stream.
- During a reconnection, requests wait for it to end (see
  :meth:`_send_request`); pending futures stay pending and finished ones
  finished.  When it fails, every waiter (requests, barriers, requests
  waiting for graph parts) wakes up and every pending or finished future is
  cancelled with reason ``"scheduler-connection-lost"``.
- Only one reconnection runs at a time; :meth:`close` cancels it and waits for
  it to end, so nothing the link started outlives the link.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

from distributed.batched import BatchedSend
from distributed.client.graph_parts import GraphPlan, PendingParts, start_background_parts
from distributed.client.outbox import Outbox, StreamMessage
from distributed.client.registry import FutureRegistry
from distributed.comm import Comm, CommClosedError, connect
from distributed.config import get_interval
from distributed.core import ConnectionPool, StreamRoute, error_message
from distributed.protocol import coordination_messages as cm
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.schema import Check, MessageError, checker
from distributed.utils import wait_for
from distributed.versions import VersionMismatchWarning, get_versions

logger = logging.getLogger(__name__)

__all__ = ["ACK_AFTER", "ACK_EVERY", "LARGE_GRAPH_MESSAGE", "SchedulerLink", "SchedulerRequest", "raise_if_malformed"]

#: Tasks from which an ``update-graph`` message goes in a write without another such message:
#: the scheduler then decodes one part of a large graph at a time, answering others in between.
LARGE_GRAPH_MESSAGE = 1000

#: Every request a client sends its scheduler: its own, worker and nanny plugins' and coordination primitives'.
SchedulerRequest = (
    m.ClientRequest
    | m.RegisterWorkerPlugin
    | m.UnregisterWorkerPlugin
    | m.RegisterNannyPlugin
    | m.UnregisterNannyPlugin
    | cm.CoordinationRequest
    | m.Restart
    | m.RestartWorkers
    | m.DatasetRequest
    | m.EventLogRequest
    | m.GetLogs
)

_CHECK_REGISTERED: Final = checker(m.RegisterClientReply)

#: Seconds between two tries to register again (each try's connect already retries until it times out).
RECONNECT_PAUSE: Final = 0.1


def raise_if_malformed(check: Check, reply: Any, what: str) -> None:
    """Raise :class:`~distributed.protocol.schema.MessageError` naming ``what`` unless ``reply`` passes ``check``."""
    problem = check(reply)
    if problem is not None:
        raise MessageError(f"Malformed reply to {what}: {problem}")


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    for w in waiters:
        if not w.done():
            w.set_result(None)


#: What the link keeps until the scheduler acknowledges it (a stream barrier behind it came back).
_KEPT_UNTIL_HANDLED: Final = frozenset({"update-graph", "client-desires-keys", "client-releases-keys"})

#: Messages kept unacknowledged after which a barrier asks the scheduler to acknowledge them.
ACK_EVERY: Final = 16

#: Seconds after which fewer kept messages are acknowledged all the same.
ACK_AFTER: Final = 0.5


def _send(bs: BatchedSend, msg: StreamMessage) -> None:
    """Queue ``msg`` on ``bs`` the way its kind goes (raises CommClosedError when ``bs`` is closed)."""
    if msg["op"] == "client-releases-keys":
        bs.send_lazy(msg)
    elif msg["op"] == "update-graph" and len(msg["tasks"]) >= LARGE_GRAPH_MESSAGE:
        bs.send_large(msg)
    else:
        bs.send(msg)


class SchedulerLink:
    """The connection of one client to its scheduler.

    Parameters
    ----------
    client_id
        The client's id, as registered with the scheduler.
    outbox
        What goes on the stream, in order.
    registry
        The client's futures: reports apply to them, their releases leave
        through the outbox.
    pool
        Connections for requests (shared with transfers to workers).
    timeout
        Seconds to wait for the scheduler to accept and register the client,
        and to keep trying to register again after the stream was lost.
    loop
        The client's event loop (it may change until the client starts).
    """

    def __init__(
        self,
        client_id: str,
        outbox: Outbox,
        registry: FutureRegistry,
        pool: ConnectionPool,
        timeout: float,
        loop: Callable[[], asyncio.AbstractEventLoop],
    ) -> None:
        self.client_id = client_id
        self.outbox = outbox
        self.registry = registry
        self.pool = pool
        self.timeout = timeout
        self._loop = loop
        #: newly-created, connecting, running, closing or closed (connecting again after a lost stream).
        self.status = "newly-created"
        #: The scheduler's address, once connected.
        self.address: str | None = None
        #: The outgoing stream, once connected.
        self.stream: BatchedSend | None = None
        #: Ports of the scheduler's services (``dashboard``), from the registration reply.
        self.services: Mapping[str, int] = {}
        #: The scheduler's identity without its workers, from the registration reply.
        self.identity: dict[str, Any] = {}
        #: Whether reports and replies are checked (not those of a scheduler in this process).
        self.check_replies = True
        #: Whether the scheduler runs in this process (its comm is in-process).
        self.same_process = False
        self._comm: Comm | None = None
        self._reader: asyncio.Task[None] | None = None
        #: Seconds between heartbeats on the stream (``Client(heartbeat_interval=)``, else
        #: ``distributed.client.heartbeat``): the scheduler sees the client alive while it is idle.
        self.heartbeat_interval = get_interval("distributed.client.heartbeat", 5.0)
        self._heartbeat: asyncio.Task[None] | None = None
        #: Set when the stream to the scheduler was lost (not closed by us) and no reconnection
        #: succeeded within :attr:`timeout`: requests fail at once.
        self.lost = False
        #: The reconnection under way, if any (see the module docstring).
        self._reconnecting: asyncio.Task[None] | None = None
        #: Requests waiting for the reconnection to end, either way.
        self._reconnect_waiters: list[asyncio.Future[None]] = []
        #: Messages taken from the outbox that no stream wrote (it was lost first): they go first on the next.
        self._carry: list[StreamMessage] = []
        #: Graphs, wants and releases queued on the stream that the scheduler is not known to have handled
        #: yet: should the stream be lost, they go again (see :meth:`_end_stream`).
        self._unacked: list[StreamMessage] = []
        #: The barrier that will acknowledge the first ``count`` of :attr:`_unacked`: ``(id, count)``.
        self._ack: tuple[int, int] | None = None
        #: The timer that asks for an acknowledgement of the few messages written since the last one.
        self._ack_timer: asyncio.TimerHandle | None = None
        #: Called on the loop once the stream runs again, before the outbox drains (they may post to it).
        self._on_reconnect: list[Callable[[], None]] = []
        #: How often the stream was opened again after being lost.
        self.reconnections = 0
        self._drain_scheduled = False
        #: Requests waiting until every queued graph part is sent.
        self._parts_waiters: list[asyncio.Future[None]] = []
        #: How many graphs sent in parts the scheduler is known to have
        #: received (a stream barrier came back after them).
        self._parts_confirmed = 0
        self._barrier_ids = itertools.count()
        #: Barriers on the stream not yet back: True when reached, False when the stream went first.
        self._barriers: dict[int, asyncio.Future[bool]] = {}
        #: What the scheduler may report on the stream, each checked against its declaration.
        self._routes: dict[str, StreamRoute[Any]] = {
            "key-in-memory": StreamRoute(m.KeyInMemory, self._on_key_in_memory),
            "task-erred": StreamRoute(m.ClientTaskErred, self._on_task_erred),
            "cancelled-keys": StreamRoute(m.CancelledKeys, self._on_cancelled_keys),
            "lost-data": StreamRoute(m.LostData, self._on_lost_data),
            "stream-barrier": StreamRoute(m.StreamBarrierReached, self._on_stream_barrier),
        }

    def add_route(self, op: str, route: StreamRoute[Any]) -> None:
        """Handle the scheduler's stream messages ``op`` with ``route`` (a part of the client that has some).

        Raises
        ------
        ValueError
            When ``op`` is handled already.
        """
        if op in self._routes:
            raise ValueError(f"Scheduler reports {op!r} are handled already")
        self._routes[op] = route

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop each time the stream runs again after being lost.

        It runs before the outbox drains, so what it posts (a part of the
        client telling the scheduler again what it asked of the lost stream,
        such as topic subscriptions) goes out with the rest.
        """
        self._on_reconnect.append(callback)

    @property
    def unacknowledged(self) -> int:
        """How many graphs, wants and releases written the scheduler has not acknowledged yet (sent again if lost)."""
        return len(self._unacked)

    @property
    def reconnecting(self) -> bool:
        """Whether the link is connecting again after its stream was lost."""
        return self._reconnecting is not None

    @property
    def connected(self) -> bool:
        """Whether a connection to the scheduler was made and the link is not closed down yet.

        True while reconnecting, and after a reconnection failed, until
        :meth:`close`: there is something to close down.
        """
        return self._comm is not None

    # -- connecting ---------------------------------------------------------------------
    async def connect(self, address: str) -> None:
        """Connect to the scheduler at ``address``, register the client and open the stream.

        Raises
        ------
        RuntimeError
            When the scheduler refuses the client.
        MessageError
            When its reply is malformed.
        """
        self.address = address
        comm, registered = await self._register(address, self.timeout)
        if registered.get("warning"):
            warnings.warn(VersionMismatchWarning(registered["warning"]), stacklevel=2)
        self._open_stream(comm)
        if len(self.outbox):
            self.drain()

    async def _register(self, address: str, timeout: float) -> tuple[Comm, m.RegisterClientReply]:
        """Connect to ``address`` and register the client; the comm, and the scheduler's checked reply."""
        comm = await connect(address, timeout=timeout, name="client->scheduler", **self.pool.connection_args)
        try:
            await comm.write(m.RegisterClient(op="register-client", client=self.client_id, versions=get_versions()))
            response = await wait_for(comm.read(), timeout)
        except BaseException:
            comm.abort()
            raise
        if not isinstance(response, dict) or response.get("status") != "OK":
            comm.abort()
            raise RuntimeError(f"Scheduler refused the client: {response!r}")
        # Messages from this process were built as declared; replies and reports from others are checked.
        self.same_process = comm.same_process
        self.check_replies = not comm.same_process
        if self.check_replies:
            try:
                raise_if_malformed(_CHECK_REGISTERED, response, "'register-client' from the scheduler")
            except MessageError:
                comm.abort()
                raise
        registered = cast(m.RegisterClientReply, response)  # checked above (or built as declared in process)
        # Known from the start (dashboard_link, repr) without another round trip.
        self.services = registered["services"]
        self.identity = dict(registered.get("identity") or {})
        return comm, registered

    def _open_stream(self, comm: Comm) -> None:
        """Start the stream on ``comm`` (registered): its writer, its reader and its heartbeats."""
        self._comm = comm
        bs = BatchedSend(
            interval=get_interval("distributed.client.batched-send-interval", 0.00025), name="client->scheduler"
        )
        bs.start(comm)
        self.stream = bs
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read_reports(comm), name="client-report")
        if self.heartbeat_interval > 0:
            self._heartbeat = loop.create_task(self._beat(bs), name="client-heartbeat")
        self.status = "running"

    async def close(self) -> None:
        """Release every held key, tell the scheduler the client leaves, and close the stream.

        Ends a reconnection under way (at once: nothing is waited for) and
        wakes everything waiting on the stream.  Pending futures are left to
        the caller.
        """
        self.status = "closing"
        reconnecting, self._reconnecting = self._reconnecting, None
        if reconnecting is not None:
            reconnecting.cancel()
            await asyncio.wait([reconnecting])  # ended, not merely told to: nothing of ours outlives close()
        # Its own ``finally`` wakes them, unless it was cancelled before it first ran.
        self._wake_reconnect_waiters()
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.cancel()
            await asyncio.wait([heartbeat])
        self.outbox.stop_parts()
        waiters, self._parts_waiters = self._parts_waiters, []
        _wake(waiters)
        self._settle_barriers()
        self._carry = []
        self._stop_acks()
        bs = self.stream
        if bs is not None:
            try:
                held = self.registry.held_keys()
                # In chunks: the scheduler serves others between two (a million keys take seconds).
                chunk = self.outbox.chunk_size
                for i in range(0, len(held), chunk):
                    bs.send(m.ClientKeys(op="client-releases-keys", client=self.client_id, keys=held[i : i + chunk]))
                bs.send(m.CloseClient(op="close-client", client=self.client_id))
            except CommClosedError:
                pass
            await bs.close(timeout=2)
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except BaseException:
                pass
        if self._comm is not None:
            self._comm.abort()
            self._comm = None

    async def _beat(self, bs: BatchedSend) -> None:
        """Send a heartbeat on ``bs`` every :attr:`heartbeat_interval` until the stream closes."""
        beat = m.ClientHeartbeat(op="heartbeat-client", client=self.client_id)
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if bs.closed():
                return
            try:
                bs.send(beat)
            except CommClosedError:
                return

    # -- reports from the scheduler ------------------------------------------------------
    async def _read_reports(self, comm: Comm) -> None:
        cancelled = False
        try:
            while True:
                msgs = await comm.read()
                self.handle_reports(msgs)
        except CommClosedError:
            pass
        except asyncio.CancelledError:
            # By close(), or by the loop shutting down: no reconnection then.
            cancelled = True
        except Exception:
            # Not from a report (those are caught one by one): the stream cannot be read on.
            logger.exception("Reading the stream from the scheduler at %s failed", self.address)
            comm.abort()
        if self.status in ("closing", "closed") or comm is not self._comm:
            return
        if cancelled:
            logger.warning("Lost connection to the scheduler at %s", self.address)
            self._end_stream()
            self._give_up()
        else:
            self._stream_lost()

    def _end_stream(self) -> asyncio.Task[None] | None:
        """Close the stream that was lost, keeping what it had not written, and answer its barriers.

        Returns its heartbeat task, cancelled: the caller awaits its end.
        """
        bs, self.stream = self.stream, None
        if bs is not None:
            # Taken from the outbox before anything that is still there: first on the next stream.  Before
            # them, what it wrote that the scheduler did not acknowledge: a scheduler killed before reading
            # it took it along.  Sent again in order, those converge on the same state where the scheduler
            # (or its journal) had handled some: a graph's known keys keep their state, and a want or a
            # release applied again, followed by what came after it, ends where it did.
            queued = {id(msg) for msg in bs.buffer}
            self._carry[:0] = [msg for msg in self._unacked if id(msg) not in queued] + list(bs.buffer)
            bs.abort()
        self._stop_acks()
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.cancel()  # it wrote to that stream only
        self._settle_barriers()
        # Idle connections of the pool may lead to a scheduler that is gone.
        if self.address is not None:
            self.pool.remove(self.address)
        return heartbeat

    def _stream_lost(self) -> None:
        """The stream was lost (not closed by us): keep the futures, and connect again."""
        logger.warning(
            "Lost connection to the scheduler at %s; connecting again for up to %.3g s", self.address, self.timeout
        )
        self.status = "connecting"
        heartbeat = self._end_stream()
        self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect(heartbeat), name="client-reconnect")

    async def _reconnect(self, heartbeat: asyncio.Task[None] | None) -> None:
        """Register again at the scheduler's address, same client id, until :attr:`timeout` runs out.

        ``heartbeat``, the lost stream's (cancelled), has ended before a new one starts.
        """
        assert self.address is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        failure: BaseException | None = None
        try:
            if heartbeat is not None:
                await asyncio.wait([heartbeat])
            while (left := deadline - loop.time()) > 0:
                try:
                    comm, registered = await self._register(self.address, left)
                except Exception as e:
                    # Refused, timed out, a scheduler not serving yet or one that closed the comm
                    # at once: any may pass while a scheduler restarts, so each is tried again.
                    failure = e
                    logger.debug("Registering again at %s failed: %r", self.address, e)
                    await asyncio.sleep(min(RECONNECT_PAUSE, max(deadline - loop.time(), 0)))
                    continue
                if registered.get("warning"):
                    logger.warning("%s", registered["warning"])
                self._open_stream(comm)
                self._resume()
                return
            logger.error(
                "Could not connect again to the scheduler at %s within %.3g s (%r); closing the client",
                self.address,
                self.timeout,
                failure,
            )
            self._give_up()
        finally:
            if self._reconnecting is asyncio.current_task():
                self._reconnecting = None
            self._wake_reconnect_waiters()

    def _resume(self) -> None:
        """The stream runs again: send what the lost one had not, announce the held keys, drain the outbox."""
        self.reconnections += 1
        bs = self.stream
        assert bs is not None
        carried, self._carry = self._carry, []
        self._write(bs, carried)
        # Behind every message posted so far: the scheduler knows their graphs when it reads the keys.
        # A cancelled or failed future has nothing to hear: its reason (a lost key's LostDataError, say)
        # would become "unknown key" from a scheduler that forgot it.
        states = self.registry.states
        held = [
            k
            for k in self.registry.held_keys()
            if (fs := states.get(k)) is None or fs.status not in ("cancelled", "error")
        ]
        if held:
            self.outbox.post_rewant(held)
        for callback in self._on_reconnect:
            try:
                callback()
            except Exception:
                logger.exception("A reconnection callback failed")
        logger.info("Connected again to the scheduler at %s", self.address)
        self.drain()

    def _give_up(self) -> None:
        """No stream any more, and none to come: the link is closed, the futures cancelled."""
        self.status = "closed"
        self.lost = True
        self.outbox.stop_parts()
        self._carry = []
        self._stop_acks()
        waiters, self._parts_waiters = self._parts_waiters, []
        _wake(waiters)
        self._settle_barriers()
        # Results held by that scheduler's workers are out of reach too (as in dask.distributed).
        for fs in list(self.registry.states.values()):
            if not fs.done() or fs.status == "finished":
                fs.cancel("scheduler-connection-lost")

    def _wake_reconnect_waiters(self) -> None:
        waiters, self._reconnect_waiters = self._reconnect_waiters, []
        _wake(waiters)

    async def _reconnection_ended(self) -> bool:
        """Wait for the reconnection under way (if any) to end, either way; whether there was one."""
        waited = False
        while self._reconnecting is not None:
            waited = True
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._reconnect_waiters.append(waiter)
            await waiter
        return waited

    def handle_reports(self, msgs: Any) -> None:
        """Handle a batch of scheduler reports (one message or a list of them)."""
        if isinstance(msgs, dict):
            msgs = (msgs,)
        if not isinstance(msgs, (list, tuple)):
            logger.warning("Dropping a malformed batch from the scheduler: %s", type(msgs).__name__)
            return
        for msg in msgs:
            self.handle_report(msg)

    def handle_report(self, msg: Any) -> None:
        """Handle one scheduler report; a malformed or unknown message is logged and dropped."""
        op = msg.get("op") if isinstance(msg, dict) else None
        route = self._routes.get(op) if isinstance(op, str) else None
        if route is None:
            logger.warning("Dropping an unknown message from the scheduler: %r", op)
            return
        problem = route.check(msg) if self.check_replies else None
        if problem is not None:
            logger.warning("Dropping a malformed %r message from the scheduler: %s", op, problem)
            return
        try:
            route.func(msg)
        except Exception:
            logger.exception("Handling a %r message from the scheduler failed", op)

    def _on_key_in_memory(self, msg: m.KeyInMemory) -> None:
        fs = self.registry.get(msg["key"])
        if fs is not None:
            fs.finish(msg["workers"], msg.get("type"))

    def _on_task_erred(self, msg: m.ClientTaskErred) -> None:
        fs = self.registry.get(msg["key"])
        if fs is not None:
            fs.set_error(msg, msg["traceback"])

    def _on_cancelled_keys(self, msg: m.CancelledKeys) -> None:
        reason = msg.get("reason")
        for key in msg["keys"]:
            fs = self.registry.get(key)
            if fs is not None:
                fs.cancel(reason)

    def _on_lost_data(self, msg: m.LostData) -> None:
        # The key left memory; the scheduler recomputes it (key-in-memory
        # follows) or reports why it cannot (task-erred): wait again.
        fs = self.registry.get(msg["key"])
        if fs is not None and fs.status == "finished":
            fs.reset()

    def _on_stream_barrier(self, msg: m.StreamBarrierReached) -> None:
        ack = self._ack
        if ack is not None and msg["id"] == ack[0]:
            # Everything before the barrier is handled: no need to send it again.
            del self._unacked[: ack[1]]
            self._ack = None
            if self.stream is not None and not self.stream.closed():
                self._ask_for_ack(self.stream)
            return
        reached = self._barriers.pop(msg["id"], None)
        if reached is not None and not reached.done():
            reached.set_result(True)

    # -- the outgoing stream ------------------------------------------------------------
    def post(self, msg: StreamMessage) -> None:
        """Queue a stream message for the scheduler, in order with graphs and releases; from any thread."""
        self.outbox.post(msg)
        self.kick()

    def kick(self) -> None:
        """Have the loop send what the outbox holds (once, however often called); takes no lock."""
        if self._drain_scheduled:
            return
        self._drain_scheduled = True
        if self.status in ("closing", "closed"):
            return
        try:
            self._loop().call_soon_threadsafe(self.drain)
        except RuntimeError:  # the loop is closed
            pass

    def drain(self) -> None:
        """Send what the outbox holds, up to a graph whose later parts are not made yet (on the loop)."""
        # Reset first: whatever is posted from now on is either taken
        # below or has a drain of its own scheduled.
        self._drain_scheduled = False
        bs = self.stream
        if bs is None or self.status != "running":
            # Sent once connected (``connect`` drains); dropped when closed.
            if self.status in ("closing", "closed"):
                waiters, self._parts_waiters = self._parts_waiters, []
                _wake(waiters)
            return
        if bs.closed():
            return  # lost, and not noticed yet: what the outbox holds waits for the next stream
        self._write(bs, self.outbox.take(self.registry.settle, self.registry.still_held))
        if self._parts_waiters and not self.outbox.parts_pending:
            waiters, self._parts_waiters = self._parts_waiters, []
            _wake(waiters)

    def _write(self, bs: BatchedSend, msgs: Sequence[StreamMessage]) -> None:
        """Queue ``msgs`` on ``bs``; those it cannot take any more wait for the next stream."""
        for i, msg in enumerate(msgs):
            try:
                _send(bs, msg)
            except CommClosedError:
                if self.status not in ("closing", "closed"):
                    self._carry.extend(msgs[i:])
                return
            if msg["op"] in _KEPT_UNTIL_HANDLED:
                self._unacked.append(msg)
        self._ask_for_ack(bs)

    def _ask_for_ack(self, bs: BatchedSend, now: bool = False) -> None:
        """Send a barrier behind the unacknowledged messages, unless one is on its way already.

        Only once :data:`ACK_EVERY` wait, or :data:`ACK_AFTER` seconds after
        the first (``now``: the timer fired): a barrier per write took the
        write slot of the scheduler's next report, and doubled the round trip
        of a submit and its result.
        """
        if self._ack is not None or not self._unacked:
            return
        if not now and len(self._unacked) < ACK_EVERY:
            if self._ack_timer is None:
                self._ack_timer = asyncio.get_running_loop().call_later(ACK_AFTER, self._ack_due)
            return
        n = next(self._barrier_ids)
        try:
            bs.send_lazy(m.StreamBarrier(op="stream-barrier", client=self.client_id, id=n, lazy=True))
        except CommClosedError:
            return
        self._ack = (n, len(self._unacked))

    def _ack_due(self) -> None:
        self._ack_timer = None
        bs = self.stream
        if bs is not None and not bs.closed() and self.status == "running":
            self._ask_for_ack(bs, now=True)

    def _stop_acks(self) -> None:
        """Forget what waited for an acknowledgement (the stream is gone, or the link closes)."""
        self._unacked = []
        self._ack = None
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None

    def post_plan(self, plan: GraphPlan, before_rest: Callable[[], None] | None = None) -> None:
        """Queue the graph of ``plan``; from any thread, once its futures exist.

        The first part is serialised in the calling thread (an unpicklable
        function raises here) and queued; later parts are serialised by a
        background thread and sent as each is ready, so the call returns while
        the scheduler already works on the first part.  Nothing posted after
        the graph overtakes any of its parts.  Futures of parts that cannot be
        serialised hold the error.  ``before_rest`` runs after the first part
        is queued and before any later part can be (it makes their futures).
        """
        plan.live_specs = self.same_process
        first = plan.message(0)
        if len(plan) == 1:
            self.post(first)
            if before_rest is not None:
                before_rest()
            return
        parts = PendingParts()
        self.outbox.post_graph(first, parts)
        self.kick()
        if before_rest is not None:
            before_rest()
        start_background_parts(plan, parts, self.kick, self._fail_unsent)

    def _fail_unsent(self, keys: list[Key], exc: BaseException) -> None:
        error = error_message(exc)

        def fail() -> None:
            for k in keys:
                fs = self.registry.get(k)
                if fs is not None and not fs.done():
                    fs.set_error(error, error.get("traceback"))

        self.registry.call_soon(fail)

    async def _barrier(self) -> bool:
        """Wait until the scheduler has handled everything on the stream before a barrier sent now.

        False when no barrier could be sent (the stream is not running), or
        the stream was lost before it came back.
        """
        bs = self.stream
        if bs is None or self.status != "running":
            return False
        n = next(self._barrier_ids)
        reached: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._barriers[n] = reached
        try:
            bs.send(m.StreamBarrier(op="stream-barrier", client=self.client_id, id=n))
        except CommClosedError:
            self._barriers.pop(n, None)
            return False
        return await reached

    def _settle_barriers(self) -> None:
        """The stream is gone: every barrier on it is answered False (it may never have arrived)."""
        barriers, self._barriers = self._barriers, {}
        for reached in barriers.values():
            if not reached.done():
                reached.set_result(False)

    async def graphs_sent(self) -> None:
        """Return once the scheduler has every graph part queued so far.

        Requests go on their own connections; waiting here keeps one made
        after ``map`` returns (a cancel, say) from reaching the scheduler
        before the graph's later parts.  Costs nothing unless a graph was
        sent in parts since the last such wait.  Waits for a reconnection
        under way; returns without that guarantee when the link closes or is
        lost for good (the request after it then fails, as it must).
        """
        made = self.outbox.parts_posted
        if made == self._parts_confirmed:
            return
        while True:
            if self.outbox.parts_pending and self.status not in ("closing", "closed"):
                waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._parts_waiters.append(waiter)
                self.kick()
                await waiter
            # Every part is on the stream; a barrier behind them comes back once
            # the scheduler has handled them.
            if await self._barrier():
                self._parts_confirmed = max(self._parts_confirmed, made)
                return
            if not await self._reconnection_ended():
                return

    async def stream_handled(self) -> None:
        """Return once the scheduler has handled everything queued for the stream so far.

        A request (on its own connection) made right after ``submit`` could
        otherwise reach the scheduler before the graph: a cancel would find
        no task and the graph would then run anyway.  Waits for a
        reconnection under way, as :meth:`graphs_sent` does.
        """
        while True:
            await self.graphs_sent()
            self.drain()
            if await self._barrier():
                return
            if not await self._reconnection_ended():
                return

    # -- requests -----------------------------------------------------------------------
    async def request(self, msg: SchedulerRequest) -> Any:
        """Send a request to the scheduler (after every graph part queued so far) and return its reply."""
        return await self._send_request(msg)

    async def request_by_name(self, op: str, **fields: Any) -> Any:
        """:meth:`request` for an op named at run time (``client.scheduler.<op>(**fields)``).

        The scheduler checks the fields against the op's declaration, as for any request.
        """
        return await self._send_request(m.request(op, **fields))

    async def _send_request(self, msg: Mapping[str, Any]) -> Any:
        # A request made while the link connects again waits for it (bounded by the timeout, as the
        # reconnection is): in dask a request to the scheduler keeps trying to connect for the connect
        # timeout, so a call made while the scheduler restarts (or its stream dropped) succeeds once it is
        # back; and ordered after the graphs queued before it, it can only go once the stream runs again.
        # When no scheduler came back, it fails at once, naming the lost connection.
        assert self.address is not None
        waited = await self._reconnection_ended()
        if self.lost:
            raise CommClosedError(f"The client lost its connection to the scheduler at {self.address}")
        if waited and self.status in ("closing", "closed"):
            raise CommClosedError(f"The client closed while connecting again to the scheduler at {self.address}")
        await self.graphs_sent()
        return await self.pool.call(self.address, msg)

    async def checked_request(self, msg: SchedulerRequest, check: Check) -> Any:
        """:meth:`request`, the reply checked against its declaration (unless the scheduler is in process).

        Raises
        ------
        MessageError
            When the reply does not match.
        """
        reply = await self.request(msg)
        if self.check_replies:
            raise_if_malformed(check, reply, f"{msg['op']!r} from the scheduler")
        return reply
