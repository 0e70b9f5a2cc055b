"""Pure decisions of the 2026-07-28 (modern, stateless) era: is a message modern, and the validation ladder a
Streamable HTTP request passes before it is served (the rewriting of params and results between a modern client
and a child of either era is core/modern_rewrites.py's).

The ladder, first failure wins (the statuses and codes of the 2026-07-28 transport and base-protocol pages):
  1. a required _meta field missing or of the wrong type            -> 400 / -32602
  2. MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Param-* headers
     missing, invalid or disagreeing with the body                  -> 400 / -32020 (HeaderMismatch)
  3. a protocol version this gateway does not serve                 -> 400 / -32022, data {supported, requested}
  4. a client capability the request needs (core/capabilities.py)  -> 400 / -32021 (decided by the caller)
  5. a method the modern era does not have                          -> 404 / -32601
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpgate.core import jsonrpc, versions, wire
from mcpgate.core.header_values import argument_value, matches_body, plain_header_value, show
from mcpgate.core.header_values import decode_header_value as decode_header_value  # part of this module's interface
from mcpgate.core.header_values import tool_header_params as tool_header_params
from mcpgate.core.jsonrpc import Notification, Request

SUPPORTED_MODERN = versions.MODERN
_VERSION, _CAPABILITIES = wire.META_PROTOCOL_VERSION, wire.META_CLIENT_CAPABILITIES  # _served's, read once
_VERSION_HEADER, _METHOD_HEADER, _NAME_HEADER = wire.PROTOCOL_VERSION, wire.METHOD, wire.NAME
_OWS = " \t"  # the spaces and tabs around a header value (RFC 9110)
_TEXTS: dict[str, str] = {}  # header_text's memo: a header's raw value -> its text
_TEXTS_MAX = 256
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
MODERN_ERRORS = frozenset({HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION})

MRTR_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
# The ClientRequest union of the 2026-07-28 schema (ping, initialize, logging/setLevel, resources/subscribe and
# resources/unsubscribe are gone).
MODERN_METHODS = frozenset(
    {
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
        "subscriptions/listen",
        "tasks/get",  # the tasks extension's (core/tasks.py); tasks/result and tasks/list are not part of it
        "tasks/update",
        "tasks/cancel",
    }
)
# Which body field Mcp-Name mirrors, per method.
NAME_FIELD: Mapping[str, str] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    **dict.fromkeys(("tasks/get", "tasks/update", "tasks/cancel"), "taskId"),  # SEP-2663 routing headers
}


@dataclass(frozen=True, slots=True)
class Failure:
    status: int  # HTTP status
    code: int  # JSON-RPC error code
    message: str
    data: Any = None


def request_meta(message: Request | Notification) -> dict[str, Any] | None:
    """The message's params._meta when it is an object."""
    params = message.params
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            return meta
    return None


def is_modern(message: Request | Notification) -> bool:
    """Positive evidence of the modern era: params._meta carries the protocol version or the client capabilities
    (whatever their values), or the method is server/discover."""
    if message.method == "server/discover":
        return True
    params = message.params  # request_meta(message), read here (every POST asks: a frame less)
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and (_VERSION in meta or _CAPABILITIES in meta)


def validate(
    message: Request | Notification,
    header: Callable[[str], str | None],
    *,
    supported: tuple[str, ...] = versions.MODERN,
    param_headers: Mapping[str, str] | None = None,
) -> Failure | None:
    """The ladder of the module docstring (rungs 1, 2, 3, 5); None when the request may be served.

    `header(name)` returns the raw value of a request header (looked up case-insensitively) or None;
    `param_headers` maps a tools/call argument (path key) to its Mcp-Param-* header name (tool_header_params).
    A notification needs no _meta and is never refused for its method (no header rules exist for one)."""
    if isinstance(message, Request) and _served(message, header, supported, param_headers):
        return None
    meta = request_meta(message)
    is_request = isinstance(message, Request)
    if is_request:
        failure = _check_meta(message, meta)
        if failure is not None:
            return failure
    body_version = meta.get(wire.META_PROTOCOL_VERSION) if meta is not None else None
    failure = _check_version_header(header, body_version)
    if failure is None and (is_request or header(wire.METHOD) is not None):
        failure = _check_plain(header, wire.METHOD, message.method, "method")
    if failure is None and is_request:
        failure = _check_name(message, header)
    if failure is None and is_request and param_headers and message.method == "tools/call":
        failure = _check_params(message, header, param_headers)
    if failure is not None:
        return failure
    version = (header(wire.PROTOCOL_VERSION) or "").strip(" \t")  # present: checked above
    if version not in supported:
        return Failure(
            400,
            jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version {show(version)}; supported: {', '.join(supported)}",
            {"supported": list(supported), "requested": version},
        )
    if is_request and message.method not in MODERN_METHODS:
        return Failure(404, jsonrpc.METHOD_NOT_FOUND, f"Method not found: {show(message.method)}")
    return None


def _served(
    message: Request, header: Callable[[str], str | None], supported: tuple[str, ...], param_headers: Any
) -> bool:
    """The ladder's verdict for a well-formed request, each header read once: True only when every rung passes
    (then the rungs below would find nothing); False sends the request down the ladder, which says what fails.
    A version in `supported` and a method in MODERN_METHODS are plain header values by construction (a header equal
    to one needs no stripping)."""
    params = message.params
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get(_CAPABILITIES), dict):
        return False
    version = meta.get(_VERSION)
    method = message.method
    if not isinstance(version, str) or version not in supported or method not in MODERN_METHODS:
        return False
    raw = header(_VERSION_HEADER)
    if raw != version and (raw is None or raw.strip(_OWS) != version):
        return False
    raw = header(_METHOD_HEADER)
    if raw != method and (raw is None or raw.strip(_OWS) != method):
        return False
    field = NAME_FIELD.get(method)
    if field is not None:
        raw = header(_NAME_HEADER)
        decoded = header_text(raw) if raw is not None else None
        if decoded is None or decoded != params.get(field):
            return False
    if param_headers and method == "tools/call":
        return _check_params(message, header, param_headers) is None
    return True


_ENVIRON_VERSION, _ENVIRON_METHOD, _ENVIRON_NAME = (
    wire.environ_key(name) for name in (_VERSION_HEADER, _METHOD_HEADER, _NAME_HEADER)
)


def served_environ(message: Request, environ: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's params._meta (a dict) only when validate(message, header) is None, for a request whose headers
    are the WSGI `environ`'s (HttpRequest.header's reading of it; no Mcp-Param-* headers asked for): each header
    read by the environ's own get, with no Python call, and taken when it is the body's value exactly (a str). The
    _meta is what the later steps read the request's capabilities, log level and progress token from (read here
    once). None decides nothing: the caller asks validate, which says what fails, or that the request passes after
    all (a header with spaces around its value, a Base64 Mcp-Name first seen, a params or _meta object of a dict's
    subclass)."""
    params = message.params
    if type(params) is not dict:
        return None
    meta = params.get("_meta")
    if type(meta) is not dict or type(meta.get(_CAPABILITIES)) is not dict:
        return None
    version = meta.get(_VERSION)
    method = message.method
    if type(version) is not str or version not in SUPPORTED_MODERN or method not in MODERN_METHODS:
        return None
    get = environ.get
    if get(_ENVIRON_VERSION) != version or get(_ENVIRON_METHOD) != method:  # (only a str equals a str)
        return None
    field = NAME_FIELD.get(method)
    if field is not None:
        raw = get(_ENVIRON_NAME)
        text = _TEXTS.get(raw) if type(raw) is str else None  # header_text's memo: a value seen before
        if text is None or text != params.get(field):
            return None
    return meta


def header_text(raw: str) -> str | None:
    """decode_header_value(raw), remembered: a worker sees the same few Mcp-Name values (its tools' names) again
    and again. Only a valid value is kept, at most _TEXTS_MAX of them (the memo starts afresh when full)."""
    text = _TEXTS.get(raw)
    if text is None:
        text = decode_header_value(raw)
        if text is not None:
            if len(_TEXTS) >= _TEXTS_MAX:
                _TEXTS.clear()
            _TEXTS[raw] = text
    return text


def check_param_headers(
    message: Request, header: Callable[[str], str | None], param_headers: Mapping[str, str]
) -> Failure | None:
    """Rung 2 for the Mcp-Param-* headers alone, for a request the rest of the ladder has already passed."""
    if not param_headers or message.method != "tools/call":
        return None
    return _check_params(message, header, param_headers)


def _check_meta(message: Request | Notification, meta: dict[str, Any] | None) -> Failure | None:
    if meta is None:
        return _invalid_params(
            "params._meta is missing (it must carry the request's protocol version and client capabilities)"
        )
    version = meta.get(wire.META_PROTOCOL_VERSION)
    if not isinstance(version, str):
        return _invalid_params(f"params._meta[{wire.META_PROTOCOL_VERSION!r}] " + _wanted(version, "a string"))
    capabilities = meta.get(wire.META_CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        return _invalid_params(f"params._meta[{wire.META_CLIENT_CAPABILITIES!r}] " + _wanted(capabilities, "an object"))
    return None


def _wanted(value: object, kind: str) -> str:
    return "is missing" if value is None else f"must be {kind}, not {show(value)}"


def _invalid_params(message: str) -> Failure:
    return Failure(400, jsonrpc.INVALID_PARAMS, "Invalid params: " + message)


def _mismatch(name: str, message: str) -> Failure:
    return Failure(400, HEADER_MISMATCH, f"Header mismatch: {message}", {"header": name})


def _present(header: Callable[[str], str | None], name: str) -> str | Failure:
    raw = header(name)
    if raw is None:
        return _mismatch(name, f"the {name} header is missing")
    return raw


def _check_version_header(header: Callable[[str], str | None], body_version: object) -> Failure | None:
    name = wire.PROTOCOL_VERSION
    if body_version is None:  # a notification without _meta: the header alone names the version
        raw = _present(header, name)
        value = raw if isinstance(raw, Failure) else _plain(name, raw)
        return value if isinstance(value, Failure) else None
    return _check_plain(header, name, body_version, f"_meta[{wire.META_PROTOCOL_VERSION!r}]")


def _plain(name: str, raw: str) -> str | Failure:
    value = plain_header_value(raw)
    if value is None:
        return _mismatch(name, f"the {name} header value {show(raw)} has invalid characters")
    return value


def _check_plain(header: Callable[[str], str | None], name: str, body: object, field: str) -> Failure | None:
    """A header without the Base64 sentinel (MCP-Protocol-Version, Mcp-Method): equal to the body, exactly."""
    raw = _present(header, name)
    value = raw if isinstance(raw, Failure) else _plain(name, raw)
    if isinstance(value, Failure):
        return value
    if value != body:
        return _mismatch(name, f"{name} header value {show(value)} does not match the body's {field} {show(body)}")
    return None


def _check_name(message: Request | Notification, header: Callable[[str], str | None]) -> Failure | None:
    field = NAME_FIELD.get(message.method)
    if field is None:
        return None
    name = wire.NAME
    raw = _present(header, name)
    if isinstance(raw, Failure):
        return raw
    decoded = decode_header_value(raw)
    if decoded is None:
        return _mismatch(name, f"the {name} header value {show(raw)} is not a valid plain or Base64 value")
    params = message.params if isinstance(message.params, dict) else {}
    body = params.get(field)
    if decoded != body:
        return _mismatch(
            name, f"{name} header value {show(decoded)} does not match the body's params.{field} {show(body)}"
        )
    return None


def _check_params(
    message: Request | Notification, header: Callable[[str], str | None], param_headers: Mapping[str, str]
) -> Failure | None:
    params = message.params if isinstance(message.params, dict) else {}
    arguments = params.get("arguments")
    for key, name in param_headers.items():
        body = argument_value(arguments, key)
        if body is None:  # absent or null: the client omits the header, and a stray one is ignored
            continue
        raw = header(name)
        if raw is None:
            return _mismatch(name, f"the {name} header is missing but the body's argument {key!r} is {show(body)}")
        decoded = decode_header_value(raw)
        if decoded is None:
            return _mismatch(name, f"the {name} header value {show(raw)} is not a valid plain or Base64 value")
        if not matches_body(decoded, body):
            return _mismatch(
                name, f"{name} header value {show(decoded)} does not match the body's argument {key!r} {show(body)}"
            )
    return None
