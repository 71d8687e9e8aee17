"""``dask spec [ARGS] --spec JSON``: run the servers a JSON/YAML specification names, until interrupted.

The remote half of :class:`~distributed.deploy.ssh.SSHCluster`: it starts a
scheduler or workers on another machine by running this command there.

A specification is ``{name: {"cls": "dotted.Class", "opts": {...}}, ...}``, or
one such entry on its own. Each server is built as ``cls(*ARGS, **opts)``
(``ARGS`` is the scheduler address for workers, nothing for a scheduler),
then started. Once every server runs, one line per server goes to stderr:
``Scheduler at: ADDRESS`` for a scheduler, ``Start worker at: ADDRESS`` for
anything else (for a nanny, its worker's address). These lines are the
contract with the process that started this one (it reads them to learn the
addresses); they are written directly, so a logging configuration cannot hide
them.

SIGINT or SIGTERM closes the servers and exits 0; so does every server closing
on its own (a scheduler told to ``terminate``, workers whose scheduler went
away). Failing to build or start a server exits 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import click
import yaml

from distributed.cli.utils import ShutdownSignal, run_unless_signalled, setup_logging
from distributed.deploy.ssh import SCHEDULER_LINE, WORKER_LINE
from distributed.utils import import_term

__all__ = ["main", "parse_spec"]

logger = logging.getLogger("distributed.dask_spec")


def _version() -> str:
    from distributed import __version__

    return __version__


def parse_spec(spec: str, spec_file: str | None) -> dict[Any, dict[str, Any]]:
    """The servers to run, ``{name: {"cls": ..., "opts": {...}}}``, from ``--spec`` or ``--spec-file``.

    Raises
    ------
    click.UsageError
        When neither or both are given, or the specification is malformed.
    """
    if bool(spec) == bool(spec_file):
        raise click.UsageError("Give exactly one of --spec and --spec-file")
    try:
        if spec_file:
            with open(spec_file) as f:
                loaded = yaml.safe_load(f)
        else:
            loaded = json.loads(spec)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise click.UsageError(f"Cannot read the specification: {e}") from None
    if not isinstance(loaded, dict):
        raise click.UsageError(f"A specification is a mapping, got {type(loaded).__name__}")
    if "cls" in loaded:  # one server, not a mapping of them
        opts = loaded.get("opts") or {}
        loaded = {opts.get("name", 0) if isinstance(opts, dict) else 0: loaded}
    for name, entry in loaded.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("cls"), str):
            raise click.UsageError(f"Server {name!r}: an entry is {{'cls': 'dotted.Class', 'opts': {{...}}}}")
        if not isinstance(entry.get("opts") or {}, dict):
            raise click.UsageError(f"Server {name!r}: 'opts' must be a mapping")
    return loaded


@click.command(
    name="spec",
    context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]},
)
@click.argument("args", nargs=-1)
@click.option("--spec", type=str, default="", help="The servers to run, as JSON")
@click.option("--spec-file", type=str, default=None, help="A file holding the servers to run, as YAML or JSON")
@click.version_option(version=_version(), prog_name="dask spec")
def main(args: tuple[str, ...], spec: str, spec_file: str | None) -> None:
    """Run the Dask servers a JSON/YAML specification names (SIGINT/SIGTERM close them)."""
    servers = parse_spec(spec, spec_file)
    setup_logging()
    sys.exit(asyncio.run(_run(servers, args)))


def _announce(server: Any) -> None:
    from distributed.nanny import Nanny
    from distributed.scheduler import Scheduler

    if isinstance(server, Scheduler):
        line = f"{SCHEDULER_LINE} {server.address}"
    elif isinstance(server, Nanny):
        line = f"{WORKER_LINE} {server.worker_address}"
    else:
        line = f"{WORKER_LINE} {server.address}"
    # The starting side reads this line from our stderr as soon as it is written.
    print(line, file=sys.stderr, flush=True)


async def _close_all(servers: dict[Any, Any]) -> int:
    results = await asyncio.gather(*(s.close() for s in servers.values()), return_exceptions=True)
    code = 0
    for name, r in zip(servers, results):
        if isinstance(r, BaseException):
            logger.error("Error closing server %r: %s", name, r)
            code = 1
    return code


async def _run(spec: dict[Any, dict[str, Any]], args: tuple[str, ...]) -> int:
    shutdown = ShutdownSignal()
    shutdown.install()
    servers: dict[Any, Any] = {}
    for name, entry in spec.items():
        try:
            cls = import_term(entry["cls"])
            servers[name] = cls(*args, **(entry.get("opts") or {}))
        except Exception as e:
            logger.error("Could not create server %r: %s", name, e)
            await _close_all(servers)
            return 1

    async def start_all() -> None:
        await asyncio.gather(*(s.start() for s in servers.values()))

    try:
        await run_unless_signalled(start_all(), shutdown)
    except Exception as e:
        logger.error("Could not start the server(s): %s", e, exc_info=True)
        await _close_all(servers)
        return 1
    if shutdown.received is not None:  # interrupted while starting
        return await _close_all(servers)
    for server in servers.values():
        _announce(server)

    async def all_finished() -> None:
        await asyncio.gather(*(s.finished() for s in servers.values()))

    await run_unless_signalled(all_finished(), shutdown)
    if shutdown.received is not None:
        logger.info("Closing %d server(s)", len(servers))
    code = await _close_all(servers)
    shutdown.uninstall()
    return code


if __name__ == "__main__":
    main()
