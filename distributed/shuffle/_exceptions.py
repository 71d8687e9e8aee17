"""Errors of P2P shuffles."""

from __future__ import annotations

__all__ = ["ShuffleRunRefused"]


class ShuffleRunRefused(RuntimeError):
    """Shards, a barrier or a request named a run of a shuffle that is not (or no longer) the current one."""
