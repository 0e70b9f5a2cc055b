"""The client side of the 2026-07-28 era (the relay's, toward an upstream): the request-metadata headers a POST
carries and a request's params in 2026-07-28 form. What request_headers builds is what core.modern.validate,
the server side, accepts (a round-trip test holds them to it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpgate.core import wire
from mcpgate.core.header_values import argument_value, encode_header_value, mirrored_text
from mcpgate.core.jsonrpc import Notification, Request
from mcpgate.core.modern import NAME_FIELD, request_meta


def request_headers(message: Request | Notification, param_headers: Mapping[str, str] | None) -> dict[str, str]:
    """The request-metadata headers of a 2026-07-28 POST for `message` (what validate checks): MCP-Protocol-Version
    (from _meta, when the body names one), Mcp-Method, Mcp-Name (tools/call, prompts/get: params.name;
    resources/read: params.uri) and, for tools/call, one Mcp-Param-* header per argument of `param_headers`
    (tool_header_params of the tool) that is present and not null. Mcp-Name and Mcp-Param-* values that are not
    plain header-safe text, or that look like the Base64 sentinel, are sent encoded."""
    headers: dict[str, str] = {}
    meta = request_meta(message)
    version = meta.get(wire.META_PROTOCOL_VERSION) if meta is not None else None
    if isinstance(version, str):
        headers[wire.PROTOCOL_VERSION] = version
    headers[wire.METHOD] = message.method
    params = message.params if isinstance(message.params, dict) else {}
    field = NAME_FIELD.get(message.method)
    name = params.get(field) if field is not None else None
    if isinstance(name, str):
        headers[wire.NAME] = encode_header_value(name)
    if param_headers and message.method == "tools/call":
        arguments = params.get("arguments")
        for key, header in param_headers.items():
            value = argument_value(arguments, key)
            if value is not None:
                headers[header] = encode_header_value(mirrored_text(value))
    return headers


def modern_params(
    params: object,
    *,
    version: str,
    capabilities: Mapping[str, Any],
    client_info: Mapping[str, Any] | None,
    log_level: str | None = None,
) -> dict[str, Any]:
    """The params of a request in 2026-07-28 form: `params` (not changed; anything but an object counts as none)
    with _meta carrying the protocol version, the client capabilities, the client info (when known) and the log
    level (when the client opted in); the other _meta keys (progressToken, ...) kept."""
    out = dict(params) if isinstance(params, dict) else {}
    old = out.get("_meta")
    meta = dict(old) if isinstance(old, dict) else {}
    meta[wire.META_PROTOCOL_VERSION] = version
    meta[wire.META_CLIENT_CAPABILITIES] = dict(capabilities)
    if client_info is not None:
        meta[wire.META_CLIENT_INFO] = dict(client_info)
    if log_level is not None:
        meta[wire.META_LOG_LEVEL] = log_level
    out["_meta"] = meta
    return out
