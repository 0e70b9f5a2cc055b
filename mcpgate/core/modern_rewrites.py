"""Rewriting between the eras: what a child of either era gets of a 2026-07-28 client's request, and what the
client gets of that child's answer. Pure: no I/O, no state, and no argument is changed (a rewrite that changes
anything returns a new object).

Towards a child:
  - legacy_params: a legacy (2025) child's params are the client's without the per-request protocol fields of
    _meta (REQUEST_META_KEYS); progressToken and any other _meta key stay, an _meta left empty goes.
  - child_request: the bytes of the request the gateway sends under an id it minted, what jsonrpc.encode makes
    of the whole message (given a fast encoder for the params, the same JSON: a float may be written in another
    exponent form, 1e16 for 1e+16).

Back to the client:
  - stamp_result: a result with what a 2026-07-28 result must or should carry (resultType; a CACHEABLE method's
    ttlMs and cacheScope; the child's serverInfo).
  - discover_from_initialize: the DiscoverResult answered for a legacy child, from its InitializeResult.
  - is_discover_result, recognised_modern_error: whether a child's answer is one only a 2026-07-28 peer gives
    (how the gateway learns a child's era).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcpgate.core import jsonrpc, wire
from mcpgate.core.modern import MODERN_ERRORS, MODERN_METHODS

# The methods whose complete result carries cache hints (ttlMs, cacheScope).
CACHEABLE = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
# The per-request _meta fields a legacy child does not know (progressToken and everything else stay).
REQUEST_META_KEYS = frozenset(
    {wire.META_PROTOCOL_VERSION, wire.META_CLIENT_CAPABILITIES, wire.META_CLIENT_INFO, wire.META_LOG_LEVEL}
)
_ONLY_REQUEST_META = REQUEST_META_KEYS.issuperset  # meta.keys() <= REQUEST_META_KEYS, a method call less


def legacy_params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The params a legacy child gets: the per-request protocol fields of _meta removed (progressToken and any
    other key kept), an _meta left empty removed. The argument is not changed."""
    if type(params) is not dict and not isinstance(params, dict):  # (a type check first: no call)
        return params
    meta = params.get("_meta")
    if type(meta) is not dict and not isinstance(meta, dict):
        return params
    out = params.copy() if type(params) is dict else dict(params)
    if _ONLY_REQUEST_META(meta):  # only the per-request fields (the usual _meta): it goes whole
        del out["_meta"]
    else:
        out["_meta"] = {key: value for key, value in meta.items() if key not in REQUEST_META_KEYS}
    return out


# What follows a minted id in a request to a child, per 2026-07-28 method (its name is ASCII: JSON escapes nothing).
_AFTER_ID = {method: b'","method":"' + method.encode() + b'","params":' for method in MODERN_METHODS}


def child_request(
    minted: str, method: str, params: dict[str, Any] | None, fast: Callable[[Any], bytes] | None = None
) -> bytes:
    """jsonrpc.encode({"jsonrpc": "2.0", "id": minted, "method": method, "params": params}), without params when
    None, for an id the gateway minted (serve/modern/calls.mint: ASCII letters, digits and "-", nothing JSON
    escapes): a 2026-07-28 method's head is put together from known bytes and only the params are encoded.

    `fast` (msgspec's encoder, given by the worker: serve/modern/pooled_child.py) encodes the params first, for
    params of decoded JSON (dicts, lists, strings, ints, floats, booleans, None). Its bytes are json's but for a
    float written in exponent form (1e16 for json's 1e+16, 2.5e-7 for 2.5e-07, 0.00001 for 1e-05: the same number).
    They are not taken, and json's encoder writes the params, when it raises (a lone surrogate: json escapes
    the text as ASCII) or writes a null anywhere (json writes Infinity for a number past a double's range, as
    1e400 decodes; for a plain null, json's bytes are the same). tests/core/test_modern_rewrites.py checks both
    ways decode alike."""
    after = _AFTER_ID.get(method) if params is not None else None
    if after is None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": minted, "method": method}
        if params is not None:
            message["params"] = params
        return jsonrpc.encode(message)
    body = None
    if fast is not None:
        try:
            body = fast(params)
        except (TypeError, ValueError, OverflowError, RecursionError):  # (UnicodeEncodeError is a ValueError)
            body = None
        if body is not None and body.find(b"null") >= 0:
            body = None
    if body is None:
        body = jsonrpc.encode(params)
    return b"".join((b'{"jsonrpc":"2.0","id":"', minted.encode(), after, body, b"}"))


def stamp_result(
    method: str, result: dict[str, Any], *, ttl_ms: int, server_info: dict[str, Any] | None
) -> dict[str, Any]:
    """A new result with what a 2026-07-28 result must or should carry: resultType ("complete" when absent);
    on a complete result of a CACHEABLE method ttlMs (when absent or not an integer >= 0) and cacheScope
    ("private" when absent or not public/private); server_info under _meta[serverInfo] when given and absent.
    An input_required (or other) result gets only the serverInfo."""
    out = dict(result)
    kind = out.setdefault("resultType", "complete")
    if kind == "complete" and method in CACHEABLE:
        ttl = out.get("ttlMs")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
            out["ttlMs"] = ttl_ms
        if out.get("cacheScope") not in ("public", "private"):
            out["cacheScope"] = "private"
    if server_info is not None:
        meta = out.get("_meta")
        if meta is None:
            out["_meta"] = {wire.META_SERVER_INFO: server_info}
        elif isinstance(meta, dict) and wire.META_SERVER_INFO not in meta:
            out["_meta"] = {**meta, wire.META_SERVER_INFO: server_info}
    return out


def discover_from_initialize(init_result: dict[str, Any], supported: tuple[str, ...]) -> dict[str, Any]:
    """The DiscoverResult the gateway answers for a legacy child, from that child's InitializeResult
    (stamp_result then adds the cache hints)."""
    capabilities = init_result.get("capabilities")
    result: dict[str, Any] = {
        "resultType": "complete",
        "supportedVersions": list(supported),
        "capabilities": dict(capabilities) if isinstance(capabilities, dict) else {},
    }
    instructions = init_result.get("instructions")
    if isinstance(instructions, str):
        result["instructions"] = instructions
    server_info = init_result.get("serverInfo")
    if isinstance(server_info, dict):
        result["_meta"] = {wire.META_SERVER_INFO: server_info}
    return result


def is_discover_result(result: object) -> bool:
    """Whether a result is a DiscoverResult: supportedVersions (a list of strings) and capabilities (an object)."""
    if not isinstance(result, dict):
        return False
    versions_ = result.get("supportedVersions")
    return (
        isinstance(versions_, list)
        and all(isinstance(v, str) for v in versions_)
        and isinstance(result.get("capabilities"), dict)
    )


def recognised_modern_error(error: object) -> bool:
    """Whether an error (the error object, or a whole error response) is one only a modern-era peer sends:
    HeaderMismatch, MissingRequiredClientCapability or UnsupportedProtocolVersion."""
    if isinstance(error, dict) and isinstance(error.get("error"), dict):
        error = error["error"]
    if not isinstance(error, dict):
        return False
    code = error.get("code")
    return isinstance(code, int) and not isinstance(code, bool) and code in MODERN_ERRORS
