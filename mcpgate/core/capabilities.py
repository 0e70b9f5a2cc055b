"""The client capabilities of the 2026-07-28 era: what a request declares in _meta, what an input request
(elicitation/create, sampling/createMessage, roots/list) needs of them, and rung 4 of core/modern.py's ladder:
the MissingRequiredClientCapabilityError (400 / -32021) naming what the client did not declare.

Pure: a request's capabilities are read from its params._meta, never remembered; the caller decides when a
capability is needed (a bridged input request, a task) and answers the Failure this module makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcpgate.core import wire
from mcpgate.core.jsonrpc import Notification, Request
from mcpgate.core.modern import MISSING_CLIENT_CAPABILITY, Failure, request_meta

# The input requests a server sends a client, and the client capability each needs.
INPUT_CAPABILITY: Mapping[str, str] = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
INPUT_METHODS = frozenset(INPUT_CAPABILITY)


def client_capabilities(message: Request | Notification) -> dict[str, Any]:
    """The clientCapabilities the request declares ({} when it declares none)."""
    meta = request_meta(message)
    capabilities = meta.get(wire.META_CLIENT_CAPABILITIES) if meta is not None else None
    return capabilities if isinstance(capabilities, dict) else {}


def missing_capabilities(needed: Iterable[str], declared: Mapping[str, Any]) -> dict[str, Any]:
    """The needed capabilities the client did not declare, as a ClientCapabilities object ({"sampling": {}});
    `needed` names capabilities or input methods ("elicitation/create" needs "elicitation")."""
    missing: dict[str, Any] = {}
    for item in needed:
        capability = INPUT_CAPABILITY.get(item, item)
        if declared.get(capability) is None:
            missing[capability] = {}
    return missing


def capability_failure(missing: Mapping[str, Any]) -> Failure:
    """Rung 4: the MissingRequiredClientCapabilityError for what missing_capabilities found."""
    names = ", ".join(missing)
    return Failure(
        400,
        MISSING_CLIENT_CAPABILITY,
        f"Missing required client capability: {names} (declare it in _meta[{wire.META_CLIENT_CAPABILITIES!r}])",
        {"requiredCapabilities": dict(missing)},
    )


def input_requirement(method: str, params: object) -> dict[str, Any]:
    """The ClientCapabilities an input request (elicitation/create, sampling/createMessage, roots/list) needs:
    {"elicitation": {"url": {}}} for a URL-mode elicitation, {"sampling": {"tools": {}}} for sampling with tools;
    {} for any other method."""
    capability = INPUT_CAPABILITY.get(method)
    if capability is None:
        return {}
    body = params if isinstance(params, dict) else {}
    detail = None
    if method == "elicitation/create":
        detail = "url" if body.get("mode") == "url" else "form"
    elif method == "sampling/createMessage" and body.get("tools"):
        detail = "tools"
    return {capability: {detail: {}} if detail else {}}


def missing_for_input(method: str, params: object, declared: Mapping[str, Any]) -> dict[str, Any]:
    """What input_requirement needs and the client did not declare ({} when nothing is missing). A declared
    "elicitation": {} means form mode only."""
    for capability, details in input_requirement(method, params).items():
        have = declared.get(capability)
        if not isinstance(have, dict):
            return {capability: details}
        for detail in details:
            implicit_form = capability == "elicitation" and detail == "form" and not have
            if not implicit_form and have.get(detail) is None:
                return {capability: {detail: {}}}
    return {}
