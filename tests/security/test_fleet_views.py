"""Views per identity across a fleet: the instance that serves a request another instance forwarded applies the
view the caller's verified identity selected, never a broader one.

Real instances: gunicorns in resource-server mode against tests/fixtures/oidc_issuer.py, on one Redis, one server
("files", the demo) and first-match views: rule 1, group "contractors": echo only; rule 2, everyone: every tool.
A contractor's token names the group; the token stays with the instance it reached, so what the owner knows of
the caller is what the forward carries (signed: core/session_ids.py).

- A contractor's 2025 session opened on i1, its owner killed and started again (same instance id): the contractor's
  next requests reach i2, which forwards them to i1, which takes the session over. The taken-over session shows
  echo alone and answers a call of another tool as unknown (it showed every tool when only the principal travelled:
  the group rule was skipped and the catch-all matched).
- The instances' views differ (one reloaded, the other not): a forwarded request is refused 503 naming the reason,
  not served under a rule index that means another rule there.
- A 2026-07-28 call forwarded with the contractors' view (signed with the cluster key, as an instance forwards an
  MRTR retry to the one holding the call) is held to that view by the owner: a hidden tool is unknown (the owner
  applied no view to a forwarded request before).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpgate.core import session_ids
from mcpgate.demo_tools import TOOLS
from mcpgate.serve.servers.views_file import fingerprint
from tests.serve.test_takeover import SECRET
from tests.support import DEMO_ENTRY, Gateway, call, crash, modern_body, modern_headers, reply_message
from tests.support.fleet import redis_server
from tests.support.oauth import mint_token, post_with_token

AUDIENCE = "api://mcpgate"
PATH = "/servers/files/mcp"
UNKNOWN = -32602
VIEWS = {
    "rules": [
        {"name": "contractors", "groups": ["contractors"], "servers": {"files": {"allow": ["echo"]}}},
        {"name": "everyone", "servers": {"*": "*"}},
    ]
}
# the same rules under another name: another fingerprint (a reload that reached one instance only)
OTHER_VIEWS = {"rules": [{**VIEWS["rules"][0], "name": "contract staff"}, VIEWS["rules"][1]]}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def contractor(issuer: str) -> str:
    return mint_token(issuer, {"sub": "carol", "aud": AUDIENCE, "scope": "mcp", "groups": ["contractors"]})


def config(tmp_path: Path, name: str, views: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": {"files": DEMO_ENTRY}, "views": views}))
    return str(path)


def instance_env(redis_url: str, issuer: str, name: str, config_path: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MCPGATE_INSTANCE_ID": name,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        "MCPGATE_POOL_SPARES": "0",
        "MCPGATE_CONFIG": config_path,
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_OAUTH_AUDIENCE": AUDIENCE,
    }


def opened(gw: Gateway, token: str) -> dict[str, str]:
    """A 2025 session of the token's principal on `gw`: the headers naming it."""
    reply = post_with_token(gw, token, path=PATH)
    assert reply.status == 200, reply
    headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    done = post_with_token(gw, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, PATH, **headers)
    assert done.status == 202, done
    return headers


def listed(gw: Gateway, token: str, headers: dict[str, str]) -> list[str]:
    reply = post_with_token(gw, token, {"jsonrpc": "2.0", "id": "L", "method": "tools/list"}, PATH, **headers)
    assert reply.status == 200, reply
    return sorted(tool["name"] for tool in reply_message(reply)["result"]["tools"])


def test_a_session_taken_over_from_a_forwarded_request_keeps_the_contractors_view(
    redis_url: str, issuer: str, contractor: str, tmp_path: Path
) -> None:
    path = config(tmp_path, "servers.json", VIEWS)
    envs = {name: instance_env(redis_url, issuer, name, path) for name in ("i1", "i2")}
    started = [Gateway(envs["i1"]), Gateway(envs["i2"])]
    try:
        for gw in started:
            gw.wait_ready()
        owner, other = started
        headers = opened(owner, contractor)
        assert listed(owner, contractor, headers) == ["echo"]
        assert listed(other, contractor, headers) == ["echo"]  # forwarded to the owner's session
        crash(owner)
        again = Gateway(envs["i1"], port=owner.port)  # i1 started again: the session's id still names it
        started.append(again)
        again.wait_ready()
        # the contractor's next requests reach i2, which forwards them to i1: i1 takes the session over
        assert listed(other, contractor, headers) == ["echo"]
        assert "taken over" in again.log() and "taken over" not in other.log(), again.log_tail()
        hidden = post_with_token(other, contractor, call("add", {"a": 1, "b": 2}, 5), PATH, **headers)
        assert reply_message(hidden).get("error") == {"code": UNKNOWN, "message": "Unknown tool: add"}, hidden
        shown = post_with_token(other, contractor, call("echo", {"message": "hi"}, 6), PATH, **headers)
        assert "hi" in json.dumps(reply_message(shown)["result"]), shown
        assert len(TOOLS) > 1
    finally:
        for gw in started:
            gw.stop()


def test_a_forwarded_request_between_instances_with_other_views_is_refused(
    redis_url: str, issuer: str, contractor: str, tmp_path: Path
) -> None:
    owner = Gateway(instance_env(redis_url, issuer, "j1", config(tmp_path, "one.json", VIEWS)))
    other = Gateway(instance_env(redis_url, issuer, "j2", config(tmp_path, "two.json", OTHER_VIEWS)))
    try:
        owner.wait_ready()
        other.wait_ready()
        headers = opened(owner, contractor)
        refused = post_with_token(other, contractor, call("echo", {"message": "x"}, 3), PATH, **headers)
        assert refused.status == 503, refused
        message = reply_message(refused)["error"]["message"]
        assert "different views" in message and "reload MCPGATE_CONFIG" in message, message
        assert listed(owner, contractor, headers) == ["echo"]  # the owner's own caller: served as before
    finally:
        owner.stop()
        other.stop()


def test_a_forwarded_modern_call_is_held_to_the_view_its_forwarder_signed(
    redis_url: str, issuer: str, tmp_path: Path
) -> None:
    path = config(tmp_path, "servers.json", VIEWS)
    owner = Gateway(instance_env(redis_url, issuer, "k1", path))
    sender = Gateway(instance_env(redis_url, issuer, "k2", path))  # in the directory: its forwards are let in
    try:
        owner.wait_ready()
        sender.wait_ready()
        contractors = f"0~{fingerprint(VIEWS)}"  # rule 1, as k2 chose it from the contractor's token
        for n, (tool, arguments) in enumerate([("add", {"a": 1, "b": 2}), ("echo", {"message": "hi"})]):
            body = json.dumps(modern_body(n, "tools/call", {"name": tool, "arguments": arguments})).encode()
            signed = session_ids.ForwardedRequest("POST", PATH, "", "", body)
            value = session_ids.forwarded(
                f"{issuer}#carol", "k2", time.time(), signed, SECRET.encode(), view=contractors
            )
            headers = {**modern_headers("tools/call", tool), "Mcpgate-Forwarded": value}
            message = reply_message(owner.request("POST", PATH, body=body, headers=headers))
            if tool == "add":
                assert message.get("error") == {"code": UNKNOWN, "message": "Unknown tool: add"}, message
            else:
                assert "hi" in json.dumps(message["result"]), message
    finally:
        owner.stop()
        sender.stop()


def test_a_session_opened_under_other_views_is_not_taken_over(
    redis_url: str, issuer: str, contractor: str, tmp_path: Path
) -> None:
    """Its view at open no longer exists (a reload since): 404, its client opens a new session under the views now
    in force; never a view chosen from the request that happens to come."""
    first = Gateway(instance_env(redis_url, issuer, "m1", config(tmp_path, "one.json", VIEWS)))
    started = [first]
    try:
        first.wait_ready()
        headers = opened(first, contractor)
        crash(first)
        again = Gateway(
            instance_env(redis_url, issuer, "m1", config(tmp_path, "two.json", OTHER_VIEWS)), port=first.port
        )
        started.append(again)
        again.wait_ready()
        gone = post_with_token(again, contractor, call("echo", {"message": "x"}, 3), PATH, **headers)
        assert gone.status == 404, gone
        assert "opened under other views" in again.log() and "taken over (child" not in again.log(), again.log_tail()
        assert listed(again, contractor, opened(again, contractor)) == ["echo"]  # a new session: the new views
    finally:
        for gw in started:
            gw.stop()


def test_a_session_of_the_aggregate_taken_over_keeps_its_view_per_member(
    redis_url: str, issuer: str, contractor: str, tmp_path: Path
) -> None:
    """The aggregate (/mcp of two servers) makes its child per view: taken over, the child is made for the view
    kept at open (files' echo alone), neither every member nor nothing."""
    path = tmp_path / "hub.json"
    path.write_text(json.dumps({"mcpServers": {"files": DEMO_ENTRY, "notes": DEMO_ENTRY}, "views": VIEWS}))
    env = instance_env(redis_url, issuer, "h1", str(path))
    first = Gateway(env)
    started = [first]
    try:
        first.wait_ready()
        reply = post_with_token(first, contractor)
        assert reply.status == 200, reply
        headers = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        assert post_with_token(first, contractor, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers)
        body = {"jsonrpc": "2.0", "id": "L", "method": "tools/list"}
        before = reply_message(post_with_token(first, contractor, body, **headers))["result"]["tools"]
        assert [tool["name"] for tool in before] == ["files__echo"], before
        crash(first)
        again = Gateway(env, port=first.port)
        started.append(again)
        again.wait_ready()
        after = reply_message(post_with_token(again, contractor, body, **headers))
        assert "taken over (child" in again.log(), again.log_tail()
        assert [tool["name"] for tool in after["result"]["tools"]] == ["files__echo"], after
    finally:
        for gw in started:
            gw.stop()
