"""Messages to frames and back.

A message is plain data (dicts, lists, tuples, str, bytes, int, float, bool,
None) that may hold :class:`~distributed.protocol.serialize.Serialize` or
:class:`~distributed.protocol.serialize.Serialized` values.  :func:`dumps`
writes the plain part with msgpack as frame 0 and puts each serialised object's
frames after it, leaving a small msgpack extension in frame 0 that says where
they are.  Buffers are not copied: frames are returned as the objects hold them.

Invariants
----------
* Tuples survive a round trip (arrays unpack as tuples), so dask keys such as
  ``("x", 0)`` stay hashable and equal.
* :func:`loads` with ``deserialize=False`` never unpickles anything: serialised
  values come back as :class:`Serialized`.  Comms always read this way; code
  that wants an object calls :func:`~distributed.protocol.serialize.unwrap`.
* With ``deserialize=False`` a small object carried inside frame 0 is not even
  unpacked: it stays the bytes it came as (``Serialized.packed``) and is
  written back out unchanged; malformed bytes surface as a
  ``SerializationError`` when something deserialises them.
* Given a codec (``distributed.comm.compression``), :func:`dumps` compresses a
  serialised object's frames of :data:`COMPRESS_MIN` bytes or more that a
  sample shows to shrink; the object's marker names the codec of each frame,
  and :func:`loads` decompresses them whatever its own setting, so two ends
  with different settings understand each other.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

import msgpack

from distributed.protocol.compression import Codec, codec_for
from distributed.protocol.serialize import (
    Frame,
    SerializationError,
    Serialize,
    Serialized,
    serialize,
)
from distributed.protocol.serialize import (
    deserialize as deserialize_object,
)

logger = logging.getLogger(__name__)

__all__ = ["ProtocolError", "dumps", "is_msgpack_serializable", "loads"]

EXT_SERIALIZED: Final = 1
EXT_INLINE: Final = 2
#: Serialised objects whose frames add up to less than this travel inside
#: frame 0 instead of as frames of their own (no per-frame cost for the many
#: small task specifications of a graph).
INLINE_LIMIT: Final = 16 * 1024
#: Frames smaller than this are sent as they are: compressing them saves too little.
COMPRESS_MIN: Final = 10_000
#: Bytes of a frame compressed first to see whether the whole is worth compressing.
COMPRESS_SAMPLE: Final = 10_000
#: A frame is sent compressed only if that takes it below this share of its size.
COMPRESS_RATIO: Final = 0.9


class ProtocolError(ValueError):
    """Frames that do not decode to a message."""


def dumps(msg: Any, *, strict: bool = False, compression: Codec | None = None) -> list[Frame]:
    """Encode ``msg`` into a list of frames.

    Parameters
    ----------
    msg
        The message.
    strict
        When False (the default), objects msgpack cannot encode are pickled, as
        if wrapped in :class:`Serialize`.  When True they raise ``TypeError``.
    compression
        The codec that compresses serialised objects' large frames (None: none).
    """
    frames: list[Frame] = [b""]

    def default(obj: Any) -> msgpack.ExtType:
        if isinstance(obj, Serialized):
            if obj.packed is not None:
                return msgpack.ExtType(EXT_INLINE, obj.packed)
            header, sub = obj.header, obj.frames
        elif isinstance(obj, Serialize):
            header, sub = serialize(obj.data, on_error="raise")
        elif strict:
            raise TypeError(f"Cannot encode {type(obj).__name__} in a message")
        else:
            header, sub = serialize(obj, on_error="raise")
        size = 0
        for f in sub:
            size += f.nbytes if isinstance(f, memoryview) else len(f)
        if size < INLINE_LIMIT:
            return msgpack.ExtType(
                EXT_INLINE,
                msgpack.packb((header, [bytes(f) if isinstance(f, memoryview) else f for f in sub]), use_bin_type=True),
            )
        start = len(frames)
        if compression is not None:
            codecs, sub = _compressed(sub, compression)
            if codecs is not None:
                frames.extend(sub)
                marker = (start, len(sub), header, codecs)
                return msgpack.ExtType(EXT_SERIALIZED, msgpack.packb(marker, use_bin_type=True))
        frames.extend(sub)
        return msgpack.ExtType(EXT_SERIALIZED, msgpack.packb((start, len(sub), header), use_bin_type=True))

    frames[0] = msgpack.packb(msg, default=default, use_bin_type=True)
    return frames


def _compressed(sub: Sequence[Frame], codec: Codec) -> tuple[list[str | None] | None, list[Frame]]:
    """``sub`` with its frames worth compressing compressed, and the codec of each (None: none was)."""
    codecs: list[str | None] = []
    out: list[Frame] = []
    for f in sub:
        packed = _compress_if_worth(f, codec)
        codecs.append(None if packed is None else codec.name)
        out.append(f if packed is None else packed)
    if not any(codecs):
        return None, list(sub)
    return codecs, out


def _compress_if_worth(f: Frame, codec: Codec) -> bytes | None:
    """``f`` compressed, if it is large and a sample of it shrinks; else None."""
    if isinstance(f, memoryview):
        if f.nbytes < COMPRESS_MIN or not f.c_contiguous:
            return None
        if f.ndim != 1 or f.format != "B":
            f = f.cast("B")  # a buffer of other items (an array's) as its bytes
    elif len(f) < COMPRESS_MIN:
        return None
    sample = f[:COMPRESS_SAMPLE]
    if len(codec.compress(sample)) >= COMPRESS_RATIO * len(sample):
        return None
    packed = codec.compress(f)
    return packed if len(packed) < COMPRESS_RATIO * len(f) else None


def _decompressed(frames: Sequence[Frame], codecs: Any) -> list[Frame]:
    """``frames`` of one object, each decompressed by the codec named for it."""
    if not isinstance(codecs, tuple) or len(codecs) != len(frames):
        raise ProtocolError("Malformed compression list of a serialized object")
    out: list[Frame] = []
    for f, name in zip(frames, codecs, strict=True):
        if name is None:
            out.append(f)
            continue
        try:
            codec = codec_for(name, "compressed frame")
        except ValueError as e:
            raise ProtocolError(f"A frame compressed with {name!r} cannot be read here: {e}") from e
        if codec is None:
            raise ProtocolError(f"Unknown compression {name!r} of a frame")
        try:
            out.append(codec.decompress(f))
        except Exception as e:
            raise ProtocolError(f"A frame compressed with {name!r} does not decompress: {e!r}") from e
    return out


def is_msgpack_serializable(obj: Any) -> bool:
    """Whether ``obj`` travels as plain msgpack (nothing pickled), as event messages must.

    Examples
    --------
    >>> is_msgpack_serializable({"x": [1, 2.5, "a", None]})
    True
    >>> is_msgpack_serializable({1, 2})
    False
    """
    try:
        msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def loads(frames: Sequence[Frame], *, deserialize: bool = True) -> Any:
    """Decode frames made by :func:`dumps`.

    Parameters
    ----------
    frames
        The frames.
    deserialize
        Whether to turn serialised values back into objects.  When False they
        stay :class:`Serialized`.

    Raises
    ------
    ProtocolError
        When the frames do not form a message.
    SerializationError
        With ``deserialize=True``, when a serialised object does not deserialise.
    """
    if not frames:
        raise ProtocolError("A message needs at least one frame")
    nframes = len(frames)

    def ext_hook(code: int, data: bytes) -> Any:
        if code == EXT_INLINE:
            if not deserialize:
                return Serialized.from_packed(data)
            try:
                header, sub = msgpack.unpackb(data, use_list=False, strict_map_key=False)
            except Exception as e:
                raise ProtocolError(f"Malformed inline serialized object: {e!r}") from e
            if not isinstance(header, dict) or not isinstance(sub, tuple) or not all(isinstance(f, bytes) for f in sub):
                raise ProtocolError("Malformed inline serialized object")
            return deserialize_object(header, list(sub))
        if code != EXT_SERIALIZED:
            raise ProtocolError(f"Unknown msgpack extension {code}")
        try:
            marker = msgpack.unpackb(data, use_list=False, strict_map_key=False)
            start, n, header = marker[:3]
        except Exception as e:
            raise ProtocolError(f"Malformed serialized-object marker: {e!r}") from e
        if (
            not isinstance(start, int)
            or not isinstance(n, int)
            or not isinstance(header, dict)
            or start < 1
            or n < 0
            or start + n > nframes
        ):
            raise ProtocolError("Serialized-object marker points outside the message")
        sub = frames[start : start + n]
        if len(marker) > 3:
            sub = _decompressed(sub, marker[3])
        s = Serialized(header, sub)
        if deserialize:
            return deserialize_object(s.header, s.frames)
        return s

    try:
        return msgpack.unpackb(frames[0], use_list=False, strict_map_key=False, ext_hook=ext_hook)
    except (ProtocolError, SerializationError):
        # SerializationError comes only from deserialising a well-framed
        # object; anything else (e.g. TypeError for a map used as a map key)
        # means the frames are not a message.
        raise
    except Exception as e:
        raise ProtocolError(f"Malformed message: {e!r}") from e
