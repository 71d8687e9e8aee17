"""``MemorySampler``: the cluster's memory over the time of a block of code, as the scheduler samples it.

>>> from distributed.diagnostics import MemorySampler  # doctest: +SKIP
>>> ms = MemorySampler()  # doctest: +SKIP
>>> with ms.sample("one chunk"):  # doctest: +SKIP
...     x.compute()
>>> with ms.sample("two chunks"):  # doctest: +SKIP
...     y.compute()
>>> ms.plot(align=True)  # doctest: +SKIP

Each ``sample`` block asks the scheduler to sum a measure of its workers'
memory every ``interval`` seconds, and takes the samples when the block ends.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import pandas as pd

    from distributed.client.client import Client

__all__ = ["MemorySampler"]


class MemorySampler:
    """Samples of the cluster's memory, by label: ``{label: [(time.time(), bytes), ...]}``."""

    def __init__(self) -> None:
        #: The samples of each finished block, by label.
        self.samples: dict[str, list[tuple[float, int]]] = {}

    def sample(
        self,
        label: str | None = None,
        *,
        client: Client[Any] | None = None,
        measure: str = "process",
        interval: float = 0.5,
    ) -> Any:
        """A block (``with``, or ``async with`` on an asynchronous client) whose memory is sampled.

        Parameters
        ----------
        label
            The name of the samples (default: a new one each time).
        client
            The client whose cluster to sample (default: the current one).
        measure
            ``process`` (what the workers' processes hold, the default), ``managed``,
            ``unmanaged`` or ``spilled``, summed over the workers.
        interval
            Seconds between two samples.
        """
        from distributed.client.client import get_client

        client = client or get_client()
        name = label if label is not None else f"Samples {len(self.samples)}"
        if client.asynchronous:
            return self._sample_async(client, name, measure, interval)
        return self._sample_sync(client, name, measure, interval)

    @contextlib.contextmanager
    def _sample_sync(self, client: Client[Any], label: str, measure: str, interval: float) -> Iterator[None]:
        key = uuid.uuid4().hex
        client.sync(self._start, client, key, measure, interval)
        try:
            yield
        finally:
            # A synchronous client: sync() gives the value (its declared type covers both forms).
            self.samples[label] = cast("list[tuple[float, int]]", client.sync(self._stop, client, key))

    @contextlib.asynccontextmanager
    async def _sample_async(
        self, client: Client[Any], label: str, measure: str, interval: float
    ) -> AsyncIterator[None]:
        key = uuid.uuid4().hex
        await self._start(client, key, measure, interval)
        try:
            yield
        finally:
            self.samples[label] = await self._stop(client, key)

    @staticmethod
    async def _start(client: Client[Any], key: str, measure: str, interval: float) -> None:
        await client.scheduler.memory_sampler_start(key=key, measure=measure, interval=interval)

    @staticmethod
    async def _stop(client: Client[Any], key: str) -> list[tuple[float, int]]:
        return [(float(t), int(b)) for t, b in await client.scheduler.memory_sampler_stop(key=key)]

    def to_pandas(self, *, align: bool = False) -> pd.DataFrame:
        """The samples as a DataFrame: a column per label, indexed by time.

        With ``align``, each label's times count from its own first sample (a
        ``Timedelta`` index), so that blocks run one after the other can be
        compared; otherwise the index is the wall-clock time.
        """
        import pandas as pd

        columns = []
        for label, samples in self.samples.items():
            times = pd.to_datetime([t for t, _ in samples], unit="s")
            if align and len(times):
                times = times - times[0]
            columns.append(pd.Series([b for _, b in samples], index=times, name=label))
        if not columns:
            return pd.DataFrame()
        return pd.concat(columns, axis=1).sort_index().ffill()

    def plot(self, *, align: bool = False, **kwargs: Any) -> Any:
        """Plot the samples (in GiB) with pandas' ``DataFrame.plot``; ``kwargs`` go to it."""
        df = self.to_pandas(align=align) / 2**30
        return df.plot(xlabel="time", ylabel="Cluster memory (GiB)", **kwargs)
