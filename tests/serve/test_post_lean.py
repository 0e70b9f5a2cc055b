"""The Streamable HTTP POST's shortcuts against the general path: its four headers read in one call
(streamable.post_headers) are what HttpRequest.header gives for each, whatever the environ holds there; what post
reads in place of a call (the checks' memo, the request's context, era's first question, batch_items) is what the
call gives."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import modern, wire
from mcpgate.core.jsonrpc import Batch, Notification, Request
from mcpgate.core.routing import DuplicateRequestId
from mcpgate.core.sessions import SessionLimitReached
from mcpgate.core.wire import environ_key
from mcpgate.serve.errors import answered
from mcpgate.serve.front import auth, checks
from mcpgate.serve.front.context import CONTEXT, RequestContext, context
from mcpgate.serve.front.http import HttpRequest, Refusal
from mcpgate.serve.sessions import streamable
from mcpgate.serve.sessions.inbound import batch_items

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


# What post asks in place of a call (the checks' memo, the request's context, era's first question, batch_items):
# each shortcut against the call it spares, for tables of values.
ACCEPTS: list[Any] = [
    None,
    "",
    "application/json, text/event-stream",
    "application/json",
    "text/event-stream",
    "*/*",
    "application/*, text/*",
    "APPLICATION/JSON, TEXT/EVENT-STREAM",
    "application/json;q=0, text/event-stream",
    "text/html",
    " , ",
    "x" * 300,  # past the memo's bound: never kept
    "application/json, text/event-stream\x00",
]
CONTENT_TYPES: list[Any] = [
    None,
    "",
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    "text/plain",
    "application/jsonx",
    "application/json" + " " * 300,
]


def verdict(check: Any, value: Any) -> int | None:
    try:
        check(value)
    except Refusal as refusal:
        return refusal.status
    return None


@pytest.mark.parametrize(
    ("check", "table", "values"),
    [
        (checks.require_post_accept, checks.ACCEPT_PASSED, ACCEPTS),
        (checks.require_json_content, checks.JSON_CONTENT_PASSED, CONTENT_TYPES),
    ],
)
def test_a_value_the_memo_passed_passes_the_check(check: Any, table: dict[str, bool], values: list[Any]) -> None:
    """post skips the check's call only for a value its memo holds as True: such a value passes the check, and any
    value the check refuses is never held as True (before the check has seen it, and after)."""
    for value in values:
        for _ in range(2):  # unseen, then seen (remembered when within the memo's bounds)
            skipped = table.get(value) is True
            refused = verdict(check, value)
            assert not (skipped and refused is not None), value
            assert (table.get(value) is True) == (refused is None and value in table), value


class Context(RequestContext):
    pass


ENVIRONS: list[Any] = [
    {},
    {CONTEXT: RequestContext()},
    {CONTEXT: RequestContext(principal="alice")},
    {CONTEXT: Context(principal="bob")},
    {CONTEXT: "not a context"},
    {CONTEXT: None},
]


@pytest.mark.parametrize("environ", ENVIRONS)
def test_the_principal_read_in_place_is_the_contexts(environ: dict[str, Any]) -> None:
    """auth.principal reads the context without context()'s call when it is there: the same principal, and the
    same context left in the environ, as context() gives."""
    mine, theirs = dict(environ), dict(environ)
    noted = context(theirs)
    expected = noted.principal if noted.principal is not None else auth.STATIC_PRINCIPAL
    assert auth.principal(mine) == expected
    left = mine[CONTEXT]
    assert type(left) is type(theirs[CONTEXT]) and left == theirs[CONTEXT]
    if isinstance(environ.get(CONTEXT), RequestContext):
        assert left is environ[CONTEXT]


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
MESSAGES: list[Any] = [
    Request(1, "tools/call", {"name": "echo"}, {}),
    Request(1, "tools/call", {"name": "echo", "_meta": META}, {}),
    Request(1, "tools/call", {"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}, {}),
    Request(1, "tools/call", {"_meta": {"progressToken": 1}}, {}),
    Request(1, "tools/call", {"_meta": None}, {}),
    Request(1, "tools/call", [1, 2], {}),
    Request(1, "tools/call", None, {}),
    Request(1, "server/discover", None, {}),
    Notification("notifications/initialized", None, {}),
    Notification("notifications/cancelled", {"_meta": META}, {}),
]


@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("session_id", [None, "s" * 32, ""])
@pytest.mark.parametrize("header", [None, "2025-11-25", "2026-07-28", " 2026-07-28 ", "bogus"])
def test_a_sessions_era_is_eras_first_question(message: Any, session_id: str | None, header: str | None) -> None:
    """post asks a request with a session id only modern.is_modern (era's first question; its second answers
    LEGACY for any session id): the same era as era() gives, for every message, id and version header."""
    shortcut = (
        modern.is_modern(message)
        if session_id is not None
        else streamable.era(message, session_id, header) is streamable._MODERN
    )
    assert shortcut == (streamable.era(message, session_id, header) is streamable._MODERN)


@pytest.mark.parametrize("message", [*MESSAGES, Batch([MESSAGES[0], MESSAGES[8]]), Batch([])])
def test_a_posts_items_are_batch_items(message: Any) -> None:
    session: Any = type("S", (), {"version": "2025-03-26"})()  # a revision that allows batches
    items = batch_items(session, message) if isinstance(message, Batch) else [message]
    assert items == batch_items(session, message)


OUTCOMES: list[Any] = [
    "served",
    DuplicateRequestId(7),  # a domain exception: the table's refusal, with the parsed request's id
    SessionLimitReached(2),
    Refusal(406, -32600, "Not Acceptable"),  # raised as it is
    ValueError("a bug"),  # not the table's: raised as it is
]


def outcome(call: Any, gw: Any, request: HttpRequest) -> Any:
    try:
        return ("answer", call(gw, request))
    except Refusal as refused:
        return ("refused", refused.status, refused.code, refused.message, refused.id, refused.data)
    except Exception as exc:  # noqa: BLE001 -- compared as raised
        return ("raised", exc)


@pytest.mark.parametrize("result", OUTCOMES, ids=repr)
@pytest.mark.parametrize("noted", [None, Request(3, "tools/call", {}, {})])
def test_a_post_served_straight_is_handles(monkeypatch: pytest.MonkeyPatch, result: Any, noted: Any) -> None:
    """The Endpoint sends a POST on an MCP path to streamable.handle_post (handle's frame spared): for whatever
    post gives or raises, what comes out is what handle gives (the same table, the same id)."""
    assert streamable.handle_post.__wrapped__ is streamable.post  # type: ignore[attr-defined]  # answered(post)
    calls: list[tuple[Any, Any]] = []

    def post(gw: Any, request: HttpRequest) -> Any:
        calls.append((gw, request))
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(streamable, "post", post)
    handle_post = answered(streamable.post)  # made as the module makes it, around the stand-in
    gw: Any = object()
    environ = {"REQUEST_METHOD": "POST", CONTEXT: RequestContext(message=noted)}
    request = HttpRequest(environ)
    assert outcome(handle_post, gw, request) == outcome(streamable.handle, gw, request)
    assert calls == [(gw, request), (gw, request)]
