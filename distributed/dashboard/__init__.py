"""Bokeh figures of the cluster's activity: the scheduler's live dashboard and static reports.

:mod:`distributed.dashboard.core` embeds a bokeh server application in the
scheduler's tornado application; :mod:`distributed.dashboard.scheduler` says
which pages there are; :mod:`distributed.dashboard.templates` draws every page
(bokeh's and plain HTML ones) with the same navigation bar;
:mod:`distributed.dashboard.components` has the plots and tables they, and the
reports (:mod:`distributed.dashboard.report`), are made of.
"""

from __future__ import annotations

from distributed.dashboard.core import BokehDashboard, bokeh_available

__all__ = ["BokehDashboard", "bokeh_available"]
