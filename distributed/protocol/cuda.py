"""The ``cuda`` serializer family: registries for device objects, usable without a GPU.

Libraries of device memory (cupy, numba, rmm, cudf) register their types on
:data:`cuda_serialize` and :data:`cuda_deserialize`, as other libraries do on
``dask_serialize``.  The family takes only objects of a registered type, so
with nothing registered (no GPU library installed) it passes every object on
to the next family.
"""

from __future__ import annotations

from distributed.protocol.families import FamilyDispatch, registry_family
from distributed.protocol.serialize import register_serialization_family

__all__ = ["cuda_deserialize", "cuda_serialize"]

#: ``cuda_serialize.register(cls)(f)``: ``f(obj) -> (header, frames)`` for device objects of ``cls``.
cuda_serialize = FamilyDispatch("cuda_serialize")
#: ``cuda_deserialize.register(cls)(f)``: ``f(header, frames) -> obj``.
cuda_deserialize = FamilyDispatch("cuda_deserialize")


register_serialization_family("cuda", *registry_family("cuda", cuda_serialize, cuda_deserialize))
