"""CORS for browser clients (pure decisions): off unless MCPGATE_CORS_ORIGINS lists origins.

A listed origin's preflight is answered with the methods and the MCP headers a browser client sends, and its
real requests get Access-Control-Allow-Origin with Mcp-Session-Id exposed, so a page can read the session it
was given. An origin that is not listed gets no CORS headers at all (and the Origin check still refuses it
unless it is allowed there). `*` is accepted by the settings only when authentication is off.
"""

from __future__ import annotations

from collections.abc import Collection

from mcpgate.core import wire

METHODS = "GET, POST, DELETE, OPTIONS"
# What MCP browser clients send besides the CORS-safelisted headers (Mcp-Param-* headers are echoed by prefix).
REQUEST_HEADERS = (
    "Content-Type",
    "Authorization",
    wire.SESSION_ID,
    wire.PROTOCOL_VERSION,
    wire.LAST_EVENT_ID,
    wire.METHOD,
    wire.NAME,
)
PARAM_PREFIX = wire.PARAM_PREFIX.lower()
EXPOSED = ", ".join((wire.SESSION_ID, wire.PROTOCOL_VERSION))
MAX_AGE = "600"  # seconds a browser may cache a preflight

Headers = list[tuple[str, str]]


def normalize(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


class Cors:
    def __init__(self, origins: Collection[str]) -> None:
        self.any = "*" in origins
        self.origins = frozenset(normalize(origin) for origin in origins if origin != "*")

    @property
    def enabled(self) -> bool:
        return self.any or bool(self.origins)

    def allows(self, origin: str | None) -> bool:
        return origin is not None and (self.any or normalize(origin) in self.origins)

    def is_preflight(self, method: str, origin: str | None, requested_method: str | None) -> bool:
        """An OPTIONS request a listed origin's browser sends before the real one."""
        return method == "OPTIONS" and requested_method is not None and self.allows(origin)

    def response_headers(self, origin: str | None) -> Headers:
        """Headers for a real response to a listed origin (none for any other)."""
        if not self.allows(origin):
            return []
        assert origin is not None
        return [
            ("Access-Control-Allow-Origin", "*" if self.any else origin),
            ("Access-Control-Expose-Headers", EXPOSED),
            ("Vary", "Origin"),
        ]

    def preflight_headers(self, origin: str, requested_headers: str | None) -> Headers:
        """The preflight answer: the methods and headers allowed; requested Mcp-Param-* headers echoed."""
        allowed = list(REQUEST_HEADERS)
        known = {name.lower() for name in allowed}
        for name in (requested_headers or "").split(","):
            name = name.strip()
            if name.lower().startswith(PARAM_PREFIX) and name.lower() not in known and is_token(name):
                allowed.append(name)
                known.add(name.lower())
        return [
            *self.response_headers(origin)[:1],
            ("Access-Control-Allow-Methods", METHODS),
            ("Access-Control-Allow-Headers", ", ".join(allowed)),
            ("Access-Control-Max-Age", MAX_AGE),
            ("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        ]


TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def is_token(name: str) -> bool:
    """An RFC 9110 token: what a header name may be."""
    return bool(name) and all(ch in TOKEN_CHARS for ch in name)
