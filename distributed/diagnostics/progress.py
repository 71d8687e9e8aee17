"""Progress of a computation, seen from the scheduler: of the tasks some keys need, which are done.

:class:`Progress` counts the tasks, :class:`MultiProgress` counts them per task
prefix.  Both are scheduler plugins that follow the tasks through their
``transition`` hook, and are among the scheduler's plugins only while they
run: once every task is done, one errs or a key is cancelled, they remove
themselves.  While nothing is watched, a transition therefore costs nothing
more than it did.

:class:`ProgressExtension` serves the progress bars of clients
(:mod:`distributed.diagnostics.progressbar`): a bar sends the keys it shows
(``progress_watch``), polls the counts at its own interval (``progress_poll``)
and ends its watch when it stops (``progress_stop``).  The scheduler never
runs user code for it: tasks are grouped by their key's prefix.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from dask.utils import format_time

from distributed.comm import Comm
from distributed.core import Route
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol import messages as m
from distributed.protocol.messages import Key, ProgressStatus

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import TaskState

__all__ = [
    "BaseProgress",
    "MultiProgress",
    "Progress",
    "ProgressExtension",
    "dependent_keys",
    "format_time",
]


def dependent_keys(tasks: Iterable[TaskState], complete: bool = False) -> tuple[set[Key], set[Key]]:
    """The keys of ``tasks`` and of everything they depend on, and those of them that erred.

    With ``complete=False`` a task in memory (or erred) is left out, and so
    is what only it needed: those are done already.
    """
    out: set[Key] = set()
    errors: set[Key] = set()
    stack = list(tasks)
    while stack:
        ts = stack.pop()
        key = ts.key
        if key in out or key in errors:
            continue
        if ts.state == "erred":
            errors.add(key)
            if not complete:
                continue
        elif not complete and ts.who_has:
            continue
        out.add(key)
        stack.extend(ts.dependencies)
    return out, errors


class BaseProgress(SchedulerPlugin):
    """Follows the tasks ``keys`` need until all are in memory, one errs or a key is cancelled.

    What it counts, and how, is its subclasses' (:class:`Progress`,
    :class:`MultiProgress`).

    Parameters
    ----------
    keys
        The keys whose computation to follow.
    scheduler
        The scheduler they run on.
    complete
        Count the tasks done already too (True), or only those still to do.
    name
        The plugin's name (made unique when not given).
    client
        The client the watch is for: it ends when that client leaves.

    Attributes
    ----------
    status : str
        ``pending`` until the scheduler knows every key, ``running``, then
        ``finished`` or ``error``.
    """

    def __init__(
        self,
        keys: Iterable[Key],
        scheduler: Scheduler,
        complete: bool = False,
        name: str | None = None,
        client: str | None = None,
    ) -> None:
        #: The plugin's name, and the watch's id in requests.
        self.id: str = name or f"progress-{uuid.uuid4().hex}"
        self.name = self.id
        self.scheduler = scheduler
        self.requested: frozenset[Key] = frozenset(keys)
        self.complete = complete
        self.client = client
        self.status: ProgressStatus = "pending"
        self.erred_key: Key | None = None
        self.exception_text: str | None = None

    # -- life cycle --------------------------------------------------------------------
    async def setup(self) -> None:
        """Wait until the scheduler knows every key, then start following them."""
        while not await self.try_start():
            await asyncio.sleep(0.05)

    async def try_start(self) -> bool:
        """Start following the keys if the scheduler knows all of them; whether the watch has started."""
        return self.start_now()

    def start_now(self) -> bool:
        """:meth:`try_start`, synchronously (from a scheduler hook, before the next transition)."""
        if self.status != "pending":
            return True
        tasks = self.scheduler.tasks
        found = [tasks[k] for k in self.requested if k in tasks]
        if len(found) < len(self.requested):
            return False
        all_keys, errors = dependent_keys(found, complete=self.complete)
        left = dependent_keys(found, complete=False)[0] if self.complete else set(all_keys)
        # The keys asked for count even when they are done already.
        all_keys.update(self.requested)
        self._track(all_keys, left - errors)
        if errors:
            key = min(errors, key=str)
            self.stop(exception=self._error_text(key), key=key)
        elif not left:
            self.stop()
        else:
            self.status = "running"
            # A plugin without a start hook: nothing to await, so that a watch started from a hook
            # counts the graph's first transition.
            self.scheduler.plugins[self.id] = self
        return True

    def update_graph(self, scheduler: Scheduler, **kwargs: Any) -> None:
        """A pending watch (its keys were unknown) starts as soon as a graph brings them, before they run."""
        if self.status == "pending":
            self.start_now()

    def _track(self, all_keys: set[Key], left: set[Key]) -> None:
        """Start counting: ``all_keys`` counted, ``left`` of them not done."""
        raise NotImplementedError

    def stop(self, exception: str | None = None, key: Key | None = None) -> None:
        """End the watch: ``finished``, or ``error`` with ``exception`` (a text) about ``key``."""
        if self.status in ("finished", "error"):
            return
        if exception is not None:
            self.status = "error"
            self.erred_key = key
            self.exception_text = exception
        else:
            self.status = "finished"
        self.detach()

    def detach(self) -> None:
        """Stop receiving the scheduler's hooks (the state stays as it is)."""
        if self.scheduler.plugins.get(self.id) is self:
            self.scheduler.remove_plugin(self.id)

    def _error_text(self, key: Key) -> str:
        ts = self.scheduler.tasks.get(key)
        if ts is None:
            return f"Task {key!r} erred"
        blame = ts.exception_blame or ts
        return blame.exception_text or f"Task {blame.key!r} erred"

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        """The watch's client left: nobody looks any more."""
        if client == self.client:
            self.detach()

    # -- reports -----------------------------------------------------------------------
    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Tasks counted and tasks not yet done, by group."""
        raise NotImplementedError

    def state(self) -> m.ProgressState:
        """The watch's state as the scheduler reports it."""
        total, left = self.counts()
        reply = m.ProgressState(id=self.id, status=self.status, all=total, remaining=left)
        if self.status == "error":
            if self.erred_key is not None:
                reply["erred_key"] = self.erred_key
            reply["exception"] = self.exception_text or "error"
        return reply

    def __repr__(self) -> str:
        total, left = self.counts()
        n = sum(total.values())
        return f"<{type(self).__name__} {self.id} {self.status}: {n - sum(left.values())}/{n}>"


class Progress(BaseProgress):
    """:class:`BaseProgress` counting all tasks together (in one group, ``"all"``).

    Attributes
    ----------
    keys : set
        The keys not yet done (once started).
    all_keys : set
        Every key counted.
    """

    def __init__(
        self,
        keys: Iterable[Key],
        scheduler: Scheduler,
        complete: bool = False,
        name: str | None = None,
        client: str | None = None,
    ) -> None:
        super().__init__(keys, scheduler, complete=complete, name=name, client=client)
        self.keys: set[Key] = set()
        self.all_keys: set[Key] = set()

    def _track(self, all_keys: set[Key], left: set[Key]) -> None:
        self.all_keys = all_keys
        self.keys = left

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        """Count a task done (to memory), or stop on an error or a cancelled task."""
        if finish == "memory":
            left = self.keys
            if key in left:
                left.discard(key)
                if not left:
                    self.stop()
        elif finish == "erred":
            if key in self.all_keys:
                self.stop(exception=self._error_text(key), key=key)
        elif finish == "forgotten" and key in self.keys:
            self.stop(exception=f"Task {key!r} was cancelled", key=key)

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Tasks counted and tasks not yet done, in the one group ``"all"``."""
        return {"all": len(self.all_keys)}, {"all": len(self.keys)}


class MultiProgress(BaseProgress):
    """:class:`BaseProgress` per group of tasks: the tasks of one key prefix (``"inc"`` of ``"inc-1b2c"``).

    Parameters
    ----------
    keys, scheduler, complete, name, client
        As for :class:`BaseProgress`.
    group_by
        ``"prefix"``: group tasks by their key's prefix (``dask.utils.key_split``).
        Grouping by a function would run user code on the scheduler, and by
        spans needs spans: both are refused.

    Attributes
    ----------
    keys : dict
        Group name -> the keys of the group not yet done.
    all_keys : dict
        Group name -> every key of the group counted.
    """

    def __init__(
        self,
        keys: Iterable[Key],
        scheduler: Scheduler,
        group_by: Literal["prefix"] = "prefix",
        complete: bool = False,
        name: str | None = None,
        client: str | None = None,
    ) -> None:
        if group_by != "prefix":
            raise NotImplementedError(f"MultiProgress(group_by={group_by!r}) is not supported: only 'prefix' is")
        super().__init__(keys, scheduler, complete=complete, name=name, client=client)
        self.group_by = group_by
        self.keys: dict[str, set[Key]] = {}
        self.all_keys: dict[str, set[Key]] = {}
        #: Each counted key's group, to find it in one look-up per transition.
        self.group_of: dict[Key, str] = {}
        self.n_left = 0

    def _track(self, all_keys: set[Key], left: set[Key]) -> None:
        tasks = self.scheduler.tasks
        by_group: dict[str, set[Key]] = {}
        left_by_group: dict[str, set[Key]] = {}
        group_of = self.group_of
        for key in all_keys:
            ts = tasks.get(key)
            group = ts.prefix.name if ts is not None else str(key)
            group_of[key] = group
            by_group.setdefault(group, set()).add(key)
            left_by_group.setdefault(group, set())
        for key in left:
            left_by_group[group_of[key]].add(key)
        self.all_keys = by_group
        self.keys = left_by_group
        self.n_left = len(left)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        """Count a task done in its group, or stop on an error or a cancelled task."""
        group = self.group_of.get(key)
        if group is None:
            return
        if finish == "memory":
            left = self.keys[group]
            if key in left:
                left.discard(key)
                self.n_left -= 1
                if not self.n_left:
                    self.stop()
        elif finish == "erred":
            self.stop(exception=self._error_text(key), key=key)
        elif finish == "forgotten" and key in self.keys[group]:
            self.stop(exception=f"Task {key!r} was cancelled", key=key)

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Tasks counted and tasks not yet done, by group."""
        return {g: len(ks) for g, ks in self.all_keys.items()}, {g: len(ks) for g, ks in self.keys.items()}


class ProgressExtension:
    """The scheduler side of the clients' progress bars.

    Registered as ``scheduler.extensions["progress"]``; answers
    ``progress_watch``, ``progress_poll`` and ``progress_stop``.  A watch is
    kept until its final state has been polled, it is stopped, or its client
    has left (found when the next watch starts or any watch is polled).

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.watches: dict[str, BaseProgress] = {}

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "progress_watch": Route(m.ProgressWatch, self.watch),
            "progress_poll": Route(m.ProgressPoll, self.poll),
            "progress_stop": Route(m.ProgressStop, self.stop),
        }

    async def watch(self, comm: Comm | None, msg: m.ProgressWatch) -> m.ProgressState:
        """Start a watch of ``keys``; its first state, with the ``id`` to poll."""
        self._prune()
        client = msg.get("client")
        p: BaseProgress
        if msg["group_by"] is None:
            p = Progress(msg["keys"], self.scheduler, complete=msg["complete"], client=client)
        else:
            p = MultiProgress(
                msg["keys"], self.scheduler, group_by=msg["group_by"], complete=msg["complete"], client=client
            )
        self.watches[p.id] = p
        state = await self._state(p)
        if p.status == "pending":
            # Its keys are on their way (a request may overtake the graph on the client's stream):
            # hooked in, it starts as the graph arrives, not at the next poll when they may be done.
            self.scheduler.plugins[p.id] = p
        return state

    async def poll(self, comm: Comm | None, msg: m.ProgressPoll) -> m.ProgressState:
        """The state of watch ``id``.

        Raises
        ------
        KeyError
            When there is no such watch (it ended).
        """
        self._prune()
        p = self.watches.get(msg["id"])
        if p is None:
            raise KeyError(f"No progress watch {msg['id']!r}: it ended")
        return await self._state(p)

    def stop(self, comm: Comm | None, msg: m.ProgressStop) -> None:
        """End watch ``id`` (nothing happens when it has ended)."""
        p = self.watches.pop(msg["id"], None)
        if p is not None:
            p.detach()

    async def _state(self, p: BaseProgress) -> m.ProgressState:
        if p.status == "pending":
            await p.try_start()
        state = p.state()
        if p.status in ("finished", "error"):
            # This reply delivers the final state: nothing more to ask.
            del self.watches[p.id]
        return state

    def _prune(self) -> None:
        clients = self.scheduler.clients
        gone = [name for name, p in self.watches.items() if p.client is not None and p.client not in clients]
        for name in gone:
            self.watches.pop(name).detach()
