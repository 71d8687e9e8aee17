"""Command-line entry points: ``dask scheduler`` and ``dask worker``.

Each command is a :mod:`click` command named as dask's ``dask_cli`` entry-point
group expects (``scheduler``, ``worker``); both also run as modules
(``python -m distributed.cli.dask_scheduler``) and as the ``dask-scheduler`` /
``dask-worker`` console scripts.
"""

from __future__ import annotations
