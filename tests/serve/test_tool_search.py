"""The search view (MCPGATE_TOOL_SEARCH) through gunicorn, on a server with the corpus's 300 tools
(tests/fixtures/corpus_tools_server.py): tools/list shows only search_tools and stays under 2 KB, a search
returns the right tool's full definition, and calling that tool works, in 2025 sessions (raw HTTP and the
official SDK) and 2026-07-28 requests; pinned tools are listed beside the meta-tool; a tool the server's lists
hide is never found; a paginated listing is read to its end."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.support import (
    FIXTURES,
    Gateway,
    call,
    lazy_gateways,
    modern_body,
    open_session,
    post_modern,
    reply_message,
    write_config,
)

SERVER = f"{sys.executable} {FIXTURES / 'corpus_tools_server.py'}"
CORPUS = json.loads((FIXTURES / "tool_search_corpus.json").read_text())
DEFINITIONS = {
    f"{s}__{t['name']}": {**t, "name": f"{s}__{t['name']}"} for s, ts in CORPUS["servers"].items() for t in ts
}
ENVS = {
    "search": {"MCPGATE_COMMAND": SERVER, "MCPGATE_TOOL_SEARCH": "true"},
    "pinned": {
        "MCPGATE_COMMAND": SERVER,
        "MCPGATE_TOOL_SEARCH": "true",
        "MCPGATE_TOOL_SEARCH_PINNED": "weather__geocode,no_such_tool",
    },
    "denied": {"MCPGATE_COMMAND": SERVER, "MCPGATE_TOOL_SEARCH": "true", "MCPGATE_TOOLS_DENY": "jira__create_ticket"},
    "paged": {"MCPGATE_COMMAND": SERVER + " --page 7", "MCPGATE_TOOL_SEARCH": "true"},
    "off": {"MCPGATE_COMMAND": SERVER},
}
HANG_GUARD = 60


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways(ENVS) as get:
        yield get


def search_call(query: str, msg_id: Any = 3, limit: int = 5) -> dict[str, Any]:
    return call("search_tools", {"query": query, "limit": limit}, msg_id)


def found(message: dict[str, Any]) -> list[dict[str, Any]]:
    result = message["result"]
    assert result["isError"] is False, message
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return list(result["structuredContent"]["tools"])


def test_the_list_is_the_meta_tool_alone_under_2_kb(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("search")
    headers = open_session(gw)
    reply = gw.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    listed = reply_message(reply)["result"]["tools"]
    print(f"tools/list of a server with {len(DEFINITIONS)} tools in the search view: {len(reply.body)} bytes")
    assert [tool["name"] for tool in listed] == ["search_tools"]
    assert len(reply.body) < 2048
    full = gateways("off")
    whole = full.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=open_session(full))
    print(f"the same server without it: {len(whole.body)} bytes")
    assert len(reply_message(whole)["result"]["tools"]) == len(DEFINITIONS) == 300


def test_a_search_returns_the_definition_and_its_call_works(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("search")
    headers = open_session(gw)
    tools = found(reply_message(gw.request("POST", body=search_call("open a jira ticket for a bug"), headers=headers)))
    assert 1 <= len(tools) <= 5 and tools[0] == DEFINITIONS["jira__create_ticket"]
    args = {"project": "OPS", "summary": "printer on fire"}
    done = reply_message(gw.request("POST", body=call("jira__create_ticket", args, 4), headers=headers))
    assert done["result"]["content"][0]["text"] == f"called jira__create_ticket with {json.dumps(args, sort_keys=True)}"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [({}, "query must be a non-empty string"), ({"query": "x", "limit": 99}, "limit must be an integer")],
)
def test_bad_arguments_are_a_tool_error(
    gateways: Callable[[str], Gateway], arguments: dict[str, Any], problem: str
) -> None:
    gw = gateways("search")
    message = reply_message(gw.request("POST", body=call("search_tools", arguments, 5), headers=open_session(gw)))
    assert message["result"]["isError"] is True and message["result"]["content"][0]["text"].startswith(problem)


def test_modern_requests_list_search_and_call(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("search")
    listed = reply_message(post_modern(gw, modern_body("m-1", "tools/list")))["result"]
    assert [tool["name"] for tool in listed["tools"]] == ["search_tools"] and listed["resultType"] == "complete"
    body = modern_body("m-2", "tools/call", {"name": "search_tools", "arguments": {"query": "scale a deployment"}})
    tools = found(reply_message(post_modern(gw, body)))
    assert DEFINITIONS["kubernetes__scale_deployment"] in tools
    args = {"name": "web", "replicas": "3"}
    body = modern_body("m-3", "tools/call", {"name": "kubernetes__scale_deployment", "arguments": args})
    text = reply_message(post_modern(gw, body))["result"]["content"][0]["text"]
    assert text == f"called kubernetes__scale_deployment with {json.dumps(args, sort_keys=True)}"


def test_the_sdk_client_searches_then_calls(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("search")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with Client(f"{gw.base}/mcp") as client:
                assert [tool.name for tool in (await client.list_tools()).tools] == ["search_tools"]
                result = await client.call_tool("search_tools", {"query": "post a message to a slack channel"})
                names = [tool["name"] for tool in (result.structured_content or {})["tools"]]
                assert "slack__post_message" in names
                posted = await client.call_tool("slack__post_message", {"channel_id": "C1", "text": "hi"})
                assert posted.content[0].text.startswith("called slack__post_message")

    anyio.run(main)


def test_pinned_tools_are_listed_beside_the_meta_tool(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("pinned")
    reply = gw.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=open_session(gw))
    listed = reply_message(reply)["result"]["tools"]
    assert [tool["name"] for tool in listed] == ["search_tools", "weather__geocode"]  # no_such_tool: not the server's
    assert listed[1] == DEFINITIONS["weather__geocode"] and len(reply.body) < 2048


def test_a_hidden_tool_is_never_found(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("denied")
    headers = open_session(gw)
    tools = found(reply_message(gw.request("POST", body=search_call("create jira ticket", limit=20), headers=headers)))
    assert tools and "jira__create_ticket" not in [tool["name"] for tool in tools]
    hidden = reply_message(gw.request("POST", body=call("jira__create_ticket", {}, 6), headers=headers))
    assert hidden["error"] == {"code": -32602, "message": "Unknown tool: jira__create_ticket"}


def test_a_paginated_listing_is_read_to_its_end(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("paged")
    headers = open_session(gw)
    tools = found(reply_message(gw.request("POST", body=search_call("high tide times"), headers=headers)))
    assert DEFINITIONS["weather__get_tide_times"] in tools  # the last server's: on the listing's last pages


def test_the_aggregate_searches_its_namespaced_tools(gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    """MCPGATE_TOOL_SEARCH for every server: the aggregate at /mcp (two servers of 300 tools, as "a" and "b")
    lists search_tools alone too, finds a tool by its namespaced name, and the hub routes its call."""
    entry = {"command": sys.executable, "args": [str(FIXTURES / "corpus_tools_server.py")]}
    config = write_config(tmp_path / "servers.json", {"a": entry, "b": entry})
    gw = gateway_factory({"MCPGATE_CONFIG": config, "MCPGATE_TOOL_SEARCH": "true"})
    headers = open_session(gw)
    reply = gw.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert [tool["name"] for tool in reply_message(reply)["result"]["tools"]] == ["search_tools"]
    assert len(reply.body) < 2048
    tools = found(reply_message(gw.request("POST", body=search_call("high tide times", limit=10), headers=headers)))
    names = [tool["name"] for tool in tools]
    assert "a__weather__get_tide_times" in names and "b__weather__get_tide_times" in names, names
    done = reply_message(
        gw.request("POST", body=call("b__weather__get_tide_times", {"station": "X"}, 4), headers=headers)
    )
    assert done["result"]["content"][0]["text"] == 'called weather__get_tide_times with {"station": "X"}'
