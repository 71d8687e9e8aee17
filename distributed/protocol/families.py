"""The serializer families beyond pickle: ``dask``, ``msgpack`` and ``error``, and ``register_generic``.

``dask`` serialises the types registered on :data:`dask_serialize` and
:data:`dask_deserialize`, two ``dask.utils.Dispatch`` registries keyed by type
(a subclass uses its base's entry).  A library registers its types there::

    @dask_serialize.register(MyType)
    def _(obj: MyType) -> tuple[dict, list[bytes | memoryview]]: ...

    @dask_deserialize.register(MyType)
    def _(header: dict, frames: list) -> MyType: ...

and its objects then travel as those frames, worker to worker and to the
client, never pickled; buffers in the frames are sent as they are.  The
header carries the pickled type (a reference: its module and name), so the
receiving side finds the type's ``dask_deserialize`` entry.

Every serialisation with the default families looks up the object's type
here first, so the lookup is cached by type, and the cache is dropped
whenever a registry gains an entry (:class:`FamilyDispatch` counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import msgpack
from dask.utils import Dispatch, typename

from distributed.protocol.serialize import (
    Frame,
    SerializationError,
    deserialize,
    pickle_dumps,
    pickle_loads,
    register_serialization_family,
    serialize,
)

__all__ = [
    "FamilyDispatch",
    "dask_deserialize",
    "dask_serialize",
    "register_generic",
    "registry_family",
]


#: A registered function.
F = TypeVar("F", bound=Callable[..., Any])


class FamilyDispatch(Dispatch):
    """A ``dask.utils.Dispatch`` that counts its registrations, so lookups can be cached.

    Parameters
    ----------
    name
        The registry's name.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)  # type: ignore[no-untyped-call]  # dask.utils.Dispatch has no annotations
        #: Grows with each registration (eager, or lazy when it runs).
        self.version = 0

    @overload
    def register(self, type: Any, func: None = None) -> Callable[[F], F]: ...

    @overload
    def register(self, type: Any, func: F) -> F: ...

    def register(self, type: Any, func: F | None = None) -> F | Callable[[F], F]:
        """Register ``func`` for ``type`` (or a tuple of types); as a decorator without ``func``."""
        return self._counted(super().register, type, func)

    @overload
    def register_lazy(self, toplevel: str, func: None = None) -> Callable[[F], F]: ...

    @overload
    def register_lazy(self, toplevel: str, func: F) -> F: ...

    def register_lazy(self, toplevel: str, func: F | None = None) -> F | Callable[[F], F]:
        """Run ``func`` (which registers) the first time a type of package ``toplevel`` is looked up."""
        return self._counted(super().register_lazy, toplevel, func)

    def _counted(self, register: Callable[[Any, Any], Any], what: Any, func: F | None) -> F | Callable[[F], F]:
        # Each registration, eager or lazy, makes cached lookups stale: a type looked up and found
        # without an entry may now have one.
        def wrapper(func: F) -> F:
            register(what, func)
            self.version += 1
            return func

        return wrapper(func) if func is not None else wrapper


#: ``dask_serialize.register(cls)(f)``: ``f(obj) -> (header, frames)`` for objects of ``cls``.
dask_serialize = FamilyDispatch("dask_serialize")
#: ``dask_deserialize.register(cls)(f)``: ``f(header, frames) -> obj`` for objects of ``cls``.
dask_deserialize = FamilyDispatch("dask_deserialize")


class _CachedLookup:
    """``registry.dispatch(cls)`` by type, None for a type without an entry; forgotten on a new registration."""

    def __init__(self, registry: FamilyDispatch) -> None:
        self.registry = registry
        self.version = -1
        self.found: dict[type, Callable[..., Any] | None] = {}

    def __call__(self, cls: type) -> Callable[..., Any] | None:
        if self.version != self.registry.version:
            self.found.clear()
            self.version = self.registry.version
        try:
            return self.found[cls]
        except KeyError:
            pass
        try:
            func: Callable[..., Any] | None = self.registry.dispatch(cls)  # type: ignore[no-untyped-call]  # as above
        except TypeError:
            func = None
        if self.version == self.registry.version:  # a lazy registration just ran: look again next time
            self.found[cls] = func
        return func


def registry_family(
    name: str, dumps_registry: FamilyDispatch, loads_registry: FamilyDispatch
) -> tuple[
    Callable[..., tuple[dict[str, Any], Sequence[Any]]],
    Callable[[dict[str, Any], list[Frame]], Any],
    Callable[[type], bool],
]:
    """The ``dumps``, ``loads`` and ``takes`` of a family that serialises the types registered on two registries.

    ``dumps`` passes on (``NotImplementedError``) an object whose type has no
    entry; its header keeps the entry's own header under ``"sub-header"`` and
    the pickled type (a reference by module and name) under ``"type-serialized"``.

    Examples
    --------
    >>> register_serialization_family("mine", *registry_family("mine", my_dumps, my_loads))  # doctest: +SKIP
    """
    dumps_of = _CachedLookup(dumps_registry)

    def dumps(obj: Any, context: dict[str, Any] | None = None) -> tuple[dict[str, Any], Sequence[Any]]:
        cls = type(obj)
        entry = dumps_of(cls)
        if entry is None:
            raise NotImplementedError(typename(cls))
        sub_header, frames = entry(obj, context=context) if _takes_context(entry) else entry(obj)
        header = {
            "s": name,
            "type": typename(cls),
            # By reference where it imports; a class defined in a function or __main__ by value.
            "type-serialized": pickle_dumps(cls),
            "sub-header": sub_header,
        }
        return header, frames

    def loads(header: dict[str, Any], frames: list[Frame]) -> Any:
        cls = pickle_loads(header["type-serialized"])
        try:
            entry = loads_registry.dispatch(cls)  # type: ignore[no-untyped-call]  # as above
        except TypeError:
            raise SerializationError(f"No {loads_registry.__name__} entry for {typename(cls)}") from None
        return entry(header["sub-header"], frames)

    def takes(cls: type) -> bool:
        return dumps_of(cls) is not None

    return dumps, loads, takes


def _takes_context(func: Callable[..., Any]) -> bool:
    code = getattr(func, "__code__", None)
    return code is not None and "context" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]


def _msgpack_dumps(obj: Any) -> tuple[dict[str, Any], list[Frame]]:
    try:
        frame = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        raise NotImplementedError(typename(type(obj))) from None
    return {"s": "msgpack"}, [frame]


def _msgpack_loads(header: dict[str, Any], frames: list[Frame]) -> Any:
    return msgpack.unpackb(b"".join(bytes(f) for f in frames), use_list=False, strict_map_key=False)


def _error_dumps(obj: Any) -> tuple[dict[str, Any], list[Frame]]:
    raise NotImplementedError("the error family only stands for objects that could not be serialised")


def _error_loads(header: dict[str, Any], frames: list[Frame]) -> Any:
    raise SerializationError("\n".join(bytes(f).decode("utf-8", "replace") for f in frames))


register_serialization_family("dask", *registry_family("dask", dask_serialize, dask_deserialize))
register_serialization_family("msgpack", _msgpack_dumps, _msgpack_loads)
register_serialization_family("error", _error_dumps, _error_loads)


def register_generic(
    cls: type[Any],
    serializer_name: str = "dask",
    serialize_func: FamilyDispatch = dask_serialize,
    deserialize_func: FamilyDispatch = dask_deserialize,
) -> None:
    """Serialise objects of ``cls`` attribute by attribute, each with family ``serializer_name``.

    For a class whose instances keep their data in ``__dict__`` (no ``__slots__``):
    each attribute is serialised on its own, by ``serializer_name`` when that
    family takes it and else by pickle, so an attribute that is, say, an array
    keeps its buffers out of band.  Deserialising makes the object without
    calling ``__init__`` and sets the attributes back.

    Parameters
    ----------
    cls
        The class.
    serializer_name
        The family for the attributes.
    serialize_func, deserialize_func
        The registries to register ``cls`` on (those of the ``dask`` family by default).
    """
    families = (serializer_name, "pickle") if serializer_name != "pickle" else ("pickle",)

    def dumps(obj: Any) -> tuple[dict[str, Any], list[Frame]]:
        names: list[str] = []
        headers: list[dict[str, Any]] = []
        counts: list[int] = []
        frames: list[Frame] = []
        for name, value in vars(obj).items():
            sub_header, sub_frames = serialize(value, serializers=families, on_error="raise")
            names.append(name)
            headers.append(sub_header)
            counts.append(len(sub_frames))
            frames.extend(sub_frames)
        return {"attributes": names, "headers": headers, "frame-counts": counts}, frames

    def loads(header: dict[str, Any], frames: list[Frame]) -> Any:
        obj = object.__new__(cls)  # as pickle makes objects of plain classes: no __init__
        start = 0
        for name, sub_header, count in zip(header["attributes"], header["headers"], header["frame-counts"]):
            setattr(obj, name, deserialize(sub_header, frames[start : start + count]))
            start += count
        return obj

    serialize_func.register(cls)(dumps)
    deserialize_func.register(cls)(loads)
