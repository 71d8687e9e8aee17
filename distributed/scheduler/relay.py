"""Data moved through the scheduler for clients that do not connect to workers (``direct_to_workers=False``).

A client that cannot reach the workers' addresses (they sit behind a
firewall or NAT the scheduler is inside of) asks the scheduler to pass its
``get_data`` and ``update_data`` requests on.  The scheduler forwards the
payloads as they came, never opening them, and only to its own workers: a
relay is not a way to reach any address.  A worker that cannot be reached
is a reply of its own (``unreachable``), so the client fails over exactly as
it does when it cannot reach the worker itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from distributed.comm import CommClosedError
from distributed.protocol import messages as m
from distributed.protocol.schema import checker
from distributed.utils_comm import retry

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["RELAY_CONNECT_TIMEOUT", "relay_to_worker"]

logger = logging.getLogger("distributed.scheduler")

#: Seconds to wait for a connection to the worker: one that does not accept at once is likely gone.
RELAY_CONNECT_TIMEOUT: Final = 1.0

_CHECK_GET_DATA: Final = checker(m.GetDataReply)
_CHECK_UPDATE_DATA: Final = checker(m.UpdateDataReply)


async def relay_to_worker(
    scheduler: Scheduler, worker: str, request: m.GetData | m.WorkerUpdateData, timeout: float = RELAY_CONNECT_TIMEOUT
) -> m.RelayReply:
    """Send ``request`` to ``worker`` (one of the scheduler's) and wrap its reply, checked.

    Raises
    ------
    Exception
        What the worker answered with an error (e.g. a value that does not serialise).
    """
    if worker not in scheduler.workers:
        return m.RelayReply(status="unreachable", error=f"{worker} is not a worker of this scheduler")

    async def send() -> Any:
        async with scheduler.rpc.borrowed(worker, timeout=timeout) as comm:
            return await comm.request(request, unpickle_errors=scheduler.rpc.unpickle_errors)

    try:
        reply = await retry(send, *scheduler.comm_retry, name=f"{request['op']} to {worker}")
    except (OSError, CommClosedError, TimeoutError) as e:
        logger.info("Relaying %r to %s failed: %r", request["op"], worker, e)
        return m.RelayReply(status="unreachable", error=f"{worker} could not be reached from the scheduler: {e!r}")
    check = _CHECK_GET_DATA if request["op"] == "get_data" else _CHECK_UPDATE_DATA
    problem = check(reply)
    if problem is not None:
        raise ValueError(f"Malformed {request['op']!r} reply from {worker}: {problem}")
    return m.RelayReply(status="OK", reply=reply)
