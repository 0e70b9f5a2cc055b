"""The sampling decision (observe/trace_sampling.py): the SDK's sampler read into a rule per parent (static ones
decided without the SDK), the SDK's sampler asked where it is not static, and the tracestate passed on."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import sampling

from mcpgate.core import jsonrpc
from mcpgate.observe import trace_sampling
from mcpgate.observe.w3c import Parent

TRACE_ID = bytes(range(1, 17))
SAMPLED = Parent(TRACE_ID, bytes(range(40, 48)), True, "vendor=1")
UNSAMPLED = Parent(TRACE_ID, bytes(range(40, 48)), False, "")
RATIO = sampling.TraceIdRatioBased(0.5)

RULES: list[tuple[Any, tuple[Any, Any, Any]]] = [
    (sampling.ALWAYS_ON, (True, True, True)),
    (sampling.ALWAYS_OFF, (False, False, False)),
    (sampling.ParentBased(sampling.ALWAYS_ON), (True, True, False)),
    (sampling.ParentBased(sampling.ALWAYS_OFF), (False, True, False)),
    (RATIO, (RATIO, RATIO, RATIO)),
]


@pytest.mark.parametrize(("sampler", "expected"), RULES)
def test_a_static_sampler_is_decided_without_the_sdk(sampler: Any, expected: tuple[Any, Any, Any]) -> None:
    assert trace_sampling.rules(sampler, sampling) == expected


def test_a_parent_based_ratio_keeps_the_ratio_for_a_request_without_a_parent() -> None:
    root, sampled, unsampled = trace_sampling.rules(sampling.ParentBased(RATIO), sampling)
    assert root is RATIO and (sampled, unsampled) == (True, False)


ASKED: list[tuple[float, Parent | None, bool, str]] = [
    (1.0, None, True, ""),
    (0.0, None, False, ""),
    (1.0, SAMPLED, True, "vendor=1"),  # the parent's tracestate passed on
    (0.0, UNSAMPLED, False, ""),
]


@pytest.mark.parametrize(("ratio", "parent", "sampled", "state"), ASKED)
def test_a_sampler_that_is_not_static_is_asked(ratio: float, parent: Parent | None, sampled: bool, state: str) -> None:
    trace_sampling.configure()  # the SDK's api, as tracing.setup imports it
    message = jsonrpc.parse(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}')
    rule = sampling.TraceIdRatioBased(ratio)
    assert trace_sampling.asked(rule, parent, TRACE_ID, message) == (sampled, state)


def test_a_request_is_described_as_its_span_will_be() -> None:
    meta = b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}'
    message = jsonrpc.parse(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo",%s}}' % meta)
    assert isinstance(message, jsonrpc.Request)
    name, attributes = trace_sampling.described(message)
    assert name == "tools/call echo"
    assert attributes["jsonrpc.request.id"] == "3" and attributes["gen_ai.tool.name"] == "echo"
    assert attributes["mcp.protocol.version"] == "2026-07-28"
