"""Actors' public import path: the proxy and its futures live in :mod:`distributed.client.actor`."""

from __future__ import annotations

from distributed.client.actor import Actor, ActorFuture, BaseActorFuture

__all__ = ["Actor", "ActorFuture", "BaseActorFuture"]
