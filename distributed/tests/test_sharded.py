"""Sharded containers behave as a dict and a set do, and the scheduler's state works with them.

The state machine is driven without sockets, with the size past which its
containers are sharded lowered to a few entries, so that a graph of dozens of
tasks runs through sharded ``tasks``, ``has_what``, ``wants_what`` and
``unrunnable`` in validation mode.
"""

from __future__ import annotations

import random
from collections.abc import Set as AbstractSet

import pytest

from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler.records import ClientState, TaskGroup, TaskPrefix, TaskState, WorkerState, hold, want
from distributed.sharded import SHARD_ABOVE, SHARDS, ShardedDict, ShardedSet
from distributed.tests.machines import A, check, client_ops, computed_keys, finish
from distributed.tests.machines import task_spec as spec
from distributed.tests.machines import validating_scheduler as new_scheduler

pytestmark = pytest.mark.timeout(60)


def test_sharded_dict_does_what_a_dict_does() -> None:
    rng = random.Random(1)
    plain: dict[object, int] = {}
    sharded: ShardedDict[object, int] = ShardedDict()
    assert not sharded
    keys: list[object] = [f"k-{i}" for i in range(300)] + list(range(300)) + [("t", i) for i in range(300)]
    for step in range(20_000):
        k = rng.choice(keys)
        op = rng.random()
        if op < 0.5:
            plain[k] = sharded[k] = step
        elif op < 0.7:
            assert plain.pop(k, -1) == sharded.pop(k, -1)
        elif op < 0.8:
            if k in plain:
                del plain[k]
                del sharded[k]
            else:
                with pytest.raises(KeyError):
                    del sharded[k]
        else:
            assert (k in plain) == (k in sharded)
            assert plain.get(k) == sharded.get(k)
            if k not in plain:
                with pytest.raises(KeyError):
                    sharded[k]
    assert len(sharded) == len(plain)
    assert bool(sharded) == bool(plain)
    assert sharded == plain
    assert set(sharded) == set(plain) == set(sharded.keys())
    assert sorted(sharded.values()) == sorted(plain.values())
    assert set(sharded.items()) == set(plain.items())
    assert sharded.keys() == plain.keys()
    assert dict(sharded) == plain
    assert ShardedDict(plain) == plain
    with pytest.raises(KeyError):
        sharded.pop("absent")
    sharded.clear()
    assert not sharded and len(sharded) == 0 and sharded != plain


def test_sharded_set_does_what_a_set_does() -> None:
    rng = random.Random(2)
    plain: set[object] = set()
    sharded: ShardedSet[object] = ShardedSet()
    assert not sharded
    items: list[object] = [f"x-{i}" for i in range(500)] + list(range(500))
    for _ in range(20_000):
        x = rng.choice(items)
        op = rng.random()
        if op < 0.5:
            plain.add(x)
            sharded.add(x)
        elif op < 0.8:
            plain.discard(x)
            sharded.discard(x)
        else:
            assert (x in plain) == (x in sharded)
            if x not in plain:
                with pytest.raises(KeyError):
                    sharded.remove(x)
    assert len(sharded) == len(plain)
    as_set: AbstractSet[object] = plain  # compared as the abstract sets they both are
    assert sharded == as_set and set(sharded) == plain
    other = set(rng.sample(items, 300))
    assert sharded & other == plain & other
    assert sharded | other == plain | other
    assert sharded - other == plain - other
    assert sharded.isdisjoint(other) == plain.isdisjoint(other)
    sharded.update(other)
    plain.update(other)
    assert sharded == as_set
    popped = sharded.pop()
    assert popped in plain and popped not in sharded
    sharded.clear()
    assert not sharded and len(sharded) == 0


def test_a_sharded_set_takes_at_most_45_bytes_an_element() -> None:
    # Shards that were sets took 55 bytes an element at a million elements, 75 at seven million: a set
    # under 50,000 elements grows to four times its size.
    import sys

    class Element:
        __slots__ = ()

    for n in (300_000, 1_000_000):
        sharded = ShardedSet(Element() for _ in range(n))
        assert sys.getsizeof(sharded) / n <= 45, n


def test_records_switch_to_sharded_containers_only_past_the_threshold() -> None:
    ws = WorkerState(A, 1)
    cs = ClientState("client-1")
    group = TaskGroup("x-0", TaskPrefix("x"))
    tasks = [TaskState(f"x-{i}", None, group) for i in range(SHARD_ABOVE + 1)]
    for ts in tasks[:-1]:
        hold(ws, ts)
        want(cs, ts)
    assert type(ws.has_what) is dict and type(cs.wants_what) is set
    hold(ws, tasks[-1])
    want(cs, tasks[-1])
    assert isinstance(ws.has_what, ShardedDict) and set(ws.has_what) == set(tasks)
    assert isinstance(cs.wants_what, ShardedSet) and set(cs.wants_what) == set(tasks)


@pytest.fixture
def shard_early(monkeypatch: pytest.MonkeyPatch) -> int:
    """The scheduler's containers are sharded past 8 entries instead of SHARD_ABOVE."""
    monkeypatch.setattr("distributed.scheduler.state.SHARD_ABOVE", 8)
    monkeypatch.setattr("distributed.scheduler.records.SHARD_ABOVE", 8)
    return 8


def test_scheduler_runs_a_graph_through_sharded_containers(shard_early: int) -> None:
    s = new_scheduler()
    n = 40
    # A map of n tasks and a sum over them, none runnable yet: the map's tasks must run on A, not there yet.
    tasks: dict[Key, m.TaskSpec] = {f"x-{i}": spec(order=i, annotations={"workers": [A]}) for i in range(n)}
    tasks["total"] = spec([f"x-{i}" for i in range(n)], order=n)
    wanted: list[Key] = [*(f"x-{i}" for i in range(n)), "total"]
    check(s, s.update_graph("client-1", tasks, wanted))
    assert isinstance(s.tasks, ShardedDict) and len(s.tasks) == n + 1
    assert isinstance(s.clients["client-1"].wants_what, ShardedSet)
    assert isinstance(s.unrunnable, ShardedDict) and len(s.unrunnable) == n

    check(s, s.add_worker_state(A, n))
    assert not s.unrunnable
    for i in range(n):
        finish(s, f"x-{i}")
    ws = s.workers[A]
    assert isinstance(ws.has_what, ShardedDict) and len(ws.has_what) == n
    out = finish(s, "total")
    assert [msg["key"] for msg in client_ops(out, "client-1", "key-in-memory")] == ["total"]
    assert not computed_keys(out)

    check(s, s.client_releases_keys("client-1", wanted, "release"))
    assert not s.tasks and not ws.has_what and not s.clients["client-1"].wants_what


def test_shards_take_uneven_shares_so_that_they_do_not_grow_at_once() -> None:
    """Shards take shares spread over a factor of two: they reach their sizes for doubling one after another."""
    sharded: ShardedSet[str] = ShardedSet(f"task-{i}" for i in range(250_000))
    sizes = [len(shard) for shard in sharded._shards]
    assert 1.6 < max(sizes) / min(sizes) < 2.6
    # Shares grow from the first shard to the last: no two groups of shards fill at the same pace.
    assert sum(sizes[: SHARDS // 10]) * 1.6 < sum(sizes[-(SHARDS // 10) :])
