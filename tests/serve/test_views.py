"""Views per identity (MCPGATE_CONFIG "views") through gunicorn in resource-server mode, against
tests/fixtures/oidc_issuer.py: two principals with different views see different servers and tools, in 2025
sessions and 2026-07-28 requests; a hidden tool's call is answered as an unknown tool; a server a view hides
answers as an unknown server and is left out of GET /servers; a caller no rule matches gets the default
(deny). The file's views are checked with messages naming the file and the rule.

Two servers, both the demo: "files" and "notes". Rules: "ops" (group claim "teams" holds ops): every server,
every tool; "readers" (scope read): files' echo and slow only; nobody else: nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpgate.core.views import DENY_ALL
from mcpgate.demo_tools import TOOLS
from mcpgate.serve.servers import views_file
from mcpgate.serve.servers.config_file import ConfigError
from tests.support import (
    DEMO_ENTRY,
    Gateway,
    call,
    modern_body,
    modern_headers,
    named,
    post_modern,
    reply_message,
    serving,
    wait_for,
)
from tests.support.oauth import mint_token, post_with_token, resource_server_env

AUDIENCE = "api://mcpgate"
UNKNOWN = -32602
VIEWS = {
    "claim": "teams",
    "rules": [
        {"name": "ops", "groups": ["ops"], "servers": {"*": "*"}},
        {"name": "readers", "scopes": ["read"], "servers": {"files": {"allow": ["echo", "slow"]}}},
    ],
}
CONFIG = {"mcpServers": {"files": DEMO_ENTRY, "notes": DEMO_ENTRY}, "views": VIEWS}
SEEN: list[str] = []


@pytest.fixture(scope="module")
def gw(issuer: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    path = tmp_path_factory.mktemp("views") / "servers.json"
    path.write_text(json.dumps(CONFIG))
    env = resource_server_env(issuer, MCPGATE_CONFIG=str(path), MCPGATE_OAUTH_AUDIENCE=AUDIENCE)
    with serving(env) as gateway:
        yield gateway
    assert not any(token in gateway.log() for token in SEEN)  # no token in a log line


def token(issuer: str, sub: str, scope: str = "mcp", **claims: Any) -> str:
    minted = mint_token(issuer, {"sub": sub, "aud": AUDIENCE, "scope": scope, **claims})
    SEEN.append(minted)
    return minted


@pytest.fixture(scope="module")
def tokens(issuer: str) -> dict[str, str]:
    return {
        "ops": token(issuer, "olga", teams=["dev", "ops"]),
        "reader": token(issuer, "rita", "mcp read"),
        "stranger": token(issuer, "sam", teams=["dev"]),
    }


def session(gw: Gateway, server: str, bearer: str) -> dict[str, str]:
    """A 2025 session on `server` for the token's principal: its headers (the token among them)."""
    path = f"/servers/{server}/mcp"
    reply = post_with_token(gw, bearer, path=path)
    assert reply.status == 200, reply
    headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    done = post_with_token(gw, bearer, {"jsonrpc": "2.0", "method": "notifications/initialized"}, path, **headers)
    assert done.status == 202, done
    return headers


def listed(gw: Gateway, server: str, bearer: str, headers: dict[str, str]) -> list[str]:
    body = {"jsonrpc": "2.0", "id": "L", "method": "tools/list"}
    message = reply_message(post_with_token(gw, bearer, body, f"/servers/{server}/mcp", **headers))
    return sorted(tool["name"] for tool in message["result"]["tools"])


def called(gw: Gateway, server: str, bearer: str, headers: dict[str, str], name: str) -> dict[str, Any]:
    args = {"message": "hi"} if name == "echo" else {"a": 1, "b": 2}
    return reply_message(post_with_token(gw, bearer, call(name, args, 5), f"/servers/{server}/mcp", **headers))


def unknown_tool(message: dict[str, Any], name: str) -> None:
    assert message.get("error") == {"code": UNKNOWN, "message": f"Unknown tool: {name}"}, message


def modern(gw: Gateway, server: str, bearer: str, body: dict[str, Any]) -> dict[str, Any]:
    name = body["params"].get("name")
    headers = {**modern_headers(body["method"], name), "Authorization": f"Bearer {bearer}"}
    reply = post_modern(named(gw, server), body, headers)
    assert reply.status == 200, reply
    return reply_message(reply)


# -- 2025 sessions -----------------------------------------------------------------------------------------------


def test_two_principals_see_different_tools(gw: Gateway, tokens: dict[str, str]) -> None:
    ops, reader = tokens["ops"], tokens["reader"]
    assert listed(gw, "files", ops, session(gw, "files", ops)) == sorted(TOOLS)
    assert listed(gw, "files", reader, session(gw, "files", reader)) == ["echo", "slow"]


def test_a_hidden_tools_call_is_answered_as_an_unknown_tool(gw: Gateway, tokens: dict[str, str]) -> None:
    ops, reader = tokens["ops"], tokens["reader"]
    headers = session(gw, "files", reader)
    unknown_tool(called(gw, "files", reader, headers, "add"), "add")
    assert called(gw, "files", reader, headers, "echo")["result"]["content"][0]["text"] == "hi"
    result = called(gw, "files", ops, session(gw, "files", ops), "add")["result"]  # the ops view shows it
    assert "3" in json.dumps(result), result


def test_a_hidden_server_is_an_unknown_server(gw: Gateway, tokens: dict[str, str]) -> None:
    reader, stranger = tokens["reader"], tokens["stranger"]
    refused = post_with_token(gw, reader, path="/servers/notes/mcp")
    assert refused.status == 404, refused
    assert refused.json()["error"]["data"] == {"servers": ["files"]}  # the hidden one not named
    assert "notes" not in refused.json()["error"]["message"].split(";")[1]
    for server in ("files", "notes"):  # no rule matches: the default, deny
        assert post_with_token(gw, stranger, path=f"/servers/{server}/mcp").status == 404
    assert post_with_token(gw, tokens["ops"], path="/servers/notes/mcp").status == 200


def test_the_listing_shows_each_caller_its_servers(gw: Gateway, tokens: dict[str, str]) -> None:
    def names(bearer: str) -> list[str]:
        reply = gw.request("GET", "/servers", headers={"Authorization": f"Bearer {bearer}"})
        assert reply.status == 200, reply
        return [server["name"] for server in reply.json()["servers"]]

    assert names(tokens["ops"]) == ["files", "notes"]
    assert names(tokens["reader"]) == ["files"]
    assert names(tokens["stranger"]) == []


# -- 2026-07-28 requests -----------------------------------------------------------------------------------------


def test_modern_lists_and_calls_follow_the_view(gw: Gateway, tokens: dict[str, str]) -> None:
    ops, reader = tokens["ops"], tokens["reader"]
    for bearer, expected in ((ops, sorted(TOOLS)), (reader, ["echo", "slow"])):
        result = modern(gw, "files", bearer, modern_body("m-1", "tools/list"))["result"]
        assert sorted(tool["name"] for tool in result["tools"]) == expected
    hidden = modern(gw, "files", reader, modern_body("m-2", "tools/call", {"name": "add", "arguments": {"a": 1}}))
    unknown_tool(hidden, "add")
    shown = modern(gw, "files", ops, modern_body("m-3", "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}))
    assert "3" in json.dumps(shown["result"]), shown
    body = modern_body("m-4", "tools/list")
    refused = post_modern(
        named(gw, "notes"), body, {**modern_headers("tools/list"), "Authorization": f"Bearer {reader}"}
    )
    assert refused.status == 404, refused


# -- a reload --------------------------------------------------------------------------------------------------


def test_a_reload_changes_the_views_of_new_sessions(issuer: str, tmp_path: Path, tokens: dict[str, str]) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(CONFIG))
    env = {
        "MCPGATE_CONFIG": str(path),
        "MCPGATE_CONFIG_POLL": "0.2",
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_OAUTH_AUDIENCE": AUDIENCE,
    }
    reader = tokens["reader"]
    with serving(env) as gw:
        before = session(gw, "files", reader)
        wider = json.loads(json.dumps(CONFIG))
        wider["views"]["rules"][1]["servers"]["files"]["allow"].append("add")
        staged = path.with_name("staged.json")
        staged.write_text(json.dumps(wider))
        staged.replace(path)
        wait_for(lambda: "add" in listed(gw, "files", reader, session(gw, "files", reader)), what="the new view")
        assert listed(gw, "files", reader, before) == ["echo", "slow"]  # a session keeps the view it opened with
        broken = {**wider, "views": {"rules": [{"name": "r", "servers": {"mail": "*"}}]}}
        staged.write_text(json.dumps(broken))
        staged.replace(path)
        wait_for(lambda: "views: rule 'r': no server 'mail'" in gw.log(), what="the refused views in the log")
        assert listed(gw, "files", reader, session(gw, "files", reader)) == ["add", "echo", "slow"]  # unchanged


# -- the file's views, checked -----------------------------------------------------------------------------------


def test_without_views_there_is_nothing() -> None:
    assert views_file.parse({"mcpServers": {}}, "f") is None


def test_the_defaults() -> None:
    views = views_file.parse({"views": {"rules": []}}, "f")
    assert views is not None and views.group_claim == "groups" and views.default is DENY_ALL and not views.rules


@pytest.mark.parametrize(
    ("views", "message"),
    [
        ([], "F: views must be a JSON object"),
        ({"rule": []}, "F: views: unknown key(s) 'rule' (allowed: claim, default, rules)"),
        ({"default": "maybe"}, 'F: views: default must be "deny" or "allow" (got \'maybe\')'),
        ({"claim": ""}, "F: views: claim must name the token claim holding the caller's groups (got '')"),
        ({"rules": [{"name": "r"}]}, "F: views: rule 'r': servers must be an object"),
        ({"rules": [{"servers": {"a": 1}}]}, "F: views: rule '#1': server 'a': must be \"*\" (every tool)"),
        ({"rules": [{"name": "x", "servers": {"nope": "*"}}]}, "F: views: rule 'x': no server 'nope' is published"),
        ({"rules": [{"name": "x", "groups": "ops", "servers": {}}]}, "F: views: rule 'x': groups must be a list"),
        ({"rules": [{"name": "x", "servers": {"a": {"allow": "echo"}}}]}, "rule 'x': server 'a': allow must be"),
        ({"rules": [{"name": "x", "servers": {}, "who": 1}]}, "F: views: rule 'x': unknown key(s) 'who'"),
        ({"rules": [{"name": "x", "servers": {}}, {"name": "x", "servers": {}}]}, "two rules are named 'x'"),
    ],
)
def test_a_bad_view_is_named(views: Any, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        views_file.parse({"views": views}, "F", ["a"])
    assert message in str(refused.value)


def test_a_bad_view_in_the_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({**CONFIG, "views": {"rules": [{"name": "r", "servers": {"mail": "*"}}]}}))
    with pytest.raises(ConfigError) as refused:
        views_file.load(str(path))
    assert str(refused.value).startswith(f"MCPGATE_CONFIG {path}: views: rule 'r': no server 'mail'")
    path.write_text(json.dumps(CONFIG))
    table = views_file.load(str(path))
    assert table is not None and [rule.name for rule in table.views.rules] == ["ops", "readers"]


def test_healthz_names_only_the_servers_a_caller_sees(gw: Gateway, tokens: dict[str, str]) -> None:
    def names(bearer: str) -> list[str]:
        reply = gw.request("GET", "/healthz", headers={"Authorization": f"Bearer {bearer}"})
        assert reply.status == 200, reply
        return sorted(reply.json()["servers"])

    assert names(tokens["ops"]) == ["files", "notes"]  # the servers alone: the aggregate "*" is no server
    assert names(tokens["reader"]) == ["files"]
    assert names(tokens["stranger"]) == []
