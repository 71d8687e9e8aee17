"""The scheduler's JSON routes and its info pages (plain HTML) beside the dashboard's bokeh pages.

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
    A table of the workers (memory as people read it: ``1.5 GiB``), each
    linking to its page, its logs, its tasks' call stacks and, when it
    serves one, its own dashboard.
``GET /info/main/logs.html``, ``/info/main/exceptions.html``
    The scheduler's recent log records; the latest tasks that erred.
``GET /info/worker/<address>.html``
    One worker: memory, resources, the tasks it is processing (by priority)
    and those it holds (with their sizes).
``GET /info/task/<key>.html``
    One task: state, where it runs or is held, size, exception, dependencies
    and dependents, its transitions.
``GET /info/call-stacks/<address>.html``, ``/info/call-stack/<key>.html``
    Where the tasks running on a worker (or one task) are in their code:
    the scheduler asks the worker as ``Client.call_stack`` does (the
    worker runs :func:`~distributed.diagnostics.call_stack.task_call_stacks`).
``GET /info/logs/<address>.html``
    A worker's recent log records, asked of it as ``Client.get_worker_logs`` does.

Addresses and keys are URL-quoted path segments; a key is its ``str``
(``('x', 0)`` for a tuple key).  The pages are written with the Jinja2
templates of ``distributed/http/templates`` (autoescaped) inside the
dashboard's page template (:mod:`distributed.dashboard.templates`); their
links are relative, so they work behind a proxy that serves them elsewhere.

Each page reads the scheduler's state once per request, on the scheduler's
loop, and lists at most :data:`MAX_LISTED` tasks per list; nothing is kept
between requests.  Call stacks need ``distributed.scheduler.pickle`` (the
worker's answer is unpickled on the scheduler); without it the page says so.
"""

from __future__ import annotations

import ast
import datetime
import functools
import heapq
import itertools
import json
import time
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import tornado.web
from dask.utils import format_bytes, format_time

from distributed.dashboard.templates import render_page
from distributed.diagnostics.call_stack import task_call_stacks
from distributed.http.server import Route, json_safe
from distributed.protocol import messages as m
from distributed.protocol.messages import FIRE_AND_FORGET
from distributed.protocol.serialize import Serialize, unwrap
from distributed.utils import wait_for

if TYPE_CHECKING:
    from distributed.protocol.messages import Key
    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import TaskState, WorkerState

__all__ = ["MAX_LISTED", "WORKER_TIMEOUT", "counts", "find_task", "info_routes", "render_info", "worker_row"]

#: Most tasks listed on one worker's or one task's page, per list.
MAX_LISTED = 1000

#: Seconds an info page waits for a worker's answer (call stacks, logs).
WORKER_TIMEOUT = 10.0

#: A worker not heard from for this many seconds is marked in the tables (as dask.distributed's are).
STALE_AFTER = 60.0

#: The page the info pages mark in the dashboard's navigation bar.
INFO_PAGE = "/info/main/workers.html"

_TEMPLATES = Path(__file__).parent / "templates"


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


@functools.cache
def templates() -> jinja2.Environment:
    """The info pages' Jinja2 templates (autoescaped), with filters ``bytes``, ``duration`` and ``quote``."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["bytes"] = lambda n: format_bytes(int(n))
    env.filters["duration"] = lambda s: format_time(max(float(s), 0.0))
    # A whole path segment: "/" and ":" of addresses and keys quoted too.
    env.filters["quote"] = lambda s: urllib.parse.quote(str(s), safe="")
    return env


def render_info(title: str, template: str, root: str = "../../", **variables: Any) -> str:
    """A whole info page: ``template`` rendered with ``variables``, inside the dashboard's navigation bar.

    ``root`` leads from the page to the server's root (``"../../"`` from ``/info/<kind>/<name>.html``).
    """
    env = templates()
    body = env.get_template(template).render(**variables)
    head = env.get_template("info_head.html.j2").render()
    return render_page(title, INFO_PAGE, body, head_html=head, root=root)


def _dashboard_url(ws: WorkerState, scheme: str) -> str | None:
    """The worker's own dashboard, when it serves one (its ``services``, as it told the scheduler)."""
    services = ws.extra.get("services")
    port = services.get("dashboard") if isinstance(services, dict) else None
    if not isinstance(port, int) or isinstance(port, bool):
        return None
    host = f"[{ws.host}]" if ":" in ws.host else ws.host
    return f"{scheme}://{host}:{port}/status"


def worker_row(ws: WorkerState, now: float, scheme: str = "http") -> dict[str, Any]:
    """One row of the workers table: what the scheduler knows of ``ws`` as of its last heartbeat."""
    mem = ws.memory
    return {
        "address": ws.address,
        "name": "" if ws.name is None or str(ws.name) == ws.address else str(ws.name),
        "nthreads": ws.nthreads,
        "memory": mem.process,
        "memory_limit": ws.memory_limit,
        "managed": mem.managed,
        "spilled": mem.spilled,
        "processing": len(ws.processing),
        "in_memory": len(ws.has_what),
        "status": ws.status.name,
        "last_seen": max(now - ws.last_seen, 0.0) if ws.last_seen else 0.0,
        "stale": bool(ws.last_seen) and now - ws.last_seen > STALE_AFTER,
        "dashboard": _dashboard_url(ws, scheme),
    }


def _task_item(ts: TaskState) -> dict[str, Any]:
    return {"key": str(ts.key), "state": ts.state, "nbytes": ts.nbytes, "priority": ts.priority}


def _listed(tasks: Iterable[TaskState], total: int) -> dict[str, Any]:
    """At most :data:`MAX_LISTED` of ``tasks`` (of ``total``), as the task list template takes them."""
    shown = [_task_item(ts) for ts in itertools.islice(tasks, MAX_LISTED)]
    return {"tasks": shown, "total": total, "left_out": max(total - len(shown), 0)}


def find_task(scheduler: Scheduler, text: str) -> TaskState | None:
    """The task whose key is written ``text`` (its ``str``), or None.

    A string key is looked up as it is; otherwise ``text`` is read back as the
    literal its ``str`` is (an int, a float, bytes, or a tuple of them, as
    dask keys are), never evaluated, so a lookup costs O(1) and not a scan of
    the tasks.
    """
    ts = scheduler.tasks.get(text)
    if ts is not None or len(text) > 10_000:
        return ts
    try:
        key = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(key, str):
        return None
    try:
        return scheduler.tasks.get(key)
    except TypeError:  # not hashable: a list, a dict
        return None


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


class _SchedulerHandler(tornado.web.RequestHandler):
    scheduler: Scheduler

    def initialize(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def write_json(self, obj: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(json_safe(obj)))

    def write_info(self, title: str, template: str, root: str = "../../", **variables: Any) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(render_info(title, template, root=root, **variables))

    def worker_state(self, address: str) -> WorkerState:
        """The worker at ``address`` (tornado gives path arguments unquoted); 404 when there is none."""
        ws = self.scheduler.workers.get(address)
        if ws is None:
            raise tornado.web.HTTPError(404, reason="No such worker")
        return ws

    def task_state(self, key: str) -> TaskState:
        ts = find_task(self.scheduler, key)
        if ts is None:
            raise tornado.web.HTTPError(404, reason="No such task")
        return ts


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
        self.write_info("Dask: JSON routes", "json_index.html.j2", root="../", paths=["counts.json", "identity.json"])


class SitemapJSON(tornado.web.RequestHandler):
    """``/sitemap.json``: ``{"paths": [...]}``."""

    paths: Callable[[], list[str]]

    def initialize(self, paths: Callable[[], list[str]]) -> None:
        self.paths = paths

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"paths": self.paths()}))


class WorkersInfo(_SchedulerHandler):
    """``/info/main/workers.html``: the workers, sorted by name."""

    def get(self) -> None:
        s = self.scheduler
        now = time.time()
        workers = sorted(s.workers.values(), key=lambda ws: str(ws.name))
        rows = [worker_row(ws, now, self.request.protocol) for ws in workers]
        self.write_info(
            "Dask: Workers",
            "workers.html.j2",
            address=s.address,
            rows=rows,
            threads=sum(ws.nthreads for ws in workers),
            memory=sum(r["memory"] for r in rows),
            limit=sum(ws.memory_limit or 0 for ws in workers),
            tasks=len(s.tasks),
        )


class WorkerInfo(_SchedulerHandler):
    """``/info/worker/<address>.html``."""

    def get(self, address: str) -> None:
        ws = self.worker_state(address)
        mem = ws.memory
        facts = [
            ("Status", ws.status.name),
            ("Process id", ws.pid),
            ("Host", ws.host),
            ("Nanny", ws.nanny or "none"),
            ("Local directory", ws.local_directory),
            ("Memory (process)", format_bytes(mem.process)),
            ("Managed (results held)", format_bytes(mem.managed)),
            ("Unmanaged", format_bytes(mem.unmanaged)),
            ("Spilled to disk", format_bytes(mem.spilled)),
            ("Memory limit", format_bytes(ws.memory_limit) if ws.memory_limit else "none"),
        ]
        resources = [(name, ws.used_resources.get(name, 0), total) for name, total in sorted(ws.resources.items())]
        processing = heapq.nsmallest(MAX_LISTED, ws.processing, key=lambda ts: ts.priority)
        self.write_info(
            f"Dask: Worker {ws.address}",
            "worker.html.j2",
            ws=ws,
            rows=[worker_row(ws, time.time(), self.request.protocol)],
            facts=facts,
            resources=resources,
            processing=_listed(processing, len(ws.processing)),
            held=_listed(ws.has_what, len(ws.has_what)),
            held_bytes=ws.nbytes,
        )


class TaskInfo(_SchedulerHandler):
    """``/info/task/<key>.html`` (the key as ``str(key)``, URL-quoted)."""

    def get(self, key: str) -> None:
        ts = self.task_state(key)
        extras: list[tuple[str, Any]] = [("Group", ts.group.name)]
        for name, value in (
            ("Retries left", ts.retries),
            ("Suspicious (workers lost while running it)", ts.suspicious),
            ("Worker restrictions", ts.worker_restrictions),
            ("Host restrictions", ts.host_restrictions),
            ("Resource restrictions", ts.resource_restrictions),
            ("Loose restrictions", ts.loose_restrictions),
            ("Lost dependencies", ts.has_lost_dependencies),
            ("Annotations", dict(ts.annotations)),
            ("Metadata", ts.metadata),
            ("Erred on", sorted(ts.erred_on) if ts.erred_on else None),
        ):
            if value:
                extras.append((name, value))
        traceback = next((e.traceback_text for e in self.scheduler.erred_tasks if e.key == ts.key), "")
        story = self.scheduler.story(ts.key)[-MAX_LISTED:]
        self.write_info(
            f"Dask: Task {ts.key}",
            "task.html.j2",
            key=str(ts.key),
            ts=ts,
            extras=extras,
            traceback=traceback,
            waiting_on=_listed(ts.waiting_on, len(ts.waiting_on)),
            dependencies=_listed(ts.dependencies, len(ts.dependencies)),
            dependents=_listed(ts.dependents, len(ts.dependents)),
            story=[(_when(t), start, finish, stimulus) for _, start, finish, stimulus, t in story],
        )


class ExceptionsInfo(_SchedulerHandler):
    """``/info/main/exceptions.html``: the latest erred tasks (``distributed.diagnostics.erred-tasks.max-history``)."""

    def get(self) -> None:
        erred = [
            {
                "key": str(e.key),
                "when": _when(e.timestamp),
                "erred_on": sorted(e.erred_on),
                "exception_text": e.exception_text,
                "traceback_text": e.traceback_text,
            }
            for e in self.scheduler.erred_tasks
        ]
        self.write_info("Dask: Exceptions", "exceptions.html.j2", erred=erred)


class SchedulerLogs(_SchedulerHandler):
    """``/info/main/logs.html``: the scheduler's recent log records, newest first."""

    def get(self) -> None:
        logs = [(str(r[0]), str(r[1])) for r in reversed(self.scheduler.get_logs())]
        self.write_info("Dask: Scheduler logs", "logs.html.j2", heading="Scheduler logs", logs=logs, error="")


async def _ask_worker(scheduler: Scheduler, address: str, request: Any) -> Any:
    """``request``'s answer from the worker at ``address``, within :data:`WORKER_TIMEOUT` seconds."""
    return await wait_for(scheduler.rpc.call(address, request), WORKER_TIMEOUT)


async def call_stacks(scheduler: Scheduler, address: str, keys: list[Key] | None) -> dict[Key, list[str]]:
    """The call stacks of the tasks running on the worker at ``address`` (of ``keys`` only, when given).

    Asked as ``Client.call_stack`` asks: the worker runs
    :func:`~distributed.diagnostics.call_stack.task_call_stacks`.

    Raises
    ------
    PermissionError
        With ``distributed.scheduler.pickle`` False: the answer would be unpickled here.
    """
    if not scheduler.allow_pickle:
        raise PermissionError(
            "Call stacks are not shown: the worker's answer is pickled, and 'distributed.scheduler.pickle' "
            "forbids the scheduler to unpickle"
        )
    request = m.RunFunction(op="run", function=Serialize(task_call_stacks), kwargs=Serialize({"keys": keys}))
    stacks = unwrap(await _ask_worker(scheduler, address, request))
    return dict(stacks or {})


def _failure(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return f"The worker did not answer within {WORKER_TIMEOUT:g} s"
    return f"{type(e).__name__}: {e}"


class _CallStacksHandler(_SchedulerHandler):
    """A page of the call stacks of tasks running on one worker."""

    async def write_call_stacks(
        self, worker: str | None, keys: list[Key] | None, title: str, heading: str, empty: str
    ) -> None:
        """Ask ``worker`` for the call stacks of ``keys`` (of every task it runs: None), and write them.

        Without a worker, or without a stack, the page says ``empty``.  A
        worker that fails to answer makes the page a 502 saying so (not when
        the scheduler may not unpickle the answer: that is no failure of the worker).
        """
        error = ""
        found: dict[Key, list[str]] = {}
        if worker is not None:
            try:
                found = await call_stacks(self.scheduler, worker, keys)
            except Exception as e:
                error = _failure(e)
                if not isinstance(e, PermissionError):
                    self.set_status(502)
        stacks = [(worker, [(str(k), lines) for k, lines in found.items()])] if found and worker else []
        self.write_info(title, "call_stacks.html.j2", heading=heading, call_stacks=stacks, error=error, empty=empty)


class WorkerCallStacks(_CallStacksHandler):
    """``/info/call-stacks/<address>.html``: where each task running on the worker is in its code."""

    async def get(self, address: str) -> None:
        ws = self.worker_state(address)
        await self.write_call_stacks(
            ws.address,
            None,
            f"Dask: Call stacks on {ws.address}",
            heading=f"Call stacks of the tasks running on {ws.address}",
            empty="No task is running on this worker now.",
        )


class TaskCallStack(_CallStacksHandler):
    """``/info/call-stack/<key>.html``: where the task is in its code, while it runs."""

    async def get(self, key: str) -> None:
        ts = self.task_state(key)
        worker = ts.processing_on.address if ts.processing_on is not None else None
        await self.write_call_stacks(
            worker,
            [ts.key],
            f"Dask: Call stack of {ts.key}",
            heading=f"Call stack of {ts.key}",
            empty="The task is not running now: it may have finished, or not started yet.",
        )


class WorkerLogs(_SchedulerHandler):
    """``/info/logs/<address>.html``: the worker's recent log records, newest first."""

    async def get(self, address: str) -> None:
        ws = self.worker_state(address)
        error = ""
        logs: list[tuple[str, str]] = []
        try:
            records = await _ask_worker(self.scheduler, ws.address, m.GetLogs(op="get_logs", n=None))
            logs = [(str(r[0]), str(r[1])) for r in reversed(records)]
        except Exception as e:
            error = _failure(e)
            self.set_status(502)
        self.write_info(
            f"Dask: Logs of {ws.address}", "logs.html.j2", heading=f"Logs of {ws.address}", logs=logs, error=error
        )


def info_routes(scheduler: Scheduler, paths: Callable[[], list[str]]) -> list[Route]:
    """The JSON and info routes for ``scheduler``; ``/sitemap.json`` lists what ``paths()`` returns."""
    s = {"scheduler": scheduler}
    return [
        (r"/json/counts\.json", CountsJSON, s),
        (r"/json/identity\.json", IdentityJSON, s),
        (r"/json/index\.html", JSONIndex, s),
        (r"/sitemap\.json", SitemapJSON, {"paths": paths}),
        (r"/info/main/workers\.html", WorkersInfo, s),
        (r"/info/main/exceptions\.html", ExceptionsInfo, s),
        (r"/info/main/logs\.html", SchedulerLogs, s),
        (r"/info/worker/(.+)\.html", WorkerInfo, s),
        (r"/info/task/(.+)\.html", TaskInfo, s),
        (r"/info/call-stacks/(.+)\.html", WorkerCallStacks, s),
        (r"/info/call-stack/(.+)\.html", TaskCallStack, s),
        (r"/info/logs/(.+)\.html", WorkerLogs, s),
    ]
