"""subscriptions/listen (2026-07-28), the pure parts serve's listen hub and the relay's bridges share: the
filter a listen asks with, the frames a listen stream carries, and the notification a legacy client gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcpgate.core import jsonrpc
from mcpgate.core.modern import Failure
from mcpgate.core.wire import META_SUBSCRIPTION_ID

LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
RESOURCES_FIELD = "resourceSubscriptions"
# filter field -> (the server capability that allows it, the notification it asks for)
LIST_KINDS: Mapping[str, tuple[str, str]] = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}


def bridged_filter(capabilities: object, uris: Iterable[str]) -> dict[str, Any]:
    """The filter a bridge listens with for a legacy client: every list kind whose feature the server declares
    (its acknowledgment says what it honours) and the URIs the client subscribed to, when any."""
    features = capabilities if isinstance(capabilities, Mapping) else {}
    wanted: dict[str, Any] = {kind: True for kind, (feature, _) in LIST_KINDS.items() if feature in features}
    subscribed = list(uris)
    if subscribed:
        wanted[RESOURCES_FIELD] = subscribed
    return wanted


def parse_listen_filter(wanted: object) -> tuple[frozenset[str], tuple[str, ...] | None] | Failure:
    """The list kinds and URIs a listen filter asks for (URIs deduplicated, in order; None: not asked), or why it
    is invalid (400 / -32602)."""
    if not isinstance(wanted, Mapping):
        return Failure(400, jsonrpc.INVALID_PARAMS, "subscriptions/listen: notifications must be an object")
    kinds: set[str] = set()
    for kind in LIST_KINDS:
        value = wanted.get(kind)
        if value is not None and not isinstance(value, bool):
            return Failure(400, jsonrpc.INVALID_PARAMS, f"subscriptions/listen: {kind} must be a boolean")
        if value:
            kinds.add(kind)
    uris = wanted.get(RESOURCES_FIELD)
    if uris is None:
        return frozenset(kinds), None
    if not isinstance(uris, list) or not all(isinstance(uri, str) for uri in uris):
        return Failure(400, jsonrpc.INVALID_PARAMS, f"subscriptions/listen: {RESOURCES_FIELD} must be strings")
    return frozenset(kinds), tuple(dict.fromkeys(uris))


def listen_frame(method: str, params: Any, subscription_id: jsonrpc.Id) -> dict[str, Any]:
    """A notification as one listen stream gets it: that stream's subscription id in `_meta`."""
    out = dict(params) if isinstance(params, dict) else {}
    meta = out.get("_meta")
    out["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SUBSCRIPTION_ID: subscription_id}
    return {"jsonrpc": "2.0", "method": method, "params": out}


def listen_end(subscription_id: jsonrpc.Id) -> dict[str, Any]:
    """The response that ends a listen stream gracefully."""
    result = {"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: subscription_id}}
    return {"jsonrpc": "2.0", "id": subscription_id, "result": result}


def without_subscription_id(params: Any) -> Any:
    """A listen notification's params as a legacy client gets them: _meta's subscriptionId removed (an _meta left
    empty removed). The argument is not changed."""
    if not isinstance(params, dict) or not isinstance(params.get("_meta"), dict):
        return params
    meta = {key: value for key, value in params["_meta"].items() if key != META_SUBSCRIPTION_ID}
    out = {key: value for key, value in params.items() if key != "_meta"}
    if meta:
        out["_meta"] = meta
    return out
