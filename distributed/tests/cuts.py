"""Cutting a server's connection in the middle of a request: what a flaky network does, on demand."""

from __future__ import annotations

from typing import Any

from distributed.core import Route, Server


def cut_first(server: Server, op: str) -> list[int]:
    """Make ``server`` cut the connection of the first ``op`` request it gets; every request is counted.

    The requester sees a closed connection (an ``OSError``), as when a link
    drops mid-request; later requests are answered as usual.
    """
    calls: list[int] = []
    route = server.handlers[op]

    def flaky(comm: Any, msg: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            comm.abort()
            raise OSError(f"{op} cut by the test")
        return route.func(comm, msg)

    server.handlers[op] = Route(route.schema, flaky)
    return calls
