"""HTML views of clients, clusters, scheduler info, futures and security, for notebooks.

Each function here takes plain data (what ``Client.scheduler_info()`` and a
cluster's ``scheduler_info`` hold, names, addresses, counts) and returns the
HTML a notebook shows for an object's ``_repr_html_``; the objects gather
that data themselves, so this module imports nothing of the scheduler, the
client or the deployments.  The Python side turns the data into labelled
fields (:class:`Field`); the templates only lay them out.

The HTML is self-contained (no scripts, stylesheets, fonts or images to
fetch; inline styles only) and collapses the long parts (the scheduler's
details, each worker) into ``<details>`` elements.  Elements carry
``data-repr``, ``data-field``, ``data-section`` and ``data-worker``
attributes, so a page (or a test) can find each part.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dask.utils import format_bytes, key_split
from markupsafe import Markup

from distributed.utils import format_dashboard_link
from distributed.widgets.rendering import format_time_ago, format_timestamp, render

__all__ = [
    "Field",
    "SchedulerInfo",
    "client_html",
    "cluster_html",
    "dashboard_link_of",
    "future_html",
    "pair_fields",
    "scaling_html",
    "scheduler_info_html",
    "security_html",
]


@dataclass(frozen=True)
class Field:
    """One labelled value of a view.

    Attributes
    ----------
    key
        The ``data-field`` attribute of its cell (for pages and tests).
    label
        Shown before the value (``"Workers"``).
    value
        Text (escaped) or :class:`~markupsafe.Markup`.
    href
        Makes the value a link (opened in a new tab).
    title
        A tooltip over the value.
    wide
        Takes a whole row instead of half of one.
    """

    key: str
    label: str
    value: object
    href: str | None = None
    title: str | None = None
    wide: bool = False


def pair_fields(fields: Iterable[Field]) -> list[list[Field]]:
    """Fields two to a row, a wide one alone on its row."""
    rows: list[list[Field]] = []
    for f in fields:
        if f.wide:
            rows.append([f])
        elif rows and len(rows[-1]) == 1 and not rows[-1][0].wide:
            rows[-1].append(f)
        else:
            rows.append([f])
    return rows


def _host_of(address: str) -> str | None:
    """The host of ``scheme://host:port`` (unbracketed), or None for an in-process address."""
    scheme, _, rest = address.rpartition("://")
    if scheme == "inproc" or not rest:
        return None
    host = rest.split("/", 1)[0]
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def dashboard_link_of(info: Mapping[str, Any], address: str | None = None) -> str | None:
    """The dashboard link of a server described by ``info`` (its ``services``), or None when it serves none.

    The host is that of ``address`` (default ``info["address"]``); an
    in-process server's dashboard listens on ``127.0.0.1``.
    """
    services = info.get("services")
    port = services.get("dashboard") if isinstance(services, Mapping) else None
    where = address if address is not None else info.get("address")
    if not port or not isinstance(where, str):
        return None
    return format_dashboard_link(_host_of(where) or "127.0.0.1", int(port))


def _memory_limit(limit: Any) -> str:
    return format_bytes(int(limit)) if limit else "unlimited"


def _name_order(item: tuple[str, Mapping[str, Any]]) -> tuple[int, float, str]:
    """Workers by name: numbers in numeric order first, then other names as text."""
    name = item[1].get("name")
    if isinstance(name, int | float) and not isinstance(name, bool) and not math.isnan(name):
        return (0, float(name), item[0])
    return (1, 0.0, f"{name}\0{item[0]}")


@dataclass(frozen=True)
class _WorkerView:
    address: str
    title: str
    subtitle: str
    rows: list[list[Field]]


def _worker_view(address: str, w: Mapping[str, Any], now: float) -> _WorkerView:
    fields = [
        Field("address", "Comm", address),
        Field("nthreads", "Total threads", w.get("nthreads", "?")),
    ]
    link = dashboard_link_of(w, address)
    if link:
        fields.append(Field("dashboard", "Dashboard", link, href=link))
    fields.append(Field("memory-limit", "Memory", _memory_limit(w.get("memory_limit"))))
    fields.append(Field("nanny", "Nanny", w.get("nanny") or "None"))
    if w.get("status"):
        fields.append(Field("status", "Status", w["status"]))
    resources = w.get("resources")
    if resources:
        fields.append(Field("resources", "Resources", ", ".join(f"{k}: {v}" for k, v in sorted(resources.items()))))
    metrics = w.get("metrics")
    if isinstance(metrics, Mapping) and metrics:
        for key, label in (
            ("executing", "Tasks executing"),
            ("in_memory", "Tasks in memory"),
            ("ready", "Tasks ready"),
            ("in_flight", "Tasks in flight"),
        ):
            if key in metrics:
                fields.append(Field(key.replace("_", "-"), label, metrics[key]))
        if "cpu" in metrics:
            fields.append(Field("cpu", "CPU usage", f"{float(metrics['cpu'] or 0):.1f}%"))
        if "memory" in metrics:
            fields.append(Field("memory-used", "Memory usage", format_bytes(int(metrics["memory"] or 0))))
        spilled = metrics.get("spilled_bytes")
        if isinstance(spilled, Mapping) and "disk" in spilled:
            fields.append(Field("spilled", "Spilled to disk", format_bytes(int(spilled["disk"] or 0))))
        net = metrics.get("host_net_io")
        if isinstance(net, Mapping):
            fields.append(Field("read", "Network read", f"{format_bytes(int(net.get('read_bps', 0)))}/s"))
            fields.append(Field("write", "Network write", f"{format_bytes(int(net.get('write_bps', 0)))}/s"))
    if w.get("last_seen"):
        seen = float(w["last_seen"])
        fields.append(Field("last-seen", "Last seen", format_time_ago(seen, now), title=format_timestamp(seen)))
    if w.get("local_directory"):
        fields.append(Field("local-directory", "Local directory", w["local_directory"], wide=True))
    kind = w.get("type") or "Worker"
    return _WorkerView(address, f"{kind}: {w.get('name', address)}", address, pair_fields(fields))


def _totals(info: Mapping[str, Any]) -> tuple[int, int, int]:
    """Workers, threads and memory: counted from the workers listed when all are, else the scheduler's totals."""
    workers = info.get("workers") or {}
    n = int(info.get("n_workers", len(workers)) or 0)
    if len(workers) >= n:
        threads = sum(int(w.get("nthreads", 0) or 0) for w in workers.values())
        memory = sum(int(w.get("memory_limit", 0) or 0) for w in workers.values())
        return len(workers), threads, memory
    return n, int(info.get("total_threads", 0) or 0), int(info.get("total_memory", 0) or 0)


def scheduler_info_html(
    info: Mapping[str, Any], *, dashboard_link: str | None = None, now: float | None = None
) -> Markup:
    """The view of a scheduler and its workers, from a ``scheduler_info()`` dict.

    Parameters
    ----------
    info
        ``{"type", "id", "address", "services", "started", "n_workers",
        "total_threads", "total_memory", "workers": {address: {...}}}``; any
        key may be missing.  ``workers`` may list only some of them
        (``scheduler_info(n_workers=5)``): the view says so.
    dashboard_link
        The dashboard's link when known better than ``info`` tells (a
        client's or cluster's own); else made from ``info``'s services.
    now
        The time to show ages against (default: now).
    """
    now = time.time() if now is None else now
    workers: Mapping[str, Mapping[str, Any]] = info.get("workers") or {}
    n, threads, memory = _totals(info)
    link = dashboard_link or dashboard_link_of(info)
    shown = f" (shown below: {len(workers)})" if n > len(workers) else ""
    fields = [
        Field("address", "Comm", info.get("address") or "unknown"),
        Field("workers", "Workers", f"{n}{shown}"),
        Field("dashboard", "Dashboard", link, href=link) if link else Field("dashboard", "Dashboard", "none"),
        Field("threads", "Total threads", threads),
    ]
    if info.get("started"):
        started = float(info["started"])
        fields.append(Field("started", "Started", format_time_ago(started, now), title=format_timestamp(started)))
    fields.append(Field("memory", "Total memory", format_bytes(memory)))
    views = [_worker_view(a, w, now) for a, w in sorted(workers.items(), key=_name_order)]
    title = f"Workers ({len(views)} of {n})" if n > len(views) else f"Workers ({n})"
    return render(
        "scheduler_info.html.j2",
        type_name=info.get("type") or "Scheduler",
        id=info.get("id") or "",
        rows=pair_fields(fields),
        workers=views,
        workers_title=title,
    )


def cluster_html(
    *,
    type_name: str,
    name: str,
    info: Mapping[str, Any],
    dashboard_link: str | None,
    extra: Sequence[Field] = (),
    started: bool = True,
) -> Markup:
    """The view of a cluster: its kind, name, dashboard, workers, threads and memory, and its scheduler.

    Parameters
    ----------
    type_name, name
        Shown as the heading (``"LocalCluster"``, its id).
    info
        The cluster's ``scheduler_info`` (as :func:`scheduler_info_html` takes).
    dashboard_link
        The cluster's dashboard, or None.
    extra
        More fields, after the totals (status, whether workers are processes).
    started
        False shows "Scheduler not started yet" instead of the scheduler.
    """
    n, threads, memory = _totals(info)
    fields = [
        Field("dashboard", "Dashboard", dashboard_link, href=dashboard_link)
        if dashboard_link
        else Field("dashboard", "Dashboard", "none"),
        Field("workers", "Workers", n),
        Field("threads", "Total threads", threads),
        Field("memory", "Total memory", format_bytes(memory)),
        *extra,
    ]
    inner = scheduler_info_html(info, dashboard_link=dashboard_link) if started and info else None
    return render("cluster.html.j2", type_name=type_name, name=name, rows=pair_fields(fields), scheduler_info=inner)


def client_html(
    *,
    client_id: str,
    connection: Sequence[Field],
    dashboard_link: str | None,
    status: str,
    summary: Mapping[str, Any],
    body: Markup | None,
    body_title: str = "Scheduler Info",
    type_name: str = "Client",
) -> Markup:
    """The view of a client: how it connects, its dashboard, the cluster's size, and the cluster or scheduler.

    Parameters
    ----------
    client_id
        The client's id.
    connection
        The connection method and what it names (cluster type, scheduler
        file or address).
    dashboard_link
        The dashboard, or None.
    status
        The client's status (``running``, ``closed``, ...).
    summary
        The scheduler's identity as last seen (``n_workers``,
        ``total_threads``, ``total_memory``); empty when never connected.
    body
        The cluster's view (``body_title="Cluster Info"``) or the
        scheduler's; None when no scheduler is connected.
    """
    fields = [*connection]
    fields.append(
        Field("dashboard", "Dashboard", dashboard_link, href=dashboard_link)
        if dashboard_link
        else Field("dashboard", "Dashboard", "none")
    )
    fields.append(Field("status", "Status", status))
    if "n_workers" in summary:
        fields.append(Field("workers", "Workers", summary.get("n_workers", 0)))
        fields.append(Field("threads", "Total threads", summary.get("total_threads", 0)))
        fields.append(Field("memory", "Total memory", format_bytes(int(summary.get("total_memory", 0) or 0))))
    key = "cluster" if body_title == "Cluster Info" else "scheduler"
    return render(
        "client.html.j2",
        type_name=type_name,
        id=client_id,
        rows=pair_fields(fields),
        body=body,
        body_title=body_title,
        body_key=key,
    )


#: Colours of a future's status (theme variables first, as JupyterLab's).
_STATUS_COLORS = {
    "error": "var(--jp-error-color1, #d32f2f)",
    "lost": "var(--jp-warn-color1, #c77700)",
    "cancelled": "var(--jp-warn-color1, #c77700)",
    "finished": "var(--jp-success-color1, #2e7d32)",
}


def future_html(*, key: Any, status: str, type_name: str | None) -> Markup:
    """The one-line view of a future: its task's name, status, result type (when known) and key."""
    return render(
        "future.html.j2",
        name=key_split(key),
        key=str(key),
        status=status,
        status_color=_STATUS_COLORS.get(status, "var(--jp-ui-font-color1, inherit)"),
        type_name=type_name,
    )


def security_html(fields: Mapping[str, str]) -> Markup:
    """The view of TLS settings: one row per field set (the caller says where each credential comes from)."""
    return render("security.html.j2", fields=sorted(fields.items()))


def scaling_html(
    *, adaptive: bool, workers: int, requested: int, minimum: float | None = None, maximum: float | None = None
) -> Markup:
    """How a cluster scales: manually or adaptively (between bounds), and its workers against those asked for."""
    mode = "Manual"
    if adaptive:
        bounds = []
        if minimum is not None:
            bounds.append(f"minimum {int(minimum)}")
        if maximum is not None:
            bounds.append("no maximum" if math.isinf(maximum) else f"maximum {int(maximum)}")
        mode = f"Adaptive ({', '.join(bounds)})" if bounds else "Adaptive"
    count = str(workers) if workers == requested else f"{workers} / {requested}"
    fields = [Field("mode", "Scaling mode", mode, wide=True), Field("workers", "Workers", count, wide=True)]
    return render("scaling.html.j2", rows=pair_fields(fields))


class SchedulerInfo(dict[str, Any]):
    """A ``scheduler_info()`` dict that a notebook shows as HTML (a plain dict otherwise)."""

    def _repr_html_(self) -> str:
        return str(scheduler_info_html(self))
