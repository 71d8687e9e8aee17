"""OpenSSH servers on test hosts, for the tests of SSHCluster and ``dask ssh``.

Each server is Debian's ``/usr/sbin/sshd`` in the foreground (``-D -e``, its log
in the hosts' log files) with a configuration of its own: it listens on its
host's address only, knows the one host key and the one ``authorized_keys``
file it is given, lets root in by key only, and needs neither PAM nor strict
file modes (the keys live in a test's temporary directory).

The hosts share this machine's filesystem, so a remote side runs the same
interpreter and checkout as the test.  Without ``sshd``, ``ssh-keygen`` or
the ``asyncssh`` package, :func:`require_sshd` skips the calling test, except
under ``CI=true``, where it fails: there these tests must run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from distributed.tests.hosts import TestHost

__all__ = ["SSHD", "log_of", "make_key", "require_sshd", "sshd_available", "start_sshd"]

#: Debian's OpenSSH server (package openssh-server).
SSHD = "/usr/sbin/sshd"


def log_of(host: TestHost, program: str) -> str:
    """The output so far of the latest ``program`` started on ``host`` with its output to the hosts' log files."""
    logs = sorted(host.hosts.directory.glob(f"h{host.index}-*-{program}.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1].read_text(errors="replace") if logs else ""


def sshd_available() -> str | None:
    """``None`` when SSH servers can be run and reached here, else why not."""
    if not os.path.exists(SSHD):
        return f"no {SSHD} (openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "no ssh-keygen (openssh-client)"
    if importlib.util.find_spec("asyncssh") is None:
        return "the asyncssh package is not installed"
    return None


def require_sshd() -> None:
    """Skip the calling test without sshd/ssh-keygen/asyncssh; under ``CI=true``, fail instead."""
    why = sshd_available()
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"The SSH tests must run in CI, but: {why}")
    pytest.skip(f"needs an SSH server: {why}")


def make_key(path: Path) -> Path:
    """A new passphrase-less ed25519 key pair at ``path`` (and ``path.pub``); ``path``."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path


def start_sshd(host: TestHost, authorized_keys: Path, host_key: Path, port: int = 22) -> subprocess.Popen[str]:
    """Start an SSH server on ``host``'s address and ``port``; return once it accepts connections.

    Parameters
    ----------
    host
        The test host to run it on (its namespace has a port space of its own,
        so every host may use port 22).
    authorized_keys
        The ``authorized_keys`` file: the public keys that may log in (as any user).
    host_key
        The server's private host key.
    port
        The port to listen on.

    Returns
    -------
    subprocess.Popen
        The server (``ip netns exec`` runs it in place, so its PID is sshd's);
        the hosts' close ends it.
    """
    # sshd refuses to start without its privilege separation directory.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    directory = host.hosts.directory
    config = directory / f"sshd-h{host.index}.conf"
    config.write_text(
        textwrap.dedent(
            f"""\
            ListenAddress {host.ip}
            Port {port}
            HostKey {host_key}
            AuthorizedKeysFile {authorized_keys}
            PermitRootLogin prohibit-password
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            PidFile {directory}/sshd-h{host.index}.pid
            LogLevel VERBOSE
            """
        )
    )
    proc = host.popen([SSHD, "-D", "-e", "-f", str(config)])
    # Polled from inside the host's namespace, the only place its address is reachable.
    ready = host.python(
        f"""
        import json, socket, time
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(({host.ip!r}, {port}), timeout=1).close()
                ok = True
                break
            except OSError:
                if time.monotonic() > deadline:
                    ok = False
                    break
                time.sleep(0.05)
        print(json.dumps(ok))
        """,
        timeout=60,
    )
    if not ready or proc.poll() is not None:
        raise AssertionError(f"sshd on {host} did not start listening on port {port}:\n{log_of(host, 'sshd')}")
    return proc
