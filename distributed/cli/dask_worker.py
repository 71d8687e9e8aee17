"""``dask worker SCHEDULER``: run workers for a scheduler until interrupted.

Starts ``--nworkers`` workers. With ``--nanny`` (the default, as in dask)
each runs in a process of its own under a :class:`~distributed.Nanny` in this
process, which starts it again when it dies; with ``--no-nanny`` they all run
**in this one process, on one event loop**, sharing the GIL.

The scheduler address comes from the ``SCHEDULER`` argument or from
``--scheduler-file`` (waited for while it does not exist yet, up to
``--death-timeout`` or the connect timeout). SIGINT or SIGTERM first has the
scheduler retire the workers (the data only they hold moves to other workers,
within ``distributed.comm.timeouts.tcp``; a second signal exits at once), then
closes them and exits 0. When the scheduler goes away the workers close themselves
and the process exits 0 too. Failing to start exits 1, as does a nanny that
closes because its worker died and could not be started again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
from typing import TYPE_CHECKING, Any

import click
import dask.config
from dask.utils import format_bytes, parse_timedelta

from distributed.cli.utils import (
    DurationType,
    MemoryLimitType,
    ShutdownSignal,
    get_ip_interface,
    parse_resources,
    run_unless_signalled,
    security_from_options,
    setup_logging,
    tls_options,
    version_line,
    wait_for_scheduler_file,
)
from distributed.cli.utils import (
    pid_file as write_pid_file,
)
from distributed.comm.addressing import WILDCARD_HOSTS, get_address_host, parse_ports, unparse_host_port
from distributed.http.server import parse_http_address
from distributed.preloading import validate_preload_argv

__all__ = ["main", "nworkers_nthreads", "parse_port_range"]

if TYPE_CHECKING:
    from distributed.nanny import Nanny
    from distributed.worker import Worker

logger = logging.getLogger("distributed.cli.dask_worker")


def _version() -> str:
    from distributed import __version__

    return __version__


def nworkers_nthreads(nworkers: str, nthreads: int, cpu_count: int | None = None) -> tuple[int, int]:
    """Resolve ``--nworkers`` and ``--nthreads`` into positive numbers.

    ``nworkers`` is a count, a negative number (``cpu_count + 1 + n``) or
    ``"auto"`` (about as many workers as threads per worker);
    ``nthreads=0`` shares the cores among the workers.

    Raises
    ------
    ValueError
        On a value that resolves to less than one.

    Examples
    --------
    >>> nworkers_nthreads("2", 0, cpu_count=8)
    (2, 4)
    >>> nworkers_nthreads("auto", 0, cpu_count=8)
    (4, 2)
    """
    cores = cpu_count or os.cpu_count() or 1
    text = nworkers.strip().lower()
    if text == "auto":
        if cores <= 4:
            n = cores
        else:
            n = next(d for d in range(math.isqrt(cores - 1) + 1, cores + 1) if cores % d == 0)
        return n, nthreads or max(1, cores // n)
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"--nworkers must be an integer or 'auto', got {nworkers!r}") from None
    if n < 0:
        n = cores + 1 + n
    if n < 1:
        raise ValueError(f"--nworkers {nworkers} leaves no workers on {cores} cores")
    if nthreads < 0:
        raise ValueError(f"--nthreads must be 0 (auto) or positive, got {nthreads}")
    return n, nthreads or max(1, cores // n)


def parse_port_range(text: str | None, count: int) -> list[int | str]:
    """Ports for ``count`` workers from ``--worker-port`` (``"8000"`` or ``"8000:8010"``).

    ``None`` or ``"0"`` gives each worker any free port.  From a range, worker
    ``i`` tries the ports from ``start + i`` to the end in order, so a port
    that is taken (by another program, or another of these workers) is passed
    over rather than failing the start.

    Raises
    ------
    ValueError
        On a malformed value, or a range too small for ``count`` workers.
    """
    if text is None or text.strip() in ("", "0"):
        return [0] * count
    ports = parse_ports(text.strip())
    if 0 in ports:
        raise ValueError(f"{text!r} is not a valid port range")
    if len(ports) < count:
        raise ValueError(f"{text!r} has fewer ports than the {count} workers")
    if len(ports) == 1:
        return [ports[0]]
    return [f"{ports[i]}:{ports[-1]}" for i in range(count)]


# Unknown options are let through to preload_argv, which checks them against the --preload modules' click commands.
@click.command(name="worker", context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True})
@click.argument("scheduler", type=str, required=False)
@click.argument("preload_argv", nargs=-1, type=click.UNPROCESSED, callback=validate_preload_argv)
@click.option("--scheduler-file", type=str, default=None, help="File the scheduler wrote its address to")
@click.option("--nthreads", type=int, default=0, show_default=True, help="Threads per worker (0: cores / nworkers)")
@click.option(
    "--nworkers",
    type=str,
    default="1",
    show_default=True,
    help="Workers to start (a negative n means cores + 1 + n; 'auto'); with --no-nanny they share this process",
)
@click.option("--name", type=str, default=None, help="Worker name (with --nworkers > 1, suffixed with -0, -1, ...)")
@click.option(
    "--memory-limit",
    type=MemoryLimitType(),
    default="auto",
    show_default=True,
    help="Bytes of memory per worker: 'auto', a size like '4GiB', a fraction of RAM like 0.5, or 0 for no limit",
)
@click.option(
    "--host", type=str, default=None, help="Host or IP to listen on (default: chosen from the scheduler's address)"
)
@click.option("--interface", type=str, default=None, help="Network interface to listen on, like 'eth0'")
@click.option(
    "--protocol", type=str, default=None, help="Protocol to listen with, like 'tcp' (default: the scheduler's)"
)
@click.option(
    "--worker-port", type=str, default=None, help="Port (or range 'start:end' with --nworkers > 1) to listen on"
)
@click.option(
    "--nanny-port", type=str, default=None, help="Port (or range 'start:end' with --nworkers > 1) of the nannies"
)
@click.option("--listen-address", type=str, default=None, help="Address to listen on, like tcp://0.0.0.0:9000")
@click.option(
    "--contact-address", type=str, default=None, help="Address to advertise to the scheduler, like tcp://1.2.3.4:9000"
)
@click.option(
    "--nanny/--no-nanny",
    "nanny",
    default=True,
    help="Run each worker in its own process under a nanny that restarts it (default)",
)
@click.option("--resources", type=str, default=None, help="Abstract resources, like 'GPU=2 MEM=10e9'")
@click.option(
    "--death-timeout",
    type=DurationType(),
    default=None,
    help="Give up if the scheduler cannot be reached for this long",
)
@click.option("--local-directory", type=str, default=None, help="Directory for scratch files")
@click.option(
    "--dashboard-address",
    type=str,
    default=":0",
    show_default=True,
    help="Address of the worker's HTTP endpoints (/health, /info, /metrics)",
)
@click.option("--dashboard/--no-dashboard", "dashboard", default=True, help="Serve the worker's HTTP endpoints")
@click.option("--pid-file", type=str, default=None, help="File to write the process PID to")
@click.option(
    "--lifetime",
    type=DurationType(),
    default=None,
    help="Close gracefully (handing data to other workers) after this long",
)
@click.option(
    "--lifetime-stagger", type=DurationType(), default=None, help="Random spread added to --lifetime (+/- this much)"
)
@click.option(
    "--lifetime-restart/--no-lifetime-restart",
    "lifetime_restart",
    default=False,
    help="At the end of --lifetime, hand the data off and have the nanny start a new worker (needs a nanny)",
)
@click.option(
    "--preload",
    type=str,
    multiple=True,
    is_eager=True,
    help='Module to run in each worker process, like "foo.bar" or "/path/to/foo.py" (its dask_setup, dask_teardown)',
)
@click.option(
    "--preload-nanny",
    type=str,
    multiple=True,
    is_eager=True,
    help='Module to run in each nanny, like "foo.bar" or "/path/to/foo.py"',
)
@tls_options
@click.version_option(version=_version(), prog_name="dask worker")
def main(
    scheduler: str | None,
    preload_argv: tuple[str, ...],
    scheduler_file: str | None,
    nthreads: int,
    nworkers: str,
    name: str | None,
    memory_limit: str | float | int,
    host: str | None,
    interface: str | None,
    protocol: str | None,
    worker_port: str | None,
    nanny_port: str | None,
    listen_address: str | None,
    contact_address: str | None,
    nanny: bool,
    resources: str | None,
    death_timeout: float | None,
    local_directory: str | None,
    dashboard_address: str,
    dashboard: bool,
    pid_file: str | None,
    lifetime: float | None,
    lifetime_stagger: float | None,
    lifetime_restart: bool,
    preload: tuple[str, ...],
    preload_nanny: tuple[str, ...],
    tls_ca_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
) -> None:
    """Run Dask workers for the scheduler at SCHEDULER (or in --scheduler-file).

    With --nworkers > 1 the workers currently share this process and its event
    loop; SIGINT/SIGTERM close them all cleanly.
    """
    if not scheduler and not scheduler_file:
        raise click.UsageError("Need the scheduler's address: give SCHEDULER or --scheduler-file")
    try:
        n, threads = nworkers_nthreads(nworkers, nthreads)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--nworkers' / '--nthreads'") from None
    try:
        ports = parse_port_range(worker_port, n)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--worker-port'") from None
    if nanny_port and not nanny:
        raise click.UsageError("--nanny-port needs --nanny")
    try:
        nanny_ports = parse_port_range(nanny_port, n)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--nanny-port'") from None
    try:
        resource_map = parse_resources(resources)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--resources'") from None
    if n > 1 and (listen_address or contact_address):
        raise click.UsageError("--listen-address and --contact-address need --nworkers 1")
    if host and interface:
        raise click.UsageError("Use --host or --interface, not both")
    if listen_address and (host or interface or worker_port):
        raise click.UsageError("--listen-address already says where to listen: drop --host/--interface/--worker-port")
    if interface:
        try:
            host = get_ip_interface(interface)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--interface'") from None
    if preload_nanny and not nanny:
        raise click.UsageError("--preload-nanny needs a nanny: drop --no-nanny")
    if lifetime_restart and not nanny:
        raise click.UsageError("--lifetime-restart needs a nanny to start the new worker: drop --no-nanny")
    if lifetime_restart and lifetime is None:
        raise click.UsageError("--lifetime-restart needs --lifetime")
    if lifetime_stagger is not None and lifetime is None:
        raise click.UsageError("--lifetime-stagger needs --lifetime")
    if dashboard:
        try:
            _, dashboard_port = parse_http_address(dashboard_address, default_port=0)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--dashboard-address'") from None
        if dashboard_port and n > 1:
            raise click.UsageError("A fixed --dashboard-address port serves one worker: use port 0 with --nworkers > 1")

    security = security_from_options("worker", tls_ca_file, tls_cert, tls_key)
    setup_logging()
    if n > 1 and not nanny:
        logger.info("Starting %d workers in this process (one event loop; --nanny gives each its own process)", n)

    worker_kwargs: list[dict[str, Any]] = []
    for i in range(n):
        kw: dict[str, Any] = {
            "nthreads": threads,
            "name": (f"{name}-{i}" if n > 1 else name) if name is not None else None,
            "memory_limit": memory_limit,
            "host": host,
            "port": ports[i],
            "protocol": protocol,
            "listen_address": listen_address,
            "contact_address": contact_address,
            "resources": resource_map or None,
            "death_timeout": death_timeout,
            "local_directory": local_directory,
            "dashboard": dashboard,
            "dashboard_address": dashboard_address,
            "lifetime": lifetime,
            "lifetime_stagger": lifetime_stagger,
            "security": security,
        }
        if lifetime_restart:
            kw["lifetime_restart"] = True
        # Unset, the worker reads distributed.worker.preload and preload-argv (and a nanny distributed.nanny.*).
        if preload:
            kw["preload"] = list(preload)
        if preload_argv:
            kw["preload_argv"] = list(preload_argv)
        if preload_nanny:
            kw["preload_nanny"] = list(preload_nanny)
        if nanny:
            # The nanny listens on --nanny-port; its worker on --worker-port.
            kw["worker_port"] = kw.pop("port")
            kw["port"] = nanny_ports[i]
        worker_kwargs.append(kw)

    with write_pid_file(pid_file):
        code = asyncio.run(_run(scheduler, scheduler_file, death_timeout, worker_kwargs, nanny))
    sys.exit(code)


async def _run(
    scheduler: str | None,
    scheduler_file: str | None,
    death_timeout: float | None,
    worker_kwargs: list[dict[str, Any]],
    nanny: bool,
) -> int:
    from distributed.nanny import Nanny
    from distributed.worker import Worker

    shutdown = ShutdownSignal()
    shutdown.install()

    address = scheduler
    if not address:
        assert scheduler_file is not None
        logger.info("Waiting for the scheduler's address in %s", scheduler_file)
        timeout = death_timeout or float(
            parse_timedelta(dask.config.get("distributed.comm.timeouts.connect", "30s")) or 30
        )
        try:
            address = await run_unless_signalled(wait_for_scheduler_file(scheduler_file, timeout), shutdown)
        except TimeoutError as e:
            logger.error("%s", e)
            return 1
        if address is None:
            return 0

    try:
        workers: list[Worker | Nanny] = [(Nanny if nanny else Worker)(address, **kw) for kw in worker_kwargs]
    except Exception as e:
        logger.error("Could not create the worker(s): %s", e)
        return 1

    async def start_all() -> None:
        await asyncio.gather(*(w.start() for w in workers))

    # Shielded: on a signal the starts go on while those workers that already
    # joined the scheduler (and may hold data) are retired; then they are cut short.
    starting = asyncio.ensure_future(start_all())

    async def started() -> None:
        await asyncio.shield(starting)

    try:
        await run_unless_signalled(started(), shutdown)
    except Exception as e:
        logger.error("Could not start the worker(s) for scheduler %s: %s", address, e)
        await _close_all(workers)
        return 1
    if len(workers) == 1 and isinstance(workers[0], Worker):
        workers[0].tend_gc_alone()  # alone in this process (no nanny): the collector is its own
    if shutdown.received is not None:
        await _retire(workers, address)
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await _close_all(workers)
        return 0

    logger.info("-" * 47)
    for w in workers:
        if isinstance(w, Nanny):
            logger.info("  Nanny at:       %s (worker %s, pid %s)", w.address, w.worker_address, w.pid)
            logger.info("  Memory:         %s", format_bytes(w.memory_limit) if w.memory_limit else "no limit")
            continue
        logger.info("  Worker at:      %s (name %s, %d threads)", w.address, w.name, w.nthreads)
        logger.info("  Memory:         %s", format_bytes(w.memory_limit) if w.memory_limit else "no limit")
        logger.info("  Local directory: %s", w.local_directory)
        if w.http_server is not None:
            # On every interface, the worker's own announced host is the one others reach it by.
            host = w.http_server.host
            if host in WILDCARD_HOSTS:
                host = get_address_host(w.address)
            host = unparse_host_port(host)
            logger.info("  dashboard at:   %s://%s:%d/health", w.http_server.scheme, host, w.http_server.port)
    # Started means registered: batch-system launchers (dask-jobqueue's) wait for this line, as dask's prints it.
    logger.info("  Registered to:  %s", address)
    logger.info("  Versions:       %s", version_line())
    logger.info("-" * 47)

    async def all_finished() -> None:
        await asyncio.gather(*(w.finished() for w in workers))

    await run_unless_signalled(all_finished(), shutdown)
    failures = [(w.address, w.failure) for w in workers if isinstance(w, Nanny) and w.failure is not None]
    if shutdown.received is not None:
        await _retire(workers, address)
        logger.info("Closing %d worker(s)", len(workers))
    elif not failures:
        logger.info("The worker(s) closed themselves (the scheduler went away or asked them to)")
    for nanny_address, failure in failures:
        logger.error("Nanny %s closed: %s", nanny_address, failure)
    await _close_all(workers)
    shutdown.uninstall()
    logger.info("End worker")
    return 1 if failures else 0


#: Seconds to reach the scheduler when retiring on a signal.  A live scheduler accepts a
#: connection in milliseconds; one that is gone is retried for the whole connect timeout
#: (30 s by default), which a user pressing Ctrl-C should not wait out.
RETIRE_CONNECT_TIMEOUT = 1.0


async def _retire(workers: list[Worker | Nanny], scheduler: str) -> None:
    """Have the scheduler retire these workers: the data only they hold moves to other workers first.

    Only the workers that joined the scheduler are retired (the others hold
    nothing).  Reaching the scheduler may take :data:`RETIRE_CONNECT_TIMEOUT`,
    the whole retirement ``distributed.comm.timeouts.tcp``; a second signal
    exits at once.  Workers the scheduler keeps (no other worker can take
    their only copies) are closed anyway, as are all of them when the
    scheduler cannot be reached.
    """
    from distributed.comm import CommClosedError, connect
    from distributed.core import send_recv
    from distributed.nanny import Nanny
    from distributed.protocol import messages as m

    joined = [w for w in workers if _joined(w)]
    addrs = [a for a in map(_worker_address, joined) if a]
    # A nanny learns its worker's address only once that worker has started, which
    # is after it joined the scheduler: the scheduler knows it by its nanny.
    unknown = {_listening(w) for w in joined if isinstance(w, Nanny) and not w.worker_address} - {None}
    if not addrs and not unknown:
        return
    timeout = float(parse_timedelta(dask.config.get("distributed.comm.timeouts.tcp")) or 30)
    try:
        async with asyncio.timeout(timeout):
            comm = await connect(
                scheduler, timeout=RETIRE_CONNECT_TIMEOUT, name="worker-cli->scheduler", **workers[0].connection_args
            )
            try:
                if unknown:
                    info = await send_recv(comm, m.Empty(op="identity"))
                    addrs += [a for a, ws in dict(info.get("workers") or {}).items() if ws.get("nanny") in unknown]
                if not addrs:
                    return
                logger.info("Retiring %d worker(s): handing the data only they hold to other workers", len(addrs))
                request = m.RetireWorkers(op="retire_workers", workers=addrs, close_workers=False, remove=True)
                retired = await send_recv(comm, request)
            finally:
                await comm.close()
    except (OSError, CommClosedError, TimeoutError) as e:
        logger.warning("Could not retire the worker(s) gracefully (%s); closing them", e or type(e).__name__)
        return
    except Exception as e:
        logger.warning("The scheduler refused to retire the worker(s) (%s); closing them", e)
        return
    kept = [a for a in addrs if a not in retired]
    if kept:
        logger.warning(
            "No other worker could take the data only %s hold(s); closing anyway: the scheduler recomputes what it can",
            kept,
        )


def _joined(w: Worker | Nanny) -> bool:
    """Whether ``w`` reached the scheduler: a worker that registered, a nanny that started its worker process.

    A nanny starts its worker only once it has registered with the scheduler
    itself, so without a process no worker of its can have joined.
    """
    from distributed.nanny import Nanny

    return w.process is not None if isinstance(w, Nanny) else w.registered


def _listening(w: Worker | Nanny) -> str | None:
    try:
        return w.address
    except ValueError:
        return None


def _worker_address(w: Worker | Nanny) -> str | None:
    """The worker's address, None while it does not listen (or, under a nanny, while no process runs)."""
    from distributed.nanny import Nanny

    return w.worker_address if isinstance(w, Nanny) else _listening(w)


async def _close_all(workers: list[Worker | Nanny]) -> None:
    results = await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)
    for w, r in zip(workers, results):
        if isinstance(r, BaseException):
            logger.error("Error closing worker %s: %s", w.name, r)


if __name__ == "__main__":
    main()
