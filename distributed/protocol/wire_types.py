"""The types wire messages are made of: dask keys and user objects in serialised form."""

from __future__ import annotations

from typing import Any

from distributed.protocol.serialize import Serialize, Serialized

__all__ = ["Key", "Payload"]

#: A dask key: ``str``, ``int``, ``float`` or a tuple of keys.
Key = str | int | float | tuple[Any, ...]
#: A user object in serialised form (``Serialize`` when sent in process).
Payload = Serialized | Serialize
