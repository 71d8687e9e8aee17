"""Spans: the scheduler's record of what ran under each ``with span(...)`` block, with its metrics.

A client marks the tasks of a block with the annotation ``span``:
``{"name": (tag, ...), "ids": (id, ...)}``, one id per tag, outermost first
(see :func:`distributed.client.spans.span`).  Each task group belongs to one
span, that of the first of its tasks the scheduler sees; tasks outside any
block belong to the root span ``("default",)``.  A span's metrics sum those
of its groups and of its children's, so a span reports everything that ran
within it:

- ``states``: tasks in each state; ``done``: none waits or runs;
- ``start`` / ``stop``: when its first task started and its last one
  finished (``stop`` is the time now while tasks are still to run);
- ``duration``: ``stop - start``; ``all_durations``: seconds spent by
  activity (``{"compute": ...}``: time in the task's code, summed over the
  tasks); ``active_cpu_seconds``: the same sum; ``nbytes_total``: bytes of
  the results.

:meth:`SpansSchedulerExtension.merge_by_tags` and the other merges sum
several spans without counting a group twice.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from distributed.scheduler.records import TaskGroup, TaskState, TaskStateName

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["DEFAULT_SPAN", "Span", "SpanGroup", "SpansSchedulerExtension"]

#: The name of the root span of tasks outside any ``span`` block.
DEFAULT_SPAN = ("default",)

#: States in which a task is still to finish.
_UNFINISHED: tuple[TaskStateName, ...] = ("released", "waiting", "no-worker", "queued", "processing")


class _Metrics:
    """The metrics of a set of task groups (a span and its children, or a merge of spans)."""

    __slots__ = ()

    def traverse_groups(self) -> Iterator[TaskGroup]:
        """The task groups counted (each once)."""
        raise NotImplementedError

    #: Set when the first of the groups was added.
    enqueued: float

    @property
    def states(self) -> dict[str, int]:
        """Tasks in each state, summed over the groups."""
        out: dict[str, int] = defaultdict(int)
        for tg in self.traverse_groups():
            for state, n in tg.states.items():
                out[state] += n
        return dict(out)

    @property
    def done(self) -> bool:
        """Whether no task of the groups is still to run (an empty span is done)."""
        return not any(tg.states[state] for tg in self.traverse_groups() for state in _UNFINISHED)

    @property
    def start(self) -> float:
        """When the first task that finished started (``enqueued`` before any did)."""
        starts = [tg.start for tg in self.traverse_groups() if tg.start]
        return min(starts) if starts else self.enqueued

    @property
    def stop(self) -> float:
        """When the last task finished, once done; the time now before then."""
        if not self.done:
            return time.time()
        stops = [tg.stop for tg in self.traverse_groups() if tg.stop]
        return max(stops) if stops else self.start

    @property
    def duration(self) -> float:
        """Seconds from ``start`` to ``stop``."""
        return self.stop - self.start

    @property
    def all_durations(self) -> dict[str, float]:
        """Seconds spent by activity, summed over the tasks: ``{"compute": ...}``."""
        return {"compute": sum(tg.duration for tg in self.traverse_groups())}

    @property
    def active_cpu_seconds(self) -> float:
        """Seconds the tasks' code ran, summed over the tasks."""
        return self.all_durations["compute"]

    @property
    def nbytes_total(self) -> int:
        """Bytes of the tasks' results, summed over the tasks."""
        return sum(tg.nbytes_total for tg in self.traverse_groups())


class Span(_Metrics):
    """One ``with span(...)`` block as the scheduler saw it.

    Parameters
    ----------
    name
        The tags from the outermost block in: ``("etl", "load")``.
    id
        The block's unique id (what ``with span(...) as id`` gave).
    parent
        The span of the enclosing block; None for a root.
    """

    __slots__ = ("name", "id", "parent", "children", "groups", "enqueued")

    def __init__(self, name: tuple[str, ...], id: str, parent: Span | None) -> None:
        self.name = name
        self.id = id
        self.parent = parent
        self.children: list[Span] = []
        #: The task groups that belong to this span itself (not those of its children).
        self.groups: set[TaskGroup] = set()
        self.enqueued = time.time()

    def __repr__(self) -> str:
        return f"<Span {self.name!r} id={self.id}>"

    def traverse_spans(self) -> Iterator[Span]:
        """This span and all its descendants, depth first."""
        stack = [self]
        while stack:
            span = stack.pop()
            yield span
            stack.extend(reversed(span.children))

    def traverse_groups(self) -> Iterator[TaskGroup]:
        """The task groups of this span and its descendants."""
        for span in self.traverse_spans():
            yield from span.groups


class SpanGroup(_Metrics):
    """Several spans' metrics summed, each task group counted once."""

    def __init__(self, spans: Iterable[Span]) -> None:
        self.spans = list(spans)
        self.enqueued = min((span.enqueued for span in self.spans), default=time.time())

    def __repr__(self) -> str:
        return f"<SpanGroup of {len(self.spans)} spans>"

    def traverse_groups(self) -> Iterator[TaskGroup]:
        """The task groups of the spans and their descendants, each once."""
        seen: set[int] = set()
        for span in self.spans:
            for tg in span.traverse_groups():
                if id(tg) not in seen:
                    seen.add(id(tg))
                    yield tg


class SpansSchedulerExtension:
    """The spans of the scheduler's tasks (``scheduler.extensions["spans"]``), by id, name and tag.

    Parameters
    ----------
    scheduler
        The scheduler: the extension watches the new tasks of each graph it
        takes (through its ``span_observer``).
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        #: Every span by id.
        self.spans: dict[str, Span] = {}
        #: The spans without parent, in the order they appeared.
        self.root_spans: list[Span] = []
        #: Spans by their full name, and by each of their tags.
        self.spans_search_by_name: defaultdict[tuple[str, ...], list[Span]] = defaultdict(list)
        self.spans_search_by_tag: defaultdict[str, list[Span]] = defaultdict(list)
        scheduler.span_observer = self.observe_tasks

    def observe_tasks(self, tasks: Iterable[TaskState]) -> None:
        """Put each new task's group, if it has no span yet, in the span its annotation names."""
        for ts in tasks:
            tg = ts.group
            if tg.span_id is not None:
                continue
            annotation = ts.annotations.get("span") if ts.annotations else None
            span = self._span_of(annotation)
            tg.span_id = span.id
            span.groups.add(tg)

    def _span_of(self, annotation: object) -> Span:
        """The span an annotation names, made with its ancestors when new; the default span otherwise."""
        if isinstance(annotation, dict):
            names, ids = annotation.get("name"), annotation.get("ids")
            if isinstance(names, (tuple, list)) and isinstance(ids, (tuple, list)) and ids and len(names) == len(ids):
                return self._ensure_span(tuple(map(str, names)), tuple(map(str, ids)))
        return self._ensure_span(DEFAULT_SPAN, DEFAULT_SPAN)

    def _ensure_span(self, name: tuple[str, ...], ids: tuple[str, ...]) -> Span:
        span = self.spans.get(ids[-1])
        if span is not None:
            return span
        parent = self._ensure_span(name[:-1], ids[:-1]) if len(ids) > 1 else None
        span = self.spans[ids[-1]] = Span(name, ids[-1], parent)
        if parent is None:
            self.root_spans.append(span)
        else:
            parent.children.append(span)
        self.spans_search_by_name[name].append(span)
        for tag in set(name):
            self.spans_search_by_tag[tag].append(span)
        return span

    def merge_all(self) -> SpanGroup:
        """Every span's metrics summed."""
        return SpanGroup(self.root_spans)

    def merge_by_name(self, *name: str) -> SpanGroup:
        """The metrics of the spans named exactly ``name`` (``("etl", "load")``), summed."""
        return SpanGroup(self.spans_search_by_name.get(tuple(name), []))

    def merge_by_tags(self, *tags: str) -> SpanGroup:
        """The metrics of the spans with any of ``tags`` in their name, summed."""
        found: dict[str, Span] = {}
        for tag in tags:
            for span in self.spans_search_by_tag.get(tag, []):
                found[span.id] = span
        return SpanGroup(found.values())
