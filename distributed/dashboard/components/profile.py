"""The profile figure: an icicle chart of a statistical profile's call tree.

Each box is a function: its width is its share of the samples, the boxes
under it are what it called.  :func:`profile_figure` draws a profile once;
:class:`ProfileFigure` keeps a figure and its data source for a live page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from distributed.profile import plot_data

__all__ = ["ProfileFigure", "profile_figure"]

_COLUMNS = (
    "left",
    "right",
    "bottom",
    "top",
    "color",
    "name",
    "filename",
    "line_number",
    "line",
    "time",
    "percentage",
    "count",
)


class ProfileFigure:
    """An icicle chart of a profile, with its data source.

    Parameters
    ----------
    profile_interval
        Seconds between samples, to show times.
    height, width, sizing_mode, title
        Passed to the bokeh figure.
    """

    def __init__(
        self,
        profile_interval: float = 0.010,
        height: int = 400,
        width: int = 800,
        sizing_mode: str = "stretch_width",
        title: str = "Profile",
    ) -> None:
        self.profile_interval = profile_interval
        self.source = ColumnDataSource(data={c: [] for c in _COLUMNS})
        fig = figure(
            title=title,
            height=height,
            width=width,
            sizing_mode=sizing_mode,  # type: ignore[arg-type]  # bokeh declares a Literal of mode names
            tools="xpan,xwheel_zoom,box_zoom,reset,save",
            name="profile",
        )
        fig.quad(
            source=self.source,
            left="left",
            right="right",
            bottom="bottom",
            top="top",
            fill_color="color",
            line_color="black",
            line_width=0.5,
        )
        fig.xaxis.visible = False
        fig.yaxis.visible = False
        fig.grid.visible = False
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("function", "@name"),
                    ("file", "@filename:@line_number"),
                    ("line", "@line"),
                    ("time", "@time (@percentage)"),
                ]
            )
        )
        self.root = fig

    def update(self, state: Mapping[str, Any]) -> None:
        """Show the profile ``state``."""
        self.source.data = plot_data(state, self.profile_interval)


def profile_figure(state: Mapping[str, Any], **kwargs: Any) -> figure:
    """A bokeh icicle chart of the profile ``state`` (``kwargs`` go to :class:`ProfileFigure`)."""
    pf = ProfileFigure(**kwargs)
    pf.update(state)
    return pf.root
