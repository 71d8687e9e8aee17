"""User objects to frames and back.

Theory of operation
-------------------
Anything that is not plain message data (a user's function, a task's run
specification, a result, an exception) travels inside a message either as

* :class:`Serialize` -- a live object, turned into frames when the message is
  written; or
* :class:`Serialized` -- frames already made (a header plus a list of bytes-like
  frames), carried opaquely.

Objects are pickled with protocol 5.  Large buffers (numpy arrays, bytes held by
pickle-5-aware objects) are kept out of band as their own frames, so they are
never copied into one big blob.  The standard library's pickle is tried first
and cloudpickle is used when the object needs pickling by value (lambdas,
objects defined in ``__main__``) or when plain pickle fails.

Nothing here is ever called on the scheduler for task payloads: the scheduler
keeps :class:`Serialized` values as they came.
"""

from __future__ import annotations

import io
import logging
import pickle
import sys
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final

import cloudpickle
import msgpack

logger = logging.getLogger(__name__)

__all__ = [
    "Frame",
    "SerializationError",
    "Serialize",
    "Serialized",
    "deserialize",
    "nbytes_of_frames",
    "pickle_dumps",
    "pickle_loads",
    "serialize",
    "serialize_task",
    "to_serialize",
    "unwrap",
]

#: A frame is any contiguous bytes-like object.
Frame = bytes | bytearray | memoryview

HIGHEST_PROTOCOL: Final = 5


class SerializationError(TypeError):
    """An object could not be serialised (or deserialised)."""


class Serialize:
    """Mark an object to be serialised when the message holding it is written.

    Parameters
    ----------
    data
        Any picklable object.
    """

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"<Serialize: {type(self.data).__name__}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Serialize) and other.data == self.data

    def __hash__(self) -> int:
        return hash(("Serialize", id(self.data)))


class Serialized:
    """An object in serialised form: a small header and a list of frames.

    The scheduler forwards these untouched; only workers and clients turn them
    back into objects with :func:`deserialize`.

    A small object that arrived inside a message (see
    :mod:`distributed.protocol.framing`) is kept as it came, one msgpack blob
    of ``(header, frames)`` in :attr:`packed`, and unpacked only when its
    header or frames are read.  The scheduler never reads them: it keeps one
    bytes object per task instead of a dict, a list and two bytes objects,
    and sends the blob on unchanged.
    """

    __slots__ = ("_header", "_frames", "packed")

    def __init__(self, header: dict[str, Any], frames: Sequence[Frame]) -> None:
        self._header: dict[str, Any] | None = header
        self._frames: list[Frame] | None = list(frames)
        #: msgpack of ``(header, frames)`` as received, or None.
        self.packed: bytes | None = None

    @classmethod
    def from_packed(cls, packed: bytes) -> Serialized:
        """Wrap msgpack of ``(header, frames)``, unpacked on first use.

        Malformed bytes do not raise here or when read: they read as the
        header ``{"s": "malformed"}``, which :func:`deserialize` rejects.
        """
        self = cls.__new__(cls)
        self._header = None
        self._frames = None
        self.packed = packed
        return self

    def _unpack(self) -> tuple[dict[str, Any], list[Frame]]:
        header: Any
        sub: Any
        try:
            header, sub = msgpack.unpackb(self.packed, use_list=False, strict_map_key=False)
            if not isinstance(header, dict) or not isinstance(sub, tuple) or not all(isinstance(f, bytes) for f in sub):
                raise ValueError("not a (header, frames) pair")
        except Exception as e:
            header, sub = {"s": "malformed", "error": repr(e)}, ()
        self._header = header
        self._frames = frames = list(sub)
        return header, frames

    @property
    def header(self) -> dict[str, Any]:
        """The header: which serialiser, and its options."""
        header = self._header
        if header is None:
            header = self._unpack()[0]
        return header

    @property
    def frames(self) -> list[Frame]:
        """The frames."""
        frames = self._frames
        if frames is None:
            frames = self._unpack()[1]
        return frames

    @property
    def nbytes(self) -> int:
        """Total size of the frames in bytes."""
        return nbytes_of_frames(self.frames)

    def __repr__(self) -> str:
        return f"<Serialized: {self.header.get('s')} {self.nbytes} bytes>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Serialized)
            and other.header == self.header
            and [bytes(f) for f in other.frames] == [bytes(f) for f in self.frames]
        )

    def __hash__(self) -> int:
        return hash(("Serialized", id(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Serialized, (self.header, [bytes(f) for f in self.frames]))


def to_serialize(obj: Any) -> Serialize:
    """Wrap ``obj`` so that it is pickled when its message is sent."""
    return Serialize(obj)


def nbytes_of_frames(frames: Sequence[Frame]) -> int:
    """Total number of bytes in ``frames``."""
    total = 0
    for f in frames:
        total += f.nbytes if isinstance(f, memoryview) else len(f)
    return total


def _needs_cloudpickle(payload: bytes) -> bool:
    # Objects defined in __main__ pickle by reference with the standard
    # library, and that reference means nothing in another process.
    return b"__main__" in payload


def pickle_dumps(
    obj: Any,
    *,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
    protocol: int = HIGHEST_PROTOCOL,
) -> bytes:
    """Pickle ``obj``: standard pickle first, cloudpickle when it must.

    Parameters
    ----------
    obj
        The object.
    buffer_callback
        Receives protocol-5 out-of-band buffers, as in :func:`pickle.dumps`.
    protocol
        The pickle protocol.

    Raises
    ------
    SerializationError
        When neither pickle nor cloudpickle can serialise ``obj``.
    """
    buffers: list[pickle.PickleBuffer] = []
    collect = buffers.append if buffer_callback is not None else None
    try:
        payload = pickle.dumps(obj, protocol=protocol, buffer_callback=collect)
    except Exception:
        payload = None
    if payload is None or _needs_cloudpickle(payload):
        buffers.clear()
        try:
            f = io.BytesIO()
            pickler = cloudpickle.CloudPickler(f, protocol=protocol, buffer_callback=collect)
            pickler.dump(obj)
            payload = f.getvalue()
        except Exception as e:
            raise SerializationError(f"Could not serialize object of type {type(obj).__name__}: {e!r}") from e
    if buffer_callback is not None:
        for b in buffers:
            buffer_callback(b)
    return payload


def pickle_loads(payload: Frame, buffers: Sequence[Frame] = ()) -> Any:
    """Inverse of :func:`pickle_dumps`."""
    return pickle.loads(payload, buffers=buffers)


def _buffer_frame(pb: pickle.PickleBuffer) -> Frame:
    try:
        return pb.raw()
    except BufferError:
        # Not contiguous: one copy is unavoidable.
        return memoryview(bytes(pb))


def serialize(obj: Any) -> tuple[dict[str, Any], list[Frame]]:
    """Turn ``obj`` into a header and frames (pickle protocol 5, out of band).

    Raises
    ------
    SerializationError
        When ``obj`` cannot be pickled.
    """
    if isinstance(obj, Serialized):
        return obj.header, obj.frames
    if isinstance(obj, Serialize):
        obj = obj.data
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle_dumps(obj, buffer_callback=buffers.append)
    frames: list[Frame] = [payload]
    frames.extend(_buffer_frame(b) for b in buffers)
    return {"s": "pickle"}, frames


def _pickled_by_value(obj: Any) -> bool:
    """Whether a function or class cannot be pickled by reference (it would not import elsewhere)."""
    module = getattr(obj, "__module__", None)
    if module == "__main__" or module is None:
        return True
    qualname = getattr(obj, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        return True
    return module not in sys.modules


_by_value: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
_by_value_lock = threading.Lock()


class _TaskPickler(pickle.Pickler):
    """Pickles a task; functions and classes that need cloudpickle are
    cloudpickled once per object and the bytes reused for every task."""

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, (types.FunctionType, type)) and _pickled_by_value(obj):
            try:
                blob = _by_value.get(obj)
            except TypeError:
                blob = None
            if blob is None:
                blob = cloudpickle.dumps(obj, protocol=HIGHEST_PROTOCOL)
                try:
                    with _by_value_lock:
                        _by_value[obj] = blob
                except TypeError:
                    pass
            return ("v", blob)
        return None


_loaded: OrderedDict[bytes, Any] = OrderedDict()
_LOADED_MAX: Final = 1000


class _TaskUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "v" and isinstance(pid[1], bytes)):
            raise pickle.UnpicklingError(f"Unknown persistent id {pid!r}")
        blob = pid[1]
        obj = _loaded.get(blob)
        if obj is None:
            obj = pickle.loads(blob)
            _loaded[blob] = obj
            if len(_loaded) > _LOADED_MAX:
                _loaded.popitem(last=False)
        return obj


def _dumps_task_state(obj: Any, buffers: list[pickle.PickleBuffer] | None) -> bytes:
    """Plain pickle when everything pickles by reference, else the caching pickler.

    Large buffers go out of band into ``buffers``; with ``buffers=None`` they
    stay in the pickle, which then stands alone (a function's bytes are
    cached and loaded by themselves, so they must).
    """
    collect = buffers.append if buffers is not None else None
    try:
        payload = pickle.dumps(obj, protocol=HIGHEST_PROTOCOL, buffer_callback=collect)
        if not _needs_cloudpickle(payload):
            return payload
    except Exception:
        pass
    if buffers is not None:
        buffers.clear()
    f = io.BytesIO()
    _TaskPickler(f, protocol=HIGHEST_PROTOCOL, buffer_callback=collect).dump(obj)
    return f.getvalue()


#: Functions already pickled, by identity, for one graph (the function is
#: kept alive with its bytes so that the identity cannot be reused).
FunctionCache = dict[int, tuple[Any, bytes]]


def serialize_task(obj: Any, functions: FunctionCache | None = None) -> Serialized:
    """Serialise a task's run specification.

    Like :func:`serialize`, with shortcuts for the common case:

    * a plain ``Task`` travels as its function and ``(key, args, kwargs)``,
      pickled separately; with a ``functions`` cache shared across a graph,
      a function used by many tasks (a curried ``np.ones``, say) is pickled
      once per graph instead of once per task, and unpickled once per worker;
    * functions or classes that must travel by value (defined in ``__main__``,
      lambdas, local functions) are cloudpickled once per object and reused.
    """
    from dask._task_spec import Task

    buffers: list[pickle.PickleBuffer] = []
    try:
        if type(obj) is Task and not obj.data_producer:
            func = obj.func
            cached = functions.get(id(func)) if functions is not None else None
            if cached is None:
                func_bytes = _dumps_task_state(func, None)
                if functions is not None:
                    functions[id(func)] = (func, func_bytes)
            else:
                func_bytes = cached[1]
            payload = _dumps_task_state((obj.key, obj.args, obj.kwargs), buffers)
            out: list[Frame] = [func_bytes, payload]
            out.extend(_buffer_frame(b) for b in buffers)
            return Serialized({"s": "task-split"}, out)
        payload = _dumps_task_state(obj, buffers)
    except Exception:
        header, frames = serialize(obj)
        return Serialized(header, frames)
    out = [payload]
    out.extend(_buffer_frame(b) for b in buffers)
    return Serialized({"s": "task"}, out)


_functions_loaded: OrderedDict[bytes, Any] = OrderedDict()


def _load_function(blob: Frame) -> Any:
    key = bytes(blob)
    func = _functions_loaded.get(key)
    if func is None:
        func = _TaskUnpickler(io.BytesIO(key)).load()
        _functions_loaded[key] = func
        if len(_functions_loaded) > _LOADED_MAX:
            _functions_loaded.popitem(last=False)
    return func


def deserialize(header: dict[str, Any], frames: Sequence[Frame]) -> Any:
    """Inverse of :func:`serialize`.

    Raises
    ------
    SerializationError
        For an unknown serialiser or frames that do not unpickle.
    """
    kind = header.get("s")
    if kind == "malformed":
        raise SerializationError(f"Malformed serialized object: {header.get('error')}")
    if kind not in ("pickle", "task", "task-split"):
        raise SerializationError(f"Unknown serializer {kind!r}")
    if not frames:
        raise SerializationError("No frames to deserialize")
    try:
        if kind == "task":
            return _TaskUnpickler(io.BytesIO(frames[0]), buffers=frames[1:]).load()
        if kind == "task-split":
            from dask._task_spec import Task

            func = _load_function(frames[0])
            key, args, kwargs = _TaskUnpickler(io.BytesIO(frames[1]), buffers=frames[2:]).load()
            return Task(key, func, *args, **kwargs)
        return pickle_loads(frames[0], frames[1:])
    except Exception as e:
        raise SerializationError(f"Could not deserialize object: {e!r}") from e


def unwrap(value: Any) -> Any:
    """The object behind ``value``, deserialising it if it is still frames.

    Plain values come back unchanged, so callers need not know whether the
    message travelled through TCP (frames) or in process (live objects).
    """
    if isinstance(value, Serialized):
        return deserialize(value.header, value.frames)
    if isinstance(value, Serialize):
        return value.data
    return value


def as_serialized(value: Any) -> Serialized:
    """``value`` in serialised form (serialising a live object now)."""
    if isinstance(value, Serialized):
        return value
    header, frames = serialize(value)
    return Serialized(header, frames)
