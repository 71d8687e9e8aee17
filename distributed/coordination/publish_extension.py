"""The scheduler side of published datasets (``Client.publish_dataset``).

A dataset is an object a client published under a name: the scheduler keeps
it as the serialised frames the client sent (it never unpickles them) and the
keys of the futures inside it.  While a dataset is published its keys are
wanted by a client id of its own (``published-<name>``), so their results stay
in memory after the publishing client is gone.  A getter's client is made to
want the keys in the same step as it is given the dataset.

Invariants: a name is in ``datasets`` exactly while a dataset of that name is
published; the holder of a dataset wants exactly the keys of the datasets it
holds (one dataset per name, so per holder).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.names import normalize_name
from distributed.core import Route
from distributed.protocol import messages as m
from distributed.protocol.coordination_messages import PrimitiveName
from distributed.protocol.messages import Key, Payload

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["PublishExtension", "PublishedDataset"]


@dataclass(frozen=True)
class PublishedDataset:
    """One published dataset: its name as given, its frames, and the keys it holds."""

    name: PrimitiveName
    data: Payload
    keys: tuple[Key, ...]


class PublishExtension:
    """Keeps the datasets published on a cluster.

    Registered as ``scheduler.extensions["publish"]``; answers
    ``publish_put``, ``publish_get``, ``publish_delete`` and ``publish_list``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.datasets: dict[Hashable, PublishedDataset] = {}

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "publish_put": Route(m.PublishPut, self.put),
            "publish_get": Route(m.PublishGet, self.get),
            "publish_delete": Route(m.PublishDelete, self.delete),
            "publish_list": Route(m.PublishList, self.list),
        }

    @staticmethod
    def holder(name: Hashable) -> str:
        """The client id under which the dataset ``name`` wants its keys."""
        return f"published-{name if isinstance(name, str) else repr(name)}"

    def put(self, comm: Comm | None, msg: m.PublishPut) -> None:
        """Publish a dataset, holding its keys.

        Raises
        ------
        KeyError
            When the name is taken and ``override`` is false.
        """
        name = normalize_name(msg["name"])
        old = self.datasets.get(name)
        if old is not None and not msg["override"]:
            raise KeyError(f"Dataset {msg['name']!r} already exists")
        keys = tuple(msg["keys"])
        holder = self.holder(name)
        s = self.scheduler
        # The new keys are wanted before the old ones go: they may overlap.
        s.send_all(s.client_desires_keys(holder, keys, f"publish-{time.time()}"))
        self.datasets[name] = PublishedDataset(msg["name"], msg["data"], keys)
        self._let_go(holder, set(old.keys).difference(keys) if old is not None else ())

    def get(self, comm: Comm | None, msg: m.PublishGet) -> m.PublishGetReply:
        """The dataset ``name`` (an empty reply when there is none); the getter wants its keys from now on."""
        ds = self.datasets.get(normalize_name(msg["name"]))
        if ds is None:
            return m.PublishGetReply()
        client = msg.get("client")
        if client is not None and ds.keys:
            s = self.scheduler
            s.send_all(s.client_desires_keys(client, ds.keys, f"publish-get-{time.time()}"))
        return m.PublishGetReply(data=ds.data)

    def delete(self, comm: Comm | None, msg: m.PublishDelete) -> None:
        """Unpublish ``name`` (nothing happens when it is not published)."""
        name = normalize_name(msg["name"])
        ds = self.datasets.pop(name, None)
        if ds is not None:
            self._let_go(self.holder(name), ds.keys)

    def list(self, comm: Comm | None, msg: m.PublishList) -> list[PrimitiveName]:
        """The names of the published datasets, sorted by their text."""
        return sorted((ds.name for ds in self.datasets.values()), key=str)

    def _let_go(self, holder: str, keys: Sequence[Key] | set[Key]) -> None:
        s = self.scheduler
        if keys:
            s.send_all(s.client_releases_keys(holder, keys, f"unpublish-{time.time()}"))
        cs = s.clients.get(holder)
        if cs is not None and not cs.wants_what:
            del s.clients[holder]
