"""Serializer families: dask_serialize registrations, msgpack, error, custom families, register_generic, bytes.

``Packet`` refuses to be pickled, so every path that moves one (client to
worker, worker to worker, worker to client, spilled to disk) shows it went as
its registered frames.  Worker processes find the registrations by importing
this module, as they import a library's.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Literal

import numpy as np
import pytest

import distributed.protocol as protocol
from distributed import Client, LocalCluster, Scheduler, Worker, get_worker
from distributed.protocol import (
    SerializationError,
    Serialize,
    Serialized,
    cuda_deserialize,
    cuda_serialize,
    dask_deserialize,
    dask_serialize,
    deserialize,
    deserialize_bytes,
    dumps,
    loads,
    nested_deserialize,
    register_generic,
    register_serialization_family,
    serialize,
    serialize_bytelist,
    serialize_bytes,
)
from distributed.protocol.serialize import families
from distributed.utils_test import gen_cluster


class Packet:
    """A payload that may travel only as its registered frames."""

    def __init__(self, label: str, payload: np.ndarray[Any, Any]) -> None:
        self.label = label
        self.payload = payload

    def __reduce__(self) -> Any:
        raise TypeError("Packet must never be pickled")


@dask_serialize.register(Packet)
def _dumps_packet(packet: Packet) -> tuple[dict[str, Any], list[Any]]:
    return {"label": packet.label, "dtype": packet.payload.dtype.str, "shape": packet.payload.shape}, [
        packet.payload.data
    ]


@dask_deserialize.register(Packet)
def _loads_packet(header: dict[str, Any], frames: list[Any]) -> Packet:
    payload = np.frombuffer(frames[0], dtype=header["dtype"]).reshape(header["shape"])
    return Packet(header["label"], payload)


def make_packet(label: str, n: int) -> Packet:
    return Packet(label, np.arange(n, dtype="f8"))


def grow(packet: Packet) -> Packet:
    return Packet(packet.label + f"+{get_worker().name}", packet.payload * 2)


# -- in one process ----------------------------------------------------------------------
def test_a_registered_type_travels_as_its_frames_without_a_copy() -> None:
    packet = make_packet("p", 1000)
    header, frames = serialize(packet)
    assert header["s"] == "dask" and header["sub-header"]["label"] == "p"
    assert isinstance(frames[0], memoryview)
    assert np.shares_memory(np.frombuffer(frames[0], dtype="f8"), packet.payload)  # the array's own memory
    back = deserialize(header, frames)
    assert isinstance(back, Packet) and back.label == "p"
    np.testing.assert_array_equal(back.payload, packet.payload)
    # Through a message, as comms write and read them (frames of their own above 16 KB, inline below).
    for n in (10, 100_000):
        msg = loads(dumps({"op": "x", "data": Serialize(make_packet("m", n))}))
        assert msg["data"].label == "m" and msg["data"].payload.sum() == sum(range(n))


def test_a_subclass_uses_its_base_class_entry() -> None:
    class Sub(Packet):
        pass

    header, frames = serialize(Sub("s", np.ones(3)))
    assert header["s"] == "dask"
    assert type(deserialize(header, frames)) is Packet  # the base's loads made it


def test_the_choice_of_families() -> None:
    packet = make_packet("p", 10)
    with pytest.raises(SerializationError, match="Packet must never be pickled"):
        serialize(packet, serializers=["pickle"], on_error="raise")
    header, frames = serialize(packet, serializers=["pickle"])  # the default on_error: an error object
    assert header["s"] == "error"
    with pytest.raises(SerializationError, match="Could not serialize object of type Packet"):
        deserialize(header, frames)
    header, frames = serialize({"a": [1, 2]}, serializers=["msgpack", "pickle"])
    assert header["s"] == "msgpack" and deserialize(header, frames) == {"a": (1, 2)}
    header, frames = serialize({1, 2}, serializers=["msgpack", "pickle"])  # msgpack passes a set on to pickle
    assert header["s"] == "pickle" and deserialize(header, frames) == {1, 2}
    with pytest.raises(ValueError, match="Unknown serializer family 'nope'"):
        serialize(1, serializers=["nope"])
    header, frames = serialize(packet)
    with pytest.raises(TypeError, match="'dask' family"):
        deserialize(header, frames, deserializers=["pickle"])
    assert isinstance(deserialize(header, frames, deserializers=["dask"]), Packet)
    header, frames = serialize([1])
    assert header["s"] == "pickle"
    assert deserialize(header, frames, deserializers=["pickle"]) == [1]
    with pytest.raises(TypeError, match="'pickle' family"):
        deserialize(header, frames, deserializers=["dask", "msgpack"])


def test_register_a_family_of_ones_own() -> None:
    def dumps_upper(x: Any, context: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[bytes]]:
        if not isinstance(x, str):
            raise NotImplementedError
        return {"context": context}, [x.upper().encode()]

    def loads_upper(header: dict[str, Any], frames: list[Any]) -> str:
        return bytes(frames[0]).decode().lower() + f"/{header['context']['who']}"

    register_serialization_family("upper", dumps_upper, loads_upper)
    try:
        header, frames = serialize("abc", serializers=["upper", "pickle"], context={"who": "me"})
        assert header["s"] == "upper" and frames == [b"ABC"]
        assert deserialize(header, frames) == "abc/me"
        assert serialize(1, serializers=["upper", "pickle"])[0]["s"] == "pickle"
    finally:
        del families["upper"]
    with pytest.raises(ValueError, match="form of the pickle family"):
        register_serialization_family("task", dumps_upper, loads_upper)


class Generic:
    def __init__(self, array: np.ndarray[Any, Any], text: str) -> None:
        self.array = array
        self.text = text


register_generic(Generic)


def test_register_generic_serializes_attribute_by_attribute() -> None:
    obj = Generic(np.arange(5), "hello")
    header, frames = serialize(obj)
    assert header["s"] == "dask" and header["sub-header"]["attributes"] == ["array", "text"]
    back = deserialize(header, frames)
    assert type(back) is Generic and back.text == "hello"
    np.testing.assert_array_equal(back.array, np.arange(5))


def test_bytes_and_bytelists() -> None:
    packet = make_packet("b", 100)
    frames = serialize_bytelist(packet)
    assert len(frames) == 2 and np.shares_memory(np.frombuffer(frames[1], dtype="f8"), packet.payload)
    for data in (serialize_bytes(packet), b"".join(frames), bytearray(b"".join(frames))):
        back = deserialize_bytes(data)
        assert back.label == "b" and back.payload.sum() == sum(range(100))
    assert deserialize_bytes(serialize_bytes([1, "x"])) == [1, "x"]
    whole = serialize_bytes(packet)
    for bad in (b"", b"\x00" * 3, whole[:-1], whole + b"x", b"\xff" * 8 + whole[8:]):
        with pytest.raises(SerializationError, match="Not the bytes of a serialized object"):
            deserialize_bytes(bad)
    with pytest.raises(TypeError, match="'dask' family"):
        deserialize_bytes(whole, deserializers=["pickle"])


def test_nested_deserialize() -> None:
    header, frames = serialize(make_packet("n", 3))
    nested = {"a": [Serialize(1), (Serialized(header, frames), "plain")], "b": Serialize({"c": 2})}
    out = nested_deserialize(nested)
    assert out["a"][0] == 1 and out["a"][1][1] == "plain" and out["b"] == {"c": 2}
    assert isinstance(out["a"][1][0], Packet)
    assert nested_deserialize(5) == 5


def test_a_registration_after_a_lookup_is_seen() -> None:
    """The type lookup is cached; a registration made later (eager or lazy) still wins."""

    class Late:
        pass

    assert serialize(Late())[0]["s"] == "pickle"
    dask_serialize.register(Late)(lambda obj: ({}, []))
    dask_deserialize.register(Late)(lambda header, frames: Late())
    assert serialize(Late())[0]["s"] == "dask"

    lazy = types.ModuleType("lazy_pkg_for_test")
    Lazy = type("Lazy", (), {"__module__": "lazy_pkg_for_test"})
    lazy.Lazy = Lazy  # type: ignore[attr-defined]  # a module made here
    calls = []

    @dask_serialize.register_lazy("lazy_pkg_for_test")
    def _register() -> None:
        calls.append(1)
        dask_serialize.register(Lazy)(lambda obj: ({"lazy": True}, []))
        dask_deserialize.register(Lazy)(lambda header, frames: Lazy())

    sys.modules["lazy_pkg_for_test"] = lazy
    try:
        header, frames = serialize(Lazy())
        assert header["s"] == "dask" and header["sub-header"] == {"lazy": True} and calls == [1]
        assert type(deserialize(header, frames)) is Lazy
        assert serialize(Lazy())[0]["s"] == "dask" and calls == [1]
    finally:
        del sys.modules["lazy_pkg_for_test"]


def test_cuda_registries_exist_without_a_gpu() -> None:
    assert protocol.cuda_serialize is cuda_serialize and "cuda" in families
    header, _ = serialize(1, serializers=["cuda", "pickle"])
    assert header["s"] == "pickle"  # nothing registered: passed on

    class Device:
        def __init__(self, data: bytes) -> None:
            self.data = data

    cuda_serialize.register(Device)(lambda obj: ({"n": len(obj.data)}, [obj.data]))
    cuda_deserialize.register(Device)(lambda header, frames: Device(bytes(frames[0])))
    header, frames = serialize(Device(b"gpu"), serializers=["cuda", "dask", "pickle"])
    assert header["s"] == "cuda" and deserialize(header, frames).data == b"gpu"


# -- between processes -------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_registered_type_moves_between_worker_processes_and_to_the_client() -> None:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        # Client to worker a (scatter), a to b (the task's input), b to the client (its result).
        [sent] = client.scatter([make_packet("start", 50_000)], workers=[a])
        result = client.submit(grow, sent, workers=[b], allow_other_workers=False).result(timeout=60)
        assert isinstance(result, Packet) and result.label.startswith("start+")
        np.testing.assert_array_equal(result.payload, np.arange(50_000, dtype="f8") * 2)
        assert set(client.who_has([sent])[sent.key]) == {a, b}  # b fetched its copy from a
        # Made on a worker and brought straight back.
        made = client.submit(make_packet, "made", 10, workers=[a]).result(timeout=60)
        assert made.label == "made" and made.payload.sum() == 45


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    worker_kwargs={"memory_limit": "1GB"},
    config={"distributed.worker.memory.target": 1e-9},
)
async def test_a_registered_type_spills_as_its_frames(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    future = c.submit(make_packet, "spilled", 1000)
    await future
    assert future.key in a.data.disk  # type: ignore[attr-defined]  # a SpillBuffer, with a target this low
    back = await future
    assert back.label == "spilled" and back.payload.sum() == sum(range(1000))


# -- a client's choice of families ---------------------------------------------------------
def test_a_client_checks_its_families_before_connecting() -> None:
    with pytest.raises(ValueError, match=r"Client\(serializers=\) names unknown serializer families \['nope'\]"):
        Client("tcp://127.0.0.1:1", timeout=0.2, serializers=["dask", "nope"])
    with pytest.raises(TypeError, match=r"Client\(deserializers=\) takes a list"):
        Client("tcp://127.0.0.1:1", timeout=0.2, deserializers="pickle")  # a string, not a list of names


@pytest.mark.timeout(120)
def test_a_client_scatters_and_gathers_with_its_families_only() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster, serializers=["dask", "msgpack"]) as client:
            packet, plain = client.scatter([make_packet("s", 10), {"a": 1}])
            # Taken back in a family given (deserializers default to the same families).
            assert client.gather(packet).label == "s"
            # Neither family takes a set: refused at once, nothing sent.
            with pytest.raises(SerializationError, match="no family of \\['dask', 'msgpack'\\] takes it"):
                client.scatter([{1, 2}])
            # As in dask, workers send data with the default families: what they pickled is refused here.
            with pytest.raises(TypeError, match="'pickle' family"):
                client.gather(plain)
            with pytest.raises(TypeError, match="'pickle' family"):
                client.submit(set, [1, 2]).result(timeout=30)
        with Client(cluster, serializers=["dask", "msgpack"], deserializers=["dask", "pickle"]) as client:
            [plain] = client.scatter([{"a": [1, 2]}])
            assert client.gather(plain) == {"a": (1, 2)}  # sent as msgpack (arrays as tuples), back pickled
        with Client(cluster, serializers=["pickle"]) as client:
            with pytest.raises(SerializationError, match="Packet must never be pickled"):
                client.scatter(make_packet("p", 1))
            [future] = client.scatter([[1, 2]])
            assert client.gather(future) == [1, 2]


@gen_cluster(client=True, nthreads=[])
async def test_published_datasets_keep_to_the_families(c: Client[Literal[True]], s: Scheduler) -> None:
    """As dask's ``test_pickle_safe``: a msgpack-only client neither publishes nor takes pickled data."""
    async with Client(s.address, asynchronous=True, serializers=["msgpack"]) as c2:
        await c2.publish_dataset(x=[1, 2, 3])
        assert await c2.get_dataset("x") == (1, 2, 3)
        with pytest.raises(TypeError):
            await c2.publish_dataset(y=lambda x: x)
        await c.publish_dataset(z=lambda x: x)  # the default families pickle it
        with pytest.raises(TypeError, match="'pickle' family"):
            await c2.get_dataset("z")
        assert (await c.get_dataset("z"))(3) == 3
