"""An HTTP/1.1 reply's head and framing (core/http1.py), as both of mcpgate's own HTTP/1.1 readers see it."""

from __future__ import annotations

import pytest

from mcpgate.core import http1
from mcpgate.core.http1 import Framing, ReplyError

CL = ("Content-Length", "5")
CHUNKED = ("Transfer-Encoding", "chunked")
CLOSE = ("Connection", "close")


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        (b"HTTP/1.1 200 OK\r\n", (1, 200, "OK")),
        (b"HTTP/1.1 200 OK", (1, 200, "OK")),
        (b"HTTP/1.0 404 Not Found\n", (0, 404, "Not Found")),
        (b"HTTP/1.1 204", (1, 204, "")),
        (b"HTTP/1.1 503 ", (1, 503, "")),
        (b"HTTP/1.1 100 Continue\r\n", (1, 100, "Continue")),
        (b"HTTP/1.1 200 caf\xe9", (1, 200, "caf\xe9")),  # latin-1, as the head is
    ],
)
def test_a_status_line(line: bytes, parsed: tuple[int, int, str]) -> None:
    assert http1.status_line(line) == parsed


@pytest.mark.parametrize(
    "line",
    [
        *(b"", b"HTTP/2 200 OK", b"HTTP/1.1 2000 OK", b"HTTP/1.1 20 OK", b"HTTP/1.1 abc OK", b"ICY 200 OK", b"200 OK"),
        *(b"HTTP/1.1 20\xb2 OK", b"HTTP/1.1 \xb9\xb2\xb3 OK"),  # latin-1 superscripts: str.isdigit takes them
    ],
)
def test_a_bad_status_line(line: bytes) -> None:
    with pytest.raises(ReplyError, match="bad status line"):
        http1.status_line(line)


@pytest.mark.parametrize(
    ("lines", "headers"),
    [
        ([b"A: 1", b"B:2"], [("A", "1"), ("B", "2")]),
        ([b"A:   spaced \t"], [("A", "spaced")]),
        ([b"A: 1", b"A: 2"], [("A", "1"), ("A", "2")]),  # repeated, kept in order
        ([b"A: one", b"  two", b"\tthree"], [("A", "one two three")]),  # obsolete folding joined
        ([b"A:"], [("A", "")]),
        ([b"A: x:y"], [("A", "x:y")]),
    ],
)
def test_header_lines(lines: list[bytes], headers: list[tuple[str, str]]) -> None:
    got: list[tuple[str, str]] = []
    for line in lines:
        http1.header_line(line, got)
    assert got == headers


@pytest.mark.parametrize("line", [b"no colon", b": empty name", b"A : space before colon", b" A: folded first"])
def test_a_bad_header_line(line: bytes) -> None:
    with pytest.raises(ReplyError, match="bad header line"):
        http1.header_line(line, [])


def test_the_headers_are_bounded() -> None:
    headers: list[tuple[str, str]] = []
    for i in range(http1.MAX_HEADERS):
        http1.header_line(b"X-%d: v" % i, headers)
    with pytest.raises(ReplyError, match="more than 100 headers"):
        http1.header_line(b"X-Last: v", headers)


def test_a_whole_head() -> None:
    assert http1.head(b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2") == (1, 200, "OK", [("A", "1"), ("B", "2")])
    assert http1.head(b"HTTP/1.0 204 No Content") == (0, 204, "No Content", [])


@pytest.mark.parametrize(
    ("status", "minor", "headers", "method", "framing"),
    [
        pytest.param(200, 1, [CL], "POST", Framing(5, False, True), id="length"),
        pytest.param(200, 1, [("content-length", "0")], "POST", Framing(0, False, True), id="length-zero"),
        pytest.param(200, 1, [CHUNKED], "POST", Framing(None, True, True), id="chunked"),
        pytest.param(200, 1, [CHUNKED, CL], "POST", Framing(None, True, True), id="chunked-wins-over-length"),
        pytest.param(200, 1, [("Transfer-Encoding", "gzip, Chunked ")], "GET", Framing(None, True, True), id="last"),
        pytest.param(200, 1, [("Transfer-Encoding", "chunked, gzip")], "GET", Framing(None, False, False), id="nl"),
        pytest.param(200, 1, [], "GET", Framing(None, False, False), id="until-close"),
        pytest.param(200, 1, [CL, CLOSE], "POST", Framing(5, False, False), id="connection-close"),
        pytest.param(200, 1, [CL, ("Connection", "keep-alive, Close")], "POST", Framing(5, False, False), id="lst"),
        pytest.param(200, 0, [CL], "POST", Framing(5, False, False), id="http-1.0-not-kept"),
        pytest.param(200, 1, [CL, CL], "POST", Framing(5, False, True), id="same-length-twice"),
        pytest.param(200, 1, [CL], "HEAD", Framing(0, False, True), id="head-has-no-body"),
        pytest.param(200, 1, [], "HEAD", Framing(0, False, True), id="head-kept-without-length"),
        pytest.param(204, 1, [], "POST", Framing(0, False, True), id="204"),
        pytest.param(304, 1, [CHUNKED], "GET", Framing(0, False, True), id="304-ignores-chunked"),
        pytest.param(101, 1, [], "GET", Framing(0, False, True), id="1xx"),
        pytest.param(204, 0, [], "POST", Framing(0, False, False), id="204-on-1.0"),
    ],
)
def test_framing(status: int, minor: int, headers: list[tuple[str, str]], method: str, framing: Framing) -> None:
    assert http1.framing(status, minor, headers, method) == framing


@pytest.mark.parametrize("value", ["+5", "-1", "5 5", "five", "", "0x5", "5, 5", "\u00b2", "1\u00b9"])
def test_a_content_length_two_readers_could_read_differently(value: str) -> None:
    with pytest.raises(ReplyError, match="bad Content-Length"):
        http1.framing(200, 1, [("Content-Length", value)], "POST")


def test_two_different_lengths_are_refused() -> None:
    with pytest.raises(ReplyError, match="bad Content-Length"):
        http1.framing(200, 1, [CL, ("Content-Length", "6")], "POST")


@pytest.mark.parametrize(
    ("line", "size"),
    [(b"0", 0), (b"1a", 26), (b"FF", 255), (b"10;name=value", 16), (b" 4 ", 4), (b"4 ; ext", 4)],
)
def test_a_chunk_size(line: bytes, size: int) -> None:
    assert http1.chunk_size(line) == size


@pytest.mark.parametrize("line", [b"", b"x", b"-1", b"0x10", b";ext", b"1 2", b"+4"])
def test_a_bad_chunk_size(line: bytes) -> None:
    with pytest.raises(ReplyError, match="bad chunk size"):
        http1.chunk_size(line)
