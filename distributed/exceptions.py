"""The exceptions users see, in one flat hierarchy."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

__all__ = [
    "ActorLostError",
    "CancelledError",
    "CancelledFuturesGroup",
    "CommClosedError",
    "FutureCancelledError",
    "FutureUnknownError",
    "FuturesCancelledError",
    "InvalidTransition",
    "KilledWorker",
    "LostDataError",
    "NoValidWorkerError",
    "Reschedule",
    "TimeoutError",
    "UnknownWorkerError",
    "keep_cause_chain",
]

#: What a cancelled future raises: an ``Exception`` (``except Exception``
#: catches it), unlike ``asyncio.CancelledError``, which cancels coroutines.
CancelledError = concurrent.futures.CancelledError
TimeoutError = asyncio.TimeoutError


class CommClosedError(IOError):
    """The comm was closed (by us, by the peer, or by a broken connection)."""


class InvalidTransition(RuntimeError):
    """A change of a task's state that its state machine's transition table does not allow.

    The scheduler's and the worker's machines raise it (the scheduler in
    validation mode, or where a transition lacks the report it needs).

    Parameters
    ----------
    key
        The task's key.
    start, finish
        The state the task is in, and the one asked for.
    why
        What made it impossible, or the stimulus that asked for it.
    """

    def __init__(self, key: object, start: str, finish: str, why: str) -> None:
        super().__init__(f"Invalid transition of {key!r}: {start} -> {finish} ({why})")
        self.key = key
        self.start = start
        self.finish = finish
        self.why = why


class FutureCancelledError(CancelledError):
    """A future's key was cancelled (by a user, or because it could not run).

    Parameters
    ----------
    key
        The task's key.
    reason
        Why, as text.
    """

    def __init__(self, key: Any, reason: str | None = None, msg: str | None = None) -> None:
        self.key = key
        self.reason = reason or "unknown"
        self.msg = msg
        text = f"{key} cancelled for reason: {self.reason}."
        if msg:
            text += f"\nMessage: {msg}"
        super().__init__(text)

    def __reduce__(self) -> Any:
        return (type(self), (self.key, self.reason, self.msg))


class CancelledFuturesGroup:
    """The futures of a :class:`FuturesCancelledError` that were cancelled for one reason.

    Parameters
    ----------
    errors
        Each future's :class:`FutureCancelledError`.
    reason
        The reason they share.
    """

    __slots__ = ("errors", "reason")

    def __init__(self, errors: list[FutureCancelledError], reason: str) -> None:
        self.errors = errors
        self.reason = reason

    def __str__(self) -> str:
        keys = [e.key for e in self.errors]
        msg = next((e.msg for e in self.errors if e.msg), None)
        text = f"{len(keys)} future(s) cancelled for reason: {self.reason}."
        if msg:
            text += f"\nMessage: {msg}"
        return f"{text}\nKeys: {keys}"

    def __reduce__(self) -> Any:
        return (type(self), (self.errors, self.reason))


class FuturesCancelledError(CancelledError):
    """Some of the futures waited on were cancelled; raised by :func:`distributed.wait`.

    Parameters
    ----------
    error_groups
        The cancelled futures, grouped by reason (kept largest group first).

    Examples
    --------
    >>> try:  # doctest: +SKIP
    ...     wait(futures)
    ... except FuturesCancelledError as e:
    ...     cancelled = [err.key for group in e.error_groups for err in group.errors]
    """

    def __init__(self, error_groups: list[CancelledFuturesGroup]) -> None:
        self.error_groups = sorted(error_groups, key=lambda g: -len(g.errors))
        n = sum(len(g.errors) for g in self.error_groups)
        super().__init__("\n".join([f"{n} future(s) cancelled:", *map(str, self.error_groups)]))

    @classmethod
    def of(cls, errors: list[FutureCancelledError]) -> FuturesCancelledError:
        """The error for these cancelled futures' errors, grouped by their reason."""
        by_reason: dict[str, list[FutureCancelledError]] = {}
        for e in errors:
            by_reason.setdefault(e.reason, []).append(e)
        return cls([CancelledFuturesGroup(errs, reason) for reason, errs in by_reason.items()])

    def __reduce__(self) -> Any:
        return (type(self), (self.error_groups,))


class KilledWorker(Exception):
    """A task was running on too many workers that died.

    Parameters
    ----------
    task
        The task's key.
    last_worker
        The address of the last worker that died running it.
    allowed_failures
        How many deaths were allowed.
    """

    def __init__(self, task: Any, last_worker: str, allowed_failures: int) -> None:
        self.task = task
        self.last_worker = last_worker
        self.allowed_failures = allowed_failures
        super().__init__(
            f"Attempted to run task {task!r} on {allowed_failures + 1} different workers, "
            f"but all those workers died while running it. The last worker was {last_worker}."
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.task, self.last_worker, self.allowed_failures))


class ActorLostError(ValueError):
    """The worker holding an actor left: the actor and its state are gone.

    A ``ValueError``, as dask.distributed raises for calls on such an actor.

    Parameters
    ----------
    key
        The actor's key.
    worker
        The address of the worker that held it.
    """

    def __init__(self, key: Any, worker: str) -> None:
        self.key = key
        self.worker = worker
        super().__init__(f"Worker holding Actor {key!r} was lost ({worker}): the actor and its state are gone")

    def __reduce__(self) -> Any:
        return (type(self), (self.key, self.worker))


class LostDataError(CancelledError):
    """Data held only by workers that left, and which cannot be recomputed.

    A ``CancelledError`` (``concurrent.futures``'): dask cancels such a future,
    and code written for it catches that; this says why.
    """


class FutureUnknownError(TimeoutError):
    """A future put into a Variable or Queue whose key the scheduler does not know (it was cancelled or released).

    A ``TimeoutError``: dask.distributed waits for such a key until the call's
    timeout passes, and code written for it catches that; the scheduler here
    knows at once that the key will not come, and says so.
    """


class UnknownWorkerError(KeyError, ValueError):
    """A request named workers the scheduler does not have.

    A ``KeyError``, as dask.distributed raises for ``rebalance(workers=...)``,
    and a ``ValueError`` (what this package raised before).
    """

    def __str__(self) -> str:
        # A KeyError's text is the repr of its argument: keep the message readable.
        return str(self.args[0]) if self.args else ""


class NoValidWorkerError(Exception):
    """A task may run only on workers that left the cluster for good (retired), or no worker ran it in time.

    The second: ``distributed.scheduler.no-workers-timeout`` passed while no
    worker could run the task (its restrictions, or no worker running at all).

    Parameters
    ----------
    task
        The task's key.
    workers
        The workers it was restricted to.
    reason
        Why they are gone.
    """

    def __init__(self, task: Any, workers: Any, reason: str = "retired") -> None:
        self.task = task
        self.workers = workers
        self.reason = reason
        super().__init__(
            f"Task {task!r} may run only on {workers} (workers=..., allow_other_workers=False), "
            f"and no such worker is left: {reason}."
            if workers
            else f"Task {task!r} found no worker to run it: {reason}."
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.task, self.workers, self.reason))


class Reschedule(Exception):
    """Raise inside a task to have the scheduler run it again elsewhere."""


def keep_cause_chain(exc: BaseException) -> BaseException:
    """Have pickling of ``exc`` carry its ``__cause__``/``__context__`` chain.

    Plain pickling of an exception keeps only its arguments and attributes;
    this registers a reducer (tblib's) for the classes along ``exc``'s chain,
    in this process, so that the re-raised exception on the other side
    chains as the original did.  Call it before serialising a task's error.
    Returns ``exc``.
    """
    import tblib.pickling_support

    try:
        tblib.pickling_support.install(exc)
    except Exception:
        # An exotic exception: it still travels, without its chain.
        pass
    return exc
