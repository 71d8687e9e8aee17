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

Serializer families
-------------------
A family is a named pair ``dumps(obj) -> (header, frames)`` and
``loads(header, frames) -> obj`` (see :func:`register_serialization_family`).
:func:`serialize` tries the families it is given in turn, by default
``("dask", "pickle")``: a family that cannot take the object raises
``NotImplementedError`` and the next one is tried.  ``pickle`` is defined here;
``dask`` (types registered on ``dask_serialize``), ``msgpack`` and ``error``
in :mod:`distributed.protocol.families`, ``cuda`` in
:mod:`distributed.protocol.cuda`.  A header names its family under ``"s"``;
the task forms ``"task"`` and ``"task-split"`` count as ``pickle``.

Nothing here is ever called on the scheduler for task payloads: the scheduler
keeps :class:`Serialized` values as they came.
"""

from __future__ import annotations

import inspect
import io
import logging
import pickle
import struct
import sys
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal, NamedTuple

import cloudpickle
import msgpack

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SERIALIZERS",
    "Family",
    "Frame",
    "SerializationError",
    "Serialize",
    "Serialized",
    "deserialize",
    "deserialize_bytes",
    "families",
    "nbytes_of_frames",
    "nested_deserialize",
    "pickle_dumps",
    "pickle_loads",
    "register_serialization_family",
    "serialize",
    "serialize_bytelist",
    "serialize_bytes",
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


class Family(NamedTuple):
    """A serializer family: how an object becomes a header and frames, and back."""

    #: ``dumps(obj)`` (or ``dumps(obj, context=...)``) -> ``(header, frames)``; raises
    #: ``NotImplementedError`` for an object the family does not take.
    dumps: Callable[..., tuple[dict[str, Any], Sequence[Any]]]
    #: ``loads(header, frames)`` -> the object.
    loads: Callable[[dict[str, Any], list[Frame]], Any]
    #: Whether ``dumps`` takes the ``context`` keyword.
    wants_context: bool
    #: ``takes(cls)``: whether ``dumps`` takes objects of ``cls``, answered without trying (None: try).
    takes: Callable[[type], bool] | None = None


#: The serializer families by name, in registration order.
families: dict[str, Family] = {}

#: The families :func:`serialize` tries, in order, when given none.
DEFAULT_SERIALIZERS: Final = ("dask", "pickle")

#: Header names the task forms go by; each is the ``pickle`` family as far as a choice of families goes.
_PICKLE_FORMS: Final = frozenset({"pickle", "task", "task-split"})


def register_serialization_family(
    name: str,
    dumps: Callable[..., tuple[dict[str, Any], Sequence[Any]]],
    loads: Callable[[dict[str, Any], list[Frame]], Any],
    takes: Callable[[type], bool] | None = None,
) -> None:
    """Register a serializer family under ``name`` (replacing one of that name).

    Parameters
    ----------
    name
        What ``serializers=`` and ``deserializers=`` lists call it.
    dumps
        ``dumps(obj) -> (header, frames)``: ``header`` a msgpack-able dict,
        ``frames`` bytes-like objects (buffers are sent as they are, never
        copied).  Raise ``NotImplementedError`` for objects the family does not
        take, so that the next family is tried.  May take a ``context`` keyword.
    loads
        ``loads(header, frames) -> obj``.
    takes
        Optional ``takes(cls) -> bool``, a cheap answer to whether ``dumps``
        takes objects of ``cls`` (it is asked before each object, so that a
        family that passes on most objects costs no exception each time).

    Examples
    --------
    >>> def dumps(x):  # doctest: +SKIP
    ...     return {}, [str(x).encode()]
    >>> def loads(header, frames):  # doctest: +SKIP
    ...     return frames[0].decode()
    >>> register_serialization_family("text", dumps, loads)  # doctest: +SKIP
    """
    if name in ("task", "task-split", "malformed"):
        raise ValueError(f"{name!r} is the name of a form of the pickle family; choose another")
    try:
        wants_context = "context" in inspect.signature(dumps).parameters
    except (TypeError, ValueError):
        wants_context = False
    families[name] = Family(dumps, loads, wants_context, takes)


def _as_frame(frame: Any) -> Frame:
    """A frame a family returned, as bytes, bytearray or a flat byte memoryview (never copied)."""
    if isinstance(frame, (bytes, bytearray)):
        return frame
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        try:
            view = view.cast("B")
        except TypeError:
            view = memoryview(view.tobytes())  # not contiguous: the one copy there is no way around
    return view


def _with_writeable(header: dict[str, Any], buffers: Sequence[Frame]) -> dict[str, Any]:
    """``header``, noting which out-of-band ``buffers`` are writable (when any buffer is)."""
    if buffers:
        header["writeable"] = [not memoryview(b).readonly for b in buffers]
    return header


def _as_sent(header: dict[str, Any], buffers: Sequence[Frame]) -> Sequence[Frame]:
    """``buffers`` writable where they were on the sender, read-only where they were not (as dask keeps them).

    A NumPy array unpickled from a read-only frame is read-only; code such as
    scikit-learn's writes into its inputs.  A frame read into its own buffer is
    writable already; a small frame cut from a shared read buffer is copied here.
    """
    writeable = header.get("writeable")
    if not writeable:
        return buffers
    out: list[Frame] = []
    for w, frame in zip(writeable, buffers):
        view = memoryview(frame)
        if w and view.readonly:
            frame = memoryview(bytearray(view))
        elif not w and not view.readonly:
            frame = view.toreadonly()
        out.append(frame)
    return out


def _pickle_family_dumps(obj: Any) -> tuple[dict[str, Any], list[Frame]]:
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle_dumps(obj, buffer_callback=buffers.append)
    frames: list[Frame] = [payload]
    frames.extend(_buffer_frame(b) for b in buffers)
    return _with_writeable({"s": "pickle"}, frames[1:]), frames


def _pickle_family_loads(header: dict[str, Any], frames: list[Frame]) -> Any:
    return pickle_loads(frames[0], _as_sent(header, frames[1:]))


families["pickle"] = Family(_pickle_family_dumps, _pickle_family_loads, False)


def serialize(
    obj: Any,
    serializers: Sequence[str] | None = None,
    on_error: Literal["message", "raise"] = "message",
    context: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Frame]]:
    """Turn ``obj`` into a header and frames with the first family that takes it.

    Parameters
    ----------
    obj
        Any object; a :class:`Serialized` gives its own header and frames, a
        :class:`Serialize` the object it wraps.
    serializers
        Names of the families to try, in order (default :data:`DEFAULT_SERIALIZERS`).
    on_error
        When no family takes ``obj`` or one fails: ``"message"`` (as in dask)
        returns an ``error`` family object that raises when deserialised;
        ``"raise"`` raises.
    context
        Passed to the families whose ``dumps`` take a ``context`` keyword.

    Raises
    ------
    SerializationError
        With ``on_error="raise"``, when ``obj`` cannot be serialised by those families.
    ValueError
        For a family name that is not registered.
    """
    if isinstance(obj, Serialized):
        return obj.header, obj.frames
    if isinstance(obj, Serialize):
        obj = obj.data
    names = DEFAULT_SERIALIZERS if serializers is None else serializers
    failure: BaseException | None = None
    for name in names:
        family = families.get(name)
        if family is None:
            if serializers is None:
                continue  # a default family not registered (yet): the next one
            raise ValueError(f"Unknown serializer family {name!r}; registered: {sorted(families)}")
        if family.takes is not None and not family.takes(type(obj)):
            continue
        try:
            header, frames = family.dumps(obj, context=context) if family.wants_context else family.dumps(obj)
        except NotImplementedError:
            continue
        except Exception as e:
            failure = e
            break
        kind = header.get("s")
        if kind != name and not (name == "pickle" and kind in _PICKLE_FORMS):
            header["s"] = name
        return header, [_as_frame(f) for f in frames]
    reason = f"{failure!r}" if failure is not None else f"no family of {list(names)} takes it"
    text = f"Could not serialize object of type {type(obj).__name__}: {reason}"
    if on_error == "raise":
        raise SerializationError(text) from failure
    return {"s": "error"}, [text.encode()]


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


def _load_task_state(payload: Frame, buffers: Sequence[Frame]) -> Any:
    """Unpickle what :func:`_dumps_task_state` pickled.

    Most payloads were pickled by the standard pickler and load with
    ``pickle.loads`` (a third of the time of an unpickler object per task);
    one that refers to cloudpickled functions or classes by persistent id
    raises there, and loads with :class:`_TaskUnpickler`.
    """
    try:
        return pickle.loads(payload, buffers=buffers)
    except pickle.UnpicklingError as e:
        if "persistent" not in str(e):
            raise
    return _TaskUnpickler(io.BytesIO(payload), buffers=buffers).load()


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
            return Serialized(_with_writeable({"s": "task-split"}, out[2:]), out)
        payload = _dumps_task_state(obj, buffers)
    except Exception:
        header, frames = serialize(obj, on_error="raise")
        return Serialized(header, frames)
    out = [payload]
    out.extend(_buffer_frame(b) for b in buffers)
    return Serialized(_with_writeable({"s": "task"}, out[1:]), out)


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


def deserialize(header: dict[str, Any], frames: Sequence[Frame], deserializers: Iterable[str] | None = None) -> Any:
    """Inverse of :func:`serialize`.

    Parameters
    ----------
    header, frames
        As :func:`serialize` made them.
    deserializers
        Names of the families allowed (default: any registered).

    Raises
    ------
    SerializationError
        For an unknown family, frames that do not load, or an object the
        ``error`` family stands for (it could not be serialised).
    TypeError
        When the object's family is not among ``deserializers``.
    """
    kind = header.get("s")
    if kind == "malformed":
        raise SerializationError(f"Malformed serialized object: {header.get('error')}")
    if deserializers is not None:
        allowed = set(deserializers)
        family_name = "pickle" if kind in _PICKLE_FORMS else kind
        if family_name not in allowed:
            raise TypeError(
                f"Data serialized with the {family_name!r} family; allowed to deserialize: {sorted(allowed)}"
            )
    if kind not in _PICKLE_FORMS:
        family = families.get(kind) if isinstance(kind, str) else None
        if family is None:
            raise SerializationError(f"Unknown serializer {kind!r}")
        try:
            return family.loads(header, list(frames))
        except SerializationError:
            raise
        except Exception as e:
            raise SerializationError(f"Could not deserialize object of the {kind!r} family: {e!r}") from e
    if not frames:
        raise SerializationError("No frames to deserialize")
    try:
        if kind == "task":
            return _load_task_state(frames[0], _as_sent(header, frames[1:]))
        if kind == "task-split":
            from dask._task_spec import Task

            func = _load_function(frames[0])
            key, args, kwargs = _load_task_state(frames[1], _as_sent(header, frames[2:]))
            return Task(key, func, *args, **kwargs)
        return pickle_loads(frames[0], _as_sent(header, frames[1:]))
    except Exception as e:
        raise SerializationError(f"Could not deserialize object: {e!r}") from e


def nested_deserialize(value: Any, deserializers: Iterable[str] | None = None) -> Any:
    """``value`` with every :class:`Serialize` and :class:`Serialized` in it, at any depth of dicts, lists and
    tuples, replaced by its object.

    Examples
    --------
    >>> nested_deserialize({"x": [to_serialize(1), 2]})
    {'x': [1, 2]}
    """
    if isinstance(value, Serialize):
        return value.data
    if isinstance(value, Serialized):
        return deserialize(value.header, value.frames, deserializers)
    if isinstance(value, dict):
        return {k: nested_deserialize(v, deserializers) for k, v in value.items()}
    if isinstance(value, list):
        return [nested_deserialize(v, deserializers) for v in value]
    if isinstance(value, tuple):
        return tuple(nested_deserialize(v, deserializers) for v in value)
    return value


#: The length of a byte list's description (its first frame starts with it).
_DESCRIPTION_LENGTH = struct.Struct("<Q")


def serialize_bytelist(
    obj: Any,
    serializers: Sequence[str] | None = None,
    on_error: Literal["message", "raise"] = "message",
    context: dict[str, Any] | None = None,
) -> list[Frame]:
    """Serialise ``obj`` into frames that stand alone: joined, :func:`deserialize_bytes` reads them back.

    The first frame describes the rest (the header and each frame's length);
    the others are :func:`serialize`'s frames, not copied.  The parameters are
    those of :func:`serialize`.
    """
    header, frames = serialize(obj, serializers=serializers, on_error=on_error, context=context)
    description = msgpack.packb(
        {"header": header, "lengths": [nbytes_of_frames([f]) for f in frames]}, use_bin_type=True
    )
    return [_DESCRIPTION_LENGTH.pack(len(description)) + description, *frames]


def serialize_bytes(obj: Any, **kwargs: Any) -> bytes:
    """``obj`` as one bytes object (:func:`serialize_bytelist` joined); ``kwargs`` as for :func:`serialize`."""
    return b"".join(serialize_bytelist(obj, **kwargs))


def deserialize_bytes(data: Frame, deserializers: Iterable[str] | None = None) -> Any:
    """The object of :func:`serialize_bytes` (or of :func:`serialize_bytelist`'s frames joined).

    Raises
    ------
    SerializationError
        When ``data`` is not such bytes, or its object does not deserialise.
    """
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    try:
        (size,) = _DESCRIPTION_LENGTH.unpack_from(view)
        start = _DESCRIPTION_LENGTH.size + size
        description = msgpack.unpackb(view[_DESCRIPTION_LENGTH.size : start], use_list=False, strict_map_key=False)
        header, lengths = description["header"], description["lengths"]
        if start + sum(lengths) != view.nbytes:
            raise ValueError(f"{view.nbytes} bytes where the description says {start + sum(lengths)}")
    except Exception as e:
        raise SerializationError(f"Not the bytes of a serialized object: {e!r}") from e
    frames: list[Frame] = []
    for length in lengths:
        frames.append(view[start : start + length])
        start += length
    return deserialize(header, frames, deserializers)


def unwrap(value: Any, deserializers: Iterable[str] | None = None) -> Any:
    """The object behind ``value``, deserialising it if it is still frames (with one of ``deserializers``).

    Plain values come back unchanged, so callers need not know whether the
    message travelled through TCP (frames) or in process (live objects).
    """
    if isinstance(value, Serialized):
        return deserialize(value.header, value.frames, deserializers)
    if isinstance(value, Serialize):
        return value.data
    return value


def as_serialized(value: Any, serializers: Sequence[str] | None = None) -> Serialized:
    """``value`` in serialised form (serialising a live object now, with ``serializers``)."""
    if isinstance(value, Serialized):
        return value
    header, frames = serialize(value, serializers, on_error="raise")
    return Serialized(header, frames)
