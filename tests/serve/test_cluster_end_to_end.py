"""The headers a forward carries (forward_heads.end_to_end) are those the per-key pass gave before they were remembered
by the environ's keys: the same names, values and order, over a table of environs and the same keys again with
other values (the plan is the keys'; the values and the Connection header are read per request)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.serve.cluster import forward_heads

BASE: dict[str, Any] = {
    "REQUEST_METHOD": "POST",
    "PATH_INFO": "/mcp",
    "QUERY_STRING": "",
    "SERVER_NAME": "127.0.0.1",
    "wsgi.input": object(),
    "CONTENT_LENGTH": "12",
    "REMOTE_ADDR": "127.0.0.1",
}

CASES: list[dict[str, Any]] = [
    {},
    {"HTTP_HOST": "gw", "CONTENT_TYPE": "application/json", "HTTP_ACCEPT": "application/json, text/event-stream"},
    {"HTTP_AUTHORIZATION": "Bearer t", "HTTP_MCPGATE_FORWARDED": "x", "HTTP_HOST": "gw", "HTTP_EXPECT": "100"},
    {"HTTP_CONNECTION": "keep-alive, X-Drop", "HTTP_X_DROP": "1", "HTTP_X_KEEP": "2", "HTTP_KEEP_ALIVE": "5"},
    {"HTTP_CONNECTION": "close", "HTTP_TRANSFER_ENCODING": "chunked", "HTTP_TE": "trailers", "HTTP_UPGRADE": "h2"},
    {"HTTP_X_EMPTY": "", "HTTP_MCP_SESSION_ID": "abc", "HTTP_CONTENT_LENGTH": "3", "CONTENT_TYPE": ""},
    {"HTTP_X_WEIRD_NAME_": "v", "HTTP_": "v", "HTTP_MCP_PROTOCOL_VERSION": "2025-06-18", "X_NOT": "h"},
    {"HTTP_CONNECTION": " X-A ,x-b", "HTTP_X_A": "1", "HTTP_X_B": "2", "HTTP_X_C": "3", "HTTP_TRAILER": "t"},
]


def per_key(environ: dict[str, Any]) -> list[tuple[str, str]]:
    """end_to_end as it was: each of the environ's keys looked at, every request."""
    connection = environ.get("HTTP_CONNECTION")
    named = {token.strip().lower() for token in str(connection).split(",")} if connection else set()
    headers = []
    for key, value in environ.items():
        name, lowered = forward_heads.header_name(key)
        if not name or lowered in forward_heads.NOT_SENT or lowered in named or not value:
            continue
        headers.append((name, str(value)))
    return headers


@pytest.mark.parametrize("extra", CASES)
def test_the_headers_sent_are_the_per_key_pass_s(extra: dict[str, Any]) -> None:
    environ = {**BASE, **extra}
    assert forward_heads.end_to_end(environ) == per_key(environ)
    again = {key: (f"{value}-2" if isinstance(value, str) and value else value) for key, value in environ.items()}
    if "HTTP_CONNECTION" in again:  # the same keys, other values (the Connection header's tokens too)
        again["HTTP_CONNECTION"] = "x-keep"
    assert forward_heads.end_to_end(again) == per_key(again)  # the plan remembered from `environ`, values read anew
    emptied = dict.fromkeys(environ, "")
    assert forward_heads.end_to_end(emptied) == per_key(emptied) == []


def test_the_plans_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forward_heads, "_PLANS", {})
    for n in range(forward_heads.PLANS_KEPT * 2 + 3):
        environ = {**BASE, f"HTTP_X_{n}": "v"}
        assert forward_heads.end_to_end(environ) == [(f"X-{n}", "v")]
        assert len(forward_heads._PLANS) <= forward_heads.PLANS_KEPT


@pytest.mark.parametrize("extra", CASES)
def test_a_remembered_head_is_the_head_of_its_headers(extra: dict[str, Any]) -> None:
    environ = {**BASE, **extra}
    variants = [environ, dict.fromkeys(environ, "v"), {**environ, "HTTP_X_LATE": "1"}]
    variants.append({key: (f"{value}-2" if isinstance(value, str) else value) for key, value in environ.items()})
    for each in variants * 2:  # each twice: made, then remembered
        for method, path, query in (("POST", "/mcp", ""), ("GET", "/a b", "session_id=x"), ("POST", "/mcp", "q")):
            expected = forward_heads.head_of(method, path, query, per_key(each))
            assert forward_heads.plain_head(method, path, query, each) == expected
