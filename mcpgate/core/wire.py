"""Wire names of the MCP HTTP transports (header names), spelled once for serve and relay.

HTTP header names are case-insensitive; these are the spellings mcpgate sends.
"""

from __future__ import annotations

SESSION_ID = "Mcp-Session-Id"
SESSION_PARAM = "session_id"  # the HTTP+SSE messages path's query parameter (the Python SDK's spelling)
PROTOCOL_VERSION = "MCP-Protocol-Version"
LAST_EVENT_ID = "Last-Event-ID"
# a request one instance of a fleet forwards to the session's owner: the signed principal (serve/cluster/instances.py)
FORWARDED = "Mcpgate-Forwarded"
# 2026-07-28 request-metadata headers (and the prefix of the headers mirrored from tool arguments)
METHOD = "Mcp-Method"
NAME = "Mcp-Name"
PARAM_PREFIX = "Mcp-Param-"

# 2026-07-28 reserved _meta keys (per request and per result)
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def environ_key(name: str) -> str:
    """Where a request header's value is in a WSGI environ (PEP 3333: HTTP_ and its name upper-cased, "-" made
    "_"; Content-Type and Content-Length without the prefix): the front's HttpRequest.header and the shortcuts
    that read the environ directly (core/modern.served_environ, serve/sessions/streamable.post_headers)."""
    key = name.upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key
