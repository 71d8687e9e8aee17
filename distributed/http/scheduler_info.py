"""The scheduler's JSON and plain-HTML routes beside the dashboard's bokeh pages.

Routes (as in dask.distributed)
-------------------------------
``GET /json/counts.json``
    Counts of tasks, workers, threads, bytes and clients (see :func:`counts`).
``GET /json/identity.json``
    :meth:`Scheduler.identity`, JSON-safe.
``GET /json/index.html``
    Links to the JSON routes.
``GET /sitemap.json``
    ``{"paths": [...]}``: every route the server answers, dashboard pages included.
``GET /info/main/workers.html``
    A table of the workers, each linking to ``/info/worker/<address>.html``.
``GET /info/worker/<address>.html``
    One worker: identity, memory, the tasks it is processing and holds.
``GET /info/task/<key>.html``
    One task: state, where it runs or is held, dependencies and dependents.

All read the scheduler's state once per request, on the scheduler's loop.
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import tornado.web

from distributed.http.server import Route, json_safe
from distributed.protocol.messages import FIRE_AND_FORGET

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import TaskState, WorkerState

__all__ = ["counts", "info_routes"]

#: Most tasks listed on one worker's or one task's page.
MAX_LISTED = 1000


def counts(scheduler: Scheduler) -> dict[str, int]:
    """What ``/json/counts.json`` returns: dask.distributed's fields.

    ``idle`` counts workers processing nothing; ``saturated`` those processing
    more tasks than they have threads.
    """
    erred = released = waiting = waiting_data = 0
    for ts in scheduler.tasks.values():
        if ts.state == "erred":
            erred += 1
        elif ts.state == "released":
            released += 1
        if ts.waiting_on:
            waiting += 1
        if ts.waiters:
            waiting_data += 1
    nbytes = nthreads = memory = processing = idle = saturated = 0
    hosts: set[str] = set()
    for ws in scheduler.workers.values():
        nthreads += ws.nthreads
        memory += len(ws.has_what)
        nbytes += ws.nbytes
        n = len(ws.processing)
        processing += n
        idle += n == 0
        saturated += n > ws.nthreads
        hosts.add(ws.host)
    return {
        "bytes": nbytes,
        "clients": sum(1 for c in scheduler.clients if c != FIRE_AND_FORGET),
        "cores": nthreads,
        "erred": erred,
        "hosts": len(hosts),
        "idle": idle,
        "memory": memory,
        "processing": processing,
        "released": released,
        "saturated": saturated,
        "tasks": len(scheduler.tasks),
        "unrunnable": len(scheduler.unrunnable),
        "waiting": waiting,
        "waiting_data": waiting_data,
        "workers": len(scheduler.workers),
        "desired_workers": scheduler.adaptive_target(),
    }


class _SchedulerHandler(tornado.web.RequestHandler):
    scheduler: Scheduler

    def initialize(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def write_json(self, obj: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(json_safe(obj)))

    def write_page(self, title: str, body: str) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body><p><a href='/status'>status</a> | <a href='/workers'>workers</a> | "
            f"<a href='/info/main/workers.html'>info</a></p><h1>{html.escape(title)}</h1>{body}</body></html>"
        )


class CountsJSON(_SchedulerHandler):
    """``/json/counts.json``."""

    def get(self) -> None:
        self.write_json(counts(self.scheduler))


class IdentityJSON(_SchedulerHandler):
    """``/json/identity.json``."""

    def get(self) -> None:
        self.write_json(self.scheduler.identity())


class JSONIndex(_SchedulerHandler):
    """``/json/index.html``: links to the JSON routes."""

    def get(self) -> None:
        items = "".join(f"<li><a href='{p}'>{p}</a></li>" for p in ("/json/counts.json", "/json/identity.json"))
        self.write_page("Index of JSON routes", f"<ul>{items}</ul>")


class SitemapJSON(tornado.web.RequestHandler):
    """``/sitemap.json``: ``{"paths": [...]}``."""

    paths: Callable[[], list[str]]

    def initialize(self, paths: Callable[[], list[str]]) -> None:
        self.paths = paths

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"paths": self.paths()}))


def _link_worker(address: str) -> str:
    return f"<a href='/info/worker/{urllib.parse.quote(address, safe='')}.html'>{html.escape(address)}</a>"


def _link_task(ts: TaskState) -> str:
    key = str(ts.key)
    return f"<a href='/info/task/{urllib.parse.quote(key, safe='')}.html'>{html.escape(key)}</a>"


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table border='1'><tr>{head}</tr>{body}</table>"


def _tasks_list(tasks: Iterable[TaskState]) -> str:
    items = []
    for i, ts in enumerate(tasks):
        if i == MAX_LISTED:
            items.append("<li>...</li>")
            break
        items.append(f"<li>{_link_task(ts)} ({html.escape(ts.state)})</li>")
    return f"<ul>{''.join(items)}</ul>"


class WorkersInfo(_SchedulerHandler):
    """``/info/main/workers.html``."""

    def get(self) -> None:
        rows = []
        for addr, ws in self.scheduler.workers.items():
            mem = ws.memory
            rows.append(
                [
                    _link_worker(addr),
                    html.escape(str(ws.name)),
                    str(ws.nthreads),
                    str(mem.process),
                    str(ws.memory_limit),
                    str(len(ws.processing)),
                    str(len(ws.has_what)),
                    html.escape(ws.status.name),
                ]
            )
        table = _table(["address", "name", "threads", "memory", "limit", "processing", "in memory", "status"], rows)
        self.write_page(f"Scheduler {self.scheduler.address}: {len(rows)} workers", table)


def _worker(scheduler: Scheduler, address: str) -> WorkerState:
    ws = scheduler.workers.get(urllib.parse.unquote(address))
    if ws is None:
        raise tornado.web.HTTPError(404, reason="No such worker")
    return ws


class WorkerInfo(_SchedulerHandler):
    """``/info/worker/<address>.html``."""

    def get(self, address: str) -> None:
        ws = _worker(self.scheduler, address)
        mem = ws.memory
        facts = _table(
            ["field", "value"],
            [
                [k, html.escape(str(v))]
                for k, v in [
                    ("address", ws.address),
                    ("name", ws.name),
                    ("threads", ws.nthreads),
                    ("memory (process)", mem.process),
                    ("managed", mem.managed),
                    ("unmanaged", mem.unmanaged),
                    ("spilled", mem.spilled),
                    ("memory limit", ws.memory_limit),
                    ("status", ws.status.name),
                    ("pid", ws.pid),
                    ("local directory", ws.local_directory),
                ]
            ],
        )
        body = (
            f"{facts}<h2>Processing ({len(ws.processing)})</h2>{_tasks_list(ws.processing)}"
            f"<h2>In memory ({len(ws.has_what)})</h2>{_tasks_list(ws.has_what)}"
        )
        self.write_page(f"Worker {ws.address}", body)


class TaskInfo(_SchedulerHandler):
    """``/info/task/<key>.html`` (the key as ``str(key)``, URL-quoted)."""

    def get(self, key: str) -> None:
        wanted = urllib.parse.unquote(key)
        ts = self.scheduler.tasks.get(wanted)
        if ts is None:
            ts = next((t for k, t in self.scheduler.tasks.items() if str(k) == wanted), None)
        if ts is None:
            raise tornado.web.HTTPError(404, reason="No such task")
        where = ", ".join(_link_worker(ws.address) for ws in ts.who_has) or "-"
        body = _table(
            ["field", "value"],
            [
                ["key", html.escape(str(ts.key))],
                ["state", html.escape(ts.state)],
                ["processing on", _link_worker(ts.processing_on.address) if ts.processing_on else "-"],
                ["held by", where],
                ["bytes", str(ts.nbytes)],
                ["type", html.escape(str(ts.type))],
                ["exception", html.escape(ts.exception_text)],
            ],
        )
        body += f"<h2>Dependencies</h2>{_tasks_list(ts.dependencies)}<h2>Dependents</h2>{_tasks_list(ts.dependents)}"
        self.write_page(f"Task {ts.key}", body)


def info_routes(scheduler: Scheduler, paths: Callable[[], list[str]]) -> list[Route]:
    """The JSON and info routes for ``scheduler``; ``/sitemap.json`` lists what ``paths()`` returns."""
    s = {"scheduler": scheduler}
    return [
        (r"/json/counts\.json", CountsJSON, s),
        (r"/json/identity\.json", IdentityJSON, s),
        (r"/json/index\.html", JSONIndex, s),
        (r"/sitemap\.json", SitemapJSON, {"paths": paths}),
        (r"/info/main/workers\.html", WorkersInfo, s),
        (r"/info/worker/(.+)\.html", WorkerInfo, s),
        (r"/info/task/(.+)\.html", TaskInfo, s),
    ]
