"""The scheduler's HTTP endpoints, served on 127.0.0.1 by an in-process Scheduler."""

from __future__ import annotations

import asyncio
import json
import math
import operator
import socket
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

from distributed import Client, Scheduler, Worker
from distributed.http.scheduler import start_http_server
from distributed.http.server import json_safe, parse_http_address
from distributed.utils_test import run_async


async def fetch(port: int, path: str, **kwargs: Any) -> HTTPResponse:
    client = AsyncHTTPClient()
    return await client.fetch(f"http://127.0.0.1:{port}{path}", request_timeout=10, **kwargs)


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def workers_total(metrics: dict[str, float]) -> float:
    """``dask_scheduler_workers`` summed over its ``state`` label."""
    return sum(v for k, v in metrics.items() if k.startswith("dask_scheduler_workers{"))


def dashboard_scheduler(**kwargs: Any) -> Scheduler:
    return Scheduler(host="127.0.0.1", port=0, dashboard=True, dashboard_address="127.0.0.1:0", **kwargs)


def test_health_info_metrics() -> None:
    async def body() -> None:
        async with dashboard_scheduler() as s:
            assert s.http_server is not None
            port = s.http_server.port
            assert port > 0
            assert s.identity()["services"] == {"dashboard": port}

            r = await fetch(port, "/health")
            assert r.code == 200
            assert r.body == b"ok"
            assert r.headers["Content-Type"].startswith("text/plain")

            r = await fetch(port, "/info")
            assert r.headers["Content-Type"].startswith("application/json")
            info = json.loads(r.body)
            assert info["address"] == s.address
            assert info["services"] == {"dashboard": port}
            assert info["workers"] == {}

            r = await fetch(port, "/metrics")
            assert r.headers["Content-Type"].startswith("text/plain")
            text = r.body.decode()
            assert "# TYPE dask_scheduler_workers gauge" in text
            metrics = parse_metrics(text)
            assert workers_total(metrics) == 0
            assert metrics['dask_scheduler_workers{state="idle"}'] == 0
            assert metrics["dask_scheduler_clients"] == 0
            assert metrics['dask_scheduler_tasks{state="memory"}'] == 0

    run_async(body, timeout=45)


def test_metrics_follow_the_cluster() -> None:
    async def body() -> None:
        async with dashboard_scheduler() as s:
            assert s.http_server is not None
            port = s.http_server.port
            async with Worker(s.address, nthreads=1), Worker(s.address, nthreads=1):
                async with Client(s.address, asynchronous=True) as c:
                    futures = c.map(operator.add, range(5), range(5))
                    assert await c.gather(futures) == [2 * i for i in range(5)]
                    metrics = parse_metrics((await fetch(port, "/metrics")).body.decode())
                    assert workers_total(metrics) == 2
                    assert metrics["dask_scheduler_clients"] >= 1
                    assert metrics['dask_scheduler_tasks{state="memory"}'] == 5

                    info = json.loads((await fetch(port, "/info")).body)
                    assert len(info["workers"]) == 2
                    assert info["n_workers"] == 2

                    counts = json.loads((await fetch(port, "/json/counts.json")).body)
                    assert counts["workers"] == 2
                    assert counts["memory"] == 5

    run_async(body, timeout=45)


def test_root_redirects_and_unknown_paths_404() -> None:
    async def body() -> None:
        async with dashboard_scheduler() as s:
            assert s.http_server is not None
            port = s.http_server.port
            r = await fetch(port, "/", follow_redirects=False, raise_error=False)
            assert r.code == 302
            assert r.headers["Location"] == "status"
            with pytest.raises(HTTPClientError) as exc:
                await fetch(port, "/no-such-page")
            assert exc.value.code == 404

    run_async(body, timeout=45)


def test_dashboard_port_taken_falls_back_to_a_free_port() -> None:
    """As in dask.distributed: a warning, and the server on another port."""

    async def body() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            taken = sock.getsockname()[1]
            with pytest.warns(UserWarning, match=f"Port {taken} is already in use"):
                s = Scheduler(host="127.0.0.1", port=0, dashboard=True, dashboard_address=f"127.0.0.1:{taken}")
                await s
            try:
                assert s.http_server is not None
                assert s.http_server.port != taken
                assert s.identity()["services"] == {"dashboard": s.http_server.port}
                assert (await fetch(s.http_server.port, "/health")).body == b"ok"
            finally:
                await s.close()

    run_async(body, timeout=45)


def test_no_dashboard() -> None:
    async def body() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
            assert s.http_server is None

    run_async(body, timeout=45)


def test_stop_closes_the_port() -> None:
    async def body() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
            handle = await start_http_server(s, "127.0.0.1:0")
            r = await fetch(handle.port, "/health")
            assert r.body == b"ok"
            await handle.close()
            handle.stop()  # idempotent
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection("127.0.0.1", handle.port)

    run_async(body, timeout=45)


def test_scheduler_close_stops_http() -> None:
    async def body() -> None:
        s = dashboard_scheduler()
        await s.start()
        assert s.http_server is not None
        port = s.http_server.port
        await s.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)

    run_async(body, timeout=45)


@pytest.mark.parametrize(
    "address, expected",
    [
        (":8787", ("", 8787)),
        ("8787", ("", 8787)),
        (8787, ("", 8787)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost", ("localhost", 8787)),
        ("[::1]:9000", ("::1", 9000)),
        ("http://127.0.0.1:9000/status", ("127.0.0.1", 9000)),
        ("", ("", 8787)),
        (None, ("", 8787)),
    ],
)
def test_parse_http_address(address: Any, expected: tuple[str, int]) -> None:
    assert parse_http_address(address) == expected


@pytest.mark.parametrize("bad", ["host:port", ":99999", "[::1]:x"])
def test_parse_http_address_errors(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_http_address(bad)


def test_json_safe() -> None:
    class Thing:
        def __str__(self) -> str:
            return "thing"

    value = {("x", 1): {1, 2}, 3: math.inf, "b": b"bytes", "t": Thing(), "n": [None, True, 1.5]}
    safe = json_safe(value)
    assert json.loads(json.dumps(safe, allow_nan=False)) == {
        "('x', 1)": [1, 2],
        "3": None,
        "b": "bytes",
        "t": "thing",
        "n": [None, True, 1.5],
    }
