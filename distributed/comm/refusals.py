"""Refused connections: every one counted, at most one log line per peer host per interval.

A listener that refuses a peer (a TLS handshake that failed: no certificate,
one not signed by the cluster's CA, clear text at a TLS port, a handshake that
never finished) must tell the operator who was refused and why.  A peer that
retries in a loop, though, would fill the log with the same line many times a
second.  So :class:`RefusalLog` decides, per refusal, whether to log it; the
listener does the logging (this module does no I/O and reads no clock of its
own, so it is tested without sockets or waiting).

Invariants:

- :attr:`RefusalLog.total` counts every refusal, logged or not (the
  ``tls_refused_connections_total`` metric of the scheduler and the worker).
- The first refusal of a host is logged; after a logged one, the next is
  logged once ``interval`` seconds have passed, with the number of refusals
  of that host not logged in between.  An interval of 0 logs every refusal.
- Peers are keyed by host, not port: a peer retrying comes from a new port
  each time.  At most ``max_hosts`` hosts are remembered, the longest unlogged
  dropped first, so a scan from many addresses costs bounded memory (a host
  forgotten is logged anew when it is next refused).
"""

from __future__ import annotations

from typing import Final

import dask.config
from dask.utils import parse_timedelta

__all__ = ["RefusalLog", "refused_log_interval"]

#: Hosts remembered by a listener; far more than the peers of a real cluster.
MAX_HOSTS: Final = 4096


def refused_log_interval() -> float:
    """``distributed.comm.tls.refused-log-interval`` in seconds (0: log every refusal)."""
    value = dask.config.get("distributed.comm.tls.refused-log-interval", "60s")
    seconds = parse_timedelta(value, default="seconds") if value is not None else 0
    return max(float(seconds or 0), 0.0)


class RefusalLog:
    """Which refused connections a listener logs, and how many it refused.

    Parameters
    ----------
    interval
        Seconds between two log lines about the same host.
    max_hosts
        Hosts remembered at most.

    Examples
    --------
    >>> log = RefusalLog(interval=60)
    >>> log.refused("10.0.0.5", now=0.0)  # the first: log it, nothing left out before it
    0
    >>> log.refused("10.0.0.5", now=1.0) is None  # within the interval: not logged
    True
    >>> log.refused("10.0.0.5", now=61.0)  # logged, with the one left out since the last line
    1
    >>> log.total
    3
    """

    __slots__ = ("interval", "max_hosts", "total", "_hosts")

    def __init__(self, interval: float, max_hosts: int = MAX_HOSTS) -> None:
        self.interval = interval
        self.max_hosts = max_hosts
        #: Refusals counted, logged or not.
        self.total = 0
        # host -> [when it was last logged, refusals not logged since]; in the order they were logged.
        self._hosts: dict[str, list[float]] = {}

    def refused(self, host: str, now: float) -> int | None:
        """Count a refusal of ``host`` at time ``now`` (a monotonic clock, in seconds).

        Returns
        -------
        None when it is not to be logged; else the number of refusals of
        ``host`` not logged since its previous log line.
        """
        self.total += 1
        entry = self._hosts.get(host)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return None
        left_out = int(entry[1]) if entry is not None else 0
        # Re-inserted, so that the dict stays ordered by when each host was last logged.
        self._hosts.pop(host, None)
        self._hosts[host] = [now, 0]
        while len(self._hosts) > self.max_hosts:
            del self._hosts[next(iter(self._hosts))]
        return left_out
