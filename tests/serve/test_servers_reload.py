"""Reloading MCPGATE_CONFIG through gunicorn (the worker polls the file every MCPGATE_CONFIG_POLL seconds): a
fourth server is added and one removed while an SDK client's session on a third stays alive (same child); a
changed entry is replaced (its sessions end); an invalid new file leaves everything running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.support import (
    DEMO_ENTRY,
    HEADERS,
    NAMED_ENTRY,
    Gateway,
    alive,
    call,
    init_body,
    named,
    open_session,
    reply_message,
    wait_dead,
    wait_for,
    worker_children,
    write_config,
)

HANG_GUARD = 90
POLL = {"MCPGATE_CONFIG_POLL": "0.2"}


def names(gw: Gateway) -> list[str]:
    return [entry["name"] for entry in gw.request("GET", "/servers").json()["servers"]]


def child_pid(gw: Gateway, headers: dict[str, str]) -> int:
    reply = gw.request("POST", body=call("pid", {}), headers=headers)
    assert reply.status == 200, reply
    return int(reply_message(reply)["result"]["content"][0]["text"])


def test_reload_adds_and_removes_servers_while_a_session_on_a_third_stays_alive(
    gateway_factory: Any, tmp_path: Path
) -> None:
    path = tmp_path / "mcp.json"
    config = write_config(path, {"a": DEMO_ENTRY, "b": NAMED_ENTRY, "c": NAMED_ENTRY})
    gw = gateway_factory({"MCPGATE_CONFIG": config, **POLL})
    a_headers = open_session(named(gw, "a"))
    b_headers = open_session(named(gw, "b"))
    b_pid = child_pid(named(gw, "b"), b_headers)
    a_children = [pid for pid in worker_children(gw) if pid != b_pid]

    def rewrite() -> None:
        changed_b = {**NAMED_ENTRY, "env": {"CHANGED": "1"}}
        write_config(path, {"b": changed_b, "c": NAMED_ENTRY, "d": DEMO_ENTRY})
        assert wait_for(lambda: names(gw) == ["b", "c", "d"]), gw.log_tail()

    async def main() -> tuple[int, int, str, str]:
        with anyio.fail_after(HANG_GUARD):
            async with Client(f"{gw.base}/servers/c/mcp", mode="legacy") as c:
                before = (await c.call_tool("pid", {})).content[0].text
                await anyio.to_thread.run_sync(rewrite)
                after = (await c.call_tool("pid", {})).content[0].text  # the same session, the same child
                greeting = (await c.call_tool("greet", {"name": "still here"})).content[0].text
            async with Client(f"{gw.base}/servers/d/mcp", mode="legacy") as d:
                added = (await d.call_tool("add", {"a": 1, "b": 2})).structured_content
        return int(before), int(after), greeting, str(added)

    before, after, greeting, added = anyio.run(main)
    assert before == after and greeting == "Hello, still here from named-fixture"
    assert added == "{'result': 3}"
    log = gw.log()
    assert "server d added at /servers/d/mcp" in log and "server a removed: its sessions end" in log, log
    assert "server b replaced (its entry changed): its sessions end" in log and "server c " not in log, log
    # removed: 404 naming the servers there now; its session's child stopped
    gone = gw.request("POST", "/servers/a/mcp", body=call("echo", {"message": "x"}), headers=a_headers)
    assert gone.status == 404 and "the servers here are: b, c, d" in gone.json()["error"]["message"], gone
    assert wait_dead(a_children) == []
    # replaced: the old session is gone (its child stopped), a new one gets the new entry
    old = gw.request("POST", "/servers/b/mcp", body=call("pid", {}), headers=b_headers)
    assert old.status == 404, old
    assert wait_dead([b_pid]) == []
    new_b = named(gw, "b")
    headers = open_session(new_b)
    reply = new_b.request("POST", body=call("env", {"name": "CHANGED"}), headers=headers)
    assert reply_message(reply)["result"]["content"][0]["text"] == "1", reply


def test_an_invalid_new_file_leaves_every_server_running(gateway_factory: Any, tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    config = write_config(path, {"a": DEMO_ENTRY, "c": NAMED_ENTRY})
    gw = gateway_factory({"MCPGATE_CONFIG": config, **POLL})
    c = named(gw, "c")
    headers = open_session(c)
    pid = child_pid(c, headers)
    write_config(path, {"c": NAMED_ENTRY, "e": {**DEMO_ENTRY, "mcpgate": {"max_sessions": 0}}})
    refused = "server 'e': mcpgate.max_sessions must be greater than 0 (got 0); the servers already running go on"
    assert wait_for(lambda: refused in gw.log()), gw.log_tail()
    path.write_text('{"mcpServers": {"c": ')  # half a file, as an editor saving in place may leave it
    assert wait_for(lambda: "not valid JSON" in gw.log()), gw.log_tail()
    assert names(gw) == ["a", "c"] and child_pid(c, headers) == pid and alive(pid)
    reply = gw.request("POST", "/servers/a/mcp", body=init_body(), headers=HEADERS)
    assert reply.status == 200, reply
    # fixed again: applied
    write_config(path, {"c": NAMED_ENTRY})
    assert wait_for(lambda: names(gw) == ["c"]), gw.log_tail()
    assert child_pid(c, headers) == pid
