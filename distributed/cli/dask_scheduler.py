"""``dask scheduler``: run a scheduler until interrupted.

Starts one :class:`~distributed.scheduler.Scheduler` on an asyncio loop, logs
where it listens (``Scheduler at:``) and where its HTTP endpoints are, writes
the scheduler file when asked, and on SIGINT or SIGTERM closes it and exits 0.
It also exits 0 when the scheduler closes on its own (``--idle-timeout``).
Failing to start (port in use, bad host) exits 1 with the reason on stderr.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sys
from typing import Any

import click

from distributed.cli.utils import (
    DurationType,
    ShutdownSignal,
    get_ip_interface,
    host_in_address,
    run_unless_signalled,
    security_from_options,
    setup_logging,
    tls_options,
    version_line,
)
from distributed.cli.utils import (
    pid_file as write_pid_file,
)
from distributed.comm.addressing import address_from_user_args, parse_address, parse_host_port
from distributed.preloading import validate_preload_argv

__all__ = ["main"]

logger = logging.getLogger("distributed.cli.dask_scheduler")


def _version() -> str:
    from distributed import __version__

    return __version__


# Unknown options are let through to preload_argv, which checks them against the --preload modules' click commands.
@click.command(
    name="scheduler", context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True}
)
@click.option("--host", type=str, default="", help="URI, IP or hostname to listen on (default: all interfaces)")
@click.option("--port", type=int, default=None, help="Port to listen on (default 8786; 0: any free port)")
@click.option("--interface", type=str, default=None, help="Network interface to listen on, like 'eth0' or 'ib0'")
@click.option(
    "--protocol",
    type=str,
    default=None,
    help="Protocol to listen with: 'tcp' (default) or 'tls' (default with --tls-*)",
)
@click.option(
    "--dashboard-address",
    type=str,
    default=":8787",
    show_default=True,
    help="Address for the HTTP endpoints (/health, /info, /metrics)",
)
@click.option(
    "--dashboard/--no-dashboard", "dashboard", default=True, show_default=True, help="Serve the HTTP endpoints"
)
@click.option("--jupyter/--no-jupyter", "jupyter", default=False, help="Not supported yet: --jupyter is refused")
@click.option(
    "--scheduler-file", type=str, default=None, help="File to write the scheduler's address and identity to (JSON)"
)
@click.option("--pid-file", type=str, default=None, help="File to write the process PID to")
@click.option(
    "--idle-timeout",
    type=DurationType(),
    default=None,
    help="Close the scheduler after this long without work (e.g. '1 hour')",
)
@click.option(
    "--journal",
    type=str,
    default=None,
    help="SQLite file where the scheduler keeps its graphs and clients' wants; a scheduler started on the file of "
    "one that died takes over its work (default: distributed.scheduler.journal)",
)
@click.option(
    "--preload",
    type=str,
    multiple=True,
    is_eager=True,
    help='Module to run in the scheduler, like "foo.bar" or "/path/to/foo.py" (its dask_setup, dask_teardown)',
)
@tls_options
@click.argument("preload_argv", nargs=-1, type=click.UNPROCESSED, callback=validate_preload_argv)
@click.version_option(version=_version(), prog_name="dask scheduler")
def main(
    host: str,
    port: int | None,
    interface: str | None,
    protocol: str | None,
    dashboard_address: str,
    dashboard: bool,
    jupyter: bool,
    scheduler_file: str | None,
    pid_file: str | None,
    idle_timeout: float | None,
    journal: str | None,
    preload: tuple[str, ...],
    tls_ca_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    preload_argv: tuple[str, ...],
) -> None:
    """Run a Dask scheduler until interrupted (SIGINT/SIGTERM close it cleanly)."""
    if host and interface:
        raise click.UsageError("Use --host or --interface, not both")
    if port is not None and not 0 <= port <= 65535:
        raise click.BadParameter(f"{port} is not a port number (0-65535)", param_hint="'--port'")
    if interface:
        try:
            host = get_ip_interface(interface)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--interface'") from None
    if jupyter:
        raise click.UsageError("--jupyter is not supported yet")
    security = security_from_options("scheduler", tls_ca_file, tls_cert, tls_key)
    if protocol is None and "://" not in host:
        protocol = "tls" if security is not None and security.require_encryption else "tcp"
    try:
        # --host may carry a scheme and a port (tcp://10.0.0.5:8786); --port, when given, must agree.
        start = address_from_user_args(host, port or 0, protocol=protocol, who="dask scheduler")
        scheme, loc = parse_address(start)
        host, given_port = parse_host_port(loc)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--host' / '--port' / '--protocol'") from None
    protocol = scheme
    port = given_port if given_port or port is not None else 8786
    setup_logging()
    if dashboard and host and dashboard_address.startswith(":"):
        # Serve HTTP where the scheduler listens rather than on every interface.
        dashboard_address = host_in_address(host) + dashboard_address

    kwargs: dict[str, Any] = {
        "host": host,
        "port": port,
        "protocol": protocol,
        "dashboard": dashboard,
        "dashboard_address": dashboard_address if dashboard else None,
        "scheduler_file": scheduler_file,
        "idle_timeout": idle_timeout,
        "journal": journal,
        "security": security,
        # Unset, the scheduler reads distributed.scheduler.preload and preload-argv.
        "preload": list(preload) or None,
        "preload_argv": list(preload_argv) or None,
    }
    with write_pid_file(pid_file):
        code = asyncio.run(_run(kwargs))
    sys.exit(code)


async def _run(kwargs: dict[str, Any]) -> int:
    from distributed.scheduler import Scheduler

    shutdown = ShutdownSignal()
    shutdown.install()
    try:
        scheduler = Scheduler(**kwargs)
    except Exception as e:
        # A preload that cannot be imported, a setting refused: the message says which.
        logger.error("Could not create the scheduler: %s", e)
        return 1
    where = f"{kwargs['protocol']}://{host_in_address(kwargs['host']) if kwargs['host'] else '*'}:{kwargs['port']}"
    try:
        started = await run_unless_signalled(scheduler.start(), shutdown)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            logger.error(
                "Could not start the scheduler at %s: the port is already in use "
                "(is another scheduler running? Pick another with --port, or --port 0 for any free port)",
                where,
            )
        else:
            logger.error("Could not start the scheduler at %s: %s", where, e)
        return 1
    except Exception as e:
        logger.error("Could not start the scheduler at %s: %s", where, e, exc_info=True)
        return 1
    if started is None:
        await scheduler.close()
        return 0
    # This process is the scheduler's: what it made to start lives as long as it does.
    scheduler.streams.gc.freeze_startup()

    logger.info("-" * 47)
    logger.info("  Scheduler at:   %s", scheduler.address)
    logger.info("  Versions:       %s", version_line())
    if scheduler.http_server is not None:
        host = scheduler.address.split("://", 1)[-1].rsplit(":", 1)[0]
        logger.info(
            "  dashboard at:   %s://%s:%d/status", scheduler.http_server.scheme, host, scheduler.http_server.port
        )
    if kwargs["scheduler_file"]:
        logger.info("  scheduler file: %s", kwargs["scheduler_file"])
    logger.info("-" * 47)

    await run_unless_signalled(scheduler.finished(), shutdown)
    if shutdown.received is not None:
        logger.info("Closing the scheduler")
    else:
        logger.info("The scheduler closed itself")
    try:
        await scheduler.close()
    except Exception:
        logger.exception("Error while closing the scheduler")
        return 1
    shutdown.uninstall()
    logger.info("End scheduler")
    return 0


if __name__ == "__main__":
    main()
