"""TLS transport: the TCP transport's framing over an ``ssl`` connection.

A ``tls://`` comm is a TCP comm whose asyncio transport encrypts: the same
:class:`asyncio.BufferedProtocol` parses the same frames out of the
decrypted stream (large frames are still received straight into their own
buffer), and writes go through the same flow control.  Only connecting and
listening differ, by the ``ssl.SSLContext`` they take.

Both sides authenticate (the contexts come from
:class:`distributed.security.Security`, which requires a certificate from
the peer and checks its chain against the cluster's CA).  A listener pauses
reading on each accepted connection and runs the server side of the
handshake (``loop.start_tls``) before a single byte reaches the framing
protocol, so it never reads a message from a peer whose certificate was
refused: that connection is dropped, and logged with the reason, before any
handler runs.  A client the server drops that way is told its certificate
may be refused (asyncio sends the peer no TLS alert to say why).
"""

from __future__ import annotations

import ssl

from distributed.comm.core import CommHandler
from distributed.comm.tcp import TCPComm, TCPListener, tcp_connect

__all__ = ["TLSListener", "tls_connect"]


async def tls_connect(loc: str, timeout: float, ssl_context: ssl.SSLContext) -> TCPComm:
    """Connect to ``host:port`` over TLS with ``ssl_context``.

    Raises
    ------
    OSError
        When nothing answers within ``timeout`` or the handshake fails (the
        server's certificate is not signed by our CA, or it refused ours).
    """
    return await tcp_connect(loc, timeout, ssl_context=ssl_context)


class TLSListener(TCPListener):
    """Listens for TLS connections on a TCP port; addresses are ``tls://host:port``."""

    def __init__(
        self, loc: str, handler: CommHandler, ssl_context: ssl.SSLContext, default_host: str | None = None
    ) -> None:
        super().__init__(loc, handler, ssl_context=ssl_context, default_host=default_host)
