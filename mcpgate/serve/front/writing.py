"""A client connection's write side in the gateway's worker (mcpgate.serve.front.worker): pywsgi's, with less
work per reply. What goes on the wire is pywsgi's to the byte, in fewer system calls:

- a reply's head and its first piece of body leave in one send (pywsgi sends them apart, the second send
  waking the client again), when that piece is at most JOINED bytes (a larger one is not copied);
- a send is one `send` when the socket takes it all; gevent's sendall asks the socket's buffer size first
  (a getsockopt per send) and is used only for what is left;
- the Date header is formatted once a second, not once a reply;
- with no access log configured, nothing is gathered for one (gunicorn would gather it and drop it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gevent.pywsgi import format_date_time

JOINED = 64 * 1024  # bytes of body sent in one piece with the head (more: sent after it, not copied)


class HttpDate:
    """The HTTP Date of the current second, formatted once a second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._value, self._second = format_date_time(second), second
        return self._value


DATE = HttpDate()


class LeanWrites:
    """The write side of pywsgi's WSGIHandler with fewer system calls (the module's docstring). Mixed in before
    it: the attributes below are pywsgi's."""

    socket: Any
    status: Any
    code: int
    response_length: int
    response_headers: list[tuple[bytes, bytes]]
    response_use_chunked: bool
    headers_sent: bool
    provided_date: Any
    provided_content_length: Any
    connection_upgraded: bool
    request_version: str
    command: str
    result: Any

    def _sendall(self, data: Any) -> None:
        sock = self.socket
        try:
            sent = sock.send(data)  # gevent's: waits while the socket is full
            if sent < len(data):
                sock.sendall(memoryview(data)[sent:])
        except OSError as ex:  # as pywsgi's _sendall
            self.status = f"socket error: {ex}"
            if self.code > 0:
                self.code = -self.code
            raise
        self.response_length += len(data)

    def finalize_headers(self) -> None:
        """pywsgi's, with the Date of this second formatted once; a HEAD reply is never chunked (no body)."""
        if self.provided_date is None:
            self.response_headers.append((b"Date", DATE.now()))
        self.connection_upgraded = self.code == 101
        if self.code not in (304, 204) and self.provided_content_length is None:
            if hasattr(self.result, "__len__"):
                total = sum(len(chunk) for chunk in self.result)
                self.response_headers.append((b"Content-Length", str(total).encode("latin-1")))
            else:
                self.response_use_chunked = not self.connection_upgraded and self.request_version != "HTTP/1.0"
                if self.response_use_chunked:
                    self.response_headers.append((b"Transfer-Encoding", b"chunked"))
        if self.command == "HEAD":
            self.response_use_chunked = False  # no body, so no last chunk either

    def _write_with_headers(self, data: bytes) -> None:
        """The head, with `data` (the body's first piece) in the same send when it is small."""
        self.headers_sent = True
        self.finalize_headers()
        head = bytearray(b"HTTP/1.1 ")
        head += self.status
        head += b"\r\n"
        for header, value in self.response_headers:
            head += header
            head += b": "
            head += value
            head += b"\r\n"
        head += b"\r\n"
        if not data or self.command == "HEAD" or len(data) > JOINED:
            self._sendall(head)
            self._write(data)
        elif self.response_use_chunked:
            head += b"%x\r\n" % len(data)
            head += data
            head += b"\r\n"
            self._sendall(head)
        else:
            head += data
            self._sendall(head)

    if TYPE_CHECKING:

        def _write(self, data: bytes) -> None: ...  # pywsgi's (the worker's Handler skips a HEAD reply's body)
