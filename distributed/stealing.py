"""``from distributed.stealing import WorkStealing`` keeps working.

Work stealing lives in :mod:`distributed.scheduler.stealing`.
"""

from __future__ import annotations

from distributed.scheduler.stealing import WorkStealing

__all__ = ["WorkStealing"]
