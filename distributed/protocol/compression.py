"""Compression codecs by the names dask.distributed's config uses for them.

``"zlib"`` is always available; ``"lz4"``, ``"snappy"`` and ``"zstd"`` need
their packages (``lz4``, ``python-snappy``, ``zstandard``); zstd compresses at
``distributed.comm.zstd.level`` with ``distributed.comm.zstd.threads`` threads.  ``"auto"`` is lz4
when installed, else no compression, as in dask.distributed; ``None`` and
``False`` mean no compression.  A codec named but not installed is an error
naming the setting, not a silent fallback.
"""

from __future__ import annotations

import functools
import importlib
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import dask.config

__all__ = ["Codec", "codec_for"]


class Codec(NamedTuple):
    """A compression codec: its name, a one-byte tag that marks data it compressed, and its two functions."""

    name: str
    tag: bytes
    compress: Callable[[bytes | bytearray | memoryview], bytes]
    decompress: Callable[[bytes | bytearray | memoryview], bytes]


def _zlib() -> Codec:
    return Codec("zlib", b"z", zlib.compress, zlib.decompress)


def _lz4() -> Codec:
    frame: Any = importlib.import_module("lz4.frame")
    return Codec("lz4", b"4", frame.compress, frame.decompress)


def _snappy() -> Codec:
    snappy: Any = importlib.import_module("snappy")
    return Codec("snappy", b"s", snappy.compress, snappy.decompress)


def _zstd() -> Codec:
    zstandard: Any = importlib.import_module("zstandard")
    level = int(dask.config.get("distributed.comm.zstd.level", 3))
    threads = int(dask.config.get("distributed.comm.zstd.threads", 0))
    compressor = zstandard.ZstdCompressor(level=level, threads=threads)
    return Codec("zstd", b"d", compressor.compress, zstandard.ZstdDecompressor().decompress)


@functools.cache
def _auto() -> Codec | None:
    # Once per process: a failed import searches sys.path again each time, and every worker asks.
    try:
        return _lz4()
    except ImportError:
        return None


_MAKERS: dict[str, Callable[[], Codec]] = {"zlib": _zlib, "lz4": _lz4, "snappy": _snappy, "zstd": _zstd}


def codec_for(name: Any, setting: str) -> Codec | None:
    """The codec ``name`` asks for (None: no compression); ``setting`` names where the name came from.

    Raises
    ------
    ValueError
        For a name that is no codec, or one whose package is not installed.
    """
    if name is None or name is False or name == "None":
        return None
    if name == "auto":
        return _auto()
    maker = _MAKERS.get(str(name))
    if maker is None:
        raise ValueError(f"{setting}={name!r}: not a compression; use one of auto, {', '.join(_MAKERS)} or None")
    try:
        return maker()
    except ImportError as e:
        raise ValueError(f"{setting}={name!r}: the package it needs is not installed ({e})") from e
