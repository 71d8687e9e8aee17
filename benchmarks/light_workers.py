"""A process holding thousands of light workers: ``python -m benchmarks.light_workers ADDRESS COUNT [PREFIX]``.

A real :class:`distributed.Worker` costs a few megabytes and a share of its
process's event loop for its monitors, its state machine and its threads:
250 to a process is as far as they go, and 10,000 of them do not fit on two
cores.  A :class:`LightWorker` keeps only what the scheduler sees of a
worker, over real TCP connections and the real protocol:

- it listens on a port of its own (its address), where it answers
  ``get_data`` and ``identity`` requests;
- it registers on a connection of its own to the scheduler (``register-worker``)
  and keeps that connection as its stream, as a worker does;
- it sends a heartbeat on the stream every ``heartbeat_interval``;
- it answers ``compute-task`` with ``task-finished`` (one thread: one task
  at a time, each taking ``task_s`` seconds; the task's function is not
  run, and its result is ``None``), ``free-keys`` by dropping the keys,
  ``steal-request`` with the task's state, ``close-worker`` by leaving;
- the process's workers share one liveness link, as workers packed in one
  process do (:class:`distributed.liveness.Voucher`).

So the scheduler's side is exactly what it is with real workers; only the
workers' own work is left out.  The workers start a batch at a time; the
process runs until it is terminated (SIGTERM), then closes them.  This
speaks this package's protocol, so it runs against this package only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
import time
from typing import Any

from distributed.batched import BatchedSend
from distributed.comm import Comm, CommClosedError, connect, listen
from distributed.liveness import Voucher
from distributed.protocol import Serialize
from distributed.protocol import messages as m
from distributed.system import raise_open_file_limit

#: Workers started at once: enough to register quickly, few enough not to time out the handshakes.
BATCH = 100

#: The size reported for every result (each is ``None``).
RESULT_NBYTES = 16


class LightWorker:
    """One worker as the scheduler sees it, and nothing more (see the module's docstring)."""

    def __init__(self, scheduler: str, name: str, heartbeat_interval: float = 1.0, task_s: float = 0.0) -> None:
        self.scheduler = scheduler
        self.name = name
        self.heartbeat_interval = heartbeat_interval
        self.task_s = task_s
        self.address = ""
        #: Keys of the results held (each ``None``, of :data:`RESULT_NBYTES`).
        self.data: set[Any] = set()
        #: Tasks received and not yet finished, in order: key -> run id.
        self.ready: collections.OrderedDict[Any, int] = collections.OrderedDict()
        self.stream: BatchedSend | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: Any = None
        self._closed = False

    async def start(self) -> None:
        """Listen, register, and start the stream's reader, the heartbeat and the task runner."""
        self._listener = listen("tcp://127.0.0.1:0", self._serve)
        await self._listener.start()
        self.address = self._listener.contact_address
        comm = await connect(self.scheduler, timeout=60, name="light-worker->scheduler")
        await comm.write(
            m.RegisterWorker(
                op="register-worker",
                address=self.address,
                nthreads=1,
                name=self.name,
                memory_limit=0,
                pid=os.getpid(),
                keys=[],
                nbytes={},
            )
        )
        reply = await comm.read()
        if not isinstance(reply, dict) or reply.get("status") != "OK":
            comm.abort()
            raise RuntimeError(f"registration of {self.name} refused: {reply!r}")
        self.stream = BatchedSend(interval=0.00025, name=f"{self.address}->scheduler")
        self.stream.start(comm)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._read(comm)),
            loop.create_task(self._heartbeats()),
            loop.create_task(self._run_tasks()),
        ]

    async def _read(self, comm: Comm) -> None:
        with contextlib.suppress(CommClosedError, asyncio.CancelledError):
            while True:
                msgs = await comm.read()
                for msg in msgs if isinstance(msgs, (list, tuple)) else [msgs]:
                    self._handle(msg)
        if not self._closed:
            asyncio.get_running_loop().create_task(self.close())

    def _handle(self, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "compute-task":
            self.ready[msg["key"]] = msg["run_id"]
            self._wake.set()
        elif op == "free-keys":
            for key in msg["keys"]:
                self.data.discard(key)
                self.ready.pop(key, None)
        elif op == "steal-request":
            key = msg["key"]
            state = "ready" if self.ready.pop(key, None) is not None else "memory" if key in self.data else None
            self._send(m.StealResponse(op="steal-response", key=key, state=state, stimulus_id=msg["stimulus_id"]))
        elif op == "close-worker":
            asyncio.get_running_loop().create_task(self.close())

    def _send(self, msg: Any) -> None:
        if self.stream is not None and not self.stream.closed():
            self.stream.send(msg)

    async def _run_tasks(self) -> None:
        """One thread: the ready tasks one after the other, each ``task_s`` long."""
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self.ready:
                    key, run_id = self.ready.popitem(last=False)
                    start = time.time()
                    if self.task_s > 0:
                        await asyncio.sleep(self.task_s)
                    self.data.add(key)
                    self._send(
                        m.TaskFinished(
                            op="task-finished",
                            key=key,
                            run_id=run_id,
                            nbytes=RESULT_NBYTES,
                            type="NoneType",
                            start=start,
                            stop=time.time(),
                        )
                    )

    async def _heartbeats(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await asyncio.sleep(self.heartbeat_interval)
                self._send(
                    m.HeartbeatWorker(
                        op="heartbeat_worker",
                        address=self.address,
                        now=time.time(),
                        executing=len(self.ready),
                    )
                )

    async def _serve(self, comm: Comm) -> None:
        """Requests to this worker: ``get_data`` (the results held, each ``None``) and ``identity``."""
        with contextlib.suppress(CommClosedError):
            while True:
                msg = await comm.read()
                op = msg.get("op") if isinstance(msg, dict) else None
                if op == "get_data":
                    keys = [k for k in msg["keys"] if k in self.data]
                    result: Any = m.GetDataReply(
                        status="OK", data={k: Serialize(None) for k in keys}, nbytes=dict.fromkeys(keys, RESULT_NBYTES)
                    )
                elif op == "identity":
                    result = {"type": "LightWorker", "id": self.name, "address": self.address}
                else:
                    await comm.write({"status": "error", "exception": None, "text": f"unknown operation {op!r}"})
                    continue
                if msg.get("reply", True) is not False:
                    await comm.write({"status": "OK", "result": result})

    async def close(self) -> None:
        """Leave: stop the tasks, close the stream and the listener."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        if self.stream is not None:
            with contextlib.suppress(Exception):
                await self.stream.close(timeout=5)
        if self._listener is not None:
            self._listener.stop()


async def run(address: str, count: int, prefix: str, heartbeat_interval: float, task_s: float) -> None:
    """Start ``count`` light workers for ``address``; close them on SIGTERM."""
    raise_open_file_limit()  # each worker holds a listening socket and a stream
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    workers: list[LightWorker] = []
    voucher = Voucher(address, {})
    for first in range(0, count, BATCH):
        batch = [
            LightWorker(address, f"{prefix}-{i}", heartbeat_interval, task_s)
            for i in range(first, min(first + BATCH, count))
        ]
        await asyncio.gather(*(w.start() for w in batch))
        workers.extend(batch)
        voucher.vouch([w.address for w in workers])
    print(f"started {len(workers)}", flush=True)
    await stop.wait()
    await voucher.close()
    await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)


def main(argv: list[str]) -> None:
    address, count = argv[0], int(argv[1])
    prefix = argv[2] if len(argv) > 2 else "light"
    heartbeat_interval = float(argv[3]) if len(argv) > 3 else 1.0
    task_s = float(argv[4]) if len(argv) > 4 else 0.0
    asyncio.run(run(address, count, prefix, heartbeat_interval, task_s))


if __name__ == "__main__":
    main(sys.argv[1:])
