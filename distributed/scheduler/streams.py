"""The scheduler's I/O shell: registration, batched streams, and their handlers.

Workers and clients register over a request and then keep that comm as a
batched stream in both directions.  Everything here decodes a message, calls
one stimulus method of :class:`~distributed.scheduler.Scheduler` (which
changes state and returns an ``Effects``), and sends what it returned; no task
state changes here.  Keeping the shell apart is what lets tests drive the
state machine without sockets.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from distributed.batched import BatchedSend
from distributed.comm import Comm, CommClosedError
from distributed.config import get_interval
from distributed.core import Route, Status, StreamRoute, error_message
from distributed.gc_tending import LargeStateGC
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler.compaction import PresentTasks
from distributed.scheduler.graph import INGEST_SLICE
from distributed.scheduler.journal import JOURNALED_STREAM_OPS
from distributed.scheduler.rebalance import recent_to_old_time
from distributed.scheduler.records import ClientState, WorkerState
from distributed.utils import LoopTurns, call_after_io, yield_after_io
from distributed.versions import error_message as version_mismatch
from distributed.versions import get_versions

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["SchedulerStreams"]

#: Messages of a worker's long batch handled between two yields to the event loop: one or two
#: milliseconds of results, while the scheduler holds fewer than :data:`LARGE_STATE_TASKS` tasks.
_BATCH_SLICE = 100

#: :data:`_BATCH_SLICE` while the scheduler holds more tasks than :data:`LARGE_STATE_TASKS`.  With a
#: large state a task-finished takes 100 to 400 us: while a 1M-task map came in with two workers
#: running it, a slice of 100 held the loop some 10 ms, the graph took 45 to 48 s to come in (31 to 35
#: with 25: the client's steps get more of the loop), and round trips while the map then ran were 23 to
#: 32 ms at longest (14 with 25).  With a small state, 25 messages take some 0.3 ms, and a turn after
#: every 25 cost its results 3 to 6 % more CPU.
_LARGE_STATE_BATCH_SLICE = 25

#: Tasks held past which the scheduler's state counts as large for :data:`_LARGE_STATE_BATCH_SLICE`.
LARGE_STATE_TASKS = 100_000

#: Seconds of handling a worker's stream takes before its next messages wait for a later turn of the
#: event loop (see ``SchedulerStreams._worker_stream``).  One read of a busy worker's stream brings
#: many batches: handled in one go, each of two workers held the loop 10 to 25 ms a turn while a
#: large graph came in, and a request waited for both.
WORKER_TURN_BUDGET = 0.003

#: Keys of a client's ``client-releases-keys`` released between two chances for others to be served.
RELEASE_SLICE = 2000

#: Seconds a client's stream may hold the event loop with the messages of one read before it lets the
#: loop turn (see ``SchedulerStreams._client_batch``): a slice of a large graph takes 10 to 30 ms, a
#: small graph some microseconds, and a turn after each small graph made a chain of submits 10 to 20 %
#: slower.
STEP_BUDGET = 0.002

#: What a connected worker weighs in :class:`LargeStateGC`'s count, in tasks: its record, its
#: stream (comm, transport, protocol, writer, reader) and their coroutines are some seventy
#: tracked objects, a task's record and its sets about five.
WORKER_AS_TASKS = 15


def _batch_slice(s: Scheduler) -> int:
    """Messages of a worker's long batch to handle between two turns of the loop, for the state ``s`` holds now."""
    return _LARGE_STATE_BATCH_SLICE if len(s.tasks) > LARGE_STATE_TASKS else _BATCH_SLICE


class SchedulerStreams:
    """Registration of workers and clients, and the messages on their streams."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        #: The worker that sent the stream message being handled.
        self._current_worker: WorkerState | None = None
        self.gc = LargeStateGC()
        #: Workers that registered since the scheduler started (for :meth:`tend_gc`).
        self.workers_joined = 0
        #: The scheduler's own versions, compared with each client's as it joins.
        self.versions = get_versions()
        #: How long unmanaged memory must last to count as old (see ``WorkerState.memory``).
        self._recent_to_old = recent_to_old_time()
        #: Clients whose connection dropped, and the timer that releases what they wanted (see :meth:`client_left`).
        self._client_departures: dict[str, asyncio.TimerHandle] = {}

    def routes(self) -> dict[str, Route[Any]]:
        """Request routes for registration and state-changing requests."""
        return {
            "register-client": Route(m.RegisterClient, self.handle_register_client, takes_comm=True),
            "register-worker": Route(m.RegisterWorker, self.handle_register_worker, takes_comm=True),
            "register_worker_plugin": Route(
                m.RegisterWorkerPlugin, self.scheduler.requests.handle_register_worker_plugin
            ),
            "unregister_worker_plugin": Route(
                m.UnregisterWorkerPlugin, self.scheduler.requests.handle_unregister_worker_plugin
            ),
            "heartbeat_worker": Route(m.HeartbeatWorker, self.handle_heartbeat_worker),
            "unregister": Route(m.UnregisterWorker, self.handle_unregister),
            "update-data": Route(m.UpdateData, self.handle_update_data),
            "cancel-keys": Route(m.CancelKeys, self.handle_cancel_keys),
            "retry": Route(m.RetryKeys, self.handle_retry),
        }

    def stream_routes(self) -> dict[str, StreamRoute[Any]]:
        """Handlers of messages on workers' and clients' streams."""
        return {
            # from workers
            "task-finished": StreamRoute(m.TaskFinished, self._task_finished),
            "task-erred": StreamRoute(m.WorkerTaskErred, self._task_erred),
            "add-keys": StreamRoute(m.AddKeys, self._add_keys),
            "release-worker-data": StreamRoute(m.ReleaseWorkerData, self._release_worker_data),
            "missing-data": StreamRoute(m.MissingData, self._missing_data),
            "reschedule": StreamRoute(m.Reschedule, self._reschedule),
            "long-running": StreamRoute(m.LongRunning, self._long_running),
            "keep-alive": StreamRoute(m.KeepAlive, lambda msg: None),
            "heartbeat_worker": StreamRoute(m.HeartbeatWorker, self._heartbeat),
            "worker-status-change": StreamRoute(m.WorkerStatusChange, self._worker_status_change),
            # from clients
            "update-graph": StreamRoute(m.UpdateGraph, self._update_graph),
            "client-desires-keys": StreamRoute(m.ClientKeys, self._client_desires_keys),
            "client-releases-keys": StreamRoute(m.ClientKeys, self._client_releases_keys),
            "heartbeat-client": StreamRoute(m.ClientHeartbeat, lambda msg: None),
            "close-client": StreamRoute(m.CloseClient, lambda msg: None),
            "stream-barrier": StreamRoute(m.StreamBarrier, self._stream_barrier),
        }

    # -- workers ---------------------------------------------------------------
    async def handle_register_worker(self, comm: Comm, msg: m.RegisterWorker) -> None:
        """Add a worker, answer it, then serve its stream until it closes."""
        s = self.scheduler
        address = msg["address"]
        takeover = s.takeover if s.takeover is not None and s.takeover.under_way else None
        try:
            out = s.add_worker_state(
                address,
                msg["nthreads"],
                name=msg.get("name"),
                memory_limit=msg.get("memory_limit", 0),
                pid=msg.get("pid", 0),
                nanny=msg.get("nanny"),
                resources=msg.get("resources"),
                # During a takeover, what the worker holds waits for the journal's graphs (see takeover.py).
                keys=() if takeover is not None else msg.get("keys", ()),
                nbytes=msg.get("nbytes"),
                stimulus_id=f"register-worker-{time.time()}",
            )
        except Exception as e:
            # Refused: the worker hears why, and its comm is closed either way.
            logger.warning("Refused worker registration from %s: %s", comm.peer_address, e)
            try:
                await comm.write({"status": "error", "message": str(e), **error_message(e)})
            except Exception:
                pass
            comm.abort()
            return
        ws = s.workers[address]
        if takeover is not None:
            takeover.worker_registered(ws, msg.get("keys", ()), msg.get("nbytes"))
        if s.journal is not None:
            s.journal.worker_joined(address)
        ws.local_directory = msg.get("local_directory", "")
        ws.versions = dict(msg.get("versions") or {})
        ws.extra = dict(msg.get("extra") or {})
        try:
            await comm.write(
                {
                    "status": "OK",
                    "time": time.time(),
                    "heartbeat-interval": self._heartbeat_interval(),
                    # Plugins registered before this worker joined: it sets them up now.
                    "worker-plugins": dict(s.requests.worker_plugins),
                }
            )
        except CommClosedError:
            s.send_all(s.remove_worker_state(address, stimulus_id="register-failed"))
            return
        bs = BatchedSend(
            interval=stream_interval("distributed.worker.batched-send-interval"), name=f"scheduler->{address}"
        )
        bs.start(comm)
        s.stream_comms[address] = bs
        # This handler owns the stream: its writer ends when the worker's stream does,
        # whoever dropped it from stream_comms (remove_worker_state does).
        try:
            s.send_all(out)
            s.log_event(["all", address], {"action": "add-worker"})
            logger.info("Register worker %s", address)
            self.workers_joined += 1
            self.tend_gc()
            await self._worker_stream(comm, address)
        finally:
            if s.stream_comms.get(address) is bs:
                del s.stream_comms[address]
            await bs.close(timeout=1)

    def _heartbeat_interval(self) -> float:
        n = len(self.scheduler.workers)
        return 0.5 if n <= 10 else 1 if n < 50 else 2 if n < 200 else 5

    async def _worker_stream(self, comm: Comm, address: str) -> None:
        s = self.scheduler
        check = s.validate or not comm.same_process
        # Seconds handling this stream took since it last waited for a turn of the loop.
        spent = 0.0

        def handle(msgs: Any) -> bool:
            # Called as each batch arrives (Comm.read_each): with 10,000 workers each sending a message at a
            # time, a task woken and a future made per message, and the young collections of the garbage
            # they left, were a fifth of the scheduler's time.
            nonlocal spent
            ws = s.workers.get(address)
            if ws is None:
                return False
            ws.last_seen = time.time()
            count = len(msgs) if isinstance(msgs, (list, tuple)) else 1
            # The state's size is looked up only for a batch long enough to need it (a sum over shards).
            if count <= _LARGE_STATE_BATCH_SLICE or count <= _batch_slice(s):
                start = time.perf_counter()
                self._dispatch_from(ws, msgs, check)
                spent += time.perf_counter() - start
                if spent >= WORKER_TURN_BUDGET:
                    # The messages left of this read (and what comes meanwhile) wait until the loop has
                    # served the reads of its next turn, and the requests they brought.
                    spent = 0.0
                    comm.hold_messages()
                    call_after_io(comm.release_messages)
                return True
            # A long batch (a worker that finished thousands of tasks while we were busy) is handled in
            # slices, letting others in; this worker's next messages wait for its end.
            comm.hold_messages()
            s.spawn(self._dispatch_in_slices(comm, ws, msgs, check), name=f"slices-from-{address}")
            return True

        try:
            await comm.read_each(handle)
        except (CommClosedError, asyncio.CancelledError):
            pass
        except Exception:
            logger.exception("Error on the stream from worker %s", address)
        finally:
            if address in s.workers and s.status not in (Status.closing, Status.closed):
                logger.info("Remove worker %s (stream closed)", address)
                s.send_all(s.remove_worker_state(address, stimulus_id=f"worker-stream-closed-{time.time()}"))
                s.log_event(["all", address], {"action": "remove-worker"})
            if not comm.closed():
                comm.abort()

    async def _dispatch_in_slices(
        self, comm: Comm, ws: WorkerState, msgs: list[Any] | tuple[Any, ...], check: bool
    ) -> None:
        s = self.scheduler
        try:
            i = 0
            while i < len(msgs):
                if s.workers.get(ws.address) is not ws:
                    break
                size = _batch_slice(s)
                self._dispatch_from(ws, msgs[i : i + size], check)
                i += size
                await yield_after_io()
        except asyncio.CancelledError:
            comm.abort()
            raise
        except Exception:
            # As an error in any message of the stream: the worker is removed (its stream closes).
            logger.exception("Error on the stream from worker %s", ws.address)
            comm.abort()
        finally:
            comm.release_messages()

    def _dispatch_from(self, ws: WorkerState, msgs: Any, check: bool) -> None:
        self._current_worker = ws
        s = self.scheduler
        try:
            if isinstance(msgs, (list, tuple)) and len(msgs) > 1:
                with s.holding_sends():
                    s.dispatch_stream(msgs, ws.address, check)
            else:
                # One message (a heartbeat, one task-finished) has nothing to gather its sends with.
                s.dispatch_stream(msgs, ws.address, check)
        finally:
            self._current_worker = None

    def sender(self) -> str:
        """The address of the worker whose stream message is being handled (for extensions' stream handlers)."""
        return self._sender()

    def _sending_worker(self) -> WorkerState:
        ws = self._current_worker
        if ws is None:
            raise RuntimeError("Worker stream message outside a worker stream")
        return ws

    def _sender(self) -> str:
        return self._sending_worker().address

    def _task_finished(self, msg: m.TaskFinished) -> None:
        s = self.scheduler
        # The task keeps the type's name: one shared string, not one decoded per message (52 bytes a task).
        msg["type"] = sys.intern(msg["type"])
        held = s.held_out
        # By run, not time (the story has the time): formatting a float took half a microsecond a task.
        out = s.task_finished(self._sender(), msg, f"task-finished-{msg['run_id']}", held)
        if held is None:
            s.send_all(out)

    def _task_erred(self, msg: m.WorkerTaskErred) -> None:
        s = self.scheduler
        s.send_all(s.task_erred(self._sender(), msg, f"task-erred-{time.time()}"))

    def _add_keys(self, msg: m.AddKeys) -> None:
        s = self.scheduler
        s.send_all(s.add_keys(self._sender(), msg["keys"]))

    def _worker_status_change(self, msg: m.WorkerStatusChange) -> None:
        """A worker paused or resumed; one that is retiring stays so."""
        s = self.scheduler
        ws = s.workers.get(self._sender())
        if ws is None or ws.status not in (Status.running, Status.paused):
            return
        if msg["status"] == "paused":
            ws.status = Status.paused
        else:
            s.send_all(s.reopen_worker_state(ws.address, stimulus_id=f"worker-resumed-{time.time()}"))

    def _release_worker_data(self, msg: m.ReleaseWorkerData) -> None:
        s = self.scheduler
        s.send_all(s.release_worker_data(self._sender(), msg["keys"], f"release-worker-data-{time.time()}"))

    def _missing_data(self, msg: m.MissingData) -> None:
        s = self.scheduler
        s.send_all(s.missing_data(self._sender(), msg, f"missing-data-{time.time()}"))

    def _reschedule(self, msg: m.Reschedule) -> None:
        s = self.scheduler
        s.send_all(s.reschedule(self._sender(), msg, f"reschedule-{time.time()}"))

    def _long_running(self, msg: m.LongRunning) -> None:
        s = self.scheduler
        s.send_all(s.long_running(self._sender(), msg, f"long-running-{time.time()}"))

    def handle_heartbeat_worker(self, comm: Comm, msg: m.HeartbeatWorker) -> dict[str, Any]:
        """Note that a worker is alive, and tell it when to call again.

        A request, as dask's workers send it; this package's workers send their
        heartbeats on their stream instead (see :meth:`_heartbeat`).
        """
        ws = self.scheduler.workers.get(msg["address"])
        if ws is None:
            return {"status": "missing"}
        self._note_heartbeat(ws, msg)
        return {"status": "OK", "time": time.time(), "heartbeat-interval": self._heartbeat_interval()}

    def _heartbeat(self, msg: m.HeartbeatWorker) -> None:
        # On the worker's stream: no connection of its own, no reply.  A worker the scheduler no
        # longer knows hears it by its stream closing, as for any message it sends (_worker_stream).
        self._note_heartbeat(self._sending_worker(), msg)

    def _note_heartbeat(self, ws: WorkerState, msg: m.HeartbeatWorker) -> None:
        ws.last_seen = time.time()
        ws.metrics = dict(msg.get("metrics") or {})
        # Unmanaged memory as of this heartbeat (process and managed measured together).
        ws.unmanaged_history.add(time.monotonic(), ws.unmanaged_now(), self._recent_to_old)
        ws.executing_count = msg.get("executing", 0)
        for name, value in (msg.get("extensions") or {}).items():
            # A worker extension's heartbeat goes to the scheduler extension of the same name, as in dask.
            beat = getattr(self.scheduler.extensions.get(name), "heartbeat", None)
            if beat is not None:
                try:
                    beat(ws, value)
                except Exception:
                    logger.exception("Scheduler extension %r failed on a heartbeat of %s", name, ws.address)

    def handle_unregister(self, comm: Comm, msg: m.UnregisterWorker) -> str:
        """Remove a worker that is leaving."""
        s = self.scheduler
        s.send_all(s.remove_worker_state(msg["address"], stimulus_id=f"unregister-{time.time()}", safe=True))
        return "OK"

    # -- clients -------------------------------------------------------------------
    async def handle_register_client(self, comm: Comm, msg: m.RegisterClient) -> None:
        """Add a client, answer it, then serve its stream until it closes."""
        s = self.scheduler
        client = msg["client"]
        cs = s.clients.get(client)
        if cs is None:
            cs = s.clients[client] = ClientState(client)
        departure = self._client_departures.pop(client, None)
        if departure is not None:
            departure.cancel()  # back within its grace: it keeps what it wanted
        cs.versions = dict(msg.get("versions") or {})
        cs.last_seen = time.time()
        try:
            services = {"dashboard": s.http_server.port} if s.http_server is not None else {}
            reply = m.RegisterClientReply(
                status="OK", time=time.time(), address=s.address, id=s.id, services=services, identity=s.identity(0)
            )
            if cs.versions:
                workers = {a: ws.versions for a, ws in s.workers.items()}
                mismatch = version_mismatch(self.versions, workers, cs.versions)["warning"]
                if mismatch:
                    reply["warning"] = mismatch
            await comm.write(reply)
        except CommClosedError:
            return
        bs = BatchedSend(
            interval=stream_interval("distributed.client.batched-send-interval"), name=f"scheduler->{client}"
        )
        bs.start(comm)
        s.client_comms[client] = bs
        if s.plugins:
            s.call_plugins("add_client", s, client)
        check = s.validate or not comm.same_process
        closing = False
        try:
            if s.takeover is not None and s.takeover.under_way:
                # What it sends (its futures' keys, new graphs) waits for the journal's graphs.
                await s.takeover.done.wait()
            while not closing:
                msgs = await comm.read()
                cs.last_seen = time.time()
                if not isinstance(msgs, (list, tuple)):
                    msgs = (msgs,)
                closing = await self._client_batch(msgs, client, check)
        except (CommClosedError, asyncio.CancelledError):
            pass
        except Exception:
            logger.exception("Error on the stream from client %s", client)
        finally:
            if s.client_comms.get(client) is bs:
                del s.client_comms[client]
                if s.status not in (Status.closing, Status.closed):
                    if closing:
                        self.remove_client(client)
                    else:
                        self.client_left(client)
            await bs.close(timeout=1)

    def close(self) -> None:
        """Stop the timers of clients' graces (the scheduler closes)."""
        for timer in self._client_departures.values():
            timer.cancel()
        self._client_departures.clear()

    def client_left(self, client: str) -> None:
        """A client's connection dropped: release what it wanted unless it connects again within the grace.

        (``distributed.scheduler.client-reconnect-grace``; a client that says it
        closes is released at once.)
        """
        grace = self.scheduler.server_settings.client_reconnect_grace
        if grace <= 0:
            self.remove_client(client)
            return
        logger.info("Client %s disconnected; what it wants is kept %.0f s for it to connect again", client, grace)
        old = self._client_departures.pop(client, None)
        if old is not None:
            old.cancel()
        self._client_departures[client] = asyncio.get_running_loop().call_later(grace, self._client_gone, client)

    def _client_gone(self, client: str) -> None:
        self._client_departures.pop(client, None)
        s = self.scheduler
        if client not in s.client_comms and client in s.clients and s.status not in (Status.closing, Status.closed):
            logger.info("Client %s did not connect again within its grace; releasing what it wanted", client)
            self.remove_client(client)

    def remove_client(self, client: str) -> None:
        """Release everything ``client`` wanted, and drop its record (journaled)."""
        s = self.scheduler
        if s.journal is not None:
            s.journal.record("remove-client", {"client": client})
        s.send_all(s.remove_client_state(client, stimulus_id=f"remove-client-{time.time()}"))
        self.tend_journal()

    def tend_journal(self) -> None:
        """Keep the journal to what describes the present.

        With no task held, the journal's messages about tasks describe nothing:
        they are dropped.  With tasks held, the journal is compacted once it is due (see
        :meth:`~distributed.scheduler.journal.Journal.compact`), except during
        a takeover: the journal is still being read, and the tasks it describes
        are not all there yet.
        """
        s = self.scheduler
        journal = s.journal
        if journal is None:
            return
        if journal.has_task_messages and not s.tasks:
            journal.forget_task_messages()
        elif journal.due_for_compaction and (s.takeover is None or not s.takeover.under_way):
            start = time.monotonic()
            deleted = journal.compact(PresentTasks(s))
            logger.info(
                "Compacted the journal in %.3f s: %d messages deleted, %d kept",
                time.monotonic() - start,
                deleted,
                len(journal.rows),
            )

    async def _client_batch(self, msgs: list[Any] | tuple[Any, ...], client: str, check: bool) -> bool:
        """Handle the messages of one read from a client's stream; whether it asked to close.

        The ``free-keys`` its releases bring are held until the batch is
        handled, or a graph comes (see ``Scheduler.holding_frees``).
        """
        s = self.scheduler
        held: set[str] = set()
        turns = LoopTurns(STEP_BUDGET)
        journal = s.journal
        try:
            for item in msgs:
                op = item.get("op") if isinstance(item, dict) else None
                if op == "close-client":
                    return True
                seq = None
                if journal is not None and op in JOURNALED_STREAM_OPS:
                    seq = journal.record(op, item, applying=True)
                try:
                    if op == "update-graph":
                        s.send_held_frees(held)  # not kept waiting for the whole of a large graph
                        await self._handle_in_steps(op, item, client, check, self._update_graph_steps, turns)
                    elif op == "client-releases-keys":
                        # Let workers' and other clients' messages in between large releases, and within one.
                        await self._handle_in_steps(
                            op, item, client, check, lambda msg: self._release_steps(msg, held), turns
                        )
                    else:
                        with s.holding_frees(held):
                            s.dispatch_stream((item,), client, check)
                        await turns.maybe()
                finally:
                    if journal is not None and seq is not None:
                        journal.applied(seq)
            return False
        finally:
            s.send_held_frees(held)
            if journal is not None:
                self.tend_journal()

    async def _handle_in_steps(
        self,
        op: str,
        msg: Any,
        origin: str,
        check: bool,
        steps: Callable[[Any], Iterator[None]],
        turns: LoopTurns,
    ) -> None:
        """Handle a large message from a client's stream in ``steps``, letting the event loop turn between them.

        The client's later messages wait (they are read after this returns), so
        they see the whole of it; workers and other clients are served in between,
        once the work since the loop last turned took :data:`STEP_BUDGET` seconds
        (``turns``): a small graph (a ``submit``) costs no turn of its own.
        """
        route = self.scheduler.stream_handlers[op]
        items = msg.get("tasks") or msg.get("keys")
        if isinstance(items, (dict, list, tuple)) and len(items) > INGEST_SLICE:
            # Reading it took some milliseconds (2 to 8 for a graph's part of 1,000 tasks), not counted by
            # ``turns``: the read ended the wait that came before.
            await turns.now()
        problem = route.check(msg) if check else None
        if problem is not None:
            logger.warning("Dropping malformed %r message from %s: %s", op, origin, problem)
            return
        if check:
            await turns.maybe()  # checking a graph's part of 1,000 tasks takes some milliseconds
        try:
            for _ in steps(msg):
                await turns.maybe()
        except Exception:
            logger.exception("Stream handler %r failed on a message from %s", op, origin)

    def _release_steps(self, msg: m.ClientKeys, held: set[str]) -> Iterator[None]:
        """A ``client-releases-keys``, :data:`RELEASE_SLICE` keys a step, its ``free-keys`` held in ``held``.

        A client dropping a million futures sends some 150,000 keys a message:
        released in one go, each stopped the loop for 300 ms.
        """
        s = self.scheduler
        release = s.stream_handlers["client-releases-keys"].func
        keys = msg["keys"]
        for start in range(0, len(keys), RELEASE_SLICE):
            with s.holding_frees(held):
                release({**msg, "keys": keys[start : start + RELEASE_SLICE]})
            yield

    def _update_graph(self, msg: m.UpdateGraph) -> None:
        for _ in self._update_graph_steps(msg):
            pass

    def _update_graph_steps(self, msg: m.UpdateGraph) -> Iterator[None]:
        """Add the graph of ``msg`` slice by slice; yields after each (and sends what it brought)."""
        s = self.scheduler
        shuffles = msg.get("shuffles")
        if shuffles:
            ext = s.extensions.get("shuffle")
            if ext is None:
                logger.warning(
                    "A graph of client %s has P2P shuffles, but this scheduler has no shuffle extension", msg["client"]
                )
            else:
                ext.add_descriptions(shuffles)
        for out in s.update_graph_slices(
            msg["client"],
            dict(msg["tasks"]),
            msg["keys"],
            user_priority=msg.get("priority", 0),
            annotations=msg.get("annotations"),
            stimulus_id=msg.get("stimulus_id"),
            graph=msg.get("graph"),
            final=msg.get("final", True),
            code=msg.get("code"),
        ):
            s.send_all(out)
            self.tend_gc()
            yield

    def tend_gc(self) -> None:
        """Let :attr:`gc` freeze or thaw for the state held now: tasks, and workers counted as tasks.

        Thousands of workers are as many objects as a large graph (10,000 are
        some 700,000), and full collections that visit them all would take a
        third of a second each, several times a minute while work flows.
        """
        s = self.scheduler
        size = len(s.tasks) + WORKER_AS_TASKS * len(s.workers)
        made = s.tasks_forgotten + len(s.tasks) + WORKER_AS_TASKS * self.workers_joined
        self.gc.tend(size, made - size)

    def _client_desires_keys(self, msg: m.ClientKeys) -> None:
        s = self.scheduler
        s.send_all(s.client_desires_keys(msg["client"], msg["keys"], f"client-desires-keys-{time.time()}"))

    def _client_releases_keys(self, msg: m.ClientKeys) -> None:
        s = self.scheduler
        s.send_all(s.client_releases_keys(msg["client"], msg["keys"], f"client-releases-keys-{time.time()}"))
        self.tend_gc()

    def _stream_barrier(self, msg: m.StreamBarrier) -> None:
        # Everything the client sent before this is handled: say so.
        cbs = self.scheduler.client_comms.get(msg["client"])
        if cbs is not None:
            try:
                reached = m.StreamBarrierReached(op="stream-barrier", id=msg["id"])
                if msg.get("lazy"):
                    cbs.send_lazy(reached)
                else:
                    cbs.send(reached)
            except CommClosedError:
                pass

    def handle_update_data(self, comm: Comm, msg: m.UpdateData) -> str:
        """Record data a client scattered to workers."""
        s = self.scheduler
        s.send_all(s.update_data_state(msg, f"update-data-{time.time()}"))
        return "OK"

    def handle_cancel_keys(self, comm: Comm, msg: m.CancelKeys) -> str:
        """Cancel a client's keys (and what depends on them)."""
        s = self.scheduler
        s.send_all(s.cancel_keys(msg, f"cancel-{time.time()}"))
        self.tend_journal()
        return "OK"

    def handle_retry(self, comm: Comm, msg: m.RetryKeys) -> list[Key]:
        """Rerun erred keys; return the keys whose own failure is retried."""
        s = self.scheduler
        roots, out = s.retry(msg["keys"], f"retry-{time.time()}")
        s.send_all(out)
        return roots


def stream_interval(key: str) -> float:
    """The batching interval of a stream, from config."""
    return get_interval(key, 0.00025)
