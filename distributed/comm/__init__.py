"""Comms: message channels over TCP or in process, behind one interface."""

from __future__ import annotations

from distributed.comm.core import (
    Comm,
    CommClosedError,
    Listener,
    connect,
    listen,
    normalize_address,
    parse_address,
    parse_host_port,
    unparse_address,
    validate_address,
)

__all__ = [
    "Comm",
    "CommClosedError",
    "Listener",
    "connect",
    "listen",
    "normalize_address",
    "parse_address",
    "parse_host_port",
    "unparse_address",
    "validate_address",
]
