"""The root-task priority queue: most urgent first, however items arrive."""

from __future__ import annotations

import random
from typing import Any

import pytest

from distributed.scheduler.queue import PriorityQueue


class Item:
    """A queued thing with a rank, as a task has."""

    __slots__ = ("rank", "name")

    def __init__(self, rank: tuple[int, ...], name: Any) -> None:
        self.rank = rank
        self.name = name

    def __lt__(self, other: Item) -> bool:
        return self.rank < other.rank


def drain(q: PriorityQueue[Item]) -> list[tuple[tuple[int, ...], Any]]:
    out = []
    while q:
        head = q.peek()
        item = q.pop()
        assert head is item
        out.append((item.rank, item.name))
    return out


@pytest.mark.parametrize("order", ["ascending", "descending", "random", "mixed"])
def test_items_come_out_by_rank(order: str) -> None:
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
    q: PriorityQueue[Item] = PriorityQueue()
    for p in prios:
        q.push(Item(p, f"t{p[2]}"))
    assert len(q) == 500
    assert sorted(item.name for item in q) == sorted(f"t{i}" for i in range(500))
    assert drain(q) == [((0, i // 7, i), f"t{i}") for i in range(500)]
    assert q.peek() is None and len(q) == 0
    with pytest.raises(IndexError):
        q.pop()


def test_pushes_between_pops_keep_the_order() -> None:
    rng = random.Random(1)
    q: PriorityQueue[Item] = PriorityQueue()
    live: list[tuple[int, ...]] = []
    for i in range(2000):
        if live and rng.random() < 0.4:
            live.sort()
            assert q.pop().rank == live.pop(0)
        else:
            p = (rng.randrange(100), i)
            live.append(p)
            q.push(Item(p, i))
    live.sort()
    assert [q.pop().rank for _ in range(len(live))] == live


def test_equal_priorities_in_arrival_order() -> None:
    q: PriorityQueue[Item] = PriorityQueue()
    for name in "abc":
        q.push(Item((1,), name))
    assert [q.pop().name for _ in range(3)] == ["a", "b", "c"]


def test_keep_drops_the_unwanted_and_keeps_the_order() -> None:
    rng = random.Random(3)
    q: PriorityQueue[Item] = PriorityQueue()
    ranks = [(i,) for i in range(300)]
    rng.shuffle(ranks)
    for r in ranks:
        q.push(Item(r, r[0]))
    q.keep(lambda item: item.name % 3 == 0)
    assert len(q) == 100
    assert [item for _, item in drain(q)] == list(range(0, 300, 3))
