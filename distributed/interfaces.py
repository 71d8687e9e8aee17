"""This machine's network interfaces: which address reaches a peer, and what an interface is called.

:func:`get_ip` asks the kernel which local address a packet to a host would
leave from, by connecting a UDP socket: connecting a datagram socket only picks
the route and the source address, it sends nothing.  With no route (a host
without a default gateway, say) it falls back, with a warning, to the address
the host name resolves to, and then to loopback.
"""

from __future__ import annotations

import socket
import warnings

__all__ = ["get_ip", "get_ip_interface", "get_ipv6"]

#: Well-known public hosts whose route stands for "outward": nothing is sent to them.
OUTWARD_IPV4 = "8.8.8.8"
OUTWARD_IPV6 = "2001:4860:4860::8888"


def get_ip(host: str = OUTWARD_IPV4, port: int = 80) -> str:
    """The local address through which this machine reaches ``host``.

    IPv6 when ``host`` is an IPv6 address (or a name that resolves only to
    one), else IPv4.  Without ``host``, the address of the interface that
    routes outward.

    Examples
    --------
    >>> get_ip("127.0.0.1")
    '127.0.0.1'
    """
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if family == socket.AF_INET and not _is_ipv4_literal(host):
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        except OSError:
            infos = []
        families = {info[0] for info in infos}
        if socket.AF_INET not in families and socket.AF_INET6 in families:
            family = socket.AF_INET6
    return _route_source(host, port, family)


def get_ipv6(host: str = OUTWARD_IPV6, port: int = 80) -> str:
    """:func:`get_ip` for IPv6: the local IPv6 address through which this machine reaches ``host``."""
    return _route_source(host.strip("[]"), port, socket.AF_INET6)


def get_ip_interface(ifname: str) -> str:
    """The IPv4 address of network interface ``ifname`` (e.g. ``"eth0"``).

    Raises
    ------
    ValueError
        When there is no such interface (the message names it and the ones
        there are) or it has no IPv4 address.
    """
    import psutil

    addrs = psutil.net_if_addrs()
    if ifname not in addrs:
        raise ValueError(f"No network interface {ifname!r}; available: {', '.join(sorted(addrs))}")
    for snic in addrs[ifname]:
        if snic.family == socket.AF_INET:
            return str(snic.address)
    raise ValueError(f"Network interface {ifname!r} has no IPv4 address")


def _is_ipv4_literal(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def _route_source(host: str, port: int, family: socket.AddressFamily) -> str:
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((host, port))
            ip = str(sock.getsockname()[0])
        except OSError as e:
            warnings.warn(
                f"Could not find a local address that reaches {host!r} ({e}); using the host name's address instead",
                RuntimeWarning,
                stacklevel=3,
            )
            return _hostname_address(family)
    if ip in ("0.0.0.0", "::"):
        return _hostname_address(family)
    return ip


def _hostname_address(family: socket.AddressFamily) -> str:
    loopback = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, family, socket.SOCK_DGRAM)
    except OSError as e:
        warnings.warn(f"Could not resolve this host's name ({e}); using {loopback}", RuntimeWarning, stacklevel=4)
        return loopback
    return str(infos[0][4][0]) if infos else loopback
