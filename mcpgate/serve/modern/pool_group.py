"""One principal's part of the pool (serve/modern/pool.py): its children, their era, their listen hub, the
requests waiting for room, what the children's tools/list says, and its crashes with what they decide: the backoff
before the next child starts, and past MCPGATE_POOL_RESTARTS crashes within CRASH_WINDOW seconds a 503 that names
the last one. Bounded: the crashes kept are the last 64; the waiters are the requests waiting, each with its own
deadline (the pool's)."""

from __future__ import annotations

from collections import deque

import gevent.event

from mcpgate.core import jsonrpc
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.modern import tool_notes
from mcpgate.serve.modern.listen import ListenHub
from mcpgate.serve.modern.pooled_child import Era, PooledChild

CRASH_WINDOW = 60.0  # seconds a crash counts for


class Group:
    """One principal's children, their listen hub and the requests waiting for room."""

    def __init__(self, principal: str) -> None:
        self.principal = principal
        self.children: list[PooledChild] = []
        self.era: Era | None = None
        self.crashes: deque[tuple[float, str]] = deque(maxlen=64)
        self.waiters: list[gevent.event.Event] = []
        self.hub: ListenHub | None = None
        self.hub_child: PooledChild | None = None
        self.tools: tool_notes.ToolNotes | None = None  # what the children's tools/list says (None: not read yet)
        self.tools_at = 0.0
        self.spares_coming = 0  # spares prewarm has scheduled that _spawn has not yet counted among the children

    def wake(self) -> None:
        if not self.waiters:  # every call's release wakes: usually no one waits
            return
        waiters = self.waiters.copy()  # the list itself stays: each of its children reads it (PooledChild.waiters)
        self.waiters.clear()
        for event in waiters:
            event.set()

    def recent_crashes(self, now: float) -> list[tuple[float, str]]:
        return [crash for crash in self.crashes if now - crash[0] < CRASH_WINDOW]

    def backoff(self, now: float) -> float:
        """Seconds to wait before starting a child: none without a recent crash, then 0.1 doubling to 5."""
        crashes = self.recent_crashes(now)
        return min(5.0, 0.1 * 2 ** (len(crashes) - 1)) if crashes else 0.0

    def refuse_when_crashing(self, now: float, most: int) -> None:
        """503 naming the last crash when the children crashed `most` times or more within CRASH_WINDOW."""
        crashes = self.recent_crashes(now)
        if len(crashes) >= most:
            raise Refusal(
                503,
                jsonrpc.INTERNAL_ERROR,
                f"Service Unavailable: the MCP server crashed {len(crashes)} times in the last minute "
                f"(last: {crashes[-1][1]})",
                headers={"Retry-After": str(int(CRASH_WINDOW))},
            )
