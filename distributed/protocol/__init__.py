"""Wire protocol: messages (msgpack) and user objects (pickle protocol 5).

Absolute imports only: ``dask.distributed.protocol`` loads this package a second
time as another module object, and must see the same functions.
"""

from __future__ import annotations

from distributed.protocol.framing import ProtocolError, dumps, loads
from distributed.protocol.serialize import (
    SerializationError,
    Serialize,
    Serialized,
    deserialize,
    serialize,
    to_serialize,
    unwrap,
)

__all__ = [
    "ProtocolError",
    "SerializationError",
    "Serialize",
    "Serialized",
    "deserialize",
    "dumps",
    "loads",
    "serialize",
    "to_serialize",
    "unwrap",
]
