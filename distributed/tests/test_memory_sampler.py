"""``MemorySampler``: the cluster's memory sampled by the scheduler over a block of code."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import pytest

from distributed import Client, Scheduler, Worker
from distributed.diagnostics import MemorySampler
from distributed.utils_test import gen_cluster, poll_for


def hold(nbytes: int) -> np.ndarray:
    return np.ones(nbytes, dtype="u1")


def test_sample_blocks_and_to_pandas() -> None:
    with Client(processes=False, n_workers=1, dashboard_address=None) as c:
        ms = MemorySampler()
        scheduler = c.cluster.scheduler
        with ms.sample("managed", measure="managed", interval=0.01):
            x = c.submit(hold, 50_000_000)
            x.result()
            # Until a sample shows the 50 MB (the scheduler learns of them as the task finishes).
            poll_for(lambda: any(b >= 50_000_000 for s in scheduler.memory_sampler.samples.values() for _, b in s), 10)
        del x
        with ms.sample(interval=0.01):
            pass
        assert set(ms.samples) == {"managed", "Samples 1"}
        values = [b for _, b in ms.samples["managed"]]
        assert values[0] < 50_000_000 <= max(values)
        df = ms.to_pandas()
        assert list(df.columns) == ["managed", "Samples 1"]
        assert isinstance(df.index, pd.DatetimeIndex)
        aligned = ms.to_pandas(align=True)
        assert isinstance(aligned.index, pd.TimedeltaIndex) and aligned.index.min() == pd.Timedelta(0)


@gen_cluster(client=True)
async def test_async_sample_and_refusals(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    ms = MemorySampler()
    async with ms.sample("x", client=c, interval=0.01):
        await c.submit(hold, 1000)
    assert ms.samples["x"] and all(isinstance(t, float) and isinstance(b, int) for t, b in ms.samples["x"])
    assert not s.memory_sampler.samples  # stopped and handed over
    with pytest.raises(ValueError, match="measure"):
        async with ms.sample(client=c, measure="everything"):
            pass
    with pytest.raises(KeyError, match="No memory sampling"):
        await c.scheduler.memory_sampler_stop(key="never")
