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

from .jsonrpc import Request

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
