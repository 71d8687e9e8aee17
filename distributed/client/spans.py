"""``with span("tag", ...)``: mark the tasks made in a block, so the scheduler reports their metrics together.

The block annotates its tasks (``dask.annotate``) with ``span``:
``{"name": (tag, ...), "ids": (id, ...)}``, one id per tag, the tags of the
enclosing blocks first, so ``span("a", "b")`` is ``span("a")`` holding
``span("b")``.  The scheduler keeps what ran under each id (see
:mod:`distributed.scheduler.spans`).  As any annotation, a span applies to the
tasks of collections made in the block, and to those submitted in it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from dask.base import annotate

from distributed.dask_api import get_annotations

__all__ = ["span"]


@contextmanager
def span(*tags: str) -> Iterator[str]:
    """Mark the tasks made in the block as a span named by ``tags`` (within the enclosing spans).

    Yields
    ------
    The id of the (innermost) span, by which the scheduler's spans extension
    knows it: ``scheduler.extensions["spans"].spans[id]``.

    Raises
    ------
    ValueError
        Without a tag, or for a tag that is not a non-empty string.

    Examples
    --------
    >>> with span("etl", "load") as span_id:  # doctest: +SKIP
    ...     df = dd.read_parquet(path).persist()
    """
    if not tags:
        raise ValueError("span() needs at least one tag")
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"A span's tags are non-empty strings, got {tag!r}")
    outer = get_annotations().get("span")
    names: tuple[str, ...] = tuple(outer["name"]) if isinstance(outer, dict) else ()
    ids: tuple[str, ...] = tuple(outer["ids"]) if isinstance(outer, dict) else ()
    new_ids = tuple(str(uuid.uuid4()) for _ in tags)
    with annotate(span={"name": names + tags, "ids": ids + new_ids}):
        yield new_ids[-1]
