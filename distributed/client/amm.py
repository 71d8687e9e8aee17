"""``Client.amm``: start, stop and run the scheduler's active memory manager from a client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed.protocol import messages as m

if TYPE_CHECKING:
    from distributed.client.base import ClientBase

__all__ = ["AMMClientProxy"]


class AMMClientProxy:
    """The scheduler's active memory manager (``scheduler.extensions["amm"]``), seen from a client.

    Each method returns its result on a synchronous client and an awaitable
    on an asynchronous one.  A scheduler made with ``extensions=`` that leave
    the manager out answers each with an error saying it has no such request.
    """

    def __init__(self, client: ClientBase[Any]) -> None:
        self._client = client

    def __repr__(self) -> str:
        return f"<AMMClientProxy of {self._client!r}>"

    def _call(self, op: str) -> Any:
        async def request() -> Any:
            return await self._client.link.request(m.Empty(op=op))

        return self._client.sync(request)

    def start(self) -> Any:
        """Run the manager every ``interval`` from now on."""
        return self._call("amm_start")

    def stop(self) -> Any:
        """Stop the periodic runs."""
        return self._call("amm_stop")

    def run_once(self) -> Any:
        """Run every policy once now and enact what they suggest (whether or not the manager runs)."""
        return self._call("amm_run_once")

    def running(self) -> Any:
        """Whether the manager runs periodically."""
        return self._call("amm_running")
