"""The scheduler's journal: what only the scheduler knows, kept in SQLite so that another can take over.

Workers know what they hold, and clients which futures they have; what only
the scheduler knows is the graphs it was given and who wanted what.  The
:class:`Journal` keeps, in order, each message that changed that (a graph or
a part of one, a client's wanting or releasing keys, scattered data, a cancel,
a client gone, a published dataset, a variable's value, a plugin) before the
message is applied, and the addresses of the workers connected.  A scheduler started on the same file replays them (see
:mod:`distributed.scheduler.takeover`).

The store is SQLite in write-ahead-log mode: each message is a committed row,
written to the operating system before the scheduler acts on it, so that a
killed process loses nothing it acted on; a write torn by a crash is rolled
back by SQLite when the file is next opened.  The file is synced at SQLite's
checkpoints only (``synchronous=NORMAL``): the journal is made for the death
of the scheduler's process, not of its host's power.

When the scheduler holds no task any more, the messages about tasks so far
(graphs, wants, releases, scattered data, cancels, clients gone) say nothing a
successor needs, and are deleted (:meth:`Journal.forget_task_messages`); those
of datasets, variables, queues and plugins stay.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgpack

from distributed.protocol.framing import dumps, loads

logger = logging.getLogger(__name__)

__all__ = ["JOURNALED_REQUESTS", "JOURNALED_STREAM_OPS", "TASK_OPS", "Journal"]

#: The messages on a client's stream that change what only the scheduler knows.
JOURNALED_STREAM_OPS: Final[frozenset[str]] = frozenset({"update-graph", "client-desires-keys", "client-releases-keys"})

#: The requests that change what only the scheduler knows: kept as they come, replayed through their handlers.
#: (Worker plugins are kept for the workers that join later; the workers there have theirs already.)
JOURNALED_REQUESTS: Final[frozenset[str]] = frozenset(
    {
        "update-data",
        "cancel-keys",
        "publish_put",
        "publish_delete",
        "variable_set",
        "variable_delete",
        "register_scheduler_plugin",
        "unregister_scheduler_plugin",
        "register_worker_plugin",
        "unregister_worker_plugin",
    }
)

#: The messages about tasks (what :meth:`Journal.forget_task_messages` deletes).
TASK_OPS: Final[frozenset[str]] = JOURNALED_STREAM_OPS | {"update-data", "cancel-keys", "remove-client"}

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS workers (address TEXT PRIMARY KEY)",
)


class Journal:
    """An SQLite file holding the scheduler's messages in order, and its workers.

    Parameters
    ----------
    path
        The file (made if missing).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        # Autocommit (isolation_level None): each statement is its own transaction, committed when it returns.
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self._db.execute(statement)
        #: Whether the file holds messages: a scheduler started on it takes over.
        self.has_messages = self._db.execute("SELECT EXISTS (SELECT 1 FROM messages)").fetchone()[0] == 1
        #: Whether it may hold messages about tasks (so that :meth:`forget_task_messages` costs nothing
        #: when it does not).
        self.has_task_messages = self.has_messages

    def record(self, op: str, msg: Mapping[str, Any]) -> None:
        """Keep ``msg`` (a message of operation ``op``), after those kept before it."""
        frames = [bytes(f) for f in dumps(msg)]
        self._db.execute("INSERT INTO messages (op, body) VALUES (?, ?)", (op, msgpack.packb(frames)))
        self.has_messages = True
        if op in TASK_OPS:
            self.has_task_messages = True

    def messages(self) -> Iterator[tuple[str, Any]]:
        """The messages kept, oldest first, as ``(op, message)``; serialised values stay serialised."""
        cursor = self._db.execute("SELECT op, body FROM messages ORDER BY seq")
        for op, body in cursor:
            yield op, loads(msgpack.unpackb(body), deserialize=False)

    def forget_task_messages(self) -> None:
        """Delete the messages about tasks: the scheduler holds no task they describe."""
        if self.has_task_messages:
            marks = ", ".join("?" * len(TASK_OPS))
            self._db.execute(f"DELETE FROM messages WHERE op IN ({marks})", tuple(TASK_OPS))
            self.has_task_messages = False
            self.has_messages = self._db.execute("SELECT EXISTS (SELECT 1 FROM messages)").fetchone()[0] == 1

    def worker_joined(self, address: str) -> None:
        """Note a worker connected at ``address``."""
        self._db.execute("INSERT OR IGNORE INTO workers (address) VALUES (?)", (address,))

    def worker_left(self, address: str) -> None:
        """Note the worker at ``address`` gone."""
        self._db.execute("DELETE FROM workers WHERE address = ?", (address,))

    def workers(self) -> set[str]:
        """The addresses of the workers connected when the journal was last written."""
        return {row[0] for row in self._db.execute("SELECT address FROM workers")}

    def clear(self) -> None:
        """Delete every message and worker kept (the scheduler closed on purpose)."""
        self._db.execute("DELETE FROM workers")
        self._db.execute("DELETE FROM messages")
        self.has_messages = self.has_task_messages = False

    def close(self) -> None:
        """Close the file (what was recorded is kept)."""
        self._db.close()
