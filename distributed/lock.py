"""``from distributed.lock import Lock`` keeps working: the lock lives in :mod:`distributed.coordination`."""

from __future__ import annotations

from distributed.coordination.lock import Lock
from distributed.coordination.lock_extension import LockExtension

__all__ = ["Lock", "LockExtension"]
