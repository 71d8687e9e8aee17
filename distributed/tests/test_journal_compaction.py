"""Compacting the scheduler's journal: the plan on its own, then a long-lived scheduler and its successor."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask.config
import pytest

from distributed import Client, Future, Queue, Scheduler, Variable, Worker, wait
from distributed.protocol.serialize import Serialized
from distributed.scheduler import journal as journal_module
from distributed.scheduler.compaction import (
    CompactionPlan,
    PresentTasks,
    Struck,
    describe_row,
    plan_compaction,
    strike_keys,
)
from distributed.scheduler.journal import Journal
from distributed.utils_test import async_poll_for, gen_test, inc, snapshot_journal


def _rows(*messages: tuple[str, dict[str, Any]]) -> dict[int, Any]:
    return {seq: describe_row(op, msg) for seq, (op, msg) in enumerate(messages, start=1)}


def _graph(client: str, keys: list[str], wanted: list[str], **extra: Any) -> tuple[str, dict[str, Any]]:
    tasks: list[tuple[str, dict[str, Any]]] = [
        (key, {"run_spec": None, "dependencies": [], "order": i}) for i, key in enumerate(keys)
    ]
    return "update-graph", {"op": "update-graph", "client": client, "tasks": tasks, "keys": wanted, **extra}


def _keys(op: str, client: str, keys: list[str]) -> tuple[str, dict[str, Any]]:
    return op, {"op": op, "client": client, "keys": keys}


# -- the plan ---------------------------------------------------------------------------------------
@dataclass
class _Present:
    """A present state made up for the plan: the keys held, who wants what, the erred, retries left."""

    keys: set[Any]
    wanted: set[tuple[Any, Any]] = field(default_factory=set)
    erred_keys: set[Any] = field(default_factory=set)
    retries_left: dict[Any, int] = field(default_factory=dict)

    def held(self, key: Any) -> bool:
        return key in self.keys

    def wants(self, client: str | None, key: Any) -> bool:
        return (client, key) in self.wanted

    def erred(self, key: Any) -> bool:
        return key in self.erred_keys

    def retries(self, key: Any) -> int:
        return self.retries_left.get(key, 0)


def _plan(
    rows: dict[int, Any], held: set[str], wants: set[tuple[str, str]], before: int | None = None, **present: Any
) -> CompactionPlan:
    return plan_compaction(rows, _Present(held, wants, **present), before or max(rows) + 1)


def test_forgotten_keys_are_struck_and_messages_naming_nothing_else_deleted() -> None:
    rows = _rows(
        _graph("c", ["a", "b"], ["a", "b"]),  # 1: b is held
        _keys("client-releases-keys", "c", ["a"]),  # 2: names a forgotten key only
        _graph("c", ["x"], ["x"]),  # 3: all forgotten
        _keys("client-desires-keys", "d", ["a", "b"]),  # 4: d wants neither now
    )
    plan = _plan(rows, {"b"}, {("c", "b")})
    assert sorted(plan.delete) == [2, 3, 4]
    assert plan.strike == {1: Struck(defines=frozenset({"a"}), wants=frozenset({"a"}))}


def test_of_a_key_held_throughout_its_first_definition_and_its_clients_last_wants_are_kept() -> None:
    rows = _rows(
        _graph("c", ["k"], ["k"]),  # 1: defines k
        _keys("client-releases-keys", "c", ["k"]),  # 2
        _graph("c", ["k"], ["k"]),  # 3: k again (the same computation)
        _keys("client-releases-keys", "c", ["k"]),  # 4
        _keys("client-desires-keys", "c", ["k"]),  # 5: why c wants k now
    )
    plan = _plan(rows, {"k"}, {("c", "k")})
    assert sorted(plan.delete) == [2, 3, 4]
    assert plan.strike == {1: Struck(wants=frozenset({"k"}))}


def test_scattered_data_a_client_let_go_of_keeps_its_release() -> None:
    rows = _rows(
        ("update-data", {"client": "c", "who_has": {"s": ["w"]}, "nbytes": {"s": 1}}),  # 1
        _graph("c", ["f"], ["f"]),  # 2: depends on s
        _keys("client-releases-keys", "c", ["s"]),  # 3: s stays, for f
    )
    plan = _plan(rows, {"s", "f"}, {("c", "f")})
    assert plan.delete == [] and plan.strike == {}


def test_a_client_removed_is_forgotten_once_no_message_names_it() -> None:
    rows = _rows(
        _graph("gone", ["a"], ["a"]),  # 1
        ("remove-client", {"client": "gone"}),  # 2
        _graph("stays", ["b"], ["b"]),  # 3
        ("update-data", {"client": "kept", "who_has": {"s": ["w"]}, "nbytes": {"s": 1}}),  # 4: s is held
        ("remove-client", {"client": "kept"}),  # 5: a message naming it is kept
    )
    plan = _plan(rows, {"b", "s"}, {("stays", "b")})
    assert sorted(plan.delete) == [1, 2]


def test_messages_not_yet_applied_are_left_alone() -> None:
    rows = _rows(_graph("c", ["a"], ["a"]), _graph("c", ["b"], ["b"]))
    plan = _plan(rows, set(), set(), before=2)
    assert plan.delete == [1] and not plan.strike


def test_the_parts_of_a_graph_go_together() -> None:
    rows = _rows(
        _graph("c", ["a"], [], graph="g"),  # 1: held
        _graph("c", ["b"], ["a", "b"], graph="g", final=True),  # 2: ends g
        _graph("c", ["x"], [], graph="h"),  # 3
        _graph("c", ["y"], ["x", "y"], graph="h", final=True),  # 4: all of h forgotten
    )
    plan = _plan(rows, {"a"}, {("c", "a")})
    assert sorted(plan.delete) == [3, 4]
    assert plan.strike == {2: Struck(defines=frozenset({"b"}), wants=frozenset({"b"}))}


def test_of_named_state_only_what_made_the_present_value_is_kept() -> None:
    def put(name: str, override: bool) -> tuple[str, dict[str, Any]]:
        return "publish_put", {"op": "publish_put", "name": name, "keys": [], "data": None, "override": override}

    rows = _rows(
        put("d", False),  # 1: replaced by 3
        put("d", False),  # 2: refused (taken)
        put("d", True),  # 3: kept
        put("e", False),  # 4: deleted by 5
        ("publish_delete", {"op": "publish_delete", "name": "e"}),  # 5
        ("variable_set", {"op": "variable_set", "name": "v", "item": 1}),  # 6: replaced
        ("variable_set", {"op": "variable_set", "name": "v", "item": 2}),  # 7: kept
        ("register_scheduler_plugin", {"name": "p", "plugin": None}),  # 8: kept
        ("register_scheduler_plugin", {"name": "p", "plugin": None, "idempotent": True}),  # 9: no-op
        ("queue_put", {"name": "q", "maxsize": 0, "item": 1}),  # 10: taken
        ("queue_put", {"name": "q", "maxsize": 0, "item": 2}),  # 11: taken
        ("queue_take", {"name": "q", "maxsize": 0, "n": 2}),  # 12
        ("queue_put", {"name": "q", "maxsize": 0, "item": 3}),  # 13: kept
    )
    plan = _plan(rows, set(), set())
    assert sorted(plan.delete) == [1, 2, 4, 5, 6, 9, 10, 11, 12]


def test_striking_keys_keeps_the_rest_of_a_message() -> None:
    spec = {"run_spec": Serialized({"serializer": "pickle"}, [b"x"]), "dependencies": ["a"], "order": 1}
    msg = {"op": "update-graph", "client": "c", "tasks": [("a", spec), ("b", spec)], "keys": ["a", "b"]}
    out = strike_keys("update-graph", msg, Struck(defines=frozenset({"a"}), wants=frozenset({"b"})))
    assert out["tasks"] == [("b", spec)] and out["keys"] == ["a"] and out["client"] == "c"
    data = {"op": "update-data", "client": "c", "who_has": {"a": ["w"], "b": ["w"]}, "nbytes": {"a": 1, "b": 2}}
    assert strike_keys("update-data", data, Struck(defines=frozenset({"a"})))["nbytes"] == {"b": 2}


def test_a_compacted_journal_reads_back_struck_and_in_order(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.db"))
    journal.record(*_graph("c", ["a", "b"], ["a", "b"]))
    journal.record(*_keys("client-releases-keys", "c", ["a"]))
    journal.record(*_keys("client-desires-keys", "d", ["b"]))
    assert journal.compact(_Present({"b"}, {("c", "b")})) == 2
    journal.close()
    reopened = Journal(str(tmp_path / "j.db"))
    read = list(reopened.messages())
    assert [op for op, _ in read] == ["update-graph"]
    assert [key for key, _ in read[0][1]["tasks"]] == ["b"] and read[0][1]["keys"] == ("b",)
    assert reopened.weight == sum(row.weight for row in reopened.rows.values()) == 1 + 1 + 1
    reopened.close()


# -- a long-lived scheduler --------------------------------------------------------------------------
def _wanted_by(s: Scheduler) -> dict[Any, set[str]]:
    return {key: {cs.client_key for cs in ts.who_wants} for key, ts in s.tasks.items()}


@gen_test(timeout=120)
async def test_a_scheduler_that_always_holds_tasks_keeps_its_journal_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds of work (the same keys again and again, some results kept) with one future held throughout.

    The journal is compacted as it goes; a successor replaying it builds what
    the scheduler held, no more and no less, and the results kept are right.
    """
    monkeypatch.setattr(journal_module, "COMPACT_AFTER", 60)
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    async with Scheduler(journal=first, dashboard=False, port=0, validate=True) as s:
        async with Worker(s.address, nthreads=2) as w, Client(s.address, asynchronous=True) as c:
            keep = c.submit(inc, 0, key="keep")
            kept: list[Future] = []
            queue = Queue("q", client=c)
            for i in range(40):
                leaves = c.map(inc, range(5), key=[f"leaf-{i % 7}-{j}" for j in range(5)])
                total = c.submit(sum, leaves, key=f"total-{i % 7}")
                [scattered] = await c.scatter([i])
                await wait([total, scattered])
                await Variable("v", client=c).set(total)
                await queue.put(i)
                if i % 10 == 9:
                    kept.append(total)
                    await queue.get()
                del leaves, total, scattered
            await async_poll_for(lambda: len(s.tasks) <= 1 + 4 * 7, timeout=20)
            await async_poll_for(lambda: not any(str(k).startswith("leaf-") for k in w.data), timeout=20)
            journal = s.journal
            assert journal is not None
            assert journal.compactions > 0
            # Far fewer than the 40 rounds' some 200 messages: what describes the present, and the last round.
            # The 40 rounds wrote some 250 messages; compacted as they went, fewer than half are left.
            assert len(journal.rows) < 120, len(journal.rows)
            # What describes the present: the 36 items queued, a variable, and 9 graphs (the future
            # held throughout, 4 totals kept, and the leaves they were computed from).
            journal.compact(PresentTasks(s))
            assert len(journal.rows) <= 36 + 1 + 9, sorted(row.op for row in journal.rows.values())
            snapshot_journal(first, second)
            expected = _wanted_by(s)
            held = dict(w.data)
            client_id = c.id
            want = {"keep": 1} | {f.key: sum(range(1, 6)) for f in kept}
            assert await c.gather([keep, *kept]) == list(want.values())
    with dask.config.set({"distributed.scheduler.recovery-timeout": "0.2s"}):
        async with Scheduler(journal=second, dashboard=False, port=0, validate=True) as s2:
            async with Worker(s2.address, nthreads=1, data=held):
                assert s2.takeover is not None
                await s2.takeover.done.wait()
                assert set(s2.tasks) == set(expected)
                assert {k: v for k, v in _wanted_by(s2).items() if v} == {k: v for k, v in expected.items() if v}
                assert all(s2.tasks[key].state == "memory" for key in want)
                assert s2.tasks["keep"].who_wants == {s2.clients[client_id]}
                async with Client(s2.address, asynchronous=True) as c2:
                    assert await c2.gather([Future(key, client=c2) for key in want]) == list(want.values())
                    assert await Queue("q", client=c2).qsize() == 36
                    assert (await Variable("v", client=c2).get(timeout=5)).key == "total-4"


def test_a_message_that_does_not_read_as_its_operations_is_kept_as_it_is() -> None:
    rows = _rows(
        ("update-graph", {"client": "c", "tasks": {"x": {}}}),  # 1: no keys, tasks not in pairs
        ("publish_put", {"name": "d"}),  # 2: fine (nothing it lacks is read)
        ("publish_delete", {}),  # 3: no name: a deletion of None
        ("queue_take", {"name": "q", "n": "many"}),  # 4
    )
    assert rows[1].opaque and rows[4].opaque and not rows[2].opaque
    assert sorted(_plan(rows, set(), set()).delete) == [3]


def test_of_tasks_outcomes_the_last_that_holds_now_is_kept() -> None:
    def erred(key: str) -> tuple[str, dict[str, Any]]:
        return "erred-before", {"op": "erred-before", "key": key, "exception": None, "traceback": None, "text": "x"}

    def retried(key: str, left: int) -> tuple[str, dict[str, Any]]:
        return "retried-before", {"op": "retried-before", "key": key, "retries": left}

    rows = _rows(
        erred("e"),  # 1: e erred, then was retried (3)
        erred("f"),  # 2: f is not erred now (retried, then done)
        ("retry", {"op": "retry", "client": "c", "keys": ["e", "f"]}),  # 3
        erred("e"),  # 4: e erred again: kept
        retried("r", 2),  # 5
        retried("r", 1),  # 6: kept: r has 1 left
        retried("s", 1),  # 7: s has 3 left now: another computation under that key
        erred("gone"),  # 8
    )
    plan = _plan(rows, {"e", "f", "r", "s"}, set(), erred_keys={"e"}, retries_left={"r": 1, "s": 3})
    assert sorted(plan.delete) == [1, 2, 3, 5, 7, 8]


def test_of_events_and_leases_only_those_set_and_held_are_kept() -> None:
    rows = _rows(
        ("event_set", {"op": "event_set", "name": "e"}),  # 1: cleared by 2
        ("event_clear", {"op": "event_clear", "name": "e"}),  # 2
        ("event_set", {"op": "event_set", "name": "f"}),  # 3: kept
        ("lock_granted", {"op": "lock_granted", "name": "l", "id": "a", "client": "c"}),  # 4: freed by 5
        ("lock_freed", {"op": "lock_freed", "name": "l", "id": "a"}),  # 5
        ("lock_granted", {"op": "lock_granted", "name": "l", "id": "b", "client": "c"}),  # 6: kept
        ("semaphore_granted", {"name": ["s", 1], "id": "x", "client": None, "max_leases": 2}),  # 7: kept
        ("semaphore_granted", {"name": ["s", 1], "id": "y", "client": None, "max_leases": 2}),  # 8: freed by 9
        ("semaphore_freed", {"name": ["s", 1], "id": "y"}),  # 9
    )
    assert sorted(_plan(rows, set(), set()).delete) == [1, 2, 4, 5, 8, 9]
