"""The scheduler's limit of open files: raised as it starts, and named in its log when connections near it.

A real scheduler process from the command line, started under limits set
for it (``setrlimit`` before it runs), and real TCP connections to it.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from distributed.system import open_file_limit, raise_open_file_limit
from distributed.utils_test import poll_for

pytestmark = pytest.mark.timeout(60)

SCHEDULER = [sys.executable, "-m", "distributed.cli.dask_scheduler"]


def start_scheduler(tmp_path: Path, soft: int, hard: int) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A scheduler whose process starts with the given limits of open files; it, its address and its log."""
    log = tmp_path / "scheduler.log"
    scheduler_file = tmp_path / "scheduler.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *SCHEDULER,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=limit,
        )
    try:
        poll_for(lambda: scheduler_file.exists() and proc.poll() is None, timeout=30, what="the scheduler file")
        address = json.loads(scheduler_file.read_text())["address"]
    except BaseException:
        stop(proc)
        raise
    return proc, address, log


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def hard_limit() -> Iterator[int]:
    """This process's hard limit, skipping where it is too low for the test."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit of open files here is {hard}")
    yield 4096


def test_the_scheduler_raises_its_soft_limit_to_the_hard_one(tmp_path: Path, hard_limit: int) -> None:
    proc, _, log = start_scheduler(tmp_path, 256, hard_limit)
    try:
        assert psutil.Process(proc.pid).rlimit(psutil.RLIMIT_NOFILE) == (hard_limit, hard_limit)
        assert f"Raised the limit of open files from 256 to {hard_limit}" in log.read_text()
    finally:
        stop(proc)


def test_a_scheduler_near_its_limit_says_so(tmp_path: Path) -> None:
    proc, address, log = start_scheduler(tmp_path, 128, 128)
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    conns: list[socket.socket] = []
    try:
        # Connections that say nothing: each holds one of the scheduler's descriptors until it times them out.
        deadline = time.monotonic() + 30
        while "files open of the 128" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            if len(conns) < 140:
                conns.append(socket.create_connection((host, int(port)), timeout=5))
            else:
                time.sleep(0.05)
        text = log.read_text()
        assert "ulimit -n" in text and "Raise the hard limit" in text
    finally:
        for c in conns:
            c.close()
        stop(proc)


def test_open_file_limits_in_this_process() -> None:
    before = open_file_limit()
    limits = raise_open_file_limit()
    assert limits is not None and before is not None
    after = open_file_limit()
    assert after is not None and limits == (before, after) and after >= before
