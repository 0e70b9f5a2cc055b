"""A client connection's write side in the gateway's worker (mcpgate.serve.front.worker): pywsgi's, with less
work per reply. What goes on the wire is pywsgi's to the byte, in fewer system calls and calls:

- a reply's head and its first piece of body leave in one send (pywsgi sends them apart, the second send
  waking the client again), when that piece is at most JOINED bytes (a larger one is not copied);
- a send is one `send` when the socket takes it all; gevent's sendall asks the socket's buffer size first
  (a getsockopt per send) and is used only for what is left;
- the Date header is formatted once a second, not once a reply;
- a reply the application gives whole (a list of at most one piece, as the endpoints' JSON answers) goes
  straight to the head's send; the application's headers are checked and encoded in one pass;
- with no access log configured, nothing is gathered for one (gunicorn would gather it and drop it);
- a chunk of a chunked reply (an SSE event) is framed in one step, and one of more than JOINED bytes is not copied
  at all: its size line, its bytes and its CRLF leave in three sends (pywsgi copies them into one buffer first).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from gevent.pywsgi import _InvalidClientInput, format_date_time

from mcpgate.serve.front.http import JSON_TYPE

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


_OTHER = ""  # a header name start_response notes nothing of
_NOTED = frozenset(("connection", "date", "content-length"))
_STATUSES: dict[str, tuple[bytes, int]] = {}  # a status line seen -> its bytes and code (at most _MOST)
_NAMES: dict[str, tuple[bytes, str]] = {}  # a header name seen -> its bytes and what start_response notes of it
_MOST = 256
_JSON_TYPE = (b"Content-Type", JSON_TYPE[1].encode("latin-1"))  # JSON_TYPE encoded


def _status(status: Any) -> tuple[bytes, int] | None:
    """A status line's bytes and code, remembered; None for one pywsgi refuses."""
    if type(status) is not str or "\r" in status or "\n" in status:
        return None
    try:
        known = status.encode("latin-1"), int(status.split(" ", 1)[0])
    except (UnicodeEncodeError, ValueError):
        return None
    if len(_STATUSES) < _MOST:
        _STATUSES[status] = known
    return known


def _name(name: Any) -> tuple[bytes, str] | None:
    """A header name's bytes and what start_response notes of it, remembered; None for one pywsgi refuses."""
    if type(name) is not str or "\r" in name or "\n" in name:
        return None
    try:
        encoded = name.encode("latin-1")
    except UnicodeEncodeError:
        return None
    lower = name.lower()
    named = encoded, (lower if lower in _NOTED else _OTHER)
    if len(_NAMES) < _MOST:
        _NAMES[name] = named
    return named


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
    close_connection: bool
    logged: bool  # gunicorn's access log is on
    time_start: float
    time_finish: float
    _orig_status: str
    ignored_socket_errors: tuple[int, ...]
    application: Any
    environ: Any
    wsgi_input: Any
    raw: Any  # gevent's plain socket's own (non-blocking) socket; None for any other (TLS: written through gevent's)

    def handle_one_response(self) -> None:
        """pywsgi's, the clock read only for an access log: the application's reply, then its body's end (an unread
        body closes the connection: reading.Body), errors answered as pywsgi answers them."""
        if self.logged:
            self.time_start = time.time()
        self.status = None
        self.headers_sent = self.response_use_chunked = self.connection_upgraded = False
        self.result = None
        self.response_length = 0
        try:
            try:
                self.run_application()
            finally:
                try:
                    self.wsgi_input._discard()
                except _InvalidClientInput:
                    raise
                except OSError:
                    pass
        except _InvalidClientInput as ex:
            self._handle_client_error(ex)
            self.close_connection = True
            self._send_error_response_if_possible(400)
        except OSError as ex:
            if ex.args[0] in self.ignored_socket_errors:
                self.close_connection = True
            else:
                self.handle_error(*sys.exc_info())
        except BaseException:  # noqa: BLE001 -- as pywsgi: anything else is a 500 and a traceback in the log
            self.handle_error(*sys.exc_info())
        finally:
            if self.logged:  # else nothing to log: the request was read (a refusal before it is logged apart)
                self.time_finish = time.time()
                self.log_request()

    def run_application(self) -> None:
        """pywsgi's, with a reply given whole in one piece (or none) sent with its head at once."""
        result = self.result = self.application(self.environ, self.start_response)
        try:
            if (
                type(result) is list
                and len(result) <= 1
                and self.status
                and not self.headers_sent
                and self.code not in (204, 304)
            ):
                self._write_whole(result[0] if result else b"")
            else:
                self.process_result()
        finally:
            close = getattr(result, "close", None)
            try:
                if close is not None:
                    close()
            finally:
                self.result = None

    def _started(self, status: str, headers: list[tuple[str, str]]) -> bool:
        """pywsgi's start_response in one pass over the headers, leaving the same state; False, with nothing
        changed, for anything pywsgi's would refuse (which then raises its own error): a name or value that is
        not a str, holds a CR or LF or is not latin-1, a status not "NNN ...", a 204 or 304 with a length.
        A JSON reply's two headers as json_response makes them (its JSON_TYPE, then a Content-Length of ASCII
        digits) are taken in one look; any other goes through _started_any."""
        if type(headers) is list and len(headers) == 2 and headers[0] is JSON_TYPE and type(status) is str:
            name, length = headers[1]
            if type(name) is str and name == "Content-Length" and type(length) is str and length.isascii():
                known = _STATUSES.get(status)
                if known is not None and length.isdigit():
                    raw_status, code = known
                    if code in (304, 204) and length != "0":
                        return False
                    encoded = [_JSON_TYPE, (b"Content-Length", length.encode())]
                    if self.request_version == "HTTP/1.0":
                        encoded.append((b"Connection", b"close" if self.close_connection else b"keep-alive"))
                    self.status, self._orig_status, self.response_headers, self.code = raw_status, status, encoded, code
                    self.provided_date, self.provided_content_length = None, length
                    return True
        return self._started_any(status, headers)

    def _started_any(self, status: str, headers: list[tuple[str, str]]) -> bool:
        """_started's for any reply: each header checked and encoded in turn."""
        known = _STATUSES.get(status) if type(status) is str else None
        if known is None:
            known = _status(status)
            if known is None:
                return False
        raw_status, code = known
        encoded: list[tuple[bytes, bytes]] = []
        connection = date = length = None
        try:
            for name, value in headers:
                named = _NAMES.get(name) if type(name) is str else None
                if named is None:
                    named = _name(name)
                    if named is None:
                        return False
                if type(value) is not str or "\r" in value or "\n" in value:
                    return False
                encoded.append((named[0], value.encode("latin-1")))
                kind = named[1]
                if kind is _OTHER:
                    continue
                if kind == "connection":
                    connection = value
                elif kind == "date":
                    date = value
                else:
                    length = value
        except UnicodeEncodeError:
            return False
        if code in (304, 204) and length is not None and length != "0":
            return False
        if self.request_version == "HTTP/1.0" and connection is None:
            encoded.append((b"Connection", b"close" if self.close_connection else b"keep-alive"))
        elif connection == "close":
            self.close_connection = True
        self.status, self._orig_status, self.response_headers, self.code = raw_status, status, encoded, code
        self.provided_date, self.provided_content_length = date, length
        return True

    def _sendall(self, data: Any) -> None:
        sock = self.socket
        raw = self.raw
        try:
            if raw is None:  # a TLS socket: gevent's send, which waits while the socket is full
                sent = sock.send(data)
            else:  # gevent's plain socket: its own non-blocking send (what gevent's send tries first)
                try:
                    sent = raw.send(data)
                except BlockingIOError:
                    sent = 0
            if sent < len(data):  # the rest by gevent's sendall, which waits while the socket is full
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

    def _write_whole(self, data: bytes) -> None:
        """A reply whose body is `data`, whole: what finalize_headers and _write_with_headers do for it (the Date,
        a Content-Length when the application gave none, neither chunked nor a 204 or 304), in one send when the
        body is small."""
        self.headers_sent = True
        self.connection_upgraded = self.code == 101
        headers = self.response_headers
        if self.provided_date is None:  # DATE.now(), its call spared while the second is the one formatted
            headers.append((b"Date", DATE._value if int(time.time()) == DATE._second else DATE.now()))
        if self.provided_content_length is None:
            headers.append((b"Content-Length", b"%d" % len(data)))
        if not data or self.command == "HEAD" or len(data) > JOINED:
            self._sendall(_head(self.status, headers))
            self._write(data)
        else:
            self._sendall(_head(self.status, headers, data))

    def _write(self, data: bytes) -> None:
        """pywsgi's: a piece of the body, framed as a chunk when the reply is chunked. A chunk of more than JOINED
        bytes (a large SSE event) is sent apart from its size line and its CRLF: pywsgi copies it between them
        first, a copy of megabytes for a large result."""
        if not data:
            return  # the application may yield empty pieces
        if not self.response_use_chunked:
            self._sendall(data)
        elif len(data) > JOINED:
            self._sendall(b"%x\r\n" % len(data))
            self._sendall(data)
            self._sendall(b"\r\n")
        else:
            self._sendall(b"%x\r\n%b\r\n" % (len(data), data))

    def _write_with_headers(self, data: bytes) -> None:
        """The head, with `data` (the body's first piece) in the same send when it is small."""
        self.headers_sent = True
        self.finalize_headers()
        if not data or self.command == "HEAD" or len(data) > JOINED:
            self._sendall(_head(self.status, self.response_headers))
            self._write(data)
        elif self.response_use_chunked:
            self._sendall(b"".join((_head(self.status, self.response_headers), b"%x\r\n" % len(data), data, b"\r\n")))
        else:
            self._sendall(_head(self.status, self.response_headers, data))

    if TYPE_CHECKING:

        def _handle_client_error(self, ex: Exception) -> Any: ...
        def _send_error_response_if_possible(self, error_code: int) -> None: ...
        def handle_error(self, t: Any, v: Any, tb: Any) -> None: ...
        def log_request(self) -> None: ...
        def process_result(self) -> None: ...
        def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any: ...


_LINES: dict[bytes, bytes] = {}  # a status seen -> its status line (at most _MOST)


def _head(status: bytes, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> bytes:
    """A reply's status line and header fields, ending with the blank line, then `body`: one join (a name and its
    value joined by b": ", neither copied apart)."""
    line = _LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 " + status
        if len(_LINES) < _MOST:
            _LINES[status] = line
    lines = [line]
    lines += map(b": ".join, headers)
    lines.append(b"")
    lines.append(body)
    return b"\r\n".join(lines)
