"""The ``/profile`` page's component: the workers' statistical profile, of all tasks or of one task prefix.

Each worker samples its threads' stacks (see :mod:`distributed.profile`) by
task prefix; :class:`LiveProfile` asks every worker for its tree, merges them
and draws the result as a flame graph (an icicle chart: callers above, each
box as wide as its share of the samples). Asking costs a request to every
worker, so it happens when the page opens, when another prefix is chosen,
when "Update" is pressed, and, while nothing was sampled yet, every few
seconds until something is; not at every tick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from bokeh.models import Model
from bokeh.models.widgets.buttons import Button
from bokeh.models.widgets.inputs import Select
from bokeh.models.widgets.markups import Div

from distributed.comm.core import CommClosedError
from distributed.dashboard.components.profile import ProfileFigure
from distributed.profile import ProfileSettings, merge
from distributed.protocol import messages as m

if TYPE_CHECKING:
    from bokeh.document import Document

    from distributed.profile import ProfileState
    from distributed.scheduler import Scheduler

__all__ = ["ALL", "LiveProfile", "workers_profile"]

logger = logging.getLogger(__name__)

#: The prefix choice meaning every task.
ALL = "All tasks"

#: Seconds between automatic requests while the profile shown is empty.
RETRY_EMPTY = 2.0


async def workers_profile(scheduler: Scheduler, prefix: str | None = None) -> ProfileState:
    """The profiles of the scheduler's workers merged: of the tasks of ``prefix``, or of all tasks.

    A worker that leaves or fails to answer meanwhile is left out.
    """
    request = m.WorkerProfile(op="profile", key=prefix, start=None, stop=None)
    addresses = list(scheduler.workers)

    async def ask(address: str) -> Any:
        try:
            return await scheduler.rpc.call(address, request)
        except (OSError, CommClosedError):
            logger.info("Worker %s did not send its profile", address)
            return None

    results = await asyncio.gather(*(ask(a) for a in addresses))
    return merge(*(r for r in results if r is not None))


class LiveProfile:
    """A prefix chooser, an "Update" button, and the flame graph of the workers' merged profile.

    Parameters
    ----------
    scheduler
        The scheduler whose workers are asked.
    kwargs
        Passed to the figure (``sizing_mode``, ``height``).
    """

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        from bokeh.layouts import column, row

        self.scheduler = scheduler
        self.select = Select(
            title="Task prefix", value=ALL, options=list[str | tuple[Any, str]](self._options()), name="profile_prefix"
        )
        self.button = Button(label="Update", name="profile_update", button_type="primary")
        self.message = Div(text="", name="profile_message")
        interval = ProfileSettings().interval
        self.profile = ProfileFigure(profile_interval=interval, title="Profile of the workers' tasks", **kwargs)
        self.source = self.profile.source
        self.select.on_change("value", lambda attr, old, new: self.request())
        self.button.on_click(lambda event: self.request())
        self.root: Model = column(
            row(self.select, self.button),
            self.message,
            self.profile.root,
            sizing_mode=kwargs.get("sizing_mode", "stretch_width"),
        )
        self._in_flight = False
        self._last_request = 0.0
        self._samples = 0

    def _options(self) -> list[str]:
        return [ALL, *sorted(self.scheduler.task_prefixes)]

    @property
    def prefix(self) -> str | None:
        """The chosen task prefix, None for all tasks."""
        value = str(self.select.value)
        return None if value == ALL else value

    def request(self) -> None:
        """Ask the workers for their profiles at the document's next turn (unless a request is under way)."""
        doc: Document | None = self.root.document
        if doc is None or doc.session_context is None or self._in_flight:
            return  # not shown by a server (nothing would run the request), or already asking
        self._in_flight = True
        self._last_request = time.monotonic()
        # Bokeh runs a coroutine function given as a callback to its end (typed as plain callbacks only).
        doc.add_next_tick_callback(self.fetch)  # type: ignore[arg-type]

    async def fetch(self) -> None:
        """Ask the workers, merge their profiles and draw them."""
        self._in_flight = True
        try:
            prefix = self.prefix
            state = await workers_profile(self.scheduler, prefix)
            self.show(state)
        finally:
            self._in_flight = False
            self._last_request = time.monotonic()

    def show(self, state: ProfileState) -> None:
        """Draw ``state``."""
        self._samples = int(state.get("count", 0) or 0)
        self.profile.update(state)
        what = "all tasks" if self.prefix is None else f"tasks of {self.prefix!r}"
        text = f"{self._samples} samples of {what} on {len(self.scheduler.workers)} workers"
        if self.message.text != text:
            self.message.text = text

    def update(self) -> None:
        """Keep the prefix choices current; while nothing was sampled yet, ask again every few seconds."""
        options = self._options()
        if list(self.select.options) != options:
            self.select.options = list[str | tuple[Any, str]](options)
        if (
            self._samples == 0
            and not self._in_flight
            and self.scheduler.workers
            and time.monotonic() - self._last_request > RETRY_EMPTY
        ):
            self.request()
