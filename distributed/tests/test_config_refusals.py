"""Every config key of released dask.distributed is honoured here or refused by name, never neither."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import pytest
import yaml

import distributed
from distributed import Client, Nanny, Scheduler, Worker
from distributed.config import deprecations
from distributed.config_refusals import (
    INERT,
    NOT_HONOURED,
    Role,
    UnhonouredConfigError,
    refuse_unhonoured_config,
    released_aliases,
    released_defaults,
)
from distributed.deploy.spec import SpecCluster

PACKAGE = Path(distributed.__file__).parent


def _our_keys() -> set[str]:
    """The dotted keys of this package's defaults (a mapping with free keys counts as one)."""
    with open(PACKAGE / "distributed.yaml") as f:
        defaults = yaml.safe_load(f)
    keys: set[str] = set()

    def walk(node: Any, path: str) -> None:
        keys.add(path)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}")

    walk(defaults["distributed"], "distributed")
    return keys


def test_every_released_key_is_honoured_or_refused() -> None:
    ours = _our_keys()
    released = released_defaults()
    assert len(released) > 140  # the list shipped as data is whole
    neither = sorted(k for k in released if k not in ours and k not in NOT_HONOURED and k not in INERT)
    assert not neither, f"keys of dask.distributed neither honoured nor refused: {neither}"
    # A key honoured now leaves the refusals; a refusal names only released keys.
    both = sorted(k for k in NOT_HONOURED if k in ours)
    assert not both, f"keys both in distributed.yaml and refused: {both}"
    unknown = sorted(k for k in [*NOT_HONOURED, *INERT] if k not in released)
    assert not unknown, f"refused keys dask.distributed does not have: {unknown}"


def test_every_released_alias_is_renamed_as_dask_does() -> None:
    ours = _our_keys()
    for alias, target in released_aliases().items():
        if alias in ours:
            continue  # a key of this package under that name (it keeps its meaning here)
        assert deprecations.get(alias) == target, alias


def test_an_old_name_reaches_the_refusal_of_its_key() -> None:
    with (
        pytest.warns(FutureWarning, match="distributed.dashboard.export-tool"),
        dask.config.set({"bokeh-export-tool": True}),
    ):
        with pytest.raises(UnhonouredConfigError, match="dashboard.export-tool"):
            refuse_unhonoured_config("scheduler")


def _not_default(key: str) -> Any:
    """A value of ``key`` that is neither dask.distributed's default nor one this package accepts anyway."""
    default = released_defaults()[key]
    candidates: list[Any] = [not default] if isinstance(default, bool) else []
    if isinstance(default, int | float) and not isinstance(default, bool):
        candidates.append(default + 3)
    candidates.append("a value other than the default")
    accepted = NOT_HONOURED[key].accepted
    return next(c for c in candidates if c not in accepted)


@pytest.mark.parametrize(
    "key, value, refused",
    [
        # The shard size's default is "64MiB".
        ("distributed.comm.shard", "64 MiB", False),
        ("distributed.comm.shard", 64 * 2**20, False),
        ("distributed.comm.shard", "64MiB", False),
        ("distributed.comm.shard", "1MiB", True),
        ("distributed.comm.shard", None, True),
        # No GPU is monitored here: asking for no monitoring is what happens anyway.
        ("distributed.diagnostics.nvml", False, False),
    ],
)
def test_a_value_meaning_the_default_or_what_happens_anyway_is_not_refused(key: str, value: Any, refused: bool) -> None:
    role = NOT_HONOURED[key].roles[0]
    with dask.config.set({key: value}):
        if refused:
            with pytest.raises(UnhonouredConfigError, match=key):
                refuse_unhonoured_config(role)
        else:
            refuse_unhonoured_config(role)


def _make(role: Role) -> Callable[[], object]:
    """Construct (not start) what checks ``role``'s keys: construction is where the refusal happens."""
    makers: dict[Role, Callable[[], object]] = {
        "scheduler": lambda: Scheduler(dashboard=False),
        "worker": lambda: Worker("tcp://127.0.0.1:1"),
        "nanny": lambda: Nanny("tcp://127.0.0.1:1"),
        "client": lambda: Client("tcp://127.0.0.1:1", asynchronous=True),
        "cluster": lambda: SpecCluster(workers={}, asynchronous=True),
    }
    return makers[role]


def _refused_cases() -> list[Any]:
    return [
        pytest.param(key, role, id=f"{key}-{role}") for key, refusal in NOT_HONOURED.items() for role in refusal.roles
    ]


@pytest.mark.parametrize("key, role", _refused_cases())
def test_a_refused_key_stops_what_would_act_on_it(key: str, role: Role) -> None:
    with dask.config.set({key: _not_default(key)}), pytest.raises(UnhonouredConfigError, match=key):
        _make(role)()
