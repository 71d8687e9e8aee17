"""Progress bars of computations on a cluster: in a terminal, or as ipywidgets in a notebook.

A bar sends the keys it shows to the scheduler, which works out every task
they need that is not done yet and counts them as they finish (see
:mod:`distributed.diagnostics.progress`); the bar polls those counts at its
``interval`` and draws them.  Any client connected to the scheduler can show
the progress of any keys, whichever client submitted them.

:func:`progress` picks the bar: in a terminal a :class:`TextProgressBar`
(one bar) or :class:`MultiProgressBar` (one bar per task prefix), redrawn in
place, blocking until the computation ends; in a notebook a
:class:`ProgressWidget` or :class:`MultiProgressWidget`, returned to be shown
and updated in the background.  With an asynchronous client, ``await`` the
bar (or :func:`progress`'s result).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import logging
import shutil
import sys
from collections.abc import Generator, Iterable, Mapping
from timeit import default_timer
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, TextIO

from dask.base import is_dask_collection
from dask.utils import format_time, parse_timedelta

from distributed.client import Future, default_client, futures_of
from distributed.protocol import messages as m
from distributed.protocol.messages import Key, ProgressStatus
from distributed.protocol.schema import checker
from distributed.utils import is_kernel

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = [
    "MultiProgressBar",
    "MultiProgressWidget",
    "ProgressBar",
    "ProgressWidget",
    "TextProgressBar",
    "is_kernel",
    "progress",
]

logger = logging.getLogger(__name__)

_CHECK_STATE: Final = checker(m.ProgressState)

_FINAL: Final = ("finished", "error")


def _client_of(keys: list[Any], scheduler: Any) -> Client:
    """The client to ask the scheduler through: the futures', else the one ``scheduler`` names."""
    from distributed.client import Client

    for k in keys:
        if isinstance(k, Future):
            return k.client
    if isinstance(scheduler, Client):
        return scheduler
    client = default_client()
    if scheduler is not None and scheduler != client.scheduler_address:
        raise NotImplementedError(
            f"A progress bar's scheduler= must be the default client's scheduler ({client.scheduler_address}), "
            f"got {scheduler!r}: other schedulers are not supported yet"
        )
    return client


def _rate_text(done: int, elapsed: float, left: int) -> str:
    """`` | 12.3/s | ETA 4.5s``: the rate of the tasks done since the bar started, and the time left at it."""
    if done <= 0 or elapsed <= 0:
        return ""
    rate = done / elapsed
    text = f" | {rate:.1f}/s"
    if left:
        text += f" | ETA {_short_time(left / rate)}"
    return text


def _short_time(seconds: float) -> str:
    """``4.5s``, ``2m05s``, ``1h02m``: a duration in few characters."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


class ProgressBar:
    """The base of every bar: keeps the counts of the tasks ``keys`` need, polled from the scheduler.

    Subclasses draw: :meth:`_draw_bar` on each new state, :meth:`_draw_stop`
    once at the end.

    Parameters
    ----------
    keys
        Futures, persisted collections, or keys of the tasks to follow.
    scheduler
        The client, or its scheduler's address, when ``keys`` holds no future
        (default: the default client).
    interval
        How often to ask the scheduler for the counts.
    complete
        Count the tasks done before the bar started too (True), or only those
        still to do.

    Attributes
    ----------
    status : str or None
        None until the first answer, then ``pending`` (the scheduler does not
        know every key yet), ``running``, ``finished`` or ``error``.
    all, remaining : dict
        Tasks counted, and tasks not yet done, by group.
    exception : str or None
        The error's text when ``status == "error"``, about task ``erred_key``.
    """

    #: How the scheduler groups the tasks: by key prefix, or all in one group (None).
    group_by: ClassVar[Literal["prefix"] | None] = None

    def __init__(self, keys: Iterable[Any], scheduler: Any = None, interval: Any = "100ms", complete: bool = True):
        # Collections stand for the futures inside them (persisted ones hold futures).
        items = [f for k in keys for f in (futures_of(k) if is_dask_collection(k) else (k,))]
        self.client = _client_of(items, scheduler)
        self.keys: list[Key] = list(dict.fromkeys(k.key if isinstance(k, Future) else k for k in items))
        self.interval: float = parse_timedelta(interval, default="s")
        if self.interval <= 0:
            raise ValueError(f"A progress bar's interval must be positive, got {interval!r}")
        self.complete = complete
        self.status: ProgressStatus | None = None
        self.all: dict[str, int] = {}
        self.remaining: dict[str, int] = {}
        self.exception: str | None = None
        self.erred_key: Any = None
        self._start_time = default_timer()
        self._end_time: float | None = None
        #: Tasks not done when the first counts came: the rate counts only what finished since.
        self._left_at_start: int | None = None
        self._running: asyncio.Future[None] | concurrent.futures.Future[None] | None = None

    # -- state -------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        """Seconds since the bar started (until it ended, once it has)."""
        end = self._end_time if self._end_time is not None else default_timer()
        return end - self._start_time

    @property
    def total(self) -> int:
        """Tasks counted."""
        return sum(self.all.values())

    @property
    def left(self) -> int:
        """Tasks not yet done."""
        return sum(self.remaining.values())

    @property
    def done_since_start(self) -> int:
        """Tasks done since the bar's first counts."""
        return 0 if self._left_at_start is None else self._left_at_start - self.left

    def _update(self, state: m.ProgressState) -> None:
        self.status = state["status"]
        self.all = dict(state["all"])
        self.remaining = dict(state["remaining"])
        if self._left_at_start is None and self.status != "pending":
            self._left_at_start = self.left
        if self.status == "error":
            self.exception = state.get("exception")
            self.erred_key = state.get("erred_key")
        if self.status in _FINAL:
            self._end_time = default_timer()

    # -- running -----------------------------------------------------------------------
    async def listen(self) -> None:
        """Follow the computation until it ends, drawing as it goes (on the client's event loop)."""
        link = self.client.link
        watch = m.ProgressWatch(
            op="progress_watch", keys=self.keys, group_by=self.group_by, complete=self.complete, client=self.client.id
        )
        state: m.ProgressState = await link.checked_request(watch, _CHECK_STATE)
        watch_id = state["id"]
        try:
            while True:
                self._update(state)
                if self.status in _FINAL:
                    break
                self._draw_bar()
                await asyncio.sleep(self.interval)
                state = await link.checked_request(m.ProgressPoll(op="progress_poll", id=watch_id), _CHECK_STATE)
        finally:
            if self.status not in _FINAL and not link.lost:
                # Stopped early (cancelled, interrupted): the scheduler need not count any more.
                try:
                    await link.request(m.ProgressStop(op="progress_stop", id=watch_id))
                except Exception:
                    logger.debug("Could not end progress watch %s", watch_id, exc_info=True)
        self._draw_stop()

    def start(self) -> None:
        """Start following the computation in the background, on the client's event loop (once)."""
        if self._running is not None:
            return
        loop = self.client.event_loop
        if _running_loop() is loop:
            self._running = asyncio.ensure_future(self._listen_quietly())
        else:
            self._running = asyncio.run_coroutine_threadsafe(self._listen_quietly(), loop)

    async def _listen_quietly(self) -> None:
        try:
            await self.listen()
        except Exception:
            # A bar in the background has nobody to raise to; a closing client is no news.
            if self.client.status not in ("closing", "closed"):
                logger.exception("Progress bar failed")

    def _run(self) -> None:
        """Follow the computation: block until it ends, unless on the client's loop (then in the background)."""
        if self.client.asynchronous or _running_loop() is self.client.event_loop:
            self.start()
            return
        self._running = asyncio.run_coroutine_threadsafe(self.listen(), self.client.event_loop)
        try:
            self._running.result()
        except BaseException:
            # Interrupted (Ctrl-C): the watch ends as the listening does.
            self._running.cancel()
            raise

    def __await__(self) -> Generator[Any, None, None]:
        """Wait until the computation ends (starting the bar if it has not started)."""
        self.start()
        running = self._running
        assert running is not None
        if isinstance(running, concurrent.futures.Future):
            return asyncio.wrap_future(running).__await__()
        return running.__await__()

    # -- drawing -----------------------------------------------------------------------
    def _draw_bar(self) -> None:
        """Show the current state."""

    def _draw_stop(self) -> None:
        """Show the final state."""
        self._draw_bar()

    def _status_html(self, left: int) -> str:
        """The widgets' status line: state, elapsed time and rate, and the error when one stopped the bar."""
        rate = _rate_text(self.done_since_start, self.elapsed, left if self.status not in _FINAL else 0)
        text = (
            '<div style="padding: 0px 10px 5px 10px">'
            f"<b>{_status_word(self.status)}:</b> {format_time(self.elapsed)}{html.escape(rate)}</div>"
        )
        if self.status == "error":
            text += f"<div><b>{html.escape(repr(self.erred_key))}:</b> {html.escape(self.exception or '')}</div>"
        return text


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _bar_text(done: int, total: int, width: int) -> tuple[str, float]:
    """``[####      ]`` (``width`` characters inside the brackets) and the fraction done."""
    frac = done / total if total else 1.0
    n = int(width * frac)
    return f"[{'#' * n}{' ' * (width - n)}]", frac


class TextProgressBar(ProgressBar):
    """One bar in the terminal, redrawn in place on its line.

    ``[######              ] |  30% | 30/100 | 1.2s | 25.0/s | ETA 2.8s`` (done/total, elapsed,
    tasks done per second since the bar started, and the time left at that rate).

    Parameters
    ----------
    keys, scheduler, interval, complete
        As for :class:`ProgressBar`.
    width
        Characters of the bar itself.
    loop
        Only None: the bar runs on its client's event loop.
    start
        Follow the computation now: block until it ends, or, with an
        asynchronous client, start in the background (await the bar to
        wait).  With False, call :meth:`listen` or :meth:`start` later.
    stream
        Where to draw (default ``sys.stdout``).
    """

    def __init__(
        self,
        keys: Iterable[Any],
        scheduler: Any = None,
        interval: Any = "100ms",
        width: int = 40,
        loop: Any = None,
        complete: bool = True,
        start: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        if loop is not None:
            raise NotImplementedError("TextProgressBar(loop=...) is not supported: it runs on its client's loop")
        super().__init__(keys, scheduler, interval, complete)
        self.width = width
        self.stream = stream
        self._last_length = 0
        self._line_width: int | None = None
        if start:
            self._run()

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stdout
        try:
            stream.write(text)
            stream.flush()
        except ValueError:
            pass  # closed by now (interpreter shutting down)

    def _bar_width(self, others: int) -> int:
        """The bar's width on a line with ``others`` more characters: narrower when the terminal is."""
        if not self._isatty():
            return self.width
        room = shutil.get_terminal_size().columns - 1 - others - 2
        return max(min(self.width, room), 10)

    def _line(self) -> str:
        total, left = self.total, self.left
        frac = (total - left) / total if total else 1.0
        if self.status == "finished":
            what = f"{frac:4.0%} Completed"
        elif self.status == "error":
            what = f"{frac:4.0%} Error"
        else:
            what = f"{frac:4.0%}"
        rate = _rate_text(self.done_since_start, self.elapsed, left if self.status not in _FINAL else 0)
        if self._line_width is None and self.status is not None:
            # Chosen once, for the longest line this bar can draw, so that the bar does not jump about.
            longest = f" | 100% Completed | {total}/{total} | 00m00s | 999.9/s | ETA 00m00s"
            self._line_width = self._bar_width(len(longest))
        rest = f" | {what} | {total - left}/{total} | {_short_time(self.elapsed)}{rate}"
        return _bar_text(total - left, total, self._line_width or self.width)[0] + rest

    def _isatty(self) -> bool:
        stream = self.stream or sys.stdout
        try:
            return stream.isatty()
        except (AttributeError, ValueError):
            return False

    def _fit(self, line: str) -> str:
        """``line``, cut to the terminal's width: a wrapped line could not be redrawn in place."""
        if self._isatty():
            columns = shutil.get_terminal_size().columns
            if len(line) >= columns:
                return line[: max(columns - 1, 1)]
        return line

    def _in_place(self) -> str:
        line = self._fit(self._line())
        # Trailing spaces cover what a longer previous line left.
        padded = "\r" + line + " " * max(self._last_length - len(line), 0)
        self._last_length = len(line)
        return padded

    def _draw_bar(self) -> None:
        self._write(self._in_place())

    def _draw_stop(self) -> None:
        text = self._in_place() + "\n"
        if self.status == "error":
            text += f"Task {self.erred_key!r} erred: {self.exception}\n"
        self._write(text)


class MultiProgressBar(TextProgressBar):
    """One bar per task prefix in the terminal, under a line with the totals, rate and ETA.

    In a terminal the lines are redrawn in place (moving the cursor back up);
    elsewhere (a file, a pipe) only the final lines are written.

    Parameters
    ----------
    keys, scheduler, interval, complete, width, loop, start, stream
        As for :class:`TextProgressBar`.
    group_by
        Only ``"prefix"``: grouping by a function or by spans is not supported.
    func
        Only None (dask's older name for a grouping function).
    """

    group_by: ClassVar[Literal["prefix"] | None] = "prefix"

    def __init__(
        self,
        keys: Iterable[Any],
        scheduler: Any = None,
        *,
        func: Any = None,
        group_by: Any = "prefix",
        interval: Any = "100ms",
        width: int = 40,
        loop: Any = None,
        complete: bool = False,
        start: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        _check_group_by(type(self).__name__, group_by, func)
        self._drawn_lines = 0
        super().__init__(
            keys, scheduler, interval=interval, width=width, loop=loop, complete=complete, start=start, stream=stream
        )

    def _lines(self) -> list[str]:
        lines = [self._line()]
        names = _ordered(self.all)
        if names:
            name_width = min(max(len(n) for n in names), 30)
            most = max(self.all.values())
            longest = f"  100% | {most}/{most}"
            for name in names:
                total, left = self.all[name], self.remaining.get(name, 0)
                rest = f" {(total - left) / total if total else 1.0:4.0%} | {total - left}/{total}"
                bar = _bar_text(total - left, total, self._bar_width(name_width + len(longest)))[0]
                lines.append(f"{name[:name_width]:<{name_width}} {bar}{rest}")
        return lines

    def _draw_bar(self) -> None:
        if self._isatty():
            self._redraw(self._lines())

    def _redraw(self, lines: list[str]) -> None:
        # Back to the first line drawn last time, then each line cleared and written.
        up = f"\x1b[{self._drawn_lines}F" if self._drawn_lines else "\r"
        self._write(up + "".join(f"\x1b[2K{self._fit(line)}\n" for line in lines))
        self._drawn_lines = len(lines)

    def _draw_stop(self) -> None:
        lines = self._lines()
        if self.status == "error":
            lines.append(f"Task {self.erred_key!r} erred: {self.exception}")
        if self._isatty():
            self._redraw(lines)
        else:
            self._write("".join(line + "\n" for line in lines))


def _ordered(groups: Mapping[str, int]) -> list[str]:
    """Group names, the largest groups first."""
    return sorted(groups, key=lambda g: (-groups[g], g))


def _check_group_by(where: str, group_by: Any, func: Any) -> None:
    if func is not None:
        raise NotImplementedError(f"{where}(func=...) is not supported: tasks are grouped by key prefix")
    if group_by != "prefix":
        raise NotImplementedError(f"{where}(group_by={group_by!r}) is not supported: only 'prefix' is")


class ProgressWidget(ProgressBar):
    """One ipywidgets bar, for a notebook: the fraction of tasks done, counts and elapsed time.

    It starts following the computation when shown (or on :meth:`start`,
    :meth:`listen`, or when awaited) and updates in the background.

    Parameters
    ----------
    keys, scheduler, interval, complete
        As for :class:`ProgressBar`.
    loop
        Only None: the bar runs on its client's event loop.

    Attributes
    ----------
    bar : ipywidgets.FloatProgress
        From 0 to 1 (``max``), the fraction of tasks done.
    widget : ipywidgets.VBox
        What is shown.
    """

    def __init__(
        self,
        keys: Iterable[Any],
        scheduler: Any = None,
        interval: Any = "100ms",
        complete: bool = False,
        loop: Any = None,
    ) -> None:
        if loop is not None:
            raise NotImplementedError("ProgressWidget(loop=...) is not supported: it runs on its client's loop")
        from ipywidgets import HTML, FloatProgress, HBox, VBox

        super().__init__(keys, scheduler, interval, complete)
        self.elapsed_time = HTML("")
        self.bar = FloatProgress(min=0, max=1, description="")
        self.bar_text = HTML("")
        self.widget = VBox([self.elapsed_time, HBox([self.bar, self.bar_text])])

    def _draw_bar(self) -> None:
        total, left = self.total, self.left
        self.bar.value = (total - left) / total if total else 1.0
        self.bar_text.value = f'<div style="padding: 0px 10px 0px 10px;">{total - left} / {total}</div>'
        self.elapsed_time.value = self._status_html(left)
        if self.status == "error":
            self.bar.bar_style = "danger"
        elif self.status == "finished":
            self.bar.bar_style = "success"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self.start()
        return self.widget._repr_mimebundle_(**kwargs)


def _status_word(status: ProgressStatus | None) -> str:
    return {"finished": "Finished", "error": "Exception"}.get(status or "", "Computing")


class MultiProgressWidget(ProgressBar):
    """One ipywidgets bar per task prefix, for a notebook (largest groups first).

    Parameters
    ----------
    keys, scheduler, interval, complete
        As for :class:`ProgressBar`.
    minimum
        Only 0.
    func, group_by
        As for :class:`MultiProgressBar`.

    Attributes
    ----------
    bars : dict
        Group name -> its ``ipywidgets.FloatProgress`` (from 0 to 1).
    widget : ipywidgets.VBox
        What is shown.
    """

    group_by: ClassVar[Literal["prefix"] | None] = "prefix"

    def __init__(
        self,
        keys: Iterable[Any],
        scheduler: Any = None,
        minimum: float = 0,
        interval: Any = "100ms",
        func: Any = None,
        group_by: Any = "prefix",
        complete: bool = False,
    ) -> None:
        _check_group_by(type(self).__name__, group_by, func)
        if minimum:
            raise NotImplementedError(f"MultiProgressWidget(minimum={minimum!r}) is not supported: only 0 is")
        from ipywidgets import HTML, VBox

        super().__init__(keys, scheduler, interval, complete)
        self.elapsed_time = HTML("")
        self.widget = VBox([self.elapsed_time])
        self.bars: dict[str, Any] = {}
        self.bar_texts: dict[str, Any] = {}

    def _make_rows(self) -> None:
        from ipywidgets import HTML, FloatProgress, HBox, Layout

        rows = [self.elapsed_time]
        for name in _ordered(self.all):
            self.bars[name] = FloatProgress(min=0, max=1, description="", layout=Layout(width="50%"))
            self.bar_texts[name] = HTML("")
            label = HTML(f'<div style="padding: 0px 10px 0px 10px; text-align: right">{html.escape(name)}</div>')
            rows.append(HBox([label, self.bars[name], self.bar_texts[name]]))
        self.widget.children = rows

    def _draw_bar(self) -> None:
        if self.all and not self.bars:
            self._make_rows()
        for name, bar in self.bars.items():
            total, left = self.all.get(name, 0), self.remaining.get(name, 0)
            bar.value = (total - left) / total if total else 1.0
            self.bar_texts[name].value = f'<div style="padding: 0px 10px 0px 10px">{total - left} / {total}</div>'
            if self.status == "error":
                bar.bar_style = "danger"
            elif not left:
                bar.bar_style = "success"
        self.elapsed_time.value = self._status_html(self.left)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self.start()
        return self.widget._repr_mimebundle_(**kwargs)


def progress(
    *futures: Any,
    notebook: bool | None = None,
    multi: bool = True,
    complete: bool = True,
    group_by: Any = "prefix",
    **kwargs: Any,
) -> Any:
    """Show the progress of futures or persisted collections.

    Parameters
    ----------
    *futures
        Futures, or collections (or containers) holding futures.
    notebook
        Show a widget (True) or a terminal bar (False); by default a widget
        when running in a Jupyter kernel with ipywidgets installed.
    multi
        One bar per task prefix (True) or a single bar.
    complete
        Count the tasks done before the bar started too (True), or only
        those still to do: then prefixes all done already are not shown.
    group_by
        Only ``"prefix"``.
    **kwargs
        Passed to the bar (``interval``, ``width``, ...).

    Returns
    -------
    In a notebook, the widget (show it as a cell's last value).  In a
    terminal, None once the computation ended; with an asynchronous client,
    the bar, running in the background: ``await`` it to wait.

    Examples
    --------
    >>> x = client.persist(x)  # doctest: +SKIP
    >>> progress(x)  # doctest: +SKIP
    [########################################] | 100% Completed | 10/10 | 1.7s | 5.9/s
    """
    found = futures_of(futures)
    if not found:
        raise ValueError("progress() found no futures to follow: pass futures or persisted collections")
    if kwargs.get("func") is not None:
        raise NotImplementedError("progress(func=...) is not supported: tasks are grouped by key prefix")
    kwargs.pop("func", None)
    if multi and group_by != "prefix":
        raise NotImplementedError(f"progress(group_by={group_by!r}) is not supported: only 'prefix' is")
    if notebook is None:
        notebook = is_kernel() and _has_ipywidgets()
    bar: ProgressBar
    if notebook:
        if multi:
            return MultiProgressWidget(found, complete=complete, **kwargs)
        return ProgressWidget(found, complete=complete, **kwargs)
    if multi:
        bar = MultiProgressBar(found, complete=complete, **kwargs)
    else:
        bar = TextProgressBar(found, complete=complete, **kwargs)
    client = bar.client
    if client.asynchronous or _running_loop() is client.event_loop:
        return bar
    return None


def _has_ipywidgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True
