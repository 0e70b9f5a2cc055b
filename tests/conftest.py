"""Shared fixtures (a real gunicorn with the gevent worker on a free loopback port, an OpenID issuer), the `npm`
marker, and the tail of every gunicorn log a failing test ran beside, added to its report."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from tests.support import GATEWAYS, LOG_TAIL_LINES, Gateway, serving

NPM_MARKER = (
    "npm: needs the npm registry or what it installed into tests/.peers (Node 22, the MCP conformance "
    "suite, npm-published MCP servers run through node or npx); skip with -m 'not npm'"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", NPM_MARKER)


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
            gw.stop()


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    """tests/fixtures/oidc_issuer.py (its user alice) for a test module: its issuer URL (tests/oauth_support.py)."""
    from tests.oauth_support import oidc_issuer  # the SDK client's imports, only where a module asks for an issuer

    with oidc_issuer(user="alice") as url:
        yield url


@pytest.fixture(scope="module")
def demo_gateway() -> Iterator[Gateway]:
    """One gateway serving the bundled demo server, shared by a test module."""
    with serving({"MCPGATE_SSE_AFTER": "1", "MCPGATE_KEEPALIVE": "0.5"}) as gw:
        yield gw
