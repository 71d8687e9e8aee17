"""A new user's first session, as a test.

``dask-scheduler`` and two ``dask-worker`` processes are started from their
command lines, a ``Client`` connects over TCP, and real dask collections run
on them with their results checked against local computation.
"""

from __future__ import annotations

import json
import operator
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.base import compute as _untyped_compute
from dask.delayed import delayed

from distributed import Client
from distributed.utils_test import poll_for


def _command(script: str, module: str) -> list[str]:
    path = shutil.which(script)
    if path is not None:
        return [path]
    return [sys.executable, "-m", module]


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -9
    return proc.returncode


@pytest.fixture
def cli_cluster(tmp_path: Path) -> Iterator[str]:
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        scheduler = subprocess.Popen(
            [
                *_command("dask-scheduler", "distributed.cli.dask_scheduler"),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(scheduler)

        def started() -> bool:
            assert scheduler.poll() is None, "dask-scheduler exited early"
            try:
                return bool(json.loads(sched_file.read_text())["address"])
            except (OSError, ValueError, KeyError):
                return False

        poll_for(started, timeout=30, period=0.05, what="dask-scheduler to write its file")
        address = json.loads(sched_file.read_text())["address"]
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [*_command("dask-worker", "distributed.cli.dask_worker"), address, "--nthreads", "2", "--no-nanny"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield address
        codes = [_stop(p) for p in reversed(procs)]
        assert codes == [0, 0, 0], f"processes did not exit cleanly: {codes}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _add_values(a: int, b: int) -> int:
    return a + b


_add = delayed(_add_values)


def compute(*args: object) -> tuple[object, ...]:
    """``dask.compute`` (untyped in dask) behind a typed signature."""
    result: tuple[object, ...] = _untyped_compute(*args)  # type: ignore[no-untyped-call]  # dask.base is untyped
    return result


class WalkError(Exception):
    pass


def _fail(x: int) -> int:
    raise WalkError(f"failed on {x}")


@pytest.mark.timeout(300)
def test_new_user_walk(cli_cluster: str) -> None:
    with Client(cli_cluster) as client:
        client.wait_for_workers(2, timeout=30)
        assert len(client.scheduler_info()["workers"]) == 2

        # An array: matrix product and a tree reduction.
        x = da.random.random((4000, 4000), chunks=500)
        total = x.dot(x.T).sum().compute()
        xn = x.compute()
        assert np.isclose(total, xn.dot(xn.T).sum())

        # A dataframe groupby-mean.
        pdf = pd.DataFrame({"k": np.arange(10_000) % 13, "v": np.arange(10_000, dtype="f8")})
        ddf = dd.from_pandas(pdf, npartitions=20)  # type: ignore[no-untyped-call]  # dask.dataframe is untyped
        got = ddf.groupby("k").v.mean().compute().sort_index()
        pd.testing.assert_series_equal(got, pdf.groupby("k").v.mean(), check_names=False)

        # A bag fold.
        bag = db.from_sequence(range(10_000), npartitions=16)  # type: ignore[no-untyped-call]  # dask.bag is untyped
        assert bag.fold(operator.add).compute() == sum(range(10_000))

        # A delayed tree: binary reduction of 256 leaves.
        leaves = [delayed(i) for i in range(256)]
        while len(leaves) > 1:
            leaves = [_add(leaves[i], leaves[i + 1]) for i in range(0, len(leaves), 2)]
        assert leaves[0].compute() == sum(range(256))

        # client.map of 10,000 tasks.
        futures = client.map(operator.neg, range(10_000))
        assert sum(client.gather(futures)) == -sum(range(10_000))
        del futures

        # An exception keeps its type and message, and the cluster keeps working.
        with pytest.raises(WalkError, match="failed on 3"):
            client.submit(_fail, 3).result()
        with pytest.raises(WalkError, match="failed on 4"):
            compute(delayed(_fail)(4))
        assert client.submit(operator.add, 1, 2).result() == 3
