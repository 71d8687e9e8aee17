"""What notebooks show of the package's objects: HTML views, and the interactive cluster widget.

:mod:`~distributed.widgets.views` renders clients, clusters, scheduler info,
futures and security settings as self-contained HTML from plain data, with
the Jinja2 templates of :mod:`~distributed.widgets.rendering`;
:mod:`~distributed.widgets.cluster_widget` is the ipywidgets widget of a
cluster (optional: without ipywidgets, clusters show their HTML).  Nothing
here imports the scheduler, the client or the deployments: they hand their
data in.
"""

from __future__ import annotations

from distributed.widgets import views
from distributed.widgets.cluster_widget import ClusterWidget
from distributed.widgets.rendering import get_environment, get_template, render, template_names
from distributed.widgets.views import *  # noqa: F403  (every view, as views.__all__ lists them)

__all__ = ["ClusterWidget", "get_environment", "get_template", "render", "template_names"]
__all__ += views.__all__
