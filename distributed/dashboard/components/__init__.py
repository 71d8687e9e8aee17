"""Figure builders: functions and classes that take data (or the scheduler) and return bokeh models.

The live ones keep a bokeh model (``root``) and have an ``update()`` that a
page's periodic callback runs.
"""
