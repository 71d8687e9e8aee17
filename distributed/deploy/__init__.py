"""Deploying clusters: a base class, a local cluster, and servers in child processes."""

from __future__ import annotations

from distributed.deploy.cluster import Cluster
from distributed.deploy.local import LocalCluster
from distributed.deploy.spawn import ServerProcess

__all__ = ["Cluster", "LocalCluster", "ServerProcess"]
