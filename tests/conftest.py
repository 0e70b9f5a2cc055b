"""Shared fixtures: a real gunicorn (gevent worker) serving mcpgate on a free loopback port."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from tests.support import Gateway


@pytest.fixture
def gateway_factory() -> Iterator[Any]:
    started: list[Gateway] = []

    def start(env: dict[str, str] | None = None, **kwargs: Any) -> Gateway:
        gw = Gateway(env, **kwargs)
        started.append(gw)
        gw.wait_ready()
        return gw

    try:
        yield start
    finally:
        for gw in started:
            gw.stop()


@pytest.fixture(scope="module")
def demo_gateway() -> Iterator[Gateway]:
    """One gateway serving the bundled demo server, shared by a test module."""
    gw = Gateway({"MCPGATE_SSE_AFTER": "1", "MCPGATE_KEEPALIVE": "0.5"})
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()
