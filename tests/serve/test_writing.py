"""The worker's reply head (serve/front/writing.py `_head`) and body pieces (`_write`): the bytes pywsgi's
WSGIHandler writes for the same status and headers (its _write_with_headers, line by line) and the same piece."""

from __future__ import annotations

import pytest
from gevent.pywsgi import WSGIHandler

from mcpgate.serve.front.writing import JOINED, LeanWrites, _head


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


class Pieces:
    """What a handler's _write sends (its _sendall's data, in order), chunked or not."""

    def __init__(self, chunked: bool) -> None:
        self.response_use_chunked = chunked
        self.sent: list[bytes] = []

    def _sendall(self, data: bytes) -> None:
        self.sent.append(bytes(data))


class LeanPieces(Pieces, LeanWrites):
    pass


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "length"])
@pytest.mark.parametrize("size", [0, 1, JOINED, JOINED + 1, 4 * 1024 * 1024])
def test_a_body_piece_is_sent_as_pywsgi_sends_it(chunked: bool, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    pywsgi, lean = Pieces(chunked), LeanPieces(chunked)
    WSGIHandler._write(pywsgi, data)
    lean._write(data)
    assert b"".join(lean.sent) == b"".join(pywsgi.sent)
    assert len(lean.sent) == (0 if not size else 3 if chunked and size > JOINED else 1)  # a large chunk: not copied
