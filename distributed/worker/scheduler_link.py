"""A worker's link to its scheduler: registering, the scheduler's stream, losing it, the heartbeat.

:class:`SchedulerLink` is a part of :class:`~distributed.worker.Worker` (a base
class of it, as :class:`~distributed.worker.transfers.PeerTransfers` and
:class:`~distributed.worker.running.TaskRunning` are).  It owns the worker's
one connection to the scheduler: :meth:`~SchedulerLink.register_with_scheduler`
connects, registers with the keys held and serves the scheduler's stream, on
which :meth:`~SchedulerLink.heartbeat` reports.  When that stream ends without
the worker having been asked to close, the scheduler died, was cut off, or
dropped this worker: the worker forgets its tasks but keeps its results
(``Worker.forget_tasks``), and the link registers again with whatever
scheduler comes back at the same address, for ``death_timeout`` or
``distributed.worker.reconnect-timeout``; past that the worker closes.

Invariants:

* :attr:`~SchedulerLink.batched_stream` is the stream of the registration in
  force, or None before the first and between a loss and the next: nothing
  is sent to a lost scheduler, and a heartbeat whose stream ended while its
  metrics were gathered is dropped.
* Only the end of the stream in force is a loss (a stream ended by closing, or
  replaced meanwhile, ends quietly), so one loss starts one reconnection.
* :attr:`~SchedulerLink.registered` turns true at the first accepted
  registration and stays so (a rejoining worker was registered before).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine, MutableMapping
from typing import TYPE_CHECKING, Any

from distributed.batched import BatchedSend
from distributed.comm import Comm, CommClosedError, connect_until
from distributed.config import get_interval
from distributed.core import Status
from distributed.liveness import Voucher
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import unwrap
from distributed.versions import get_versions
from distributed.worker import reporting

if TYPE_CHECKING:
    from distributed.comm.core import ConnectionArgs
    from distributed.core import ConnectionPool
    from distributed.diagnostics.plugin import WorkerPlugin
    from distributed.worker.settings import WorkerSettings
    from distributed.worker.state_machine import WorkerStateMachine

__all__ = ["FIRST_CONNECT_TIMEOUT", "REREGISTER_PAUSE", "SchedulerLink"]

logger = logging.getLogger("distributed.worker")

#: Seconds of the first try to reach the scheduler (a worker's or a nanny's) before
#: "Waiting to connect" is logged; the next tries take the rest of the connect timeout.
FIRST_CONNECT_TIMEOUT = 1.0
#: Seconds between two tries to register again with a scheduler that was lost (each try
#: itself retries connecting every 0.1 s until the reconnect deadline).
REREGISTER_PAUSE = 0.2


class _RegistrationRefused(ValueError):
    """The scheduler answered ``register-worker`` with an error (a name or address in use...)."""


class SchedulerLink:
    """The worker's connection to its scheduler; the :class:`~distributed.worker.Worker` provides the rest."""

    # The link's own state, as it is until the first registration (class defaults: a part has no __init__).
    #: The stream to the scheduler of the registration in force (None before it, and after a loss).
    batched_stream: BatchedSend | None = None
    #: The scheduler accepted this worker (it may hand it data from then on, even while plugins set up).
    registered: bool = False
    # Without a nanny, this worker's part in its process's liveness link (see distributed.liveness).
    _voucher: Voucher | None = None

    # Set by the worker and its server.
    scheduler_addr: str
    connection_args: ConnectionArgs
    rpc: ConnectionPool
    settings: WorkerSettings
    #: Seconds to keep trying to reach the scheduler (None: the settings' timeouts).
    death_timeout: float | None
    validate: bool
    status: Status
    nthreads: int
    name: Any
    memory_limit: int
    resources: dict[str, float]
    nanny: str | None
    data: MutableMapping[Key, Any]
    local_directory: str
    startup_information: dict[str, Callable[[Any], Any]]
    custom_metrics: dict[str, Callable[[Any], Any]]
    extensions: dict[str, Any]
    plugins: dict[str, WorkerPlugin]
    state: WorkerStateMachine | None

    @property
    def address(self) -> str:
        """The worker's address (defined by the server)."""
        raise NotImplementedError

    @property
    def service_ports(self) -> dict[str, int]:
        """Ports of what the worker serves besides its comms (defined by the worker)."""
        raise NotImplementedError

    @property
    def closing_started(self) -> bool:
        """Whether the worker closes, or was asked to (defined by the worker)."""
        raise NotImplementedError

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the server owns (defined by the server)."""
        raise NotImplementedError

    def dispatch_stream(self, msgs: Any, origin: str = "", check: bool = True) -> None:
        """Run the stream handlers for a batch of messages (defined by the server)."""
        raise NotImplementedError

    async def add_plugin(self, plugin: WorkerPlugin, name: str | None = None) -> None:
        """Attach a plugin and run its ``setup`` (defined by the worker)."""
        raise NotImplementedError

    async def close(self, *, reason: str) -> None:
        """Close the worker (defined by the worker)."""
        raise NotImplementedError

    def get_metrics(self) -> m.WorkerMetrics:
        """The worker's own figures for the heartbeat (defined by the worker)."""
        raise NotImplementedError

    def held_nbytes(self) -> dict[Key, int]:
        """The size of each result held (defined by the worker)."""
        raise NotImplementedError

    def forget_tasks(self) -> None:
        """Keep the results held and forget every other task (defined by the worker)."""
        raise NotImplementedError

    async def cancel_coroutines(self) -> None:
        """Cancel the worker's fetches and coroutine executions, and await them (defined by the worker)."""
        raise NotImplementedError

    # -- registering ------------------------------------------------------------------
    async def register_with_scheduler(self, timeout: float | None = None, rejoining: bool = False) -> None:
        """Connect to the scheduler (for up to ``timeout`` seconds), register, and serve its stream.

        With ``rejoining`` (after losing the scheduler), the worker plugins it
        already has are kept rather than set up again: a scheduler that takes
        over from its journal lists the ones this worker runs already.

        Raises
        ------
        OSError
            When no connection could be made in time.
        CommClosedError
            When the connection broke during the registration.
        ValueError
            When the scheduler refused the registration.
        """
        if timeout is None:
            timeout = self.death_timeout or self.settings.connect_timeout
        comm = await connect_until(
            self.scheduler_addr,
            time.monotonic() + timeout,
            "worker->scheduler",
            FIRST_CONNECT_TIMEOUT,
            lambda: logger.info("Waiting to connect to the scheduler at %s", self.scheduler_addr),
            **self.connection_args,
        )
        try:
            await comm.write(
                m.RegisterWorker(
                    op="register-worker",
                    address=self.address,
                    nthreads=self.nthreads,
                    name=self.name,
                    memory_limit=self.memory_limit,
                    pid=os.getpid(),
                    resources=self.resources,
                    nanny=self.nanny,
                    keys=list(self.data),
                    nbytes=self.held_nbytes(),
                    local_directory=self.local_directory,
                    versions=get_versions(),
                    # The scheduler shows these in its identity of the worker, where dask shows its services.
                    extra={
                        **await reporting.call_each(self, self.startup_information, "startup information"),
                        **({"services": self.service_ports} if self.service_ports else {}),
                    },
                )
            )
            response = await comm.read()
        except BaseException:
            comm.abort()  # half a registration: the next try starts on a new connection
            raise
        if not isinstance(response, dict) or response.get("status") != "OK":
            comm.abort()
            text = response.get("message") or response.get("text") if isinstance(response, dict) else response
            raise _RegistrationRefused(f"Scheduler refused registration: {text}")
        self.registered = True
        if self.nanny is None:
            # Under a nanny, the nanny vouches for this worker (see distributed.liveness).
            if self._voucher is None:
                self._voucher = Voucher(self.scheduler_addr, self.connection_args)
            self._voucher.vouch([self.address])
        # Plugins registered on the scheduler before we joined; set up before any task arrives.
        for name, payload in dict(response.get("worker-plugins") or {}).items():
            if rejoining and name in self.plugins:
                continue
            try:
                await self.add_plugin(unwrap(payload), name=name)
            except Exception:
                logger.exception("Worker plugin %s failed to set up on %s", name, self.address)
        self.batched_stream = BatchedSend(
            interval=get_interval("distributed.worker.batched-send-interval", 0.00025),
            name=f"{self.address}->scheduler",
        )
        self.batched_stream.start(comm)
        if self.status == Status.paused:
            # Paused before joining: the scheduler takes a new worker to be running.
            self.batched_stream.send(m.WorkerStatusChange(op="worker-status-change", status="paused"))
        self.spawn(self._read_scheduler_stream(comm), name="scheduler-stream")

    async def close_scheduler_link(self) -> None:
        """Close the stream to the scheduler and stop vouching for this worker (as the worker closes)."""
        if self.batched_stream is not None:
            await self.batched_stream.close(timeout=1)
        if self._voucher is not None:
            await self._voucher.close()

    # -- the scheduler's stream, and its loss -------------------------------------------
    async def _read_scheduler_stream(self, comm: Comm) -> None:
        check = self.validate or not comm.same_process
        try:
            while True:
                msgs = await comm.read()
                self.dispatch_stream(msgs, "scheduler", check)
        except (CommClosedError, asyncio.CancelledError):
            pass
        except Exception:
            logger.exception("Error reading from the scheduler")
        if self.closing_started or comm is not getattr(self.batched_stream, "comm", None):
            return
        # Not asked to close (close-worker comes first): the scheduler died or was cut off, or
        # dropped this worker (worker-ttl).  Whatever scheduler comes back at this address (restarted,
        # or taking over from its journal) gets this worker back with its results: under a nanny
        # too, whose new worker process would start empty.
        timeout = self.death_timeout if self.death_timeout is not None else self.settings.reconnect_timeout
        # No message goes to the lost scheduler, and none of the old tasks' reaches the next one.
        stream, self.batched_stream = self.batched_stream, None
        self.forget_tasks()
        logger.warning(
            "Lost the scheduler at %s; worker %s keeps its %d results and tries to register again for %.0f s",
            self.scheduler_addr,
            self.address,
            len(self.data),
            timeout,
        )
        self.spawn(self._reconnect(stream, timeout), name="reconnect-to-scheduler")

    async def _reconnect(self, stream: BatchedSend | None, timeout: float) -> None:
        """Register again with the scheduler at the same address, for up to ``timeout`` seconds, then close.

        What ``forget_tasks`` cancelled is awaited first.  Each try connects
        (every 0.1 s) until the deadline; a broken or refused registration (the
        scheduler may not have noticed yet that the old stream ended) is tried
        again after :data:`REREGISTER_PAUSE`.
        """
        deadline = time.monotonic() + timeout
        if stream is not None:
            await stream.close(timeout=1)
        self.rpc.remove(self.scheduler_addr)  # pooled connections to the lost scheduler
        await self.cancel_coroutines()
        failure: BaseException | None = None
        while not self.closing_started:
            try:
                await self.register_with_scheduler(max(deadline - time.monotonic(), 0.1), rejoining=True)
            except (OSError, CommClosedError, _RegistrationRefused) as e:
                if isinstance(e, _RegistrationRefused) and str(e) != str(failure):
                    logger.warning("Worker %s: %s; trying again", self.address, e)
                failure = e
                if time.monotonic() >= deadline:
                    break
                await asyncio.sleep(REREGISTER_PAUSE)
                continue
            except Exception:
                # A bug, not a scheduler away: a worker left running unregistered would serve no one.
                logger.exception("Worker %s could not register again with the scheduler; closing", self.address)
                failure = None
                break
            logger.info(
                "Worker %s registered again with the scheduler at %s, holding %d keys",
                self.address,
                self.scheduler_addr,
                len(self.data),
            )
            return
        if self.closing_started:
            return
        if failure is not None:
            logger.error("No scheduler at %s within %.0f s (%s); closing", self.scheduler_addr, timeout, failure)
        # Closing its nanny too, as a worker that gives up does (the nanny's new worker would wait alike).
        self.spawn(self.close(reason="scheduler-lost"), name="close-after-scheduler-loss")

    # -- the heartbeat ----------------------------------------------------------------
    async def heartbeat(self) -> None:
        """Tell the scheduler a few metrics, on our stream to it.

        On the stream, not as a request of its own: a scheduler with thousands
        of workers reads one message among the stream's others, and holds one
        connection per worker, not two.  A scheduler that no longer knows this
        worker closes the stream on reading it (a loss, see the module's docstring).
        """
        state = self.state
        stream = self.batched_stream
        if state is None or stream is None or stream.closed():
            return
        metrics: dict[str, Any] = dict(self.get_metrics())
        if self.custom_metrics:
            for name, value in (await reporting.call_each(self, self.custom_metrics, "metric")).items():
                metrics.setdefault(name, value)  # the worker's own metrics win a clash, as in dask
        if stream is not self.batched_stream or stream.closed():
            return  # the stream ended meanwhile
        stream.send(
            m.HeartbeatWorker(
                op="heartbeat_worker",
                address=self.address,
                now=time.time(),
                metrics=metrics,
                executing=len(state.executing),
                extensions=reporting.extension_heartbeats(self.extensions),
            )
        )
