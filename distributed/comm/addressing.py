"""Addresses: reading and writing them, and choosing the one a server announces.

An address is ``scheme://location``: ``tcp://10.0.0.5:8786``,
``tls://[::1]:8786``, ``inproc://<pid>/<n>``.  A TCP location is a host and a
port; an IPv6 host is written in brackets.

A server that listens on a *wildcard* host (``""``, ``0.0.0.0``, ``::``) can be
reached at every address of its machine, and must announce one of them to its
peers: its *contact address*.  It is, in order,

1. the address it was told to announce (``contact_address=``),
2. the *default host* its owner chose: a worker or nanny gives the address of
   the interface through which it reaches its scheduler
   (:func:`~distributed.utils.get_ip` of the scheduler's host),
3. the address of the interface that routes outward
   (:func:`~distributed.utils.get_ip`, or ``get_ipv6`` for ``::``).

A server bound to one host (``127.0.0.1`` included) announces that host.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import dask.config

from distributed.interfaces import get_ip, get_ip_interface, get_ipv6

__all__ = [
    "WILDCARD_HOSTS",
    "address_from_user_args",
    "concrete_host",
    "get_address_host",
    "get_address_host_port",
    "get_local_address_for",
    "listen_addresses",
    "listen_protocol",
    "normalize_address",
    "parse_address",
    "parse_host_port",
    "parse_ports",
    "resolve_address",
    "unparse_address",
    "unparse_host_port",
    "uri_from_host_port",
    "validate_address",
]

#: Hosts that mean "every interface" when listening.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def parse_address(addr: str) -> tuple[str, str]:
    """Split ``"tcp://host:port"`` into ``("tcp", "host:port")``.

    An address without a scheme gets the configured default scheme.
    """
    if not isinstance(addr, str):
        raise TypeError(f"Expected an address string, got {type(addr).__name__}")
    scheme, sep, loc = addr.rpartition("://")
    if not sep:
        scheme = dask.config.get("distributed.comm.default-scheme", "tcp")
    return scheme, loc


def unparse_address(scheme: str, loc: str) -> str:
    """Inverse of :func:`parse_address`."""
    return f"{scheme}://{loc}"


def parse_host_port(loc: str, default_port: int | None = None) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[::1]:port"``) into host and port.

    A bare IPv6 host (``"::1"``, more than one colon and no brackets) has no
    port: it gets ``default_port``.
    """
    if loc.startswith("["):
        host, _, rest = loc[1:].partition("]")
        port_s = rest.lstrip(":")
    elif loc.count(":") == 1 or ":" not in loc:
        host, _, port_s = loc.partition(":")
    elif default_port is not None:
        host, port_s = loc, ""
    else:
        raise ValueError(f"Cannot parse host:port from {loc!r}")
    if not port_s:
        if default_port is None:
            raise ValueError(f"No port in address {loc!r}")
        return host, default_port
    try:
        return host, int(port_s)
    except ValueError:
        raise ValueError(f"Invalid port in address {loc!r}") from None


def unparse_host_port(host: str, port: int | None = None) -> str:
    """``"host:port"``, with an IPv6 host in brackets; ``host`` alone without a port."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port is None else f"{host}:{port}"


def get_address_host_port(addr: str) -> tuple[str, int]:
    """The host (without brackets) and port of a TCP or TLS address.

    Raises
    ------
    ValueError
        When the address has no port, or its scheme has no ports (``inproc://``).
    """
    scheme, loc = parse_address(addr)
    if scheme not in ("tcp", "tls"):
        raise ValueError(f"{scheme}:// addresses have no host and port: {addr!r}")
    return parse_host_port(loc)


def get_address_host(addr: str) -> str:
    """The host of the machine ``addr`` is on (``"tcp://10.0.0.5:8786"`` gives ``"10.0.0.5"``).

    An ``inproc://`` address is on this process's machine: it gives
    :func:`~distributed.utils.get_ip`.
    """
    scheme, loc = parse_address(addr)
    if scheme == "inproc":
        return get_ip()
    return parse_host_port(loc, default_port=0)[0]


def get_local_address_for(addr: str) -> str:
    """A local address, with ``addr``'s scheme and no port, through which this machine reaches ``addr``.

    ``get_local_address_for("tcp://127.0.0.1:8786")`` is ``"tcp://127.0.0.1"``.
    """
    scheme, loc = parse_address(addr)
    if scheme == "inproc":
        return unparse_address(scheme, "")
    host = parse_host_port(loc, default_port=0)[0]
    return unparse_address(scheme, unparse_host_port(get_ip(host)))


def concrete_host(host: str, default_host: str | None = None) -> str:
    """The host to announce for a listener bound to ``host`` (see the module docstring)."""
    if host not in WILDCARD_HOSTS:
        return host
    if default_host:
        return default_host
    return get_ipv6() if host == "::" else get_ip()


def validate_address(addr: object) -> None:
    """Raise ``ValueError`` unless ``addr`` is an address one could connect to.

    ``"tcp://host:port"`` needs a host and a port in 1..65535; ``"inproc://..."``
    needs a location.
    """
    if not isinstance(addr, str) or "://" not in addr:
        raise ValueError(f"Invalid address {addr!r}: expected 'scheme://location'")
    scheme, loc = parse_address(addr)
    if scheme in ("tcp", "tls"):
        host, port = parse_host_port(loc)
        if not host or not 0 < port < 65536:
            raise ValueError(f"Invalid address {addr!r}: a TCP address needs a host and a port in 1..65535")
    elif scheme == "inproc":
        if not loc:
            raise ValueError(f"Invalid address {addr!r}: no location")
    else:
        raise ValueError(f"Invalid address {addr!r}: unknown scheme {scheme!r}")


def normalize_address(addr: str) -> str:
    """The address with its scheme made explicit."""
    return unparse_address(*parse_address(addr))


def resolve_address(addr: str) -> str:
    """The address with its scheme made explicit and a TCP host name replaced by its IP address.

    ``"localhost:8786"`` gives ``"tcp://127.0.0.1:8786"``; an address that is
    already an IP address, or not a TCP one, only gains its scheme.

    Raises
    ------
    OSError
        When the host name does not resolve.
    """
    scheme, loc = parse_address(addr)
    if scheme not in ("tcp", "tls"):
        return unparse_address(scheme, loc)
    host, port = parse_host_port(loc)
    family_address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4]
    return unparse_address(scheme, unparse_host_port(str(family_address[0]), port))


def address_from_user_args(
    host: str | None = None,
    port: int | None = None,
    interface: str | None = None,
    protocol: str | None = None,
    *,
    who: str = "Server",
) -> str:
    """The address to listen at, from the ``host``, ``port``, ``interface`` and ``protocol`` a user gave.

    ``host`` may carry a scheme (``"tcp://0.0.0.0"``), a port
    (``"10.0.0.5:9000"``) or both; a bare IPv6 host gets its brackets.  A
    scheme in ``host`` and a different ``protocol`` are an error, as are a port
    in ``host`` and a different nonzero ``port``.  No host means every
    interface (``"tcp://:0"``).  ``who`` names the caller in errors.

    Raises
    ------
    ValueError
        When ``host`` and ``interface`` are both given, the interface does not
        exist or has no IPv4 address, or the parts disagree.

    Examples
    --------
    >>> address_from_user_args(host="tcp://0.0.0.0", port=8786)
    'tcp://0.0.0.0:8786'
    >>> address_from_user_args(host="::1", protocol="tls")
    'tls://[::1]:0'
    """
    protocol = protocol.removesuffix("://") if protocol else None
    if interface:
        if host:
            raise ValueError(f"{who}: give host= or interface=, not both (got {host!r} and {interface!r})")
        host = get_ip_interface(interface)
    host = host or ""
    scheme = None
    if "://" in host:
        scheme, _, host = host.partition("://")
        if protocol and scheme != protocol:
            raise ValueError(f"{who}: host {scheme}://{host} and protocol {protocol!r} disagree")
    scheme = scheme or protocol or dask.config.get("distributed.comm.default-scheme", "tcp")
    if scheme == "inproc":
        if host or port:
            raise ValueError(f"{who}: the inproc protocol takes no host or port (got {host!r}, {port!r})")
        return "inproc://"
    host, host_port = parse_host_port(host, default_port=0)
    if host_port and port and host_port != port:
        raise ValueError(f"{who}: port given twice, {host_port} in host= and {port} in port=")
    return unparse_address(scheme, unparse_host_port(host, host_port or int(port or 0)))


def uri_from_host_port(host_arg: str | None, port_arg: int | str | None, default_port: int) -> str:
    """The address of ``--host`` and ``--port`` options: ``"tcp://host:port"``.

    ``host_arg`` may carry a scheme and a port itself; a port given both ways
    must agree (0, "any free port", agrees with anything).  With neither,
    ``default_port``.

    Examples
    --------
    >>> uri_from_host_port("10.0.0.1", 8786, 0)
    'tcp://10.0.0.1:8786'
    >>> uri_from_host_port("tls://10.0.0.1:9000", None, 8786)
    'tls://10.0.0.1:9000'

    Raises
    ------
    ValueError
        When the two give different ports.
    """
    scheme, loc = parse_address(host_arg or "")
    port_given = int(port_arg) if port_arg is not None and port_arg != "" else None
    host, port = parse_host_port(loc, port_given if port_given is not None else default_port)
    if port_given is not None and port != 0 and port != port_given:
        raise ValueError(f"Two ports given: {port} in host {host_arg!r} and {port_given} as the port")
    return unparse_address(scheme, unparse_host_port(host, port))


def parse_ports(port: int | str | Sequence[int] | None) -> list[int]:
    """The ports to try, in order, for a ``port`` option: a number, ``"9000"``, a range ``"9000:9010"`` or a list.

    ``None`` and ``0`` mean any free port (``[0]``).  A range includes both ends.

    Raises
    ------
    ValueError
        When a port is outside 0..65535 or a range is empty.
    """
    if port is None:
        return [0]
    if isinstance(port, str):
        start_s, sep, end_s = port.partition(":")
        try:
            start = int(start_s)
            end = int(end_s) if sep else start
        except ValueError:
            raise ValueError(f"Invalid port {port!r}: expected a number or a range 'start:end'") from None
        ports = list(range(start, end + 1))
    elif isinstance(port, int):
        ports = [port]
    else:
        ports = [int(p) for p in port]
    if not ports or any(not 0 <= p <= 65535 for p in ports):
        raise ValueError(f"Invalid port or port range {port!r} (ports are 0..65535)")
    return ports


def listen_protocol(protocol: str | None, host: str | None, peer: str, require_encryption: bool) -> str:
    """The scheme a server that talks to ``peer`` (its scheduler) listens with.

    ``protocol`` when given, else the scheme in ``host``, else ``peer``'s;
    ``tls`` rather than ``tcp`` when encryption is required.
    """
    if protocol:
        return protocol.removesuffix("://")
    if host and "://" in host:
        return host.partition("://")[0]
    scheme = parse_address(peer)[0]
    return "tls" if require_encryption and scheme == "tcp" else scheme


def listen_addresses(
    listen_address: str | None,
    host: str | None,
    ports: Sequence[int],
    protocol: str,
    peer: str,
    *,
    who: str = "Server",
) -> tuple[list[str], str | None]:
    """Where a worker or nanny listens (one address per port to try), and the host it announces.

    ``listen_address`` when given; else ``host`` (see
    :func:`address_from_user_args`) on each of ``ports``.  Without a host it
    listens on loopback when ``peer`` (its scheduler) is on loopback, else on
    every interface.  On every interface it announces the address of the
    interface through which it reaches ``peer``: the second item, ``None``
    when the server listens on one host (and announces that host).
    """
    if listen_address:
        addrs = [listen_address]
    elif protocol == "inproc":
        return ["inproc://"], None
    else:
        if host is None:
            host = _loopback_like(peer)
        addrs = [address_from_user_args(host, port, protocol=protocol, who=who) for port in ports]
    scheme, loc = parse_address(addrs[0])
    if scheme == "inproc" or parse_host_port(loc, default_port=0)[0] not in WILDCARD_HOSTS:
        return addrs, None
    return addrs, get_ip(get_address_host(peer))


def _loopback_like(peer: str) -> str:
    """Loopback of ``peer``'s family when ``peer`` is on loopback, else every interface (``""``)."""
    host = get_address_host(peer)
    if host.startswith("127.") or host == "localhost":
        return "127.0.0.1"
    if host == "::1":
        return "[::1]"
    return ""
