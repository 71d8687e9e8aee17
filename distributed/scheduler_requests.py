"""Requests about the cluster, and requests to run users' functions.

The scheduler's task state machine lives in :mod:`distributed.scheduler`; the
requests here read that state (who holds what, task states, stories), run a
function a user explicitly sent (on the scheduler, or on workers through it),
or manage workers and plugins.  Each is a route of the scheduler's server.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm, CommClosedError
from distributed.core import error_message
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.protocol.serialize import Serialize, unwrap
from distributed.scheduler_state import WorkerState

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["ClusterRequests"]


class ClusterRequests:
    """The scheduler's request handlers that are not task-state stimuli."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        #: Worker plugins by name, as registered (serialised; the scheduler never opens them).
        #: Each worker that joins sets them up (see the register-worker reply).
        self.worker_plugins: dict[str, m.Payload] = {}

    def handle_terminate(self, comm: Comm, msg: m.Empty) -> str:
        """Close the scheduler (its workers close when their streams end)."""
        asyncio.get_running_loop().call_soon(lambda: self.scheduler.spawn(self.scheduler.close(), name="terminate"))
        return "OK"

    def handle_identity(self, comm: Comm, msg: m.Empty) -> dict[str, Any]:
        return self.scheduler.identity()

    def handle_who_has(self, comm: Comm, msg: m.OptionalKeysRequest) -> dict[Key, list[str]]:
        keys = msg.get("keys")
        if keys is None:
            return {k: [ws.address for ws in ts.who_has] for k, ts in self.scheduler.tasks.items()}
        return {
            k: [ws.address for ws in self.scheduler.tasks[k].who_has] if k in self.scheduler.tasks else [] for k in keys
        }

    def select_workers(self, workers: Sequence[str] | None) -> list[WorkerState]:
        if workers is None:
            return list(self.scheduler.workers.values())
        result = []
        for w in workers:
            ws = self.scheduler.workers.get(w) or self.scheduler.worker_by_name(w)
            if ws is not None:
                result.append(ws)
        return result

    def handle_has_what(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, list[Key]]:
        return {ws.address: [ts.key for ts in ws.has_what] for ws in self.select_workers(msg.get("workers"))}

    def handle_nthreads(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, int]:
        return {ws.address: ws.nthreads for ws in self.select_workers(msg.get("workers"))}

    def handle_processing(self, comm: Comm, msg: m.WorkersRequest) -> dict[str, list[Key]]:
        return {ws.address: [ts.key for ts in ws.processing] for ws in self.select_workers(msg.get("workers"))}

    def handle_nbytes(self, comm: Comm, msg: m.OptionalKeysRequest) -> dict[Key, int]:
        keys = msg.get("keys")
        if keys is None:
            return {k: ts.nbytes for k, ts in self.scheduler.tasks.items() if ts.state == "memory"}
        return {k: self.scheduler.tasks[k].nbytes for k in keys if k in self.scheduler.tasks}

    def handle_task_states(self, comm: Comm, msg: m.OptionalKeysRequest) -> dict[Key, str]:
        keys = msg.get("keys")
        if keys is None:
            return {k: ts.state for k, ts in self.scheduler.tasks.items()}
        return {k: self.scheduler.tasks[k].state if k in self.scheduler.tasks else "forgotten" for k in keys}

    def handle_story(self, comm: Comm, msg: m.StoryRequest) -> list[tuple[Any, ...]]:
        return [tuple(t) for t in self.scheduler.story(*msg["keys"])]

    async def handle_run_function(self, comm: Comm, msg: m.RunFunction) -> Any:
        # A user explicitly asked to run this on the scheduler.
        func = unwrap(msg["function"])
        args = unwrap(msg.get("args")) or ()
        kwargs = unwrap(msg.get("kwargs")) or {}
        if _accepts(func, "dask_scheduler"):
            kwargs["dask_scheduler"] = self.scheduler
        result = func(*args, **kwargs)
        if inspect.isawaitable(result):
            if msg.get("wait", True):
                result = await result
            else:
                self.scheduler.spawn(_await(result))
                result = None
        return Serialize(result)

    async def handle_broadcast(self, comm: Comm, msg: m.RunFunction) -> dict[str, Any]:
        """Run a function on workers; the payload goes through unopened."""
        workers = msg.get("workers")
        targets = (
            [ws.address for ws in self.select_workers(workers)] if workers is not None else list(self.scheduler.workers)
        )
        request = m.RunFunction(op="run", function=msg["function"])
        for field in ("args", "kwargs", "wait", "nanny"):
            if field in msg:
                request[field] = msg[field]

        async def one(addr: str) -> tuple[str, Any]:
            try:
                return addr, {"status": "OK", "result": await self.scheduler.rpc.call(addr, request)}
            except Exception as e:
                return addr, error_message(e)

        results = await asyncio.gather(*(one(a) for a in targets))
        return dict(results)

    async def handle_retire_workers(self, comm: Comm, msg: m.RetireWorkers) -> dict[str, Any]:
        workers = msg.get("workers")
        if workers is None:
            n = msg.get("n") or 0
            targets = sorted(self.scheduler.workers.values(), key=lambda ws: len(ws.has_what))[:n]
        else:
            targets = self.select_workers(workers)
        retired: dict[str, Any] = {}
        for ws in targets:
            retired[ws.address] = ws.identity()
            bs = self.scheduler.stream_comms.get(ws.address)
            self.scheduler.send_all(
                self.scheduler.remove_worker_state(ws.address, stimulus_id=f"retire-{time.time()}", safe=True)
            )
            if bs is not None and msg.get("close_workers", True):
                try:
                    bs.send(m.CloseWorker(op="close-worker", reason="retired"))
                except CommClosedError:
                    pass
        return retired

    async def handle_restart(self, comm: Comm, msg: m.Restart) -> str:
        """Cancel every future of every client, then replace every worker process through its nanny."""
        s = self.scheduler
        timeout = float(msg.get("timeout") or 30)
        workers = list(s.workers.values())
        _need_nannies(workers)
        reason = "The scheduler restarted its workers (Client.restart)"
        stimulus_id = f"restart-{time.time()}"
        for cs in list(s.clients.values()):
            keys = [ts.key for ts in cs.wants_what]
            if keys:
                cancel = m.CancelKeys(op="cancel-keys", client=cs.client_key, keys=keys, force=True, reason=reason)
                s.send_all(s.cancel_keys(cancel, stimulus_id))
        if s.plugins:
            s.call_plugins("restart", s)
        await self._restart(workers, timeout, msg.get("wait_for_workers", True), reason)
        return "OK"

    async def handle_restart_workers(self, comm: Comm, msg: m.RestartWorkers) -> dict[str, str]:
        """Replace these workers' processes through their nannies; their tasks run elsewhere or again."""
        workers = self.select_workers(msg["workers"])
        if len(workers) < len(set(msg["workers"])):
            known = {ws.address for ws in workers} | {str(ws.name) for ws in workers}
            raise ValueError(f"No such workers: {[w for w in msg['workers'] if str(w) not in known]}")
        _need_nannies(workers)
        await self._restart(workers, float(msg.get("timeout") or 30), True, "Client.restart_workers")
        return {ws.address: "OK" for ws in workers}

    async def _restart(self, workers: list[WorkerState], timeout: float, wait: bool, reason: str) -> None:
        # Each old process gets part of the time to close cleanly before it is killed.
        request = m.NannyRestart(op="restart", timeout=min(timeout / 4, 2.0), reason=reason, wait=wait)
        calls = [self.scheduler.rpc.call(ws.nanny, request) for ws in workers if ws.nanny]
        try:
            await asyncio.wait_for(asyncio.gather(*calls), timeout)
        except TimeoutError:
            raise TimeoutError(f"{len(calls)} worker(s) did not all restart within {timeout} s") from None

    async def handle_wait_for_workers(self, comm: Comm, msg: m.WaitForWorkers) -> str:
        await self.scheduler.wait_for_workers(msg["n_workers"])
        return "OK"

    async def handle_register_plugin(self, comm: Comm, msg: m.RegisterPlugin) -> str:
        plugin = unwrap(msg["plugin"])
        await self.scheduler.add_plugin(plugin, name=msg["name"], idempotent=msg.get("idempotent", False))
        return "OK"

    def handle_unregister_plugin(self, comm: Comm, msg: m.UnregisterPlugin) -> str:
        self.scheduler.remove_plugin(msg["name"])
        return "OK"

    async def handle_register_worker_plugin(self, comm: Comm, msg: m.RegisterWorkerPlugin) -> dict[str, Any]:
        """Keep a worker plugin for workers that join later, and set it up on the current ones.

        Returns each current worker's reply (``{"status": "OK"}`` or the error its
        ``setup`` raised).  With ``idempotent``, a name already registered is left as it is.
        """
        name = msg["name"]
        if msg.get("idempotent", False) and name in self.worker_plugins:
            return {}
        self.worker_plugins[name] = msg["plugin"]
        return await self._on_workers(m.PluginAdd(op="plugin-add", plugin=msg["plugin"], name=name))

    async def handle_unregister_worker_plugin(self, comm: Comm, msg: m.UnregisterWorkerPlugin) -> dict[str, Any]:
        """Forget a worker plugin and tear it down on the current workers."""
        name = msg["name"]
        if self.worker_plugins.pop(name, None) is None:
            raise ValueError(f"No worker plugin named {name!r}")
        return await self._on_workers(m.PluginRemove(op="plugin-remove", name=name))

    async def _on_workers(self, request: m.PluginAdd | m.PluginRemove) -> dict[str, Any]:
        async def one(addr: str) -> tuple[str, Any]:
            try:
                await self.scheduler.rpc.call(addr, request)
                return addr, {"status": "OK"}
            except Exception as e:
                return addr, error_message(e)

        return dict(await asyncio.gather(*(one(a) for a in list(self.scheduler.workers))))


def _need_nannies(workers: Sequence[WorkerState]) -> None:
    """Refuse to restart workers without a nanny: nothing would start them again."""
    bare = [ws.address for ws in workers if not ws.nanny]
    if bare:
        raise ValueError(f"Restarting workers requires a nanny; these workers have none: {bare}")


def _accepts(func: Any, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


async def _await(aw: Any) -> None:
    await aw
