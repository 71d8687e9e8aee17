"""Comms: message channels over TCP or in process, behind one interface."""

from __future__ import annotations

from distributed.comm.addressing import (
    address_from_user_args,
    get_address_host,
    get_address_host_port,
    get_local_address_for,
    normalize_address,
    parse_address,
    parse_host_port,
    resolve_address,
    unparse_address,
    unparse_host_port,
    validate_address,
)
from distributed.comm.core import Comm, CommClosedError, Listener, connect, connect_until, listen

__all__ = [
    "Comm",
    "CommClosedError",
    "Listener",
    "address_from_user_args",
    "connect",
    "connect_until",
    "get_address_host",
    "get_address_host_port",
    "get_local_address_for",
    "listen",
    "normalize_address",
    "parse_address",
    "parse_host_port",
    "resolve_address",
    "unparse_address",
    "unparse_host_port",
    "validate_address",
]
