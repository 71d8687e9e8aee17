"""The garbage collector pause of large client.map calls."""

from __future__ import annotations

import gc

import pytest

from distributed.client.gc_pause import GC_PAUSE_MIN, paused_gc


def test_pause_only_for_many_objects_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with paused_gc(GC_PAUSE_MIN - 1):
        assert gc.isenabled()
    with paused_gc(GC_PAUSE_MIN):
        assert not gc.isenabled()
        # A pause inside another does not switch the collector back on early.
        with paused_gc(GC_PAUSE_MIN):
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), paused_gc(GC_PAUSE_MIN):
        1 / 0
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_user_stays_off() -> None:
    gc.disable()
    try:
        with paused_gc(GC_PAUSE_MIN):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
