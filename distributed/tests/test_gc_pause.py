"""The process-wide, nesting pause of the garbage collector."""

from __future__ import annotations

import gc
import threading

import pytest

from distributed.gc_pause import collector_paused


def test_pauses_nest_across_threads() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def pause_in_another_thread() -> None:
        with collector_paused():
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=pause_in_another_thread)
    with collector_paused():
        assert not gc.isenabled()
        other.start()
        assert inside.wait(10)
    # The other thread's pause is still on: the first to end must not switch the collector back on.
    assert not gc.isenabled()
    leave.set()
    other.join(10)
    assert gc.isenabled()


def test_a_pause_ends_on_an_error() -> None:
    with pytest.raises(ZeroDivisionError), collector_paused():
        1 / 0
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_user_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
