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
of datasets, variables, queues and plugins stay.  A scheduler that always holds
some task compacts its journal instead (:meth:`Journal.compact`, see
:mod:`distributed.scheduler.compaction`) each time what was written since the
last compaction outweighs what that one kept, so that the journal stays within
about twice what describes the present, at a cost per message written that
does not grow with the journal.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgpack

from distributed.protocol.framing import dumps, loads
from distributed.scheduler.compaction import JournalRow, PresentState, describe_row, plan_compaction, strike_keys

logger = logging.getLogger(__name__)

__all__ = ["EXTENSION_OPS", "JOURNALED_REQUESTS", "JOURNALED_STREAM_OPS", "TASK_OPS", "Journal"]

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
        "retry",
        "event_set",
        "event_clear",
    }
)

#: What extensions keep in the journal as it happens, replayed by their ``replay(op, msg)``: op -> extension.
EXTENSION_OPS: Final[Mapping[str, str]] = {
    "queue_put": "queues",
    "queue_take": "queues",
    "lock_granted": "locks",
    "lock_freed": "locks",
    "semaphore_granted": "semaphores",
    "semaphore_freed": "semaphores",
}

#: The messages about tasks (what :meth:`Journal.forget_task_messages` deletes).
TASK_OPS: Final[frozenset[str]] = JOURNALED_STREAM_OPS | {
    "update-data",
    "cancel-keys",
    "remove-client",
    "retry",
    "erred-before",
    "retried-before",
}

#: The least weight (messages and the keys they name) written before the journal is compacted.
COMPACT_AFTER: Final = 10_000

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
        self.has_messages = self._holds_messages()
        #: Whether it may hold messages about tasks (so that :meth:`forget_task_messages` costs nothing
        #: when it does not).
        self.has_task_messages = self.has_messages
        #: What compaction needs to know of each message: seq -> row.  Messages of a predecessor
        #: are described as :meth:`messages` reads them.
        self.rows: dict[int, JournalRow] = {}
        #: The messages recorded and not yet applied (see :meth:`applied`).
        self._applying: set[int] = set()
        #: The weight of :attr:`rows`, and what the last compaction left.
        self.weight = 0
        self._weight_kept = 0
        #: How many compactions ran, for the log and the tests.
        self.compactions = 0

    def record(self, op: str, msg: Mapping[str, Any], *, applying: bool = False) -> int:
        """Keep ``msg`` (a message of operation ``op``), after those kept before it; return its number.

        ``applying``: the message is applied after this returns, and :meth:`applied`
        says when that is over (compaction leaves it alone till then).
        """
        cursor = self._db.execute("INSERT INTO messages (op, body) VALUES (?, ?)", (op, _encode(msg)))
        seq = cursor.lastrowid
        assert seq is not None
        self._describe(seq, op, msg)
        if applying:
            self._applying.add(seq)
        self.has_messages = True
        if op in TASK_OPS:
            self.has_task_messages = True
        return seq

    def applied(self, seq: int) -> None:
        """The message numbered ``seq`` (recorded with ``applying``) has been applied."""
        self._applying.discard(seq)

    def _describe(self, seq: int, op: str, msg: Mapping[str, Any]) -> None:
        row = describe_row(op, msg)
        self.rows[seq] = row
        self.weight += row.weight

    def messages(self) -> Iterator[tuple[str, Any]]:
        """The messages kept, oldest first, as ``(op, message)``; serialised values stay serialised."""
        cursor = self._db.execute("SELECT seq, op, body FROM messages ORDER BY seq")
        for seq, op, body in cursor:
            msg = _decode(body)
            if seq not in self.rows:
                self._describe(seq, op, msg)
            yield op, msg

    def forget_task_messages(self) -> None:
        """Delete the messages about tasks: the scheduler holds no task they describe."""
        if self.has_task_messages:
            marks = ", ".join("?" * len(TASK_OPS))
            self._db.execute(f"DELETE FROM messages WHERE op IN ({marks})", tuple(TASK_OPS))
            for seq in [seq for seq, row in self.rows.items() if row.op in TASK_OPS]:
                self.weight -= self.rows.pop(seq).weight
            self._weight_kept = self.weight
            self.has_task_messages = False
            self.has_messages = self._holds_messages()

    def _holds_messages(self) -> bool:
        return bool(self._db.execute("SELECT EXISTS (SELECT 1 FROM messages)").fetchone()[0])

    @property
    def due_for_compaction(self) -> bool:
        """Whether what was written since the last compaction outweighs what it kept (and :data:`COMPACT_AFTER`)."""
        return self.weight >= max(COMPACT_AFTER, 2 * self._weight_kept)

    def compact(self, present: PresentState) -> int:
        """Delete what a successor would not need, given the scheduler's ``present`` state; return how many went.

        See :mod:`distributed.scheduler.compaction` for what is kept.
        """
        before = min(self._applying, default=max(self.rows, default=0) + 1)
        plan = plan_compaction(self.rows, present, before)
        self._db.execute("BEGIN")
        try:
            for seq, struck in plan.strike.items():
                (op, body) = self._db.execute("SELECT op, body FROM messages WHERE seq = ?", (seq,)).fetchone()
                body = _encode(strike_keys(op, _decode(body), struck))
                self._db.execute("UPDATE messages SET body = ? WHERE seq = ?", (body, seq))
            self._db.executemany("DELETE FROM messages WHERE seq = ?", [(seq,) for seq in plan.delete])
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        # The file changed: now the descriptions follow.
        for seq, struck in plan.strike.items():
            self.rows[seq].strike(struck)
        for seq in plan.delete:
            self.rows.pop(seq, None)
        self.weight = self._weight_kept = sum(row.weight for row in self.rows.values())
        self.compactions += 1
        self.has_messages = bool(self.rows) or self._holds_messages()
        return len(plan.delete)

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
        self.rows.clear()
        self.weight = self._weight_kept = 0
        self.has_messages = self.has_task_messages = False

    def close(self) -> None:
        """Close the file (what was recorded is kept)."""
        self._db.close()


def _encode(msg: Mapping[str, Any]) -> bytes:
    """A message as a row's body: this package's frames (serialised values as they came), in msgpack."""
    body: bytes = msgpack.packb([bytes(f) for f in dumps(msg)])
    return body


def _decode(body: bytes) -> Any:
    """A row's body as the message, serialised values left serialised."""
    return loads(msgpack.unpackb(body), deserialize=False)
