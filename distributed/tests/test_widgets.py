"""The notebook side: HTML views of clients, clusters, scheduler info, futures and security; the cluster widget.

Views are checked on real objects (a LocalCluster, its client and futures)
for what they say, and checked as HTML: balanced, nested as HTML allows, and
self-contained.  The cluster widget's buttons are clicked from Python and
really scale a LocalCluster or make it adaptive.  A real Jupyter kernel shows
that a notebook gets the widget (with the HTML beside it), that ``progress``
is a widget there, and that without ipywidgets both fall back to their text
and HTML forms.
"""

from __future__ import annotations

import html.parser
import importlib
import importlib.resources
import json
import os
import re
import sys
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import pytest

from distributed import Client, LocalCluster, Security, SpecCluster, Worker, progress
from distributed.diagnostics.progressbar import MultiProgressBar, MultiProgressWidget
from distributed.utils_test import inc, poll_for
from distributed.widgets import (
    ClusterWidget,
    SchedulerInfo,
    future_html,
    get_template,
    scheduler_info_html,
    template_names,
)

ROOT = Path(__file__).resolve().parents[2]

# -- HTML checks ----------------------------------------------------------------------------------
#: Elements that have no end tag.
VOID = {"br", "hr", "img", "input", "meta", "link", "col", "wbr", "source", "area", "base"}
#: Elements the views may use; anything else (script, style, img, iframe, link, ...) fails the check.
ALLOWED = {"div", "span", "strong", "a", "p", "table", "tbody", "tr", "td", "th", "details", "summary", "br"}
#: Elements that only phrasing content may go in.
PHRASING_ONLY = {"p", "span", "strong", "a", "summary", "th"}
#: Elements that are not phrasing content.
BLOCK = {"div", "p", "table", "tbody", "tr", "td", "th", "details", "summary"}
#: Where table parts may stand.
PARENTS = {"tbody": {"table"}, "tr": {"tbody"}, "td": {"tr"}, "th": {"tr"}, "summary": {"details"}}


class StrictHTML(html.parser.HTMLParser):
    """Collects the problems of an HTML fragment, and its elements in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.tags: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in ALLOWED:
            self.problems.append(f"<{tag}> is not allowed")
        parent = self.stack[-1] if self.stack else None
        if tag in PARENTS and parent not in PARENTS[tag]:
            self.problems.append(f"<{tag}> inside <{parent}>")
        if parent in ("table", "tr") and tag not in ("tbody", "td", "th"):
            self.problems.append(f"<{tag}> directly inside <{parent}>")
        if tag in BLOCK and any(open_tag in PHRASING_ONLY for open_tag in self.stack):
            self.problems.append(f"<{tag}> inside phrasing content {self.stack}")
        for name, value in attrs:
            if name.startswith("on") or name in ("src", "srcset"):
                self.problems.append(f"<{tag} {name}=...>: nothing may run or load")
            if name == "href":
                self.links.append(value or "")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()


def check_html(text: str) -> StrictHTML:
    """Parse a view; fail listing its problems (unbalanced or misnested tags, disallowed elements)."""
    parser = StrictHTML()
    parser.feed(text)
    parser.close()
    problems = parser.problems + ([f"unclosed: {parser.stack}"] if parser.stack else [])
    assert not problems, problems
    assert all(link.startswith(("http://", "https://")) for link in parser.links), parser.links
    # A <details> starts with its <summary>.
    assert text.count("<details") == len(re.findall(r"<details[^>]*>\s*<summary", text))
    return parser


def fields(html_text: str) -> dict[str, str]:
    """The text of each ``data-field`` cell (the first of each name), tags stripped."""
    out: dict[str, str] = {}
    for m in re.finditer(r'data-field="([^"]+)"[^>]*>(.*?)</(td|span|p)>', html_text, re.S):
        out.setdefault(m.group(1), re.sub(r"<[^>]+>", "", m.group(2)).strip())
    return out


def in_section(html_text: str, key: str) -> str:
    start = html_text.index(f'data-section="{key}"')
    return html_text[start:]


# -- the templates ship with the package --------------------------------------------------------
@pytest.mark.timeout(30)
def test_the_templates_are_package_data() -> None:
    folder = importlib.resources.files("distributed.widgets") / "templates"
    found = sorted(p.name for p in folder.iterdir() if p.name.endswith(".html.j2"))
    assert found == template_names() and "cluster.html.j2" in found and "client.html.j2" in found
    # The wheel takes what pyproject's package data names: every template matches its glob.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["distributed.widgets"]
    assert all(any(fnmatch(f"templates/{name}", g) for g in globs) for name in found), (found, globs)
    assert (
        get_template("future.html.j2")
        .render(name="x", key="x-1", status="pending", status_color="red", type_name=None)
        .startswith('<div data-repr="future"')
    )


# -- views from data ----------------------------------------------------------------------------------
INFO: dict[str, Any] = {
    "type": "Scheduler",
    "id": "Scheduler-abc",
    "address": "tcp://10.1.2.3:8786",
    "services": {"dashboard": 8787},
    "started": 1000.0,
    "n_workers": 3,
    "total_threads": 6,
    "total_memory": 3 * 2**30,
    "workers": {
        "tcp://10.1.2.3:4002": {"name": 10, "nthreads": 2, "memory_limit": 2**30, "type": "Worker"},
        "tcp://10.1.2.3:4001": {
            "name": 2,
            "nthreads": 2,
            "memory_limit": 0,
            "nanny": "tcp://10.1.2.3:5001",
            "services": {"dashboard": 9001},
            "metrics": {"cpu": 12.5, "executing": 1, "in_memory": 4, "memory": 5 * 2**20, "spilled_bytes": {"disk": 0}},
            "last_seen": 1090.0,
            "local_directory": "/tmp/<dask>",
            "type": "Worker",
        },
        "tcp://10.1.2.3:4003": {"name": "<b>odd</b>", "nthreads": 2, "memory_limit": 2**30, "type": "Worker"},
    },
}


@pytest.mark.timeout(30)
def test_scheduler_info_view_lists_every_worker_with_its_details() -> None:
    text = str(scheduler_info_html(INFO, now=1100.0))
    check_html(text)
    top = fields(text)
    assert top["address"] == "Comm: tcp://10.1.2.3:8786"
    assert top["workers"] == "Workers: 3" and top["threads"] == "Total threads: 6"
    assert top["started"] == "Started: 1 minute ago"
    assert 'href="http://10.1.2.3:8787/status"' in text
    # Numeric names in numeric order, then the others; each worker collapsed in its own <details>.
    assert re.findall(r'data-worker="([^"]+)"', text) == [
        "tcp://10.1.2.3:4001",
        "tcp://10.1.2.3:4002",
        "tcp://10.1.2.3:4003",
    ]
    worker = fields(text[text.index('data-worker="tcp://10.1.2.3:4001"') :])
    assert worker["memory-limit"] == "Memory: unlimited" and worker["nanny"] == "Nanny: tcp://10.1.2.3:5001"
    assert worker["cpu"] == "CPU usage: 12.5%" and worker["memory-used"] == "Memory usage: 5.00 MiB"
    assert worker["last-seen"] == "Last seen: 10 seconds ago"
    assert worker["local-directory"] == "Local directory: /tmp/&lt;dask&gt;"
    assert 'href="http://10.1.2.3:9001/status"' in text  # the worker's own dashboard
    # Names are text, never markup.
    assert "<b>odd</b>" not in text and "Worker: &lt;b&gt;odd&lt;/b&gt;" in text
    assert "<details" in text and " open" not in text


@pytest.mark.timeout(30)
def test_a_partial_worker_list_says_so_and_keeps_the_schedulers_totals() -> None:
    first = dict(list(INFO["workers"].items())[:1])
    text = SchedulerInfo({**INFO, "workers": first})._repr_html_()
    check_html(text)
    assert fields(text)["workers"] == "Workers: 3 (shown below: 1)"
    assert fields(text)["memory"] == "Total memory: 3.00 GiB" and "Workers (1 of 3)" in text
    empty = str(scheduler_info_html({"address": "inproc://1/0", "n_workers": 0, "workers": {}}))
    check_html(empty)
    assert fields(empty)["no-workers"] == "No workers." and fields(empty)["dashboard"] == "Dashboard: none"


@pytest.mark.timeout(30)
def test_future_view_colours_its_status() -> None:
    text = str(future_html(key=("<i>load-1", 0), status="error", type_name=None))
    check_html(text)
    assert fields(text) == {"status": "error", "key": "(&#39;&lt;i&gt;load-1&#39;, 0)"}
    assert "<i>" not in text and "jp-error-color1" in text


# -- real objects -----------------------------------------------------------------------------------------
@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=":0") as c:
        c.wait_for_workers(2, timeout=30)
        yield c


@pytest.mark.timeout(60)
def test_cluster_repr_names_its_id(cluster: LocalCluster) -> None:
    assert re.fullmatch(r"[0-9a-f]{8}", cluster.name)
    limits = sum(w.memory_limit for w in cluster.workers.values() if isinstance(w, Worker))
    expected = (
        f"LocalCluster({cluster.name}, {cluster.scheduler_address!r}, workers=2, threads=2, "
        f"memory={dask.utils.format_bytes(limits)})"
    )
    assert repr(cluster) == expected
    named = LocalCluster(name="etl", n_workers=0, processes=False, dashboard_address=None, asynchronous=True)
    assert repr(named) == "etl(etl, '<Not Connected>', workers=0, threads=0, memory=0 B)"
    spec = SpecCluster(workers={}, asynchronous=True)
    assert re.fullmatch(r"SpecCluster\([0-9a-f]{8}, '<Not Connected>', workers=0, threads=0, memory=0 B\)", repr(spec))


@pytest.mark.timeout(60)
def test_repr_of_an_unlimited_cluster_leaves_out_memory() -> None:
    with LocalCluster(n_workers=1, processes=False, memory_limit=0, dashboard_address=None) as c:
        assert repr(c).endswith(f"workers=1, threads={c.scheduler_info['total_threads']})"), repr(c)
    assert re.fullmatch(r"LocalCluster\(\w{8}, 'inproc://[^']+', workers=0, threads=0, memory=0 B\)", repr(c))


@pytest.mark.timeout(60)
def test_cluster_and_client_views(cluster: LocalCluster) -> None:
    link = cluster.dashboard_link
    assert link is not None
    text = cluster._repr_html_()
    check_html(text)
    top = fields(text)
    assert top["id"] == cluster.name and top["dashboard"] == f"Dashboard: {link}"
    assert top["workers"] == "Workers: 2" and top["threads"] == "Total threads: 2"
    assert top["status"] == "Status: running" and top["processes"] == "Using processes: False"
    assert len(re.findall(r"data-worker=", text)) == 2
    with Client(cluster) as client:
        view = client._repr_html_()
        check_html(view)
        got = fields(view)
        assert got["connection"] == "Connection method: Cluster object"
        assert got["cluster-type"] == "Cluster type: distributed.LocalCluster"  # as dask's
        assert got["dashboard"] == f"Dashboard: {link}" and got["workers"] == "Workers: 2"
        assert 'data-section="cluster"' in view and 'data-field="id" style' in view
        assert in_section(view, "cluster").count("data-worker=") == 2
        assert isinstance(client.scheduler_info(), SchedulerInfo)
        future = client.submit(inc, 1)
        assert future.result() == 2
        f_view = future._repr_html_()
        check_html(f_view)
        assert fields(f_view)["status"] == "finished" and fields(f_view)["type"] == "int"
        # A client given the scheduler's address asks for the workers (five at most, as dask's).
        with Client(cluster.scheduler_address, set_as_default=False) as direct:
            d_view = direct._repr_html_()
            check_html(d_view)
            assert fields(d_view)["connection"] == "Connection method: Direct"
            assert fields(d_view)["address"] == f"Scheduler: {cluster.scheduler_address}"
            assert in_section(d_view, "scheduler").count("data-worker=") == 2
        closed = direct._repr_html_()
        check_html(closed)
        assert fields(closed)["status"] == "Status: closed"
    cluster.close()
    after = fields(cluster._repr_html_())
    assert after["workers"] == "Workers: 0" and after["status"] == "Status: closed"
    assert after["memory"] == "Total memory: 0 B"


@pytest.mark.timeout(60)
def test_client_view_before_it_connects() -> None:
    c = Client("tcp://127.0.0.1:1", timeout=0.2, asynchronous=True)
    text = c._repr_html_()
    check_html(text)
    assert fields(text)["no-scheduler"] == "No scheduler connected."
    assert fields(text)["status"] == "Status: newly-created"


@pytest.mark.timeout(60)
def test_security_view_tells_where_credentials_come_from(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    temporary = Security.temporary()
    text = temporary._repr_html_()
    check_html(text)
    assert "BEGIN" not in text
    got = fields(text)
    assert got["tls_ca_file"] == "Temporary (In-memory)" and got["require_encryption"] == "True"
    assert got["tls_min_version"] == "TLSv1_2"
    cert = tmp_path / "cert.pem"
    cert.write_text(temporary.tls_ca_file or "")
    assert fields(Security(tls_ca_file=str(cert))._repr_html_())["tls_ca_file"] == f"Local ({cert})"
    plain = Security()._repr_html_()
    check_html(plain)
    assert "tls_ca_file" not in plain and fields(plain)["require_encryption"] == "False"


# -- the cluster widget -------------------------------------------------------------------------------------
def view_workers(widget: ClusterWidget) -> str:
    return fields(widget.status.value)["workers"]


@pytest.mark.timeout(120)
def test_widget_buttons_scale_and_adapt_a_cluster_of_processes() -> None:
    with (
        dask.config.set({"distributed.adaptive.interval": "100ms", "distributed.adaptive.wait-count": 1}),
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
    ):
        widget = cluster._widget()
        assert widget is not None and cluster._widget() is widget  # made once
        assert widget.workers.value == 1 and widget.adapt_button is not None
        widget.workers.value = 2
        widget.scale_button.click()
        assert len(cluster.workers) == 2
        cluster.wait_for_workers(2, timeout=60)
        assert widget.message.value == ""
        poll_for(lambda: view_workers(widget) == "Workers: 2", timeout=20, what="the widget to show 2 workers")
        assert fields(widget.scaling.value)["mode"] == "Scaling mode: Manual"
        # Adaptive between 1 and 1: it really scales the idle cluster back to one worker.
        widget.minimum.value, widget.maximum.value = 1, 1
        widget.adapt_button.click()
        assert fields(widget.scaling.value)["mode"] == "Scaling mode: Adaptive (minimum 1, maximum 1)"
        poll_for(lambda: len(cluster.scheduler_info["workers"]) == 1, timeout=60, what="adaptive scaling down")
        # Scaling by hand stops adaptive scaling.
        widget.workers.value = 1
        widget.scale_button.click()
        assert fields(widget.scaling.value)["mode"] == "Scaling mode: Manual"


@pytest.mark.timeout(60)
def test_widget_shows_what_a_click_could_not_do(cluster: LocalCluster) -> None:
    widget = cluster._widget()
    assert widget is not None
    widget.workers.value = -1
    widget.scale_button.click()
    assert "Scaling failed: ValueError" in widget.message.value and len(cluster.workers) == 2
    widget.minimum.value, widget.maximum.value = 3, 1
    widget.adapt_button.click()
    assert "Adapting failed: ValueError" in widget.message.value
    assert fields(widget.scaling.value)["mode"] == "Scaling mode: Manual"
    check_html(widget.message.value)


@pytest.mark.timeout(60)
def test_shown_widget_refreshes_until_the_cluster_closes(cluster: LocalCluster) -> None:
    bundle = cluster._repr_mimebundle_()
    widget = cluster._widget()
    assert widget is not None
    assert set(bundle) == {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"}
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.widget.model_id
    assert bundle["text/plain"] == repr(cluster) and 'data-repr="cluster"' in bundle["text/html"]
    assert set(cluster._repr_mimebundle_(include={"text/plain"})) == {"text/plain"}
    assert "text/html" not in cluster._repr_mimebundle_(exclude={"text/html"})
    poll_for(lambda: any(t.get_name() == "cluster-widget-refresh" for t in cluster._tasks), timeout=10)
    assert sum(t.get_name() == "cluster-widget-refresh" for t in cluster._tasks) == 1  # shown twice, one task
    cluster.scale(3)  # not through the widget: the refresh shows it
    poll_for(lambda: view_workers(widget) == "Workers: 3", timeout=20, what="the widget to show 3 workers")
    cluster.close()
    assert not cluster._tasks
    assert fields(widget.status.value)["status"] == "Status: closed"
    assert view_workers(widget) == "Workers: 0"


@pytest.mark.timeout(60)
def test_the_shown_widget_refreshes_every_cluster_repr_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    import itertools
    import time

    refreshed: list[float] = []
    with (
        dask.config.set({"distributed.deploy.cluster-repr-interval": "30ms"}),
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
    ):
        widget = cluster._widget()
        assert widget is not None
        show = widget.refresh

        def counted() -> None:
            refreshed.append(time.monotonic())
            show()

        monkeypatch.setattr(widget, "refresh", counted)
        cluster._repr_mimebundle_()
        poll_for(lambda: len(refreshed) >= 7, timeout=30, what="seven refreshes")
    gaps = sorted(b - a for a, b in itertools.pairwise(refreshed))
    # Each gap is at least the interval; with the default (500 ms) ignored for 30 ms, none would be shorter.
    assert gaps[len(gaps) // 2] < 0.4, gaps


@pytest.mark.timeout(60)
def test_without_ipywidgets_a_cluster_shows_its_html(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets now raises ImportError
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        assert cluster._widget() is None
        bundle = cluster._repr_mimebundle_()
        assert set(bundle) == {"text/plain", "text/html"}
        check_html(bundle["text/html"])
        assert not any(t.get_name() == "cluster-widget-refresh" for t in cluster._tasks)


# -- progress: a widget in a notebook, text elsewhere ---------------------------------------------------------
@pytest.mark.timeout(60)
def test_progress_outside_a_notebook_is_the_text_bar(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    with Client(cluster) as client:
        x = client.persist(da.ones(8, chunks=2) + 1)
        assert progress(x, interval="20ms") is None  # blocked until done, drawing text
        assert "100% Completed" in capsys.readouterr().out
        bar = progress(x, notebook=False, multi=True, interval="20ms")
        assert bar is None
        assert isinstance(MultiProgressBar([x], start=False), MultiProgressBar)
        assert isinstance(progress(x, notebook=True, multi=True), MultiProgressWidget)


# -- in a real Jupyter kernel -------------------------------------------------------------------------------------
class Kernel:
    """A Jupyter kernel of this Python, driven as a notebook front end drives it."""

    def __init__(self, tmp_path: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3", connection_file=str(tmp_path / "kernel.json"))
        self.km.start_kernel(cwd=str(tmp_path))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Execute a cell; its outputs (iopub messages: streams, displays, results, errors)."""
        outputs: list[dict[str, Any]] = []

        def keep(msg: dict[str, Any]) -> None:
            if msg["msg_type"] in ("stream", "display_data", "execute_result", "error"):
                outputs.append({"type": msg["msg_type"], **msg["content"]})

        reply = self.kc.execute_interactive(code, output_hook=keep, timeout=timeout)
        errors = [o for o in outputs if o["type"] == "error"]
        assert reply["content"]["status"] == "ok" and not errors, "\n".join(
            "\n".join(e.get("traceback", [])) for e in errors
        )
        return outputs

    def send_to_widget(self, model_id: str, data: dict[str, Any]) -> None:
        """Send a widget model the message its view in the browser would (a value typed, a click)."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": model_id, "data": data})
        self.kc.shell_channel.send(msg)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def printed(outputs: list[dict[str, Any]]) -> str:
    return "".join(o.get("text", "") for o in outputs if o["type"] == "stream" and o.get("name") == "stdout")


def displayed(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o["data"] for o in outputs if o["type"] in ("display_data", "execute_result")]


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    for module in ("ipykernel", "jupyter_client"):
        if os.environ.get("CI"):
            importlib.import_module(module)  # a test dependency: in CI these tests must run
        else:
            pytest.importorskip(module)
    k = Kernel(tmp_path)
    try:
        yield k
    finally:
        k.close()


SETUP = """
import json, sys
import dask.array as da
from distributed import Client, LocalCluster, progress
cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0")
client = Client(cluster)
"""


@pytest.mark.timeout(240)
def test_in_a_kernel_the_cluster_is_a_widget_and_progress_too(kernel: Kernel) -> None:
    kernel.run(SETUP)
    shown = displayed(kernel.run("cluster"))
    assert len(shown) == 1
    bundle = shown[0]
    assert set(bundle) >= {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"}
    assert bundle["text/plain"].startswith("LocalCluster(") and 'data-repr="cluster"' in bundle["text/html"]
    check_html(bundle["text/html"])
    ids = json.loads(
        printed(
            kernel.run(
                "w = cluster._widget()\n"
                "print(json.dumps({'tab': w.widget.model_id, 'box': w.workers.model_id, 'button': w.scale_button.model_id}))"
            )
        )
    )
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == ids["tab"]
    # As the browser's views do: type 2 in the box, click Scale.
    kernel.send_to_widget(ids["box"], {"method": "update", "state": {"value": 2}, "buffer_paths": []})
    kernel.send_to_widget(ids["button"], {"method": "custom", "content": {"event": "click"}})
    assert printed(kernel.run("print(len(cluster.workers), w.message.value == '')")).split() == ["2", "True"]
    # progress() in a notebook: the widget.
    bar = displayed(kernel.run("x = client.persist(da.ones(8, chunks=2) + 1)\nprogress(x)"))
    assert len(bar) == 1 and "application/vnd.jupyter.widget-view+json" in bar[0]
    assert printed(kernel.run("print(type(progress(x, multi=False)).__name__)")).strip() == "ProgressWidget"
    # Without ipywidgets: the text bar.
    out = kernel.run("sys.modules['ipywidgets'] = None\ny = client.persist(da.ones(8, chunks=2) + 2)\nr = progress(y)")
    assert "100% Completed" in printed(out) and not displayed(out)
    kernel.run("client.close(); cluster.close()")


@pytest.mark.timeout(240)
def test_in_a_kernel_without_ipywidgets_the_cluster_shows_html(kernel: Kernel) -> None:
    kernel.run("import sys; sys.modules['ipywidgets'] = None\n" + SETUP)
    shown = displayed(kernel.run("cluster"))
    assert len(shown) == 1 and set(shown[0]) == {"text/html", "text/plain"}
    out = printed(kernel.run("print(type(progress(client.persist(da.ones(4, chunks=2)), notebook=None)))"))
    assert "100% Completed" in out and out.strip().endswith("<class 'NoneType'>")
    kernel.run("client.close(); cluster.close()")
