"""Deploying clusters.

A base class, clusters made from specs, a local cluster, adaptive scaling and
servers in child processes.
"""

from __future__ import annotations

from distributed.deploy.adaptive import Adaptive
from distributed.deploy.cluster import Cluster
from distributed.deploy.local import LocalCluster
from distributed.deploy.spec import ProcessInterface, SpecCluster
from distributed.deploy.ssh import SSHCluster
from distributed.spawn import ServerProcess, WorkerProcess

__all__ = [
    "Adaptive",
    "Cluster",
    "LocalCluster",
    "ProcessInterface",
    "SSHCluster",
    "ServerProcess",
    "SpecCluster",
    "WorkerProcess",
]
