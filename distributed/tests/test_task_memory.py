"""What the scheduler keeps per task, and that keeping less changes nothing a user sees.

A task's priority is kept as one integer (its rank), its rarely set fields in a
record shared by every task without them, and the part of its packed run_spec
that every task of its group shares (the header and the function) once, in the
group.  Each is checked against what it stands for.
"""

from __future__ import annotations

import gc
import itertools
import math
import operator
import pickle
from typing import Any

import msgpack
import pytest
from dask._task_spec import Task

from distributed.protocol import Serialized
from distributed.protocol import messages as m
from distributed.protocol.framing import dumps, loads
from distributed.protocol.messages import Key
from distributed.protocol.serialize import serialize_task
from distributed.scheduler import Scheduler
from distributed.scheduler.priorities import MAX_ORDER, priority_of, priority_problem, rank_of
from distributed.scheduler.records import NO_EXTRAS
from distributed.scheduler.state import STALE_QUEUE_SLACK, state_of
from distributed.scheduler.stored_specs import restore, shared_prefix, shrink
from distributed.sharded import ShardedDict
from distributed.tests.machines import A, check, compute_of, computes, finish, opaque_spec, report_erred
from distributed.tests.machines import task_spec as spec
from distributed.tests.machines import validating_scheduler as new_scheduler

USER_PRIORITIES: list[Any] = [0, 1, -1, 5, -7, 0.5, -0.5, 1.25, 2.0**60, -(2.0**70), 10**30, -(10**25), 1e300, True]


# -- the rank ------------------------------------------------------------------------------
def test_ranks_order_as_priority_tuples_and_give_them_back() -> None:
    cases = [(p, g, o) for p in USER_PRIORITIES for g in (0, 1, 2, 2**40) for o in (0, 1, 7, MAX_ORDER)]
    for a, b in itertools.product(cases, repeat=2):
        as_tuples = (-a[0], a[1], a[2]), (-b[0], b[1], b[2])
        as_ranks = rank_of(*a), rank_of(*b)
        assert (as_tuples[0] < as_tuples[1]) == (as_ranks[0] < as_ranks[1]), (a, b)
        assert (as_tuples[0] == as_tuples[1]) == (as_ranks[0] == as_ranks[1]), (a, b)
    for p, g, o in cases:
        assert priority_of(rank_of(p, g, o)) == (-p, g, o)


def test_the_default_priority_is_a_small_int() -> None:
    # Below 2**60: two 30-bit digits, the smallest int that holds a generation and an order.
    assert rank_of(0, 2**23, 10**9) < 2**60


def test_a_rank_is_allocated_at_its_own_size() -> None:
    # An int made by a sum is allocated a digit longer than it ends up, and stays so (a 48-byte block for a
    # 32-byte int): what the allocator gave for the ranks must be what they are.
    import sys
    import tracemalloc

    cases = [(p, 2**23 + g, 10**9 + g) for g in range(10) for p in (0, 3)]
    ranks: list[int] = [0] * len(cases)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i, case in enumerate(cases):
            ranks[i] = rank_of(*case)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    import distributed.scheduler.priorities as priorities

    where = [tracemalloc.Filter(True, __file__), tracemalloc.Filter(True, priorities.__file__)]
    diff = after.filter_traces(where).compare_to(before.filter_traces(where), "filename")
    allocated = sum(stat.size_diff for stat in diff)
    assert allocated == sum(map(sys.getsizeof, ranks))


def test_priority_problems_name_the_value() -> None:
    assert priority_problem(3) is None
    assert priority_problem(-2.5, 10) is None
    assert "not a number" in str(priority_problem("high"))
    assert "not finite" in str(priority_problem(math.nan))
    assert "not finite" in str(priority_problem(-math.inf))
    assert "order -1" in str(priority_problem(0, -1))
    assert "order" in str(priority_problem(0, MAX_ORDER + 1))


def test_a_task_priority_reads_and_writes_as_dasks_tuple() -> None:
    s = new_scheduler()
    check(s, s.update_graph("c1", {"x": spec(order=3, annotations={"priority": 2})}, ["x"]))
    ts = s.tasks["x"]
    assert ts.priority == (-2, s.generation, 3)
    ts.priority = (-1, s.generation, 4)
    assert ts.priority == (-1, s.generation, 4)
    with pytest.raises(ValueError, match="not a number"):
        ts.priority = ("high", 1, 0)
    with pytest.raises(ValueError, match="generation"):
        ts.priority = (0, -1, 0)
    with pytest.raises(ValueError, match="user_priority"):
        ts.priority = (0, 1)
    assert ts.priority == (-1, s.generation, 4)


def test_tasks_run_in_priority_order_with_fractional_and_huge_priorities() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    priorities: dict[Key, Any] = {"low": -1.5, "mid": 0, "high": 0.25, "huge": 10**40}
    tasks = {k: spec(order=i, annotations={"priority": p}) for i, (k, p) in enumerate(priorities.items())}
    out = check(s, s.update_graph("c1", tasks, list(tasks)))
    sent = [msg["key"] for msg in computes(out)]
    for key in sent:  # grows as tasks finish: each finished one lets the next go
        sent.extend(msg["key"] for msg in computes(finish(s, key)))
    assert sent == ["huge", "high", "mid", "low"]


@pytest.mark.parametrize(
    ("graph_annotations", "task_annotations", "order", "words"),
    [
        ({"priority": math.nan}, None, 0, "not finite"),
        (None, {"priority": "urgent"}, 0, "not a number"),
        (None, None, -1, "order -1"),
    ],
)
def test_a_graph_with_a_bad_priority_is_refused_and_the_scheduler_goes_on(
    graph_annotations: dict[str, Any] | None, task_annotations: dict[str, Any] | None, order: int, words: str
) -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    tasks: dict[Key, m.TaskSpec] = {"ok": spec(order=0), "bad": spec(order=order, annotations=task_annotations)}
    slices = list(s.update_graph_slices("c1", tasks, ["ok", "bad"], annotations=graph_annotations, size=1))
    erred = [msg for out in slices for msg in out.clients.get("c1", []) if msg["op"] == "task-erred"]
    assert {msg["key"] for msg in erred} == {"ok", "bad"}
    assert all(words in msg["text"] for msg in erred)
    assert not s.tasks
    out = check(s, s.update_graph("c1", {"next": spec()}, ["next"]))
    assert compute_of(out, "next")[0] == A


# -- the rarely set fields -----------------------------------------------------------------
def test_tasks_share_one_record_of_rare_fields_until_they_set_one() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 2))
    graph: dict[Key, m.TaskSpec] = {"a": spec(order=0), "b": spec(order=1), "c": spec(["a"], order=2)}
    check(s, s.update_graph("c1", graph, ["b", "c"]))
    assert all(s.tasks[k].extras is NO_EXTRAS for k in graph)
    # Writing a field's default (as releasing does) makes no record.
    s.tasks["b"].exception = None
    s.tasks["b"].retries = 0
    assert s.tasks["b"].extras is NO_EXTRAS
    ts = s.tasks["a"]
    out = check(s, s.task_erred(A, report_erred("a", ts.run_id, opaque_spec(), None, "boom"), "err-a"))
    assert out.clients["c1"]
    a, c = s.tasks["a"], s.tasks["c"]
    assert a.state == c.state == "erred"
    assert a.extras is not NO_EXTRAS and a.exception is not None and a.exception_blame is a
    assert c.exception_blame is a
    finish(s, "b")
    assert s.tasks["b"].state == "memory" and s.tasks["b"].extras is NO_EXTRAS
    # The shared record itself never changed.
    assert NO_EXTRAS.exception is None and NO_EXTRAS.exception_blame is None and not NO_EXTRAS.retries


def test_restrictions_and_retries_from_annotations_land_in_the_tasks_record() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 1))
    graph: dict[Key, m.TaskSpec] = {
        "r": spec(order=0, annotations={"workers": [A], "retries": 2, "allow_other_workers": True}),
        "plain": spec(order=1),
    }
    check(s, s.update_graph("c1", graph, list(graph)))
    r, plain = s.tasks["r"], s.tasks["plain"]
    assert r.worker_restrictions == {A} and r.retries == 2 and r.loose_restrictions and r.has_restrictions
    assert plain.extras is NO_EXTRAS and not plain.has_restrictions


# -- the run_spec, kept in parts -----------------------------------------------------------
def inc(x: int) -> int:
    return x + 1


def dec(x: int) -> int:
    return x - 1


def packed(run_spec: Serialized) -> Serialized:
    """``run_spec`` as a scheduler reads it from a message: the packed bytes, not unpacked."""
    out = loads(dumps({"spec": run_spec}), deserialize=False)["spec"]
    assert isinstance(out, Serialized) and out.packed is not None
    return out


def serialized(run_spec: object) -> Serialized:
    """``run_spec``, which must be a Serialized."""
    assert isinstance(run_spec, Serialized), run_spec
    return run_spec


def packed_bytes(run_spec: object) -> bytes:
    """The packed bytes of ``run_spec``, which must have come packed."""
    packed = serialized(run_spec).packed
    assert packed is not None
    return packed


def holding_many(s: Scheduler) -> Scheduler:
    """``s`` as once it holds many tasks: its map of tasks sharded, so that it keeps run_specs compact."""
    s.tasks = ShardedDict(s.tasks)
    return s


def test_a_scheduler_holding_few_tasks_keeps_run_specs_whole() -> None:
    s = new_scheduler()
    keys = [f"inc-abc-{i}" for i in range(3)]
    graph: dict[Key, m.TaskSpec] = {
        k: spec(order=i, run_spec=packed(serialize_task(Task(k, inc, i)))) for i, k in enumerate(keys)
    }
    check(s, s.update_graph("c1", graph, list(keys)))
    assert s.tasks[keys[0]].group.spec_prefix is None
    assert [packed_bytes(s.tasks[k].run_spec) for k in keys] == [packed_bytes(graph[k]["run_spec"]) for k in keys]


def test_tasks_of_one_function_share_its_packed_part_and_send_their_run_spec_unchanged() -> None:
    s = holding_many(new_scheduler())
    check(s, s.add_worker_state(A, 8))
    # One group: four tasks of inc, one of another function, one malformed.
    keys = [f"inc-abc-{i}" for i in range(6)]
    specs = {k: packed(serialize_task(Task(k, inc, i))) for i, k in enumerate(keys[:4])}
    specs[keys[4]] = packed(serialize_task(Task(keys[4], dec, 1)))
    specs[keys[5]] = Serialized.from_packed(b"\xc4\x02no")
    sent = {k: v.packed for k, v in specs.items()}
    graph: dict[Key, m.TaskSpec] = {k: spec(order=i, run_spec=specs[k]) for i, k in enumerate(keys)}
    out = check(s, s.update_graph("c1", graph, list(keys)))
    group = s.tasks[keys[0]].group
    assert all(s.tasks[k].group is group for k in keys)
    prefix = group.spec_prefix
    assert prefix and b"inc" in prefix  # the header and the function: the first task's, up to its last frame
    assert all(k.encode() not in prefix for k in keys)
    for key in keys:
        run_spec = compute_of(out, key)[1]["run_spec"]
        assert isinstance(run_spec, Serialized)
        assert run_spec.packed == sent[key], key
    # Each task still unpacks to its own function and argument.
    for i, key in enumerate(keys[:4]):
        run_spec = serialized(s.tasks[key].run_spec)
        header, frames = run_spec.header, run_spec.frames
        assert header["s"] == "task-split" and len(frames) == 2
        assert b"inc" in frames[0] and key.encode() in frames[1], (i, key)
    assert serialized(s.tasks[keys[5]].run_spec).header["s"] == "malformed"


def test_a_run_spec_kept_in_parts_survives_every_state() -> None:
    s = holding_many(new_scheduler())
    check(s, s.add_worker_state(A, 1))
    keys: list[Key] = [f"inc-xyz-{i}" for i in range(3)]
    graph = {k: spec(order=i, run_spec=packed(serialize_task(Task(k, inc, i)))) for i, k in enumerate(keys)}
    sent = {k: packed_bytes(graph[k]["run_spec"]) for k in keys}
    check(s, s.update_graph("c1", graph, keys))
    # Queued, processing, then rescheduled when the worker leaves: sent again, unchanged.
    check(s, s.remove_worker_state(A, stimulus_id="gone"))
    out = check(s, s.add_worker_state(A, 3))
    for key in keys:
        assert packed_bytes(compute_of(out, key)[1]["run_spec"]) == sent[key]
    assert sorted(map(operator.attrgetter("key"), s.tasks.values())) == sorted(keys)


@pytest.mark.parametrize(
    "key",
    ["inc-abc-7", "ünïcode-ключ-3", "x" * 300, ("inc-abc", 7), ("a", ("b", 1), 2.5), 42, "", "with\udcffsurrogate"],
)
def test_a_stored_run_spec_gives_back_the_bytes_it_came_as(key: Key) -> None:
    first = packed(serialize_task(Task("inc-first", inc, 0))).packed
    assert first is not None
    prefix = shared_prefix(first)
    assert prefix and first.startswith(prefix)
    for args in [(1,), ("text",), (list(range(500)),), (b"\0" * 10_000,)]:
        sent = packed(serialize_task(Task(key, inc, *args))).packed
        assert sent is not None
        kept = shrink(sent, key, prefix)
        # The shared part comes off, and the key's own opcodes (at least two bytes, for 42).
        assert kept is not None and len(kept) <= len(sent) - len(prefix) - 2
        assert restore(kept, key, prefix) == sent
        if isinstance(key, str) and len(key) > 3:
            # The key itself is cut out: its bytes are kept once, in the task's key.
            assert key.encode("utf-8", "surrogatepass") not in kept
    # Another function, or another layout, is not shrunk; a whole pair is given back as it is.
    other = packed(serialize_task(Task(key, dec, 1))).packed
    assert other is not None and shrink(other, key, prefix) is None and restore(other, key, prefix) == other
    assert shrink(b"\xc4\x02no", key, prefix) is None
    assert shrink(prefix + b"\x92", key, prefix) is None
    # A pickle laid out otherwise (protocol 4): only the shared part comes off.
    tail = msgpack.packb(pickle.dumps((key, (1,), {}), protocol=4), use_bin_type=True)
    kept = shrink(prefix + tail, key, prefix)
    assert kept is not None and kept == tail and restore(kept, key, prefix) == prefix + tail


# -- relations of one task ------------------------------------------------------------------
def test_the_leaves_of_a_tree_share_their_parents_one_member_relations() -> None:
    s = new_scheduler()
    check(s, s.add_worker_state(A, 4))
    leaves: list[Key] = [f"leaf-{i}" for i in range(8)]
    graph: dict[Key, m.TaskSpec] = {k: spec(order=i) for i, k in enumerate(leaves)}
    graph["root"] = spec(deps=leaves, order=8)
    check(s, s.update_graph("c1", graph, ["root"]))
    root = s.tasks["root"]
    # One frozenset of the root for all eight leaves, not a set of one each (216 bytes apiece).
    assert all(s.tasks[k].dependents is root.alone for k in leaves)
    assert all(s.tasks[k].waiters is root.alone for k in leaves)
    for key in leaves:
        if s.tasks[key].state == "processing":
            finish(s, key)
    while root.state != "processing":
        finish(s, next(k for k in leaves if s.tasks[k].state == "processing"))
    finish(s, "root")
    assert all(not s.tasks[k].waiters for k in leaves if k in s.tasks)
    check(s, s.client_releases_keys("c1", ["root"], "done"))
    assert not s.tasks and state_of(root) == "forgotten"
    # A forgotten task lets go of its one-member relation, which refers back to it: no cycle is left.
    assert not any(type(r) is frozenset for r in gc.get_referrers(root))


# -- the queue ------------------------------------------------------------------------------
def test_tasks_released_while_queued_do_not_stay_in_the_queue() -> None:
    # No worker pops the queue: the entries of released tasks would keep them alive for good.
    s = new_scheduler()
    keys: list[Key] = [f"x-{i}" for i in range(3 * STALE_QUEUE_SLACK)]
    check(s, s.update_graph("c1", {k: spec(order=i) for i, k in enumerate(keys)}, keys))
    assert {s.tasks[k].state for k in keys} == {"queued"} and len(s.queued) == len(keys)
    check(s, s.client_releases_keys("c1", keys[: 2 * STALE_QUEUE_SLACK], "release"))
    assert len(s.tasks) == STALE_QUEUE_SLACK
    assert len(s.queued) <= 2 * s.n_queued + STALE_QUEUE_SLACK
    check(s, s.client_releases_keys("c1", keys[2 * STALE_QUEUE_SLACK :], "release"))
    assert not s.tasks and s.n_queued == 0 and len(s.queued) <= STALE_QUEUE_SLACK
    # What is left still pops in order, once a worker comes.
    check(s, s.update_graph("c1", {"y": spec()}, ["y"]))
    out = check(s, s.add_worker_state(A, 1))
    assert compute_of(out, "y")[0] == A
