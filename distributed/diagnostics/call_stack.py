"""Where running tasks are in their code: the call stack of each task's thread (``Client.call_stack``)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Collection
from typing import Any

__all__ = ["task_call_stacks"]


def task_call_stacks(dask_worker: Any, keys: Collection[Any] | None = None) -> dict[Any, list[str]]:
    """The call stack of each task running on ``dask_worker`` (of ``keys`` only, when given), innermost last.

    Run on each worker by ``Client.run``.  Each stack is a list of lines as
    ``traceback.format_stack`` writes them.
    """
    wanted = set(keys) if keys is not None else None
    frames = sys._current_frames()
    stacks: dict[Any, list[str]] = {}
    for ident, key in list(dask_worker.active_threads.items()):
        frame = frames.get(ident)
        if frame is None or (wanted is not None and key not in wanted):
            continue
        stacks[key] = traceback.format_stack(frame)
    return stacks
