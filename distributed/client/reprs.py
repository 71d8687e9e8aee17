"""The notebook view of a client: what it shows, and where that comes from without stalling the notebook.

A client shows how it connects (a cluster object, a scheduler file, or an
address), its dashboard, its status, the cluster's size as last seen, and
then, collapsed, the cluster's own view or the scheduler's with its workers.
The size comes from the identity the client refreshes in the background; the
workers of a scheduler reached directly are asked for once, briefly (a
synchronous client off its loop only: an asynchronous one, or code running
on the client's loop, cannot wait, and shows what it has).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dask.utils import typename
from markupsafe import Markup

from distributed.widgets import Field, client_html, scheduler_info_html

if TYPE_CHECKING:
    from distributed.client.client import Client

__all__ = ["REPR_TIMEOUT", "REPR_WORKERS", "client_view"]

logger = logging.getLogger(__name__)

#: Seconds a synchronous client's view waits for the scheduler's workers before showing what it has.
REPR_TIMEOUT = 3.0

#: Workers a client's view lists (as dask's); the view says how many there are in all.
REPR_WORKERS = 5


def _on_loop(client: Client[Any]) -> bool:
    try:
        return asyncio.get_running_loop() is client.event_loop
    except RuntimeError:
        return False


def scheduler_info_now(client: Client[Any], identity: Mapping[str, Any]) -> Mapping[str, Any]:
    """The scheduler's identity with its first :data:`REPR_WORKERS` workers, else ``identity`` (as last seen)."""
    if client.status != "running" or client.asynchronous or _on_loop(client):
        return identity
    # Typed by the client's mode; here it is synchronous, and the awaitable form is asked for.
    info_of: Any = client.scheduler_info

    async def fetch() -> Any:
        return await info_of(n_workers=REPR_WORKERS, asynchronous=True)

    try:
        info = client.sync(fetch, callback_timeout=REPR_TIMEOUT)
    except Exception:
        logger.debug("The client's view shows the scheduler as last seen", exc_info=True)
        return identity
    return info if isinstance(info, Mapping) else identity


def client_view(client: Client[Any], identity: Mapping[str, Any], cluster_view: Callable[[], str] | None) -> str:
    """The HTML of ``client``.

    Parameters
    ----------
    client
        The client.
    identity
        The scheduler's identity as the client last saw it (its totals).
    cluster_view
        The cluster object's own HTML view, when the client was given a cluster that has one.
    """
    cluster = client.cluster
    if cluster is not None:
        connection = [
            Field("connection", "Connection method", "Cluster object"),
            Field("cluster-type", "Cluster type", typename(type(cluster), short=True)),
        ]
    elif client.scheduler_file:
        connection = [
            Field("connection", "Connection method", "Scheduler file"),
            Field("scheduler-file", "Scheduler file", client.scheduler_file),
        ]
    else:
        connection = [
            Field("connection", "Connection method", "Direct"),
            Field("address", "Scheduler", client.scheduler_address or "none"),
        ]
    body: Markup | None = None
    title = "Scheduler Info"
    if cluster_view is not None:
        body, title = Markup(cluster_view()), "Cluster Info"
    elif client.status in ("running", "connecting") or identity:
        info = scheduler_info_now(client, identity)
        if info:
            body = scheduler_info_html(info, dashboard_link=client.dashboard_link)
    return str(
        client_html(
            client_id=client.id,
            type_name=type(client).__name__,
            connection=connection,
            dashboard_link=client.dashboard_link,
            status=client.status,
            summary=identity,
            body=body,
            body_title=title,
        )
    )
