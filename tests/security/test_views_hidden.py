"""Views per identity hold against the caller they hide things from (gunicorn, resource-server mode against
tests/fixtures/oidc_issuer.py): a tool its view hides cannot be called, in a 2025 session or a 2026-07-28
request (the answer is the server's own "Unknown tool", and the server never sees the call); the search view
never returns it, whatever the query; a server its view hides does not exist on any of its paths. A call with a
key given twice reaches the child as the gateway read it (a child whose parser keeps the first "name" must not be
handed the hidden one).

"files" is the 300-tool corpus server with the search view on; "notes" the demo. The reader's view denies
files' jira__create_ticket and jira__delete_ticket and hides notes; the ops view shows everything."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import (
    DEMO_ENTRY,
    FIXTURES,
    Gateway,
    call,
    modern_body,
    modern_headers,
    named,
    post_modern,
    reply_message,
    serving,
)
from tests.support.oauth import mint_token, post_with_token, resource_server_env

AUDIENCE = "api://views"
HIDDEN = ("jira__create_ticket", "jira__delete_ticket")
FILES = {
    "command": sys.executable,
    "args": [str(FIXTURES / "corpus_tools_server.py")],
    "mcpgate": {"tool_search": True},
}
FIRSTS = {"command": sys.executable, "args": [str(FIXTURES / "first_key_server.py")]}
CONFIG = {
    "mcpServers": {"files": FILES, "notes": DEMO_ENTRY, "firsts": FIRSTS},
    "views": {
        "rules": [
            {"name": "ops", "groups": ["ops"], "servers": {"*": "*"}},
            {
                "name": "reader",
                "subjects": ["rita"],
                "servers": {"files": {"deny": list(HIDDEN)}, "firsts": {"deny": ["secret"]}},
            },
            {"name": "mixed", "subjects": ["max"], "servers": {"*": "*", "files": {"deny": list(HIDDEN)}}},
        ]
    },
}
QUERIES = ["create a jira ticket", "delete ticket", "jira", "ticket bug issue", "jira__create_ticket"]


@pytest.fixture(scope="module")
def gw(issuer: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    path = tmp_path_factory.mktemp("views") / "servers.json"
    path.write_text(json.dumps(CONFIG))
    env = resource_server_env(issuer, MCPGATE_CONFIG=str(path), MCPGATE_OAUTH_AUDIENCE=AUDIENCE)
    with serving(env, behind=True) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def tokens(issuer: str) -> dict[str, str]:
    def token(sub: str, **claims: Any) -> str:
        return mint_token(issuer, {"sub": sub, "aud": AUDIENCE, "scope": "mcp", **claims})

    return {"reader": token("rita"), "ops": token("olga", groups=["ops"]), "mixed": token("max")}


def session(gw: Gateway, bearer: str, server: str = "files") -> dict[str, str]:
    path = f"/servers/{server}/mcp"
    reply = post_with_token(gw, bearer, path=path)
    assert reply.status == 200, reply
    headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    assert post_with_token(gw, bearer, {"jsonrpc": "2.0", "method": "notifications/initialized"}, path, **headers)
    return headers


def legacy(gw: Gateway, bearer: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    return reply_message(post_with_token(gw, bearer, body, "/servers/files/mcp", **headers))


def modern(gw: Gateway, bearer: str, body: dict[str, Any], server: str = "files") -> Any:
    name = body["params"].get("name")
    headers = {**modern_headers(body["method"], name), "Authorization": f"Bearer {bearer}"}
    return post_modern(named(gw, server), body, headers)


def searched(message: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in message["result"]["structuredContent"]["tools"]]


@pytest.mark.parametrize("name", HIDDEN)
def test_a_hidden_tool_cannot_be_called_in_a_2025_session(gw: Gateway, tokens: dict[str, str], name: str) -> None:
    headers = session(gw, tokens["reader"])
    answer = legacy(gw, tokens["reader"], headers, call(name, {"project": "OPS", "summary": "x", "key": "A-1"}, 7))
    assert answer == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": f"Unknown tool: {name}"}}
    ops = session(gw, tokens["ops"])  # the server has it: the ops view calls it
    assert legacy(gw, tokens["ops"], ops, call(name, {}, 8))["result"]["content"][0]["text"].startswith("called")


@pytest.mark.parametrize("name", HIDDEN)
def test_a_hidden_tool_cannot_be_called_in_a_2026_request(gw: Gateway, tokens: dict[str, str], name: str) -> None:
    body = modern_body("m-1", "tools/call", {"name": name, "arguments": {"project": "OPS", "summary": "x"}})
    answer = reply_message(modern(gw, tokens["reader"], body))
    assert answer == {"jsonrpc": "2.0", "id": "m-1", "error": {"code": -32602, "message": f"Unknown tool: {name}"}}
    shown = reply_message(modern(gw, tokens["ops"], body))
    assert shown["result"]["content"][0]["text"].startswith(f"called {name}")


@pytest.mark.parametrize("query", QUERIES)
def test_the_search_never_returns_a_hidden_tool(gw: Gateway, tokens: dict[str, str], query: str) -> None:
    headers = session(gw, tokens["reader"])
    found = searched(legacy(gw, tokens["reader"], headers, call("search_tools", {"query": query, "limit": 20}, 9)))
    body = modern_body("m-2", "tools/call", {"name": "search_tools", "arguments": {"query": query, "limit": 20}})
    found_modern = searched(reply_message(modern(gw, tokens["reader"], body)))
    assert not set(HIDDEN) & set(found + found_modern), (found, found_modern)
    ops = searched(reply_message(modern(gw, tokens["ops"], body)))
    assert set(HIDDEN) & set(ops), ops  # the same query finds them for a view that shows them


def test_a_hidden_server_is_not_there_on_any_path(gw: Gateway, tokens: dict[str, str]) -> None:
    bearer = tokens["reader"]
    assert post_with_token(gw, bearer, path="/servers/notes/mcp").status == 404
    assert modern(gw, bearer, modern_body("m-3", "tools/list"), "notes").status == 404
    sse = gw.request(
        "GET", "/servers/notes/sse", headers={"Accept": "text/event-stream", "Authorization": f"Bearer {bearer}"}
    )
    assert sse.status == 404, sse
    body = call("echo", {"message": "x"}, 1)
    messages = post_with_token(gw, bearer, body, "/servers/notes/messages?session_id=abc")
    assert messages.status == 404, messages
    listing = gw.request("GET", "/servers", headers={"Authorization": f"Bearer {bearer}"}).json()
    assert [server["name"] for server in listing["servers"]] == ["files", "firsts"]


def test_the_aggregate_is_not_a_way_around_a_view(gw: Gateway, tokens: dict[str, str]) -> None:
    """/mcp serves every server as one (the hub), its children made per caller's view: what a view hides of a
    server is hidden there too, under the namespaced names, in both eras (absent from tools/list, its call an
    unknown tool that no server sees), a server it does not give is not started for it, and a view that shows
    every server whole sees and calls everything."""
    for who in ("reader", "mixed"):
        bearer = tokens[who]
        reply = post_with_token(gw, bearer)
        assert reply.status == 200, reply
        headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        post_with_token(gw, bearer, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers)
        listed = every_tool(lambda page, b=bearer, h=headers: reply_message(post_with_token(gw, b, page, **h)))
        modern_listed = every_tool(lambda page, b=bearer: reply_message(modern_at(gw, b, page)), modern=True)
        for shown in (listed, modern_listed):
            assert any(n.startswith("files__") for n in shown), shown
            assert not {f"files__{name}" for name in HIDDEN} & shown, shown
            assert any(n.startswith("notes__") for n in shown) == (who == "mixed"), (who, shown)
        for name in (f"files__{HIDDEN[0]}", f"files__{HIDDEN[1]}"):
            answer = reply_message(post_with_token(gw, bearer, call(name, {}, 3), **headers))
            assert answer["error"] == {"code": -32602, "message": f"Unknown tool: {name}"}, answer
            body = modern_body("m-4", "tools/call", {"name": name, "arguments": {}})
            modern_answer = reply_message(modern_at(gw, bearer, body))
            assert modern_answer["error"] == {"code": -32602, "message": f"Unknown tool: {name}"}, modern_answer
    ops = tokens["ops"]
    body = modern_body("m-6", "tools/call", {"name": f"files__{HIDDEN[0]}", "arguments": {}})
    assert reply_message(modern_at(gw, ops, body))["result"]["content"][0]["text"].startswith("called")


def modern_at(gw: Gateway, bearer: str, body: dict[str, Any]) -> Any:
    """A 2026-07-28 request to the aggregate (/mcp)."""
    name = body["params"].get("name")
    headers = {**modern_headers(body["method"], name), "Authorization": f"Bearer {bearer}"}
    return gw.request("POST", "/mcp", body=body, headers=headers)


def every_tool(ask: Any, modern: bool = False) -> set[str]:
    """Every tool name of a paginated tools/list (all its pages), asked through `ask(body)`."""
    found: set[str] = set()
    cursor = None
    for number in range(100):
        params = {"cursor": cursor} if cursor is not None else {}
        page = modern_body(f"p-{number}", "tools/list", params) if modern else call_list(number, params)
        result = ask(page)["result"]
        found |= {tool["name"] for tool in result["tools"]}
        cursor = result.get("nextCursor")
        if cursor is None:
            return found
    raise AssertionError("tools/list did not end within 100 pages")


def call_list(number: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 100 + number, "method": "tools/list", "params": params}


# "name" twice: Python (the gateway) reads the last, a first-wins parser (tests/fixtures/first_key_server.py) the first.
TWICE = b'{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"secret","name":"visible","arguments":{}}}'


def test_a_call_naming_its_tool_twice_reaches_the_child_as_the_gateway_checked_it(
    gw: Gateway, tokens: dict[str, str]
) -> None:
    bearer = tokens["reader"]
    path = "/servers/firsts/mcp"
    reply = post_with_token(gw, bearer, path=path)
    assert reply.status == 200, reply
    headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    post_with_token(gw, bearer, {"jsonrpc": "2.0", "method": "notifications/initialized"}, path, **headers)
    hidden = reply_message(post_with_token(gw, bearer, call("secret", {}, 5), path, **headers))
    assert hidden["error"] == {"code": -32602, "message": "Unknown tool: secret"}, hidden
    answer = reply_message(post_with_token(gw, bearer, TWICE.replace(b"ID", b"6"), path, **headers))
    assert answer["result"]["content"][0]["text"] == "called visible", answer
    modern_sent = {**modern_headers("tools/call", "visible"), "Authorization": f"Bearer {bearer}"}
    once = json.dumps(modern_body("m-7", "tools/call", {"name": "visible", "arguments": {}}))
    twice = once.replace('"name": "visible"', '"name": "secret", "name": "visible"').encode()
    assert twice != once.encode()
    modern_answer = reply_message(gw.request("POST", path, body=twice, headers=modern_sent))
    assert "result" in modern_answer, modern_answer
    assert modern_answer["result"]["content"][0]["text"] == "called visible", modern_answer
