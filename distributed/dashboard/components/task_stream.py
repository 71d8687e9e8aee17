"""The task stream figure: one bar per computation or transfer, one row per worker thread.

:func:`task_stream_figure` draws a list of task stream records (see
:mod:`distributed.diagnostics.task_stream`) once, for a report or
``Client.get_task_stream(plot=True)``; :class:`TaskStream` keeps a figure and
its data source so that a live page can redraw it with newer records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# bokeh imports numpy's masked arrays when it first sends an array (200 ms on a busy machine): here, with the
# dashboard's components, rather than in the first update of a live task stream, where it would stall the loop.
import numpy.ma  # noqa: F401
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from distributed.diagnostics.task_stream import rectangles

__all__ = ["TaskStream", "task_stream_data", "task_stream_figure"]

#: Columns of the figure's data source.
COLUMNS = ("x", "start", "duration", "worker", "lane", "y", "key", "name", "action", "color", "alpha", "source")


def task_stream_data(records: Iterable[Mapping[str, Any]], start_boundary: float | None = None) -> dict[str, list[Any]]:
    """Column data for the figure: :func:`~distributed.diagnostics.task_stream.rectangles` plus bar centres.

    Times are milliseconds since ``start_boundary`` (default: the earliest
    start among the records).
    """
    recs = [dict(r) for r in records]
    if start_boundary is None:
        starts = [ss["start"] for r in recs for ss in r.get("startstops", ())]
        start_boundary = min(starts) if starts else 0.0
    data = rectangles(recs, start_boundary=start_boundary)
    data["x"] = [s + d / 2 for s, d in zip(data["start"], data["duration"], strict=True)]
    return data


class TaskStream:
    """A task stream figure and its data source.

    Parameters
    ----------
    height, width, sizing_mode
        Passed to the bokeh figure.
    title
        The figure's title.
    columns
        The data source's columns: by default all of :data:`COLUMNS`; a live
        figure keeps only those it draws and shows on hover (``x``, ``y``,
        ``duration``, ``color``, ``alpha``, ``key``, ``action``, ``worker``,
        ``source``), as each column costs every update.
    """

    def __init__(
        self,
        height: int = 400,
        width: int = 800,
        sizing_mode: str = "stretch_width",
        title: str = "Task Stream",
        columns: Sequence[str] = COLUMNS,
    ) -> None:
        self.columns = tuple(columns)
        self.source = ColumnDataSource(data={c: [] for c in self.columns})
        fig = figure(
            title=title,
            height=height,
            width=width,
            sizing_mode=sizing_mode,  # type: ignore[arg-type]  # bokeh declares a Literal of mode names
            x_axis_label="time (ms)",
            y_axis_label="worker thread",
            tools="xpan,xwheel_zoom,box_zoom,reset,save",
            name="task_stream",
        )
        fig.rect(
            source=self.source,
            x="x",
            y="y",
            width="duration",
            height=0.8,
            fill_color="color",
            fill_alpha="alpha",
            line_color=None,
        )
        fig.yaxis.visible = False
        fig.ygrid.visible = False
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("key", "@key"),
                    ("action", "@action"),
                    ("worker", "@worker"),
                    ("from", "@source"),
                    ("duration (ms)", "@duration{0.000}"),
                ]
            )
        )
        self.root = fig

    def update(self, records: Sequence[Mapping[str, Any]], start_boundary: float | None = None) -> None:
        """Show ``records`` (replacing what was shown)."""
        data = task_stream_data(records, start_boundary)
        self.source.data = {k: data[k] for k in self.columns}

    def stream(self, bars: dict[str, list[Any]], rollover: int) -> None:
        """Append ``bars`` (columns as :func:`~distributed.diagnostics.task_stream.rectangles` makes them).

        Only the new bars go to the browser, which keeps the last ``rollover``.
        Columns go as numpy arrays: bokeh sends numbers as binary buffers and
        strings as one list, instead of encoding each value on its own (about
        twenty times less CPU per bar).

        Once the figure is in a document (shown by a browser), the bars are
        sent as a stream event and not added to the source's own columns:
        ``ColumnDataSource.stream`` would copy every column whole to append to
        it (numpy arrays), a cost that grows with the window (100,000 bars on
        ``/tasks``) at every update, and would keep the window in the server's
        memory for every open page, where nothing reads it again (a new page
        gets a new document). Before that, they become the source's data, the
        first state the page's document sends.
        """
        import numpy as np
        from bokeh.document.events import ColumnsStreamedEvent

        new: dict[str, Any] = {k: np.asarray(bars[k]) for k in self.columns if k != "x" and k in bars}
        if "x" in self.columns:
            new["x"] = np.asarray(bars["start"]) + new["duration"] / 2
        doc = self.source.document
        if doc is None:
            self.source.stream(new, rollover=rollover)
            return
        doc.callbacks.trigger_on_change(ColumnsStreamedEvent(doc, self.source, "data", new, rollover))


def task_stream_figure(
    records: Sequence[Mapping[str, Any]], start_boundary: float | None = None, **kwargs: Any
) -> figure:
    """A bokeh figure of ``records``, times from ``start_boundary`` (``kwargs`` go to :class:`TaskStream`)."""
    ts = TaskStream(**kwargs)
    ts.update(records, start_boundary)
    return ts.root
