"""Values of the 2026-07-28 request-metadata headers: the Base64 sentinel, body/header comparison, and the
`x-mcp-header` annotations of a tool's inputSchema (which arguments a client mirrors into Mcp-Param-* headers).

A header value is compared after RFC 9110 field parsing (surrounding spaces and tabs are not part of it). What is
left must be visible ASCII, space or tab; a value of the form `=?base64?...?=` is always the sentinel (a client
must encode a plain value that looks like one), so it must hold canonical padded Base64 of UTF-8 text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from mcpgate.core import wire

SENTINEL_PREFIX = "=?base64?"
SENTINEL_SUFFIX = "?="
# RFC 9110 field-value characters as the MCP page allows them in a plain value: visible ASCII, space, tab.
_PLAIN = re.compile(r"[\x20-\x7e\t]*")
_OWS = " \t"
# RFC 9110 token (tchar); an x-mcp-header value is the name part of Mcp-Param-{name}.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
HEADER_TYPES = frozenset({"string", "integer", "boolean"})
# Keywords whose values are instance data, not schemas: an "x-mcp-header" key inside them is no annotation.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
SHOW_LIMIT = 100


def decode_header_value(raw: str) -> str | None:
    """The value a header carries: the plain text, or the decoded `=?base64?...?=`; None when it is invalid
    (a character outside visible ASCII/space/tab, bad Base64 or padding, or bytes that are not UTF-8)."""
    value = raw.strip(_OWS)
    if not _plain(value):
        return None
    if not is_sentinel(value):
        return value
    payload = value[len(SENTINEL_PREFIX) : -len(SENTINEL_SUFFIX)]
    try:
        return base64.b64decode(payload, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def plain_header_value(raw: str) -> str | None:
    """A header value taken as is (no Base64 sentinel: MCP-Protocol-Version, Mcp-Method): the value without its
    surrounding spaces and tabs, or None when it holds a character outside visible ASCII/space/tab."""
    value = raw.strip(_OWS)
    return value if _plain(value) else None


def _plain(value: str) -> bool:
    """Visible ASCII, space and tab only (printable ASCII settles most values without the pattern)."""
    return (value.isascii() and value.isprintable()) or _PLAIN.fullmatch(value) is not None


def is_sentinel(value: str) -> bool:
    """Whether a (stripped) header value has the Base64 sentinel form; the markers are case-sensitive."""
    return (
        len(value) >= len(SENTINEL_PREFIX) + len(SENTINEL_SUFFIX)
        and value.startswith(SENTINEL_PREFIX)
        and value.endswith(SENTINEL_SUFFIX)
    )


def encode_header_value(value: str) -> str:
    """How a client carries a text value in a header: as is when header-safe, else the Base64 sentinel."""
    safe = _PLAIN.fullmatch(value) and value == value.strip(_OWS) and "\t" not in value
    if safe and not is_sentinel(value):
        return value
    return SENTINEL_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + SENTINEL_SUFFIX


def mirrored_text(value: Any) -> str:
    """The text a client puts in an Mcp-Param-* header for a body value (before encoding)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def matches_body(decoded: str, body: Any) -> bool:
    """Whether a decoded Mcp-Param-* value agrees with the body value: numbers numerically ("42.0" == 42),
    booleans as lowercase true/false, strings exactly."""
    if isinstance(body, bool) or not isinstance(body, (int, float)):
        return decoded == mirrored_text(body)
    if not _NUMBER.fullmatch(decoded):
        return False
    from decimal import Decimal, InvalidOperation  # here: decimal's 0.3 MB only where a number is compared

    try:
        return Decimal(decoded) == Decimal(body)
    except (InvalidOperation, ValueError):  # a float inf/nan body
        return False


def show(value: object) -> str:
    """A value for an error message: quoted, control characters visible, cut to about SHOW_LIMIT characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > SHOW_LIMIT:
        return repr(text[:SHOW_LIMIT]) + "..."
    return repr(text)


# -- argument paths --------------------------------------------------------------------------------------------
# A mirrored argument is named by its chain of `properties` keys; the key of a top-level argument is its name,
# nested ones join with "." ("a.b"), a "." or "\" inside a name escaped with "\".


def path_key(path: tuple[str, ...]) -> str:
    return ".".join(part.replace("\\", "\\\\").replace(".", "\\.") for part in path)


def key_path(key: str) -> tuple[str, ...]:
    parts: list[str] = []
    current: list[str] = []
    chars = iter(key)
    for char in chars:
        if char == "\\":
            current.append(next(chars, ""))
        elif char == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return tuple(parts)


_ABSENT = object()


def argument_value(arguments: object, key: str) -> Any:
    """The argument at a path key, or None when any step is missing (a null value counts as absent too)."""
    node: Any = arguments
    for part in key_path(key):
        if not isinstance(node, dict):
            return None
        node = node.get(part, _ABSENT)
        if node is _ABSENT:
            return None
    return node


# -- x-mcp-header annotations ----------------------------------------------------------------------------------


class InvalidAnnotation(ValueError):
    """An x-mcp-header annotation breaks a constraint of the 2026-07-28 transport page."""


def tool_header_params(input_schema: object) -> dict[str, str] | None:
    """{argument path key: header name ("Mcp-Param-{x-mcp-header}")} for a tool's inputSchema; None when any
    annotation is invalid (HTTP clients drop such a tool from tools/list)."""
    try:
        return header_annotations(input_schema)
    except InvalidAnnotation:
        return None


def header_annotations(input_schema: object) -> dict[str, str]:
    """As tool_header_params, raising InvalidAnnotation with the reason instead of answering None."""
    found: dict[str, str] = {}
    if isinstance(input_schema, dict):
        _walk_schema(input_schema, (), True, found)
    lowered = [name.lower() for name in found.values()]
    if len(set(lowered)) != len(lowered):
        raise InvalidAnnotation("x-mcp-header values are not case-insensitively unique")
    return found


def _walk_schema(schema: dict[str, Any], path: tuple[str, ...], reachable: bool, found: dict[str, str]) -> None:
    if "x-mcp-header" in schema:
        _check_annotation(schema, path, reachable)
        found[path_key(path)] = wire.PARAM_PREFIX + schema["x-mcp-header"]
    for keyword, value in schema.items():
        if keyword in _DATA_KEYWORDS:
            continue
        if keyword == "properties" and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict):
                    _walk_schema(sub, (*path, name), reachable, found)
        else:
            _walk_value(value, found)


def _walk_value(value: Any, found: dict[str, str]) -> None:
    """Any schema found outside a `properties` chain (items, oneOf, $defs, ...): an annotation there is invalid."""
    if isinstance(value, dict):
        _walk_schema(value, (), False, found)
    elif isinstance(value, list):
        for item in value:
            _walk_value(item, found)


def _check_annotation(schema: dict[str, Any], path: tuple[str, ...], reachable: bool) -> None:
    name = schema["x-mcp-header"]
    where = path_key(path) or "the schema root"
    if not reachable or not path:
        raise InvalidAnnotation(f"x-mcp-header on {where} is not reachable through properties alone")
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise InvalidAnnotation(f"x-mcp-header {show(name)} on {where} is not an HTTP token")
    if _primitive_type(schema.get("type")) is None:
        raise InvalidAnnotation(f"x-mcp-header on {where} needs type string, integer or boolean")


def _primitive_type(declared: object) -> str | None:
    """The mirrored type: "string", "integer" or "boolean" (a list of one of them with "null" is nullable)."""
    if isinstance(declared, list):
        kinds = [kind for kind in declared if kind != "null"]
        declared = kinds[0] if len(kinds) == 1 else None
    return declared if isinstance(declared, str) and declared in HEADER_TYPES else None
