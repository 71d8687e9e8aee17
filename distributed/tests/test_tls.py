"""TLS: Security, the tls:// transport, clusters over it, and peers it must refuse.

Every certificate is made at test time with ``cryptography``: a cluster CA
signing one certificate per role, a second (rogue) CA with a certificate of
its own, and an expired certificate signed by the cluster CA.  They are kept
as PEM text (``Security`` takes PEM text as well as paths) and written to
files only for the command-line tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import pickle
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tornado.httpclient import HTTPClientError
from tornado.simple_httpclient import SimpleAsyncHTTPClient

from distributed import Client, LocalCluster, Nanny, Scheduler, Security, Worker
from distributed.comm import CommClosedError, connect, listen
from distributed.comm.core import Comm
from distributed.comm.refusals import RefusalLog
from distributed.protocol import messages as m
from distributed.tests.test_cli import WORKER, Proc, poll_with_proc, procs, start_scheduler
from distributed.tests.test_metrics import scrape, value
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc

__all__ = ["procs"]  # the fixture, imported for the command-line tests

# -- certificates -----------------------------------------------------------------------------------
_NOW = datetime.datetime.now(datetime.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM text."""

    cert: str
    key: str


def _make_ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(days=1))
        .not_valid_after(_NOW + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _make_leaf(ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], cn: str, expired: bool = False) -> Pair:
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = (
        (_NOW - datetime.timedelta(days=10), _NOW - datetime.timedelta(days=1))
        if expired
        else (_NOW - datetime.timedelta(days=1), _NOW + datetime.timedelta(days=30))
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(_pem_cert(cert), _pem_key(key))


@dataclass(frozen=True)
class PKI:
    """The cluster CA and its certificates, a rogue CA and its certificate, an expired certificate."""

    ca: str
    scheduler: Pair
    worker: Pair
    client: Pair
    expired: Pair
    rogue_ca: str
    rogue: Pair

    def security(self, role: str, pair: Pair | None = None, ca: str | None = None) -> Security:
        """A Security for ``role`` with ``pair`` (default: the role's own) checked against ``ca``."""
        pair = pair or getattr(self, role)
        creds: dict[str, Any] = {f"tls_{role}_cert": pair.cert, f"tls_{role}_key": pair.key}
        return Security(tls_ca_file=ca or self.ca, **creds)


def _make_pki() -> PKI:
    ca = _make_ca("test-cluster-ca")
    rogue = _make_ca("rogue-ca")
    return PKI(
        ca=_pem_cert(ca[1]),
        scheduler=_make_leaf(ca, "scheduler"),
        worker=_make_leaf(ca, "worker"),
        client=_make_leaf(ca, "client"),
        expired=_make_leaf(ca, "expired-client", expired=True),
        rogue_ca=_pem_cert(rogue[1]),
        rogue=_make_leaf(rogue, "intruder"),
    )


P = _make_pki()
TLS_CLUSTER: dict[str, Any] = {
    "scheduler_kwargs": {"security": P.security("scheduler")},
    "worker_kwargs": {"security": P.security("worker")},
    "client_kwargs": {"security": P.security("client")},
}


@contextlib.contextmanager
def _comm_log() -> Iterator[list[str]]:
    """The messages the comm layer logs meanwhile (its logger does not propagate to pytest's)."""
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]  # a list sink
    logger = logging.getLogger("distributed.comm.tcp")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


async def _computes(c: Client) -> None:
    """The cluster does real work: a dask array whose result crosses workers."""
    expected = np.arange(400 * 400).reshape(400, 400)
    x = da.from_array(expected, chunks=100)  # type: ignore[no-untyped-call]  # dask's own annotation gap
    result = await c.compute((x + x.T).sum(axis=0))
    np.testing.assert_array_equal(result, (expected + expected.T).sum(axis=0))


# -- Security ---------------------------------------------------------------------------------------
def test_security_defaults_come_from_config() -> None:
    assert Security().require_encryption is False
    assert Security().get_connection_args("client")["ssl_context"] is None
    with dask.config.set(
        {
            "distributed.comm.tls.ca-file": P.ca,
            "distributed.comm.tls.client.cert": P.client.cert,
            "distributed.comm.tls.client.key": P.client.key,
            "distributed.comm.tls.min-version": 1.3,
            "distributed.comm.require-encryption": True,
        }
    ):
        sec = Security()
        assert sec.tls_client_cert == P.client.cert and sec.require_encryption
        assert sec.tls_min_version == ssl.TLSVersion.TLSv1_3
        ctx = sec.get_connection_args("client")["ssl_context"]
        assert isinstance(ctx, ssl.SSLContext)
        assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
        # An explicit value beats the config.
        assert Security(tls_client_cert=None).tls_client_cert is None


def test_security_api() -> None:
    sec = P.security("scheduler")
    assert sec.require_encryption  # credentials given: encryption is required unless said otherwise
    assert P.security("client").get_tls_config_for_role("client") == {
        "ca_file": P.ca,
        "ciphers": None,
        "cert": P.client.cert,
        "key": P.client.key,
    }
    # The versions are the Security's, for every role (libraries turn each key above into a --tls-<key> option).
    assert (sec.tls_min_version, sec.tls_max_version) == (ssl.TLSVersion.TLSv1_2, None)
    listen_ctx = sec.get_listen_args("scheduler")["ssl_context"]
    assert listen_ctx is not None and listen_ctx.verify_mode == ssl.CERT_REQUIRED  # clients must show a certificate
    assert "BEGIN" not in repr(sec) and "tls_ca_file=..." in repr(sec)
    assert pickle.loads(pickle.dumps(sec)) == sec  # crosses into worker processes
    with pytest.raises(ValueError, match="role"):
        sec.get_tls_config_for_role("nanny")
    with pytest.raises(TypeError, match="tls_nonsense"):
        Security(tls_nonsense="x")
    with pytest.raises(ValueError, match="tls_min_version"):
        Security(tls_min_version=1.1)
    ciphered = Security(tls_ciphers="ECDHE-ECDSA-AES128-GCM-SHA256", tls_max_version=1.2, tls_ca_file=P.ca)
    ctx = ciphered.get_connection_args("client")["ssl_context"]
    assert ctx is not None and ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    # The cipher string chooses among TLS 1.2 ciphers (OpenSSL keeps TLS 1.3's apart).
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"} == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    with pytest.raises(ssl.SSLError):
        Security(tls_ciphers="NO-SUCH-CIPHER", tls_ca_file=P.ca).get_connection_args("client")
    with pytest.raises(NotImplementedError, match="extra_conn_args"):
        Security(extra_conn_args={"headers": {}})
    with pytest.raises(ValueError, match="tls_scheduler_cert"):
        Security(tls_ca_file=P.ca).get_listen_args("scheduler")  # a server without a certificate
    with pytest.raises(ValueError, match="without tls_ca_file"):
        Security(tls_client_cert=P.client.cert, tls_client_key=P.client.key).get_connection_args("client")


def test_temporary() -> None:
    sec = Security.temporary()
    assert sec.require_encryption and sec.tls_ca_file == sec.tls_worker_cert
    assert Security.temporary().tls_ca_file != sec.tls_ca_file  # fresh each time
    assert sec.get_listen_args("worker")["ssl_context"] is not None


def test_security_is_exported() -> None:
    import distributed

    assert "Security" in distributed.__all__


# -- the tls:// transport ---------------------------------------------------------------------------
@gen_test()
async def test_tls_comm_carries_messages_both_ways() -> None:
    received: list[Any] = []

    async def handler(comm: Comm) -> None:
        msg = await comm.read()
        received.append(msg)
        await comm.write({"echo": msg["data"]})
        await comm.close()

    listener = listen("tls://127.0.0.1:0", handler, **P.security("scheduler").get_listen_args("scheduler"))
    await listener.start()
    try:
        assert listener.contact_address.startswith("tls://127.0.0.1:")
        comm = await connect(listener.contact_address, **P.security("client").get_connection_args("client"))
        assert comm.peer_address == listener.contact_address and comm.local_address.startswith("tls://")
        big = np.arange(3_000_000, dtype="u1").tobytes()  # a large frame, received straight into its buffer
        await comm.write({"data": big})
        reply = await comm.read()
        assert bytes(reply["echo"]) == big
        await comm.close()
    finally:
        listener.stop()


@gen_test()
async def test_tls_address_without_credentials_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no TLS credentials"):
        await connect("tls://127.0.0.1:1")
    with pytest.raises(ValueError, match="no TLS credentials"):
        listen("tls://127.0.0.1:0", lambda comm: asyncio.sleep(0))


@gen_test()
async def test_require_encryption_refuses_plain_tcp() -> None:
    args = P.security("client").get_connection_args("client")
    with pytest.raises(RuntimeError, match=r"refusing to connect to 'tcp://127.0.0.1:1'"):
        await connect("tcp://127.0.0.1:1", **args)
    s = Scheduler(host="127.0.0.1", protocol="tcp", dashboard=False, security=P.security("scheduler"))
    with pytest.raises(RuntimeError, match=r"refusing to listen at 'tcp://127.0.0.1:0'"):
        await s.start()
    with pytest.raises(RuntimeError, match=r"refusing to connect to 'tcp://127.0.0.1:1'"):
        await Client("tcp://127.0.0.1:1", security=P.security("client"), asynchronous=True, timeout=2)


# -- clusters ---------------------------------------------------------------------------------------
@gen_cluster(client=True, **TLS_CLUSTER)
async def test_mutual_tls_cluster_computes(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    assert [s.address[:6], a.address[:6], b.address[:6]] == ["tls://"] * 3
    await _computes(c)
    # Worker-to-worker transfers went over TLS too.
    assert a.transfer_incoming_bytes_total + b.transfer_incoming_bytes_total > 0


def _client_in_task(x: int) -> int:
    from distributed import get_client

    return int(get_client().submit(inc, x).result())


@gen_cluster(client=True, **TLS_CLUSTER)
async def test_get_client_in_a_task_connects_with_the_workers_credentials(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    assert a.security.tls_client_cert is None  # a worker has no client certificate of its own
    assert await c.submit(_client_in_task, 1) == 2


@gen_test()
async def test_local_cluster_security_true_uses_tls() -> None:
    async with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None, security=True, asynchronous=True
    ) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        assert cluster.security.require_encryption
        async with Client(cluster, asynchronous=True) as c:  # takes the cluster's credentials
            assert all(w.startswith("tls://") for w in cluster.scheduler.workers)
            await _computes(c)


@pytest.mark.timeout(60)
@gen_test()
async def test_nanny_worker_processes_over_tls() -> None:
    sec = Security.temporary()
    async with Scheduler(host="127.0.0.1", dashboard=False, security=sec) as s:
        assert s.address.startswith("tls://")
        async with Nanny(s.address, nthreads=1, security=sec) as n:
            assert n.address.startswith("tls://") and str(n.worker_address).startswith("tls://")
            async with Client(s.address, security=sec, asynchronous=True) as c:
                assert await c.submit(inc, 1) == 2


# -- peers that must be refused ---------------------------------------------------------------------
REFUSED = "may not accept this side's certificate"
#: How to make each bad client, what it is told, and what the scheduler logs (None: not checked).
BAD_CLIENTS: dict[str, tuple[Callable[[], Security], str, str | None]] = {
    # The client does not trust the scheduler's CA: it refuses the scheduler during the handshake.
    "wrong-ca": (lambda: P.security("client", P.rogue, ca=P.rogue_ca), "certificate verify failed", None),
    # The client trusts the scheduler, but the scheduler does not trust it.
    "rogue-cert": (lambda: P.security("client", P.rogue), REFUSED, "unable to get local issuer certificate"),
    "expired-cert": (lambda: P.security("client", P.expired), REFUSED, "certificate has expired"),
    "no-cert": (lambda: Security(tls_ca_file=P.ca), REFUSED, "did not return a certificate"),
}


@pytest.mark.parametrize("kind", sorted(BAD_CLIENTS))
@gen_cluster(client=True, **TLS_CLUSTER)
async def test_bad_client_fails_clearly_and_the_cluster_keeps_working(
    c: Client, s: Scheduler, a: Worker, b: Worker, kind: str
) -> None:
    make, told, logged = BAD_CLIENTS[kind]
    clients_before = set(s.clients)
    with _comm_log() as log:
        with pytest.raises(OSError, match=told):
            await Client(s.address, security=make(), asynchronous=True, timeout=5)
        if logged is not None:
            await async_poll_for(lambda: any(logged in line for line in log), timeout=5)
            assert any(line.startswith("Refused a TLS connection from tcp://127.0.0.1:") for line in log)
    assert set(s.clients) == clients_before
    await _computes(c)
    async with Client(s.address, security=P.security("client"), asynchronous=True) as good:
        assert await good.submit(inc, 1) == 2


@gen_cluster(client=True, **TLS_CLUSTER)
async def test_plain_tcp_client_fails_clearly_and_the_cluster_keeps_working(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    plain = "tcp://" + s.address.removeprefix("tls://")
    with pytest.raises(OSError, match="[Cc]losed"):
        await Client(plain, asynchronous=True, timeout=5)
    await _computes(c)


@pytest.mark.parametrize("kind", ["rogue-cert", "wrong-ca"])
@gen_cluster(client=True, **TLS_CLUSTER)
async def test_bad_worker_cannot_join(c: Client, s: Scheduler, a: Worker, b: Worker, kind: str) -> None:
    pair, ca = (P.rogue, P.ca) if kind == "rogue-cert" else (P.rogue, P.rogue_ca)
    w = Worker(s.address, security=P.security("worker", pair, ca=ca), death_timeout=1, host="127.0.0.1")
    with pytest.raises(OSError, match=f"{REFUSED}|certificate verify failed"):
        await w.start()
    assert len(s.workers) == 2
    await _computes(c)


async def _try_register(s: Scheduler, address: str, name: str, ctx: ssl.SSLContext | None) -> bool:
    """Send register-client at once on a new comm; whether the scheduler registered ``name``.

    TLS 1.3 lets a client write before the server has checked its certificate:
    the message is on its way whatever the server decides.
    """
    comm = await connect(address, timeout=5, ssl_context=ctx)
    try:
        await comm.write(m.RegisterClient(op="register-client", client=name))
        await comm.read()
        return name in s.clients
    finally:
        comm.abort()


@pytest.mark.parametrize("ending", ["reset", "close"])
@gen_test()
async def test_a_tls_server_that_drops_us_unanswered_is_reported_as_refusing_us(ending: str) -> None:
    """A reset counts as a refusal too: a server that drops a connection it has unread bytes of resets it.

    Under load a worker with a rogue certificate was told "Connection reset by peer" instead.
    """
    server_ctx = P.security("scheduler").get_listen_args("scheduler")["ssl_context"]
    assert server_ctx is not None
    server_ctx.verify_mode = ssl.CERT_NONE  # this server drops everyone after the handshake itself
    got_bytes = asyncio.Event()

    class Dropping(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            got_bytes.set()
            sock = self.transport.get_extra_info("socket")
            if ending == "reset":  # what a close with unread bytes does: a reset instead of a close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.transport.abort()
            else:
                self.transport.close()

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Dropping, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        ctx = P.security("client").get_connection_args("client")["ssl_context"]
        comm = await connect(f"tls://127.0.0.1:{port}", timeout=5, ssl_context=ctx)
        try:
            await comm.write({"op": "identity"})
            await asyncio.wait_for(got_bytes.wait(), 5)
            with pytest.raises(CommClosedError, match=REFUSED):
                await comm.read()
        finally:
            comm.abort()
    finally:
        server.close()
        await server.wait_closed()


@gen_cluster(client=True, **TLS_CLUSTER)
async def test_scheduler_never_acts_on_a_message_from_an_unauthenticated_peer(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    good = P.security("client").get_connection_args("client")["ssl_context"]
    rogue = P.security("client", P.rogue).get_connection_args("client")["ssl_context"]
    no_cert = Security(tls_ca_file=P.ca).get_connection_args("client")["ssl_context"]
    for name, ctx in [("intruder-rogue", rogue), ("intruder-no-cert", no_cert)]:
        with pytest.raises(CommClosedError, match=REFUSED):
            await _try_register(s, s.address, name, ctx)
    # Clear text at the TLS port: never parsed as a message.
    plain = "tcp://" + s.address.removeprefix("tls://")
    with pytest.raises(CommClosedError):
        await _try_register(s, plain, "intruder-plain", None)
    assert not any(k.startswith("intruder") for k in s.clients)
    # The same message from an authenticated peer is acted on: the checks above can fail.
    assert await _try_register(s, s.address, "authenticated", good)
    assert "authenticated" in s.clients  # kept for its grace after its comm closed
    await _computes(c)


# -- refusals: counted, logged once per peer host per interval -------------------------------------
def test_refusal_log_logs_a_host_once_per_interval_and_counts_every_refusal() -> None:
    log = RefusalLog(interval=60)
    assert log.refused("10.0.0.5", now=100.0) == 0  # the first: logged
    assert [log.refused("10.0.0.5", now=100.0 + i) for i in range(1, 50)] == [None] * 49
    assert log.refused("10.0.0.6", now=120.0) == 0  # another host has its own interval
    assert log.refused("10.0.0.5", now=160.0) == 49  # logged again, with the 49 left out
    assert log.refused("10.0.0.5", now=161.0) is None
    assert log.total == 53

    every = RefusalLog(interval=0)
    assert [every.refused("10.0.0.5", now=1.0) for _ in range(3)] == [0, 0, 0]

    bounded = RefusalLog(interval=60, max_hosts=2)
    for i, host in enumerate(["a", "b", "c"]):
        assert bounded.refused(host, now=float(i)) == 0
    assert bounded.refused("c", now=3.0) is None  # remembered
    assert bounded.refused("a", now=4.0) == 0  # the oldest was forgotten: logged anew
    assert bounded.total == 5


async def _refuse(address: str, ctx: ssl.SSLContext | None, times: int) -> None:
    """Connect ``times`` times with ``ctx``, which the server refuses; each attempt ends refused."""
    for _ in range(times):
        try:
            comm = await connect(address, timeout=5, ssl_context=ctx)
        except OSError:
            continue  # refused during the handshake (TLS 1.2, or the server was quick)
        try:
            with pytest.raises(CommClosedError):
                await comm.read()  # TLS 1.3: the refusal arrives after the client's side finished
        finally:
            comm.abort()


def _refusal_lines(log: list[str]) -> list[str]:
    return [line for line in log if line.startswith("Refused a TLS connection")]


HTTP: dict[str, Any] = {"dashboard": True, "dashboard_address": "127.0.0.1:0"}


@pytest.mark.timeout(60)
@gen_cluster(
    client=True,
    scheduler_kwargs={**TLS_CLUSTER["scheduler_kwargs"], **HTTP},
    worker_kwargs={**TLS_CLUSTER["worker_kwargs"], **HTTP},
    client_kwargs=TLS_CLUSTER["client_kwargs"],
)
async def test_a_peer_refused_again_and_again_is_logged_once_and_counted_in_metrics(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    no_cert = Security(tls_ca_file=P.ca).get_connection_args("client")["ssl_context"]
    with _comm_log() as log:
        await _refuse(s.address, no_cert, 50)
        await _refuse(a.address, no_cert, 5)
        await async_poll_for(lambda: s.listeners[0].refused_connections == 50, timeout=10)
        await async_poll_for(lambda: a.listeners[0].refused_connections == 5, timeout=10)
    lines = _refusal_lines(log)
    # One line per server for the peer host (all within the interval), saying more are not logged.
    assert len(lines) == 2, lines
    assert all("did not return a certificate" in line and "at most once per 60 s" in line for line in lines)

    assert s.http_server is not None and a.http_server is not None and b.http_server is not None
    samples, types, _ = await scrape(s.http_server.port)
    assert value(samples, "dask_scheduler_tls_refused_connections_total") == 50
    assert types["dask_scheduler_tls_refused_connections"] == "counter"
    a_samples, _, _ = await scrape(a.http_server.port)
    assert value(a_samples, "dask_worker_tls_refused_connections_total") == 5
    b_samples, _, _ = await scrape(b.http_server.port)
    assert value(b_samples, "dask_worker_tls_refused_connections_total") == 0

    # The server still serves peers it accepts.
    await _computes(c)
    async with Client(s.address, security=P.security("client"), asynchronous=True) as good:
        assert await good.submit(inc, 1) == 2


@pytest.mark.timeout(60)
@gen_test()
async def test_refused_log_interval_configures_how_often_a_host_is_logged() -> None:
    rogue = P.security("client", P.rogue).get_connection_args("client")["ssl_context"]
    for interval, expected in [(0, 4), ("1h", 1)]:
        with dask.config.set({"distributed.comm.tls.refused-log-interval": interval}):
            async with Scheduler(host="127.0.0.1", dashboard=False, security=P.security("scheduler")) as s:
                with _comm_log() as log:
                    await _refuse(s.address, rogue, 4)
                    await async_poll_for(lambda: s.listeners[0].refused_connections == 4, timeout=10)
                lines = _refusal_lines(log)
                assert len(lines) == expected, (interval, lines)
                assert all("unable to get local issuer certificate" in line for line in lines)


# -- HTTPS ------------------------------------------------------------------------------------------
async def _fetch(url: str, ctx: ssl.SSLContext | None = None) -> bytes:
    client = SimpleAsyncHTTPClient(force_instance=True)
    try:
        response = await client.fetch(url, ssl_options=ctx, request_timeout=5)
        return bytes(response.body)
    finally:
        client.close()


@gen_test()
async def test_http_servers_speak_https_when_given_a_certificate() -> None:
    https = {
        "distributed.scheduler.dashboard.tls.ca-file": P.ca,
        "distributed.scheduler.dashboard.tls.cert": P.scheduler.cert,
        "distributed.scheduler.dashboard.tls.key": P.scheduler.key,
    }
    trusting = ssl.create_default_context(cadata=P.ca)
    with dask.config.set(https):
        async with Scheduler(
            host="127.0.0.1", dashboard=True, dashboard_address="127.0.0.1:0", security=P.security("scheduler")
        ) as s:
            async with Worker(
                s.address, dashboard=True, dashboard_address="127.0.0.1:0", security=P.security("worker")
            ) as w:
                assert s.http_server is not None and w.http_server is not None
                for port in (s.http_server.port, w.http_server.port):
                    assert await _fetch(f"https://127.0.0.1:{port}/health", trusting) == b"ok"
                    with pytest.raises((HTTPClientError, OSError)):
                        await _fetch(f"http://127.0.0.1:{port}/health")  # clear text is not answered
                    with pytest.raises(ssl.SSLCertVerificationError):
                        await _fetch(f"https://127.0.0.1:{port}/health", ssl.create_default_context())
                async with Client(s.address, security=P.security("client"), asynchronous=True) as c:
                    assert str(c.dashboard_link).startswith("https://")


# -- the command line -------------------------------------------------------------------------------
def _write_pki(tmp_path: Path) -> dict[str, str]:
    files = {
        "ca": P.ca,
        "scheduler.crt": P.scheduler.cert,
        "scheduler.key": P.scheduler.key,
        "worker.crt": P.worker.cert,
        "worker.key": P.worker.key,
        "client.crt": P.client.cert,
        "client.key": P.client.key,
        "rogue-ca": P.rogue_ca,
        "rogue.crt": P.rogue.cert,
        "rogue.key": P.rogue.key,
    }
    paths = {}
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        paths[name] = str(path)
    return paths


@pytest.mark.timeout(120)
def test_cli_cluster_over_mutual_tls(procs: Callable[..., Proc], tmp_path: Path) -> None:
    f = _write_pki(tmp_path)
    sched, address, _ = start_scheduler(
        procs, tmp_path, "--tls-ca-file", f["ca"], "--tls-cert", f["scheduler.crt"], "--tls-key", f["scheduler.key"]
    )
    assert address.startswith("tls://127.0.0.1:")
    tls_worker = ["--tls-ca-file", f["ca"], "--tls-cert", f["worker.crt"], "--tls-key", f["worker.key"]]
    w1 = procs([*WORKER, address, "--nthreads", "1", "--name", "w1", *tls_worker], name="worker-nanny")
    procs([*WORKER, address, "--nthreads", "1", "--no-nanny", "--name", "w2", *tls_worker], name="worker-plain")
    security = Security(tls_ca_file=f["ca"], tls_client_cert=f["client.crt"], tls_client_key=f["client.key"])
    with Client(address, security=security, timeout=30) as client:
        poll_with_proc(lambda: len(client.scheduler_info()["workers"]) == 2, 60, "two workers", w1)
        assert all(w.startswith("tls://") for w in client.scheduler_info()["workers"])
        x = da.arange(200 * 200, chunks=2000).reshape(200, 200)
        expected = np.arange(200 * 200).reshape(200, 200)
        assert (x + x.T).sum().compute() == (expected + expected.T).sum()

        # A worker whose certificate another CA signed cannot join; the cluster goes on.
        tls_rogue = ["--tls-ca-file", f["ca"], "--tls-cert", f["rogue.crt"], "--tls-key", f["rogue.key"]]
        rogue = procs([*WORKER, address, "--no-nanny", "--death-timeout", "2", *tls_rogue], name="worker-rogue")
        assert rogue.wait(60) == 1
        assert REFUSED in rogue.stderr()
        assert "unable to get local issuer certificate" in sched.stderr()
        assert len(client.scheduler_info()["workers"]) == 2
        assert client.submit(inc, 1).result(timeout=30) == 2
    # Without credentials the TLS scheduler cannot be reached.
    with pytest.raises(ValueError, match="no TLS credentials"):
        Client(address, timeout=5)
    assert sched.poll() is None


def test_cli_refuses_bad_tls_options(tmp_path: Path) -> None:
    from distributed.tests.test_cli import SCHEDULER, run_cli

    f = _write_pki(tmp_path)
    result = run_cli([*SCHEDULER, "--tls-cert", f["scheduler.crt"], "--tls-key", f["scheduler.key"]])
    assert result.returncode == 2 and "without tls_ca_file" in result.stderr
    result = run_cli([*WORKER, "tls://127.0.0.1:1", "--tls-ca-file", f["ca"], "--tls-key", f["worker.key"]])
    assert result.returncode == 2 and "--tls-key needs --tls-cert" in result.stderr
    missing = str(tmp_path / "missing.pem")
    result = run_cli([*SCHEDULER, "--tls-ca-file", missing, "--tls-cert", f["scheduler.crt"]])
    assert result.returncode == 2 and "Bad TLS options" in result.stderr


LOADED_FOR: list[dict[str, Any]] = []
LOADER_SECURITY: list[Security] = []


def load_security(info: dict[str, Any]) -> Security:
    """A security loader (``distributed.client.security-loader``): records what it was asked for."""
    LOADED_FOR.append(info)
    return LOADER_SECURITY[0]


@pytest.mark.timeout(60)
@gen_test()
async def test_a_client_without_security_calls_the_security_loader() -> None:
    sec = Security.temporary()
    LOADER_SECURITY[:] = [sec]
    LOADED_FOR.clear()
    async with Scheduler(host="127.0.0.1", dashboard=False, security=sec) as s:
        loader = f"{__name__}.load_security"
        with dask.config.set({"distributed.client.security-loader": loader}):
            async with Client(s.address, asynchronous=True) as c:
                assert c.security is sec and [{"address": s.address}] == LOADED_FOR
            # Security given: the loader is not asked.
            async with Client(s.address, security=sec, asynchronous=True):
                assert len(LOADED_FOR) == 1
        with dask.config.set({"distributed.client.security-loader": "no.such.module.loader"}):
            with pytest.raises(ImportError, match="security-loader"):
                Client(s.address, asynchronous=True)
