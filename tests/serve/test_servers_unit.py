"""MCPGATE_CONFIG without gunicorn: the file's rules and messages (serve/config_file.py), a server's settings, and the
PublishedServers's routing, listing, unknown names and reload (nothing is spawned)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpgate.config.settings import Settings
from mcpgate.serve.front.http import HttpRequest, Refusal
from mcpgate.serve.servers import config_file
from mcpgate.serve.servers.config_file import ConfigError, ServerEntry
from mcpgate.serve.servers.published import PublishedServers

DEMO = {"command": sys.executable, "args": ["-m", "mcpgate.demo_server"]}


def parse(document: Any) -> config_file.Config:
    return config_file.parse(json.dumps(document), "MCPGATE_CONFIG f.json")


def test_a_desktop_host_file_is_read_whole() -> None:
    config = parse(
        {
            "globalShortcut": "",  # a desktop host's own keys are left alone
            "mcpServers": {
                "fs": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                    "env": {"A": "1"},
                    "cwd": "/",
                    "mcpgate": {"max_sessions": 3, "pass_env": ["TOKEN"], "tools_deny": "write_file, move_file"},
                },
                "demo": {**DEMO, "type": "stdio"},
            },
        }
    )
    fs, demo = config.servers
    assert fs == ServerEntry(
        "fs",
        ("npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"),
        {"A": "1"},
        "/",
        {"max_sessions": 3, "pass_env": ("TOKEN",), "tools_deny": ("write_file", "move_file")},
    )
    assert demo.argv == (sys.executable, "-m", "mcpgate.demo_server") and demo.overrides == {}
    assert config.skipped == ()


def test_a_prefix_is_kept_and_defaults_to_none() -> None:
    config = parse({"mcpServers": {"fs": {**DEMO, "prefix": "files"}, "demo": DEMO}})
    assert [entry.prefix for entry in config.servers] == ["files", None]


def test_other_transports_are_reported_and_skipped() -> None:
    config = parse(
        {
            "mcpServers": {
                "remote": {"url": "https://mcp.example.com/mcp"},  # a remote server (tests/serve/test_remote_*)
                "socket": {"type": "ws", "url": "wss://x/ws"},
                "demo": DEMO,
            }
        }
    )
    assert config.names() == ["remote", "demo"]
    assert [line.split(" skipped")[0] for line in config.skipped] == ["MCPGATE_CONFIG f.json: server 'socket'"]
    assert "'ws'" in config.skipped[0]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[1, 2]", 'must be a JSON object with an "mcpServers" object'),
        ('{"mcpServers": []}', 'must be a JSON object with an "mcpServers" object'),
        ("{not json", "not valid JSON"),
        ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "the key 'a' appears twice"),
        ({"mcpServers": {}}, "lists no server"),
        ({"mcpServers": {"r": {"type": "ws", "url": "wss://x"}}}, "lists no server"),
        ({"mcpServers": {"a": {"type": "http", "command": "x"}}}, "server 'a': type 'http' names a remote server"),
        ({"mcpServers": {"my server": DEMO}}, "server 'my server': a name must be 1 to 64 letters"),
        ({"mcpServers": {"-x": DEMO}}, "server '-x': a name must be"),
        ({"mcpServers": {"x" * 65: DEMO}}, "a name must be 1 to 64"),
        ({"mcpServers": {"a/b": DEMO}}, "server 'a/b': a name must be"),
        ({"mcpServers": {"a": "npx"}}, "server 'a': must be a JSON object"),
        ({"mcpServers": {"a": {}}}, "server 'a': command must name the program"),
        ({"mcpServers": {"a": {"command": ""}}}, "server 'a': command must name the program"),
        ({"mcpServers": {"a": {**DEMO, "args": "-m x"}}}, "server 'a': args must be a list of strings"),
        ({"mcpServers": {"a": {**DEMO, "env": {"N": 1}}}}, "server 'a': env must be a JSON object of strings"),
        ({"mcpServers": {"a": {**DEMO, "cwd": "/no/such/dir"}}}, "server 'a': cwd must name an existing directory"),
        ({"mcpServers": {"a": {**DEMO, "type": "pipe"}}}, "server 'a': type must be \"stdio\""),
        ({"mcpServers": {"a": {**DEMO, "disabled": True}}}, "server 'a': unknown key(s) 'disabled'"),
        ({"mcpServers": {"a": {**DEMO, "prefix": "a b"}}}, "server 'a': prefix must be 1 to 64 letters"),
        ({"mcpServers": {"a": {**DEMO, "prefix": 3}}}, "server 'a': prefix must be 1 to 64 letters"),
        ({"mcpServers": {"a": {**DEMO, "mcpgate": []}}}, "server 'a': mcpgate must be a JSON object"),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"max_session": 3}}}},
            "server 'a': unknown per-server setting(s) mcpgate.max_session (allowed: max_sessions,",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"auth_token": "x"}}}},
            "unknown per-server setting(s) mcpgate.auth_token",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"max_sessions": 0}}}},
            "server 'a': mcpgate.max_sessions must be greater than 0 (got 0)",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"max_sessions": "3"}}}},
            "server 'a': mcpgate.max_sessions must be an integer (got '3')",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"max_sessions": True}}}},
            "mcpgate.max_sessions must be an integer (got True)",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"session_idle_ttl": -1}}}},
            "mcpgate.session_idle_ttl must be greater than 0 (got -1.0)",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"stderr": "log.txt"}}}},
            'mcpgate.stderr must be "inherit", "discard" or an absolute file path (got \'log.txt\')',
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"child_no_network": "yes"}}}},
            "mcpgate.child_no_network must be true or false (got 'yes')",
        ),
        (
            {"mcpServers": {"a": {**DEMO, "mcpgate": {"pass_env": [1]}}}},
            "mcpgate.pass_env must be a list of strings",
        ),
    ],
)
def test_an_invalid_file_is_refused_naming_the_server_and_the_field(document: Any, message: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(ConfigError) as refused:
        config_file.parse(text, "MCPGATE_CONFIG f.json")
    assert str(refused.value).startswith("MCPGATE_CONFIG f.json: "), refused.value
    assert message in str(refused.value), refused.value


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"MCPGATE_CONFIG .*missing\.json: cannot read it"):
        config_file.load(str(tmp_path / "missing.json"))


def test_a_servers_settings_are_the_gateways_with_its_overrides() -> None:
    base = Settings.from_env({}, max_sessions=7, pool_children=2, tools_allow=("a",))
    entry = ServerEntry("fs", ("x",), overrides={"max_sessions": 2, "tools_deny": ("b",)})
    own = config_file.settings_for(base, entry)
    assert (own.max_sessions, own.pool_children, own.tools_allow, own.tools_deny) == (2, 2, ("a",), ("b",))
    assert (own.path, own.sse_path, own.messages_path) == ("/servers/fs/mcp", "/servers/fs/sse", "/servers/fs/messages")
    assert base.max_sessions == 7 and base.path == "/mcp"


def test_every_per_server_setting_is_declared() -> None:
    assert set(config_file.DECLARED) == set(config_file.PER_SERVER)


def write(path: Path, entries: dict[str, Any]) -> None:
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps({"mcpServers": entries}))
    os.replace(staged, path)


def fleet_of(tmp_path: Path, entries: dict[str, Any], **overrides: Any) -> tuple[PublishedServers, Path]:
    path = tmp_path / "mcp.json"
    write(path, entries)
    return PublishedServers(Settings.from_env({}, config=str(path), config_poll=0, **overrides)), path


def test_the_fleet_routes_named_paths(tmp_path: Path) -> None:
    fleet, _ = fleet_of(tmp_path, {"demo": DEMO, "fs.v2": {"command": "npx", "mcpgate": {"max_sessions": 2}}})
    assert fleet.names() == ["demo", "fs.v2"]
    assert fleet.route("/servers/demo/mcp") == ("demo", "mcp")
    assert fleet.route("/servers/fs.v2/sse/") == ("fs.v2", "sse")
    assert fleet.route("/servers/nope/messages") == ("nope", "messages")  # answered by fleet.unknown
    assert [fleet.route(p) for p in ("/servers", "/servers/demo", "/servers/demo/other")] == [None] * 3
    assert fleet.route("/mcp") == ("*", "mcp")  # two servers: the aggregate of both (serve/hub/groups.py)
    gateway = fleet.get("fs.v2")
    assert gateway is not None and gateway.name == "fs.v2" and gateway.settings.max_sessions == 2
    assert gateway.argv == ["npx"] and gateway.child_spec.label_prefix == "fs.v2/"
    refusal = fleet.unknown("nope")
    assert refusal.status == 404 and refusal.data == {"servers": ["demo", "fs.v2"]}
    assert refusal.message == "Not Found: no server 'nope'; the servers here are: demo, fs.v2"
    assert "<" not in fleet.unknown("<script>").message


def test_the_single_command_keeps_its_paths() -> None:
    fleet = PublishedServers(Settings.from_env({}, path="/x", sse_path="/y/sse"))
    assert fleet.names() == ["default"] and not fleet.named
    assert fleet.route("/x") == fleet.route("/x/") == ("default", "mcp")
    assert fleet.route("/y/sse") == ("default", "sse") and fleet.route("/messages") == ("default", "messages")
    assert fleet.route("/servers/default/mcp") is None
    gateway = fleet.get("default")
    assert gateway is not None and gateway.child_spec.label_prefix == ""


def test_the_listing(tmp_path: Path) -> None:
    fleet, _ = fleet_of(tmp_path, {"a": DEMO, "b": DEMO})
    reply = fleet.listing(HttpRequest({"REQUEST_METHOD": "GET", "SCRIPT_NAME": "/gw"}))
    assert json.loads(reply.body) == {  # type: ignore[arg-type]
        "servers": [
            {"name": "a", "endpoint": "/gw/servers/a/mcp", "sse": "/gw/servers/a/sse"},
            {"name": "b", "endpoint": "/gw/servers/b/mcp", "sse": "/gw/servers/b/sse"},
        ]
    }
    with pytest.raises(Refusal) as refused:
        fleet.listing(HttpRequest({"REQUEST_METHOD": "POST"}))
    assert refused.value.status == 405


def test_config_and_command_together_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    write(path, {"a": DEMO})
    with pytest.raises(ConfigError, match="MCPGATE_CONFIG and MCPGATE_COMMAND are both set"):
        PublishedServers(Settings.from_env({}, config=str(path), command="npx x"))


def test_reload_adds_replaces_removes_and_leaves_the_unchanged_alone(tmp_path: Path) -> None:
    fleet, path = fleet_of(tmp_path, {"a": DEMO, "b": DEMO, "c": DEMO})
    a, b, c = (fleet.get(name) for name in "abc")
    write(path, {"b": DEMO, "c": {**DEMO, "env": {"X": "1"}}, "d": DEMO})
    report = fleet.reload()
    assert (report.added, report.replaced, report.removed, report.unchanged) == (("d",), ("c",), ("a",), ("b",))
    assert report.error is None and report.changed
    assert fleet.names() == ["b", "c", "d"] and fleet.get("b") is b
    new_c = fleet.get("c")
    assert new_c is not c and new_c is not None and new_c.env["X"] == "1"
    assert a is not None and a.closing and c is not None and c.closing and b is not None and not b.closing


def test_reload_of_an_invalid_file_changes_nothing(tmp_path: Path) -> None:
    fleet, path = fleet_of(tmp_path, {"a": DEMO})
    a = fleet.get("a")
    write(path, {"a": DEMO, "b": {**DEMO, "mcpgate": {"max_sessions": -1}}})
    report = fleet.reload()
    assert report.error is not None and "server 'b': mcpgate.max_sessions must be greater than 0" in report.error
    assert not report.changed and fleet.names() == ["a"] and fleet.get("a") is a and a is not None and not a.closing
    write(path, {"a": DEMO})
    assert not fleet.reload().changed


def test_the_health_of_several_servers(tmp_path: Path) -> None:
    fleet, path = fleet_of(tmp_path, {"a": DEMO, "gone": {"command": "no-such-program-mcpgate"}})
    status, body = fleet.health()
    assert status == 200 and body["status"] == "degraded" and body["servers"]["a"]["status"] == "ok"
    assert body["servers"]["gone"] == {"status": "unavailable", "sessions": 0, "children": 0}
    assert "gone" in body["error"] and "no-such-program" not in body["error"]
    write(path, {"gone": {"command": "no-such-program-mcpgate"}})
    fleet.reload()
    assert fleet.health()[0] == 503
