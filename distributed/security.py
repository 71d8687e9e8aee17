"""TLS credentials of a cluster: who may talk to whom, and encrypted.

A :class:`Security` holds, for each role (``client``, ``scheduler``,
``worker``), a certificate and its key, plus the certificate authority (CA)
every peer's certificate must be signed by.  It turns them into the
``ssl.SSLContext`` that :func:`distributed.comm.connect` and
:func:`distributed.comm.listen` take as connection arguments: both sides
present a certificate and check the other's chain against the CA (mutual
authentication).  Host names are not checked: a cluster has a CA of its own
and its members are reached by IP address.

Every credential is either a path to a PEM file or the PEM text itself (a
value holding a newline), so that :meth:`Security.temporary` can keep its
self-signed pair in memory and a Security can be pickled to worker
processes.  Contexts are built when asked for, never stored.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from typing import Any, Final, Literal, TypedDict

import dask.config

from distributed.comm.core import ConnectionArgs
from distributed.widgets import security_html

__all__ = ["Security", "acting_as", "http_ssl_context", "load_cert_chain"]

Role = Literal["client", "scheduler", "worker"]
_ROLES: Final = ("client", "scheduler", "worker")

_VERSIONS: Final = {1.2: ssl.TLSVersion.TLSv1_2, 1.3: ssl.TLSVersion.TLSv1_3}

# Field name -> config key it defaults from.
_FIELDS: Final = {
    "tls_ca_file": "distributed.comm.tls.ca-file",
    "tls_ciphers": "distributed.comm.tls.ciphers",
    "tls_client_key": "distributed.comm.tls.client.key",
    "tls_client_cert": "distributed.comm.tls.client.cert",
    "tls_scheduler_key": "distributed.comm.tls.scheduler.key",
    "tls_scheduler_cert": "distributed.comm.tls.scheduler.cert",
    "tls_worker_key": "distributed.comm.tls.worker.key",
    "tls_worker_cert": "distributed.comm.tls.worker.cert",
}


class TLSConfig(TypedDict):
    """The TLS settings of one role, as :meth:`Security.get_tls_config_for_role` returns them.

    The four keys of dask.distributed's flat dict, each a path, PEM text or
    None: libraries that deploy workers elsewhere turn every key into the
    worker CLI's ``--tls-<key>`` option (and look for PEM text to write to a
    file).  The TLS versions, which apply to every role, are the
    ``Security``'s ``tls_min_version``/``tls_max_version``.
    """

    ca_file: str | None
    ciphers: str | None
    cert: str | None
    key: str | None


def _tls_version(value: object, what: str, allow_none: bool) -> ssl.TLSVersion | None:
    if value is None and allow_none:
        return None
    if isinstance(value, ssl.TLSVersion):
        if value < ssl.TLSVersion.TLSv1_2:
            raise ValueError(f"Security({what}={value!r}): TLS versions below 1.2 are not allowed")
        return value
    if isinstance(value, (int, float)) and float(value) in _VERSIONS:
        return _VERSIONS[float(value)]
    raise ValueError(f"Security({what}={value!r}): expected 1.2, 1.3 or an ssl.TLSVersion")


def _in_memory(value: str) -> bool:
    """Whether a credential is PEM text rather than a file path."""
    return "\n" in value


class Security:
    """Security configuration of a Dask cluster (TLS).

    Values not given are read from the ``distributed.comm.tls.*`` and
    ``distributed.comm.require-encryption`` configuration.  Each certificate,
    key and CA is either a path to a PEM file or the PEM text itself.

    Parameters
    ----------
    require_encryption
        Refuse every connection that is not TLS (``tcp://`` addresses are
        refused, in-process ``inproc://`` ones allowed).  Default from config;
        when unset there, true if any TLS credential is given.
    tls_ca_file
        The CA certificate that signs every peer's certificate.
    tls_ciphers
        An OpenSSL cipher string (TLS 1.2 ciphers; TLS 1.3 ones are fixed).
    tls_min_version, tls_max_version
        Lowest and highest TLS version: ``1.2``, ``1.3`` or an
        ``ssl.TLSVersion`` (default 1.2 and the highest supported).
    tls_client_cert, tls_client_key, tls_scheduler_cert, tls_scheduler_key, tls_worker_cert, tls_worker_key
        Certificate and key of each role; a key may instead follow the
        certificate in the same file, with the key left out.
    extra_conn_args
        Keyword arguments for other transports (websockets); none is
        supported here, so only an empty mapping is accepted.

    Examples
    --------
    >>> sec = Security(tls_ca_file="ca.pem", tls_client_cert="client.pem", tls_client_key="client.key")
    >>> client = Client("tls://10.0.0.1:8786", security=sec)  # doctest: +SKIP
    """

    __slots__ = (
        "require_encryption",
        "tls_ca_file",
        "tls_ciphers",
        "tls_min_version",
        "tls_max_version",
        "tls_client_key",
        "tls_client_cert",
        "tls_scheduler_key",
        "tls_scheduler_cert",
        "tls_worker_key",
        "tls_worker_cert",
        "extra_conn_args",
    )

    require_encryption: bool
    tls_ca_file: str | None
    tls_ciphers: str | None
    tls_min_version: ssl.TLSVersion
    tls_max_version: ssl.TLSVersion | None
    tls_client_key: str | None
    tls_client_cert: str | None
    tls_scheduler_key: str | None
    tls_scheduler_cert: str | None
    tls_worker_key: str | None
    tls_worker_cert: str | None
    extra_conn_args: dict[str, Any]

    def __init__(self, require_encryption: bool | None = None, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.__slots__)
        if unknown:
            raise TypeError(f"Security: unknown parameters {sorted(unknown)}")
        extra = kwargs.pop("extra_conn_args", None) or {}
        if extra:
            raise NotImplementedError(
                f"Security(extra_conn_args={extra!r}) is not supported yet: no transport here takes extra arguments"
            )
        self.extra_conn_args = {}
        for field, key in _FIELDS.items():
            value = kwargs[field] if field in kwargs else dask.config.get(key, None)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Security({field}=...) must be a path or PEM text, got {type(value).__name__}")
            setattr(self, field, value or None)
        min_v = kwargs.get("tls_min_version", dask.config.get("distributed.comm.tls.min-version", 1.2))
        max_v = kwargs.get("tls_max_version", dask.config.get("distributed.comm.tls.max-version", None))
        self.tls_min_version = _tls_version(min_v, "tls_min_version", False) or ssl.TLSVersion.TLSv1_2
        self.tls_max_version = _tls_version(max_v, "tls_max_version", True)
        if self.tls_max_version is not None and self.tls_max_version < self.tls_min_version:
            raise ValueError(f"Security: tls_max_version {max_v!r} is below tls_min_version {min_v!r}")
        if require_encryption is None:
            require_encryption = dask.config.get("distributed.comm.require-encryption", None)
        if require_encryption is None:
            require_encryption = any(kwargs.get(f) for f in _FIELDS if f != "tls_ciphers")
        self.require_encryption = bool(require_encryption)

    @classmethod
    def temporary(cls, **kwargs: Any) -> Security:
        """A Security with a fresh self-signed certificate for every role.

        The key and certificate exist only in memory (in this object) and the
        certificate is its own CA: only holders of this object (or a copy of
        it) can join the cluster.  Needs the ``cryptography`` package.

        Examples
        --------
        >>> cluster = LocalCluster(security=Security.temporary())  # doctest: +SKIP
        """
        try:
            from cryptography import x509
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.x509.oid import NameOID
        except ImportError as e:
            raise ImportError("Security.temporary() needs the `cryptography` package: pip install cryptography") from e
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dask-internal")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("dask-internal")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        require_encryption = kwargs.pop("require_encryption", True)
        creds: dict[str, Any] = {"tls_ca_file": cert_pem}
        for role in _ROLES:
            creds[f"tls_{role}_cert"] = cert_pem
            creds[f"tls_{role}_key"] = key_pem
        creds.update(kwargs)
        return cls(require_encryption=require_encryption, **creds)

    def __repr__(self) -> str:
        items = []
        for field in sorted(self.__slots__):
            if field == "extra_conn_args":
                continue
            value = getattr(self, field)
            if value is None:
                continue
            items.append(f"{field}={'...' if isinstance(value, str) and _in_memory(value) else repr(value)}")
        return f"Security({', '.join(items)})"

    def _repr_html_(self) -> str:
        # As dask's: where each credential comes from, never the credential itself.
        fields: dict[str, str] = {}
        for field in sorted(self.__slots__):
            value = getattr(self, field)
            if field == "extra_conn_args" or value is None:
                continue
            if isinstance(value, str) and field in _FIELDS and field != "tls_ciphers":
                fields[field] = "Temporary (In-memory)" if _in_memory(value) else f"Local ({os.path.abspath(value)})"
            elif isinstance(value, ssl.TLSVersion):
                fields[field] = value.name
            else:
                fields[field] = str(value)
        return str(security_html(fields))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Security):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __getstate__(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for f in self.__slots__:
            setattr(self, f, state[f])

    def get_tls_config_for_role(self, role: str) -> TLSConfig:
        """The TLS settings of ``role`` (``"client"``, ``"scheduler"`` or ``"worker"``)."""
        if role not in _ROLES:
            raise ValueError(f"Unknown role {role!r}: expected one of {_ROLES}")
        return TLSConfig(
            ca_file=self.tls_ca_file,
            ciphers=self.tls_ciphers,
            cert=getattr(self, f"tls_{role}_cert"),
            key=getattr(self, f"tls_{role}_key"),
        )

    def _context(self, role: str, purpose: ssl.Purpose) -> ssl.SSLContext | None:
        tls = self.get_tls_config_for_role(role)
        ca, cert, key = tls["ca_file"], tls["cert"], tls["key"]
        listening = purpose is ssl.Purpose.CLIENT_AUTH
        if ca is None:
            if cert is not None:
                raise ValueError(f"Security: tls_{role}_cert is given without tls_ca_file to check peers against")
            return None
        if cert is None and listening:
            raise ValueError(f"Security: listening with TLS as {role} needs tls_{role}_cert (and its key)")
        if _in_memory(ca):
            ctx = ssl.create_default_context(purpose, cadata=ca)
        else:
            ctx = ssl.create_default_context(purpose, cafile=ca)
        # Members of a cluster are reached by IP under a CA of their own: the
        # chain is checked, the name is not.
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED  # both ways: the server wants the client's certificate too
        ctx.minimum_version = self.tls_min_version
        if self.tls_max_version is not None:
            ctx.maximum_version = self.tls_max_version
        if tls["ciphers"]:
            ctx.set_ciphers(tls["ciphers"])
        if cert is not None:
            load_cert_chain(ctx, cert, key)
        return ctx

    def get_connection_args(self, role: str) -> ConnectionArgs:
        """Connection arguments for :func:`distributed.comm.connect` as ``role``."""
        return ConnectionArgs(
            ssl_context=self._context(role, ssl.Purpose.SERVER_AUTH),
            require_encryption=self.require_encryption,
            extra_conn_args=dict(self.extra_conn_args),
        )

    def get_listen_args(self, role: str) -> ConnectionArgs:
        """Connection arguments for :func:`distributed.comm.listen` as ``role``."""
        return ConnectionArgs(
            ssl_context=self._context(role, ssl.Purpose.CLIENT_AUTH),
            require_encryption=self.require_encryption,
            extra_conn_args=dict(self.extra_conn_args),
        )


def load_cert_chain(ctx: ssl.SSLContext, cert: str, key: str | None) -> None:
    """Load a certificate and key, each given as a path or as PEM text, into ``ctx``.

    ``ssl`` reads them from files only: PEM text is written to a private
    temporary directory (mode 0700) and removed once loaded.
    """
    if not _in_memory(cert) and (key is None or not _in_memory(key)):
        ctx.load_cert_chain(cert, key)
        return
    with tempfile.TemporaryDirectory(prefix="dask-tls-") as tmp:
        if _in_memory(cert):
            path = os.path.join(tmp, "cert.pem")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(cert)
            cert = path
        if key is not None and _in_memory(key):
            path = os.path.join(tmp, "key.pem")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(key)
            key = path
        ctx.load_cert_chain(cert, key)


def acting_as(security: Security, role: str, as_role: str) -> Security:
    """A copy of ``security`` in which ``as_role`` uses ``role``'s certificate and key.

    A worker's client (``get_client`` in a task) connects as a client with the
    worker's own credentials: a worker is given no client certificate.
    """
    state = security.__getstate__()
    state[f"tls_{as_role}_cert"] = state[f"tls_{role}_cert"]
    state[f"tls_{as_role}_key"] = state[f"tls_{role}_key"]
    copy = Security.__new__(Security)
    copy.__setstate__(state)
    return copy


def coerce_security(security: object, where: str, temporary_ok: bool = False) -> Security:
    """The Security a ``security=`` argument stands for.

    ``None`` (or ``False``) is the configured default, a dict the keywords of
    a Security, and ``True`` (where ``temporary_ok``: a cluster that makes
    every member itself) a :meth:`Security.temporary` one.
    """
    if security is None or security is False:
        return Security()
    if security is True and temporary_ok:
        return Security.temporary()
    if isinstance(security, Security):
        return security
    if isinstance(security, dict):
        return Security(**security)
    raise TypeError(f"{where}(security={security!r}) must be a Security, a dict of its keywords or None")


def http_ssl_context() -> ssl.SSLContext | None:
    """The TLS context of the HTTP servers, from ``distributed.scheduler.dashboard.tls.*`` (None: plain HTTP).

    Browsers are not asked for a certificate: HTTPS here encrypts, the
    cluster's own comms authenticate.
    """
    cert = dask.config.get("distributed.scheduler.dashboard.tls.cert", None)
    if not cert:
        return None
    key = dask.config.get("distributed.scheduler.dashboard.tls.key", None) or None
    ca = dask.config.get("distributed.scheduler.dashboard.tls.ca-file", None) or None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if ca:
        if _in_memory(ca):
            ctx.load_verify_locations(cadata=ca)
        else:
            ctx.load_verify_locations(cafile=ca)
    load_cert_chain(ctx, str(cert), str(key) if key else None)
    return ctx
