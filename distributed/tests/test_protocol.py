"""Tests of the wire protocol: framing, serialisation, schemas, and a fuzz harness.

The fuzz tests follow one rule: malformed input either decodes or raises the
documented protocol error; any other exception is a bug.
"""

from __future__ import annotations

import asyncio
import pickle
import random
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

import msgpack
import numpy as np
import pytest

import distributed.protocol
from distributed.comm import CommClosedError, connect
from distributed.core import Route, Server, rpc
from distributed.protocol import (
    ProtocolError,
    SerializationError,
    Serialize,
    Serialized,
    deserialize,
    dumps,
    loads,
    serialize,
    to_serialize,
    unwrap,
)
from distributed.protocol import messages as m
from distributed.protocol import pickle as dpickle
from distributed.protocol.schema import MessageError, check, checker
from distributed.utils_test import run_async

# -- helpers -----------------------------------------------------------------


def is_frame(f: object) -> bool:
    return isinstance(f, (bytes, bytearray, memoryview))


class Point:
    """A module-level class: plain pickle handles it by reference."""

    def __init__(self, x: int, y: int) -> None:
        self.x = x
        self.y = y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (other.x, other.y) == (self.x, self.y)

    def __hash__(self) -> int:
        return hash((self.x, self.y))


UNPICKLED: list[str] = []


def _explode() -> None:
    UNPICKLED.append("exploded")
    raise RuntimeError("unpickling must not happen here")


class Bomb:
    """Pickles fine; unpickling it raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_explode, ())


# -- round trips ---------------------------------------------------------------


def test_round_trip_nested_plain_data() -> None:
    msg = {
        "op": "update",
        "n": 3,
        "f": 1.5,
        "flag": True,
        "none": None,
        "text": "héllo",
        "nested": {"a": [1, 2, {"b": (3, 4)}], "c": {"d": {"e": []}}},
        "big": 2**63 - 1,
        "neg": -(2**63),
    }
    out = loads(dumps(msg))
    # Arrays come back as tuples.
    assert out == {
        "op": "update",
        "n": 3,
        "f": 1.5,
        "flag": True,
        "none": None,
        "text": "héllo",
        "nested": {"a": (1, 2, {"b": (3, 4)}), "c": {"d": {"e": ()}}},
        "big": 2**63 - 1,
        "neg": -(2**63),
    }
    assert isinstance(out["flag"], bool)
    assert isinstance(out["n"], int) and not isinstance(out["n"], bool)


def test_tuple_keys_survive_as_tuples() -> None:
    key = ("x", 0)
    msg = {
        "keys": [key, ("y", 1, 2)],
        "who_has": {key: ["tcp://a:1"], ("y", 1, 2): []},
        "nested_key": {("a", ("b", 1)): "v"},
    }
    out = loads(dumps(msg))
    assert out["keys"] == (("x", 0), ("y", 1, 2))
    assert all(isinstance(k, tuple) for k in out["keys"])
    assert set(out["who_has"]) == {("x", 0), ("y", 1, 2)}
    assert all(isinstance(k, tuple) for k in out["who_has"])
    assert out["who_has"][("x", 0)] == ("tcp://a:1",)
    assert out["nested_key"] == {("a", ("b", 1)): "v"}
    # Keys are hashable and usable as dict keys after the trip.
    d = {k: i for i, k in enumerate(out["keys"])}
    assert d[("x", 0)] == 0


def test_bytes_round_trip() -> None:
    payload = bytes(range(256)) * 10
    out = loads(dumps({"b": payload, "ba": bytearray(b"xy"), "mv": memoryview(b"zz"), "empty": b""}))
    assert out == {"b": payload, "ba": b"xy", "mv": b"zz", "empty": b""}
    assert isinstance(out["b"], bytes)


def test_numpy_array_goes_out_of_band_without_copy() -> None:
    arr = np.arange(1_000_000, dtype="f8")
    frames = dumps({"op": "data", "x": to_serialize(arr)})
    assert all(is_frame(f) for f in frames)
    # Frame 0 is the msgpack header, then the pickle payload, then the buffer.
    assert len(frames) >= 3
    big = [f for f in frames if (f.nbytes if isinstance(f, memoryview) else len(f)) >= arr.nbytes]
    assert len(big) == 1
    frame = big[0]
    assert isinstance(frame, memoryview)
    assert np.shares_memory(np.frombuffer(frame, dtype="f8"), arr)
    # The small frames do not contain the array's bytes.
    assert sum(len(f) for f in frames if f is not frame) < 10_000
    out = loads(frames)
    assert out["op"] == "data"
    np.testing.assert_array_equal(out["x"], arr)


def test_numpy_non_contiguous_and_multi_dim() -> None:
    base = np.arange(200, dtype="i4").reshape(10, 20)
    for arr in (base, base[:, ::3], base.T, np.zeros((0, 5))):
        out = loads(dumps([to_serialize(arr)]))
        np.testing.assert_array_equal(out[0], arr)
        assert out[0].dtype == arr.dtype


def test_serialize_objects_in_messages() -> None:
    p = Point(1, 2)
    out = loads(dumps({"p": to_serialize(p), "ps": [Serialize(p), Serialize({"a": p})]}))
    assert out == {"p": p, "ps": (p, {"a": p})}


def test_lambda_via_cloudpickle() -> None:
    offset = 10
    f: Callable[[int], int] = lambda x: x + offset  # noqa: E731
    with pytest.raises(Exception):
        pickle.dumps(f)
    out = loads(dumps({"f": to_serialize(f)}))
    assert out["f"](1) == 11
    # Unwrapped objects in a non-strict message are pickled too.
    out2 = loads(dumps({"f": f}))
    assert out2["f"](5) == 15
    with pytest.raises(TypeError, match="Cannot encode"):
        dumps({"f": f}, strict=True)


def test_main_module_objects_are_pickled_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(
        "class Local:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "    def double(self):\n"
        "        return 2 * self.v\n",
        namespace,
    )
    cls = namespace["Local"]
    assert cls.__module__ == "__main__"
    main = sys.modules["__main__"]
    # Reachable as __main__.Local: plain pickle would store a reference that
    # means nothing in another process.
    monkeypatch.setattr(main, "Local", cls, raising=False)
    frames = dumps({"o": to_serialize(cls(21))})
    monkeypatch.delattr(main, "Local")
    out = loads(frames)
    assert out["o"].double() == 42

    # Not reachable at all: plain pickle fails outright, cloudpickle steps in.
    out = loads(dumps({"o": to_serialize(cls(4))}))
    assert out["o"].double() == 8


def test_loads_without_deserialize_never_unpickles() -> None:
    UNPICKLED.clear()
    frames = dumps({"op": "task", "run_spec": to_serialize(Bomb()), "key": ("x", 1)})
    out = loads(frames, deserialize=False)
    assert UNPICKLED == []
    assert out["key"] == ("x", 1)
    ser = out["run_spec"]
    assert isinstance(ser, Serialized)
    assert ser.header == {"s": "pickle"}
    assert ser.nbytes > 0
    # Forwarding the opaque value (as the scheduler does) does not unpickle it either.
    out2 = loads(dumps({"again": ser}), deserialize=False)
    assert isinstance(out2["again"], Serialized)
    assert out2["again"] == ser
    assert UNPICKLED == []
    # Only an explicit unwrap runs it, and the failure is a SerializationError.
    with pytest.raises(SerializationError, match="unpickling must not happen here"):
        unwrap(ser)
    assert UNPICKLED == ["exploded"]
    with pytest.raises(SerializationError):
        loads(frames)


def test_serialized_is_forwarded_and_unwrapped() -> None:
    arr = np.arange(10)
    ser = loads(dumps({"x": to_serialize(arr)}), deserialize=False)["x"]
    assert isinstance(ser, Serialized)
    np.testing.assert_array_equal(unwrap(ser), arr)
    # Forwarded once more and deserialised at the end.
    out = loads(dumps({"y": ser}))
    np.testing.assert_array_equal(out["y"], arr)
    # unwrap of plain values and live Serialize objects.
    assert unwrap(5) == 5
    assert unwrap(Serialize(arr)) is arr
    # Serialized itself pickles (it is a plain value object).
    again = pickle.loads(pickle.dumps(ser))
    assert again == ser


def test_unpicklable_raises_serialization_error() -> None:
    lock = threading.Lock()
    with pytest.raises(SerializationError, match="lock"):
        dumps({"x": to_serialize(lock)})
    with pytest.raises(SerializationError, match="Could not serialize"):
        serialize(lock, on_error="raise")
    # By default, as in dask, the failure travels as an object of the error family, raised where it is read.
    header, frames = serialize(lock)
    assert header["s"] == "error"
    with pytest.raises(SerializationError, match="Could not serialize object of type lock"):
        deserialize(header, frames)
    with pytest.raises(SerializationError):
        dumps({"x": lock})
    # SerializationError is a TypeError, as pickle's own errors are.
    assert issubclass(SerializationError, TypeError)


def test_deserialize_errors() -> None:
    with pytest.raises(SerializationError, match="Unknown serializer"):
        deserialize({"s": "nope"}, [b""])
    with pytest.raises(SerializationError, match="No frames"):
        deserialize({"s": "pickle"}, [])
    with pytest.raises(SerializationError, match="Could not deserialize"):
        deserialize({"s": "pickle"}, [b"not a pickle"])


@pytest.mark.parametrize(
    "obj",
    [
        Point(3, 4),
        {"a": (Point(1, 1),), ("t", 1): {1, 2, 3}},
        frozenset({1, 2}),
        complex(1, 2),
        np.arange(5),
        ValueError("x"),
        b"raw",
        None,
    ],
)
def test_dumps_arbitrary_object_gives_frames(obj: Any) -> None:
    frames = distributed.protocol.dumps(obj)
    assert isinstance(frames, list) and frames
    assert all(is_frame(f) for f in frames)
    out = distributed.protocol.loads(frames)
    if isinstance(obj, np.ndarray):
        np.testing.assert_array_equal(out, obj)
    elif isinstance(obj, BaseException):
        assert type(out) is type(obj) and out.args == obj.args
    else:
        assert out == obj


def test_pickle_module_out_of_band_buffers() -> None:
    arr = np.arange(100_000, dtype="u1")
    buffers: list[pickle.PickleBuffer] = []
    payload = dpickle.dumps(arr, buffer_callback=buffers.append)
    assert isinstance(payload, bytes)
    assert len(buffers) == 1
    assert len(payload) < 1000
    out = dpickle.loads(payload, buffers=[b.raw() for b in buffers])
    np.testing.assert_array_equal(out, arr)
    # Without a callback everything is in band.
    payload2 = dpickle.dumps(arr)
    np.testing.assert_array_equal(dpickle.loads(payload2), arr)


# -- framing errors ------------------------------------------------------------


def test_loads_rejects_empty_and_bad_markers() -> None:
    with pytest.raises(ProtocolError):
        loads([])
    unknown_ext = msgpack.packb({"x": msgpack.ExtType(42, b"")}, use_bin_type=True)
    with pytest.raises(ProtocolError, match="Unknown msgpack extension"):
        loads([unknown_ext])
    outside = msgpack.packb({"x": msgpack.ExtType(1, msgpack.packb((1, 5, {"s": "pickle"})))}, use_bin_type=True)
    with pytest.raises(ProtocolError, match="outside"):
        loads([outside, b"a"], deserialize=False)
    zero_start = msgpack.packb({"x": msgpack.ExtType(1, msgpack.packb((0, 1, {})))}, use_bin_type=True)
    with pytest.raises(ProtocolError):
        loads([zero_start], deserialize=False)
    garbage_marker = msgpack.packb({"x": msgpack.ExtType(1, b"\xc1")}, use_bin_type=True)
    with pytest.raises(ProtocolError, match="Malformed serialized-object marker"):
        loads([garbage_marker, b""], deserialize=False)
    with pytest.raises(ProtocolError):
        loads([b"\x92\x01"])  # an array of 2 with one item: truncated
    with pytest.raises(ProtocolError):
        loads([b"\x01\x02"])  # extra data after a value


@pytest.mark.parametrize("deserialize", [False, True])
def test_loads_unhashable_map_key_is_protocol_error(deserialize: bool) -> None:
    # A map used as a map key decodes to an unhashable dict.
    frame = b"\x81\x81\x01\x02\x03"
    with pytest.raises(ProtocolError):
        loads([frame], deserialize=deserialize)


def _valid_messages() -> list[list[Any]]:
    return [
        dumps({"op": "x", "k": ("a", 1), "v": [1, 2.5, None, b"bytes", "s"]}),
        dumps({"op": "task", "spec": to_serialize(Point(1, 2)), "arr": to_serialize(np.arange(50))}),
        dumps([{"op": "a"}, {"op": "b", "keys": [("x", i) for i in range(20)]}]),
        dumps(Serialized({"s": "pickle"}, [b"\x80\x05N.", b"extra"])),
    ]


def _mutate(rng: random.Random, frames: list[Any]) -> list[Any]:
    frames = [bytearray(f) for f in frames]
    choice = rng.randrange(7)
    if choice == 0 and frames[0]:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(frames[0]))
            frames[0][i] = rng.randrange(256)
    elif choice == 1:
        frames[0] = frames[0][: rng.randrange(len(frames[0]) + 1)]
    elif choice == 2:
        del frames[rng.randrange(len(frames)) :]
    elif choice == 3:
        frames.append(bytearray(rng.randbytes(rng.randrange(20))))
    elif choice == 4:
        frames[0] = bytearray(rng.randbytes(rng.randrange(1, 64)))
    elif choice == 5 and len(frames) > 1:
        rng.shuffle(frames)
    else:
        pos = rng.randrange(len(frames[0]) + 1)
        frames[0][pos:pos] = rng.randbytes(rng.randrange(1, 8))
    return frames


def test_fuzz_loads_only_raises_protocol_error() -> None:
    rng = random.Random(20261129)
    valid = _valid_messages()
    decoded = failed = 0
    for i in range(4000):
        if i % 4 == 0:
            frames: list[Any] = [rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.randint(1, 3))]
        else:
            frames = _mutate(rng, rng.choice(valid))
        try:
            loads(frames, deserialize=False)
            decoded += 1
        except ProtocolError:
            failed += 1
        # Any other exception fails the test with its traceback.
    assert decoded > 0 and failed > 0


def test_fuzz_loads_with_deserialize_single_frame() -> None:
    # A single frame cannot point to payload frames, so nothing is unpickled;
    # the only errors allowed are the documented ones.
    rng = random.Random(7)
    for _ in range(3000):
        frame = rng.randbytes(rng.randrange(1, 30))
        try:
            loads([frame], deserialize=True)
        except (ProtocolError, SerializationError):
            pass


def test_fuzz_loads_truncated_valid_messages() -> None:
    for frames in _valid_messages():
        head = bytes(frames[0])
        for cut in range(len(head)):
            with pytest.raises(ProtocolError):
                loads([head[:cut], *frames[1:]], deserialize=False)


# -- raw garbage on a TCP listener -------------------------------------------


class EchoMsg(TypedDict):
    x: Any


class EchoServer(Server):
    def __init__(self) -> None:
        super().__init__(handlers={"echo": Route(EchoMsg, self.echo)})

    def echo(self, comm: Any, msg: EchoMsg) -> Any:
        return msg["x"]


async def _wait_dropped(reader: asyncio.StreamReader, timeout: float = 5.0) -> None:
    """Read until the server closes the connection; fail if it does not."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "server did not drop the connection"
        try:
            data = await asyncio.wait_for(reader.read(65536), remaining)
        except (ConnectionResetError, BrokenPipeError):
            return
        except TimeoutError:
            raise AssertionError("server did not drop the connection") from None
        if not data:
            return


def _garbage_streams(rng: random.Random) -> list[bytes]:
    streams: list[bytes] = []
    while len(streams) < 8:
        data = rng.randbytes(rng.randrange(8, 4000))
        (n,) = struct.unpack_from("<Q", data)
        if n > 1_000_000:  # an impossible frame count
            streams.append(data)
    # Well-framed messages whose content is not a message.
    for _ in range(8):
        while True:
            body = rng.randbytes(rng.randrange(1, 300))
            try:
                loads([body], deserialize=False)
            except ProtocolError:
                break
        streams.append(struct.pack("<QQ", 1, len(body)) + body)
    # Zero frames.
    streams.append(struct.pack("<Q", 0) + rng.randbytes(50))
    return streams


def test_fuzz_raw_bytes_to_tcp_server() -> None:
    async def main() -> None:
        async with EchoServer() as server:
            await server.listen("tcp://127.0.0.1:0")
            host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
            # A well-behaved comm opened before the garbage keeps working.
            async with rpc(server.address, timeout=5) as r:
                assert await r.call("echo", x=1) == 1
                rng = random.Random(1234)
                for data in _garbage_streams(rng):
                    reader, writer = await asyncio.open_connection(host, int(port))
                    try:
                        writer.write(data)
                        await _wait_dropped(reader)
                    finally:
                        writer.close()
                        try:
                            await writer.wait_closed()
                        except OSError:
                            pass
                    assert await r.call("echo", x=[1, ("k", 2)]) == (1, ("k", 2))
            # New connections are still served.
            comm = await connect(server.address, timeout=5)
            try:
                await comm.write({"op": "echo", "x": "fresh"})
                assert unwrap(await comm.read()) == {"status": "OK", "result": "fresh"}
            finally:
                await comm.close()
            # The server dropped every garbage connection it was handed.
            deadline = time.monotonic() + 5
            while server._comms:
                assert time.monotonic() < deadline, server._comms
                await asyncio.sleep(0.005)
            assert server.status.name == "running"

    run_async(main)


def test_write_to_closed_comm_after_garbage() -> None:
    # A comm whose peer sent garbage is closed on our side: reads and writes
    # say so with CommClosedError.
    async def main() -> None:
        accepted: asyncio.Queue[Any] = asyncio.Queue()

        async def handler(comm: Any) -> None:
            await accepted.put(comm)

        from distributed.comm import listen

        listener = listen("tcp://127.0.0.1:0", handler)
        await listener.start()
        try:
            host, port = listener.contact_address.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            comm = await asyncio.wait_for(accepted.get(), 5)
            writer.write(struct.pack("<QQ", 1, 3) + b"\xc1\xc1\xc1")
            with pytest.raises(ProtocolError):
                await asyncio.wait_for(comm.read(), 5)
            assert comm.closed()
            with pytest.raises(CommClosedError):
                await comm.write({"x": 1})
            with pytest.raises(CommClosedError):
                await comm.read()
            await _wait_dropped(reader)
            writer.close()
        finally:
            listener.stop()

    run_async(main)


# -- schemas -------------------------------------------------------------------


class Inner(TypedDict):
    key: str | tuple[str, int]
    n: int


class Outer(TypedDict):
    op: Literal["compute", "cancel"]
    inner: Inner
    keys: Sequence[str]
    deps: Mapping[str, list[int]]
    maybe: int | None
    ratio: float
    pair: tuple[str, int]
    one: tuple[int]
    many: tuple[int, ...]
    opt: NotRequired[bytes]
    nested_opt: NotRequired[list[Inner]]


def _good() -> dict[str, Any]:
    return {
        "op": "compute",
        "inner": {"key": ("x", 1), "n": 3},
        "keys": ["a", "b"],
        "deps": {"a": [1, 2]},
        "maybe": None,
        "ratio": 1,
        "pair": ("s", 2),
        "one": (5,),
        "many": [1, 2, 3],
    }


def test_schema_accepts_valid_messages() -> None:
    c = checker(Outer)
    assert c(_good()) is None
    # Lists and tuples are both sequences (msgpack gives tuples back).
    assert c(loads(dumps(_good()))) is None
    msg = _good() | {"opt": b"xx", "nested_opt": [{"key": "k", "n": 1}], "unknown": object()}
    assert c(msg) is None
    assert c(_good() | {"maybe": 3, "ratio": 0.5, "op": "cancel", "many": ()}) is None

    class Op(str):
        pass

    # What the fast per-field tests do not recognise goes to the full check: a str subclass is a str.
    assert c(_good() | {"op": Op("compute"), "inner": {"key": Op("k"), "n": 3}}) is None
    check(Outer, _good())
    assert checker(Outer) is c  # cached


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"op": "delete"}, "Outer.op: expected one of"),
        ({"op": {"not": "hashable"}}, "Outer.op: expected one of"),
        ({"op": ["compute"]}, "Outer.op: expected one of"),
        ({"inner": {"key": "k", "n": "3"}}, "Outer.inner: Inner.n: expected int, got str"),
        ({"inner": {"key": 5, "n": 3}}, "Outer.inner: Inner.key: expected str"),
        ({"inner": {"key": "k"}}, "Outer.inner: Inner: missing field 'n'"),
        ({"inner": ["k", 3]}, "Outer.inner: Inner: expected a mapping"),
        ({"keys": ["a", 1]}, "Outer.keys: item 1: expected str, got int"),
        ({"keys": "ab"}, "Outer.keys: expected a list, got str"),
        ({"deps": {"a": [1, "2"]}}, "Outer.deps: entry 'a': item 1: expected int"),
        ({"deps": {1: [1]}}, "Outer.deps: entry 1: expected str"),
        ({"deps": [("a", [1])]}, "Outer.deps: expected a mapping"),
        ({"maybe": "x"}, "Outer.maybe: expected int, got str or expected None"),
        ({"maybe": True}, "Outer.maybe: expected int, got bool"),
        ({"ratio": "1.0"}, "Outer.ratio: expected float"),
        ({"pair": ("s", 2, 3)}, "Outer.pair: expected a sequence of 2 items"),
        ({"pair": (2, "s")}, "Outer.pair: item 0: expected str"),
        ({"one": (1, 2)}, "Outer.one: expected a sequence of 1 items"),
        ({"many": (1, "x")}, "Outer.many: item 1: expected int"),
        ({"opt": "text"}, "Outer.opt: expected bytes, got str"),
        ({"nested_opt": [{"key": "k", "n": None}]}, "Outer.nested_opt: item 0: Inner.n: expected int"),
    ],
)
def test_schema_reports_problems(change: dict[str, Any], expected: str) -> None:
    msg = _good() | change
    problem = checker(Outer)(msg)
    assert problem is not None
    assert expected in problem, problem
    with pytest.raises(MessageError, match="Outer"):
        check(Outer, msg)


@pytest.mark.parametrize("field", ["op", "inner", "keys", "deps", "maybe", "ratio", "pair", "one", "many"])
def test_schema_missing_required_field(field: str) -> None:
    msg = _good()
    del msg[field]
    assert checker(Outer)(msg) == f"Outer: missing field {field!r}"


def test_schema_not_a_mapping() -> None:
    assert checker(Outer)(["op"]) == "Outer: expected a mapping, got list"
    assert issubclass(MessageError, ValueError)


class WithSerialized(TypedDict):
    payload: Serialized
    arrays: NotRequired[Mapping[str, Any]]


def test_schema_serialized_fields() -> None:
    c = checker(WithSerialized)
    assert c({"payload": Serialize(1)}) is None
    ser = loads(dumps({"p": to_serialize(1)}), deserialize=False)["p"]
    assert c({"payload": ser}) is None
    assert c({"payload": b"raw"}) is not None


def test_schema_rejects_unsupported_types() -> None:
    with pytest.raises(TypeError, match="Cannot check"):
        checker(Callable[[int], int])


# -- small objects kept packed -------------------------------------------------


def test_inline_object_stays_packed_and_is_forwarded_unchanged() -> None:
    frames = dumps({"op": "x", "spec": to_serialize(Point(1, 2))})
    assert len(frames) == 1  # small: carried inside frame 0
    msg = loads(frames, deserialize=False)
    ser = msg["spec"]
    assert isinstance(ser, Serialized) and ser.packed is not None
    # Forwarding it writes the same bytes, without unpacking.
    again = dumps({"op": "x", "spec": ser})
    assert bytes(again[0]) == bytes(frames[0])
    assert ser._header is None
    assert unwrap(ser) == Point(1, 2)
    assert ser.header["s"] == "pickle"


def test_malformed_inline_object_is_a_serialization_error() -> None:
    from distributed.protocol.framing import EXT_INLINE

    frame = msgpack.packb({"spec": msgpack.ExtType(EXT_INLINE, b"\xc1garbage")}, use_bin_type=True)
    with pytest.raises(ProtocolError, match="Malformed inline"):
        loads([frame], deserialize=True)
    ser = loads([frame], deserialize=False)["spec"]
    assert ser.header["s"] == "malformed" and ser.frames == []
    with pytest.raises(SerializationError, match="Malformed serialized object"):
        unwrap(ser)
    wrong_shape = msgpack.packb({"spec": msgpack.ExtType(EXT_INLINE, msgpack.packb([1, 2]))}, use_bin_type=True)
    with pytest.raises(SerializationError, match="Malformed"):
        unwrap(loads([wrong_shape], deserialize=False)["spec"])


def test_generic_request_matches_its_declaration() -> None:
    req = m.request("who_has", keys=["x", ("y", 0)])
    assert req == {"op": "who_has", "keys": ["x", ("y", 0)]}
    check(m.OptionalKeysRequest, req)
    with pytest.raises(MessageError):
        check(m.OptionalKeysRequest, m.request("who_has", keys=123))


@pytest.mark.parametrize("shared", [False, True])
def test_a_task_whose_function_holds_large_buffers_round_trips(shared: bool) -> None:
    # A function object carrying arrays (a partial of one, a bound method of a RandomState)
    # pickles them out of band: its bytes must still unpickle on their own.
    import functools

    from dask._task_spec import Task

    from distributed.protocol.serialize import deserialize, serialize_task

    arr = np.arange(100_000, dtype="f8")
    for func, args, expected in (
        (functools.partial(np.add, arr), (1,), arr + 1),
        # A seed of its own per case: a worker keeps the function it loaded (by its bytes) for reuse.
        (np.random.RandomState(int(shared)).rand, (3,), np.random.RandomState(int(shared)).rand(3)),
    ):
        task = Task("k", func, *args)
        ser = serialize_task(task, {} if shared else None)
        assert ser.header["s"] == "task-split"
        back = deserialize(ser.header, [bytes(f) for f in ser.frames])
        np.testing.assert_array_equal(back(), expected)


def test_a_tasks_arguments_load_by_reference_or_by_value() -> None:
    """Arguments that pickle by reference load with pickle.loads; a lambda among them, cloudpickled, loads too."""
    from dask._task_spec import Task

    from distributed.protocol.serialize import deserialize, serialize_task

    for arg, expected in ((41, 42), (lambda: 41, 42)):
        task = Task("k", _add_one_to, arg)
        ser = serialize_task(task, {})
        assert ser.header["s"] == "task-split"
        back = deserialize(ser.header, [bytes(f) for f in ser.frames])
        assert back() == expected


def _add_one_to(x: Any) -> int:
    return int(x() if callable(x) else x) + 1
