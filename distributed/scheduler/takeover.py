"""A scheduler taking over from its journal: the workers say what they hold, then the journal is replayed.

A scheduler started on a journal that holds messages (its predecessor died
with work in hand) does, in order:

1. It listens, and waits (up to ``distributed.scheduler.recovery-timeout``)
   for the workers the journal lists to register again.  Each joins paused,
   so that nothing is sent to it yet, and what it holds is set aside.
2. Every key a worker holds becomes a task in memory on its holders, as
   scattered data does (:attr:`SchedulerState.held_before_takeover`).
3. The journal's messages are replayed, oldest first, through the same
   handlers as when they came: graphs, clients' wanting and releasing keys,
   scattered data, cancels, clients gone, tasks that erred or spent retries
   (and clients' retrying them), published datasets, variables, events,
   the leases of locks and semaphores held, the items put on queues and
   taken from them, scheduler plugins (and the
   worker plugins kept for workers that join later).  A graph naming a held key gives it
   its run_spec and dependencies; the rest of the graph waits or queues (no
   worker runs anything yet).
4. What nothing needs any more is released: tasks not wanted by a client and
   not waited on by a dependent, among them held keys no graph named and the
   inputs of results already held, so that no finished task whose result a
   live worker holds is computed again.
5. The workers are opened; queued work starts.  Clients the journal knew and
   that have not connected again get ``client-reconnect-grace`` to do so.

Clients that connect meanwhile are answered at once; what they send waits for
the end of the takeover (see ``SchedulerStreams.handle_register_client``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from distributed.core import Status
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler.journal import EXTENSION_OPS, Journal
from distributed.scheduler.records import TaskState, TaskStateName, WorkerState
from distributed.utils import wait_for, yield_after_io

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

logger = logging.getLogger(__name__)

__all__ = ["TAKEOVER_CLIENT", "Takeover"]

#: The stand-in client that wants what workers hold during a takeover.
TAKEOVER_CLIENT: Final = "takeover"


class Takeover:
    """One scheduler's taking over from its journal (see the module's docstring).

    Parameters
    ----------
    scheduler
        The scheduler taking over.
    journal
        Its journal, holding its predecessor's messages.
    timeout
        Seconds to wait for the journal's workers before going on without the missing ones.
    """

    def __init__(self, scheduler: Scheduler, journal: Journal, timeout: float) -> None:
        self.scheduler = scheduler
        self.journal = journal
        self.timeout = timeout
        #: The workers connected to the scheduler that died, by address.
        self.expected = journal.workers()
        #: What each worker that registered during the takeover holds, not looked at yet:
        #: address -> (keys, their sizes).
        self.holdings: dict[str, tuple[Sequence[Key], Mapping[Key, int]]] = {}
        #: The workers that registered during the takeover (paused until it ends).
        self.set_aside: list[str] = []
        #: Set once the takeover is over: clients' streams are read from then on.
        self.done = asyncio.Event()
        self._worker_back = asyncio.Event()
        #: Messages replayed, and tasks held by workers, for the log and the tests.
        self.replayed = 0
        self.held = 0

    @property
    def under_way(self) -> bool:
        """Whether workers registering now are set aside (paused, their keys held back) until the end."""
        return not self.done.is_set()

    def worker_registered(self, ws: WorkerState, keys: Sequence[Key], nbytes: Mapping[Key, int] | None) -> None:
        """A worker registered during the takeover: pause it and keep what it holds for later."""
        ws.status = Status.paused
        self.holdings[ws.address] = (list(keys), dict(nbytes or {}))
        self.set_aside.append(ws.address)
        self._worker_back.set()

    async def run(self) -> None:
        """Wait for the journal's workers, replay the journal, open the workers (see the module's docstring)."""
        s = self.scheduler
        start = time.monotonic()
        try:
            deadline = start + self.timeout
            while self.expected - set(s.workers) and (left := deadline - time.monotonic()) > 0:
                self._worker_back.clear()
                try:
                    await wait_for(self._worker_back.wait(), left)
                except TimeoutError:
                    break
            missing = self.expected - set(s.workers)
            if missing:
                logger.warning(
                    "Taking over: %d of the %d workers of the journal did not come back within %.1f s",
                    len(missing),
                    len(self.expected),
                    self.timeout,
                )
            self._hold_what_workers_have()
            await self._replay()
            self._release_what_is_not_needed()
            self._take_late_holdings()
            self._open_workers()
            self._give_absent_clients_grace()
            logger.info(
                "Took over from the journal in %.2f s: %d messages replayed, %d results kept on %d workers",
                time.monotonic() - start,
                self.replayed,
                self.held,
                len(self.set_aside),
            )
        finally:
            s.held_before_takeover.clear()
            self.done.set()

    def _hold_what_workers_have(self) -> None:
        """Every key the workers hold becomes a task in memory on its holders, with nothing known of it yet.

        As scattered data, wanted by the stand-in client :data:`TAKEOVER_CLIENT`
        until the replay is over, so that a key is not released before the graph
        that needs it is replayed.
        """
        s = self.scheduler
        who_has: dict[Key, list[str]] = defaultdict(list)
        sizes: dict[Key, int] = {}
        holdings, self.holdings = self.holdings, {}
        for address, (keys, nbytes) in holdings.items():
            if address not in s.workers:
                continue  # left again meanwhile
            for key in keys:
                who_has[key].append(address)
                sizes[key] = max(sizes.get(key, 0), int(nbytes.get(key, 0)))
        if not who_has:
            return
        msg = m.UpdateData(op="update-data", client=TAKEOVER_CLIENT, who_has=who_has, nbytes=sizes)
        s.send_all(s.update_data_state(msg, f"takeover-held-{time.time()}"))
        for key in who_has:
            ts = s.tasks.get(key)
            if ts is not None and ts.state == "memory" and not ts.has_run_spec:
                s.held_before_takeover.add(ts)
        self.held = len(s.held_before_takeover)

    async def _replay(self) -> None:
        """Apply the journal's messages, oldest first, letting the event loop turn between two."""
        s = self.scheduler
        stream = s.stream_handlers
        for op, msg in self.journal.messages():
            stimulus_id = f"takeover-{op}-{time.time()}"
            try:
                if op in stream:
                    route = stream[op]
                    problem = route.check(msg)
                    if problem is not None:
                        logger.error("Skipped a malformed %r message of the journal: %s", op, problem)
                        continue
                    route.func(msg)
                elif op == "update-data":
                    s.journaled_routes[op].func(None, msg)  # type: ignore[arg-type]  # no comm: a replay
                    # Held by workers that did not come back: lost, as they would have been before.
                    lost = [key for key in msg["who_has"] if key not in s.tasks]
                    if lost:
                        s.send_all(s.scattered_data_lost(msg["client"], lost, stimulus_id))
                elif op in EXTENSION_OPS:
                    s.extensions[EXTENSION_OPS[op]].replay(op, msg)
                elif op == "erred-before":
                    s.send_all(s.erred_from_journal(msg, stimulus_id))
                elif op == "retried-before":
                    ts = s.tasks.get(msg["key"])
                    if ts is not None:
                        ts.retries = int(msg["retries"])
                elif op == "register_worker_plugin":
                    s.requests.worker_plugins[msg["name"]] = msg["plugin"]
                elif op == "unregister_worker_plugin":
                    s.requests.worker_plugins.pop(msg["name"], None)
                elif op in s.journaled_routes:
                    result = s.journaled_routes[op].func(None, msg)  # type: ignore[arg-type]  # no comm: a replay
                    if inspect.isawaitable(result):
                        await result
                elif op == "remove-client":
                    s.send_all(s.remove_client_state(msg["client"], stimulus_id))
                else:
                    logger.error("Skipped a message of the journal of unknown operation %r", op)
                    continue
            except Exception:
                logger.exception("Replaying a %r message of the journal failed", op)
            self.replayed += 1
            await yield_after_io()

    def _release_what_is_not_needed(self) -> None:
        """Release tasks no client wants and no dependent waits for (held results and work alike)."""
        s = self.scheduler
        stimulus_id = f"takeover-release-{time.time()}"
        s.send_all(s.remove_client_state(TAKEOVER_CLIENT, stimulus_id))
        recs: dict[TaskState, TaskStateName] = {}
        for ts in s.tasks.values():
            if ts.state in ("memory", "waiting", "queued", "no-worker") and not ts.who_wants and not ts.waiters:
                recs[ts] = "released"
        if recs:
            s.send_all(s.transitions(recs, stimulus_id))

    def _take_late_holdings(self) -> None:
        """Workers that registered during the replay: what they hold counts where it is in memory, else goes."""
        s = self.scheduler
        holdings, self.holdings = self.holdings, {}
        for address, (keys, _) in holdings.items():
            s.send_all(s.add_keys(address, keys))

    def _open_workers(self) -> None:
        """Let the workers set aside take work."""
        s = self.scheduler
        stimulus_id = f"takeover-open-{time.time()}"
        for address in self.set_aside:
            ws = s.workers.get(address)
            if ws is not None and ws.status == Status.paused:
                s.send_all(s.reopen_worker_state(address, stimulus_id=stimulus_id))

    def _give_absent_clients_grace(self) -> None:
        """Clients the journal knew that have not connected again: released unless they do within the grace."""
        s = self.scheduler
        for client in list(s.clients):
            if "/graph-" in client or client in (m.FIRE_AND_FORGET, TAKEOVER_CLIENT) or client in s.client_comms:
                continue
            s.streams.client_left(client)
