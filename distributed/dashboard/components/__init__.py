"""Plots and tables of the dashboard, each a bokeh model (``root``) with an ``update()``."""
