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
  pickle opcodes cut out when they are where a plain ``Task`` puts them.

:func:`restore` puts the parts back together.  The first byte says which form
a stored run_spec has:

* ``0x92`` (a msgpack array of two): the whole packed pair, kept as it came;
* a msgpack ``bin`` marker (``0xc4``, ``0xc5``, ``0xc6``): the last frame,
  which follows the group's prefix;
* that marker less :data:`_CUT` (``0x01`` to ``0x03``): the last frame with the
  key cut out after the pickle's opening (protocol, then an optional frame op).

None of these parses the pickle: only its first bytes are compared with what
pickling the key gives, so a pickle laid out any other way is kept whole.
"""

from __future__ import annotations

import pickle
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
            # SHORT_BINUNICODE, the length, the text, MEMOIZE: what pickle writes for such a string.
            return b"\x8c" + bytes((len(encoded),)) + encoded + b"\x94"
    whole = pickle.dumps(key, protocol=5)
    start = 2 + _FRAME_LENGTH if len(whole) > 2 and whole[2] == _FRAME_OP else 2
    return whole[start:-1]


def _key_offset(tail: bytes | bytearray, marker: int) -> int:
    """Where the key's opcodes start in a stored last frame whose msgpack marker is ``marker``, or 0."""
    length_bytes = _BIN_LENGTH_BYTES.get(marker)
    if length_bytes is None:
        return 0
    start = 1 + length_bytes
    if tail[start : start + 2] != _PROTOCOL_5:
        return 0
    start += 2
    if len(tail) > start and tail[start] == _FRAME_OP:
        start += _FRAME_LENGTH
    return start


def shrink(packed: bytes, key: Key, prefix: bytes) -> bytes | None:
    """What the scheduler keeps of ``packed`` for the task ``key`` whose group's prefix is ``prefix``.

    None when ``packed`` does not start with ``prefix`` (then it is kept whole, if it
    starts as a packed pair should).
    """
    if not prefix or not packed.startswith(prefix) or len(packed) <= len(prefix):
        return None
    tail = packed[len(prefix) :]
    marker = tail[0]
    offset = _key_offset(tail, marker)
    if offset:
        opcodes = _key_opcodes(key)
        if tail.startswith(opcodes, offset):
            return bytes((marker - _CUT,)) + tail[1:offset] + tail[offset + len(opcodes) :]
    return tail if marker in _BIN_LENGTH_BYTES else None


def restore(stored: bytes, key: Key, prefix: bytes) -> bytes:
    """The packed run_spec that :func:`shrink` (or nothing) made ``stored`` of, byte for byte."""
    first = stored[0]
    if first == PACKED_PAIR:
        return stored
    if first in _BIN_LENGTH_BYTES:
        return prefix + stored
    marker = first + _CUT
    offset = _key_offset(stored, marker)  # the cut is after the offset: the bytes before it are the tail's
    return b"".join((prefix, bytes((marker,)), stored[1:offset], _key_opcodes(key), stored[offset:]))
