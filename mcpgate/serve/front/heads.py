"""A request's head as the gateway's worker reads it (mcpgate.serve.front.connection): the request line and header
block checked (request_headers.py), turned into what the connection and the WSGI environ need, and remembered by
its bytes.

`checked` is the one place a parsed request line and header block become a Head: Content-Length read, HEAD with a
body refused, keep-alive decided (HTTP/1.1 unless "Connection: close", HTTP/1.0 only with "keep-alive"), the
absolute-form target's authority made the Host, and the environ's request keys made (environ.py), once.

`Heads` remembers the heads that passed, by their bytes: a client sends the same head call after call (the same
session, the same length of body), and the same bytes read as the same head, so a remembered head costs a lookup.
A head is looked up only when its bytes are whole in the connection's buffer and start with a request line; one
not remembered is parsed from those bytes and remembered when it passes. Anything else (a head not whole in the
buffer, one that is refused, one past the memo's bounds) goes the connection's line-by-line way, which says why a
refused one is refused.

Sessions: each 2025 session sends its own Mcp-Session-Id, so with more sessions calling in turn than the memo
holds, every head would be new (bench/heads_ab.py). A head is therefore also remembered by its bytes with the value
of its Mcp-Session-Id field (spelt so, or all in lower case) taken out, its shape: a head not known by all its bytes
whose shape is known is made from that shape's head (a few dict copies, not a reading), then known by its bytes
too. The value a request brings is checked as the full reading checks a field value (HTAB, SP, visible ASCII and
obs-text only; the line's length is bounded by the memo's BYTES, under the reading's MAX_FIELD) and, stripped as
the reading strips it, takes the remembered value's place in the fields and the environ: the head is the one the
full reading gives (nothing else of the head reads the value). A value the check refuses goes the line-by-line
way. A head whose fields hold that name more than once, or spell it otherwise, is remembered by all its bytes only.

Bounded: at most MOST heads by their bytes and MOST by their shapes, each at most BYTES (so at most 2 * MOST *
BYTES bytes of keys), in each table the first remembered forgotten first (a hit does not renew a head: no work on
the hit path, and a flood of new heads costs what it did); a Head is shared by every request that sent its bytes,
so it is never changed once made (but for its `environ`, the server's environ keys merged with its own, made once
by the first connection that answers it).
"""

from __future__ import annotations

import io
import re
from typing import Any

from gevent.pywsgi import MAX_REQUEST_LINE, _InvalidClientRequest

from mcpgate.serve.front import environ as request_environ
from mcpgate.serve.front.request_headers import RequestHeaders, RequestLine, parse_request_line, resolve_target

MOST = 128  # heads remembered (the first remembered forgotten past it)
BYTES = 4096  # the longest head remembered (less than request_headers.MAX_FIELD: any line of it within the limit)
SESSION = b"\r\nMcp-Session-Id:"  # the field whose value a remembered head leaves out (the Python SDK's spelling,
SESSION_LOWER = SESSION.lower()  # and a lower-case one's: Node's fetch and the TypeScript SDK send names so)
SESSION_KEY = "HTTP_MCP_SESSION_ID"
_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")  # a field value as RequestHeaders takes it (RFC 9110 5.5)


class Head:
    """A checked request head: what the connection reads of it, and the environ's keys it makes."""

    __slots__ = (
        "chunked",
        "close",
        "environ",
        "expect",
        "headers",
        "items",
        "kept",
        "length",
        "line",
        "path",
        "requestline",
        "session",
    )

    def __init__(self, requestline: str, line: RequestLine, path: str, headers: RequestHeaders) -> None:
        self.requestline = requestline  # as pywsgi keeps it: the line without its CRLF
        self.line = line
        self.path = path  # the target in origin-form
        self.headers = headers
        length = headers.get("content-length")
        self.length: int | None = None if length is None else int(length)
        connection = headers.get("connection", "").lower()
        self.close = connection == "close" if line.version == "HTTP/1.1" else connection != "keep-alive"
        self.items: dict[str, Any] = request_environ.request_items(line.method, path, line.version, headers)
        self.chunked = "HTTP_TRANSFER_ENCODING" in self.items  # RequestHeaders admits only "chunked"
        self.expect = self.items.get("HTTP_EXPECT") == "100-continue"  # as pywsgi's Input
        self.kept = False  # held by a server's Heads: its environ keys are worth keeping with it
        # the server's environ keys and `items`, made by the connection that first answers it once `kept` (every
        # request's environ is a copy, with its connection's keys)
        self.environ: dict[str, Any] | None = None
        self.session = -1  # kept without its Mcp-Session-Id value: that field's place in `headers.fields`

    def given(self, value: str) -> Head:
        """This head with `value` (stripped as RequestHeaders strips it) as its Mcp-Session-Id field's value: the
        head the full reading gives of the same bytes with that value (the module's docstring)."""
        fields = self.headers.fields
        if fields[self.session][1] == value:
            return self
        made = Head.__new__(Head)
        made.requestline, made.line, made.path, made.length = self.requestline, self.line, self.path, self.length
        made.close, made.chunked, made.expect, made.kept = self.close, self.chunked, self.expect, False
        made.session = -1
        made.headers = self.headers.given(self.session, value)
        made.items = {**self.items, SESSION_KEY: value.strip()}  # as environ.http_items strips a value
        made.environ = None if self.environ is None else {**self.environ, SESSION_KEY: made.items[SESSION_KEY]}
        return made


def checked(raw_requestline: str, line: RequestLine, headers: RequestHeaders) -> Head:
    """The Head of a request line parse_request_line read and a header block RequestHeaders read, or the refusal
    pywsgi answers with 400 (a BadRequest or pywsgi's own _InvalidClientRequest)."""
    if headers.status:
        raise _InvalidClientRequest(f"Invalid headers status: {headers.status!r}")
    length = headers.get("content-length")  # digits only (RequestHeaders refuses any other)
    if length is not None and line.method == "HEAD" and int(length):
        raise _InvalidClientRequest("Unexpected Content-Length")
    path, host = resolve_target(line, headers.get("host"))
    if host is not None and host != headers.get("host"):
        headers.replace("Host", host)
    return Head(raw_requestline.rstrip(), line, path, headers)


class Heads:
    """The heads that passed, by their bytes, and by their bytes without a session's value (the module's
    docstring)."""

    def __init__(self, most: int = MOST, longest: int = BYTES) -> None:
        self.most, self.longest = most, longest
        self.known: dict[bytes, Head] = {}  # by all their bytes
        self.shapes: dict[bytes, Head] = {}  # by their bytes without the Mcp-Session-Id value

    def get(self, raw: bytes) -> Head | None:
        """The Head of `raw`, a whole head (request line, fields, the empty line), or None: refused, or not one
        to read this way (the connection reads it a line at a time, which says why)."""
        known = self.known.get(raw)
        if known is not None:
            return known
        if len(raw) > self.longest:
            return None
        at = raw.find(SESSION)
        if at < 0:
            at = raw.find(SESSION_LOWER)
        shape = value = None
        if at >= 0:  # the shape leaves the value out (its line's CRLF is always there: a head ends with an empty line)
            start = at + len(SESSION)
            end = raw.find(b"\r\n", start)
            key, value = raw[:start] + raw[end:], raw[start:end]
            shape = self.shapes.get(key)
        if shape is not None and value is not None:
            if _VALUE.fullmatch(value) is None:  # refused by the full reading: it says why
                return None
            head = shape.given(value.decode("latin-1").strip(" \t"))
        else:
            made = parse(raw)
            if made is None:
                return None
            head = made
            if value is not None and once(head):
                remember(self.shapes, key, head, self.most)
        remember(self.known, raw, head, self.most)
        head.kept = True
        return head


def remember(table: dict[bytes, Head], key: bytes, head: Head, most: int) -> None:
    """`head` in `table` under `key`; past `most` heads, the first remembered is forgotten."""
    if len(table) >= most:
        del table[next(iter(table))]
    table[key] = head


def once(head: Head) -> bool:
    """Whether `head` holds one Mcp-Session-Id field (any spelling), then remembered as its place."""
    places = [n for n, (name, _) in enumerate(head.headers.fields) if name.lower() == "mcp-session-id"]
    if len(places) != 1:
        return False
    head.session = places[0]
    return True


def parse(raw: bytes) -> Head | None:
    """The Head of `raw` (a whole head: its request line, its fields, the empty line), None when it is refused."""
    end = raw.find(b"\r\n") + 2
    if end < 2 or end > MAX_REQUEST_LINE - 1:
        return None
    text = raw[:end].decode("latin-1")
    try:
        line = parse_request_line(text)
        block = io.BufferedReader(io.BytesIO(raw[end:]))
        headers = RequestHeaders.read(block)
        return checked(text, line, headers) if not block.read(1) else None
    except ValueError:  # BadRequest, _InvalidClientRequest, a Content-Length int() did not take
        return None
