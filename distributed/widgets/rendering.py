"""The Jinja2 environment that renders the notebook views, and the filters their templates use.

The templates are the ``*.html.j2`` files of this package's ``templates``
folder, found through the package's resources (so they load from a wheel as
from a source tree).  Rendering escapes every value (autoescape), except
:class:`markupsafe.Markup`: HTML that another template made, nested as is.
A name a template uses but is not given is an error, not an empty string, so
a missing value shows up in the tests rather than as a blank in a notebook.
"""

from __future__ import annotations

import datetime
import functools
import time
from typing import Any

import jinja2
from dask.utils import format_bytes
from markupsafe import Markup

__all__ = [
    "TEMPLATE_FOLDER",
    "format_time_ago",
    "format_timestamp",
    "get_environment",
    "get_template",
    "render",
    "template_names",
]

#: The folder of this package that holds the templates.
TEMPLATE_FOLDER = "templates"


def format_time_ago(timestamp: float, now: float | None = None) -> str:
    """How long ago ``timestamp`` (seconds since the epoch) was, in words: ``"3 minutes ago"``.

    Coarse on purpose: a view refreshed twice a second changes at most once a second.

    Examples
    --------
    >>> format_time_ago(100.0, now=220.0)
    '2 minutes ago'
    """
    elapsed = (time.time() if now is None else now) - timestamp
    for unit, seconds in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if elapsed >= seconds:
            n = int(elapsed // seconds)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


def format_timestamp(timestamp: float) -> str:
    """A timestamp as local date and time, to the second (``2026-11-30 14:05:09``)."""
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _bytes(n: Any) -> str:
    return format_bytes(int(n or 0))


@functools.cache
def get_environment() -> jinja2.Environment:
    """The environment (made once) that loads and renders the templates."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("distributed.widgets", TEMPLATE_FOLDER),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["format_bytes"] = _bytes
    env.filters["time_ago"] = format_time_ago
    env.filters["timestamp"] = format_timestamp
    return env


def get_template(name: str) -> jinja2.Template:
    """The template ``name`` (say ``"cluster.html.j2"``).

    Raises
    ------
    jinja2.TemplateNotFound
        When the package has no such template.
    """
    return get_environment().get_template(name)


def render(template: str, **context: Any) -> Markup:
    """Render the template named ``template`` with ``context``: HTML, safe to nest in another template."""
    return Markup(get_template(template).render(**context))


def template_names() -> list[str]:
    """The names of the package's templates (the ``*.html.j2`` files)."""
    return sorted(n for n in get_environment().list_templates() if n.endswith(".html.j2"))
