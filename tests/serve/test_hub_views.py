"""Views per identity on the aggregate (gunicorn, resource-server mode against tests/fixtures/oidc_issuer.py): the
caller's view decides per member. A member its view does not give is not started for it (its tools and prompts
are absent), the tools its view hides of a member it gives are absent from the merged list, and every hidden
name is an unknown tool when called: in a 2025 session (its view fixed at open) and in each 2026-07-28 request
(the pool's HubChildren are one per principal and view: one principal whose token names other groups gets the
other view's lists at once, interleaved with another principal's).

"files" and "notes" are both the demo. The readers' view gives files less its add and not notes; the ops view
gives everything; no rule: nothing (the aggregate answers 404 as an unknown server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from mcpgate.core import views as core_views
from mcpgate.serve.hub import views as hub_views
from mcpgate.serve.servers import views_file
from tests.support import (
    DEMO_ENTRY,
    Gateway,
    call,
    modern_body,
    modern_headers,
    post_modern,
    reply_message,
    serving,
)
from tests.support.oauth import mint_token, post_with_token, resource_server_env

AUDIENCE = "api://hub-views"
CONFIG = {
    "mcpServers": {"files": DEMO_ENTRY, "notes": DEMO_ENTRY},
    "views": {
        "rules": [
            {"name": "ops", "groups": ["ops"], "servers": {"*": "*"}},
            {"name": "readers", "groups": ["readers"], "servers": {"files": {"deny": ["add"]}}},
        ]
    },
}
HIDDEN_FROM_READERS = ("files__add", "notes__add", "notes__echo")


@pytest.fixture(scope="module")
def gw(issuer: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    path = tmp_path_factory.mktemp("hub-views") / "servers.json"
    path.write_text(json.dumps(CONFIG))
    env = resource_server_env(issuer, MCPGATE_CONFIG=str(path), MCPGATE_OAUTH_AUDIENCE=AUDIENCE)
    with serving(env, behind=True) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def tokens(issuer: str) -> dict[str, str]:
    def token(sub: str, *groups: str) -> str:
        return mint_token(issuer, {"sub": sub, "aud": AUDIENCE, "scope": "mcp", "groups": list(groups)})

    return {
        "rita": token("rita", "readers"),
        "olga": token("olga", "ops"),
        "sam-reader": token("sam", "readers"),  # one principal, two views
        "sam-ops": token("sam", "ops"),
        "nobody": token("nora"),
    }


def open_session(gw: Gateway, bearer: str) -> dict[str, str]:
    reply = post_with_token(gw, bearer)
    assert reply.status == 200, reply
    headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    post_with_token(gw, bearer, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers)
    return headers


def legacy(gw: Gateway, bearer: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    return reply_message(post_with_token(gw, bearer, body, **headers))


def modern(gw: Gateway, bearer: str, body: dict[str, Any]) -> dict[str, Any]:
    headers = {**modern_headers(body["method"], body["params"].get("name")), "Authorization": f"Bearer {bearer}"}
    return reply_message(post_modern(gw, body, headers))


def names(message: dict[str, Any], key: str = "tools") -> set[str]:
    return {item["name"] for item in message["result"][key]}


def unknown(message: dict[str, Any], name: str) -> bool:
    return message.get("error") == {"code": -32602, "message": f"Unknown tool: {name}"}


def test_a_2025_session_on_the_aggregate_sees_what_its_view_gives(gw: Gateway, tokens: dict[str, str]) -> None:
    rita, olga = tokens["rita"], tokens["olga"]
    reader, ops = open_session(gw, rita), open_session(gw, olga)
    listed = names(legacy(gw, rita, reader, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    assert "files__echo" in listed and not listed & set(HIDDEN_FROM_READERS), listed
    assert not any(name.startswith("notes__") for name in listed), listed  # notes is not started for it
    prompts = names(legacy(gw, rita, reader, {"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}), "prompts")
    assert prompts == {"files__greet"}, prompts
    for number, name in enumerate(HIDDEN_FROM_READERS):
        assert unknown(legacy(gw, rita, reader, call(name, {"a": 2, "b": 3, "message": "x"}, 10 + number)), name)
    echoed = legacy(gw, rita, reader, call("files__echo", {"message": "hi"}, 20))
    assert "result" in echoed, echoed
    shown = names(legacy(gw, olga, ops, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
    assert set(HIDDEN_FROM_READERS) <= shown, shown
    added = legacy(gw, olga, ops, call("files__add", {"a": 2, "b": 3}, 21))
    assert added["result"]["structuredContent"] == {"result": 5}, added
    assert post_with_token(gw, tokens["nobody"]).status == 404  # no member given: not there at all


def test_2026_requests_are_decided_per_request_and_never_share_a_child(gw: Gateway, tokens: dict[str, str]) -> None:
    listing = modern_body("l-1", "tools/list")
    add = modern_body("c-1", "tools/call", {"name": "files__add", "arguments": {"a": 2, "b": 3}})
    for _round in range(2):  # interleaved: each caller's answer is its own view's, whoever asked before
        for who in ("rita", "olga", "sam-reader", "sam-ops"):
            listed, called = names(modern(gw, tokens[who], listing)), modern(gw, tokens[who], add)
            if who in ("rita", "sam-reader"):
                assert "files__echo" in listed and not listed & set(HIDDEN_FROM_READERS), (who, listed)
                assert unknown(called, "files__add"), (who, called)
            else:
                assert set(HIDDEN_FROM_READERS) <= listed, (who, listed)
                assert called["result"]["structuredContent"] == {"result": 5}, (who, called)
    hidden = modern_body("c-2", "tools/call", {"name": "notes__echo", "arguments": {"message": "x"}})
    assert unknown(modern(gw, tokens["sam-reader"], hidden), "notes__echo")
    assert "result" in modern(gw, tokens["sam-ops"], hidden)


def test_a_group_is_there_for_a_view_giving_one_of_its_servers_at_least() -> None:
    views = views_file.parse(CONFIG, "F")
    assert views is not None
    table = views_file.ViewTable(views)
    table.groups = {"both": ("files", "notes"), "notes-only": ("notes",)}
    ops, readers = 0, 1  # the rules' indexes
    assert table.grant(readers, "both") == core_views.EVERY_TOOL  # the HubChild narrows each member itself
    assert table.grant(readers, "notes-only") is None  # no member given: not there (404)
    assert table.grant(core_views.DEFAULT, "both") is None
    assert table.grant(ops, "notes-only") == core_views.EVERY_TOOL


def test_the_pool_key_reads_back_its_principal_and_view_and_nothing_else() -> None:
    views = views_file.parse(CONFIG, "F")
    assert views is not None
    table = views_file.ViewTable(views, "f1")
    resolve = hub_views.Resolver(lambda: table)
    tricky = "iss#x#view:0~f1"  # a subject that looks like a key still reads back whole
    principal, view = resolve(hub_views.pool_key(tricky, table.token(1)))
    assert principal == tricky and view is not None and view.name == "readers"
    assert resolve(hub_views.pool_key("alice", "0~other"))[1] is hub_views.NOTHING  # other views: nothing
    assert resolve("alice") == ("alice", hub_views.NOTHING)  # no view given while views are on: nothing
    assert hub_views.Resolver(lambda: None)("alice") == ("alice", None)  # views off
