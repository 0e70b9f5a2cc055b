"""A tool its server hides (its tools_deny / tools_allow) does not exist on the aggregate either: absent from the
merged tools/list and refused as "Unknown tool" when called by its namespaced name, in both eras, never reaching
the server (serve/hub/groups.py gives each member its own ToolFilter; core/hub.py applies it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.support import DEMO_ENTRY, FIXTURES, Gateway

HANG_GUARD = 90


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_denied_tool_is_not_reachable_through_the_aggregate(tmp_path: Path, mode: str) -> None:
    pager = {"command": sys.executable, "args": [str(FIXTURES / "many_tools_server.py"), "--tools", "2"]}
    config = tmp_path / "mcp.json"
    demo = {**DEMO_ENTRY, "mcpgate": {"tools_deny": ["echo"]}}
    config.write_text(json.dumps({"mcpServers": {"demo": demo, "pager": pager}}))
    gw = Gateway({"MCPGATE_CONFIG": str(config)})
    try:
        gw.wait_ready()

        async def main() -> None:
            with anyio.fail_after(HANG_GUARD):
                async with Client(gw.url, mode=mode) as c:
                    names = [tool.name for tool in (await c.list_tools()).tools]
                    assert "demo__add" in names and "demo__echo" not in names
                    with pytest.raises(Exception, match="Unknown tool: demo__echo"):
                        await c.call_tool("demo__echo", {"message": "hidden"})

        anyio.run(main)
    finally:
        gw.stop()
