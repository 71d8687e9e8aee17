"""The task groups' graph: one box per task group, its progress drawn inside, arrows from the groups it depends on.

The scheduler keeps counts by state per task group but not which groups a
group depends on; :class:`GroupDependencies`, a scheduler plugin added when
the first groups page opens (as the task stream's is), learns that from each
graph as it arrives (``update_graph``: O(new tasks + their dependencies)),
and from the tasks already there in slices of :data:`BACKFILL_PER_TICK`, one
per turn of the scheduler's loop. It keeps group names only, and forgets groups the scheduler dropped.

:class:`GroupGraph` lays the live groups out in layers (a group one layer
right of the deepest group it depends on), again only when the set of groups
changes, and at each tick re-reads their counts: O(groups), never O(tasks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import dask.config
from bokeh.models import ColumnDataSource, DataRange1d, HoverTool, Model
from bokeh.models.widgets.markups import Div
from bokeh.plotting import figure

from distributed.dashboard.components.shared import STATE_COLORS, Data, layer_positions, set_if_changed
from distributed.diagnostics.plugin import SchedulerPlugin

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import TaskGroup, TaskState, TaskStateName

__all__ = ["GroupDependencies", "GroupGraph", "ensure_group_dependencies", "group_layout"]

#: Tasks already in the scheduler when the plugin starts that one turn of the loop reads.
BACKFILL_PER_TICK = 20_000


class GroupDependencies(SchedulerPlugin):
    """Which task groups each task group depends on, learnt from the graphs the scheduler receives.

    Parameters
    ----------
    scheduler
        The scheduler whose graphs are read.
    """

    name = "dashboard-group-dependencies"

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        #: Group name -> names of the groups its tasks depend on.
        self.dependencies: dict[str, set[str]] = {}
        #: Tasks that were there before the plugin, still to read (see :meth:`backfill`).
        self._backlog: list[TaskState] = list(scheduler.tasks.values())
        self._handle: asyncio.Handle | None = None
        self._live_groups = 0

    def _add(self, ts: TaskState) -> None:
        deps = ts.dependencies
        if not deps:
            return
        group = ts.group
        names: set[str] | None = None
        for dep in deps:
            if dep.group is not group:
                if names is None:
                    names = self.dependencies.setdefault(group.name, set())
                names.add(dep.group.name)

    def update_graph(self, scheduler: Scheduler, *, tasks: list[Any], **kwargs: Any) -> None:
        """Read the new tasks' dependencies."""
        known = self.scheduler.tasks
        for key in tasks:
            ts = known.get(key)
            if ts is not None:
                self._add(ts)
        # Drop groups the scheduler forgot, once they could outnumber the live ones.
        if len(self.dependencies) > 2 * self._live_groups + 64:
            live = {name for prefix in self.scheduler.task_prefixes.values() for name in prefix.groups}
            self._live_groups = len(live)
            for name in [n for n in self.dependencies if n not in live]:
                del self.dependencies[name]

    async def start(self, scheduler: Scheduler) -> None:
        """Read the tasks that were there before the plugin, a slice per turn of the loop."""
        self._step()

    def _step(self) -> None:
        self._handle = None
        if self.backfill():
            self._handle = asyncio.get_running_loop().call_soon(self._step)

    async def before_close(self) -> None:
        """Stop reading the earlier tasks."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._backlog = []

    def backfill(self, budget: int = BACKFILL_PER_TICK) -> bool:
        """Read up to ``budget`` of the tasks that were there before the plugin; True while some are left."""
        if not self._backlog:
            return False
        chunk = self._backlog[-budget:]
        del self._backlog[-budget:]
        for ts in chunk:
            self._add(ts)
        return bool(self._backlog)


async def ensure_group_dependencies(scheduler: Scheduler) -> GroupDependencies:
    """The scheduler's :class:`GroupDependencies` plugin, added first if it has none."""
    plugin = scheduler.plugins.get(GroupDependencies.name)
    if isinstance(plugin, GroupDependencies):
        return plugin
    plugin = GroupDependencies(scheduler)
    await scheduler.add_plugin(plugin, name=GroupDependencies.name)
    return plugin


def group_layout(names: Iterable[str], dependencies: Mapping[str, Iterable[str]]) -> dict[str, tuple[float, float]]:
    """Positions of the groups ``names``: x is the longest chain of dependencies below, y spreads each layer.

    Dependencies on groups not in ``names`` are ignored; so is the edge
    closing a cycle (groups can depend on each other both ways when keys
    share names). O(groups + edges).
    """
    live = list(dict.fromkeys(names))
    members = set(live)
    depth: dict[str, int] = {}
    for start in live:
        if start in depth:
            continue
        # Iterative depth-first: a group's depth is set once those of its dependencies are.
        on_path: set[str] = set()
        stack: list[tuple[str, bool]] = [(start, False)]
        while stack:
            name, expanded = stack.pop()
            if name in depth:
                continue
            deps = [d for d in dependencies.get(name, ()) if d in members and d != name]
            if expanded:
                on_path.discard(name)
                depth[name] = 1 + max((depth.get(d, -1) for d in deps), default=-1)
                continue
            on_path.add(name)
            stack.append((name, True))
            stack.extend((d, False) for d in deps if d not in depth and d not in on_path)
    # Downwards from the top, in the order the groups came.
    return {k: (x, -y) for k, (x, y) in layer_positions(live, depth).items()}


#: Longest label under a box (the hover shows the whole name).
LABEL_CHARS = 20

#: Segments drawn inside each group's box, left to right: (column, states counted, colour).
SEGMENTS: tuple[tuple[str, tuple[TaskStateName, ...], str], ...] = (
    ("memory", ("memory",), STATE_COLORS["memory"]),
    ("released", ("forgotten", "released"), STATE_COLORS["released"]),
    ("erred", ("erred",), STATE_COLORS["erred"]),
    ("processing", ("processing",), STATE_COLORS["processing"]),
)

_EMPTY_NODES: Data = {
    k: []
    for k in (
        "name",
        "label",
        "left",
        "right",
        "top",
        "bottom",
        "x",
        "label_y",
        "total",
        "waiting",
        *(c for c, _, _ in SEGMENTS),
        *("x_" + c for c, _, _ in SEGMENTS),
    )
}


class GroupGraph:
    """The task groups as boxes in layers, each filled left to right by its tasks' states, with their dependencies.

    Shows at most ``distributed.dashboard.graph-max-items`` groups; more are
    not drawn (a message says so).
    """

    #: Width and height of a group's box, in layout units (a layer is 1 wide, a row 1 high).
    WIDTH = 0.7
    HEIGHT = 0.5

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        from bokeh.layouts import column

        self.scheduler = scheduler
        self.max_items = int(dask.config.get("distributed.dashboard.graph-max-items"))
        self.node_source = ColumnDataSource(dict(_EMPTY_NODES))
        self.edge_source = ColumnDataSource({"x0": [], "y0": [], "x1": [], "y1": []})
        # Room around the boxes in layout units, so that one row of groups does not stretch them tall.
        fig = figure(
            title="Task groups",
            name="task_groups",
            height=500,
            tools="pan,wheel_zoom,reset",
            x_range=DataRange1d(range_padding=1.0, range_padding_units="absolute"),
            y_range=DataRange1d(range_padding=1.0, range_padding_units="absolute"),
            **kwargs,
        )
        fig.segment(x0="x0", y0="y0", x1="x1", y1="y1", line_color="#999999", line_width=1.5, source=self.edge_source)
        src = self.node_source
        fig.quad(
            left="left", right="right", top="top", bottom="bottom", fill_color=STATE_COLORS["waiting"],
            line_color=None, source=src,
        )  # fmt: skip
        previous = "left"
        for col, _, color in SEGMENTS:
            fig.quad(
                left=previous, right="x_" + col, top="top", bottom="bottom", fill_color=color, line_color=None,
                source=src,
            )  # fmt: skip
            previous = "x_" + col
        fig.quad(
            left="left", right="right", top="top", bottom="bottom", fill_alpha=0, line_color="#444444",
            source=self.node_source,
        )  # fmt: skip
        fig.text(x="x", y="label_y", text="label", text_align="center", text_font_size="8pt", source=self.node_source)
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("group", "@name"),
                    ("tasks", "@total"),
                    ("in memory", "@memory"),
                    ("done, released", "@released"),
                    ("erred", "@erred"),
                    ("processing", "@processing"),
                    ("waiting", "@waiting"),
                ]
            )
        )
        fig.axis.visible = False
        fig.grid.visible = False
        self.figure = fig
        self.message = Div(text="", name="task_groups_message")
        self.root: Model = column(self.message, fig, sizing_mode=kwargs.get("sizing_mode", "stretch_width"))
        self.plugin: GroupDependencies | None = None
        self._names: list[str] = []
        self._edges_seen = -1
        self._pos: dict[str, tuple[float, float]] = {}
        self._start_plugin()
        self.update()

    def _start_plugin(self) -> None:
        plugin = self.scheduler.plugins.get(GroupDependencies.name)
        if isinstance(plugin, GroupDependencies):
            self.plugin = plugin
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a document built outside the server): the graph draws no dependencies
        # Pages are built on the scheduler's loop; the plugin is added right after, on that loop.
        task = asyncio.ensure_future(ensure_group_dependencies(self.scheduler))
        _pending.add(task)
        task.add_done_callback(_pending.discard)

    def _groups(self) -> list[TaskGroup]:
        return [g for prefix in self.scheduler.task_prefixes.values() for g in prefix.groups.values() if g.live]

    def update(self) -> None:
        """Re-lay the graph if its groups (or what is known of their dependencies) changed, then re-count."""
        if self.plugin is None:
            plugin = self.scheduler.plugins.get(GroupDependencies.name)
            self.plugin = plugin if isinstance(plugin, GroupDependencies) else None
        dependencies: Mapping[str, set[str]] = {} if self.plugin is None else self.plugin.dependencies
        groups = self._groups()
        if len(groups) > self.max_items:
            text = f"{len(groups)} task groups, more than distributed.dashboard.graph-max-items ({self.max_items})."
            if self.message.text != text:
                self.message.text = text
                self._names = []
                self.node_source.data = dict(_EMPTY_NODES)
                self.edge_source.data = {"x0": [], "y0": [], "x1": [], "y1": []}
            return
        names = [g.name for g in groups]
        edges_known = sum(len(dependencies.get(n, ())) for n in names)
        if names != self._names or edges_known != self._edges_seen:
            self._names = names
            self._edges_seen = edges_known
            self._pos = group_layout(names, dependencies)
            self.message.text = f"{len(names)} task groups"
            self.edge_source.data = self._edges(names, dependencies)
        set_if_changed(self.node_source, self._nodes(groups), index="name")

    def _edges(self, names: list[str], dependencies: Mapping[str, set[str]]) -> Data:
        pos = self._pos
        data: Data = {"x0": [], "y0": [], "x1": [], "y1": []}
        half = self.WIDTH / 2
        for name in names:
            x1, y1 = pos[name]
            for dep in dependencies.get(name, ()):
                if dep in pos and dep != name:
                    x0, y0 = pos[dep]
                    data["x0"].append(x0 + half)
                    data["y0"].append(y0)
                    data["x1"].append(x1 - half)
                    data["y1"].append(y1)
        return data

    def _nodes(self, groups: list[TaskGroup]) -> Data:
        data: Data = {k: [] for k in _EMPTY_NODES}
        half_w, half_h = self.WIDTH / 2, self.HEIGHT / 2
        for group in groups:
            x, y = self._pos[group.name]
            states = group.states
            total = sum(states.values())
            left = x - half_w
            name = group.name
            data["name"].append(name)
            data["label"].append(name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…")
            data["left"].append(left)
            data["right"].append(x + half_w)
            data["top"].append(y + half_h)
            data["bottom"].append(y - half_h)
            data["x"].append(x)
            data["label_y"].append(y - half_h - 0.25)
            data["total"].append(total)
            done = 0
            for col, counted, _ in SEGMENTS:
                n = sum(states[s] for s in counted)
                done += n
                data[col].append(n)
                data["x_" + col].append(left + self.WIDTH * done / total if total else left)
            data["waiting"].append(total - done)
        return data


#: Tasks adding the plugin, kept until done (the loop holds only weak references).
_pending: set[asyncio.Future[Any]] = set()
