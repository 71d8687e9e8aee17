"""Adaptive scaling: a cluster sized by its scheduler's load.

Theory of operation
-------------------
:class:`AdaptiveCore` holds the policy, free of any cluster: every look it
takes a target number of workers (:meth:`~AdaptiveCore.target`, bounded by
``minimum``/``maximum``) and compares it with the workers planned:

* more wanted: scale up at once;
* fewer wanted: first the workers asked for that have not arrived, then the
  ones the scheduler's ``workers_to_close`` picks.  A worker is let go only
  once it has been picked on ``wait_count`` looks in a row, so a short lull
  does not cost a worker that is needed again a second later.

:class:`Adaptive` binds the policy to a :class:`~distributed.deploy.SpecCluster`:
the target is the scheduler's ``adaptive_target()``, the workers to let go are
those its ``workers_to_close()`` picks, and they are retired by the scheduler
(the data only they hold moves to the others; one whose data can go nowhere is
kept) before the cluster closes them.  A scheduler in this process is called
directly; one elsewhere (behind a ``ProcessInterface``) gets the same questions
as requests (``adaptive_target``, ``workers_to_close``, ``retire_workers``),
a look at its workers (``identity``) first.  It looks every ``interval`` in a
task on the cluster's loop, until :meth:`Adaptive.stop` or the cluster closes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import dask.config
from dask.utils import parse_timedelta

from distributed.protocol import messages as m
from distributed.protocol.serialize import Serialize
from distributed.scheduler import Scheduler

if TYPE_CHECKING:
    from tornado.ioloop import IOLoop

    from distributed.deploy.spec import SpecCluster

logger = logging.getLogger(__name__)

__all__ = ["Adaptive", "AdaptiveCore", "Recommendation"]


class Recommendation(TypedDict, total=False):
    """What one look recommends: ``status`` "same", "up" (to ``n``) or "down" (``workers``)."""

    status: Literal["same", "up", "down"]
    n: int
    workers: list[Any]


class AdaptiveCore:
    """The adaptive policy, for any kind of cluster.

    Subclasses provide :meth:`target`, :meth:`workers_to_close`,
    :meth:`scale_up`, :meth:`scale_down` and the ``plan``, ``requested`` and
    ``observed`` sets of worker names.

    Parameters
    ----------
    minimum, maximum
        Bounds on the number of workers.
    wait_count
        Looks in a row a worker must be picked for closing before it is closed.
    """

    def __init__(self, minimum: int = 0, maximum: float = math.inf, wait_count: int = 3) -> None:
        if minimum < 0:
            raise ValueError(f"Adaptive(minimum={minimum}): it must not be negative")
        if maximum < minimum:
            raise ValueError(f"Adaptive(maximum={maximum}) is below minimum={minimum}")
        if wait_count < 1:
            raise ValueError(f"Adaptive(wait_count={wait_count}): it must be at least 1")
        self.minimum = minimum
        self.maximum = maximum
        self.wait_count = wait_count
        #: Looks in a row each worker was picked for closing.
        self.close_counts: dict[Any, int] = {}
        #: Recent recommendations acted on, as ``(time, recommendation)``.
        self.log: deque[tuple[float, Recommendation]] = deque(maxlen=1000)
        self._adapting = False

    # -- what subclasses provide ---------------------------------------------------------
    @property
    def plan(self) -> set[Any]:
        """Names of the workers planned."""
        raise NotImplementedError

    @property
    def requested(self) -> set[Any]:
        """Names of the workers asked for."""
        raise NotImplementedError

    @property
    def observed(self) -> set[Any]:
        """Names of the workers that arrived."""
        raise NotImplementedError

    async def target(self) -> int:
        """The number of workers the load wants."""
        raise NotImplementedError

    async def workers_to_close(self, target: int) -> list[Any]:
        """Names of the workers to close to get down to ``target``."""
        raise NotImplementedError

    async def scale_up(self, n: int) -> None:
        """Grow to ``n`` workers."""
        raise NotImplementedError

    async def scale_down(self, workers: Iterable[Any]) -> None:
        """Close these workers."""
        raise NotImplementedError

    # -- the policy ----------------------------------------------------------------------
    async def safe_target(self) -> int:
        """:meth:`target`, within ``minimum`` and ``maximum``."""
        n = await self.target()
        if n > self.maximum:
            n = int(self.maximum)
        return max(n, self.minimum)

    async def recommendations(self, target: int) -> Recommendation:
        """What to do to reach ``target`` workers, counting looks in a row for closing."""
        plan = self.plan
        if target >= len(plan):
            self.close_counts.clear()
            if target == len(plan):
                return Recommendation(status="same")
            return Recommendation(status="up", n=target)
        excess = len(plan) - target
        # Workers asked for but not arrived cost nothing to drop: they go first.
        pending = sorted(self.requested - self.observed, key=str)[:excess]
        candidates = list(pending)
        if len(candidates) < excess:
            candidates += [w for w in await self.workers_to_close(target) if w not in candidates]
        counts = {w: self.close_counts.get(w, 0) + 1 for w in candidates}
        self.close_counts = counts
        firm = [w for w, c in counts.items() if c >= self.wait_count]
        if not firm:
            return Recommendation(status="same")
        return Recommendation(status="down", workers=firm)

    async def adapt(self) -> None:
        """Take one look and act on it (skipped while the previous look still acts)."""
        if self._adapting:
            return
        self._adapting = True
        try:
            target = await self.safe_target()
            rec = await self.recommendations(target)
            if rec["status"] == "same":
                return
            self.log.append((time.time(), rec))
            if rec["status"] == "up":
                await self.scale_up(rec["n"])
            else:
                for w in rec["workers"]:
                    self.close_counts.pop(w, None)
                await self.scale_down(rec["workers"])
        finally:
            self._adapting = False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _config(name: str, given: Any) -> Any:
    return dask.config.get(name) if given is None else given


class Adaptive(AdaptiveCore):
    """Adaptive scaling of a :class:`~distributed.deploy.SpecCluster`, led by its scheduler's load.

    Usually made by :meth:`SpecCluster.adapt`.  Defaults come from the
    ``distributed.adaptive`` config.

    Parameters
    ----------
    cluster
        The cluster to scale; its scheduler runs in this process or elsewhere.
    interval
        Time between looks.
    minimum, maximum
        Bounds on the number of workers.
    wait_count
        Looks in a row a worker must be idle before it is retired.
    target_duration
        How long the work in hand should take (see ``Scheduler.adaptive_target``).
    worker_key
        A callable ``WorkerState -> group`` (``Scheduler.workers_to_close``'s
        ``key``): workers of one group are closed together or not at all.  It
        runs on the scheduler: with a scheduler elsewhere it is pickled and
        sent there, as a function given to ``run_on_scheduler`` is (so it
        must be importable, or picklable by value, there).  The workers of one
        entry of a :class:`SpecCluster`'s spec with a ``group`` are closed
        together without it.
    **kwargs
        Not supported: none is accepted.

    Examples
    --------
    >>> adaptive = cluster.adapt(minimum=1, maximum=10, target_duration="2s")  # doctest: +SKIP
    >>> adaptive.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        cluster: SpecCluster,
        interval: float | str | None = None,
        minimum: int | None = None,
        maximum: float | None = None,
        wait_count: int | None = None,
        target_duration: float | str | None = None,
        worker_key: Any = None,
        **kwargs: Any,
    ) -> None:
        if worker_key is not None and not callable(worker_key):
            raise TypeError(f"Adaptive(worker_key={worker_key!r}): it must be a callable taking a WorkerState")
        for name in kwargs:
            raise TypeError(f"Adaptive() got an unexpected keyword argument {name!r}")
        super().__init__(
            minimum=int(_config("distributed.adaptive.minimum", minimum)),
            maximum=float(_config("distributed.adaptive.maximum", maximum)),
            wait_count=int(_config("distributed.adaptive.wait-count", wait_count)),
        )
        self.cluster = cluster
        self.interval = float(parse_timedelta(_config("distributed.adaptive.interval", interval), "s") or 0)
        if self.interval <= 0:
            raise ValueError(f"Adaptive(interval={interval!r}): it must be positive")
        self.target_duration = float(
            parse_timedelta(_config("distributed.adaptive.target-duration", target_duration), "s") or 0
        )
        if self.target_duration <= 0:
            raise ValueError(f"Adaptive(target_duration={target_duration!r}): it must be positive")
        #: Groups workers closed together (see ``Scheduler.workers_to_close``'s ``key``).
        self.worker_key: Callable[[Any], Hashable] | None = worker_key
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        # Names of the workers a scheduler elsewhere knows, as of this look.
        self._remote_names: list[Any] = []
        loop = cluster.event_loop
        if loop is None or loop.is_closed():
            raise RuntimeError(f"{cluster.name} has no running event loop: start it before adapting")
        if _running_loop() is loop:
            self._start()
        else:
            loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        if not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="adaptive")

    async def _run(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.interval)
            try:
                await self.adapt()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception(
                    "Adaptive scaling of %s failed; trying again in %s s", self.cluster.name, self.interval
                )

    def stop(self) -> None:
        """Stop adapting; the cluster keeps its workers (a scaling under way completes)."""
        self._stopped = True
        loop = self.cluster.event_loop
        if _running_loop() is loop:
            self._cancel()
        elif loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    @property
    def loop(self) -> IOLoop | None:
        """The cluster's tornado ``IOLoop``, which the looks run on (over the cluster's ``event_loop``)."""
        return self.cluster.loop

    @property
    def scheduler(self) -> Scheduler:
        """The cluster's scheduler, when it runs in this process.

        Raises
        ------
        NotImplementedError
            When it runs elsewhere: ask it through the cluster's requests then.
        """
        s = self.cluster.scheduler
        if not isinstance(s, Scheduler):
            raise NotImplementedError(f"{self.cluster.name}'s scheduler does not run in this process ({s!r})")
        return s

    def _local(self) -> Scheduler | None:
        s = self.cluster.scheduler
        return s if isinstance(s, Scheduler) else None

    @property
    def plan(self) -> set[Any]:
        """Names of the workers the cluster plans."""
        return self.cluster.plan

    @property
    def requested(self) -> set[Any]:
        """Names of the workers the cluster asked for."""
        return self.cluster.requested

    @property
    def observed(self) -> set[Any]:
        """Names of the workers the scheduler knows (a scheduler elsewhere: as of this look)."""
        s = self._local()
        if s is None:
            return self.cluster.names_known(self._remote_names)
        return self.cluster.names_known(ws.name for ws in s.workers.values())

    async def adapt(self) -> None:
        """Take one look and act on it; a scheduler elsewhere is first asked which workers it has."""
        if self._local() is None and not self._adapting:
            info = await self.cluster.scheduler_request(m.Empty(op="identity"))
            workers = info.get("workers", {}) if isinstance(info, Mapping) else {}
            self._remote_names = [w.get("name") for w in workers.values() if isinstance(w, Mapping)]
        await super().adapt()

    async def target(self) -> int:
        """The scheduler's ``adaptive_target(target_duration)``."""
        s = self._local()
        if s is not None:
            return s.adaptive_target(target_duration=self.target_duration)
        n = await self.cluster.scheduler_request(
            m.AdaptiveTarget(op="adaptive_target", target_duration=self.target_duration)
        )
        return int(n)

    async def workers_to_close(self, target: int) -> list[Any]:
        """Names of the workers the scheduler would retire to leave ``target`` (in groups by ``worker_key``).

        The cluster closes whole entries of its spec: the workers of an entry
        that starts a group go together, and only while at least ``target``
        workers are left planned.
        """
        s = self._local()
        if s is not None:
            names = s.workers_to_close(target=target, key=self.worker_key, attribute="name")
        else:
            request = m.WorkersToClose(op="workers_to_close", target=target, attribute="name")
            if self.worker_key is not None:
                request["key"] = Serialize(self.worker_key)  # pickled on the way: the scheduler runs it
            names = list(await self.cluster.scheduler_request(request))
        return self._whole_entries(names, target)

    async def recommendations(self, target: int) -> Recommendation:
        """As the policy's, but closing whole entries of the cluster's spec, leaving at least ``target`` workers.

        Workers asked for and not yet arrived are dropped first, by the
        policy: with groups, they too stand for their whole entry.
        """
        rec = await super().recommendations(target)
        if rec["status"] != "down":
            return rec
        workers = self._whole_entries(rec["workers"], target)
        if not workers:
            return Recommendation(status="same")
        return Recommendation(status="down", workers=workers)

    def _whole_entries(self, names: Iterable[Any], target: int) -> list[Any]:
        """The workers of the entries these workers belong to, while ``target`` workers are left planned."""
        groups = self.cluster.worker_groups()
        if all(len(members) == 1 for members in groups.values()):
            return list(names)
        entry_of = {str(w): nm for nm, members in groups.items() for w in members}
        left = sum(len(members) for members in groups.values())
        out: list[Any] = []
        chosen: set[Any] = set()
        for w in names:
            nm = entry_of.get(str(w))
            if nm is None or nm in chosen or left - len(groups[nm]) < target:
                continue
            chosen.add(nm)
            left -= len(groups[nm])
            out += groups[nm]
        return out

    async def scale_up(self, n: int) -> None:
        """Have the cluster grow to ``n`` workers (its ``scale_up``, which keeps adapting on)."""
        # Shielded: stopping adaptive scaling must not cut a scaling short.
        await asyncio.shield(self.cluster.scale_up(n))

    async def scale_down(self, workers: Iterable[Any]) -> None:
        """Retire these workers through the scheduler, then have the cluster close the ones retired.

        A worker the scheduler keeps (its only copies of some data could go
        nowhere) stays in the cluster, so no result is lost.
        """
        names = list(workers)
        if not names:
            return
        logger.info("%s: retiring workers %s", self.cluster.name, names)
        # A worker that has not arrived yet is not the scheduler's to retire.
        arrived = {str(nm) for nm in self.observed}
        s = self._local()
        if s is not None:
            retired = await s.retire_workers(names=names, remove=True, close_workers=False)
        else:
            retired = await self.cluster.scheduler_request(
                m.RetireWorkers(op="retire_workers", names=names, remove=True, close_workers=False)
            )
        gone = {str(info.get("name")) for info in retired.values()}
        leaving = [nm for nm in names if str(nm) in gone or str(nm) not in arrived]
        # The cluster closes whole entries: one whose worker the scheduler kept stays, with all its workers.
        kept = {str(nm) for nm in names if str(nm) in arrived and str(nm) not in gone}
        for members in self.cluster.worker_groups().values() if kept else ():
            staying = {str(w) for w in members}
            if staying & kept:
                leaving = [nm for nm in leaving if str(nm) not in staying]
        await asyncio.shield(self.cluster.scale_down(leaving))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: minimum={self.minimum} maximum={self.maximum}>"
