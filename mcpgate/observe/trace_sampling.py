"""The sampling decision of a traced request (observe/tracing.py): the SDK's sampler configured from OTEL_TRACES_SAMPLER
(and _ARG) read once into its rule for a request with no parent, a sampled remote parent and an unsampled one
(`rules`: True or False where the sampler is static, ALWAYS_ON, ALWAYS_OFF and ParentBased over them, decided
without the SDK), and the SDK's sampler asked (`asked`) only where it is not: a span name and attributes as the
request's span will have them, the parent as a NonRecordingSpan. Also what a request's spans say of it
(`request_of`). The SDK is imported by `configure`, with tracing on only.
"""

from __future__ import annotations

from typing import Any

from mcpgate.core import jsonrpc, wire
from mcpgate.core.jsonrpc import Message, Request
from mcpgate.observe.w3c import Parent

_api: Any = None  # opentelemetry.trace (`configure`)
_empty: Any = None  # an empty opentelemetry Context: a request without a parent's


def configure() -> tuple[Any, Any, Any]:
    """The SDK's sampler from OTEL_TRACES_SAMPLER[_ARG], as `rules` gives it."""
    global _api, _empty
    from opentelemetry import context, trace
    from opentelemetry.sdk.trace import sampling

    _api, _empty = trace, context.Context()
    return rules(sampling._get_from_env_or_default(), sampling)


def rules(sampler: Any, sampling: Any) -> tuple[Any, Any, Any]:
    """The sampler's decision for a request with no parent, a sampled remote parent, an unsampled one: True or
    False where it is static (ALWAYS_ON, ALWAYS_OFF, and ParentBased over them), else the sampler to ask."""

    def static(chosen: Any) -> Any:
        if isinstance(chosen, sampling.StaticSampler):
            return chosen._decision is sampling.Decision.RECORD_AND_SAMPLE
        return chosen

    if isinstance(sampler, sampling.ParentBased):
        return static(sampler._root), static(sampler._remote_parent_sampled), static(sampler._remote_parent_not_sampled)
    return static(sampler), static(sampler), static(sampler)


def asked(rule: Any, parent: Parent | None, trace_id: bytes, message: Message | None) -> tuple[bool, str]:
    """A sampler that is not static asked: sampled or not, and the tracestate to pass on."""
    context = _empty
    if parent is not None:
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

        found = SpanContext(
            int.from_bytes(parent.trace_id, "big"),
            int.from_bytes(parent.span_id, "big"),
            True,
            TraceFlags(1 if parent.sampled else 0),
            TraceState.from_header([parent.state]) if parent.state else None,
        )
        context = _api.set_span_in_context(NonRecordingSpan(found))
    name, attributes = described(message) if isinstance(message, Request) else ("", {})
    kind = _api.SpanKind.SERVER
    decision = rule.should_sample(context, int.from_bytes(trace_id, "big"), name, kind, attributes)
    state = decision.trace_state.to_header() if decision.trace_state else ""
    return decision.decision.is_sampled(), state


def looked_at(message: Message | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A message's params and their _meta, where each is an object."""
    params = getattr(message, "params", None)
    if not isinstance(params, dict):
        return None, None
    meta = params.get("_meta")
    return params, meta if isinstance(meta, dict) else None


def described(message: Request) -> tuple[str, dict[str, Any]]:
    """A request's span name and attributes (OpenTelemetry's MCP conventions; never its arguments)."""
    from mcpgate.observe import trace_spans  # with tracing on only (its encoders' tables are built at import)

    name, attributes = trace_spans.named(*request_of(message, *looked_at(message))[:3])
    return name, {"jsonrpc.request.id": str(message.id), **attributes}


def request_of(
    message: Request, params: dict[str, Any] | None, meta: dict[str, Any] | None
) -> tuple[str, Any, Any, Any]:
    """What a request's spans say of it: its method, params.name, _meta's protocol version, id (as they came);
    `params` and `meta` as looked_at gives them."""
    name = params.get("name") if params is not None else None
    version = meta.get(wire.META_PROTOCOL_VERSION) if meta is not None else None
    return message.method, name, version, message.id


def request_of_bytes(data: bytes) -> tuple[str, Any, Any, Any] | str:
    """request_of of a request's bytes as they came (how the export process reads a usual request's record: the
    worker sends them, observe/tracing.py to_child); "" for bytes that hold no request."""
    message = jsonrpc.parse(data)
    return request_of(message, *looked_at(message)) if type(message) is Request else ""
