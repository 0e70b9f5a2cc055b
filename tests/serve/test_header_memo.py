"""The worker's memo of header blocks (serve/front/request_headers.py): a block read again from the same bytes reads
as the same fields, each request with its own RequestHeaders; a change to one request's fields never reaches
another's; the memo stays within its bounds; a refused block is never remembered; the environ is the same."""

from __future__ import annotations

import io

from mcpgate.serve.front import environ, request_headers
from mcpgate.serve.front.request_headers import RequestHeaders

BLOCK = (
    b"Host: 127.0.0.1:8000\r\nContent-Length: 12\r\nAccept: application/json, text/event-stream\r\n"
    b"Content-Type: application/json\r\nMcp-Session-Id: abc\r\nX-Twice: 1\r\nX-Twice: 2\r\n\r\n"
)


def read(block: bytes) -> tuple[RequestHeaders, bytes]:
    """The block as the worker reads it (buffered), and what is left unread after it."""
    fp = io.BufferedReader(io.BytesIO(block + b"next"))
    return RequestHeaders.read(fp), fp.read()


def test_the_same_bytes_read_as_the_same_fields_each_time() -> None:
    first, rest = read(BLOCK)
    again, rest_again = read(BLOCK)
    assert first.status == again.status == ""
    assert first.fields == again.fields and rest == rest_again == b"next"
    assert first.fields is not again.fields
    assert again.get("x-twice") == "1" and again.get("HOST") == "127.0.0.1:8000"
    assert BLOCK in request_headers._BLOCKS


def test_a_change_to_one_request_never_reaches_another() -> None:
    first, _ = read(BLOCK)
    first.replace("Host", "example.test")
    del first["Accept"]
    again, _ = read(BLOCK)
    assert again.get("host") == "127.0.0.1:8000" and again.get("accept") == "application/json, text/event-stream"
    assert first.block is None and again.block is not None


def test_the_environ_is_the_same_from_a_remembered_block() -> None:
    fields = read(BLOCK)[0].fields
    for headers in (read(BLOCK)[0], RequestHeaders(list(fields))):  # remembered, and made a field at a time
        built = environ.request_items("POST", "/mcp", "HTTP/1.1", headers)
        assert built["HTTP_X_TWICE"] == "1,2" and built["HTTP_MCP_SESSION_ID"] == "abc"
        assert built["CONTENT_LENGTH"] == "12" and "HTTP_CONTENT_LENGTH" not in built


def test_a_refused_block_is_never_remembered() -> None:
    refused = b"Host: a\r\nHost: b\r\n\r\n"
    for _ in range(2):
        headers, _ = read(refused)
        assert headers.status == "Repeated Host" and headers.fields == []
    assert refused not in request_headers._BLOCKS


def test_the_memo_keeps_its_bounds() -> None:
    for number in range(request_headers.MEMO_BLOCKS + 10):
        read(b"Host: h%d\r\n\r\n" % number)
    assert len(request_headers._BLOCKS) <= request_headers.MEMO_BLOCKS
    assert b"Host: h0\r\n\r\n" not in request_headers._BLOCKS  # the oldest went first
    long = b"Host: h\r\nX-Long: " + b"a" * request_headers.MEMO_BYTES + b"\r\n\r\n"
    assert read(long)[0].get("x-long") is not None and long not in request_headers._BLOCKS
