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
refused one is refused. Bounded: at most MOST heads of at most BYTES each, the oldest forgotten first; a Head is
shared by every request that sent its bytes, so it is never changed once made (but for its `environ`, the
server's environ keys merged with its own, made once by the first connection that answers it).
"""

from __future__ import annotations

import io
from typing import Any

from gevent.pywsgi import MAX_REQUEST_LINE, _InvalidClientRequest

from mcpgate.serve.front import environ as request_environ
from mcpgate.serve.front.request_headers import RequestHeaders, RequestLine, parse_request_line, resolve_target

MOST = 128  # heads remembered (the oldest forgotten past it)
BYTES = 4096  # the longest head remembered


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
    """The heads that passed, by their bytes (the module's docstring)."""

    def __init__(self, most: int = MOST, longest: int = BYTES) -> None:
        self.most, self.longest = most, longest
        self.known: dict[bytes, Head] = {}

    def get(self, raw: bytes) -> Head | None:
        """The Head of `raw`, a whole head (request line, fields, the empty line), or None: refused, or not one
        to read this way (the connection reads it a line at a time, which says why)."""
        known = self.known.get(raw)
        if known is not None:
            return known
        if len(raw) > self.longest:
            return None
        head = parse(raw)
        if head is not None:
            if len(self.known) >= self.most:
                del self.known[next(iter(self.known))]
            self.known[raw] = head
            head.kept = True
        return head


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
