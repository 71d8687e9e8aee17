"""The messages of a liveness link: a process that vouches for workers <-> the scheduler.

A nanny vouches for the worker process it runs, a worker without a nanny
for itself (see :mod:`distributed.liveness`).  The link is one connection
per process and scheduler, opened with :class:`LivenessHello`; after the
reply, the vouching side sends :class:`Vouch` and :class:`Stopped`, and the
scheduler sends :class:`LivenessPing` s, which only the peer's kernel needs
to acknowledge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict


class LivenessHello(TypedDict):
    """Open a liveness link; ``process`` names the sending process (see ``distributed.liveness.process_token``)."""

    op: Literal["liveness"]
    process: str


class LivenessHelloReply(TypedDict):
    """Whether the scheduler watches this link and, if so, how.

    ``watch`` is False when liveness is off (``distributed.scheduler.liveness.enabled``):
    the link is then closed.  ``stopped_timeout`` is how long a worker process
    may stay stopped before its nanny reports it.  ``ping_interval`` is how
    often the scheduler pings (0: never, for a link from its own process): a
    link that hears none for a few intervals is taken for cut, and opened anew.
    """

    status: Literal["OK"]
    watch: bool
    stopped_timeout: float
    ping_interval: float


class Vouch(TypedDict):
    """The workers this link answers for now (the whole set, replacing the last one sent)."""

    op: Literal["vouch"]
    workers: Sequence[str]


class Stopped(TypedDict):
    """These workers' processes have been stopped (SIGSTOP, a debugger) for ``seconds``: remove them."""

    op: Literal["stopped"]
    workers: Sequence[str]
    seconds: float


class LivenessPing(TypedDict):
    """Scheduler -> vouching process: data for the peer's kernel to acknowledge, read and dropped there."""

    op: Literal["ping"]
