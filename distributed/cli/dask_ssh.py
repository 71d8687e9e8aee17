"""``dask ssh HOST...``: a Dask cluster over SSH, run until interrupted.

The scheduler runs on ``--scheduler`` (default: the first host), and
``--nworkers`` workers (under nannies) on every host given, the scheduler's
host included when it is among them, as in dask.distributed.  Built on
:func:`~distributed.deploy.ssh.SSHCluster`: the remote processes run this
package's ``dask spec`` with ``--remote-python`` (default: this interpreter's
path).

As dask's command did, it accepts any host key (the hosts are the user's own
machines, named on the command line); ``--ssh-username``, ``--ssh-port`` and
``--ssh-private-key`` go to the SSH connections.

SIGINT or SIGTERM closes the workers, then the scheduler, and exits 0; so does
the remote scheduler ending on its own.  Failing to start exits 1, after
closing whatever did start.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import click

from distributed.cli.utils import MemoryLimitType, ShutdownSignal, run_unless_signalled, setup_logging

__all__ = ["main"]

logger = logging.getLogger("distributed.dask_ssh")

DEFAULT_REMOTE_DASK_WORKER = "distributed.cli.dask_worker"


def _version() -> str:
    from distributed import __version__

    return __version__


@click.command(
    name="ssh",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="""Launch a Dask cluster over SSH. A scheduler runs on the first host given in HOSTNAMES or in
    the hostfile, unless --scheduler names one. One or more workers run on each host: --nworkers sets
    how many per host and --nthreads how many threads each has.""",
)
@click.option("--scheduler", default=None, type=str, help="The scheduler's host (default: the first host)")
@click.option("--scheduler-port", default=8786, show_default=True, type=int, help="The scheduler's port")
@click.option("--nthreads", default=0, type=int, help="Threads per worker (default: cores / workers per host)")
@click.option("--nworkers", "n_workers", default=1, show_default=True, type=int, help="Workers per host")
@click.argument("hostnames", nargs=-1, type=str)
@click.option("--hostfile", default=None, type=click.Path(exists=True), help="A file of host names or addresses")
@click.option("--ssh-username", default=None, type=str, help="The user to log in as")
@click.option("--ssh-port", default=22, show_default=True, type=int, help="The port of the SSH servers")
@click.option("--ssh-private-key", default=None, type=str, help="The private key file to log in with")
@click.option("--nohost", is_flag=True, help="Do not pass the host name to the workers (they listen everywhere)")
@click.option("--log-directory", default=None, type=click.Path(exists=True), help="Not supported: refused when given")
@click.option(
    "--local-directory", default=None, type=click.Path(exists=True), help="The workers' directory on every host"
)
@click.option("--remote-python", default=None, type=str, help="The Python on the hosts")
@click.option(
    "--memory-limit",
    default="auto",
    show_default=True,
    type=MemoryLimitType(),
    help="Bytes of memory each worker may use: bytes, a fraction of RAM, a string like 5GB, 'auto', or 0 for no limit",
)
@click.option("--worker-port", type=int, default=0, help="The workers' port (default: any free one)")
@click.option("--nanny-port", type=int, default=0, help="The nannies' port (default: any free one)")
@click.option(
    "--remote-dask-worker",
    default=DEFAULT_REMOTE_DASK_WORKER,
    show_default=True,
    type=str,
    help="Not supported: only the default is accepted",
)
@click.version_option(version=_version(), prog_name="dask ssh")
@click.pass_context
def main(
    ctx: click.Context,
    scheduler: str | None,
    scheduler_port: int,
    nthreads: int,
    n_workers: int,
    hostnames: tuple[str, ...],
    hostfile: str | None,
    ssh_username: str | None,
    ssh_port: int,
    ssh_private_key: str | None,
    nohost: bool,
    log_directory: str | None,
    local_directory: str | None,
    remote_python: str | None,
    memory_limit: str | float | int,
    worker_port: int,
    nanny_port: int,
    remote_dask_worker: str,
) -> None:
    """Run a Dask cluster over SSH until interrupted."""
    hosts = list(hostnames)
    if hostfile:
        with open(hostfile) as f:
            hosts.extend(f.read().split())
    if not hosts:
        click.echo(ctx.get_help())
        sys.exit(1)
    if log_directory is not None:
        raise click.UsageError(
            "--log-directory is not supported: the remote output is logged here (at debug level) instead"
        )
    if remote_dask_worker != DEFAULT_REMOTE_DASK_WORKER:
        raise click.UsageError(f"--remote-dask-worker is not supported (got {remote_dask_worker!r})")
    if nthreads < 0:
        raise click.BadParameter(f"must be 0 (auto) or positive, got {nthreads}", param_hint="'--nthreads'")
    if n_workers < 1:
        raise click.BadParameter(f"must be positive, got {n_workers}", param_hint="'--nworkers'")
    connect: dict[str, Any] = {"port": ssh_port, "known_hosts": None}
    if ssh_username:
        connect["username"] = ssh_username
    if ssh_private_key:
        connect["client_keys"] = [ssh_private_key]
    worker_options: dict[str, Any] = {"n_workers": n_workers, "memory_limit": memory_limit}
    if nthreads:
        worker_options["nthreads"] = nthreads
    if worker_port:
        worker_options["worker_port"] = worker_port
    if nanny_port:
        worker_options["port"] = nanny_port
    if local_directory:
        worker_options["local_directory"] = local_directory
    setup_logging()
    code = asyncio.run(
        _run(
            scheduler or hosts[0],
            hosts,
            connect=connect,
            scheduler_options={"port": scheduler_port, "dashboard": True},
            worker_options=worker_options,
            share_cores=not nthreads and n_workers > 1,
            nohost=nohost,
            remote_python=remote_python,
        )
    )
    sys.exit(code)


async def _remote_cpu_count(host: str, connect: dict[str, Any], python: str) -> int:
    from distributed.deploy.ssh import import_asyncssh

    asyncssh = import_asyncssh()
    async with asyncssh.connect(host, **connect) as conn:
        result = await conn.run(f"{python} -c 'import os; print(os.cpu_count() or 1)'", check=True)
    return int(str(result.stdout).strip())


async def _run(
    scheduler: str,
    hosts: list[str],
    *,
    connect: dict[str, Any],
    scheduler_options: dict[str, Any],
    worker_options: dict[str, Any],
    share_cores: bool,
    nohost: bool,
    remote_python: str | None,
) -> int:
    from distributed import __version__
    from distributed.deploy.ssh import SSHCluster

    shutdown = ShutdownSignal()
    shutdown.install()
    cluster = SSHCluster(
        [scheduler, *hosts],
        connect_options=connect,
        worker_options=worker_options,
        scheduler_options=scheduler_options,
        remote_python=remote_python,
        asynchronous=True,
    )

    async def start() -> None:
        for i, host in enumerate(hosts):
            # Per host: its own address to listen on, and its cores shared among its workers.
            options = cluster.worker_spec[i]["options"]
            kwargs = dict(options["kwargs"])
            if not nohost:
                kwargs["host"] = host
            if share_cores:
                cores = await _remote_cpu_count(host, connect, remote_python or sys.executable)
                kwargs["nthreads"] = max(1, cores // int(kwargs["n_workers"]))
            options["kwargs"] = kwargs
        await cluster

    try:
        await run_unless_signalled(start(), shutdown)
    except Exception as e:
        logger.error("Could not start the cluster: %s", e)
        await cluster.close()
        return 1
    if shutdown.received is not None:
        await cluster.close()
        return 0
    click.echo("\n---------------------------------------------------------------")
    click.echo(f"                 Dask.distributed v{__version__}\n")
    click.echo(f"Worker nodes: {len(hosts)}")
    for i, host in enumerate(hosts):
        click.echo(f"  {i}: {host}")
    click.echo(f"\nscheduler node: {scheduler}:{scheduler_options['port']}")
    click.echo(f"scheduler address: {cluster.scheduler_address}")
    click.echo("---------------------------------------------------------------\n")

    await run_unless_signalled(cluster.scheduler.remote_exited(), shutdown)
    if shutdown.received is None:
        logger.warning("The scheduler on %s exited", scheduler)
    click.echo("[ dask ssh ]: Shutting down remote processes (this may take a moment).")
    try:
        await cluster.close()
    except Exception as e:
        logger.error("Error while closing the cluster: %s", e)
        return 1
    finally:
        shutdown.uninstall()
    click.echo("[ dask ssh ]: Remote processes have been terminated. Exiting.")
    return 0


if __name__ == "__main__":
    main()
