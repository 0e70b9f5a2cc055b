"""The worker's reply head (serve/front/writing.py `_head`): the bytes pywsgi's WSGIHandler writes for the same
status and headers (its _write_with_headers, line by line)."""

from __future__ import annotations

import pytest

from mcpgate.serve.front.writing import _head


def pywsgi_head(status: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    towrite = bytearray(b"HTTP/1.1 " + status + b"\r\n")
    for header, value in headers:
        towrite.extend(b"%s: %s\r\n" % (header, value))
    towrite.extend(b"\r\n")
    return bytes(towrite)


@pytest.mark.parametrize(
    "status,headers",
    [
        (b"200 OK", []),
        (b"200 OK", [(b"Content-Type", b"application/json"), (b"Content-Length", b"87")]),
        (b"204 No Content", [(b"Date", b"Thu, 03 Dec 2026 07:00:00 GMT")]),
        (b"421", [(b"X-Empty", b""), (b"Mcp-Session-Id", b"abc"), (b"Connection", b"close")]),
    ],
)
def test_the_head_is_pywsgis(status: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    assert _head(status, headers) == pywsgi_head(status, headers)
