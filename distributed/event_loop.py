"""``distributed.admin.event-loop``: which event loop servers and clients run on.

``tornado`` (dask's default) and ``asyncio`` both mean asyncio's own loop:
tornado's IOLoop runs on it (``Client.loop`` is one).  ``uvloop`` makes
asyncio's event-loop policy uvloop's when ``distributed`` is imported, so
that loops made from then on (``asyncio.run``, the client's loop thread, the
CLIs, worker processes) are uvloop's.  A server or client that starts on
another loop while the key says ``uvloop`` (the key was set after the loop
was made, or uvloop is not installed) refuses to start, naming the key.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any, Final

import dask.config

__all__ = ["EVENT_LOOPS", "check_event_loop", "event_loop_setting", "install_event_loop_policy"]

#: The values the key takes.
EVENT_LOOPS: Final = ("tornado", "asyncio", "uvloop")

_KEY: Final = "distributed.admin.event-loop"


def event_loop_setting() -> str:
    """The key's value.

    Raises
    ------
    ValueError
        For a value that names no event loop.
    """
    value = dask.config.get(_KEY, "tornado")
    if value not in EVENT_LOOPS:
        raise ValueError(f"{_KEY} must be one of {', '.join(EVENT_LOOPS)}; got {value!r}")
    return str(value)


def _uvloop() -> Any:
    try:
        return importlib.import_module("uvloop")
    except ImportError as e:
        raise ValueError(f"{_KEY} is 'uvloop', but uvloop is not installed ({e})") from e


def install_event_loop_policy() -> None:
    """Make uvloop's policy asyncio's when the key asks for it (on import; a bad setting waits for a start)."""
    try:
        if event_loop_setting() == "uvloop":
            asyncio.set_event_loop_policy(_uvloop().EventLoopPolicy())
    except ValueError:
        pass  # said by check_event_loop when something starts: importing must not fail


def check_event_loop(what: str) -> None:
    """Refuse to start ``what`` on a loop other than the key's.

    Raises
    ------
    ValueError
        For a bad value, or ``uvloop`` without uvloop installed.
    RuntimeError
        When the key is ``uvloop`` and the running loop is not uvloop's.
    """
    if event_loop_setting() != "uvloop":
        return
    loop = asyncio.get_running_loop()
    if not isinstance(loop, _uvloop().Loop):
        raise RuntimeError(
            f"{what} runs on {type(loop).__name__}, but {_KEY} is 'uvloop': set the key before the event loop "
            "is made (in a config file or DASK_DISTRIBUTED__ADMIN__EVENT_LOOP, before importing distributed)"
        )
