"""What a span's end reads of a JSON answer (observe/answer_marks.py): the JSON-RPC error code, and whether a
tools/call result says isError true, the same as the audit log's rule (audit.is_tool_error) for a table of
answers, the shortcut for a lone "isError":false included."""

from __future__ import annotations

import pytest

from mcpgate.observe import answer_marks, audit

ANSWERS: list[tuple[bytes, bool]] = [
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}', True),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[], "isError" : true }}', True),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"isError":false},"isError":true}}', True),
    (b'{"jsonrpc":"2.0","id":1,"result":{"isError":false,"structuredContent":{"isError":true}}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\\"isError\\":true"}]}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false }}', False),
    (
        b'{"jsonrpc":"2.0","id":1,"result":{"isError":false,"content":[{"type":"text","text":"\\"isError\\":true"}]}}',
        False,
    ),
    (b'{"jsonrpc":"2.0","id":1,"result":{"isError":false,"meta":{"isError":false}}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"isError":false,"isError":true}}', True),  # the last one, as json reads it
]


@pytest.mark.parametrize(("body", "expected"), ANSWERS)
def test_tool_error_is_the_audit_logs_rule(body: bytes, expected: bool) -> None:
    assert answer_marks.tool_error(body) is expected
    assert audit.is_tool_error(body, lambda: audit.decoded(body)) is expected


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}', -32602),
        (b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\\"error\\""}]}}', None),
        (b'{"jsonrpc":"2.0","id":1,"result":{}}', None),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"bad"}}', None),
    ],
)
def test_error_code_of_an_answer(body: bytes, code: int | None) -> None:
    assert answer_marks.error_code(body) == code
