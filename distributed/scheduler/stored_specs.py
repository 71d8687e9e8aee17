"""How the scheduler keeps a task's packed run_spec in fewer bytes, and gives it back byte for byte.

A run_spec reaches the scheduler packed: msgpack of ``(header, frames)``.  A
task of a plain ``Task`` has two frames, its function pickled and
``(key, args, kwargs)`` pickled (see ``serialize_task``), so the tasks of one
group pack alike up to their last frame, and that frame repeats the task's key.
Of 122 bytes for ``client.map(f, range(n))``, 58 are the shared part and 42
the key.  The scheduler keeps:

* the shared part once, in the task's group (``TaskGroup.spec_prefix``, taken
  from the group's first packed run_spec by :func:`shared_prefix`);
* per task, what :func:`shrink` leaves: the last frame, with the key's own
  pickle opcodes cut out when they are where a plain ``Task`` puts them; of a
  short frame with a string key, only what follows the key (10 bytes of the
  122 above).

:func:`restore` puts the parts back together.  The first byte says which form
a stored run_spec has:

* ``0x92`` (a msgpack array of two): the whole packed pair, kept as it came;
* a msgpack ``bin`` marker (``0xc4``, ``0xc5``, ``0xc6``): the last frame,
  which follows the group's prefix;
* that marker less :data:`_CUT` (``0x01`` to ``0x03``): the last frame with the
  key cut out after the pickle's opening (protocol, then an optional frame op);
* ``0x94`` (pickle's MEMOIZE, which follows a string): a short last frame from
  the MEMOIZE after its string key on; its opening (the bin marker and length,
  the protocol, the frame op and length) follows from the key and that length.

None of these parses the pickle: only its first bytes are compared with what
pickling the key gives, so a pickle laid out any other way is kept whole.
"""

from __future__ import annotations

import pickle
import struct
from typing import Final

import msgpack

from distributed.protocol.messages import Key

__all__ = ["PACKED_PAIR", "restore", "shared_prefix", "shrink"]

#: The first byte of every packed ``(header, frames)``: a msgpack array of two.
PACKED_PAIR: Final = 0x92
#: The msgpack ``bin`` markers and how many bytes of length follow each.
_BIN_LENGTH_BYTES: Final = {0xC4: 1, 0xC5: 2, 0xC6: 4}
#: Subtracted from a bin marker to say "the key is cut out" (0xc4 -> 0x01 ...).
_CUT: Final = 0xC3
#: A pickle's protocol opcode, 5 (what ``serialize_task`` writes), and the frame opcode with its 8 bytes.
_PROTOCOL_5: Final = b"\x80\x05"
_FRAME_OP: Final = 0x95
_FRAME_LENGTH: Final = 9


def shared_prefix(packed: bytes) -> bytes:
    """The part of ``packed`` before its last frame, if it has two frames or more and is well formed; else b""."""
    unpacker = msgpack.Unpacker(use_list=False, strict_map_key=False)
    unpacker.feed(packed)
    try:
        if unpacker.read_array_header() != 2:
            return b""
        unpacker.skip()
        nframes = unpacker.read_array_header()
        if nframes < 2:
            return b""
        for _ in range(nframes - 1):
            unpacker.skip()
        start = unpacker.tell()
        unpacker.skip()
    except Exception:
        return b""
    if unpacker.tell() != len(packed) or packed[start] not in _BIN_LENGTH_BYTES:
        return b""
    return packed[:start]


def _key_opcodes(key: Key) -> bytes:
    """The opcodes that pickle ``key`` as the first thing of a protocol-5 pickle (memo numbering from 0)."""
    if type(key) is str:
        encoded = key.encode("utf-8", "surrogatepass")
        if len(encoded) < 256:
            return _SHORT_STR[len(encoded)] + encoded + _MEMOIZE
    whole = pickle.dumps(key, protocol=5)
    start = 2 + _FRAME_LENGTH if len(whole) > 2 and whole[2] == _FRAME_OP else 2
    return whole[start:-1]


def _key_offset(tail: bytes, start: int) -> int:
    """Where the key's opcodes start in ``tail[start:]`` (a last frame, its first byte a bin marker, or that
    marker less :data:`_CUT`), or 0 when its pickle is not laid out as ``serialize_task`` writes it."""
    length_bytes = _BIN_LENGTH_BYTES.get(tail[start]) or _BIN_LENGTH_BYTES.get(tail[start] + _CUT)
    if length_bytes is None:
        return 0
    at = start + 1 + length_bytes
    if tail[at : at + 2] != _PROTOCOL_5:
        return 0
    at += 2
    if len(tail) > at and tail[at] == _FRAME_OP:
        at += _FRAME_LENGTH
    return at


def shrink(packed: bytes, key: Key, prefix: bytes) -> bytes | None:
    """What the scheduler keeps of ``packed`` for the task ``key`` whose group's prefix is ``prefix``.

    None when ``packed`` does not start with ``prefix`` (then it is kept whole, if it
    starts as a packed pair should).
    """
    start = len(prefix)
    if not start or len(packed) <= start or not packed.startswith(prefix):
        return None
    if type(key) is str and packed[start] == 0xC4:
        # The common case: a short last frame whose pickle opens as serialize_task's does, with a short
        # string key.  Its opening (lengths included) follows from the key and what comes after it, so
        # only that is kept, from the MEMOIZE after the key on.
        encoded = key.encode("utf-8", "surrogatepass")
        size = len(packed) - start
        if len(encoded) < 256 and len(encoded) + 16 <= size < 258:
            end = start + _OPENING.size + 2 + len(encoded)
            if packed[end] == _MEMOIZE_OP and packed.startswith(
                b"".join((_opening(size - _OPENING.size), _SHORT_STR[len(encoded)], encoded)), start
            ):
                return packed[end:]
    marker = packed[start]
    if marker not in _BIN_LENGTH_BYTES:
        return None
    at = _key_offset(packed, start)
    if at:
        opcodes = _key_opcodes(key)
        if packed.startswith(opcodes, at):
            return b"".join((_CUT_MARKERS[marker], packed[start + 1 : at], packed[at + len(opcodes) :]))
    return packed[start:]


def restore(stored: bytes, key: Key, prefix: bytes) -> bytes:
    """The packed run_spec that :func:`shrink` (or nothing) made ``stored`` of, byte for byte."""
    first = stored[0]
    if first == _MEMOIZE_OP and type(key) is str:  # the common case first (only a string key is kept so)
        encoded = key.encode("utf-8", "surrogatepass")
        return b"".join((prefix, _opening(2 + len(encoded) + len(stored)), _SHORT_STR[len(encoded)], encoded, stored))
    if first == PACKED_PAIR:
        return stored
    if first in _BIN_LENGTH_BYTES:
        return prefix + stored
    at = _key_offset(stored, 0)  # the bytes before the cut are the last frame's own
    return b"".join((prefix, _BIN_MARKERS[first], stored[1:at], _key_opcodes(key), stored[at:]))


#: SHORT_BINUNICODE and a length, for each length: how pickle starts a string under 256 bytes.
_SHORT_STR: Final = tuple(bytes((0x8C, n)) for n in range(256))
#: MEMOIZE: what pickle writes after a string.
_MEMOIZE_OP: Final = 0x94
_MEMOIZE: Final = bytes((_MEMOIZE_OP,))
#: A short last frame's opening: bin8 marker and length, protocol 5, one frame op and its length.
_OPENING: Final = struct.Struct("<BBBBBQ")


def _opening(framed: int) -> bytes:
    """The opening of a short last frame whose pickle frame holds ``framed`` bytes."""
    return _OPENING.pack(0xC4, framed + _OPENING.size - 2, 0x80, 5, _FRAME_OP, framed)


#: The stored first byte for each bin marker when the key is cut out, and back.
_CUT_MARKERS: Final = {marker: bytes((marker - _CUT,)) for marker in _BIN_LENGTH_BYTES}
_BIN_MARKERS: Final = {marker - _CUT: bytes((marker,)) for marker in _BIN_LENGTH_BYTES}
