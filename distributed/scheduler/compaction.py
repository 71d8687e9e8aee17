"""Compacting the scheduler's journal: which messages a successor still needs, and which parts of them.

A long-lived cluster that always holds some task never empties its journal,
and a successor would replay every message since the start.  Compaction keeps
the journal to what builds the present state:

Messages about tasks
    Each key a message names plays a part in it: a task's definition (a
    graph's task, scattered data), a client's wanting it (a graph's keys,
    ``client-desires-keys``, scattered data), or a client's letting go of it
    (``client-releases-keys``, a cancel).  Compaction keeps, of each key the
    scheduler still holds, its first definition (a key names one computation,
    and dependents come after what they depend on) and, for each client that
    wants it now, the last of that client's wants; every other part is
    struck out of its message.  A forgotten key has no dependent left (a task
    is forgotten only once its dependents are), so striking it everywhere
    leaves a graph closed under dependencies, as if it had never been.  Where
    a client's want must stay though the client wants the key no more (it
    comes with a definition, in scattered data), its later releases stay too.
    A message left naming nothing is deleted; the parts of a graph sent in
    several are deleted together, so that its final part still ends it.  A
    client's removal is deleted once no message kept names that client.
Outcomes of tasks
    Of a task that erred and is erred now, its last error is kept; of one
    that spent retries, the last count left, if the task has that many left
    now (else it is another computation under the same key).  A client's
    retrying of keys is deleted: the errors kept are those that came after.
Named state
    Of the published datasets, variables, events and plugins, and of the
    leases of locks and semaphores, only the message that made each name's
    present value is kept (a refused publication, an
    idempotent registration of a name taken and a deletion make none).  Of
    a queue, the items taken are struck with the takings, oldest first (a
    queue hands its items out in order).

Compaction looks only at messages already applied: one that is being applied
(a large graph handled in steps) has keys the scheduler does not hold yet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from distributed.coordination.names import normalize_name
from distributed.protocol.messages import Key

if TYPE_CHECKING:
    from distributed.scheduler.state import SchedulerState

__all__ = [
    "KEYED_OPS",
    "OUTCOME_OPS",
    "CompactionPlan",
    "JournalRow",
    "PresentState",
    "PresentTasks",
    "Struck",
    "describe_row",
    "plan_compaction",
    "strike_keys",
]

#: The messages about tasks that name keys, and so can have forgotten keys struck out.
KEYED_OPS: Final[frozenset[str]] = frozenset(
    {"update-graph", "client-desires-keys", "client-releases-keys", "update-data", "cancel-keys"}
)

#: The records of tasks' outcomes, of which the last of a key held may be kept.
OUTCOME_OPS: Final[frozenset[str]] = frozenset({"erred-before", "retried-before"})


class PresentState(Protocol):
    """What compaction asks of the scheduler's present state."""

    def held(self, key: Key) -> bool:
        """Whether the scheduler holds the task ``key``."""

    def wants(self, client: str | None, key: Key) -> bool:
        """Whether ``client`` wants the task ``key``."""

    def erred(self, key: Key) -> bool:
        """Whether the task ``key`` is erred."""

    def retries(self, key: Key) -> int:
        """How many retries the task ``key`` has left."""


#: The requests whose effect is the value of a name: op -> (family, what it does).
_NAMED_OPS: Final[Mapping[str, tuple[str, str]]] = {
    "publish_put": ("dataset", "set"),
    "publish_delete": ("dataset", "delete"),
    "variable_set": ("variable", "set"),
    "variable_delete": ("variable", "delete"),
    "register_scheduler_plugin": ("scheduler-plugin", "set"),
    "unregister_scheduler_plugin": ("scheduler-plugin", "delete"),
    "register_worker_plugin": ("worker-plugin", "set"),
    "unregister_worker_plugin": ("worker-plugin", "delete"),
    "event_set": ("event", "set"),
    "event_clear": ("event", "delete"),
    # A lease is its own name: of each held, its granting is kept.
    "lock_granted": ("lock", "set"),
    "lock_freed": ("lock", "delete"),
    "semaphore_granted": ("semaphore", "set"),
    "semaphore_freed": ("semaphore", "delete"),
}

#: The named ops whose name is a lease's: ``(name, id)``.
_LEASE_OPS: Final = frozenset({"lock_granted", "lock_freed", "semaphore_granted", "semaphore_freed"})


@dataclass(slots=True)
class JournalRow:
    """What compaction needs to know of one message of the journal, without reading it again.

    Parameters
    ----------
    op
        The message's operation.
    defines
        The keys whose tasks it defines (a graph's tasks, scattered data).
    wants
        The keys its client wants from it on.
    releases
        The keys its client lets go of.
    client
        The client it is about, if any.
    graph
        The id shared by the parts of a graph sent in several (``update-graph`` only).
    name
        The name whose value it sets (datasets, variables, plugins, queues), made hashable.
    replaces
        Whether setting a name taken replaces its value (a publication with ``override``, a plugin
        registered not idempotently, any variable) rather than leaving it.
    count
        How many items a queue's taking took; how many retries a task had left.
    opaque
        Whether the message could not be read as its operation's: it is kept as it is.
    """

    op: str
    defines: tuple[Key, ...] = ()
    wants: tuple[Key, ...] = ()
    releases: tuple[Key, ...] = ()
    client: str | None = None
    graph: str | None = None
    name: Hashable = None
    replaces: bool = True
    count: int = 0
    opaque: bool = False

    @property
    def weight(self) -> int:
        """What replaying it costs, roughly: one for the message and one per key it names."""
        return 1 + len(self.defines) + len(self.wants) + len(self.releases)

    def strike(self, struck: Struck) -> None:
        """Forget the parts ``struck`` of this message (see :func:`strike_keys`)."""
        self.defines = tuple(key for key in self.defines if key not in struck.defines)
        self.wants = tuple(key for key in self.wants if key not in struck.wants)
        self.releases = tuple(key for key in self.releases if key not in struck.releases)


@dataclass(slots=True, frozen=True)
class Struck:
    """The parts of one message to strike out: keys' definitions, wants and releases."""

    defines: frozenset[Key] = frozenset()
    wants: frozenset[Key] = frozenset()
    releases: frozenset[Key] = frozenset()


def _name(value: Any) -> Hashable:
    """A primitive's name as its extension keys it (raises TypeError for one that is not a name)."""
    name = normalize_name(value)
    hash(name)
    return name


def describe_row(op: str, msg: Mapping[str, Any]) -> JournalRow:
    """The :class:`JournalRow` of a message of operation ``op`` (opaque if it is not one: kept as it is)."""
    try:
        return _describe(op, msg)
    except (KeyError, TypeError, ValueError, AttributeError):
        client = msg.get("client") if isinstance(msg, Mapping) else None
        return JournalRow(op, client=client if isinstance(client, str) else None, opaque=True)


def _describe(op: str, msg: Mapping[str, Any]) -> JournalRow:
    client = msg.get("client")
    if op == "update-graph":
        defines = tuple(key for key, _ in msg["tasks"])
        return JournalRow(op, defines, tuple(msg["keys"]), client=client, graph=msg.get("graph"))
    if op == "client-desires-keys":
        return JournalRow(op, wants=tuple(msg["keys"]), client=client)
    if op in ("client-releases-keys", "cancel-keys"):
        return JournalRow(op, releases=tuple(msg["keys"]), client=client)
    if op == "update-data":
        keys = tuple(msg["who_has"])
        return JournalRow(op, keys, keys, client=client)
    if op == "remove-client":
        return JournalRow(op, client=client)
    if op in _NAMED_OPS:
        if op == "publish_put":
            replaces = bool(msg.get("override"))
        elif op in ("register_scheduler_plugin", "register_worker_plugin"):
            replaces = not msg.get("idempotent", False)
        else:
            replaces = True
        name = (msg["name"], msg["id"]) if op in _LEASE_OPS else msg.get("name")
        return JournalRow(op, name=_name(name), replaces=replaces)
    if op == "queue_put":
        return JournalRow(op, name=_name(msg.get("name")))
    if op == "queue_take":
        return JournalRow(op, name=_name(msg.get("name")), count=int(msg["n"]))
    if op in OUTCOME_OPS:
        return JournalRow(op, (msg["key"],), count=int(msg.get("retries", 0)))
    if op == "retry":
        return JournalRow(op, releases=tuple(msg["keys"]), client=client)
    return JournalRow(op)


@dataclass(slots=True)
class CompactionPlan:
    """What a compaction does: messages to delete, and parts to strike out of others."""

    delete: list[int] = field(default_factory=list)
    #: seq -> the parts to strike out of that message.
    strike: dict[int, Struck] = field(default_factory=dict)


def plan_compaction(rows: Mapping[int, JournalRow], present: PresentState, before: int) -> CompactionPlan:
    """Plan the compaction of the messages ``rows`` (seq -> row), of which those from ``before`` on are not applied yet.

    See the module's docstring for what is kept, given the ``present`` state.
    """
    plan = CompactionPlan()
    held, wants = present.held, present.wants
    plan.delete.extend(_outcomes_past(rows, present, before))
    keyed = sorted(seq for seq, row in rows.items() if row.op in KEYED_OPS and seq < before and not row.opaque)
    # The last message by which each client that wants a held key now came to want it.
    last_want: dict[tuple[str | None, Key], int] = {}
    for seq in reversed(keyed):
        row = rows[seq]
        for key in row.wants:
            pair = (row.client, key)
            if pair not in last_want and held(key) and wants(row.client, key):
                last_want[pair] = seq
    defined: set[Key] = set()
    kept_unwanted: set[tuple[str | None, Key]] = set()
    emptied: set[int] = set()
    for seq in keyed:
        row = rows[seq]
        client = row.client
        struck_defines: set[Key] = set()
        struck_wants: set[Key] = set()
        if row.op == "update-data":
            # A definition and a want in one: both stay, or neither.
            for key in row.defines:
                first = key not in defined and held(key)
                if first or last_want.get((client, key)) == seq:
                    defined.add(key)
                    if not wants(client, key):
                        kept_unwanted.add((client, key))
                else:
                    struck_defines.add(key)
                    struck_wants.add(key)
        else:
            for key in row.defines:
                if key in defined or not held(key):
                    struck_defines.add(key)
                else:
                    defined.add(key)
            struck_wants.update(key for key in row.wants if last_want.get((client, key)) != seq)
        struck_releases = {key for key in row.releases if (client, key) not in kept_unwanted}
        if struck_defines or struck_wants or struck_releases:
            plan.strike[seq] = Struck(frozenset(struck_defines), frozenset(struck_wants), frozenset(struck_releases))
        if (
            len(struck_defines) == len(set(row.defines))
            and len(struck_wants) == len(set(row.wants))
            and len(struck_releases) == len(set(row.releases))
        ):
            emptied.add(seq)
    # Messages naming nothing go, but a graph in parts goes whole or not at all.
    live_graphs = {(row.client, row.graph) for seq, row in rows.items() if row.graph is not None and seq not in emptied}
    clients_named: set[str | None] = set()
    for seq, row in rows.items():
        if row.op not in KEYED_OPS and not row.opaque:
            continue
        if seq in emptied and (row.graph is None or (row.client, row.graph) not in live_graphs):
            plan.delete.append(seq)
            plan.strike.pop(seq, None)
        else:
            clients_named.add(row.client)
    plan.delete.extend(
        seq for seq, row in rows.items() if row.op == "remove-client" and row.client not in clients_named
    )
    plan.delete.extend(_superseded(sorted(rows.items())))
    return plan


def _outcomes_past(rows: Mapping[int, JournalRow], present: PresentState, before: int) -> list[int]:
    """The records of tasks' outcomes that say nothing of the present, and the retrying of keys."""
    dead: list[int] = []
    last: dict[tuple[str, Key], int] = {}
    for seq in sorted(rows):
        row = rows[seq]
        if seq >= before or row.opaque:
            continue
        if row.op == "retry":
            dead.append(seq)
        elif row.op in OUTCOME_OPS:
            slot = (row.op, row.defines[0])
            if slot in last:
                dead.append(last[slot])
            last[slot] = seq
    for (op, key), seq in last.items():
        if (
            not present.held(key)
            or (op == "erred-before" and not present.erred(key))
            or (op == "retried-before" and present.retries(key) != rows[seq].count)
        ):
            dead.append(seq)
    return dead


def _superseded(rows: Iterable[tuple[int, JournalRow]]) -> list[int]:
    """The messages about names whose effect later ones undid, or that had none."""
    dead: list[int] = []
    current: dict[tuple[str, Hashable], int] = {}
    puts: dict[Hashable, list[int]] = defaultdict(list)
    taken: dict[Hashable, int] = defaultdict(int)
    for seq, row in rows:
        if row.opaque:
            continue
        named = _NAMED_OPS.get(row.op)
        if named is not None:
            family, action = named
            slot = (family, row.name)
            before = current.get(slot)
            if action == "delete":
                dead.append(seq)
                if before is not None:
                    dead.append(current.pop(slot))
            elif before is None or row.replaces:
                if before is not None:
                    dead.append(before)
                current[slot] = seq
            else:
                dead.append(seq)  # refused, or a no-op: the name was taken
        elif row.op == "queue_put":
            puts[row.name].append(seq)
        elif row.op == "queue_take":
            dead.append(seq)
            taken[row.name] += row.count
    for name, n in taken.items():
        dead.extend(puts[name][:n])
    return dead


def strike_keys(op: str, msg: Mapping[str, Any], struck: Struck) -> dict[str, Any]:
    """``msg`` (of operation ``op``) without the parts ``struck``."""
    out = dict(msg)
    if op == "update-graph":
        out["tasks"] = [(key, spec) for key, spec in msg["tasks"] if key not in struck.defines]
        out["keys"] = [key for key in msg["keys"] if key not in struck.wants]
        shuffles: Sequence[Mapping[str, Any]] | None = msg.get("shuffles")
        if shuffles:
            out["shuffles"] = [s for s in shuffles if s["barrier"] not in struck.defines]
    elif op == "update-data":
        for field_name in ("who_has", "nbytes", "types"):
            if field_name in msg:
                out[field_name] = {key: v for key, v in msg[field_name].items() if key not in struck.defines}
    elif op == "client-desires-keys":
        out["keys"] = [key for key in msg["keys"] if key not in struck.wants]
    else:
        out["keys"] = [key for key in msg["keys"] if key not in struck.releases]
    return out


class PresentTasks:
    """The scheduler's present tasks, as compaction asks after them (the :class:`PresentState` of a scheduler).

    Parameters
    ----------
    scheduler
        The scheduler.
    """

    def __init__(self, scheduler: SchedulerState) -> None:
        self.scheduler = scheduler

    def held(self, key: Key) -> bool:
        """Whether the scheduler holds the task ``key``."""
        return key in self.scheduler.tasks

    def wants(self, client: str | None, key: Key) -> bool:
        """Whether ``client`` wants the task ``key``."""
        s = self.scheduler
        cs = s.clients.get(client) if client is not None else None
        ts = s.tasks.get(key)
        return cs is not None and ts is not None and cs in ts.who_wants

    def erred(self, key: Key) -> bool:
        """Whether the task ``key`` is erred."""
        ts = self.scheduler.tasks.get(key)
        return ts is not None and ts.state == "erred"

    def retries(self, key: Key) -> int:
        """How many retries the task ``key`` has left."""
        ts = self.scheduler.tasks.get(key)
        return ts.retries if ts is not None else 0
