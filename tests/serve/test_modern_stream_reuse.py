"""A 2026-07-28 reply sent whole as JSON leaves its stream among the worker's spares (Stream.recycle) for the next
request, and its call pointing at a spent stream; a call that may still get something (it asked its client for
input, or it is not answered) keeps its stream, which is closed or goes on as SSE."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.serve.front.reply import Client
from mcpgate.serve.modern import stateless
from mcpgate.serve.modern.calls import new_call
from mcpgate.serve.modern.pooled_child import Era
from mcpgate.serve.sessions import stream as streams
from mcpgate.serve.sessions.stream import Stream
from tests.serve.test_modern_call_shortcuts import LIMITS, REQUEST_META, pooled, request

ANSWER = b'{"jsonrpc":"2.0","id":"%s","result":{"content":[],"isError":false}}'


class Asked:
    parked = False

    def finished(self, data: bytes) -> None:
        pass


# (answered by the child, a continuation, the reply's status, its stream kept as a spare)
CASES = [
    (True, False, 200, True),
    (False, True, 200, False),  # it asked for input (its reply the bridge's): the bridge may reach its stream again
    (False, False, 200, False),  # no answer within sse_after: SSE, the stream goes on
]


@pytest.mark.parametrize(("answered", "asked", "status", "kept"), CASES)
def test_a_json_reply_leaves_its_stream_as_a_spare(
    answered: bool, asked: bool, status: int, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "SPARES", [])
    monkeypatch.setattr(stateless, "SPARES", streams.SPARES)
    child, _pipe = pooled(Era.LEGACY)
    message = request("tools/call", {"name": "echo", "arguments": {}, "_meta": REQUEST_META})
    stream = Stream(LIMITS, 1)
    call = new_call(message, "p", {}, stream)
    if asked:
        call.continuation = Asked()
    assert child.start_call(message, call)
    if answered:
        child._on_message(jsonrpc.parse_line(ANSWER % call.minted.encode()))
    if asked:  # the bridge's input_required result, the call still on its child
        stream.deliver(b'{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required"}}', True)
    gw: Any = SimpleNamespace(settings=SimpleNamespace(sse_after=0.0, keepalive=5.0))
    pool: Any = SimpleNamespace(bridge=SimpleNamespace(call_ended=lambda _call: None))
    response = stateless.reply(gw, pool, call, Client())
    assert response.status == status
    assert (stream in streams.SPARES) is kept
    assert (call.stream is stateless.SPENT) is kept
    if kept:  # taken by the next call as a new stream would be made
        assert stream.expected == 0 and not stream.closed and stream.pump is None
    elif asked:
        assert stream.closed


def test_the_spent_stream_takes_nothing() -> None:
    assert stateless.SPENT.closed and not stateless.SPENT.deliver(b"{}", True)
