"""serve/cluster/reply_heads.py reads a head of a remembered shape as core/http1.py reads it in full: over a table
of heads remembered and heads read after them (other lengths, other spellings, other statuses and methods), what
the memo answers is what http1.head and http1.framing answer, or nothing."""

from __future__ import annotations

import itertools

import pytest

from mcpgate.core import http1
from mcpgate.serve.cluster.reply_heads import ReplyHeads, shape_of

pytestmark = pytest.mark.fast

HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %s\r\nMcpgate-Forwarded: body\r\n"
    b"Date: Thu, 03 Dec 2026 09:32:31 GMT",
    b"HTTP/1.1 202 Accepted\r\nContent-Length: %s",
    b"HTTP/1.1 204 No Content\r\nContent-Length: %s\r\nMcpgate-Forwarded: body",
    b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\nConnection: close",
    b"HTTP/1.0 200 OK\r\nContent-Length: %s",
    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %s\r\nSet-Cookie: a=1\r\n"
    b"Set-Cookie: b=2",
    b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\nTransfer-Encoding: chunked",
    b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\ncontent-length: %s",
    b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\nX-Note: a\r\n  folded",
    b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\n Content-Length: 5",
    b"HTTP/1.1 200 OK\r\nX: Content-Length: 1\r\nContent-Length: %s",
    b"HTTP/1.1 200 OK\r\ncontent-length: %s",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream",
]
DIGITS = [b"95", b"0", b"7", b"123456", b"007", b"1" * 18, b"1" * 19, b"", b" 5", b"5 ", b"+5", b"\xb2", b"5,5"]
METHODS = ["POST", "GET", "HEAD", "DELETE"]


def fill(head: bytes, digits: bytes) -> bytes:
    return head.replace(b"%s", digits)


def full(block: bytes, method: str) -> object:
    """http1's reading of a head: (minor, status, headers, framing), or the error's type."""
    try:
        minor, status, _, headers = http1.head(block)
        return minor, status, headers, http1.framing(status, minor, headers, method)
    except ValueError as exc:
        return type(exc)


def test_a_remembered_shape_reads_as_http1_reads_each_head_of_it() -> None:
    hits = 0
    for head, method in itertools.product(HEADS, METHODS):
        heads = ReplyHeads()
        for first in DIGITS:
            block = fill(head, first)
            answer = full(block, method)
            if not isinstance(answer, tuple) or answer[1] < 200:
                continue
            minor, status, headers, framing = answer
            heads.remember(block, method, minor, status, headers, framing)
            for later in DIGITS:
                other = fill(head, later)
                found = heads.read(other, method)
                if found is not None:
                    hits += 1
                    assert found[:4] == full(other, method), (other, method, block)
                    assert found[4] == shape_of(other)[0]
                for other_method in METHODS:  # remembered per method
                    found = heads.read(other, other_method)
                    if found is not None:
                        assert found[:4] == full(other, other_method)
    assert hits > 500  # the usual heads, each with every length of plain digits


def test_the_usual_reply_is_remembered_and_read_with_its_own_length() -> None:
    heads = ReplyHeads()
    first, later = fill(HEADS[0], b"95"), fill(HEADS[0], b"4096")
    minor, status, headers, framing = full(first, "POST")  # type: ignore[misc]
    assert heads.remember(first, "POST", minor, status, headers, framing) == shape_of(first)[0]
    found = heads.read(later, "POST")
    assert found is not None
    assert found[3] == http1.Framing(4096, False, True)
    assert ("Content-Length", "4096") in found[2] and found[:4] == full(later, "POST")
    assert heads.read(later, "HEAD") is None  # the shape is remembered per method
    assert headers == full(first, "POST")[2]  # type: ignore[index]  # what was given stays as it was


@pytest.mark.parametrize("index", [7, 8, 9, 11])
def test_heads_whose_reading_may_depend_on_more_than_the_digits_are_not_remembered(index: int) -> None:
    block = fill(HEADS[index], b"5")
    answer = full(block, "POST")
    if not isinstance(answer, tuple):
        return  # refused by http1: never remembered (head() reads it a line at a time)
    minor, status, headers, framing = answer
    assert ReplyHeads().remember(block, "POST", minor, status, headers, framing) is None
