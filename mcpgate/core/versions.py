"""Protocol revisions and every decision that depends on one.

Every branch on a protocol revision in mcpgate lives here; the transports ask
these functions instead of comparing version strings themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

V2024_11_05 = "2024-11-05"
V2025_03_26 = "2025-03-26"
V2025_06_18 = "2025-06-18"
V2025_11_25 = "2025-11-25"
V2026_07_28 = "2026-07-28"

KNOWN = (V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25, V2026_07_28)
# Revisions negotiated by an initialize handshake (the session-based era).
HANDSHAKE = (V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25)
# Revisions the Streamable HTTP endpoint serves with sessions.
STREAMABLE_SESSION = (V2025_03_26, V2025_06_18, V2025_11_25)
# Revisions that use per-request metadata and no handshake.
MODERN = (V2026_07_28,)
LATEST_HANDSHAKE = V2025_11_25
# What a server assumes when a request carries no MCP-Protocol-Version header.
DEFAULT_HEADER_VERSION = V2025_03_26


def negotiate(requested: object, supported: tuple[str, ...] = HANDSHAKE) -> str:
    """The revision a server answers an initialize with: the requested one when supported, else its latest."""
    if isinstance(requested, str) and requested in supported:
        return requested
    return max(supported)


@dataclass(frozen=True, slots=True)
class HeaderCheck:
    """The outcome of reading MCP-Protocol-Version on a session request."""

    version: str | None
    error: str | None = None


def check_header(value: str | None, negotiated: str | None = None) -> HeaderCheck:
    """Apply the MCP-Protocol-Version header rules to a request inside a session.

    Absent: the session's negotiated revision when the server knows it, else
    2025-03-26. Present: it must name a revision negotiable by a handshake
    (the ones negotiate() can return), else 400; the error names that list.
    """
    if value is None:
        return HeaderCheck(negotiated or DEFAULT_HEADER_VERSION)
    value = value.strip()
    if value in HANDSHAKE:
        return HeaderCheck(value)
    supported = ", ".join(HANDSHAKE)
    return HeaderCheck(None, f"Unsupported MCP-Protocol-Version {value!r}; supported: {supported}")


def allows_batch(version: str | None) -> bool:
    """JSON-RPC batches exist only in 2025-03-26."""
    return version == V2025_03_26


def sends_version_header(version: str | None) -> bool:
    """Whether a client sends MCP-Protocol-Version after initialize (2025-06-18 and later)."""
    return version is not None and version in HANDSHAKE and version >= V2025_06_18


def is_modern(version: str | None) -> bool:
    """Whether a revision is of the stateless, handshake-free era."""
    return version in MODERN


def initialize_version(result: object) -> str | None:
    """The protocolVersion an InitializeResult names, if it names one."""
    if isinstance(result, dict):
        version = result.get("protocolVersion")
        if isinstance(version, str):
            return version
    return None


def priming_event_supported(version: str | None) -> bool:
    """2025-11-25 lets a server prime an SSE stream with an id and empty data."""
    return version is not None and version in HANDSHAKE and version >= V2025_11_25


def resumable_streams(version: str | None) -> bool:
    """Streamable HTTP SSE events may carry ids and be resumed with Last-Event-ID (2025-03-26 onwards; before
    initialize answers, the session's revision is one of those). 2026-07-28 dropped resumability."""
    return version is None or version in STREAMABLE_SESSION
