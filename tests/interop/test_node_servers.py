"""Real Node stdio servers behind the gateway: the reference "everything" server, and the filesystem server
launched through npx, which starts the real server as a grandchild."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types

from tests.interop import conformance
from tests.support import call, direct_children, open_session, pid_gone, wait_dead

pytestmark = pytest.mark.npm

NODE = conformance.NODE
EVERYTHING = conformance.PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def all_descendants(pid: int) -> list[int]:
    found = []
    for child in direct_children(pid):
        found += [child, *all_descendants(child)]
    return found


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="stub", content=types.TextContent(type="text", text="ok"))


def test_everything_server_through_the_gateway(gateway_factory: Any) -> None:
    conformance.ensure_installed()
    gw = gateway_factory(
        {
            "MCPGATE_COMMAND": f"{NODE} {EVERYTHING} stdio",
            "MCPGATE_CHILD_ENV": json.dumps({"DEMO_SETTING": "visible"}),
            "GATEWAY_ONLY_SECRET": "must-not-leak",
        }
    )
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def main() -> dict[str, Any]:
        with anyio.fail_after(60):
            async with Client(
                gw.url, mode="legacy", elicitation_callback=on_elicit, sampling_callback=on_sample
            ) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                echo = await client.call_tool("echo", {"message": "through mcpgate"})
                total = await client.call_tool("get-sum", {"a": 2, "b": 40})
                await client.call_tool(
                    "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
                )
                env = await client.call_tool("get-env", {})
                resources = await client.list_resources()
                return {"names": names, "echo": echo, "sum": total, "env": env, "resources": resources}

    seen = anyio.run(main)
    assert "through mcpgate" in seen["echo"].content[0].text
    assert "42" in seen["sum"].content[0].text
    assert len(updates) >= 3
    env_text = seen["env"].content[0].text
    assert "DEMO_SETTING" in env_text and "visible" in env_text
    assert "GATEWAY_ONLY_SECRET" not in env_text and "must-not-leak" not in env_text
    assert seen["resources"].resources


def test_filesystem_server_launched_by_npx_leaves_no_orphans(gateway_factory: Any, tmp_path: Path) -> None:
    conformance.ensure_installed()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello from disk")
    gw = gateway_factory(conformance.filesystem_server(shared))

    headers = open_session(gw)
    reply = gw.request(
        "POST", body=call("read_text_file", {"path": str(shared / "hello.txt")}), headers=headers, timeout=60
    )
    assert reply.status == 200 and "result" in reply.json(), reply
    assert reply.json()["result"]["content"][0]["text"] == "hello from disk", reply
    [worker] = direct_children(gw.proc.pid)
    descendants = all_descendants(worker)
    assert len(descendants) >= 2, "npx should have started the server as a grandchild"
    os.kill(worker, signal.SIGKILL)
    assert wait_dead([worker, *descendants], timeout=20) == []
    assert all(pid_gone(pid) for pid in descendants)
