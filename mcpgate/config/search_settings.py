"""The settings of the search view (mcpgate.core.tool_search): a server's tools/list shows one meta-tool that finds
its tools, instead of all of them.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config.declarations import declare, positive


@dataclass(frozen=True, init=False, repr=False, eq=False)
class SearchSettings:
    """The search view: on or off (per server in MCPGATE_CONFIG), what it always shows, what it reads."""

    tool_search: bool = declare(
        False,
        "The search view: tools/list shows only the search_tools meta-tool (and MCPGATE_TOOL_SEARCH_PINNED), which "
        "finds the server's tools by name and description and returns their definitions; every tool the caller "
        "may see can still be called. Per server in MCPGATE_CONFIG (mcpgate.tool_search).",
    )
    tool_search_pinned: tuple[str, ...] = declare(
        (),
        "Comma-separated tool names the search view lists beside search_tools (those the server has and the "
        "caller may see).",
    )
    tool_search_max_tools: int = declare(
        2000,
        "Most tools of a server's listing the search view reads and indexes (the rest is not found); the listing "
        "is read from the caller's pooled child.",
        validate=positive,
    )
    tool_search_max_age: float = declare(
        5.0,
        "Seconds the search view answers from a listing before it reads the server's again: a tool added, changed "
        "or hidden shows in searches within it.",
        validate=positive,
    )
