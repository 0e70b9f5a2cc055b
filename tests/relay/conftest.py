"""Fixtures for the relay tests: real upstream servers and relay runners (helpers: tests/support/relay.py).

Every process a fixture starts is stopped by its PID in a finally block. When a test that started raw relays
fails, their stderr is added to its report.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.relay import RawRelay, Upstream

RELAYS_KEY = pytest.StashKey[list[RawRelay]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call" and report.failed:
        relays = item.stash.get(RELAYS_KEY, [])
        for number, relay in enumerate(relays, 1):
            report.sections.append((f"relay {number} (pid {relay.proc.pid})", relay.stop_and_explain()))


@pytest.fixture
def upstream_factory(tmp_path: Path) -> Iterator[Callable[..., Upstream]]:
    started: list[Upstream] = []

    def start(transport: str = "streamable-http") -> Upstream:
        upstream = Upstream(transport, tmp_path)
        started.append(upstream)
        return upstream.start()

    try:
        yield start
    finally:
        for upstream in started:
            upstream.stop()


@pytest.fixture(scope="module")
def streamable_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    upstream = Upstream("streamable-http", tmp_path_factory.mktemp("streamable"))
    try:
        yield upstream.start()
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def sse_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    upstream = Upstream("sse", tmp_path_factory.mktemp("sse"))
    try:
        yield upstream.start()
    finally:
        upstream.stop()


@pytest.fixture
def raw_relay(request: pytest.FixtureRequest) -> Iterator[Callable[..., RawRelay]]:
    started: list[RawRelay] = []
    request.node.stash[RELAYS_KEY] = started

    def start(url: str, *args: str, env: dict[str, str] | None = None, **kwargs: Any) -> RawRelay:
        relay = RawRelay(url, *args, env=env, **kwargs)
        started.append(relay)
        return relay

    try:
        yield start
    finally:
        for relay in started:
            relay.stop()
