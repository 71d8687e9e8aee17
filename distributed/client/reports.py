"""Context managers that record what the cluster did while a block ran.

:class:`get_task_stream` collects the task stream records of the block;
:class:`performance_report` writes a self-contained HTML report of it.  Both
work as ``with`` and ``async with``.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from distributed.client.defaults import default_client

if TYPE_CHECKING:
    from distributed.client.client import Client

__all__ = ["get_task_stream", "performance_report"]


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


class performance_report:
    """Write an HTML report of what the cluster did while the block ran.

    The page holds the task stream, compute time per task prefix, the
    transfers between workers, the workers' profile and the code of the
    block's caller.  It is self-contained: bokeh's JavaScript is inlined
    (unless ``mode`` says otherwise), so it opens offline.

    Parameters
    ----------
    filename
        Where to write the page (an fsspec URL with ``storage_options``).
    stacklevel
        Which caller's code to include (1: the one with the ``with``).
    mode
        bokeh resources: None or ``"inline"`` (the default: offline),
        ``"cdn"``, or another bokeh resources mode.
    storage_options
        Passed to ``fsspec.open`` to write ``filename``.

    Examples
    --------
    >>> with performance_report(filename="dask-report.html"):  # doctest: +SKIP
    ...     x.compute()
    """

    def __init__(
        self,
        filename: str = "dask-report.html",
        stacklevel: int = 1,
        mode: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        from distributed.dashboard.report import resources_for

        resources_for(mode)  # a wrong mode fails here, not after the work
        self.filename = filename
        self._stacklevel = stacklevel
        self.mode = mode
        self.storage_options = storage_options or {}
        self.start = 0.0
        self._code = ""

    async def __aenter__(self) -> performance_report:
        if not self._code:
            self._code = _caller_code(self._stacklevel)
        client = default_client()
        await client.get_task_stream(start=0, stop=0, asynchronous=True)  # start recording
        self.start = time.time()
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._write(default_client())

    def __enter__(self) -> performance_report:
        self._code = _caller_code(self._stacklevel)
        client = default_client()
        client.sync(self.__aenter__, asynchronous=False)
        return self

    def __exit__(self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        client = default_client()
        client.sync(self._write, client, asynchronous=False)

    async def _write(self, client: Client) -> None:
        from distributed.dashboard.report import report_html

        stop = time.time()
        records = await client.get_task_stream(start=self.start, asynchronous=True)
        state = await client.profile(start=self.start, asynchronous=True)
        info = await client.scheduler_info(asynchronous=True)
        assert isinstance(records, list) and isinstance(state, dict)
        page = report_html(records, state, start=self.start, stop=stop, code=self._code, cluster=info, mode=self.mode)
        _write_text(self.filename, page, self.storage_options)


def _caller_code(depth: int) -> str:
    """The source of the code ``depth`` frames above our caller (its function, or its whole module)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return ""
    try:
        if frame.f_code.co_name == "<module>":
            return inspect.getsource(inspect.getmodule(frame) or frame)
        return inspect.getsource(frame.f_code)
    except (OSError, TypeError):  # interactive input, or no source file
        return ""


def _write_text(filename: str, text: str, storage_options: Mapping[str, Any]) -> None:
    """Write ``text`` to a path, or to an fsspec URL with ``storage_options``."""
    if not storage_options and "://" not in filename:
        with open(filename, "w", encoding="utf-8") as f:
            f.write(text)
        return
    import fsspec  # type: ignore[import-untyped]  # fsspec ships no type information

    with fsspec.open(filename, mode="w", compression="infer", encoding="utf-8", **storage_options) as f:
        f.write(text)
