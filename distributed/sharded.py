"""A mapping and a set split into shards, for containers of millions of entries.

A Python ``dict`` or ``set`` grows by copying itself whole into a table twice
as large: at 1.4 million entries that takes 50 ms, at 5.6 million 250 ms, and
the scheduler's event loop stands still meanwhile.  A scheduler holding ten
million tasks would stall for a quarter of a second each time its map of
tasks, a client's wanted set or a worker's held set doubled.

:class:`ShardedDict` and :class:`ShardedSet` spread their entries over
:data:`SHARDS` plain containers by the key's hash, so that each grows on its
own, in a pause of a few milliseconds, and not when the others do.  An access
costs about 100 ns more than a plain container's (one Python call), so owners
keep plain containers while they are small and replace them with sharded
copies once they pass :data:`SHARD_ABOVE` entries (the scheduler's records:
see ``distributed.scheduler.records.hold``).  A sharded container iterates
shard by shard: not in insertion order.
"""

from __future__ import annotations

import sys
from collections.abc import (
    Hashable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    MutableSet,
    Sized,
    ValuesView,
)
from typing import Final, Generic, Protocol, TypeVar

__all__ = ["SHARDS", "SHARD_ABOVE", "ShardedDict", "ShardedSet"]

#: Shards of a sharded container: ten million entries are 40,000 a shard.
SHARDS: Final = 251
#: Entries past which a plain container is sharded: growing a plain one this
#: size takes about 7 ms, and copying it into shards, once, about 30 ms.  Below it,
#: each access saves the sharded container's Python call: the scheduler's map
#: of tasks, sharded from 32,768 entries, took 7 % of its CPU on a 100,000-task map.
SHARD_ABOVE: Final = 1 << 17

#: Hash residues (modulo this prime) that map to shards through :data:`_SHARD_OF`.
_RESIDUES: Final = 65521


def _shard_table() -> list[int]:
    """The shard of each residue: shard ``i`` takes a share of them that grows as ``2 ** (i / SHARDS)``.

    Shards that grew at one rate would reach their sizes for doubling all at
    once, and double together: the pause of one large container again.  With
    shares spread over a factor of two, the shards double one after the other
    across each doubling of the whole.  A prime count of residues also mixes
    the high bits of a hash in: objects hashed by address (a TaskState) sit at
    a fixed stride in 4 KB pools, and the low bits of their hashes take a
    dozen values only.
    """
    weights = [2 ** (i / SHARDS) for i in range(SHARDS)]
    total = sum(weights)
    table: list[int] = []
    for i, w in enumerate(weights):
        table.extend([i] * max(1, round(_RESIDUES * w / total)))
    return (table + [SHARDS - 1] * _RESIDUES)[:_RESIDUES]


_SHARD_OF: Final = _shard_table()


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T", bound=Hashable)


class _Shard(Sized, Protocol):
    """The plain container of one shard: a dict."""

    def clear(self) -> None: ...


S = TypeVar("S", bound=_Shard)


class _Shards(Generic[S]):
    """What a sharded dict and set share: the shards, and what is read across them all."""

    __slots__ = ("_shards",)
    _shards: list[S]

    def __len__(self) -> int:
        return sum(map(len, self._shards))

    def __bool__(self) -> bool:
        return any(map(len, self._shards))

    def clear(self) -> None:
        for shard in self._shards:
            shard.clear()

    def __sizeof__(self) -> int:
        """Bytes of the container with its shards' tables (``sys.getsizeof`` reads it), not of the entries."""
        return object.__sizeof__(self) + sys.getsizeof(self._shards) + sum(map(sys.getsizeof, self._shards))


class ShardedDict(_Shards[dict[K, V]], MutableMapping[K, V]):
    """A mutable mapping kept in :data:`SHARDS` dicts, chosen by the key's hash.

    Parameters
    ----------
    items
        Initial contents: a mapping, or ``(key, value)`` pairs.
    """

    __slots__ = ()

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._shards = [{} for _ in range(SHARDS)]
        pairs = items.items() if isinstance(items, Mapping) else items
        shards = self._shards
        for k, v in pairs:
            shards[_SHARD_OF[hash(k) % _RESIDUES]][k] = v

    def __getitem__(self, key: K) -> V:
        return self._shards[_SHARD_OF[hash(key) % _RESIDUES]][key]

    def get(  # type: ignore[override]  # one signature for Mapping's two overloads
        self, key: K, default: V | None = None
    ) -> V | None:
        return self._shards[_SHARD_OF[hash(key) % _RESIDUES]].get(key, default)

    def __setitem__(self, key: K, value: V) -> None:
        self._shards[_SHARD_OF[hash(key) % _RESIDUES]][key] = value

    def __delitem__(self, key: K) -> None:
        del self._shards[_SHARD_OF[hash(key) % _RESIDUES]][key]

    def __contains__(self, key: object) -> bool:
        return key in self._shards[_SHARD_OF[hash(key) % _RESIDUES]]

    def __iter__(self) -> Iterator[K]:
        for shard in self._shards:
            yield from shard

    def pop(  # type: ignore[override]  # one signature for MutableMapping's overloads
        self, key: K, *default: V
    ) -> V:
        return self._shards[_SHARD_OF[hash(key) % _RESIDUES]].pop(key, *default)

    def keys(self) -> KeysView[K]:
        return _Keys(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def __repr__(self) -> str:
        return f"<ShardedDict: {len(self)} entries>"


class _Keys(KeysView[K]):
    __slots__ = ()
    _mapping: ShardedDict[K, object]

    def __iter__(self) -> Iterator[K]:
        for shard in self._mapping._shards:
            yield from shard


class _Values(ValuesView[V]):
    __slots__ = ()
    _mapping: ShardedDict[object, V]

    def __iter__(self) -> Iterator[V]:
        for shard in self._mapping._shards:
            yield from shard.values()


class _Items(ItemsView[K, V]):
    __slots__ = ()
    _mapping: ShardedDict[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        for shard in self._mapping._shards:
            yield from shard.items()


class ShardedSet(_Shards[dict[T, None]], MutableSet[T]):
    """A mutable set kept in :data:`SHARDS` dicts (each element a key), chosen by the element's hash.

    Dicts, not sets: a set below 50,000 elements grows to four times its
    size, a dict to about three, and a dict's entries take less room than a
    set's slots at the sizes shards have.  Ten million elements took 44 bytes
    each in dicts, 53 in sets (75 in sets at seven million).

    Parameters
    ----------
    items
        Initial elements.
    """

    __slots__ = ()

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._shards = [{} for _ in range(SHARDS)]
        self.update(items)

    def add(self, value: T) -> None:
        self._shards[_SHARD_OF[hash(value) % _RESIDUES]][value] = None

    def discard(self, value: T) -> None:
        self._shards[_SHARD_OF[hash(value) % _RESIDUES]].pop(value, None)

    def remove(self, value: T) -> None:
        del self._shards[_SHARD_OF[hash(value) % _RESIDUES]][value]

    def __contains__(self, value: object) -> bool:
        return value in self._shards[_SHARD_OF[hash(value) % _RESIDUES]]

    def __iter__(self) -> Iterator[T]:
        for shard in self._shards:
            yield from shard

    def update(self, items: Iterable[T]) -> None:
        """Add every element of ``items`` (as ``set.update``)."""
        shards = self._shards
        for x in items:
            shards[_SHARD_OF[hash(x) % _RESIDUES]][x] = None

    def __repr__(self) -> str:
        return f"<ShardedSet: {len(self)} elements>"
