"""MCPGATE_CONFIG's groups and the default aggregate without gunicorn (serve/hub/groups.py): the file's rules and
messages, the paths routed, the groups as published servers, MCPGATE_HUB, and a reload (nothing is spawned)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpgate.config.settings import Settings
from mcpgate.serve.hub.groups import AGGREGATE
from mcpgate.serve.hub.server import HubServer
from mcpgate.serve.servers.config_file import ConfigError
from mcpgate.serve.servers.published import PublishedServers

DEMO = {"command": sys.executable, "args": ["-m", "mcpgate.demo_server"]}


def write(path: Path, servers: dict[str, Any], **top: Any) -> str:
    path.write_text(json.dumps({"mcpServers": servers, **top}))
    return str(path)


def published(path: Path, servers: dict[str, Any], env: dict[str, str] | None = None, **top: Any) -> PublishedServers:
    return PublishedServers(Settings.from_env(env or {}, config=write(path, servers, **top)))


@pytest.mark.parametrize(
    ("servers", "groups", "message"),
    [
        pytest.param({"a": DEMO}, [], '"groups" must be a JSON object', id="not-an-object"),
        pytest.param({"a": DEMO}, {"a": {"servers": ["a"]}}, "a server has that name already", id="a-servers-name"),
        pytest.param({"a": DEMO}, {"g h": {"servers": ["a"]}}, "a server name's shape", id="bad-name"),
        pytest.param({"a": DEMO}, {"g": {"servers": []}}, "non-empty list", id="no-server"),
        pytest.param({"a": DEMO}, {"g": {"servers": ["a", "a"]}}, "lists a server twice", id="twice"),
        pytest.param({"a": DEMO}, {"g": {"servers": ["b"]}}, "'b' is no server of mcpServers", id="unknown"),
        pytest.param({"a": DEMO}, {"g": {"servers": ["a"], "x": 1}}, "no other key", id="unknown-key"),
        pytest.param(
            {"a__b": DEMO}, {"g": {"servers": ["a__b"]}}, "cannot be namespaced by 'a__b'", id="separator-in-name"
        ),
        pytest.param(
            {"a": DEMO, "b": {**DEMO, "prefix": "a"}},
            {"g": {"servers": ["a", "b"]}},
            "servers 'a' and 'b' share the prefix 'a'",
            id="shared-prefix",
        ),
    ],
)
def test_a_bad_group_refuses_the_file_naming_it(
    tmp_path: Path, servers: dict[str, Any], groups: Any, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        published(tmp_path / "mcp.json", servers, groups=groups)
    assert "mcp.json" in str(refused.value)


def test_groups_and_the_aggregate_are_routed_and_published(tmp_path: Path) -> None:
    servers = published(
        tmp_path / "mcp.json",
        {"a": DEMO, "b": {**DEMO, "prefix": "bee"}, "c": DEMO},
        groups={"ab": {"servers": ["a", "b"]}},
    )
    assert servers.names() == ["a", "b", "c"]  # GET /servers and the 404's list: the servers
    assert servers.route("/groups/ab/mcp") == ("ab", "mcp") and servers.route("/groups/ab/sse/") == ("ab", "sse")
    assert servers.route("/mcp") == (AGGREGATE, "mcp") and servers.route("/messages") == (AGGREGATE, "messages")
    assert servers.route("/groups/nope/mcp") is None and servers.route("/servers/ab/mcp") == ("ab", "mcp")
    assert servers.get("ab") is not None
    group = servers.get("ab")
    assert isinstance(group, HubServer) and [(m.name, m.prefix) for m in group.members] == [("a", "a"), ("b", "bee")]
    assert group.members[0].spec is servers.get("a").child_spec  # type: ignore[union-attr]
    assert group.settings.path == "/groups/ab/mcp" and group.child_spec.label_prefix == "ab/"
    aggregate = servers.get(AGGREGATE)
    assert isinstance(aggregate, HubServer) and [m.name for m in aggregate.members] == ["a", "b", "c"]
    assert aggregate.settings.path == "/mcp" and aggregate.command_problem() is None
    assert {name for name, _ in servers.items()} == {"a", "b", "c", "ab", AGGREGATE}


@pytest.mark.parametrize(
    ("servers", "env", "expected"),
    [
        pytest.param({"a": DEMO}, {}, None, id="one-server-no-aggregate"),
        pytest.param({"a": DEMO, "b": DEMO}, {"MCPGATE_HUB": "false"}, None, id="turned-off"),
        pytest.param({"a": DEMO, "b__x": DEMO, "c": {**DEMO, "prefix": "a"}}, {}, ["a"], id="bad-prefixes-left-out"),
    ],
)
def test_the_default_aggregate(tmp_path: Path, servers: dict[str, Any], env: dict[str, str], expected: Any) -> None:
    aggregate = published(tmp_path / "mcp.json", servers, env).get(AGGREGATE)
    if expected is None:
        assert aggregate is None
    else:
        assert isinstance(aggregate, HubServer) and [m.name for m in aggregate.members] == expected


def test_a_members_tool_lists_go_with_it_onto_the_aggregate(tmp_path: Path) -> None:
    servers = published(tmp_path / "mcp.json", {"a": {**DEMO, "mcpgate": {"tools_deny": ["echo"]}}, "b": DEMO})
    aggregate = servers.get(AGGREGATE)
    assert isinstance(aggregate, HubServer)
    a, b = aggregate.members
    assert a.tools is not None and not a.tools.visible("echo") and b.tools is None


def test_a_members_that_cannot_start_are_the_groups_problem_only_when_all_are(tmp_path: Path) -> None:
    gone = {"command": "no-such-program-mcpgate"}
    servers = published(
        tmp_path / "mcp.json", {"a": DEMO, "x": gone, "y": gone}, groups={"xy": {"servers": ["x", "y"]}}
    )
    assert servers.get(AGGREGATE).command_problem() is None  # type: ignore[union-attr]
    problem = servers.get("xy").command_problem()  # type: ignore[union-attr]
    assert problem is not None and "x:" in problem and "y:" in problem


def test_reload_keeps_an_unchanged_group_and_replaces_a_changed_one(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    servers = published(path, {"a": DEMO, "b": DEMO, "c": DEMO}, groups={"ab": {"servers": ["a", "b"]}})
    ab, everything = servers.get("ab"), servers.get(AGGREGATE)
    write(path, {"a": DEMO, "b": DEMO, "c": {**DEMO, "env": {"X": "1"}}}, groups={"ab": {"servers": ["a", "b"]}})
    report = servers.reload()
    assert report.replaced == ("c",)
    assert servers.get("ab") is ab and ab is not None and not ab.closing
    assert servers.get(AGGREGATE) is not everything and everything is not None and everything.closing
    write(path, {"a": DEMO, "b": DEMO, "c": DEMO}, groups={"ab": {"servers": ["a"]}, "bad": {"servers": ["z"]}})
    refused = servers.reload()
    assert refused.error is not None and "'z' is no server" in refused.error and servers.get("ab") is ab


def test_the_gateways_tool_lists_apply_to_each_member_not_to_the_namespaced_names(tmp_path: Path) -> None:
    env = {"MCPGATE_TOOLS_ALLOW": "echo,add"}
    aggregate = published(tmp_path / "mcp.json", {"a": DEMO, "b": DEMO}, env).get(AGGREGATE)
    assert isinstance(aggregate, HubServer)
    assert aggregate.settings.tools_allow == () and aggregate.settings.tools_deny == ()  # "a__echo" is not "echo"
    for member in aggregate.members:
        assert member.tools is not None and member.tools.visible("echo") and not member.tools.visible("slow")


def test_health_names_the_servers_alone(tmp_path: Path) -> None:
    status, body = published(tmp_path / "mcp.json", {"a": DEMO, "b": DEMO}, groups={"g": {"servers": ["a"]}}).health()
    assert status == 200 and set(body["servers"]) == {"a", "b"} and body["sessions"] == 0
