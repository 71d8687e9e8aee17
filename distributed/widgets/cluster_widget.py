"""The interactive cluster widget (ipywidgets): its status, and controls to scale it or make it adaptive.

The widget knows nothing of clusters: it is built from callables (the HTML
of the cluster's status and of its scaling, ``scale(n)``, and, when the
cluster can adapt, ``adapt(minimum, maximum)``), so it stays a leaf of the
package.  The cluster owns it, and owns the task that calls :meth:`refresh`
periodically while it is shown (see ``Cluster._widget``).

ipywidgets is optional: constructing a :class:`ClusterWidget` without it
raises ImportError, which the cluster takes as "show the HTML instead".
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["ClusterWidget"]

logger = logging.getLogger(__name__)


class ClusterWidget:
    """Tabs "Status" (the cluster's HTML view) and "Scaling" (its mode, and scale and adapt controls).

    Parameters
    ----------
    status_html
        The cluster's HTML view, asked for at each refresh.
    scaling_html
        The HTML saying how the cluster scales, asked for at each refresh.
    scale
        Called with the number in the "Workers" box when "Scale" is clicked.
    adapt
        Called with the "Minimum" and "Maximum" boxes when "Adapt" is
        clicked; None leaves out the adaptive controls.
    workers
        The number the "Workers" and "Maximum" boxes start at.

    Attributes
    ----------
    widget : ipywidgets.Tab
        What a notebook shows.
    status, scaling, message : ipywidgets.HTML
        The cluster's view, its scaling, and the outcome of the last click (an error, or nothing).
    workers, minimum, maximum : ipywidgets.IntText
        The boxes the buttons read.
    scale_button, adapt_button : ipywidgets.Button
        The buttons (``adapt_button`` is None without ``adapt``).

    Raises
    ------
    ImportError
        Without ipywidgets.
    """

    def __init__(
        self,
        status_html: Callable[[], str],
        scaling_html: Callable[[], str],
        scale: Callable[[int], object],
        adapt: Callable[[int, int], object] | None = None,
        workers: int = 0,
    ) -> None:
        from ipywidgets import HTML, Accordion, Button, HBox, IntText, Layout, Tab, VBox

        self._status_html = status_html
        self._scaling_html = scaling_html
        box = Layout(width="170px")
        self.status: Any = HTML(status_html())
        self.scaling: Any = HTML(scaling_html())
        self.message: Any = HTML("")
        self.workers: Any = IntText(value=workers, description="Workers", layout=box)
        self.scale_button: Any = Button(description="Scale", layout=Layout(width="100px"))
        self.scale_button.on_click(lambda _: self._act("Scaling", lambda: scale(int(self.workers.value))))
        panels = [HBox([self.workers, self.scale_button])]
        titles = ["Manual scaling"]
        self.minimum: Any = IntText(value=0, description="Minimum", layout=box)
        self.maximum: Any = IntText(value=max(workers, 1), description="Maximum", layout=box)
        self.adapt_button: Any = None
        if adapt is not None:
            bounds = (self.minimum, self.maximum)
            self.adapt_button = Button(description="Adapt", layout=Layout(width="100px"))
            self.adapt_button.on_click(
                lambda _: self._act("Adapting", lambda: adapt(int(bounds[0].value), int(bounds[1].value)))
            )
            panels.append(HBox([self.minimum, self.maximum, self.adapt_button]))
            titles.append("Adaptive scaling")
        self.controls: Any = Accordion(children=panels, layout=Layout(min_width="520px"))
        for i, title in enumerate(titles):
            self.controls.set_title(i, title)
        self.controls.selected_index = None
        self.widget: Any = Tab(children=[self.status, VBox([self.scaling, self.controls, self.message])])
        self.widget.set_title(0, "Status")
        self.widget.set_title(1, "Scaling")

    def refresh(self) -> None:
        """Show the cluster as it is now (the widgets send only what changed)."""
        self.status.value = self._status_html()
        self.scaling.value = self._scaling_html()

    def _act(self, what: str, action: Callable[[], object]) -> None:
        """Run a button's action; show its error in the widget (a click has no caller to raise to)."""
        try:
            action()
        except Exception as e:
            logger.warning("%s from the cluster widget failed", what, exc_info=True)
            self.message.value = (
                f'<span data-field="error" style="color: var(--jp-error-color1, #d32f2f);">'
                f"{html.escape(what)} failed: {html.escape(f'{type(e).__name__}: {e}')}</span>"
            )
        else:
            self.message.value = ""
        self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
