"""The worker's request-header parser against the standard library's and gunicorn's, over one corpus.

GOOD blocks: RequestHeaders, http.client.parse_headers and gunicorn's Python parser (RequestParser over a
request line and the block) all accept them with the same fields in the same order. BAD blocks:
RequestHeaders and gunicorn both refuse them (the standard library accepts many of them, which is why the
worker does not use it as the reference). STRICTER blocks: gunicorn accepts them, RequestHeaders refuses
them on purpose, because gevent.pywsgi behind it frames no transfer coding but a lone "chunked".
"""

from __future__ import annotations

import http.client
import io

import pytest
from gunicorn.config import Config
from gunicorn.http.errors import NoMoreData, ParseException
from gunicorn.http.parser import RequestParser

from mcpgate.serve.front.auth import HostKind, host_kind, valid_host
from mcpgate.serve.front.request_headers import (
    MAX_DROPPED,
    MAX_FIELD,
    MAX_HEADERS,
    BadRequest,
    RequestHeaders,
    parse_request_line,
    resolve_target,
)

REQUEST_LINE = b"POST /mcp HTTP/1.1\r\n"
UNTRUSTED_PEER = ("192.0.2.7", 40000)  # not in forwarded_allow_ips: gunicorn applies no forwarding policy


def line_of(total: int) -> bytes:
    """A field line of exactly `total` bytes, CRLF included."""
    return b"X-Pad: " + b"a" * (total - len(b"X-Pad: \r\n")) + b"\r\n"


MCP_POST = (
    b"Host: 127.0.0.1:8000\r\nAccept: application/json, text/event-stream\r\n"
    b"Content-Type: application/json\r\nContent-Length: 96\r\n"
    b"Mcp-Session-Id: 0123456789abcdef\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
)

AT_LIMIT = "as many fields as the limit"
GOOD = {
    "no fields": b"\r\n",
    "one field": b"Host: a\r\n\r\n",
    "an MCP POST": MCP_POST,
    "repeats of a list field keep their order": b"Accept: a\r\nX-Twice: 1\r\nAccept: b\r\nx-twice: 2\r\n\r\n",
    "OWS around the value and obs-text": b"X-Name:   caf\xe9 \t\r\n\r\n",
    "no space after the colon": b"X-Tight:v\r\n\r\n",
    "empty value": b"X-Empty:\r\nX-Blank:   \r\n\r\n",
    "HTAB and SP inside the value": b"X-Tab: a\tb  c\r\n\r\n",
    "every token special in a name": b"X!#$%&'*+-.^`|~9: v\r\n\r\n",
    "colons in the value": b"X-Url: http://a:1/b\r\n\r\n",
    "chunked": b"Transfer-Encoding: chunked\r\n\r\n",
    "chunked in capitals": b"Transfer-Encoding: Chunked\r\n\r\n",
    "zero length": b"Content-Length: 0\r\n\r\n",
    "Expect 100-continue": b"Expect: 100-Continue\r\nContent-Length: 5\r\n\r\n",
    "a field line of the limit": line_of(MAX_FIELD) + b"\r\n",
    AT_LIMIT: b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS)) + b"\r\n",
    "a name with an underscore is dropped": b"X_Forwarded_For: 10.0.0.1\r\nHost: a\r\n\r\n",
}

BAD = {  # block: the refusal RequestHeaders gives
    "bare LF line ends": (b"Host: a\nAccept: b\n\n", "Line not ended by CRLF"),
    "a bare LF ends the block": (b"Host: a\r\n\n", "Line not ended by CRLF"),
    "obs-fold with spaces": (b"X-Long: a\r\n  b\r\n\r\n", "Obsolete line folding"),
    "obs-fold with a tab": (b"X-Long: a\r\n\tb\r\n\r\n", "Obsolete line folding"),
    "whitespace before the first line": (b" Host: a\r\n\r\n", "Invalid header name"),
    "no colon": (b"no colon here\r\n\r\n", "Invalid header line"),
    "empty name": (b": empty name\r\n\r\n", "Invalid header line"),
    "space in a name": (b"Bad Name: v\r\n\r\n", "Invalid header name"),
    "space before the colon": (b"Host : a\r\n\r\n", "Invalid header name"),
    "tab before the colon": (b"Host\t: a\r\n\r\n", "Invalid header name"),
    "a separator in a name": (b"X(y): v\r\n\r\n", "Invalid header name"),
    "a slash in a name": (b"X/Y: v\r\n\r\n", "Invalid header name"),
    "obs-text in a name": (b"X\xe9: v\r\n\r\n", "Invalid header name"),
    "NUL in a value": (b"X: a\x00b\r\n\r\n", "Invalid header value"),
    "CR in a value": (b"X: a\rb\r\n\r\n", "Invalid header value"),
    "CR before the CRLF": (b"X: a\r\r\n\r\n", "Invalid header value"),
    "a control character in a value": (b"X: a\x1fb\r\n\r\n", "Invalid header value"),
    "DEL in a value": (b"X: a\x7f\r\n\r\n", "Invalid header value"),
    "a field line over the limit": (line_of(MAX_FIELD + 1) + b"\r\n", "Line too long"),
    "a line without end": (b"X: " + b"a" * (2 * MAX_FIELD), "Line too long"),
    "one field too many": (b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n", "Too many headers"),
    "the connection ends inside the block": (b"Host: a\r\n", "Incomplete headers"),
    "the connection ends inside a line": (b"Host: a", "Incomplete headers"),
    "two Hosts": (b"Host: a\r\nhost: b\r\n\r\n", "Repeated host"),
    "two Content-Types": (b"Content-Type: a/b\r\nContent-Type: a/b\r\n\r\n", "Repeated Content-Type"),
    "two equal Content-Lengths": (b"Content-Length: 3\r\nContent-Length: 3\r\n\r\n", "Repeated Content-Length"),
    "two chunked": (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "Repeated Transfer-Encoding"),
    "Content-Length not a number": (b"Content-Length: abc\r\n\r\n", "Invalid Content-Length"),
    "Content-Length with a sign": (b"Content-Length: +12\r\n\r\n", "Invalid Content-Length"),
    "negative Content-Length": (b"Content-Length: -1\r\n\r\n", "Invalid Content-Length"),
    "Content-Length with an underscore": (b"Content-Length: 1_0\r\n\r\n", "Invalid Content-Length"),
    "Content-Length as a list": (b"Content-Length: 3, 3\r\n\r\n", "Invalid Content-Length"),
    "empty Content-Length": (b"Content-Length: \r\n\r\n", "Invalid Content-Length"),
    "Content-Length and chunked": (
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "Content-Length with Transfer-Encoding",
    ),
    "chunked and Content-Length": (
        b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        "Content-Length with Transfer-Encoding",
    ),
    "gzip alone": (b"Transfer-Encoding: gzip\r\n\r\n", "Unsupported Transfer-Encoding"),
    "identity": (b"Transfer-Encoding: identity\r\n\r\n", "Unsupported Transfer-Encoding"),
    "an unknown coding": (b"Transfer-Encoding: foo\r\n\r\n", "Unsupported Transfer-Encoding"),
    "chunked, then gzip": (b"Transfer-Encoding: chunked, gzip\r\n\r\n", "Unsupported Transfer-Encoding"),
    "an unknown expectation": (b"Expect: something\r\n\r\n", "Unsupported Expect"),
}

STDLIB_GOOD = {k: v for k, v in GOOD.items() if k != AT_LIMIT}  # http.client counts the empty line in its 100

STRICTER = {
    "gzip, then chunked": (b"Transfer-Encoding: gzip, chunked\r\n\r\n", "Unsupported Transfer-Encoding"),
    "gzip and chunked in two fields": (
        b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        "Repeated Transfer-Encoding",
    ),
}


def ours(block: bytes) -> RequestHeaders:
    """RequestHeaders' reading of `block` a line at a time (a plain stream) and as the worker reads it (buffered,
    the whole block at once when it is well-formed): the same fields, the same refusal, the same bytes consumed."""
    lines = io.BytesIO(block + b"next")
    read = RequestHeaders.read(lines)
    buffered = io.BufferedReader(io.BytesIO(block + b"next"))
    whole = RequestHeaders.read(buffered)
    assert (whole.fields, whole.status) == (read.fields, read.status)
    if not read.status:
        assert buffered.read() == lines.read()
    return read


def stdlib(block: bytes) -> list[tuple[str, str]]:
    """http.client's fields; RFC 9110 5.5 leaves the OWS after a value out of it, http.client keeps it."""
    return [(name, value.rstrip(" \t")) for name, value in http.client.parse_headers(io.BytesIO(block)).items()]


def gunicorn(block: bytes) -> list[tuple[str, str]]:
    """gunicorn's fields (names upper-cased) from its Python parser, or its refusal raised."""
    cfg = Config()
    cfg.set("http_parser", "python")
    request = next(RequestParser(cfg, iter([REQUEST_LINE + block]), UNTRUSTED_PEER))
    return list(request.headers)


@pytest.mark.parametrize("block", STDLIB_GOOD.values(), ids=STDLIB_GOOD.keys())
def test_good_blocks_read_as_the_standard_library_reads_them(block: bytes) -> None:
    headers = ours(block)
    assert headers.status == ""
    # names with "_" are dropped (as gunicorn does, and as gevent.pywsgi leaves them out of the environ)
    assert headers.fields == [(name, value) for name, value in stdlib(block) if "_" not in name]


@pytest.mark.parametrize("block", GOOD.values(), ids=GOOD.keys())
def test_good_blocks_read_as_gunicorn_reads_them(block: bytes) -> None:
    assert [(name.upper(), value) for name, value in ours(block).fields] == gunicorn(block)


@pytest.mark.parametrize("block,status", BAD.values(), ids=BAD.keys())
def test_bad_blocks_are_refused_by_both(block: bytes, status: str) -> None:
    headers = ours(block)
    assert (headers.status, headers.fields) == (status, [])
    with pytest.raises((ParseException, NoMoreData)):
        gunicorn(block)


@pytest.mark.parametrize("block,status", STRICTER.values(), ids=STRICTER.keys())
def test_codings_gevent_cannot_frame_are_refused_though_gunicorn_takes_them(block: bytes, status: str) -> None:
    assert ours(block).status == status
    assert gunicorn(block)


def test_the_block_is_read_up_to_its_empty_line_only() -> None:
    fp = io.BytesIO(b"Content-Length: 4\r\n\r\nbody")
    assert RequestHeaders.read(fp).get("content-length") == "4"
    assert fp.read() == b"body"


def test_dropped_fields_have_a_limit_too() -> None:
    many = b"X_Pad: " + b"a" * 8000 + b"\r\n"
    assert ours(many * (MAX_DROPPED // len(many)) + b"Host: a\r\n\r\n").fields == [("Host", "a")]
    assert ours(many * (MAX_DROPPED // len(many) + 1) + b"\r\n").status == "Too many headers"


def test_case_insensitive_lookup_returns_the_first() -> None:
    headers = ours(b"Host: a\r\nContent-Type: application/json\r\nX-Twice: 1\r\nx-twice: 2\r\n\r\n")
    assert headers.get("host") == "a" and headers.getheader("CONTENT-TYPE") == "application/json"
    assert headers.typeheader == "application/json"
    assert headers.get("x-twice") == "1" and headers.get("missing", "d") == "d"
    assert list(headers.headers) == [
        "Host: a\r\n",
        "Content-Type: application/json\r\n",
        "X-Twice: 1\r\n",
        "x-twice: 2\r\n",
    ]
    assert headers.items()[0] == ("Host", "a")


def test_delitem() -> None:
    headers = ours(b"Content-Length: 3\r\nX-Other: 1\r\n\r\n")
    del headers["content-length"]
    assert headers.get("content-length") is None and headers.get("x-other") == "1"
    with pytest.raises(KeyError):
        del headers["content-length"]


# -- the request line and the effective Host ---------------------------------------------------------------

GOOD_LINES = {
    "GET /mcp HTTP/1.1\r\n": ("GET", "/mcp", "HTTP/1.1"),
    "POST /messages?session_id=ab HTTP/1.0\r\n": ("POST", "/messages?session_id=ab", "HTTP/1.0"),
    "OPTIONS * HTTP/1.1\r\n": ("OPTIONS", "*", "HTTP/1.1"),
    "POST http://127.0.0.1:8000/mcp HTTP/1.1\r\n": ("POST", "http://127.0.0.1:8000/mcp", "HTTP/1.1"),
}
BAD_LINES = {
    "GET /mcp\r\n": "Invalid request line",
    "GET /mcp HTTP/1.1\n": "Request line not ended by CRLF",
    "GET  /mcp HTTP/1.1\r\n": "Invalid request line",
    "GET /mcp HTTP/2.0\r\n": "Unsupported HTTP version",
    "GET /mcp HTTP/1.1.1\r\n": "Unsupported HTTP version",
    "G{T /mcp HTTP/1.1\r\n": "Invalid method",
    "GET mcp HTTP/1.1\r\n": "Invalid request target",
    "GET /mcp#x HTTP/1.1\r\n": "Invalid request target",
    "GET * HTTP/1.1\r\n": "Invalid request target",
    "CONNECT a:443 HTTP/1.1\r\n": "Invalid request target",
    "GET ftp://a/ HTTP/1.1\r\n": "Invalid request target",
}


@pytest.mark.parametrize("text", GOOD_LINES)
def test_request_lines_in_each_target_form(text: str) -> None:
    assert tuple(parse_request_line(text)) == GOOD_LINES[text]


@pytest.mark.parametrize("text", BAD_LINES)
def test_request_lines_refused(text: str) -> None:
    with pytest.raises(BadRequest, match=BAD_LINES[text]):
        parse_request_line(text)


def test_the_effective_host() -> None:
    line = parse_request_line("POST /mcp HTTP/1.1\r\n")
    assert resolve_target(line, "127.0.0.1:8000") == ("/mcp", "127.0.0.1:8000")
    absolute = parse_request_line("POST HTTP://127.0.0.1:8000/mcp?x=1 HTTP/1.1\r\n")
    assert resolve_target(absolute, "evil.example") == ("/mcp?x=1", "127.0.0.1:8000")  # RFC 9112 3.2.2
    assert resolve_target(parse_request_line("GET http://a HTTP/1.1\r\n"), "a") == ("/", "a")
    assert resolve_target(parse_request_line("GET / HTTP/1.0\r\n"), None) == ("/", None)
    for line_text, host, why in (
        ("GET / HTTP/1.1\r\n", None, "Missing Host"),
        ("GET / HTTP/1.1\r\n", "127.0.0.1:8000,evil.example", "Invalid Host"),
        ("GET http://u@a/ HTTP/1.1\r\n", "a", "Invalid authority"),
        ("GET http:///x HTTP/1.1\r\n", "a", "Invalid authority"),
    ):
        with pytest.raises(BadRequest, match=why):
            resolve_target(parse_request_line(line_text), host)


@pytest.mark.parametrize(
    "host,valid",
    [
        ("127.0.0.1:8000", True),
        ("localhost", True),
        ("[::1]:8000", True),
        ("", True),
        ("my-app.example.com", True),
        ("127.0.0.1:8000,evil.example", False),
        ("evil.example,127.0.0.1", False),
        ("a b", False),
        ("a@b", False),
        ("a/b", False),
        ("[::1", False),
        ("[not:hex]", False),
        ("a:99999", False),
        ("a:1:2", False),
    ],
)
def test_host_syntax(host: str, valid: bool) -> None:
    assert valid_host(host) is valid
    assert (host_kind(host, ["*"]) is HostKind.INVALID) is not valid  # invalid syntax whatever is allowed
