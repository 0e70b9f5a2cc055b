"""The closed sets a setting's value is one of, as enums: code compares members, never strings in place.

Each is a string enum whose values are the words the setting takes (a log line or a message that formats a member
says what it always said).
"""

from __future__ import annotations

import enum


class AuthMode(str, enum.Enum):
    """Who may call the MCP endpoints (MCPGATE_AUTH_MODE, or the mode the other settings imply: Settings.auth)."""

    NONE = "none"
    TOKEN = "token"
    RESOURCE_SERVER = "resource-server"
    EMBEDDED = "embedded"

    def __str__(self) -> str:
        return str(self.value)

    @property
    def oauth(self) -> bool:
        """One of the two OAuth modes (they need MCPGATE_PUBLIC_URL and publish metadata)."""
        return self in (AuthMode.RESOURCE_SERVER, AuthMode.EMBEDDED)
