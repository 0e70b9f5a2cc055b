"""The closed sets serve decides on, as enums rather than strings compared in place.

Each is a string enum whose values are the strings used so far (a setting's value, a path kind, a log line), so
code that still compares or logs the string reads the same. The era of a request is
serve/modern/era_probe.py's Era (MODERN: 2026-07-28, one request per POST; LEGACY: a session that began with
initialize); who may call the endpoints is config/modes.py's AuthMode.
"""

from __future__ import annotations

import enum


class Named(str, enum.Enum):
    """A string enum that reads as its value (str(), %s, f-strings: a log line says what it always said)."""

    def __str__(self) -> str:
        return str(self.value)


class RouteKind(Named):
    """Which of a server's paths a request is for (serve/servers/published.py routes a path to one)."""

    MCP = "mcp"  # the Streamable HTTP endpoint (and the 2026-07-28 requests on it)
    SSE = "sse"  # the 2024-11-05 HTTP+SSE transport's event stream (GET)
    MESSAGES = "messages"  # that transport's messages path (POST ?session_id=)


class EndCause(Named):
    """Why the HTTP front ends a 2025 session (the session logs it, and fails what it still owed with it)."""

    CLIENT_DELETED = "the client ended the session"
    CLIENT_CLOSED_SSE = "the client closed its HTTP+SSE stream"
    NO_EVENT_STREAM = "could not open its event stream"
    INITIALIZE_FAILED = "initialize did not succeed"
    IDLE = "idle for longer than MCPGATE_SESSION_IDLE_TTL"
    SHUTTING_DOWN = "the gateway is shutting down"
    SERVER_REPLACED = "its server's entry changed or was removed"  # a reload: not kept for a takeover
