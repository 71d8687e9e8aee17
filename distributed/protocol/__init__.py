"""Wire protocol: messages (msgpack) and user objects (serializer families: dask, pickle protocol 5, msgpack, ...).

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
    deserialize_bytes,
    nested_deserialize,
    register_serialization_family,
    serialize,
    serialize_bytelist,
    serialize_bytes,
    to_serialize,
    unwrap,
)

# After serialize: each registers its families there.
from distributed.protocol.families import dask_deserialize, dask_serialize, register_generic  # isort: skip
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize  # isort: skip

__all__ = [
    "ProtocolError",
    "SerializationError",
    "Serialize",
    "Serialized",
    "cuda_deserialize",
    "cuda_serialize",
    "dask_deserialize",
    "dask_serialize",
    "deserialize",
    "deserialize_bytes",
    "dumps",
    "loads",
    "nested_deserialize",
    "register_generic",
    "register_serialization_family",
    "serialize",
    "serialize_bytelist",
    "serialize_bytes",
    "to_serialize",
    "unwrap",
]
