"""Helpers for the aggregate's tests (tests/serve/test_hub*.py, tests/interop/test_hub_fastmcp.py): a config file
of members, the paginating fixture as a member, a member held back once a mark exists, every tool of a walked
list, a client calling one member's tools by their own names, a member's child found in the gateway's log and
killed, the tools/list_changed notifications a client is sent, and whether every hub that lost a member has it
again."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import types

from tests.support.gateway import FIXTURES, Gateway

MANY = str(FIXTURES / "many_tools_server.py")


def write(path: Path, servers: dict[str, Any], **top: Any) -> str:
    """An mcpServers config file at `path` (`top`: its other keys, e.g. groups); its path."""
    path.write_text(json.dumps({"mcpServers": servers, **top}))
    return str(path)


def many(label: str, tools: int = 5, page: int = 2) -> dict[str, Any]:
    """The entry of tests/fixtures/many_tools_server.py: `tools` tools t0.., `page` a page, "<label>:" answers."""
    return {"command": sys.executable, "args": [MANY, "--tools", str(tools), "--page", str(page), "--label", label]}


def held_back(entry: dict[str, Any], mark: Path) -> dict[str, Any]:
    """`entry`'s server, unless `mark` exists: then a child that never answers and ends with its input (a member
    killed after the mark is made stays gone, its new child silent on initialize, while the test looks)."""
    code = (
        "import os, sys\n"
        f"if os.path.exists({str(mark)!r}):\n    sys.stdin.read()\n    sys.exit(0)\n"
        f"os.execv({entry['command']!r}, {[entry['command'], *entry['args']]!r})\n"
    )
    return {"command": sys.executable, "args": ["-c", code]}


async def all_tools(c: Any) -> list[str]:
    """Every tool name of a client's tools/list, walked page by page."""
    names, cursor = [], None
    while True:
        page = await c.list_tools(cursor=cursor)
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return names


def member_pid(gw: Gateway, member: str) -> int:
    """The pid of the newest child of a session's member `member`, from the gateway's log ("child[*/<id>/<member>]
    started pid=N")."""
    found = re.findall(rf"child\[\*/[^\]]+/{member}\] started pid=(\d+)", gw.log())
    assert found, gw.log_tail()
    return int(found[-1])


def kill_member(gw: Gateway, member: str) -> int:
    """SIGKILL the newest child of member `member` (the hub notices it end by itself); its pid."""
    pid = member_pid(gw, member)
    os.kill(pid, signal.SIGKILL)
    return pid


class Prefixed:
    """An SDK client whose call_tool names get a member's prefix (that member's round trips, through the hub)."""

    def __init__(self, c: Any, prefix: str) -> None:
        self.c, self.prefix = c, prefix

    async def call_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await self.c.call_tool(self.prefix + name, *args, **kwargs)


class ListChanged:
    """The notifications/tools/list_changed a client is sent: pass `handler` as the client's message_handler;
    `next(timeout)` waits (at most `timeout` seconds, else TimeoutError) for one sent since the last `next`
    returned (several sent meanwhile count as one)."""

    def __init__(self) -> None:
        self.sent = 0  # notifications so far
        self.taken = 0  # of those, the ones a `next` has returned for
        self._event = anyio.Event()

    async def handler(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.sent += 1
            event, self._event = self._event, anyio.Event()
            event.set()

    async def next(self, timeout: float) -> None:
        with anyio.fail_after(timeout):
            while self.sent == self.taken:
                await self._event.wait()
        self.taken = self.sent


GONE = re.compile(r"hub (\S+): server 'far' is no longer part of this endpoint")
BACK = re.compile(r"hub (\S+): server 'far' is part of this endpoint again")


def every_hub_child_back(log: str) -> bool:
    """Each hub (a session's, a pooled child) that lost the member named "far" has it again."""
    return set(GONE.findall(log)) <= set(BACK.findall(log))
