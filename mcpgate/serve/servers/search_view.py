"""The search view of a published server (MCPGATE_TOOL_SEARCH, per server in MCPGATE_CONFIG): the gateway answers
tools/list with the search_tools meta-tool (and the pinned tools), and a call of search_tools from the server's
full listing, read from a pooled child of the caller's principal (the one its 2026-07-28 calls use: its
listing is the caller's, with the caller's own credentials) at most once per MCPGATE_TOOL_SEARCH_MAX_AGE, up to
MCPGATE_TOOL_SEARCH_MAX_TOOLS tools. Every other request, the calls of real tools among them, goes on as before;
what the caller's ToolFilter hides (its server's lists, its view, its pins) is never found nor pinned.

Answered where hidden tools are (serve/sessions/inbound.py for 2025 sessions, serve/modern/stateless.py for
2026-07-28 requests), before them: the meta-tool is the gateway's own, never hidden by a server's lists. A
server's own tool named search_tools is shadowed by the meta-tool while the view is on.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcpgate.child.spawn import ChildSpawnError
from mcpgate.core import modern_rewrites, tool_search
from mcpgate.core.jsonrpc import Request
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.core.tool_search import ToolIndex
from mcpgate.serve.front.http import Refusal

if TYPE_CHECKING:
    from mcpgate.config.settings import Settings
    from mcpgate.serve.modern.pool import Pool

log = logging.getLogger("mcpgate.search")

KEPT = 64  # principals whose index a server keeps (the least recently used one goes first)
PAGES = 100  # tools/list pages read for one listing (and no more than MCPGATE_TOOL_SEARCH_MAX_TOOLS tools)
UNLISTED = "the server's tools could not be listed just now; try again"


class SearchView:
    """One server's search view: the index of each principal's last listing (bounded), and the answers."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings, self.clock = settings, clock
        self.ttl = settings.tool_search_max_age
        self.pinned = frozenset(settings.tool_search_pinned)
        self._kept: OrderedDict[str, tuple[float, ToolIndex]] = OrderedDict()

    def answer(self, pool: Pool, principal: str, tools: ToolFilter | None, message: Request) -> dict[str, Any] | None:
        """The result the gateway gives `message` in the search view (a tools/list, or a call of search_tools);
        None for any other request (it goes on as before)."""
        if message.method == "tools/list":
            return tool_search.listing(self._pinned(pool, principal, tools) if self.pinned else ())
        if message.method != "tools/call" or not tool_search.is_search_call(message.params):
            return None
        parsed = tool_search.arguments(message.params)
        if isinstance(parsed, str):
            return tool_search.error(parsed)
        index = self.index(pool, principal, tools)
        if index is None:
            return tool_search.error(UNLISTED)
        query, limit = parsed
        return tool_search.result(index.search(query, limit, tools.visible if tools is not None else None))

    def response(
        self, pool: Pool, principal: str, tools: ToolFilter | None, message: Request, *, stamped: bool = False
    ) -> dict[str, Any] | None:
        """`answer` as the JSON-RPC response to `message` (`stamped`: as a 2026-07-28 result)."""
        result = self.answer(pool, principal, tools, message)
        if result is None:
            return None
        if stamped:
            result = modern_rewrites.stamp_result(
                message.method, result, ttl_ms=self.settings.cache_ttl_ms, server_info=None
            )
        return {"jsonrpc": "2.0", "id": message.id, "result": result}

    def index(self, pool: Pool, principal: str, tools: ToolFilter | None) -> ToolIndex | None:
        """The principal's index, read again past MCPGATE_TOOL_SEARCH_MAX_AGE; None when it cannot be read. The
        listing goes through the caller's filter first, as a listing would (the server's pins review it)."""
        now = self.clock()
        kept = self._kept.get(principal)
        if kept is not None and now - kept[0] < self.ttl:
            self._kept.move_to_end(principal)
            return kept[1]
        listed = self._listing(pool, principal)
        if listed is None:
            return kept[1] if kept is not None else None  # the last one read, rather than nothing
        shown = tools.result({"tools": listed}) if tools is not None else None
        listed = shown["tools"] if shown is not None else listed
        index = ToolIndex.build(listed, self.settings.tool_search_max_tools)
        self._kept[principal] = (now, index)
        self._kept.move_to_end(principal)
        while len(self._kept) > KEPT:
            self._kept.popitem(last=False)
        return index

    def _pinned(self, pool: Pool, principal: str, tools: ToolFilter | None) -> list[Mapping[str, Any]]:
        index = self.index(pool, principal, tools)
        if index is None:
            return []
        return [
            tool
            for tool in index.tools
            if tool["name"] in self.pinned and tool["name"] != tool_search.NAME
            if tools is None or tools.visible(tool["name"])
        ]

    def _listing(self, pool: Pool, principal: str) -> list[object] | None:
        """The tools of the server's listing for `principal` (pages followed, bounded); None: not read."""
        try:
            child = pool.acquire(principal)
        except (Refusal, ChildSpawnError) as exc:
            log.warning("search view: no child to list the tools of (%s)", exc)
            return None
        listed: list[object] = []
        cursor: object = None
        for _page in range(PAGES):
            params: dict[str, Any] = {"_meta": child.request_meta()} if child.modern else {}
            if isinstance(cursor, str):
                params["cursor"] = cursor
            answer = child.ask("tools/list", params, self.settings.pool_wait)
            result = answer.get("result") if answer is not None else None
            if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
                return listed or None
            listed.extend(result["tools"])
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or len(listed) >= self.settings.tool_search_max_tools:
                break
        return listed
