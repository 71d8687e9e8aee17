"""The user's code that submits a graph, for the scheduler's computations.

With ``distributed.diagnostics.computations.nframes`` above 0 (0 by default,
as in dask: nothing is collected), a graph's first message carries the source
of that many frames of the caller's stack, innermost first.  Frames of the
libraries in between (modules matching ``ignore-modules``, files matching
``ignore-files``: dask, distributed, pytest, ...) are skipped, so the frames
are the user's.  The source is the frame's whole module or cell, with the
line it was at: ``(code, lineno_frame, lineno_relative, filename)``.
"""

from __future__ import annotations

import inspect
import re
import sys
from types import FrameType

import dask.config

__all__ = ["computation_code"]

#: Stands for the source of a frame that has none to read (built in code, a deleted file).
NO_SOURCE = "<Code not available>"


def _pattern(key: str) -> re.Pattern[str] | None:
    entries = dask.config.get(key) or []
    if not isinstance(entries, (list, tuple)) or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"{key} must be a list of regular expressions, got {entries!r}")
    return re.compile("|".join(f"(?:{e})" for e in entries)) if entries else None


def computation_code(nframes: int | None = None) -> tuple[tuple[str, int, int, str], ...]:
    """The source of the ``nframes`` innermost user frames calling this (config's nframes when None).

    Raises
    ------
    ValueError
        For a negative ``nframes`` or patterns that are not a list of strings, naming the key.
    """
    if nframes is None:
        nframes = int(dask.config.get("distributed.diagnostics.computations.nframes"))
    if nframes < 0:
        raise ValueError(f"distributed.diagnostics.computations.nframes must be 0 or more, got {nframes}")
    if nframes == 0:
        return ()
    modules = _pattern("distributed.diagnostics.computations.ignore-modules")
    files = _pattern("distributed.diagnostics.computations.ignore-files")
    found: list[tuple[str, int, int, str]] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and len(found) < nframes:
        code = frame.f_code
        if code.co_name in ("_run_module_code", "_run_code"):
            break  # below is the interpreter starting a script
        module = str(frame.f_globals.get("__name__", ""))
        skipped = (modules is not None and modules.match(module)) or (
            files is not None and files.match(code.co_filename)
        )
        if not skipped:
            try:
                source = inspect.getsource(frame)
            except (OSError, TypeError):
                source = NO_SOURCE
            found.append((source, frame.f_lineno, frame.f_lineno - code.co_firstlineno, code.co_filename))
        frame = frame.f_back
    return tuple(found)
