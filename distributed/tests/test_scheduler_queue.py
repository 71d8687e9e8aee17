"""The root-task priority queue: most urgent first, however items arrive."""

from __future__ import annotations

import random

import pytest

from distributed.scheduler.queue import PriorityQueue


def drain(q: PriorityQueue[str]) -> list[tuple[tuple[int, ...], str]]:
    out = []
    while q:
        head = q.peek()
        item = q.pop()
        assert head == item
        out.append(item)
    return out


@pytest.mark.parametrize("order", ["ascending", "descending", "random", "mixed"])
def test_items_come_out_by_priority(order: str) -> None:
    rng = random.Random(42)
    prios = [(0, i // 7, i) for i in range(500)]
    if order == "descending":
        prios.reverse()
    elif order == "random":
        rng.shuffle(prios)
    elif order == "mixed":
        # Runs in order, then in reverse, with strays in between: what graphs send.
        rng.shuffle(prios[200:260])
        prios[260:] = prios[260:][::-1]
    q: PriorityQueue[str] = PriorityQueue()
    for p in prios:
        q.push(p, f"t{p[2]}")
    assert len(q) == 500
    assert sorted(item for _, item in q) == sorted(f"t{i}" for i in range(500))
    assert drain(q) == [((0, i // 7, i), f"t{i}") for i in range(500)]
    assert q.peek() is None and len(q) == 0
    with pytest.raises(IndexError):
        q.pop()


def test_pushes_between_pops_keep_the_order() -> None:
    rng = random.Random(1)
    q: PriorityQueue[int] = PriorityQueue()
    live: list[tuple[int, ...]] = []
    for i in range(2000):
        if live and rng.random() < 0.4:
            live.sort()
            assert q.pop()[0] == live.pop(0)
        else:
            p = (rng.randrange(100), i)
            live.append(p)
            q.push(p, i)
    live.sort()
    assert [q.pop()[0] for _ in range(len(live))] == live


def test_equal_priorities_in_arrival_order() -> None:
    q: PriorityQueue[str] = PriorityQueue()
    for name in "abc":
        q.push((1,), name)
    assert [q.pop()[1] for _ in range(3)] == ["a", "b", "c"]
