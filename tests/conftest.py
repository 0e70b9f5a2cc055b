"""Shared fixtures (a real gunicorn with the gevent worker on a free loopback port, an OpenID issuer), the
markers (tests/markers.py: `gateway`, `fleet`, `process`, `slow` and `fast` applied here), and the tail of every
gunicorn log a failing test ran beside, added to its report."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from tests import markers
from tests.support import GATEWAYS, LOG_TAIL_LINES, Gateway, serving
from tests.support.gateway import finish_stops
from tests.support.oauth import oidc_issuer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """gateway, fleet and process by what each test reaches; slow by name; fast for the rest (tests/markers.py)."""
    markers.apply(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A failed phase's report gets each live (or stopped-during-this-test) gateway's log tail."""
    report = yield
    if report.failed:
        for gw in GATEWAYS:
            report.sections.append((f"gunicorn log, port {gw.port} (last {LOG_TAIL_LINES} lines)", gw.log_tail()))
    if call.when == "teardown":
        GATEWAYS[:] = [gw for gw in GATEWAYS if not gw.stopped]
    return report


def pytest_sessionfinish() -> None:
    """The gateways stopped behind (Gateway.stop) are waited for, by PID, before the session ends."""
    finish_stops()


@pytest.fixture
def gateway_factory() -> Iterator[Callable[..., Gateway]]:
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
            gw.stop(behind=True)


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    """tests/fixtures/oidc_issuer.py (its user alice) for a test module: its issuer URL (tests/support/oauth.py)."""
    with oidc_issuer(user="alice") as url:
        yield url


@pytest.fixture(scope="module")
def demo_gateway() -> Iterator[Gateway]:
    """One gateway serving the bundled demo server, shared by a test module."""
    with serving({"MCPGATE_SSE_AFTER": "1", "MCPGATE_KEEPALIVE": "0.5"}, behind=True) as gw:
        yield gw
