"""What the live dashboard components share: state colours, and data sources that send only what changed.

A component keeps its figure's data in a bokeh ``ColumnDataSource``; every
assignment or patch of it goes to each browser showing the page. So that an
idle page costs nothing and a busy one costs O(changes), components never
assign a source directly: :func:`set_if_changed` compares first, and patches
only the changed cells when the rows are the same.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool, Model, NumeralTickFormatter, Range1d
from bokeh.plotting import figure

__all__ = [
    "STATE_COLORS",
    "CategoryBars",
    "Data",
    "bar_figure",
    "bytes_bar_axes",
    "layer_positions",
    "set_if_changed",
    "worker_label",
]

#: Colours of task states, shared by the progress bars, the totals and the graphs.
STATE_COLORS: dict[str, str] = {
    "memory": "#1f77b4",
    "released": "#aec7e8",
    "forgotten": "#aec7e8",
    "processing": "#2ca02c",
    "waiting": "#c7c7c7",
    "queued": "#c7c7c7",
    "no-worker": "#ff7f0e",
    "erred": "#000000",
}

#: A data source's columns.
Data = dict[str, list[Any]]


def set_if_changed(source: ColumnDataSource, data: Data, index: str | None = None) -> bool:
    """Update ``source`` to ``data`` when it differs; True when it did (and so went to the browser).

    With ``index`` (a column naming the rows: worker address, prefix) and
    the same rows as before, only the changed cells are sent (a patch), so
    a tick sends O(changed values) however many rows there are; otherwise
    the data is replaced.
    """
    old = source.data
    same_columns = set(old) == set(data)
    if same_columns and index is not None and list(old[index]) == data[index]:
        patches: dict[str, list[tuple[int, Any]]] = {}
        for k, values in data.items():
            changed = [(i, v) for i, (o, v) in enumerate(zip(old[k], values, strict=True)) if o != v]
            if changed:
                patches[k] = changed
        if not patches:
            return False
        source.patch(patches)
        return True
    if same_columns and all(list(old[k]) == v for k, v in data.items()):
        return False
    source.data = data
    return True


def worker_label(address: str, name: Any) -> str:
    """How a worker is named on an axis: its name, or its address when it has none of its own."""
    return str(name) if name is not None and str(name) != address else address


def bar_figure(
    title: Any,
    name: str,
    y_range: FactorRange,
    height: int,
    x_range: Range1d | DataRange1d | None = None,
    **kwargs: Any,
) -> figure:
    """A figure for horizontal bars, one per factor of ``y_range``: no toolbar, no tools, x from 0 unless ``x_range``.

    ``title`` is a string or a bokeh ``Title``; ``kwargs`` go to ``figure``
    (``sizing_mode``, ``width``).
    """
    return figure(
        title=title,
        name=name,
        y_range=y_range,
        x_range=DataRange1d(start=0) if x_range is None else x_range,
        height=height,
        toolbar_location=None,
        tools="",
        **kwargs,
    )


def bytes_bar_axes(fig: figure, tooltips: Sequence[tuple[str, str]]) -> None:
    """Finish a bar of bytes along x (a memory bar): bytes on the x axis, no y axis, and ``tooltips`` on hover."""
    fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
    fig.yaxis.visible = False
    fig.add_tools(HoverTool(tooltips=list(tooltips)))


class CategoryBars:
    """Horizontal bars, one per category (a worker, a task prefix): a data source, a factor y axis and its figure.

    Subclasses draw the bars on :attr:`figure` and, at each tick, pass their
    new data to :meth:`refresh`, which sends only the changed cells and
    re-lists the axis' categories when those changed.

    Parameters
    ----------
    data
        The first data of the source.
    category
        The column naming each bar on the y axis; ``"-"`` stands alone while
        there is none, as bokeh draws no axis without factors.
    title, name, height, x_range, **kwargs
        As for :func:`bar_figure`.
    index
        The column keying the rows for patches (by default ``category``):
        the address when two workers could share a name.
    """

    def __init__(
        self,
        data: Data,
        category: str,
        title: Any,
        name: str,
        height: int,
        *,
        index: str | None = None,
        x_range: Range1d | DataRange1d | None = None,
        **kwargs: Any,
    ) -> None:
        self.category = category
        self.index = category if index is None else index
        self.source = ColumnDataSource(data)
        self.y_range = FactorRange(factors=list(data[category]) or ["-"])
        self.figure = bar_figure(title, name, self.y_range, height, x_range, **kwargs)
        self.root: Model = self.figure

    def refresh(self, data: Data) -> bool:
        """Show ``data``: patch the cells that changed, re-list the categories if needed.

        True when anything was sent.
        """
        if not set_if_changed(self.source, data, index=self.index):
            return False
        factors = data[self.category] or ["-"]
        if list(self.y_range.factors) != factors:
            self.y_range.factors = factors
        return True

    def update(self) -> None:
        """Re-read what the bars show."""
        raise NotImplementedError


def layer_positions(names: Iterable[Hashable], depth: Mapping[Any, int]) -> dict[Any, tuple[float, float]]:
    """Where graph nodes go once ``depth`` gives each its layer: x the layer, y its rank there (in ``names`` order).

    Each layer is centred on the widest one, so that edges between layers
    of different sizes stay short.
    """
    counts: dict[int, int] = {}
    pos: dict[Any, tuple[float, float]] = {}
    for name in names:
        layer = depth[name]
        i = counts.get(layer, 0)
        counts[layer] = i + 1
        pos[name] = (float(layer), float(i))
    widest = max(counts.values(), default=1)
    return {k: (x, y + (widest - counts[int(x)]) / 2) for k, (x, y) in pos.items()}
