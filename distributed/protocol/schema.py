"""Runtime checks of typed messages.

Each wire message is declared once as a ``TypedDict``.  :func:`checker` turns
such a declaration into a fast function that says what is wrong with a
received message (or ``None`` when it is well formed), so handlers can trust
the shape of what they get and a malformed message becomes a clear error
instead of corrupt state.

Sequences are accepted as lists or tuples: msgpack gives tuples back, the
in-process comm hands lists over as they were sent.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from distributed.protocol.serialize import Serialize, Serialized

__all__ = ["MessageError", "check", "checker"]

Check = Callable[[Any], "str | None"]

_cache: dict[Any, Check] = {}


class MessageError(ValueError):
    """A message that does not match its declared type."""


def _ok(value: Any) -> str | None:
    return None


def _isinstance(types_: tuple[type, ...], name: str) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, types_):
            return None
        return f"expected {name}, got {type(value).__name__}"

    return check


def _compile(tp: Any) -> Check:
    if tp is Any or tp is object:
        return _ok
    if tp is None or tp is type(None):
        return _isinstance((type(None),), "None")
    if tp is float:
        return _isinstance((float, int), "float")
    if tp is bool:
        return _isinstance((bool,), "bool")
    if tp is int:

        def check_int(value: Any) -> str | None:
            if isinstance(value, int) and not isinstance(value, bool):
                return None
            return f"expected int, got {type(value).__name__}"

        return check_int
    if tp is bytes:
        return _isinstance((bytes, bytearray, memoryview), "bytes")
    if tp in (Serialized, Serialize):
        return _isinstance((Serialized, Serialize), "a serialized object")
    if typing.is_typeddict(tp):
        return _compile_typeddict(tp)
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in (Union, types.UnionType):
        parts = [_compile(a) for a in args]

        def check_union(value: Any) -> str | None:
            errors = []
            for p in parts:
                err = p(value)
                if err is None:
                    return None
                errors.append(err)
            return " or ".join(errors)

        return check_union
    if origin is Literal:
        allowed = set(args)

        def check_literal(value: Any) -> str | None:
            try:
                if value in allowed:
                    return None
            except TypeError:  # unhashable (a list or dict): not one of the values
                pass
            return f"expected one of {sorted(map(repr, allowed))}, got {value!r}"

        return check_literal
    if origin in (list, tuple, collections.abc.Sequence, set, frozenset, collections.abc.Set):
        homogeneous = origin is not tuple
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],)
            homogeneous = True
        if not homogeneous:
            items = [_compile(a) for a in args]

            def check_fixed(value: Any) -> str | None:
                if not isinstance(value, (list, tuple)) or len(value) != len(items):
                    return f"expected a sequence of {len(items)} items"
                for i, (c, v) in enumerate(zip(items, value)):
                    err = c(v)
                    if err is not None:
                        return f"item {i}: {err}"
                return None

            return check_fixed
        item = _compile(args[0]) if args else _ok

        def check_seq(value: Any) -> str | None:
            if not isinstance(value, (list, tuple)):
                return f"expected a list, got {type(value).__name__}"
            if item is not _ok:
                for i, v in enumerate(value):
                    err = item(v)
                    if err is not None:
                        return f"item {i}: {err}"
            return None

        return check_seq
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        kc = _compile(args[0]) if args else _ok
        vc = _compile(args[1]) if args else _ok

        def check_map(value: Any) -> str | None:
            if not isinstance(value, dict):
                return f"expected a mapping, got {type(value).__name__}"
            if kc is not _ok or vc is not _ok:
                for k, v in value.items():
                    err = kc(k) or vc(v)
                    if err is not None:
                        return f"entry {k!r}: {err}"
            return None

        return check_map
    if origin is typing.NotRequired or origin is typing.Required:
        return _compile(args[0])
    if isinstance(tp, type):
        return _isinstance((tp,), tp.__name__)
    raise TypeError(f"Cannot check values of type {tp!r}")


def _compile_typeddict(td: Any) -> Check:
    hints = typing.get_type_hints(td)
    required = set(td.__required_keys__)
    # Under ``from __future__ import annotations`` Python 3.11 builds
    # ``__required_keys__`` from strings and counts ``NotRequired[...]`` fields
    # as required; the resolved annotations say what each field really is.
    for key, tp in typing.get_type_hints(td, include_extras=True).items():
        while get_origin(tp) is typing.Annotated:
            tp = get_args(tp)[0]
        if get_origin(tp) is typing.NotRequired:
            required.discard(key)
        elif get_origin(tp) is typing.Required:
            required.add(key)
    fields = {name: _compile(tp) for name, tp in hints.items()}
    return _generate_check(td.__name__, required, hints, fields)


_MISSING: Any = object()
_INT_TEST = "(isinstance(v, int) and v.__class__ is not bool)"


def _inline_test(tp: Any) -> str | None:
    """A Python expression in ``v``, true only for values the checker of ``tp`` accepts.

    None for types whose check needs a loop or a nested declaration (the compiled checker runs then).
    """
    if tp is None or tp is type(None):
        return "v is None"
    if tp is int:
        return _INT_TEST
    if tp is float:
        return "isinstance(v, (float, int))"
    if tp is bool:
        return "v.__class__ is bool"
    if tp is str:
        return "isinstance(v, str)"
    if tp is bytes:
        return "isinstance(v, (bytes, bytearray, memoryview))"
    if tp in (Serialized, Serialize):
        return "isinstance(v, _SERIALIZED)"
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        parts = [_inline_test(a) for a in args]
        if any(p is None for p in parts):
            return None
        return "(" + " or ".join(f"({p})" for p in parts if p is not None) + ")"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] is Any:
        return "isinstance(v, (list, tuple))"
    if origin is Literal and all(type(a) is str for a in args):
        return f"(v.__class__ is str and v in {frozenset(args)!r})"
    return None


def _generate_check(name: str, required: set[str], hints: dict[str, Any], fields: dict[str, Check]) -> Check:
    # Messages are checked once each on arrival: one generated function with a plain test per
    # field costs a fraction of a checker call per field.  Errors come from the field's checker.
    namespace: dict[str, Any] = {"_MISSING": _MISSING, "_SERIALIZED": (Serialized, Serialize), "_ok": _ok}
    lines = [
        "def check_td(value):",
        "    if not isinstance(value, dict):",
        f"        return {name + ': expected a mapping, got '!r} + type(value).__name__",
    ]
    for key in hints:
        if key in required:
            lines.append(f"    if {key!r} not in value:")
            lines.append(f"        return {f'{name}: missing field {key!r}'!r}")
    for i, (key, tp) in enumerate(hints.items()):
        field = fields[key]
        if field is _ok:
            continue
        namespace[f"_f{i}"] = field
        prefix = f"{name}.{key}: "
        lines.append(f"    v = value.get({key!r}, _MISSING)")
        test = _inline_test(tp)
        # The plain test passes what is surely good; anything else goes to the field's checker.
        lines.append(f"    if v is not _MISSING{'' if test is None else f' and not {test}'}:")
        lines.append(f"        err = _f{i}(v)")
        lines.append("        if err is not None:")
        lines.append(f"            return {prefix!r} + err")
    lines.append("    return None")
    exec("\n".join(lines), namespace)  # the source is built above from the declaration alone
    check_td: Check = namespace["check_td"]
    return check_td


def checker(tp: Any) -> Check:
    """A function returning what is wrong with a value of type ``tp``, or None."""
    c = _cache.get(tp)
    if c is None:
        c = _cache[tp] = _compile(tp)
    return c


def check(tp: Any, value: Any) -> None:
    """Raise :class:`MessageError` unless ``value`` matches ``tp``."""
    err = checker(tp)(value)
    if err is not None:
        raise MessageError(err)
