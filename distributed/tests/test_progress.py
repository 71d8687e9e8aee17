"""Progress bars: the scheduler's counts per prefix, errors, other clients, a real terminal and the widgets."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import time
from collections import Counter
from operator import add
from typing import Any, Literal

import dask.array as da
import numpy as np
import pytest
from dask.base import optimize
from dask.delayed import delayed
from dask.utils import key_split

import distributed
from distributed import Client, Event, Future, Scheduler, Worker, futures_of, wait
from distributed.diagnostics.progress import BaseProgress, MultiProgress, Progress, ProgressExtension
from distributed.diagnostics.progressbar import (
    MultiProgressBar,
    MultiProgressWidget,
    ProgressBar,
    ProgressWidget,
    TextProgressBar,
    is_kernel,
    progress,
)
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, cluster, div, gen_cluster, inc

AsyncClient = Client[Literal[True]]


def gated(x: Any, name: str) -> Any:
    """``x``, once the distributed Event ``name`` is set."""
    Event(name).wait()
    return x


def status(bar: ProgressBar) -> str | None:
    """The bar's status, read afresh (not narrowed by an earlier assertion)."""
    return bar.status


def watchers(s: Scheduler) -> list[BaseProgress]:
    return [p for p in s.plugins.values() if isinstance(p, BaseProgress)]


def graph(n: int = 6) -> Any:
    """``n`` inc, ``n`` add and one total: keys named so their prefixes are known."""
    incs = [delayed(inc)(i, dask_key_name=f"inc-{i}") for i in range(n)]
    adds = [delayed(add)(x, 1, dask_key_name=f"add-{i}") for i, x in enumerate(incs)]
    return delayed(sum)(adds, dask_key_name="total-0")


def test_progress_is_exported() -> None:
    assert distributed.progress is progress
    assert DEFAULT_EXTENSIONS["progress"] is ProgressExtension


@gen_cluster(client=True)
async def test_counts_per_prefix_of_a_delayed_graph(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    total = c.persist(graph(6))
    buf = io.StringIO()
    bar = MultiProgressBar([total], start=False, interval="10ms", stream=buf)
    await bar.listen()
    # Not a terminal: no cursor movement, only the final lines (totals, then the largest groups first).
    lines = buf.getvalue().splitlines()
    assert "\x1b" not in buf.getvalue() and len(lines) == 4
    assert "100% Completed | 13/13 |" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["add", "inc", "total"]
    assert lines[1].endswith("100% | 6/6") and lines[3].endswith("100% | 1/1")
    assert bar.status == "finished"
    assert bar.all == {"inc": 6, "add": 6, "total": 1}
    assert bar.remaining == {"inc": 0, "add": 0, "total": 0}
    assert await c.compute(total) == sum(i + 2 for i in range(6))
    assert not watchers(s) and not s.extensions["progress"].watches


@gen_cluster(client=True)
async def test_counts_per_prefix_of_a_dask_array(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    # The keys the scheduler gets are those of the optimised graph (blockwise layers fused).
    (y,) = optimize((da.ones((40, 40), chunks=10) + 1).sum(axis=0))  # type: ignore[no-untyped-call]  # dask leaves it untyped
    expected = Counter(key_split(k) for k in dict(y.__dask_graph__()))
    y = c.persist(y)
    bar = MultiProgressBar(futures_of(y), start=False, interval="10ms", stream=io.StringIO())
    await bar.listen()
    assert bar.status == "finished"
    assert bar.all == dict(expected)
    assert sum(bar.all.values()) > len(futures_of(y))  # the dependencies count, not only the outputs
    assert set(bar.remaining.values()) == {0}


@gen_cluster(client=True)
async def test_counts_while_running(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    incs = c.map(inc, range(5), key=[f"inc-{i}" for i in range(5)])
    last = c.submit(gated, incs, "go", key="gated-0")
    bar = MultiProgressBar([last], start=False, interval="10ms", stream=io.StringIO())
    bar.start()
    assert len(watchers(s)) in (0, 1)
    await async_poll_for(lambda: bar.remaining == {"inc": 0, "gated": 1}, timeout=10)
    assert bar.all == {"inc": 5, "gated": 1}
    assert bar.status == "running" and len(watchers(s)) == 1
    await Event("go", client=c).set()
    await bar
    assert status(bar) == "finished" and bar.remaining == {"inc": 0, "gated": 0}
    assert not watchers(s)


@gen_cluster(client=True)
async def test_complete_false_leaves_out_what_was_done(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.map(inc, range(4), key=[f"inc-{i}" for i in range(4)])
    await wait(x)
    y = c.map(add, x, [1] * 4, key=[f"add-{i}" for i in range(4)])
    everything = MultiProgressBar(y, start=False, complete=True, stream=io.StringIO(), interval="10ms")
    still_to_do = MultiProgressBar(y, start=False, complete=False, stream=io.StringIO(), interval="10ms")
    await asyncio.gather(everything.listen(), still_to_do.listen())
    assert everything.all == {"inc": 4, "add": 4}
    assert "inc" not in still_to_do.all and still_to_do.all.get("add", 0) <= 4


@gen_cluster(client=True)
async def test_single_bar_counts_all_together(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    total = c.persist(graph(3))
    buf = io.StringIO()
    bar = TextProgressBar([total], start=False, interval="10ms", stream=buf)
    await bar.listen()
    assert bar.all == {"all": 7} and bar.remaining == {"all": 0}
    out = buf.getvalue()
    assert out.startswith("\r[") and "100% Completed | 7/7 | " in out and out.endswith("\n")


@gen_cluster(client=True)
async def test_erred_task_stops_the_bar(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(div, 1, 0, key="div-0")
    y = c.submit(inc, x, key="inc-0")
    buf = io.StringIO()
    bar = MultiProgressBar([y], start=False, interval="10ms", stream=buf)
    await bar.listen()
    assert bar.status == "error"
    assert bar.erred_key in ("div-0", "inc-0")
    assert "ZeroDivisionError" in (bar.exception or "")
    assert "Error" in buf.getvalue() and "ZeroDivisionError" in buf.getvalue()
    assert not watchers(s) and not s.extensions["progress"].watches
    # Started after the error: the bar ends at once, in error.
    late = TextProgressBar([y], start=False, interval="10ms", stream=io.StringIO())
    await late.listen()
    assert late.status == "error" and "ZeroDivisionError" in (late.exception or "")


def boom(block: Any) -> Any:
    raise RuntimeError("boom")


@gen_cluster(client=True)
async def test_erred_block_of_a_dask_array(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.persist(da.ones(20, chunks=5).map_blocks(boom, dtype=float, meta=np.array(())))
    buf = io.StringIO()
    bar = MultiProgressBar([x], start=False, interval="10ms", stream=buf)
    await bar.listen()
    assert bar.status == "error" and "RuntimeError: boom" in (bar.exception or "")
    assert isinstance(bar.erred_key, tuple) and bar.erred_key[0].startswith("boom-")
    assert f"Task {bar.erred_key!r} erred: RuntimeError: boom" in buf.getvalue()


def test_not_in_a_kernel() -> None:
    assert is_kernel() is False


@gen_cluster(client=True)
async def test_cancelled_key_stops_the_bar(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    y = c.submit(gated, 1, "never", key="gated-1")
    bar = TextProgressBar([y], start=False, interval="10ms", stream=io.StringIO())
    bar.start()
    await async_poll_for(lambda: bar.status == "running", timeout=10)
    await c.cancel(y)
    await bar
    assert bar.status == "error" and "cancelled" in (bar.exception or "")
    assert not watchers(s)
    await Event("never", client=c).set()


@gen_cluster(client=True)
async def test_other_client_watches_work_it_did_not_submit(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    incs = [delayed(inc)(i, dask_key_name=f"inc-{i}") for i in range(4)]
    adds = [delayed(add)(x, 1, dask_key_name=f"add-{i}") for i, x in enumerate(incs)]
    y = c.persist(delayed(gated)(adds, "later", dask_key_name="gated-2"))
    await c.publish_dataset(y=y)
    async with Client(s.address, asynchronous=True, set_as_default=False) as other:
        got = await other.get_dataset("y")
        # complete=True: the tasks done before the bars started count as well.
        from_dataset = MultiProgressBar([got], start=False, complete=True, interval="10ms", stream=io.StringIO())
        by_key = MultiProgressBar(
            [Future("gated-2", other)], start=False, complete=True, interval="10ms", stream=io.StringIO()
        )
        assert from_dataset.client is other and by_key.client is other
        from_dataset.start()
        by_key.start()
        # Each bar's first state comes with its own reply: wait for both.
        await async_poll_for(
            lambda: from_dataset.remaining == by_key.remaining == {"inc": 0, "add": 0, "gated": 1}, timeout=10
        )
        assert from_dataset.all == {"inc": 4, "add": 4, "gated": 1}
        assert by_key.all == from_dataset.all
        await Event("later", client=c).set()
        await from_dataset
        await by_key
        assert from_dataset.status == by_key.status == "finished"
        assert by_key.remaining == {"inc": 0, "add": 0, "gated": 0}
    assert await c.compute(y) == [i + 2 for i in range(4)]


@gen_cluster(client=True)
async def test_watch_ends_with_its_client_or_when_stopped(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    z = c.submit(gated, 1, "end", key="gated-3")
    async with Client(s.address, asynchronous=True, set_as_default=False) as other:
        bar = TextProgressBar([Future(z.key, other)], start=False, interval="10ms", stream=io.StringIO())
        task = asyncio.ensure_future(bar.listen())
        await async_poll_for(lambda: len(watchers(s)) == 1, timeout=10)
        # A bar that stops early ends its watch.
        task.cancel()
        await async_poll_for(lambda: not watchers(s) and not s.extensions["progress"].watches, timeout=10)
        bar2 = TextProgressBar([Future(z.key, other)], start=False, interval="10ms", stream=io.StringIO())
        bar2.start()
        await async_poll_for(lambda: len(watchers(s)) == 1, timeout=10)
    # The client left: its watch no longer costs the scheduler anything.
    await async_poll_for(lambda: not watchers(s), timeout=10)
    await Event("end", client=c).set()
    await wait(z)


@gen_cluster(client=True)
async def test_keys_unknown_yet_are_waited_for(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    bar = TextProgressBar(["later-0"], scheduler=c, start=False, interval="10ms", stream=io.StringIO())
    bar.start()
    await async_poll_for(lambda: bar.status == "pending", timeout=10)
    x = c.submit(inc, 1, key="later-0")
    await bar
    assert bar.status == "finished" and bar.all == {"all": 1}
    assert await x == 2


@gen_cluster(client=True)
async def test_await_progress_with_an_async_client(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    total = c.persist(graph(2))
    buf = io.StringIO()
    bar = progress(total, notebook=False, multi=False, interval="10ms", stream=buf)
    assert isinstance(bar, TextProgressBar)
    await bar
    assert "100% Completed" in buf.getvalue()


@gen_cluster(client=True)
async def test_widgets_reach_their_max(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    total = c.persist(graph(3))
    multi = MultiProgressWidget([total], interval="10ms")
    single = ProgressWidget([total], interval="10ms")
    await asyncio.gather(multi.listen(), single.listen())
    assert set(multi.bars) == {"inc", "add", "total"}
    for bar in multi.bars.values():
        assert bar.value == bar.max and bar.bar_style == "success"
    assert single.bar.value == single.bar.max and single.bar.bar_style == "success"
    assert "Finished" in single.elapsed_time.value and "Finished" in multi.elapsed_time.value

    bad = c.submit(div, 1, 0, key="div-1")
    widget = ProgressWidget([bad], interval="10ms")
    await widget
    assert widget.bar.bar_style == "danger" and "ZeroDivisionError" in widget.elapsed_time.value


@gen_cluster(client=True)
async def test_progress_in_a_notebook_returns_the_widget(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    total = c.persist(graph(2))
    w = progress(total, notebook=True, interval="10ms")
    assert isinstance(w, MultiProgressWidget)
    w._repr_mimebundle_()  # shown: it starts
    await w
    assert all(bar.value == bar.max for bar in w.bars.values())
    single = progress(total, notebook=True, multi=False)
    assert isinstance(single, ProgressWidget)


@gen_cluster(client=True)
async def test_unsupported_options_are_refused(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1)
    with pytest.raises(NotImplementedError, match="group_by"):
        progress(x, group_by="spans")
    with pytest.raises(NotImplementedError, match="func"):
        progress(x, func=str)
    with pytest.raises(NotImplementedError, match="loop"):
        TextProgressBar([x], loop=object(), start=False)
    with pytest.raises(NotImplementedError, match="group_by"):
        MultiProgress([x.key], s, group_by="spans")  # type: ignore[arg-type]  # refused at run time too
    with pytest.raises(ValueError, match="interval"):
        TextProgressBar([x], interval=0, start=False)
    with pytest.raises(ValueError, match="no futures"):
        progress([1, 2])
    await x


@gen_cluster(client=True)
async def test_scheduler_plugins_usable_directly(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    total = c.persist(graph(2))
    p = Progress([total.key], s, complete=True)
    mp = MultiProgress([total.key], s, complete=True)
    await p.setup()
    await mp.setup()
    await wait(total)
    await async_poll_for(lambda: p.status == mp.status == "finished", timeout=10)
    assert p.counts() == ({"all": 5}, {"all": 0})
    assert mp.counts() == ({"inc": 2, "add": 2, "total": 1}, {"inc": 0, "add": 0, "total": 0})
    assert not watchers(s)


_SCRIPT = """
import sys
import dask.array as da
import numpy as np
from distributed import Client, progress

with Client(sys.argv[1]) as c:
    x = c.persist(da.ones((60, 60), chunks=10) + 1)
    progress(x, interval="20ms")
    progress(x, multi=False, interval="20ms")
    print("DONE", flush=True)
"""


def _read_pty(fd: int, proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out


def test_progress_in_a_pseudo_terminal_reaches_100_percent() -> None:
    with cluster(nworkers=1) as (sched, _):
        primary, replica = pty.openpty()
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_SCRIPT), sched["address"]],
            stdin=replica,
            stdout=replica,
            stderr=replica,
            env=env,
            close_fds=True,
        )
        os.close(replica)
        try:
            out = _read_pty(primary, proc, timeout=45).decode(errors="replace")
            assert proc.wait(10) == 0, out
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(primary)
    assert "DONE" in out, out
    # The bars are drawn in place: the multi bar moves the cursor back up, the single one returns the carriage.
    assert "\x1b[" in out and "\r[" in out
    assert re.search(r"\r\[#+\] \| 100% Completed \| (\d+)/\1 \| ", out), out
    # A line per prefix, full.
    assert re.search(r"\x1b\[2K\w+ +\[#+\] 100% \| (\d+)/\1", out), out
    # Every line fits the terminal (80 columns when it does not say): a wrapped one could not be redrawn.
    for line in re.split(r"[\r\n]", re.sub(r"\x1b\[\d*[A-Za-z]", "", out)):
        assert len(line) < 80, line
