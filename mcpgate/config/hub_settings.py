"""The settings of the hub (mcpgate.serve.hub): several servers of MCPGATE_CONFIG behind one MCP endpoint.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config.declarations import declare, positive


@dataclass(frozen=True, init=False, repr=False, eq=False)
class HubSettings:
    """The aggregate of every server at MCPGATE_PATH, and the bounds of each hub session's tables."""

    hub: bool = declare(
        True,
        "With MCPGATE_CONFIG naming two servers or more, also publish all of them at MCPGATE_PATH (and its HTTP+SSE "
        "paths), their tool and prompt names namespaced by server. false: only each server's own path and the "
        "file's groups.",
    )
    hub_in_flight: int = declare(
        1024,
        "Most requests one session of a group (or the aggregate) has in flight to its servers, a list asked of "
        "every server counting once per server, and as many server requests to the client; past it, an error.",
        validate=positive,
    )
    hub_uris: int = declare(
        10_000,
        "Most resource URIs one session of a group remembers to route resources/read to the server listing them "
        "(the least recently listed forgotten first).",
        validate=positive,
    )
