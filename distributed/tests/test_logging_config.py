"""The ``logging:`` part of dask config, applied by ``import distributed`` in a fresh interpreter.

Each test writes a config file, points ``DASK_CONFIG`` at it, imports
``distributed`` in a subprocess and reports what the logging module holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

import distributed

ROOT = Path(distributed.__file__).parent.parent

REPORT = """
import json, logging, sys
import distributed
names = sys.argv[1:]
out = {}
for name in names:
    lg = logging.getLogger(name)
    out[name] = {
        "level": lg.level,
        "effective": lg.getEffectiveLevel(),
        "propagate": lg.propagate,
        "handlers": [type(h).__name__ for h in lg.handlers],
        "disabled": lg.disabled,
    }
print(json.dumps(out))
"""


def run_python(
    tmp_path: Path, config: dict[str, Any] | None, code: str, *args: str
) -> subprocess.CompletedProcess[str]:
    conf_dir = tmp_path / "dask-config"
    conf_dir.mkdir(exist_ok=True)
    conf_file = conf_dir / "test.yaml"
    if config is not None:
        conf_file.write_text(yaml.safe_dump(config))
    else:
        conf_file.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["DASK_CONFIG"] = str(conf_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def loggers(tmp_path: Path, config: dict[str, Any] | None, *names: str) -> dict[str, dict[str, Any]]:
    proc = run_python(tmp_path, config, REPORT, *names)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_defaults_without_a_logging_section(tmp_path: Path) -> None:
    got = loggers(tmp_path, None, "distributed", "distributed.client", "tornado", "distributed.worker")
    assert got["distributed"]["level"] == 20
    assert got["distributed"]["handlers"] == ["StreamHandler"]
    assert got["distributed"]["propagate"] is False
    assert got["distributed.client"]["level"] == 30
    assert got["tornado"]["level"] == 50
    assert got["distributed.worker"]["effective"] == 20
    assert got["distributed.worker"]["handlers"] == []  # distributed's handler writes its records


def test_top_level_mapping_of_levels(tmp_path: Path) -> None:
    config = {"logging": {"distributed.worker": "debug", "distributed": "warning", "myapp": "error"}}
    got = loggers(tmp_path, config, "distributed", "distributed.worker", "distributed.client", "myapp")
    assert got["distributed"]["level"] == 30
    assert got["distributed.worker"]["level"] == 10
    assert got["distributed.worker"]["handlers"] == []
    assert got["distributed.client"]["level"] == 30  # the defaults stay for loggers not named
    assert got["myapp"]["level"] == 40
    assert got["myapp"]["handlers"] == ["StreamHandler"]
    assert got["myapp"]["propagate"] is False


def test_mapping_under_distributed_wins_over_the_top_level(tmp_path: Path) -> None:
    config = {"logging": {"distributed": "error"}, "distributed": {"logging": {"distributed": "debug"}}}
    got = loggers(tmp_path, config, "distributed")
    assert got["distributed"]["level"] == 10


def test_dict_config_schema(tmp_path: Path) -> None:
    log_file = tmp_path / "out.log"
    config = {
        "logging": {
            "version": "1",  # as an environment variable would give it
            "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(name)s|%(levelname)s|%(message)s"}},
            "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file), "formatter": "plain"}},
            "loggers": {"distributed.scheduler": {"level": "DEBUG", "handlers": ["file"], "propagate": False}},
        }
    }
    code = REPORT + "\nlogging.getLogger('distributed.scheduler').debug('configured by dictConfig')\n"
    proc = run_python(tmp_path, config, code, "distributed.scheduler")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["distributed.scheduler"]["level"] == 10
    assert got["distributed.scheduler"]["handlers"] == ["FileHandler"]
    assert "distributed.scheduler|DEBUG|configured by dictConfig" in log_file.read_text()


def test_logging_file_config(tmp_path: Path) -> None:
    ini = tmp_path / "logging.ini"
    ini.write_text(
        textwrap.dedent(
            """
            [loggers]
            keys=root,worker

            [handlers]
            keys=console

            [formatters]
            keys=

            [logger_root]
            level=WARNING
            handlers=console

            [logger_worker]
            level=DEBUG
            handlers=console
            qualname=distributed.worker
            propagate=0

            [handler_console]
            class=StreamHandler
            args=(sys.stdout,)
            """
        )
    )
    got = loggers(tmp_path, {"distributed": {"logging-file-config": str(ini)}}, "distributed.worker", "distributed")
    assert got["distributed.worker"]["level"] == 10
    assert got["distributed.worker"]["handlers"] == ["StreamHandler"]
    assert not got["distributed.worker"]["propagate"]
    assert got["distributed"]["disabled"] is False  # existing loggers stay enabled


def test_file_config_and_mapping_together_are_refused(tmp_path: Path) -> None:
    config = {"distributed": {"logging-file-config": str(tmp_path / "x.ini"), "logging": {"distributed": "info"}}}
    proc = run_python(tmp_path, config, "import distributed")
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr
    assert "'logging-file-config' and 'logging' are mutually exclusive" in proc.stderr


def test_unknown_level_is_refused(tmp_path: Path) -> None:
    proc = run_python(tmp_path, {"logging": {"distributed": "loud"}}, "import distributed")
    assert proc.returncode != 0
    assert "Unknown logging level 'loud' for logger 'distributed'" in proc.stderr


def test_configured_debug_level_reaches_get_worker_logs(tmp_path: Path) -> None:
    code = """
    import asyncio, json, logging
    from distributed import Client, Scheduler, Worker

    def note():
        logging.getLogger("distributed.worker").debug("noted by a task")
        return 1

    async def main():
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
            async with Worker(s.address, nthreads=1) as w:
                async with Client(s.address, asynchronous=True) as c:
                    assert await c.submit(note) == 1
                    logs = await c.get_worker_logs()
                    print(json.dumps([r for records in logs.values() for r in records]))

    asyncio.run(main())
    """
    proc = run_python(tmp_path, {"logging": {"distributed.worker": "debug"}}, code)
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(level == "DEBUG" and "noted by a task" in text for level, text in records)
    assert any(level == "INFO" for level, _ in records)
    proc = run_python(tmp_path, None, code)
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not any("noted by a task" in text for _, text in records)
