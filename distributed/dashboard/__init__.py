"""Bokeh figures of the cluster's activity, for the dashboard and for static reports."""
