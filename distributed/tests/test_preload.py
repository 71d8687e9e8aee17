"""Preloads of schedulers, workers and nannies: user modules set up as a server starts, torn down as it closes.

Each preload here records what it saw in a file under ``tmp_path`` (one line
per event: what happened, the server's type, the process id) and on the
server itself, so that a test sees the setup and teardown of a preload run
in a worker process too.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest

from distributed import Client, Nanny, Scheduler, Worker
from distributed.preloading import Preload, PreloadError
from distributed.utils_test import async_poll_for, gen_test

RECORDING = """
import os

LOG = {log!r}


def _record(event, server, extra=""):
    with open(LOG, "a") as f:
        f.write(f"{{event}} {{type(server).__name__}} {{os.getpid()}} {{extra}}\\n".rstrip() + "\\n")


def dask_setup(server):
    # Before a worker joins its scheduler: no stream to it yet.
    server.preloaded = ("setup", getattr(server, "batched_stream", None) is None)
    _record("setup", server)


def dask_teardown(server):
    server.preloaded = ("teardown",)
    _record("teardown", server)
"""

CLICK_RECORDING = """
import os

import click

LOG = {log!r}


@click.command()
@click.option("--value", default="default")
@click.argument("extra", nargs=-1)
async def dask_setup(server, value, extra):
    server.preloaded = ("setup", value, extra)
    with open(LOG, "a") as f:
        f.write(f"setup {{type(server).__name__}} {{os.getpid()}} {{value}}\\n")


def dask_teardown(server):
    with open(LOG, "a") as f:
        f.write(f"teardown {{type(server).__name__}} {{os.getpid()}}\\n")
"""


def events(log: Path) -> list[tuple[str, ...]]:
    """The recorded events, each as (what, server type, pid, extra...)."""
    if not log.exists():
        return []
    return [tuple(line.split()) for line in log.read_text().splitlines() if line.strip()]


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A recording preload file (``preload_recording.py``) and the log it writes."""
    log = tmp_path / "events.log"
    path = tmp_path / "preload_recording.py"
    path.write_text(RECORDING.format(log=str(log)))
    yield path, log
    sys.modules.pop("preload_recording", None)


@contextlib.contextmanager
def captured(name: str = "distributed.preloading") -> Iterator[list[str]]:
    """The messages (with their tracebacks) logged to ``name`` at INFO and above while the block runs."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            records.append(text)

    logger = logging.getLogger(name)
    handler = Keep(logging.INFO)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


# -- scheduler ----------------------------------------------------------------------------
@pytest.mark.timeout(30)
@gen_test()
async def test_scheduler_preload_file(recording: tuple[Path, Path]) -> None:
    path, log = recording
    s = Scheduler(host="127.0.0.1", dashboard=False, preload=str(path))
    assert events(log) == []  # imported, not set up yet
    async with s:
        assert getattr(s, "preloaded", None) == ("setup", True)
        assert events(log) == [("setup", "Scheduler", str(os.getpid()))]
        assert len(s.preloads) == 1 and isinstance(s.preloads[0], Preload)
        # Importable by its name, as tasks and run_on_scheduler would import it.
        import preload_recording  # type: ignore[import-not-found]

        assert str(log) == preload_recording.LOG
    assert getattr(s, "preloaded", None) == ("teardown",)
    assert [e[0] for e in events(log)] == ["setup", "teardown"]


@pytest.mark.timeout(30)
@gen_test()
async def test_scheduler_preload_read_at_construction() -> None:
    """A preload runs before the scheduler reads its config: it can change it."""
    text = 'import dask\ndask.config.set({"distributed.scheduler.allowed-failures": 7})\n'
    with dask.config.set({"distributed.scheduler.allowed-failures": 3}):
        s = Scheduler(host="127.0.0.1", dashboard=False, preload=text)
        assert s.allowed_failures == 7
        async with s:
            pass


@pytest.mark.timeout(30)
@gen_test()
async def test_scheduler_preload_from_config(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    text = CLICK_RECORDING.format(log=str(log))
    config = {"distributed.scheduler.preload": [text], "distributed.scheduler.preload-argv": ["--value", "cfg"]}
    with dask.config.set(config):
        async with Scheduler(host="127.0.0.1", dashboard=False) as s:
            assert s.preloaded == ("setup", "cfg", ())
    # An argument wins over the config.
    with dask.config.set(config):
        async with Scheduler(host="127.0.0.1", dashboard=False, preload=[text], preload_argv=["x", "y"]) as s:
            assert s.preloaded == ("setup", "default", ("x", "y"))
    assert [e[0] for e in events(log)] == ["setup", "teardown", "setup", "teardown"]


# -- worker -------------------------------------------------------------------------------
@pytest.mark.timeout(30)
@gen_test()
async def test_worker_preload_module_name(recording: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path, log = recording
    monkeypatch.syspath_prepend(str(path.parent))
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        async with Worker(s.address, nthreads=1, preload=["preload_recording"]) as w:
            # Set up before the worker joined the scheduler.
            assert w.preloaded == ("setup", True)
            assert events(log) == [("setup", "Worker", str(os.getpid()))]
        assert w.preloaded == ("teardown",)
    assert [e[0] for e in events(log)] == ["setup", "teardown"]


@pytest.mark.timeout(30)
@gen_test()
async def test_worker_async_source_preload_and_click_argv(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    click_text = CLICK_RECORDING.format(log=str(log))
    plain = "import asyncio\n\nasync def dask_setup(worker):\n    await asyncio.sleep(0)\n    worker.plain = 'set'\n"
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        # One list for all the preloads: the one whose setup is a click command takes it.
        async with Worker(s.address, nthreads=1, preload=[plain, click_text], preload_argv=["--value", "7"]) as w:
            assert w.plain == "set"
            assert w.preloaded == ("setup", "7", ())
        # One list per preload.
        async with Worker(s.address, nthreads=1, preload=[click_text, plain], preload_argv=[["a"], []]) as w:
            assert w.preloaded == ("setup", "default", ("a",))


@pytest.mark.timeout(30)
def test_bad_preload_arguments_are_refused(tmp_path: Path) -> None:
    click_text = CLICK_RECORDING.format(log=str(tmp_path / "events.log"))
    with pytest.raises(PreloadError, match="--no-such-option"):
        Worker("tcp://127.0.0.1:1", nthreads=1, preload=[click_text], preload_argv=["--no-such-option"])
    with pytest.raises(ValueError, match="no preload takes arguments"):
        Worker("tcp://127.0.0.1:1", nthreads=1, preload=["def dask_setup(w): pass"], preload_argv=["--value", "1"])
    with pytest.raises(ValueError, match="2 lists for 1 preloads"):
        Worker("tcp://127.0.0.1:1", nthreads=1, preload=[click_text], preload_argv=[["a"], ["b"]])


# -- failures -----------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_preload_that_cannot_be_imported_stops_the_server(tmp_path: Path) -> None:
    with pytest.raises(PreloadError, match="'no_such_preload_module_x'.*ModuleNotFoundError"):
        Scheduler(preload="no_such_preload_module_x")
    broken = tmp_path / "broken_preload.py"
    broken.write_text("raise RuntimeError('cannot start here')\n")
    with pytest.raises(PreloadError, match=r"broken_preload\.py.*RuntimeError: cannot start here"):
        Worker("tcp://127.0.0.1:1", nthreads=1, preload=[str(broken)])
    assert "broken_preload" not in sys.modules
    with pytest.raises(PreloadError, match="source text starting 'x = = 1'.*SyntaxError"):
        Nanny("tcp://127.0.0.1:1", preload_nanny=["x = = 1"])
    # An ImportError, as a missing module is in dask.distributed.
    with pytest.raises(ImportError):
        Worker("tcp://127.0.0.1:1", nthreads=1, preload="no_such_preload_module_x")


@pytest.mark.timeout(30)
@gen_test()
async def test_setup_or_teardown_that_raises_is_logged_and_the_server_runs() -> None:
    """As in dask.distributed: the error is logged, naming the preload, and the server goes on."""
    text = (
        "def dask_setup(server):\n    raise ValueError('setup-failed-123')\n\n"
        "def dask_teardown(server):\n    raise ValueError('teardown-failed-456')\n"
    )
    with captured() as logs:
        async with Scheduler(host="127.0.0.1", dashboard=False) as s:
            async with Worker(s.address, nthreads=1, preload=[text]) as w:
                assert w.status.name == "running"
                assert s.workers
    joined = "\n".join(logs)
    assert "Failed to start preload (source text starting 'def dask_setup(server):')" in joined
    assert "setup-failed-123" in joined
    assert "Failed to tear down preload" in joined and "teardown-failed-456" in joined


@pytest.mark.timeout(30)
@gen_test()
async def test_only_preloads_set_up_are_torn_down(recording: tuple[Path, Path]) -> None:
    path, log = recording
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        # Its start fails (it cannot listen) before the preload is set up.
        w = Worker(s.address, nthreads=1, preload=[str(path)], host="192.0.2.1")
        with pytest.raises(OSError):
            await w.start()
    assert events(log) == []


# -- nanny --------------------------------------------------------------------------------
@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_nanny_preloads_and_its_workers(recording: tuple[Path, Path], tmp_path: Path) -> None:
    """``preload_nanny`` runs in the nanny; ``preload`` is passed on to its worker process."""
    path, log = recording
    nanny_log = tmp_path / "nanny.log"
    nanny_preload = tmp_path / "nanny_preload.py"
    nanny_preload.write_text(RECORDING.format(log=str(nanny_log)))
    try:
        async with Scheduler(host="127.0.0.1", dashboard=False) as s:
            async with (
                Nanny(s.address, nthreads=1, preload=[str(path)], preload_nanny=[str(nanny_preload)]) as n,
                Client(s.address, asynchronous=True) as c,
            ):
                assert n.preloaded == ("setup", True)
                assert events(nanny_log) == [("setup", "Nanny", str(os.getpid()))]
                assert n.pid is not None and n.pid != os.getpid()
                assert events(log) == [("setup", "Worker", str(n.pid))]
                seen = await c.run(lambda dask_worker: dask_worker.preloaded)
                assert seen == {n.worker_address: ("setup", True)}
                worker_pid = n.pid
            # The worker process closed cleanly: its teardown ran there.
            assert ("teardown", "Worker", str(worker_pid)) in events(log)
            assert n.preloaded == ("teardown",)
            assert [e[0] for e in events(nanny_log)] == ["setup", "teardown"]
    finally:
        sys.modules.pop("nanny_preload", None)


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_nanny_preloads_from_config(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    text = CLICK_RECORDING.format(log=str(log))
    config = {
        "distributed.worker.preload": [text],
        "distributed.worker.preload-argv": ["--value", "w"],
        "distributed.nanny.preload": [text],
        "distributed.nanny.preload-argv": ["--value", "n"],
    }
    with dask.config.set(config):
        async with Scheduler(host="127.0.0.1", dashboard=False) as s:
            async with Nanny(s.address, nthreads=1) as n, Client(s.address, asynchronous=True) as c:
                assert n.preloaded == ("setup", "n", ())
                seen = await c.run(lambda dask_worker: dask_worker.preloaded)
                assert seen == {n.worker_address: ("setup", "w", ())}


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_nanny_worker_preload_that_cannot_be_imported(tmp_path: Path) -> None:
    broken = tmp_path / "broken_worker_preload.py"
    broken.write_text("import no_such_module_for_the_worker\n")
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        n = Nanny(s.address, nthreads=1, preload=[str(broken)])
        with pytest.raises(RuntimeError, match=r"broken_worker_preload\.py.*no_such_module_for_the_worker"):
            await n.start()
        assert not s.workers


# -- web addresses ------------------------------------------------------------------------
class _PreloadServer(http.server.BaseHTTPRequestHandler):
    """Serves one preload's source at /preload.py, after answering 503 to the first ``failures`` requests."""

    source = b""
    failures = 0
    requests: list[str] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if type(self).failures > 0:
            type(self).failures -= 1
            self.send_error(503)
            return
        if self.path != "/preload.py":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.source)))
        self.end_headers()
        self.wfile.write(self.source)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving(source: str, failures: int = 0) -> Iterator[tuple[str, type[_PreloadServer]]]:
    handler = type("Handler", (_PreloadServer,), {"source": source.encode(), "failures": failures, "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.timeout(30)
@gen_test()
async def test_preload_from_a_web_address() -> None:
    with serving("def dask_setup(server):\n    server.from_the_web = 1\n", failures=2) as (url, handler):
        async with Scheduler(host="127.0.0.1", dashboard=False, preload=f"{url}/preload.py") as s:
            assert s.from_the_web == 1
        # Two 503s were retried.
        assert handler.requests == ["/preload.py"] * 3
        with pytest.raises(PreloadError, match="missing.py.*404"):
            Scheduler(preload=f"{url}/missing.py")


@pytest.mark.timeout(30)
@gen_test()
async def test_scheduler_and_workers_share_a_source_preload() -> None:
    text = "def dask_setup(server):\n    server.foo = type(server).__name__\n"
    async with Scheduler(host="127.0.0.1", dashboard=False, preload=text) as s:
        async with Worker(s.address, nthreads=1, preload=text) as a, Worker(s.address, nthreads=1, preload=text) as b:
            await async_poll_for(lambda: len(s.workers) == 2, timeout=10)
            assert (s.foo, a.foo, b.foo) == ("Scheduler", "Worker", "Worker")


# -- client -------------------------------------------------------------------------------
@pytest.mark.timeout(30)
@gen_test()
async def test_client_preloads_from_config(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    text = CLICK_RECORDING.format(log=str(log))
    config = {"distributed.client.preload": [text], "distributed.client.preload-argv": ["--value", "client"]}
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        with dask.config.set(config):
            c = Client(s.address, asynchronous=True)
        assert events(log) == []  # imported, set up once connected
        async with c:
            assert getattr(c, "preloaded", None) == ("setup", "client", ())
            assert [e[:2] for e in events(log)] == [("setup", "Client")]
        assert [e[:2] for e in events(log)] == [("setup", "Client"), ("teardown", "Client")]
