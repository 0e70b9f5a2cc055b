"""The search view as a group's option (`"groups": {"g": {"servers": [...], "tool_search": true}}`): that group's
path lists the search_tools meta-tool alone, a search finds the members' tools by their namespaced names, and
they are called as usual, in both eras; another group of the same servers (and the aggregate) lists them all.
A value other than true or false refuses the file naming the group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from mcpgate.config.settings import Settings
from mcpgate.serve.servers.config_file import ConfigError
from mcpgate.serve.servers.published import PublishedServers
from tests.support import (
    DEMO_ENTRY,
    Gateway,
    Reply,
    call,
    modern_body,
    open_session,
    post_modern,
    reply_message,
    serving,
)

GROUPS = {"lean": {"servers": ["files", "notes"], "tool_search": True}, "full": {"servers": ["files", "notes"]}}


class At:
    """Requests to one path by default (the helpers post to `request`'s default path)."""

    def __init__(self, gw: Gateway, path: str) -> None:
        self.gw, self.path = gw, path

    def request(self, method: str, path: str | None = None, **kwargs: Any) -> Reply:
        return self.gw.request(method, path or self.path, **kwargs)


def at(gw: Gateway, path: str) -> Gateway:
    return cast("Gateway", At(gw, path))


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    path = tmp_path_factory.mktemp("hub-search") / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"files": DEMO_ENTRY, "notes": DEMO_ENTRY}, "groups": GROUPS}))
    with serving({"MCPGATE_CONFIG": str(path)}, behind=True) as gateway:
        yield gateway


def legacy(gw: Gateway, path: str, body: dict[str, Any]) -> dict[str, Any]:
    headers = open_session(at(gw, path))
    return reply_message(gw.request("POST", path, body=body, headers=headers))


def found(message: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in message["result"]["structuredContent"]["tools"]]


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
SEARCH = call("search_tools", {"query": "add two numbers", "limit": 5}, 3)


def test_a_group_with_tool_search_lists_the_meta_tool_alone(gw: Gateway) -> None:
    lean = [tool["name"] for tool in legacy(gw, "/groups/lean/mcp", LIST)["result"]["tools"]]
    assert lean == ["search_tools"], lean
    modern = reply_message(post_modern(at(gw, "/groups/lean/mcp"), modern_body("m-1", "tools/list")))
    assert [tool["name"] for tool in modern["result"]["tools"]] == ["search_tools"], modern
    for path in ("/groups/full/mcp", "/mcp"):  # the same servers without the option: every tool
        every = {tool["name"] for tool in legacy(gw, path, LIST)["result"]["tools"]}
        assert {"files__add", "notes__add", "files__echo"} <= every and "search_tools" not in every, (path, every)


def test_the_search_finds_the_members_tools_and_they_are_called(gw: Gateway) -> None:
    hits = found(legacy(gw, "/groups/lean/mcp", SEARCH))
    assert {"files__add", "notes__add"} & set(hits), hits
    body = modern_body("m-2", "tools/call", SEARCH["params"])
    modern_hits = found(reply_message(post_modern(at(gw, "/groups/lean/mcp"), body)))
    assert {"files__add", "notes__add"} & set(modern_hits), modern_hits
    added = legacy(gw, "/groups/lean/mcp", call("notes__add", {"a": 2, "b": 3}, 4))
    assert added["result"]["structuredContent"] == {"result": 5}, added
    modern_call = modern_body("m-3", "tools/call", {"name": "files__add", "arguments": {"a": 2, "b": 3}})
    assert reply_message(post_modern(at(gw, "/groups/lean/mcp"), modern_call))["result"]["structuredContent"] == {
        "result": 5
    }


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_tool_search_must_be_true_or_false(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "mcp.json"
    group: dict[str, Any] = {"servers": ["a"], "tool_search": value}
    path.write_text(json.dumps({"mcpServers": {"a": DEMO_ENTRY}, "groups": {"g": group}}))
    if value is None:  # null: as if not given, the gateway's setting
        servers = PublishedServers(Settings.from_env({}, config=str(path)))
        gateway = servers.get("g")
        assert gateway is not None and gateway.search is None
        return
    with pytest.raises(ConfigError, match="group 'g': tool_search must be true or false"):
        PublishedServers(Settings.from_env({}, config=str(path)))


def test_the_option_turns_the_search_view_on_or_off_per_group(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    groups = {"on": {"servers": ["a"], "tool_search": True}, "off": {"servers": ["a"], "tool_search": False}}
    path.write_text(json.dumps({"mcpServers": {"a": DEMO_ENTRY, "b": DEMO_ENTRY}, "groups": groups}))
    servers = PublishedServers(Settings.from_env({"MCPGATE_TOOL_SEARCH": "true"}, config=str(path)))
    shown = {key: gateway.search is not None for key, gateway in servers.hub.items()}
    assert shown == {"on": True, "off": False, "*": True}, shown  # the aggregate: the gateway's setting
