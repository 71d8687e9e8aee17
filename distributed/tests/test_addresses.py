"""Where servers listen and what they announce, on this host (the many-host side is in test_multihost.py)."""

from __future__ import annotations

import socket

import dask
import pytest

from distributed import Client, LocalCluster
from distributed.comm import (
    address_from_user_args,
    get_address_host,
    get_address_host_port,
    parse_host_port,
    unparse_host_port,
)
from distributed.comm.addressing import concrete_host, listen_addresses, parse_ports
from distributed.nanny import Nanny
from distributed.scheduler import Scheduler
from distributed.utils import format_dashboard_link, get_ip, get_ip_interface
from distributed.utils_test import gen_test, inc
from distributed.worker import Worker


def free_ports(n: int) -> list[int]:
    """``n`` ports free right now, consecutive."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            start = s.getsockname()[1]
        if start + n > 65535:
            continue
        socks = []
        try:
            for p in range(start, start + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("", p))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return list(range(start, start + n))
    raise AssertionError("no run of free ports found")


def test_address_from_user_args() -> None:
    assert address_from_user_args() == "tcp://:0"
    assert address_from_user_args(host="tcp://0.0.0.0", port=8786) == "tcp://0.0.0.0:8786"
    assert address_from_user_args(host="10.0.0.5:9000") == "tcp://10.0.0.5:9000"
    assert address_from_user_args(host="10.0.0.5:9000", port=9000) == "tcp://10.0.0.5:9000"
    assert address_from_user_args(host="::1", protocol="tls") == "tls://[::1]:0"
    assert address_from_user_args(host="[::1]:8786") == "tcp://[::1]:8786"
    assert address_from_user_args(host="tls://127.0.0.2", protocol="tls://", port=1) == "tls://127.0.0.2:1"
    assert address_from_user_args(protocol="inproc") == "inproc://"
    assert address_from_user_args(interface="lo", port=5) == "tcp://127.0.0.1:5"
    with pytest.raises(ValueError, match="port given twice"):
        address_from_user_args(host="10.0.0.5:9000", port=9001)
    with pytest.raises(ValueError, match="disagree"):
        address_from_user_args(host="tcp://10.0.0.5", protocol="tls")
    with pytest.raises(ValueError, match="not both"):
        address_from_user_args(host="10.0.0.5", interface="lo")
    with pytest.raises(ValueError, match="no-such-if0"):
        address_from_user_args(interface="no-such-if0")
    with pytest.raises(ValueError, match="inproc"):
        address_from_user_args(host="10.0.0.5", protocol="inproc")


def test_host_port_helpers() -> None:
    assert parse_host_port("[fd00::1]:80") == ("fd00::1", 80)
    assert parse_host_port("::1", default_port=0) == ("::1", 0)
    assert unparse_host_port("fd00::1", 80) == "[fd00::1]:80"
    assert unparse_host_port("[fd00::1]", 80) == "[fd00::1]:80"
    assert unparse_host_port("10.0.0.5") == "10.0.0.5"
    assert get_address_host("tcp://[fd00::1]:8786") == "fd00::1"
    assert get_address_host_port("tls://10.0.0.5:8786") == ("10.0.0.5", 8786)
    with pytest.raises(ValueError):
        get_address_host_port("inproc://123/4")
    assert parse_ports(None) == parse_ports(0) == [0]
    assert parse_ports("9000") == [9000]
    assert parse_ports("9000:9002") == [9000, 9001, 9002]
    assert parse_ports([5, 6]) == [5, 6]
    for bad in ("9002:9000", "x", 70000, "1:70000"):
        with pytest.raises(ValueError):
            parse_ports(bad)


def test_concrete_hosts() -> None:
    # Bound to one host: that host, loopback included.  On every interface: the default host
    # when given, else the interface that routes outward.
    assert concrete_host("127.0.0.1") == "127.0.0.1"
    assert concrete_host("127.0.0.1", "10.0.0.9") == "127.0.0.1"
    assert concrete_host("", "10.0.0.9") == concrete_host("0.0.0.0", "10.0.0.9") == "10.0.0.9"
    assert concrete_host("") == get_ip() != ""
    assert get_ip("127.0.0.1") == "127.0.0.1"
    assert get_ip_interface("lo") == "127.0.0.1"
    with pytest.raises(ValueError, match="'nope0'"):
        get_ip_interface("nope0")


def test_where_a_worker_listens() -> None:
    # Loopback stays loopback; otherwise every interface, announcing the way to the scheduler.
    assert listen_addresses(None, None, [0], "tcp", "tcp://127.0.0.1:8786") == (["tcp://127.0.0.1:0"], None)
    assert listen_addresses(None, None, [0], "tcp", "tcp://[::1]:8786") == (["tcp://[::1]:0"], None)
    assert listen_addresses(None, "0.0.0.0", [1, 2], "tcp", "tcp://127.0.0.1:8786") == (
        ["tcp://0.0.0.0:1", "tcp://0.0.0.0:2"],
        "127.0.0.1",
    )
    assert listen_addresses("tls://0.0.0.0:9", None, [0], "tls", "tls://127.0.0.1:8786") == (
        ["tls://0.0.0.0:9"],
        "127.0.0.1",
    )
    assert listen_addresses(None, "tcp://127.0.0.2", [0], "tcp", "tcp://127.0.0.1:1") == (["tcp://127.0.0.2:0"], None)


def test_dashboard_link_template(monkeypatch: pytest.MonkeyPatch) -> None:
    assert format_dashboard_link("10.0.0.5", 8787) == "http://10.0.0.5:8787/status"
    assert format_dashboard_link("fd00::1", 8787) == "http://[fd00::1]:8787/status"
    monkeypatch.setenv("PREFIX_FOR_TEST", "/user/me/")
    with dask.config.set({"distributed.dashboard.link": "{scheme}://{host}{PREFIX_FOR_TEST}proxy/{port}/status"}):
        assert format_dashboard_link("h", 1) == "http://h/user/me/proxy/1/status"


@gen_test()
async def test_host_with_a_scheme() -> None:
    async with Scheduler(host="tcp://127.0.0.1", dashboard=False) as s:
        assert s.address.startswith("tcp://127.0.0.1:")
        async with Nanny(s.address, host="tcp://127.0.0.2", nthreads=1) as n:
            assert n.address.startswith("tcp://127.0.0.2:")
            assert n.worker_address is not None and n.worker_address.startswith("tcp://127.0.0.2:")
            async with Client(s.address, asynchronous=True) as c:
                assert await c.submit(inc, 1) == 2


@gen_test()
async def test_every_interface_announces_a_concrete_address() -> None:
    async with Scheduler(host="tcp://0.0.0.0", dashboard=False) as s:
        host = get_address_host(s.address)
        assert host == get_ip() and host not in ("0.0.0.0", "")
        assert s.listen_address.startswith("tcp://0.0.0.0:")
    async with Scheduler(dashboard=False) as s:
        assert get_address_host(s.address) == get_ip()
        assert s.identity()["address"] == s.address


@gen_test()
async def test_loopback_stays_loopback() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        assert get_address_host(s.address) == "127.0.0.1"
        async with Worker(s.address, nthreads=1) as w:
            assert get_address_host(w.address) == "127.0.0.1"
            assert get_address_host(w.listen_address) == "127.0.0.1"  # not on every interface


def test_local_cluster_defaults_stay_local() -> None:
    with LocalCluster(n_workers=1, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert all(w.startswith("tcp://127.0.0.1:") for w in cluster.scheduler_info["workers"])


@gen_test()
async def test_local_cluster_interface_is_in_the_specs() -> None:
    async with LocalCluster(
        n_workers=1, processes=False, protocol="tcp", interface="lo", dashboard_address=None, asynchronous=True
    ) as cluster:
        assert cluster.scheduler_spec is not None and cluster.scheduler_spec["options"]["interface"] == "lo"
        (spec,) = cluster.new_worker_spec().values()
        assert spec["options"]["interface"] == "lo"
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    with pytest.raises(ValueError, match="nope0"):
        LocalCluster(n_workers=0, processes=False, interface="nope0", dashboard_address=None)


@gen_test()
async def test_scheduler_contact_address_from_config() -> None:
    (port,) = free_ports(1)
    contact = f"tcp://127.0.0.2:{port}"
    with dask.config.set({"distributed.scheduler.contact-address": contact}):
        async with Scheduler(port=port, dashboard=False) as s:
            assert s.address == contact
            assert s.identity()["address"] == contact
            async with Worker(contact, nthreads=1), Client(contact, asynchronous=True) as c:
                assert (await c.scheduler_info())["address"] == contact
                assert await c.submit(inc, 1) == 2
    with pytest.raises(ValueError, match="Invalid address"):
        with dask.config.set({"distributed.scheduler.contact-address": "nowhere"}):
            Scheduler(dashboard=False)


@gen_test()
async def test_worker_listen_and_contact_addresses() -> None:
    # Behind NAT: listen on every interface, announce another address that reaches the same socket.
    (port,) = free_ports(1)
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        async with (
            Worker(s.address, listen_address=f"tcp://0.0.0.0:{port}", contact_address=f"tcp://127.0.0.3:{port}") as a,
            Worker(s.address, nthreads=1) as b,
            Client(s.address, asynchronous=True) as c,
        ):
            assert a.address == f"tcp://127.0.0.3:{port}"
            assert a.listen_address == f"tcp://0.0.0.0:{port}"
            assert f"tcp://127.0.0.3:{port}" in s.workers
            x = c.submit(inc, 1, workers=[a.address])
            y = c.submit(inc, x, workers=[b.address])  # b fetches x from a at the announced address
            assert await y == 3
        with pytest.raises(ValueError, match="listen_address"):
            Worker(s.address, listen_address="tcp://0.0.0.0:1", port=2)
        with pytest.raises(ValueError, match="Invalid address"):
            Worker(s.address, contact_address="nowhere")


@gen_test()
async def test_worker_port_ranges() -> None:
    ports = free_ports(2)
    span = f"{ports[0]}:{ports[1]}"
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        async with Worker(s.address, port=span, nthreads=1) as a, Worker(s.address, port=span, nthreads=1) as b:
            assert sorted([a.port, b.port]) == ports  # the second passes over the port the first took
            with pytest.raises(OSError, match=f"Every port from tcp://127.0.0.1:{ports[0]}"):
                await Worker(s.address, port=span, nthreads=1)


def test_uri_from_host_port() -> None:
    from distributed.comm.addressing import uri_from_host_port

    assert uri_from_host_port("10.0.0.1", 8786, 0) == "tcp://10.0.0.1:8786"
    assert uri_from_host_port("10.0.0.1", "8786", 0) == "tcp://10.0.0.1:8786"
    assert uri_from_host_port("tls://10.0.0.1:9000", None, 8786) == "tls://10.0.0.1:9000"
    assert uri_from_host_port("10.0.0.1:9000", 9000, 8786) == "tcp://10.0.0.1:9000"
    assert uri_from_host_port(None, None, 8786) == "tcp://:8786"
    assert uri_from_host_port("::1", 5, 0) == "tcp://[::1]:5"
    with pytest.raises(ValueError, match="Two ports given: 1 in host 'h:1' and 5"):
        uri_from_host_port("h:1", 5, 0)
