"""The dashboard's HTML page template: the navigation bar and the pages' CSS, as Jinja2 templates.

Every page of the scheduler's dashboard (the bokeh documents, and the plain
HTML pages that tornado handlers write, such as ``/info/...``) is drawn on
``base.html.j2``: a navigation bar of the pages (Status, Workers, Tasks,
System, Profile, Graph, Groups, Info) with a "More" menu of the single-pane
pages (``/individual-*``), and the CSS of the whole page, inlined so that a
page loads no stylesheet of its own.

Two ways in:

* :func:`render_page` for a handler that makes its own HTML body;
* :func:`bokeh_template` and :func:`page_variables` for a bokeh document
  (``doc.template`` and ``doc.template_variables``); :func:`pane_variables`
  for a single-pane page, drawn without the bar (``pane.html.j2``).

Templates that want more than a body can ``{% extends "base.html.j2" %}``
in :func:`environment`, which loads this package's ``*.html.j2`` files.

Links are root-relative (``/status``), as the server serves its routes at
``/``; ``root`` changes the prefix when a page is served elsewhere.

This module knows the pages by path only; it imports nothing of the
scheduler or the worker, so both sides' pages can use it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jinja2

__all__ = [
    "INDIVIDUAL_PAGES",
    "NAV_PAGES",
    "bokeh_template",
    "environment",
    "individual_title",
    "page_variables",
    "pane_variables",
    "render_page",
]

#: The navigation bar: (title, path) of each page, in order.
NAV_PAGES: tuple[tuple[str, str], ...] = (
    ("Status", "/status"),
    ("Workers", "/workers"),
    ("Tasks", "/tasks"),
    ("System", "/system"),
    ("Profile", "/profile"),
    ("Graph", "/graph"),
    ("Groups", "/groups"),
    ("Info", "/info/main/workers.html"),
)

#: The single-pane pages (one plot or table each), as dask-labextension lists them from ``/individual-plots.json``.
INDIVIDUAL_PAGES: tuple[str, ...] = (
    "/individual-task-stream",
    "/individual-progress",
    "/individual-graph",
    "/individual-groups",
    "/individual-workers-memory",
    "/individual-cluster-memory",
    "/individual-cpu",
    "/individual-nprocessing",
    "/individual-occupancy",
    "/individual-workers-transfer-bytes",
    "/individual-workers",
    "/individual-workers-cpu-timeseries",
    "/individual-workers-memory-timeseries",
    "/individual-compute-time-per-key",
    "/individual-scheduler-system",
    "/individual-profile",
)

_DIRECTORY = Path(__file__).parent

#: Words that title-casing would spell wrongly.
_ACRONYMS = {"Cpu": "CPU", "Gpu": "GPU", "Rmm": "RMM"}


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja2 environment of this package's templates (base, page, pane and bokeh ``.html.j2``).

    Autoescaping is on: variables are HTML-escaped unless marked safe
    (``body_html`` and the bokeh parts are). The environment is made once
    and shared; templates are compiled once.
    """
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_DIRECTORY)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def individual_title(path: str) -> str:
    """The name of a single-pane page as the "More" menu shows it: ``/individual-cpu`` -> ``CPU``."""
    words = path.strip("/").split("-")
    if words and words[0] == "individual":
        words = words[1:]
    return " ".join(_ACRONYMS.get(w.title(), w.title()) for w in words)


def page_variables(
    active: str,
    root: str = "/",
    nav: Sequence[tuple[str, str]] | None = None,
    more: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The template variables of the navigation bar.

    Parameters
    ----------
    active
        The path of the page shown (``"/status"``), marked in the bar; a path
        not in the bar marks nothing.
    root
        Put before each path without its leading ``/``: ``"/"`` gives
        root-relative links; ``"../"`` links relative to a page one level down.
    nav
        (title, path) of the bar's pages; :data:`NAV_PAGES` by default.
    more
        Paths listed under "More"; :data:`INDIVIDUAL_PAGES` by default, none
        when empty.
    """
    pages = NAV_PAGES if nav is None else nav
    paths = INDIVIDUAL_PAGES if more is None else tuple(more)
    return {
        "pane": False,
        "nav": [{"title": title, "href": root + path.lstrip("/"), "active": path == active} for title, path in pages],
        "more": sorted(
            ({"title": individual_title(p), "href": root + p.lstrip("/")} for p in paths), key=lambda d: d["title"]
        ),
    }


def pane_variables() -> dict[str, Any]:
    """The template variables of a single-pane page (``/individual-*``): no navigation bar, the pane fills the window.

    Such pages are shown inside frames of their own (dask-labextension's
    panels), where a bar would take room from the plot.
    """
    return {"pane": True, "nav": [], "more": []}


def render_page(
    title: str,
    active: str,
    body_html: str,
    *,
    head_html: str = "",
    root: str = "/",
    nav: Sequence[tuple[str, str]] | None = None,
    more: Iterable[str] | None = None,
) -> str:
    """A whole HTML page: the navigation bar, then ``body_html``.

    Parameters
    ----------
    title
        The page's ``<title>`` (escaped here).
    active
        The path marked in the navigation bar (see :func:`page_variables`).
    body_html
        The page's content, as HTML: written as given, so the caller escapes
        what it took from elsewhere.
    head_html
        Extra HTML for ``<head>`` (a ``<style>`` or ``<script>`` of the page), as given.
    root, nav, more
        As for :func:`page_variables`.

    Examples
    --------
    >>> html = render_page("Dask: Workers", "/info/main/workers.html", "<h1>Workers</h1>")
    >>> '<a href="/status">Status</a>' in html
    True
    """
    variables = page_variables(active, root=root, nav=nav, more=more)
    return (
        environment()
        .get_template("page.html.j2")
        .render(title=title, body_html=body_html, head_html=head_html, **variables)
    )


def bokeh_template() -> jinja2.Template:
    """The template of a bokeh server document (``doc.template``): its roots inside the navigation bar.

    Give the document :func:`page_variables` (or :func:`pane_variables`) as
    ``doc.template_variables``; bokeh adds BokehJS (from the installed package), the roots and the
    script connecting them.
    """
    return environment().get_template("bokeh.html.j2")
