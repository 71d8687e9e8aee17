"""Helpers in distributed.utils: coroutine detection, sync(), LoopRunner and turns of the event loop."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distributed.tests.logs import caught_logs, messages
from distributed.utils import (
    LoopRunner,
    LoopTurns,
    format_exception_text,
    get_asyncio_loop,
    has_arg,
    import_term,
    is_kernel,
    iscoroutinefunction,
    key_split_uncached,
    log_errors,
    nbytes,
    open_port,
    sync,
    wait_for,
    write_json_whole,
    yield_after_io,
)

KEYS: list[Any] = [
    "x",
    "inc-1f0e8a9d2c3b4a5f6e7d8c9b0a1f2e3d",
    "hello-world-1",
    ("sum-aggregate-9f8e7d6c", 3, 1),
    (("nested-abc123", 0), 1),
    b"bytes-key-12",
    "1f0e8a9d2c3b4a5f6e7d8c9b0a1f2e3d",
    "<Foo.bar object at 0x7f>-1",
    "('x', 1)",
    "x-ab-ffffffff",
    42,
]


@pytest.mark.parametrize("key", KEYS)
def test_key_split_uncached_names_keys_as_key_split_does_and_keeps_none(key: Any) -> None:
    from dask.utils import key_split

    key_split.cache_clear()
    got = key_split_uncached(key)
    assert key_split.cache_info().currsize == 0  # nothing kept: a long-running scheduler sees millions of keys
    assert got == key_split(key)


class CustomError(Exception):
    pass


async def async_add(x: int, y: int) -> int:
    return x + y


def plain_add(x: int, y: int) -> int:
    return x + y


class Thing:
    async def method(self) -> int:
        return 1

    def sync_method(self) -> int:
        return 2


class AsyncCallable:
    async def __call__(self) -> int:
        return 3


class SyncCallable:
    def __call__(self) -> int:
        return 4


def test_iscoroutinefunction_remembers_each_function_by_identity() -> None:
    # Functions made one after the other may reuse an id: the answer must be each one's own.
    for i in range(50):
        if i % 2:

            async def f() -> None:
                pass

        else:

            def f() -> None:  # type: ignore[misc]  # alternately async and not, on purpose
                pass

        assert iscoroutinefunction(f) is bool(i % 2)
        assert iscoroutinefunction(f) is bool(i % 2)
        del f


def test_iscoroutinefunction() -> None:
    assert iscoroutinefunction(async_add)
    assert iscoroutinefunction(functools.partial(async_add, 1))
    assert iscoroutinefunction(functools.partial(functools.partial(async_add, 1), 2))
    assert iscoroutinefunction(Thing().method)
    assert iscoroutinefunction(Thing.method)
    assert iscoroutinefunction(AsyncCallable())

    @functools.wraps(async_add)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return async_add(*args, **kwargs)

    assert iscoroutinefunction(wrapper)

    assert not iscoroutinefunction(plain_add)
    assert not iscoroutinefunction(functools.partial(plain_add, 1))
    assert not iscoroutinefunction(Thing().sync_method)
    assert not iscoroutinefunction(SyncCallable())
    assert not iscoroutinefunction(lambda: None)
    assert not iscoroutinefunction(None)
    assert not iscoroutinefunction(5)
    # A coroutine object is not a coroutine function.
    coro = async_add(1, 2)
    try:
        assert not iscoroutinefunction(coro)
    finally:
        coro.close()


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_loop_runner_start_stop_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    runner = LoopRunner(name="test-loop-runner")
    runner.start()
    try:
        assert runner.is_started
        assert runner.thread is not None and runner.thread.is_alive()
        assert len(_threads_named("test-loop-runner")) == 1
        runner.start()  # idempotent
        assert len(_threads_named("test-loop-runner")) == 1
        assert runner.run_sync(async_add, 2, 3) == 5
    finally:
        thread = runner.thread
        runner.stop()
    assert thread is not None and not thread.is_alive()
    assert runner.loop.is_closed()
    assert not runner.is_started
    assert _threads_named("test-loop-runner") == []
    assert set(threading.enumerate()) <= before
    runner.stop()  # idempotent


def test_loop_runner_cancels_pending_tasks_on_stop() -> None:
    runner = LoopRunner(name="test-loop-runner-tasks")
    runner.start()
    cleaned = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    async def spawn() -> None:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)

    try:
        runner.run_sync(spawn)
    finally:
        runner.stop()
    assert cleaned.is_set()
    assert _threads_named("test-loop-runner-tasks") == []


def test_loop_runner_with_existing_loop_is_not_owned() -> None:
    loop = asyncio.new_event_loop()
    try:
        runner = LoopRunner(loop=loop)
        runner.start()
        assert runner.thread is None
        runner.stop()
        assert not loop.is_closed()
    finally:
        loop.close()


def test_sync_runs_on_loop_thread_and_returns() -> None:
    runner = LoopRunner(name="test-sync-loop")
    runner.start()
    try:
        assert runner.thread is not None
        loop_thread = runner.thread.ident

        async def where(x: int) -> tuple[int | None, int]:
            await asyncio.sleep(0)
            return threading.get_ident(), x * 2

        assert sync(runner.loop, where, 21) == (loop_thread, 42)
        assert sync(runner.loop, where, x=1) == (loop_thread, 2)
        assert threading.get_ident() != loop_thread
    finally:
        runner.stop()


def test_sync_propagates_exceptions() -> None:
    runner = LoopRunner(name="test-sync-exc")
    runner.start()
    try:

        async def fail() -> None:
            await asyncio.sleep(0)
            raise CustomError("from the loop")

        with pytest.raises(CustomError, match="from the loop"):
            sync(runner.loop, fail)
        # The loop is still fine afterwards.
        assert sync(runner.loop, async_add, 1, 1) == 2
    finally:
        runner.stop()


def test_sync_timeout() -> None:
    runner = LoopRunner(name="test-sync-timeout")
    runner.start()
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        with pytest.raises(asyncio.TimeoutError):
            sync(runner.loop, slow, callback_timeout=0.05)
        assert cancelled.wait(5)
    finally:
        runner.stop()


def test_sync_from_loop_thread_raises() -> None:
    runner = LoopRunner(name="test-sync-same-thread")
    runner.start()
    try:

        async def nested() -> str:
            try:
                sync(runner.loop, async_add, 1, 2)
            except RuntimeError as e:
                return str(e)
            return "no error"

        assert "own thread" in runner.run_sync(nested)

        # From a plain callback on the loop thread, too.
        result: list[BaseException | str] = []
        done = threading.Event()

        def callback() -> None:
            try:
                sync(runner.loop, async_add, 1, 2)
                result.append("no error")
            except RuntimeError as e:
                result.append(e)
            finally:
                done.set()

        runner.loop.call_soon_threadsafe(callback)
        assert done.wait(5)
        assert isinstance(result[0], RuntimeError)
    finally:
        runner.stop()


def test_sync_on_closed_loop_raises() -> None:
    runner = LoopRunner(name="test-sync-closed")
    runner.start()
    runner.stop()
    with pytest.raises(RuntimeError, match="closed"):
        sync(runner.loop, async_add, 1, 2)


def test_get_asyncio_loop() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert get_asyncio_loop(loop) is loop

        class Wrapper:
            asyncio_loop = loop

        assert get_asyncio_loop(Wrapper()) is loop
        with pytest.raises(TypeError):
            get_asyncio_loop(object())
    finally:
        loop.close()


def test_small_helpers() -> None:
    assert import_term("distributed.utils.sync") is sync
    assert import_term("distributed.utils") is __import__("distributed.utils").utils
    text = format_exception_text(CustomError("x" * 20_000))
    assert text.startswith("CustomError: xxx") and text.endswith("...")
    assert len(text) == 10_000
    assert format_exception_text(ValueError("short")) == "ValueError: short"

    async def main() -> None:
        assert await wait_for(async_add(1, 2), None) == 3
        assert await wait_for(async_add(1, 2), 5) == 3
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(asyncio.Event().wait(), 0.01)

    asyncio.run(main())


@pytest.mark.timeout(30)
@pytest.mark.parametrize("outcome", ["error", "result"])
def test_wait_for_never_loses_a_cancellation_that_arrives_with_the_result(outcome: str) -> None:
    """Python 3.11's ``asyncio.wait_for`` hands back the result (or raises the error) here instead.

    A retry loop around a connect then retried on after Ctrl-C, until its deadline.
    """

    async def main() -> None:
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def waiter() -> int:
            return await wait_for(answer, 10)

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the task now waits on the answer
        assert not task.done()
        # The answer and the cancellation land in the same loop step.
        if outcome == "error":
            answer.set_exception(ConnectionRefusedError("refused"))
        else:
            answer.set_result(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def _woken_after(pause: Any, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> int:
    """Steps run before a task woken by a read that arrived during step 1 gets its turn, with ``pause``
    between steps."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        readable: asyncio.Future[None] = loop.create_future()

        def on_readable() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(reader, on_readable)
        steps = 0
        woken_after: list[int] = []

        async def answer() -> None:
            await readable
            woken_after.append(steps)

        task = asyncio.create_task(answer())
        await asyncio.sleep(0)  # the task now waits
        try:
            for i in range(6):
                if i == 1:
                    writer.send(b"request")  # arrives while step 1 runs
                steps += 1
                await pause()
            await task
        finally:
            loop.remove_reader(reader)
            reader.close()
            writer.close()
        return woken_after[0]

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


@pytest.mark.timeout(30)
def test_yield_after_io_lets_a_task_woken_by_a_read_run_before_the_next_step() -> None:
    """A request that came while a large graph was added in steps was answered two steps late."""
    assert _woken_after(yield_after_io) == 2
    assert _woken_after(lambda: asyncio.sleep(0)) == 4  # what it replaces


@pytest.mark.timeout(30)
def test_yield_after_io_does_the_same_on_uvloop() -> None:
    """``distributed.admin.event-loop: uvloop``: its loop orders a turn's work its own way (``sleep(0)``
    costs one step there, not two), and the woken task still runs right after its step."""
    uvloop = pytest.importorskip("uvloop")
    assert _woken_after(yield_after_io, uvloop.new_event_loop) == 2
    assert _woken_after(lambda: asyncio.sleep(0), uvloop.new_event_loop) == 3


@pytest.mark.timeout(30)
def test_loop_turns_only_once_the_budget_is_spent() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[int] = []
        turns = LoopTurns(3600.0)
        loop.call_soon(ran.append, 1)
        for _ in range(100):
            await turns.maybe()
        assert ran == []  # a hundred small pieces, no turn: the callback waits
        turns.budget = 0.0
        await turns.maybe()
        assert ran == [1]  # spent: the loop turned

    asyncio.run(main())


@pytest.mark.timeout(30)
def test_yield_after_io_can_be_cancelled() -> None:
    async def main() -> None:
        task = asyncio.create_task(yield_after_io())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await yield_after_io()  # the timer of the cancelled one left nothing behind to fail

    asyncio.run(main())


def _raises_in_a_callback() -> None:
    raise ValueError("lost otherwise")


def test_log_errors_logs_and_raises_again() -> None:
    with (
        caught_logs(__name__, logging.ERROR) as records,
        pytest.raises(ValueError, match="lost otherwise"),
        log_errors(),
    ):
        _raises_in_a_callback()
    [record] = records
    assert record.name == __name__ and "ValueError: lost otherwise" in record.getMessage() and record.exc_info

    @log_errors
    def decorated(x: int) -> int:
        if x < 0:
            raise KeyError(x)
        return x + 1

    @log_errors()
    async def decorated_async(x: int) -> int:
        raise RuntimeError(x)

    assert decorated(1) == 2 and decorated.__name__ == "decorated"
    with caught_logs(__name__, logging.ERROR) as records:
        with pytest.raises(KeyError):
            decorated(-1)
        with pytest.raises(RuntimeError):
            asyncio.run(decorated_async(3))
    assert messages(records) == ["KeyError: -1", "RuntimeError: 3"]
    with caught_logs(__name__, logging.ERROR) as records, pytest.raises(asyncio.CancelledError), log_errors():
        raise asyncio.CancelledError
    assert not records  # a cancellation is no error
    with pytest.raises(NotImplementedError, match="pdb"):
        log_errors(pdb=True)


def test_small_helpers_downstream_code_imports() -> None:
    import numpy as np

    assert nbytes(b"abcd") == 4 and nbytes(bytearray(3)) == 3
    assert nbytes(memoryview(np.ones(10).data)) == 80 and nbytes(np.ones((2, 3))) == 48
    port = open_port("127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free, as promised
    assert has_arg(lambda x, y=1: x, "y") and has_arg(lambda **kw: 0, "anything")
    assert not has_arg(lambda x: x, "y") and not has_arg(len, "x")
    assert is_kernel() is False


def test_a_json_file_appears_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the file was there, empty, while it was written: a reader polling for it could read nothing."""
    import json

    path = tmp_path / "scheduler.json"
    there_while_written: list[bool] = []
    dump = json.dump

    def watched_dump(obj: Any, f: Any, **kwargs: Any) -> None:
        there_while_written.append(path.exists())
        dump(obj, f, **kwargs)

    monkeypatch.setattr(json, "dump", watched_dump)
    write_json_whole(str(path), {"address": "tcp://10.0.0.1:8786", "when": threading.Lock}, default=repr)
    assert there_while_written == [False]
    assert json.loads(path.read_text())["address"] == "tcp://10.0.0.1:8786"
    write_json_whole(str(path), {"address": "tcp://10.0.0.2:8786"})  # over the old one, whole too
    assert there_while_written == [False, True]
    assert json.loads(path.read_text()) == {"address": "tcp://10.0.0.2:8786"}
    assert [p.name for p in tmp_path.iterdir()] == ["scheduler.json"]  # nothing left beside it
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_json_whole(str(tmp_path / "bad.json"), {"x": object()})
    assert [p.name for p in tmp_path.iterdir()] == ["scheduler.json"]
