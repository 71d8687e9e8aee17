"""``from distributed.spans import span`` and the scheduler's spans, as in dask.distributed.

The block that marks tasks is :func:`distributed.client.spans.span`; what the
scheduler keeps of them is in :mod:`distributed.scheduler.spans`.
"""

from __future__ import annotations

from distributed.client.spans import span
from distributed.scheduler.spans import DEFAULT_SPAN, Span, SpanGroup, SpansSchedulerExtension

__all__ = ["DEFAULT_SPAN", "Span", "SpanGroup", "SpansSchedulerExtension", "span"]
