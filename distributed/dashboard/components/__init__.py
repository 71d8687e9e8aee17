"""Figure builders: functions and classes that take data and return bokeh models."""
