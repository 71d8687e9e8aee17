"""Keeping the garbage collector's full passes short while a process holds a large state.

The collector's thresholds and its frozen set (``gc.freeze``) are one for the
whole process, so one :class:`LargeStateGC` tends a process: the scheduler's
own (``dask scheduler``), or a worker's own (under a nanny, or ``dask worker``
with one worker).  Servers that share a process with others (an in-process
cluster) leave the collector as it is.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_PASS_STEPS", "GC_FREEZE_STEP", "LARGE_STATE_GEN0", "LargeStateGC"]

#: Tasks between two freezes of the garbage collector's view (see LargeStateGC):
#: a full collection then visits about ten thousand tasks' objects (a few milliseconds).
GC_FREEZE_STEP = 10_000

#: While the start's objects are frozen, a thaw collects in full (looking at them too) only once this many
#: steps' worth of tasks were made since the last full collection (see LargeStateGC).
FULL_PASS_STEPS = 10

#: Allocations between two collections of the youngest generation while the state is frozen (see LargeStateGC).
LARGE_STATE_GEN0 = 5_000


class LargeStateGC:
    """Keeps full garbage collections short while a server (the scheduler, a worker) holds many tasks.

    A full collection visits every tracked object: with a million tasks that
    is seconds with the event loop stopped.  Each time the number of tasks
    has grown by :data:`GC_FREEZE_STEP` since the last time, the young
    garbage is collected and the objects alive now are moved out of the
    collector's view (``gc.freeze``), so a full collection looks at what came
    since.  Once the state shrinks below one step, everything goes back into
    view (``gc.unfreeze``), unless the process's start was frozen (see
    :meth:`freeze_startup`).

    Frozen objects are still freed as soon as nothing refers to them, but a
    reference cycle among them is never freed while they stay frozen: the
    collector does not look at them.  A scheduler that holds a steady large
    state while work flows through it (tasks made and forgotten, workers
    coming and going) would keep each such cycle for good.  So once as many
    tasks were made since the last freeze as half the tasks held now (at
    least one step) without the state growing by a step, everything is put
    back into view, collected once and frozen again: one full pass per half
    a state's worth of new tasks, a cost per task that does not grow with the
    state.  A state that only drains makes no new tasks and gets no such
    pass; its cycles are freed when it goes back into view.

    The scheduler counts its workers in too, each as a number of tasks
    (``SchedulerStreams.tend_gc``); a worker alone in its process counts its
    tasks (``Worker.tend_gc_alone``).

    While frozen, the youngest generation is collected every
    :data:`LARGE_STATE_GEN0` allocations instead of Python's 700.  Each
    young object costs a collection a microsecond or two when a large heap
    spreads what it refers to over memory (10,000 workers: 0.4 ms per 700):
    the cost per object stays, but a collection every 700 objects also
    brings a middle collection every 7,000 and a full one every 70,000,
    which together took a fifth of the scheduler's time with 10,000 workers.
    A young collection then lasts 5 to 8 ms; at 10,000 allocations it lasted
    10 to 17 ms while a large graph came in with workers running it, and
    requests waited for it on top of the slices.  The threshold the process
    had is put back when everything is thawed.
    """

    def __init__(self, step: int = GC_FREEZE_STEP) -> None:
        self.step = step
        #: Number of tasks at the last freeze (0: nothing frozen by us).
        self.frozen_at = 0
        #: The scheduler's count of forgotten tasks at the last freeze.
        self.forgotten_at = 0
        #: Full collections run to free cycles among frozen objects.
        self.refreezes = 0
        #: The collector's thresholds before the first freeze (None: not frozen by us).
        self.saved_thresholds: tuple[int, int, int] | None = None
        #: The objects of the process's start are kept out of view (see :meth:`freeze_startup`).
        self.startup_frozen = False
        #: Tasks made (held and forgotten) at the last full collection.
        self.made_at_full_pass = 0

    def freeze_startup(self) -> None:
        """Move the objects alive now out of the collector's view, and keep them out.

        For a process that is the scheduler's own (``dask scheduler``), once
        it has started: its modules, the dashboard's models and the rest of
        what it made to start are some 160,000 objects that live as long as
        the process, and a full collection spent 50 ms looking at them each
        time, stopping the event loop.  A thaw (:meth:`tend`) leaves them out
        of view, and with them what was frozen of the state; only once
        :data:`FULL_PASS_STEPS` steps' worth of tasks were made since the last
        full collection does a thaw run one, and freeze them again.
        :meth:`release` puts them back into view.
        """
        gc.collect()
        gc.freeze()
        self.startup_frozen = True

    def tend(self, ntasks: int, forgotten: int) -> None:
        """Freeze, refreeze or unfreeze for ``ntasks`` tasks held and ``forgotten`` forgotten so far."""
        if ntasks >= self.frozen_at + self.step:
            self._freeze(ntasks, forgotten, generation=1)
        elif not self.frozen_at:
            return
        elif ntasks < self.step:
            self._thaw(ntasks + forgotten)
        elif forgotten - self.forgotten_at + ntasks - self.frozen_at >= max(self.step, ntasks // 2):
            # Made since the freeze: those forgotten meanwhile, and the growth.
            gc.unfreeze()
            self._freeze(ntasks, forgotten, generation=2)
            self.refreezes += 1
            self.made_at_full_pass = ntasks + forgotten

    def release(self) -> None:
        """Put everything back into the collector's view (the scheduler closes: its state goes)."""
        startup_frozen, self.startup_frozen = self.startup_frozen, False
        if self.frozen_at or startup_frozen:
            self._thaw(made=0)

    def _thaw(self, made: int) -> None:
        """The state shrank below a step (``made``: tasks made so far): back into view, the start's objects
        excepted."""
        self.frozen_at = 0
        if self.saved_thresholds is not None:
            gc.set_threshold(*self.saved_thresholds)
            self.saved_thresholds = None
        if not self.startup_frozen:
            gc.unfreeze()
        elif made - self.made_at_full_pass >= FULL_PASS_STEPS * self.step:
            # What was frozen with the start's objects stays out of view with them, until enough work has
            # flowed through that one full pass (over those objects too: 20 to 50 ms) costs little per task.
            # Then cycles among the records frozen alive and since dropped are freed.
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self.made_at_full_pass = made

    def _freeze(self, ntasks: int, forgotten: int, generation: int) -> None:
        # Garbage still waiting for the collector would be frozen with the living, and kept.
        gc.collect(generation)
        gc.freeze()
        if self.saved_thresholds is None:
            self.saved_thresholds = gen0, gen1, gen2 = gc.get_threshold()
            if 0 < gen0 < LARGE_STATE_GEN0:  # 0: the user switched automatic collection off
                gc.set_threshold(LARGE_STATE_GEN0, gen1, gen2)
        self.frozen_at = ntasks
        self.forgotten_at = forgotten
