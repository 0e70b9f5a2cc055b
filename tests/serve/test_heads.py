"""The worker's request heads (serve/front/heads.py): a head read whole from its bytes is the head the line-by-line
reading makes, over the request-header corpus and the request-line corpus (tests/serve/test_request_headers.py);
one that way refuses is refused this way too (the connection then reads it a line at a time, which says why); the
memo keeps only heads that passed, within its bounds."""

from __future__ import annotations

import io
import itertools

import pytest
from gevent.pywsgi import MAX_REQUEST_LINE

from mcpgate.serve.front import heads
from mcpgate.serve.front.heads import Head, Heads, checked
from mcpgate.serve.front.request_headers import RequestHeaders, parse_request_line
from tests.serve.test_request_headers import BAD, BAD_LINES, GOOD, GOOD_LINES, STRICTER

HOSTS = (b"", b"Host: 127.0.0.1:8000\r\n", b"Host: a b\r\n")
BLOCKS = {**{f"good {k}": v for k, v in GOOD.items()}, **{f"bad {k}": v for k, (v, _) in BAD.items()}}
BLOCKS.update({f"stricter {k}": v for k, (v, _) in STRICTER.items()})
BLOCKS["HEAD with a body"] = b"Content-Length: 3\r\n\r\n"
BLOCKS["close"] = b"Connection: close\r\n\r\n"
BLOCKS["keep-alive"] = b"Connection: keep-alive\r\n\r\n"
BLOCKS["continue"] = b"Expect: 100-continue\r\nContent-Length: 3\r\n\r\n"
BLOCKS["chunked"] = b"Transfer-Encoding: chunked\r\n\r\n"
LINES = [*GOOD_LINES, *BAD_LINES, "HEAD /mcp HTTP/1.1\r\n", "GET /a%20b?c=d HTTP/1.0\r\n"]


def line_by_line(raw: bytes) -> Head | None:
    """The head as the connection reads it a line at a time (a plain stream), None when it is refused."""
    fp = io.BytesIO(raw)
    text = fp.readline(MAX_REQUEST_LINE).decode("latin-1")
    try:
        return checked(text, parse_request_line(text), RequestHeaders.read(fp))
    except ValueError:
        return None


def parts(head: Head) -> tuple[object, ...]:
    return (
        head.requestline,
        tuple(head.line),
        head.path,
        head.headers.fields,
        head.length,
        head.close,
        head.chunked,
        head.expect,
        head.items,
    )


def heads_of(block: bytes) -> list[bytes]:
    """`block` after each request line of the corpus, with no Host, a valid one and an invalid one."""
    return [line.encode("latin-1") + host + block for line, host in itertools.product(LINES, HOSTS)]


@pytest.mark.parametrize("block", BLOCKS.values(), ids=BLOCKS.keys())
def test_a_whole_head_reads_as_the_line_by_line_reading_reads_it(block: bytes) -> None:
    for raw in heads_of(block):
        whole, lines = heads.parse(raw), line_by_line(raw)
        assert (whole is None) == (lines is None), raw
        if whole is not None and lines is not None:
            assert parts(whole) == parts(lines), raw


def test_the_corpus_has_both_kinds() -> None:
    read = [heads.parse(raw) for block in BLOCKS.values() for raw in heads_of(block)]
    assert sum(head is None for head in read) > 100 and sum(head is not None for head in read) > 100


def test_what_a_head_says() -> None:
    head = heads.parse(b"POST http://127.0.0.1:8000/mcp?x=1 HTTP/1.0\r\nHost: evil\r\nContent-Length: 3\r\n\r\n")
    assert head is not None and head.path == "/mcp?x=1" and head.headers.get("host") == "127.0.0.1:8000"
    assert head.close and head.length == 3 and not head.chunked and not head.expect
    assert head.items["RAW_URI"] == "/mcp?x=1" and head.items["QUERY_STRING"] == "x=1"
    head = heads.parse(b"POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
    assert head is not None and not head.close and head.length is None and head.chunked and head.expect
    assert heads.parse(b"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n") is not None


def test_bytes_past_the_head_are_not_one() -> None:
    assert heads.parse(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET") is None
    assert heads.parse(b"GET / HTTP/1.1\r\nHost: a\r\n") is None


def test_the_memo_keeps_heads_that_passed_within_its_bounds() -> None:
    memo = Heads(most=4, longest=64)
    raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    first = memo.get(raw)
    assert first is not None and memo.get(raw) is first
    read = line_by_line(raw)
    assert first.kept and read is not None and not read.kept  # only a head the memo holds keeps its environ keys
    refused = b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"
    assert memo.get(refused) is None and refused not in memo.known
    long = b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + b"a" * 64 + b"\r\n\r\n"
    assert memo.get(long) is None and long not in memo.known
    for number in range(6):
        assert memo.get(b"GET /%d HTTP/1.1\r\nHost: a\r\n\r\n" % number) is not None
    assert len(memo.known) == 4 and raw not in memo.known  # the oldest went first
