"""Context managers that record what the cluster did while a block ran.

:class:`get_task_stream` collects the task stream records of the block;
:class:`performance_report` writes a self-contained HTML report of it.  Both
work as ``with`` and ``async with``.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from distributed.client.defaults import default_client

if TYPE_CHECKING:
    from distributed.client.client import Client

__all__ = ["get_task_stream"]


class get_task_stream:
    """Collect the task stream of the tasks that run inside the block.

    Parameters
    ----------
    client
        The client to ask (the default client when None).
    plot
        ``True``: also build a bokeh figure (``.figure``); ``"save"``: also
        save it in ``filename``.
    filename
        Where ``plot="save"`` writes the figure.

    Attributes
    ----------
    data
        The records (see ``Client.get_task_stream``), filled when the block ends.
    figure
        The figure, with ``plot``.

    Examples
    --------
    >>> with get_task_stream() as ts:  # doctest: +SKIP
    ...     x.compute()
    >>> ts.data  # doctest: +SKIP
    [{'key': ..., 'worker': ..., 'startstops': [...]}, ...]
    """

    def __init__(self, client: Client | None = None, plot: bool | str = False, filename: str = "task-stream.html"):
        self.data: list[dict[str, Any]] = []
        self.figure: Any = None
        self._plot = plot
        self._filename = filename
        self.client = default_client(client)
        self.start = 0.0
        if not self.client.asynchronous:
            # Start recording now: the scheduler records only once asked.
            self.client.get_task_stream(start=0, stop=0, asynchronous=False)

    def __enter__(self) -> get_task_stream:
        self.start = time.time()
        return self

    def __exit__(self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        result = self.client.get_task_stream(
            start=self.start, plot=self._plot, filename=self._filename, asynchronous=False
        )
        self._keep(result)

    async def __aenter__(self) -> get_task_stream:
        await self.client.get_task_stream(start=0, stop=0, asynchronous=True)
        self.start = time.time()
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        result = await self.client.get_task_stream(
            start=self.start, plot=self._plot, filename=self._filename, asynchronous=True
        )
        self._keep(result)

    def _keep(self, result: Any) -> None:
        if self._plot:
            records, self.figure = result
        else:
            records = result
        self.data.extend(records)
