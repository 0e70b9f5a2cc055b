"""Multi-round-trip requests (2026-07-28 MRTR), the parts both bridges share (serve's for a legacy child,
the relay's for a legacy host or server): naming an input request, building an InputRequiredResult, and
turning a client's answer into the result of the original server-to-client request.

A bridge holds the legacy side's own requests (elicitation/create, sampling/createMessage, roots/list) as
"pending", keyed; the modern side sees them as `inputRequests` under the same keys and answers them in
`inputResponses`.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from mcpgate.core import jsonrpc, versions
from mcpgate.core.capabilities import INPUT_METHODS, missing_for_input
from mcpgate.core.jsonrpc import Request
from mcpgate.core.modern import NAME_FIELD
from mcpgate.core.wire import META_SERVER_INFO

INPUT_REQUIRED = "input_required"
# How a legacy server may name its input request's key (params._meta); else the bridge mints "<capability>-<n>".
INPUT_KEY = "dev.mcpgate/inputKey"
MAX_KEY_CHARS = 128


def input_key(request: Request, capability: str, taken: Container[str], counter: int) -> tuple[str, int]:
    """The inputRequests key for a legacy side's input request and the counter after minting: its own name
    (params._meta[INPUT_KEY]) when usable and free, else `<capability>-<n>` with the next free n."""
    meta = request.params.get("_meta") if isinstance(request.params, dict) else None
    named = meta.get(INPUT_KEY) if isinstance(meta, dict) else None
    if isinstance(named, str) and 0 < len(named) <= MAX_KEY_CHARS and named not in taken:
        return named, counter
    while True:
        counter += 1
        key = f"{capability}-{counter}"
        if key not in taken:
            return key, counter


def input_request(request: Request) -> dict[str, Any]:
    """One entry of inputRequests: the legacy request's method and params."""
    entry: dict[str, Any] = {"method": request.method}
    if isinstance(request.params, dict):
        entry["params"] = request.params
    return entry


def input_required_result(pending: Mapping[str, Request], request_state: str | None) -> dict[str, Any]:
    """An InputRequiredResult asking for every pending request (requestState only when there is one)."""
    result: dict[str, Any] = {
        "resultType": INPUT_REQUIRED,
        "inputRequests": {key: input_request(request) for key, request in pending.items()},
    }
    if request_state is not None:
        result["requestState"] = request_state
    return result


def is_input_required(result: object) -> bool:
    return isinstance(result, dict) and result.get("resultType") == INPUT_REQUIRED


def legacy_answer(answer: object) -> dict[str, Any] | None:
    """The result a legacy side gets for its input request from a modern client's answer: the object without
    the 2026-07-28-only resultType; None when the answer is not an object (never forwarded)."""
    if not isinstance(answer, dict):
        return None
    return {key: value for key, value in answer.items() if key != "resultType"}


# -- what the relay's two bridges (and serve's) rewrite -------------------------------------------------------

# What a bridge declares to a legacy server it initializes itself: every input request it can pass on.
BRIDGED_CAPABILITIES: Mapping[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
MRTR_PARAMS = ("inputResponses", "requestState")
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def without_mrtr(params: Any) -> Any:
    """The params a legacy side gets: inputResponses and requestState (2026-07-28 only) removed; anything but an
    object unchanged. The argument is not changed."""
    if not isinstance(params, dict) or not any(name in params for name in MRTR_PARAMS):
        return params
    return {key: value for key, value in params.items() if key not in MRTR_PARAMS}


def retry_params(params: Any, responses: Mapping[str, Any], request_state: object) -> dict[str, Any]:
    """The params of an MRTR retry: the original request's, with `inputResponses` (when there are any) and the
    echoed `requestState` (only when the server gave one: a string)."""
    out: dict[str, Any] = dict(without_mrtr(params)) if isinstance(params, dict) else {}
    if responses:
        out["inputResponses"] = dict(responses)
    if isinstance(request_state, str):
        out["requestState"] = request_state
    return out


def input_requests(result: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any] | None]] | None:
    """The input requests of an InputRequiredResult, key -> (method, params); {} when it asks for none; None when
    `inputRequests` is malformed (not an object, or an entry that is not an object naming an input method, or
    whose params are not an object)."""
    entries = result.get("inputRequests")
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        return None
    out: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for key, entry in entries.items():
        method = entry.get("method") if isinstance(entry, dict) else None
        params = entry.get("params") if isinstance(entry, dict) else None
        if method not in INPUT_METHODS or (params is not None and not isinstance(params, dict)):
            return None
        assert isinstance(method, str)
        out[key] = (method, params)
    return out


def call_name(method: str, params: Any) -> object:
    """What names an MRTR call (params.name of tools/call and prompts/get, params.uri of resources/read); a retry
    must name the same."""
    field = NAME_FIELD.get(method)
    return params.get(field) if field is not None and isinstance(params, dict) else None


def state_binding(method: str, params: Any) -> str:
    """The StateSealer binding of an MRTR call: its method and what names it."""
    return jsonrpc.encode([method, call_name(method, params)]).decode("utf-8")


def level_allows(wanted: object, level: object) -> bool:
    """Whether a log message at `level` reaches a client that asked for `wanted` (None or unknown: nothing)."""
    if wanted not in LOG_LEVELS or level not in LOG_LEVELS:
        return False
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(wanted)


def initialize_from_discover(
    discover: Mapping[str, Any], requested: object, fallback_info: Mapping[str, Any]
) -> dict[str, Any]:
    """The InitializeResult a bridge answers a legacy client with for a modern server, from its DiscoverResult:
    the client's revision when a handshake revision, else the latest; the server's capabilities, its serverInfo
    (`fallback_info` when it names none) and instructions."""
    capabilities = discover.get("capabilities")
    meta = discover.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    result: dict[str, Any] = {
        "protocolVersion": versions.negotiate(requested),
        "capabilities": dict(capabilities) if isinstance(capabilities, dict) else {},
        "serverInfo": dict(info) if isinstance(info, dict) else dict(fallback_info),
    }
    instructions = discover.get("instructions")
    if isinstance(instructions, str):
        result["instructions"] = instructions
    return result


def missing_capability(
    asks: Mapping[str, tuple[str, dict[str, Any] | None]], declared: Mapping[str, Any]
) -> tuple[str, dict[str, Any]] | None:
    """The first input request a legacy client cannot be asked (it did not declare what it needs): its method and
    the missing capabilities; None when every one can be asked."""
    for method, params in asks.values():
        missing = missing_for_input(method, params, declared)
        if missing:
            return method, missing
    return None


def answered_result(answer: Mapping[str, Any]) -> dict[str, Any] | str:
    """A legacy client's answer (a whole response) to an input request: the result to send back in
    inputResponses, or why there is none (its error's message)."""
    result = answer.get("result")
    if isinstance(result, dict):
        return result
    error = answer.get("error")
    why = error.get("message") if isinstance(error, dict) else None
    return why if isinstance(why, str) else "no result"
