"""HTTP/1.1 over plain TCP for the relay's hot path: kept-alive sockets, one send per request, a small reader.

A relayed call's POST through urllib3 and http.client cost more CPU than the rest of the call: per request a
connection object's state machine, a header block parsed by the email package, a response object built for
every feature urllib3 has. For a plain-HTTP route without a proxy or client certificate (http_routes.py decides)
the relay speaks HTTP/1.1 itself: the request line, headers and body are written with one send; the reply's
headers are split by hand; the body is read by Content-Length, chunked framing or to the end of the connection,
and decoded when the server compressed it anyway. What the transports read of a reply is what they read of
urllib3's (`FastReply` has the same few members: status, reason, headers, read, read1, isclosed, release_conn,
close), and failures are raised as relay/errors.py's ReplyBroke, NoReply and ReplyTimedOut, which it maps as it
maps urllib3's, so both paths fail alike. Neither urllib3 nor requests is imported here: a relay whose routes are
all plain HTTP never loads them. HTTPS, proxies and client certificates stay on urllib3 (TLS and proxy tunnels
are not worth a second copy).
"""

from __future__ import annotations

import socket
import zlib
from typing import Protocol, overload

from gevent.monkey import get_original

from mcpgate.core import http1
from mcpgate.relay import errors

RECV_BYTES = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024  # the status line and headers together (http.client allows 100 lines of 64 KiB)
MAX_CHUNK_LINE = 4096
METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_LAST_CHUNK = b"0\r\n\r\n"  # a chunked body's last chunk (no extension) and an empty trailer section
_LAST_CHUNK_AFTER_DATA = b"\r\n" + _LAST_CHUNK  # the same after a chunk's data, whose CRLF is still due
MAX_HEADS = 32  # request heads kept per pool (a call's headers are the same on every call of a session)
Limits = tuple[float, float]  # (connect, read) timeouts in seconds
# The platform's select, not gevent's: asked with no timeout it never waits, and costs a system call, not a hub
# round of watchers.
_select = get_original("select", "select")


class Headers:
    """A reply's headers: case-insensitive `get`, `in` and `[]` (repeated ones joined by ', ' as urllib3 does),
    `get_all` for Set-Cookie (requests' cookie extraction reads `_original_response.msg`)."""

    __slots__ = ("_items", "_joined")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        joined: dict[str, str] = {}
        for name, value in items:
            key = name.lower()
            joined[key] = f"{joined[key]}, {value}" if key in joined else value
        self._joined = joined

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    def get(self, name: str, default: str | None = None) -> str | None:
        return self._joined.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._joined[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._joined

    def get_all(self, name: str, default: list[str] | None = None) -> list[str] | None:
        key = name.lower()
        found = [value for item, value in self._items if item.lower() == key]
        return found or default

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)


class Connection:
    """One kept-alive TCP connection and the bytes read from it but not consumed yet."""

    __slots__ = ("buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def dropped(self) -> bool:
        """Whether an idle connection was closed by the server (or sent something unasked): not reusable."""
        try:
            readable, _, _ = _select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable) or bool(self.buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Owner(Protocol):
    def give_back(self, conn: Connection) -> None: ...


class Pool:
    """Idle connections to one host and port (at most `size` kept); new ones made on demand, never waited for."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self.host_header = (f"[{host}]" if ":" in host else host) + ("" if port == 80 else f":{port}")
        self._idle: list[Connection] = []
        # the head of a request without its Content-Length, and whether one is to be added, by what makes it
        self._heads: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[bytes, bool]] = {}

    def serves(self, host: str, port: int | None) -> bool:
        return (host, port or 80) == (self.host, self.port)

    def exchange(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, timeout: Limits, url: str
    ) -> FastReply:
        """One request on an idle connection (or a new one); `timeout` is (connect, read) seconds."""
        head = self._head(method, target, headers, body)
        payload = head + body if body else head
        conn = self._connection(timeout, url)
        try:
            conn.sock.settimeout(timeout[1])
            sent = conn.sock.send(payload)  # a call's request fits the socket's buffer: one send, no sendall loop
            if sent < len(payload):
                conn.sock.sendall(memoryview(payload)[sent:])
            return read_reply(conn, self, method)
        except BaseException:
            conn.close()
            raise

    def _head(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        key = (method, target, tuple(headers.items()))
        made = self._heads.get(key)
        if made is None:
            if len(self._heads) >= MAX_HEADS:
                self._heads.clear()
            made = self._heads[key] = self._make_head(method, target, headers)
        head, sized = made
        if sized or not (body or method in METHODS_WITH_BODY):
            return head + b"\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % (len(body) if body else 0)

    def _make_head(self, method: str, target: str, headers: dict[str, str]) -> tuple[bytes, bool]:
        """The request line and header lines, each ending in CRLF; whether the headers give a Content-Length."""
        lines = [f"{method} {target} HTTP/1.1"]
        names = {name.lower() for name in headers}
        if "host" not in names:
            lines.append(f"Host: {self.host_header}")
        if "accept-encoding" not in names:
            lines.append("Accept-Encoding: identity")  # what http.client says when not told otherwise
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append("")
        return "\r\n".join(lines).encode("latin-1"), "content-length" in names

    def _connection(self, timeout: Limits, url: str) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.dropped():
                return conn
            conn.close()
        return Connection(self._connect(timeout, url))

    def _connect(self, timeout: Limits, url: str) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout[0])
        except socket.gaierror:
            raise errors.NotSent(f"cannot reach upstream {errors.redact(url)}: host name not found") from None
        except TimeoutError:
            raise errors.NotSent(f"cannot reach upstream {errors.redact(url)}: connection timed out") from None
        except OSError as exc:
            reason = errors.network_reason(exc)
            raise errors.NotSent(f"cannot reach upstream {errors.redact(url)}: {reason}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as urllib3 does
        return sock

    def give_back(self, conn: Connection) -> None:
        if len(self._idle) < self.size:
            self._idle.append(conn)
        else:
            conn.close()

    def clear(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def read_reply(conn: Connection, owner: Owner, method: str) -> FastReply:
    """Read a reply's status line and headers (1xx interim replies skipped); the body is left to FastReply."""
    while True:
        head = _read_head(conn)
        minor, status, reason, items = _parse_head(head)
        if not 100 <= status < 200 or status == 101:
            break
    try:
        framing = http1.framing(status, minor, items, method)
    except http1.ReplyError as exc:
        raise errors.ReplyBroke(str(exc)) from None
    return FastReply(conn, owner, status, reason, Headers(items), framing)


def _read_head(conn: Connection) -> bytes:
    first = not conn.buf
    while True:
        end = conn.buf.find(b"\r\n\r\n")
        if end >= 0:
            head, conn.buf = conn.buf[:end], conn.buf[end + 4 :]
            return head
        if len(conn.buf) > MAX_HEAD_BYTES:
            raise errors.ReplyBroke("the reply's headers are too long")
        data = _recv(conn)
        if not data:
            if first and not conn.buf:
                raise errors.NoReply("the server closed the connection without a reply")
            raise errors.ReplyBroke("the connection ended inside the reply's headers")
        conn.buf += data


def _recv(conn: Connection) -> bytes:
    try:
        return conn.sock.recv(RECV_BYTES)
    except TimeoutError:
        raise errors.ReplyTimedOut("Read timed out.") from None


def _parse_head(block: bytes) -> tuple[int, int, str, list[tuple[str, str]]]:
    try:
        return http1.head(block)
    except http1.ReplyError as exc:
        raise errors.ReplyBroke(str(exc)) from None


class FastReply:
    """A reply whose body is read as the caller asks: by Content-Length, chunked, or to the connection's end."""

    def __init__(
        self, conn: Connection, owner: Owner, status: int, reason: str, headers: Headers, framing: http1.Framing
    ) -> None:
        self.status, self.reason, self.headers = status, reason, headers
        self._conn: Connection | None = conn
        self._owner = owner
        self.msg = headers
        self._chunked = framing.chunked
        # body bytes left (length framing) or in the current chunk (chunked); None: until the connection ends
        self._left: int | None = framing.length
        self._crlf = False  # chunked: a chunk's closing CRLF is due before the next size line
        self._done = framing.length == 0
        self._keep = framing.keep
        encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
        self._decoder = _decoder(encoding)

    @property
    def _original_response(self) -> FastReply:
        """requests' cookie extraction reads .msg of it (a property: an attribute holding the reply itself made
        each reply a reference cycle)."""
        return self

    # -- what the transports read -------------------------------------------------------------------------

    def isclosed(self) -> bool:
        return self._done or self._conn is None

    @property
    def closed(self) -> bool:
        return self.isclosed()

    def read(self, amt: int | None = None, decode_content: bool = True) -> bytes:
        parts: list[bytes] = []
        size = 0
        while amt is None or size < amt:
            piece = self._piece(RECV_BYTES if amt is None else amt - size, decode_content)
            if piece is None:
                break
            parts.append(piece)
            size += len(piece)
        return b"".join(parts)

    def read1(self, amt: int = RECV_BYTES, decode_content: bool = True) -> bytes:
        while True:
            piece = self._piece(amt, decode_content)
            if piece is None:
                return b""
            if piece:
                return piece

    def release_conn(self) -> None:
        """Give the connection back for the next request when its reply was read to the end; else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep:
            self._owner.give_back(conn)
        else:
            conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def ended_now(self) -> bool:
        """Whether the body's end is here without waiting: read to its end already, or (chunked, between two
        chunks) nothing but the last chunk's closing bytes left, in hand or readable at once. Then the reply is
        done, and release_conn gives its connection back. False changes nothing a reader sees: bytes read now stay
        in the connection's buffer, in order."""
        if self._done:
            return True
        conn = self._conn
        if conn is None or not self._chunked or self._left:
            return False
        end = _LAST_CHUNK_AFTER_DATA if self._crlf else _LAST_CHUNK
        if len(conn.buf) < len(end):
            try:
                if not _select([conn.sock], [], [], 0)[0]:
                    return False  # reading more would wait
                conn.buf += conn.sock.recv(RECV_BYTES)  # readable: this returns at once
            except (OSError, ValueError):
                return False
        if conn.buf != end:
            return False
        conn.buf = b""
        self._done, self._crlf = True, False
        return True

    # -- the body -----------------------------------------------------------------------------------------

    def _piece(self, amt: int, decode: bool) -> bytes | None:
        """Some of the body (b"" when the bytes read were framing or held by the decoder), None at its end."""
        if self._done:
            return self._flush(decode)
        conn = self._conn
        if conn is None:
            return None
        if self._chunked and not self._left and not self._chunk_start(conn):
            return self._flush(decode)
        if not conn.buf:
            conn.buf = self._fill(conn)
            if not conn.buf:
                if self._left is not None:
                    raise errors.ReplyBroke("Response ended prematurely")
                self._done = True
                return self._flush(decode)
        take = min(amt, len(conn.buf)) if self._left is None else min(amt, len(conn.buf), self._left)
        data, conn.buf = conn.buf[:take], conn.buf[take:]
        if self._left is not None:
            self._left -= take
            if not self._left and not self._chunked:
                self._done = True
        if decode and self._decoder is not None:
            try:
                return self._decoder.decompress(data)
            except zlib.error as exc:
                raise errors.ReplyBroke(f"the reply's body did not decode: {exc}") from None
        return data

    def _flush(self, decode: bool) -> bytes | None:
        decoder, self._decoder = self._decoder, None
        tail = decoder.flush() if decode and decoder is not None else b""
        return tail or None

    def _chunk_start(self, conn: Connection) -> bool:
        """Read the next chunk's size line (after the last chunk: its trailers); False at the body's end."""
        if self._crlf:
            self._line(conn)
            self._crlf = False
        try:
            size = http1.chunk_size(self._line(conn))
        except http1.ReplyError as exc:
            raise errors.ReplyBroke(str(exc)) from None
        if size == 0:
            while self._line(conn):  # trailers, up to the empty line
                pass
            self._done = True
            return False
        self._left, self._crlf = size, True
        return True

    def _line(self, conn: Connection) -> bytes:
        while True:
            end = conn.buf.find(b"\r\n")
            if end >= 0:
                line, conn.buf = conn.buf[:end], conn.buf[end + 2 :]
                return line
            if len(conn.buf) > MAX_CHUNK_LINE:
                raise errors.ReplyBroke("a chunk's size line is too long")
            data = self._fill(conn)
            if not data:
                raise errors.ReplyBroke("Response ended prematurely")
            conn.buf += data

    def _fill(self, conn: Connection) -> bytes:
        try:
            return conn.sock.recv(RECV_BYTES)
        except TimeoutError:
            raise errors.ReplyTimedOut("Read timed out.") from None


def _decoder(encoding: str) -> zlib._Decompress | None:
    if encoding in ("identity", ""):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise errors.ReplyBroke(f"the reply's Content-Encoding {encoding!r} is not one the relay decodes")
