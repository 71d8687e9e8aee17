"""Which client dask uses (default and current clients), without a cluster."""

from __future__ import annotations

from collections.abc import Iterator

import dask.config
import pytest

from distributed.client.defaults import (
    AsCurrent,
    ClientContext,
    current_client,
    get_default_client,
    global_clients,
)


class StubClient:
    """What the default-client bookkeeping reads of a client: its status."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.status = "running"
        self.context = ClientContext(self)  # type: ignore[arg-type]  # a stand-in client


@pytest.fixture
def no_defaults() -> Iterator[None]:
    """Whatever a test makes default, dask's config is as before afterwards."""
    before = dask.config.get("scheduler", None)
    yield
    assert dask.config.get("scheduler", None) == before


def test_the_newest_open_default_client_is_used_and_config_waits_for_the_last(no_defaults: None) -> None:
    before = dask.config.get("scheduler", None)
    a, b = StubClient("a"), StubClient("b")
    a.context.make_default()
    b.context.make_default()
    assert dask.config.get("scheduler") == "dask.distributed"
    # Left to dask, which rechunks large arrays with P2P when a client is in use.
    assert dask.config.get("array.rechunk.method", None) is None
    assert global_clients()[-2:] == [a, b]  # type: ignore[comparison-overlap]  # stand-ins
    assert get_default_client() is b  # type: ignore[comparison-overlap]
    b.status = "closed"
    assert get_default_client() is a  # type: ignore[comparison-overlap]
    b.context.leave()
    # a is still open: dask keeps using the distributed scheduler.
    assert dask.config.get("scheduler") == "dask.distributed"
    assert b not in global_clients()  # type: ignore[comparison-overlap]
    a.status = "closed"
    a.context.leave()
    assert dask.config.get("scheduler", None) == before


def test_the_current_client_comes_before_the_defaults(no_defaults: None) -> None:
    a, b = StubClient("a"), StubClient("b")
    a.context.make_default()
    try:
        b.context.enter()
        assert current_client() is b  # type: ignore[comparison-overlap]
        assert get_default_client() is b  # type: ignore[comparison-overlap]
        b.context.exit()
        assert current_client() is a  # type: ignore[comparison-overlap]
        with pytest.raises(ValueError, match="No client is current"):
            current_client(allow_global=False)
        b.context.exit()  # nothing entered: nothing to undo
    finally:
        a.status = "closed"
        a.context.leave()


def test_as_current_sets_the_client_and_the_config_inside_only(no_defaults: None) -> None:
    c = StubClient("c")
    before = dask.config.get("scheduler", None)
    with AsCurrent(c) as inside:  # type: ignore[arg-type]  # a stand-in client
        assert inside is c  # type: ignore[comparison-overlap]
        assert current_client(allow_global=False) is c  # type: ignore[comparison-overlap]
        assert dask.config.get("scheduler") == "dask.distributed"
    assert dask.config.get("scheduler", None) == before
    with pytest.raises(ValueError):
        current_client(allow_global=False)
