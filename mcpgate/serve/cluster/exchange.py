"""The HTTP/1.1 exchange with an owner on a kept-alive connection, spoken here rather than by http.client's
request and response objects (the profile of a forwarding instance had them at a fifth of its CPU per call, the
reply's headers parsed by the email package): `message` is a request's line, headers and body, sent in one write;
the reply is read through one buffered reader the connection keeps, its head parsed as bytes by core/http1.py
(bounded: a line at most MAX_LINE bytes, at most http1.MAX_HEADERS lines), its body read whole or chunk by chunk
(bounded reads). Each connection draws the channel of the nonces its requests' values carry when it connects.
The Forwarder (serve/cluster/forward.py) keeps these connections, per owner, and decides what a failure means.

A connection made with a `pause` has no timer per read (gevent starts and stops one for every wait of a socket
with a timeout: ~5 % of a forwarding instance's Python per call): each read and send records when its wait must
end, and a Watch (one per Forwarder, twice a second) ends the waits that overran by shutting the socket down; the
wait then fails with TimeoutError, as the socket's own timeout failed it. Connecting keeps the socket's timeout.
"""

from __future__ import annotations

import http.client
import io
import re
import secrets
import socket
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gevent

from mcpgate.core import http1
from mcpgate.serve.cluster.reply_heads import ReplyHeads

READ_CHUNK = 64 * 1024  # most bytes read from an owner's reply at once
MAX_LINE = 65536  # longest line of a reply's head (http.client's own bound)
READ_BUFFER = 16 * 1024  # a connection's buffered reader
CHANNEL_BYTES = 16  # a connection's channel: 22 base64url characters
BAD_NAME = re.compile(r"[ :\r\n\t]")  # what would break a header line's framing in its name
SWEEP_INTERVAL = 0.5  # seconds between two looks at the waits of a Watch's connections (how late one ends)


@dataclass
class Reply:
    """An owner's reply: its status, headers (as sent, repeated ones repeated) and how its body is framed."""

    status: int
    headers: list[tuple[str, str]]
    length: int | None  # Content-Length; None: chunked or until the connection closes
    chunked: bool
    will_close: bool  # the connection cannot carry another request
    shape: bytes | None = None  # its head's shape when remembered (reply_heads.py): the same headers relay alike


class OwnerConnection(http.client.HTTPConnection):
    """A kept-alive connection to an owner (http.client's connect, timeouts and socket) that speaks the exchange
    itself: `send` writes a request in one go, `head` reads a reply's head, `body`/`chunks` its body. `pause`:
    the seconds each of its waits may take once connected (0: the socket's timeout, `timeout`, applies)."""

    reader: io.BufferedReader | None = None
    channel = ""  # the nonces of the values sent on this connection: "<channel>~<count>", count 0, 1, 2, ...
    count = 0
    body_form = False  # the owner said it reads a POST's value in its body (forward.py): never on a new connection
    pause = 0.0
    until: float | None = None  # while it waits on the owner (pause set): when the wait must have ended
    timed_out = False  # a wait overran: the Watch shut the socket down
    heads: ReplyHeads | None = None  # reply heads remembered by shape (the Forwarder's; None: each read in full)

    def connect(self) -> None:
        super().connect()
        self.reader = None
        self.channel, self.count = secrets.token_urlsafe(CHANNEL_BYTES), 0
        self.body_form = self.timed_out = False
        if self.pause:
            self.sock.settimeout(None)  # its waits end by the Watch: no timer per read

    def next_nonce(self) -> str:
        """The nonce of the next request's value: the first on a connection is checked in the owner's Redis, the
        others against the connection's own count (serve/cluster/nonces.py, Channels)."""
        if self.sock is None:
            self.connect()
        nonce = f"{self.channel}~{self.count}"
        self.count += 1
        return nonce

    def send_request(self, message: bytes) -> None:
        if self.sock is None:
            self.connect()
        if self.reader is None:
            self.reader = io.BufferedReader(WatchedReads(self), READ_BUFFER)
        if self.pause:
            self.until = time.monotonic() + self.pause
        try:
            sent = self.sock.send(message)  # one system call when the socket takes it all (gevent's sendall asks
            if sent < len(message):  # the socket's buffer size first, each time): sendall only for what is left
                self.sock.sendall(memoryview(message)[sent:])
        except OSError:
            if self.timed_out:
                raise TimeoutError("timed out") from None
            raise
        finally:
            self.until = None

    def expire(self) -> None:
        """End the wait that overran (the Watch's): the socket shut down, the wait fails with TimeoutError."""
        self.timed_out = True
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()
        super().close()

    def line(self) -> bytes:
        assert self.reader is not None
        line = self.reader.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("a line of the owner's reply")
        return line

    def head(self, method: str) -> Reply:
        """The reply's status and headers (1xx interim replies skipped); RemoteDisconnected on a closed connection."""
        assert self.reader is not None
        while True:
            block: bytes | None = self.whole_head()
            if block is not None:
                known = self.heads.framed(block, method) if self.heads is not None else None
                if known is not None:  # a remembered shape: read as http1 reads it (reply_heads.py)
                    self.reader.read(len(block) + 4)
                    status, headers, length, chunked, keep, shape = known
                    return Reply(status, headers, length, chunked, not keep, shape)
                try:
                    minor, status, _, headers = http1.head(block)
                except http1.ReplyError:  # read a line at a time, which says why
                    block = None
                else:
                    self.reader.read(len(block) + 4)
                    if not 100 <= status < 200:
                        break
                    continue
            status_line = self.line()
            if not status_line:
                raise http.client.RemoteDisconnected("the owner closed the connection without a reply")
            try:
                minor, status, _ = http1.status_line(status_line)
            except http1.ReplyError:
                raise http.client.BadStatusLine(status_line.decode("latin-1").rstrip()) from None
            headers = self.header_lines()
            if not 100 <= status < 200:
                break
        try:
            framing = http1.framing(status, minor, headers, method)
        except http1.ReplyError as exc:
            raise http.client.HTTPException(f"the owner's reply: {exc}") from None
        remembered = None
        if block is not None and self.heads is not None:
            remembered = self.heads.remember(block, method, minor, status, headers, framing)
        return Reply(status, headers, framing.length, framing.chunked, not framing.keep, remembered)

    def whole_head(self) -> bytes | None:
        """The bytes of a head that is whole in the reader's buffer (after one read when it is empty), without the
        empty line that ends it, not consumed; None for any other (its lines are then read one at a time: a head
        in pieces or longer than MAX_LINE, one with a bare LF)."""
        assert self.reader is not None
        buffered = self.reader.peek(1)
        end = buffered.find(b"\r\n\r\n")
        if end < 0 or end > MAX_LINE:  # a head no longer than a line's bound: none of its lines is past it
            return None
        block = buffered[:end]
        if block.count(b"\n") != block.count(b"\r\n"):
            return None
        return block

    def header_lines(self) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = []
        while True:
            line = self.line()
            if line in (b"\r\n", b"\n", b""):
                return headers
            try:
                http1.header_line(line.rstrip(b"\r\n"), headers)
            except http1.ReplyError as exc:
                raise http.client.HTTPException(f"the owner's reply: {exc}") from None

    def body(self, length: int) -> bytes:
        """A body of `length` bytes, whole (IncompleteRead when the connection ends first)."""
        assert self.reader is not None
        data = self.reader.read(length)
        if len(data) < length:
            raise http.client.IncompleteRead(data, length - len(data))
        return data

    def chunks(self, reply: Reply) -> Iterator[bytes]:
        """The body as it comes: each chunk of a chunked one (bounded reads), else reads until the end."""
        assert self.reader is not None
        if not reply.chunked:
            while chunk := self.reader.read1(READ_CHUNK):
                yield chunk
            return
        while True:
            try:
                size = http1.chunk_size(self.line())
            except http1.ReplyError:
                raise http.client.IncompleteRead(b"") from None
            if size == 0:
                self.header_lines()  # the trailers, if any
                return
            while size:
                data = self.body(min(size, READ_CHUNK))
                size -= len(data)
                yield data
            if self.line() not in (b"\r\n", b"\n"):
                raise http.client.IncompleteRead(b"")


class WatchedReads(io.RawIOBase):
    """A connection's socket as its buffered reader reads it: each read's wait, with a `pause`, ends by the Watch
    (TimeoutError, as a socket's timeout); without one, by the socket's timeout."""

    def __init__(self, conn: OwnerConnection) -> None:
        super().__init__()
        self.conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        conn = self.conn
        if conn.timed_out:
            raise TimeoutError("timed out")
        if conn.pause:
            conn.until = time.monotonic() + conn.pause
        try:
            count: int = conn.sock.recv_into(buffer)
        except OSError:
            if conn.timed_out:
                raise TimeoutError("timed out") from None
            raise
        finally:
            conn.until = None
        if conn.timed_out:
            raise TimeoutError("timed out")
        return count


class Watch:
    """The waits of a Forwarder's connections: one greenlet (started with the first connection watched, in the
    worker) looks twice a second and ends those past their end."""

    def __init__(self) -> None:
        self._watched: weakref.WeakSet[OwnerConnection] = weakref.WeakSet()
        self._sweeper: gevent.Greenlet[Any, Any] | None = None

    def add(self, conn: OwnerConnection) -> None:
        self._watched.add(conn)
        if self._sweeper is None:
            self._sweeper = gevent.spawn(self._sweep)

    def sweep(self, now: float) -> int:
        """End the waits past their end at `now`; how many."""
        ended = 0
        for conn in list(self._watched):
            until = conn.until
            if until is not None and until <= now and not conn.timed_out:
                conn.expire()
                ended += 1
        return ended

    def _sweep(self) -> None:
        while True:
            gevent.sleep(SWEEP_INTERVAL)
            self.sweep(time.monotonic())

    def stop(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.kill(block=False)


def message(method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """The request as it goes on the wire: its line, its headers, its body (a header that would break the
    framing, a line break in a name or value, is refused as http.client refuses it)."""
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers:
        if "\r" in value or "\n" in value or not name or BAD_NAME.search(name):
            raise ValueError(f"a header that cannot be forwarded: {name!r}")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + body
