"""MCPGATE_TOOLS_ALLOW / MCPGATE_TOOLS_DENY through gunicorn mcpgate.wsgi: hidden tools vanish from tools/list and
a call of one is answered by the gateway as a server answers an unknown tool, in both eras (2025 sessions by raw
HTTP and the SDK client, 2026-07-28 requests by raw HTTP, bridged and modern children) and on the HTTP+SSE
transport; and the filesystem server published read-only (its write tools denied)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from mcpgate.demo_tools import TOOLS
from tests.interop import conformance
from tests.support import (
    DEMO_ENTRY,
    MODERN_CHILD,
    Gateway,
    call,
    lazy_gateways,
    modern_body,
    modern_headers,
    named,
    open_session,
    post_modern,
    reply_message,
    reply_messages,
    write_config,
)

HANG_GUARD = 60
DEMO = sorted(TOOLS)
ENVS = {
    "deny": {"MCPGATE_TOOLS_DENY": "add"},
    "deny-sse": {"MCPGATE_TOOLS_DENY": "add", "MCPGATE_SSE_AFTER": "0"},  # every reply an SSE stream
    "allow": {"MCPGATE_TOOLS_ALLOW": "echo,slow,add", "MCPGATE_TOOLS_DENY": "add"},
    "absent": {"MCPGATE_TOOLS_DENY": "no_such_tool"},  # a listing that names it not passes as it came
    "modern": {"MCPGATE_COMMAND": MODERN_CHILD, "MCPGATE_TOOLS_DENY": "where"},
    "modern-sse": {"MCPGATE_COMMAND": MODERN_CHILD, "MCPGATE_TOOLS_DENY": "where", "MCPGATE_SSE_AFTER": "0"},
}
DENY = pytest.mark.parametrize("kind", ["deny", "deny-sse"])
UNKNOWN = -32602


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways(ENVS) as get:
        yield get


def tool_names(result: dict[str, Any]) -> list[str]:
    return sorted(tool["name"] for tool in result["tools"])


def unknown_tool(message: dict[str, Any], msg_id: Any, name: str) -> None:
    assert message == {"jsonrpc": "2.0", "id": msg_id, "error": {"code": UNKNOWN, "message": f"Unknown tool: {name}"}}


# -- 2025 sessions by raw HTTP: single requests, batches, JSON and SSE replies --


@DENY
def test_a_denied_tool_vanishes_from_tools_list(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    headers = open_session(gw)
    reply = gw.request("POST", body={"jsonrpc": "2.0", "id": "L", "method": "tools/list"}, headers=headers)
    assert reply.status == 200, reply
    assert reply.content_type.startswith("text/event-stream" if kind == "deny-sse" else "application/json"), reply
    message = reply_message(reply)
    assert message["id"] == "L" and tool_names(message["result"]) == [name for name in DEMO if name != "add"]


@DENY
def test_a_call_of_a_denied_tool_is_answered_like_an_unknown_one(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    headers = open_session(gw)
    hidden = gw.request("POST", body=call("add", {"a": 1, "b": 2}, msg_id=5), headers=headers)
    unknown = gw.request("POST", body=call("nosuch", {"a": 1, "b": 2}, msg_id=5), headers=headers)
    assert hidden.status == unknown.status == 200, (hidden, unknown)
    unknown_tool(reply_message(hidden), 5, "add")  # the demo would have added them: it was never forwarded
    assert json.dumps(reply_message(unknown)).replace("nosuch", "add") == json.dumps(reply_message(hidden))


@DENY
def test_a_batch_mixing_lists_and_calls(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    headers = open_session(gw, "2025-03-26")  # the revision that has batches
    batch = [
        call("add", {"a": 1, "b": 2}, msg_id=1),
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        call("echo", {"message": "still here"}, msg_id=3),
        {"jsonrpc": "2.0", "id": 4, "method": "prompts/list"},
        call("add", {"a": 1, "b": 2}, msg_id=6),
    ]
    reply = gw.request("POST", body=batch, headers=headers)
    assert reply.status == 200, reply
    messages = reply_messages(reply)
    found = {m["id"]: m for m in (messages[0] if isinstance(messages[0], list) else messages)}
    assert sorted(found) == [1, 2, 3, 4, 6], reply
    unknown_tool(found[1], 1, "add")
    unknown_tool(found[6], 6, "add")
    assert "add" not in tool_names(found[2]["result"]) and "echo" in tool_names(found[2]["result"])
    assert found[3]["result"]["content"][0]["text"] == "still here"
    assert found[4]["result"]["prompts"]


def test_an_allow_list_shows_only_its_tools_less_the_denied(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("allow")
    headers = open_session(gw)
    listed = gw.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert tool_names(reply_message(listed)["result"]) == ["echo", "slow"]
    for msg_id, name in enumerate(["add", "bytes", "log"], start=2):
        unknown_tool(reply_message(gw.request("POST", body=call(name, {}, msg_id), headers=headers)), msg_id, name)
    echoed = gw.request("POST", body=call("echo", {"message": "ok"}, 9), headers=headers)
    assert reply_message(echoed)["result"]["content"][0]["text"] == "ok"


# -- the official SDK: a 2025 session over Streamable HTTP, and the HTTP+SSE transport --


async def sdk_round(client: Any) -> None:
    assert sorted(tool.name for tool in (await client.list_tools()).tools) == [n for n in DEMO if n != "add"]
    with pytest.raises(MCPError) as refused:
        await client.call_tool("add", {"a": 1, "b": 2})
    assert (refused.value.code, refused.value.message) == (UNKNOWN, "Unknown tool: add")
    assert (await client.call_tool("echo", {"message": "hi"})).content[0].text == "hi"


@pytest.mark.parametrize("transport", ["streamable", "sse"])
def test_the_sdk_client_sees_no_hidden_tool(gateways: Callable[[str], Gateway], transport: str) -> None:
    gw = gateways("deny")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            target: Any = gw.url if transport == "streamable" else sse_client(f"{gw.base}/sse")
            async with Client(target, mode="legacy") as client:
                await sdk_round(client)

    anyio.run(main)


# -- 2026-07-28 requests by raw HTTP: the bridged demo child and the SDK-written modern child --


def modern_list(gw: Gateway, msg_id: Any) -> dict[str, Any]:
    reply = post_modern(gw, modern_body(msg_id, "tools/list"))
    assert reply.status == 200, reply
    message = reply_message(reply)
    assert message["id"] == msg_id, reply
    return dict(message["result"])


@DENY
def test_modern_requests_to_a_bridged_child(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    result = modern_list(gw, "m-1")
    assert tool_names(result) == [name for name in DEMO if name != "add"]
    assert result["resultType"] == "complete" and "ttlMs" in result  # still stamped
    body = modern_body("m-2", "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    hidden = post_modern(gw, body)
    unknown = post_modern(gw, modern_body("m-2", "tools/call", {"name": "nosuch", "arguments": {"a": 1, "b": 2}}))
    assert hidden.status == unknown.status == 200, (hidden, unknown)
    unknown_tool(reply_message(hidden), "m-2", "add")
    assert json.dumps(reply_message(unknown)).replace("nosuch", "add") == json.dumps(reply_message(hidden))


def test_a_deny_list_naming_no_listed_tool_changes_no_listing(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("absent")
    result = modern_list(gw, "a-1")
    assert tool_names(result) == DEMO and result["resultType"] == "complete" and "ttlMs" in result
    headers = open_session(gw)
    listed = gw.request("POST", body={"jsonrpc": "2.0", "id": "a-2", "method": "tools/list"}, headers=headers)
    assert tool_names(reply_message(listed)["result"]) == DEMO
    unknown_tool(
        reply_message(gw.request("POST", body=call("no_such_tool", {}, 3), headers=headers)), 3, "no_such_tool"
    )


def test_a_retry_naming_a_hidden_tool_is_refused_before_its_state_is_read(
    gateways: Callable[[str], Gateway],
) -> None:
    """An MRTR retry (requestState, inputResponses) of a hidden tool learns nothing about the bridge's state."""
    gw = gateways("deny")
    params = {"name": "add", "arguments": {}, "requestState": "not-a-state", "inputResponses": {}}
    unknown_tool(reply_message(post_modern(gw, modern_body("r-1", "tools/call", params))), "r-1", "add")
    params["name"] = "ask_name"  # a visible tool's retry reaches the bridge, which refuses the state
    reply = post_modern(gw, modern_body("r-2", "tools/call", params))
    assert reply.status == 400 and "requestState" in reply_message(reply)["error"]["message"], reply


@pytest.mark.parametrize("kind", ["modern", "modern-sse"])
def test_modern_requests_to_a_modern_child(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    result = modern_list(gw, 1)
    names = tool_names(result)
    assert "where" not in names and "echo" in names, result
    assert result["ttlMs"] == 4321  # the fixture's own cache hint, kept
    # `where` mirrors its region into Mcp-Param-Region: a call without the header would be a header mismatch
    # (-32020) for a tool that exists; a hidden tool is unknown whatever its headers.
    body = modern_body(2, "tools/call", {"name": "where", "arguments": {"query": "q", "region": "eu"}})
    unknown_tool(reply_message(post_modern(gw, body, modern_headers("tools/call", "where"))), 2, "where")


# -- named servers: each server's own lists (a server's settings are the global ones with its overrides) --


def test_each_named_server_has_its_own_lists(gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    entries = {
        "ro": {**DEMO_ENTRY, "mcpgate": {"tools_deny": ["add", "bytes"]}},
        "one": {**DEMO_ENTRY, "mcpgate": {"tools_allow": "echo"}},
        "all": DEMO_ENTRY,
    }
    gw = gateway_factory({"MCPGATE_CONFIG": write_config(tmp_path / "servers.json", entries)})
    shown = {"ro": [n for n in DEMO if n not in ("add", "bytes")], "one": ["echo"], "all": DEMO}
    for name, expected in shown.items():
        server = named(gw, name)
        assert tool_names(modern_list(server, f"{name}-1")) == expected
        headers = open_session(server)
        listed = server.request("POST", body={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
        assert tool_names(reply_message(listed)["result"]) == expected
        added = reply_message(server.request("POST", body=call("add", {"a": 1, "b": 2}, 3), headers=headers))
        if name == "all":
            assert "error" not in added, added
        else:
            unknown_tool(added, 3, "add")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with Client(sse_client(f"{gw.base}/servers/ro/sse"), mode="legacy") as client:
                assert sorted(tool.name for tool in (await client.list_tools()).tools) == shown["ro"]

    anyio.run(main)


# -- the filesystem server published read-only --

WRITE_TOOLS = ["create_directory", "edit_file", "move_file", "write_file"]


@pytest.mark.npm
def test_the_filesystem_server_published_read_only(gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    conformance.ensure_installed()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello from disk")
    gw = gateway_factory({**conformance.filesystem_server(shared), "MCPGATE_TOOLS_DENY": ",".join(WRITE_TOOLS)})
    target = str(shared / "new.txt")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            for transport in (gw.url, sse_client(f"{gw.base}/sse")):
                async with Client(transport, mode="legacy") as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    assert "read_text_file" in names and "list_directory" in names and not names & set(WRITE_TOOLS)
                    read = await client.call_tool("read_text_file", {"path": str(shared / "hello.txt")})
                    assert read.content[0].text == "hello from disk"
                    for name in WRITE_TOOLS:
                        with pytest.raises(MCPError, match=f"Unknown tool: {name}"):
                            await client.call_tool(name, {"path": target, "content": "x", "source": target})

    anyio.run(main)
    result = modern_list(gw, "fs-1")
    assert "read_text_file" in tool_names(result) and not set(tool_names(result)) & set(WRITE_TOOLS)
    body = modern_body("fs-2", "tools/call", {"name": "write_file", "arguments": {"path": target, "content": "x"}})
    unknown_tool(reply_message(post_modern(gw, body, timeout=60)), "fs-2", "write_file")
    assert not Path(target).exists()
