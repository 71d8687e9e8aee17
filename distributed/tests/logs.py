"""What a logger of this package writes, caught for a test.

The ``distributed`` logger writes to stderr through a handler of its own and
does not propagate to the root logger, where pytest's ``caplog`` listens.
pytest also puts its handler on loggers that do not propagate, but only on
those that do not propagate when the test starts: whether a record reaches
``caplog`` then depends on what ran before. A handler put on the logger itself
catches every record that logger passes, whatever the order of the tests.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


class _Keep(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self, level: int, into: list[logging.LogRecord]) -> None:
        super().__init__(level)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@contextlib.contextmanager
def caught_logs(name: str, level: int = logging.WARNING) -> Iterator[list[logging.LogRecord]]:
    """The records at ``level`` or above that logger ``name`` (or one below it) logs within the block.

    The logger's level is lowered to ``level`` for the block when it would drop
    such records, and restored afterwards.
    """
    records: list[logging.LogRecord] = []
    logger = logging.getLogger(name)
    handler = _Keep(level, records)
    old_level = logger.level
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def messages(records: list[logging.LogRecord]) -> list[str]:
    """Each record's message, formatted."""
    return [r.getMessage() for r in records]
