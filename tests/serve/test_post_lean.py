"""The Streamable HTTP POST's shortcuts against the general path: its four headers read in one call
(streamable.post_headers) are what HttpRequest.header gives for each, whatever the environ holds there."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import wire
from mcpgate.core.wire import environ_key
from mcpgate.serve.front.http import HttpRequest
from mcpgate.serve.sessions import streamable

NAMES = ("Accept", "Content-Type", wire.SESSION_ID, wire.PROTOCOL_VERSION)


class Text(str):
    pass


VALUES: list[Any] = [None, "", "application/json", "a" * 32, " 2025-11-25 ", Text("sub"), b"bytes", 7, ["x"]]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("name", NAMES)
def test_a_posts_headers_are_what_the_request_gives(name: str, value: Any) -> None:
    usual = {"HTTP_ACCEPT": "application/json, text/event-stream", "CONTENT_TYPE": "application/json"}
    for environ in ({}, usual, {**usual, "HTTP_MCP_SESSION_ID": "s" * 32, "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}):
        environ = {**environ, "REQUEST_METHOD": "POST"}
        if value is None:
            environ.pop(environ_key(name), None)
        else:
            environ[environ_key(name)] = value
        request = HttpRequest(environ)
        read = streamable.post_headers(environ)
        assert read == tuple(request.header(each) for each in NAMES)
        assert [type(each) for each in read] == [type(request.header(each)) for each in NAMES]


KEYS = {
    "Accept": "HTTP_ACCEPT",
    "Content-Type": "CONTENT_TYPE",
    "Content-Length": "CONTENT_LENGTH",
    wire.SESSION_ID: "HTTP_MCP_SESSION_ID",
    wire.PROTOCOL_VERSION: "HTTP_MCP_PROTOCOL_VERSION",
    "Last-Event-ID": "HTTP_LAST_EVENT_ID",
}


@pytest.mark.parametrize(("name", "key"), KEYS.items())
def test_an_environ_key_is_pep_3333s(name: str, key: str) -> None:
    assert environ_key(name) == key
    assert HttpRequest({"REQUEST_METHOD": "GET", key: "v"}).header(name) == "v"
