"""relay/http_routes.py's plain routes: a URL the relay sends without requests goes where requests would send it.

For each URL `plain_route` takes, the host, port and request target are the ones requests and urllib3 work out
(their own preparation, pool and adapter); every URL they would rewrite (dot segments, escapes of unreserved
characters, lower-case escapes, non-ASCII), or that needs them (HTTPS, user info), is left to them.
"""

from __future__ import annotations

import pytest
import requests
from requests.adapters import HTTPAdapter

from mcpgate.relay import errors
from mcpgate.relay.http_routes import Routes, plain_route, valid_header

PLAIN = [
    "http://127.0.0.1:8000/mcp",
    "http://LocalHost:8000/MCP?x=1&y=%2F",
    "http://[::1]:9/mcp",
    "http://[FE80::1]/mcp",
    "http://example.test",
    "http://example.test/",
    "http://example.test:80/mcp",
    "http://example.test/?",
    "http://my_service:3000/a;b=c/d@e:f~g!$'()*+,",
    "http://example.test/%E2%82%AC?q=%3D",
    "http://example.test.:65535/mcp",
]
LEFT_TO_REQUESTS = [
    "https://example.test/mcp",
    "HTTPS://example.test/mcp",
    "http://ann:secret@example.test/mcp",
    "http://example.test/a/../mcp",
    "http://example.test/./mcp",
    "http://example.test/%7E",
    "http://example.test/%41",
    "http://example.test/%2f",
    "http://example.test/a b",
    "http://example.test/é",
    "http://exämple.test/mcp",
    "http://example.test:0/mcp",
    "http://example.test:99999/mcp",
    "http://example.test/mcp#part",
    "http://.example.test/mcp",
    "http://example.test/mcp%",
    "http://example.test/a\\b",
    " http://example.test/mcp",
]


def requests_sends(url: str) -> tuple[str, int, str]:
    """(host, port, target) as requests works them out: its preparation, its adapter's pool and request URL."""
    session = requests.Session()
    session.trust_env = False
    adapter = HTTPAdapter()
    try:
        prepared = session.prepare_request(requests.Request("GET", url))
        pool = adapter.get_connection_with_tls_context(prepared, True, {}, None)
        assert pool.host is not None
        return pool.host, pool.port or 80, adapter.request_url(prepared, {})
    finally:
        adapter.close()
        session.close()


@pytest.mark.parametrize("url", PLAIN)
def test_a_plain_url_goes_where_requests_sends_it(url: str) -> None:
    assert plain_route(url) == requests_sends(url)


@pytest.mark.parametrize("url", LEFT_TO_REQUESTS)
def test_a_url_requests_would_rewrite_or_must_carry_is_left_to_it(url: str) -> None:
    assert plain_route(url) is None


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("X-Team", "blue", True),
        ("X-Empty", "", True),
        ("X-Team", "blue\r\nX-Evil: 1", False),
        ("X-Team", " leading", False),
        ("X:Team", "blue", False),
        (" X-Team", "blue", False),
    ],
)
def test_headers_are_checked_as_requests_checks_them(name: str, value: str, valid: bool) -> None:
    assert valid_header(name, value) is valid
    try:
        requests.utils.check_header_validity((name, value))
    except requests.exceptions.InvalidHeader:
        assert not valid
    else:
        assert valid


def test_a_session_header_http_forbids_fails_the_plain_route_without_quoting_it() -> None:
    routes = Routes({"Authorization": "Bearer sekrit\r\nX-Evil: 1"}, None)
    try:
        with pytest.raises(errors.ConfigError) as refused:
            routes.exchange("POST", "http://127.0.0.1:9/mcp", {}, b"{}", (1.0, 1.0))
    finally:
        routes.close()
    assert "sekrit" not in refused.value.message and "HTTP does not allow" in refused.value.message
