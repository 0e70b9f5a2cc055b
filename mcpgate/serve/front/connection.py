"""A client connection in the gateway's worker (mcpgate.serve.front.worker): pywsgi's handler with a stricter,
lighter request reader and the read deadlines, and pywsgi's server holding the open connections and the budget.

Reading a request: the request line and header block are checked as request_headers says (a refusal is 400
and a closed connection, so nothing framed two ways is ever answered, and one line in the error log and the
access log); an absolute-form target's authority is the effective Host; a HEAD reply carries headers only (RFC
9110 9.3.2), whatever the app returns. The body is the app's to read (HttpRequest.read_body on the endpoints,
http.buffer_body before any other path, both bounded); one the app did not read whole is never drained: the
reply says Connection: close and the connection closes after it.

Timeouts, on the read side only (a reply or a stream being written is never cut): a connection has
MCPGATE_HEADER_TIMEOUT seconds from its start, or from the first byte of its next request, to send a whole
head; an idle keep-alive connection is closed after MCPGATE_KEEPALIVE_TIMEOUT; a request body may pause
MCPGATE_BODY_TIMEOUT between bytes and must average MCPGATE_BODY_MIN_RATE bytes a second after its first
MCPGATE_BODY_TIMEOUT seconds (past either, 400 and closed).

The budget: connections waiting on their client (new, idle keep-alive, still sending headers, or still sending a
body) are counted, oldest first; when one more would pass MCPGATE_IDLE_CONNECTIONS (at most half of the worker's
connections) the longest-waiting one is closed. Sockets that send slowly or nothing can so never take the slots
of requests in progress. (mcpgate.serve.front.reading holds the deadlines, the body and the budget.)
"""

from __future__ import annotations

import functools
import io
import select
import socket
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import gevent
from gevent.pywsgi import _InvalidClientInput, _InvalidClientRequest
from gunicorn.workers.ggevent import PyWSGIHandler, PyWSGIServer

from mcpgate.config.settings import Settings
from mcpgate.observe import logs, refusals
from mcpgate.serve.front import environ as request_environ
from mcpgate.serve.front.context import CONTEXT, RequestContext
from mcpgate.serve.front.reading import Body, TimedReader, Waiting
from mcpgate.serve.front.request_headers import RequestHeaders, parse_request_line, resolve_target
from mcpgate.serve.front.writing import LeanWrites

BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-length: 0\r\n\r\n"  # as pywsgi's
READ_BUFFER = io.DEFAULT_BUFFER_SIZE  # as socket.makefile's, which pywsgi uses
SWEEP_INTERVAL = 0.5  # seconds between checks of the read deadlines (how late a timeout may fire)


@dataclass(frozen=True)
class Limits:
    keepalive: float  # seconds an idle keep-alive connection waits for its next request
    header: float  # seconds to send a whole head
    body: float  # seconds a body may pause between bytes, and its time before the rate counts
    body_rate: float  # bytes a second a body must average (each one received gives it 1/rate s more)
    waiting: int  # connections waiting on their client (a head, a body) before the oldest is closed

    @classmethod
    def of(cls, settings: Settings, worker_connections: int) -> Limits:
        waiting = min(settings.idle_connections, max(1, worker_connections // 2))
        return cls(
            settings.keepalive_timeout, settings.header_timeout, settings.body_timeout, settings.body_min_rate, waiting
        )


class Handler(LeanWrites, PyWSGIHandler):  # type: ignore[misc]
    """One client connection: read with deadlines and RequestHeaders, known to the server while it is open,
    counted in the server's budget while it waits on its client (reading: the module's docstring)."""

    environ: dict[str, Any] | None  # pywsgi's, for the request being answered
    response_headers: list[tuple[bytes, bytes]]

    def __init__(self, sock: socket.socket, address: Any, server: Server) -> None:
        self.reader = TimedReader(sock)
        super().__init__(sock, address, server, rfile=io.BufferedReader(self.reader, READ_BUFFER))
        self.limits: Limits = server.limits
        self.requests = 0
        self.peer_gone = functools.partial(peer_gone, sock)  # every request's probe of this connection

    def handle(self) -> None:
        server: Server = self.server
        sock = self.socket  # pywsgi clears self.socket when the connection ends
        server.connections.add(sock)
        server.readers.add(self.reader)
        self.reader.within(self.limits.header)
        server.waiting.enter(self)
        try:
            super().handle()
        except OSError:  # the client went away (or was closed) while being answered
            pass
        finally:
            server.waiting.leave(self)
            server.readers.discard(self.reader)
            server.connections.discard(sock)

    def evict(self) -> None:
        """Close a connection that waits on its client while newer ones need its place: a read in progress (a
        body's) fails as a timeout does, counted as the budget's (refusals.EVICTED), not as a slow client."""
        self.reader.fail(refusals.EVICTED)
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):  # already closed (pywsgi clears self.socket)
            pass

    def read_requestline(self) -> str:
        self.environ, self.response_headers = None, []  # the access log of a request refused before it has them
        if self.requests:  # keep-alive: wait for the next request's first byte, then give it a whole head
            self.reader.pausing(self.limits.keepalive)
            self.server.waiting.enter(self)
            try:
                if not self.rfile.peek(1):
                    return ""
            except OSError:
                return ""
            self.reader.within(self.limits.header)
        self.requests += 1
        line: str = super().read_requestline()
        if line == "\r\n":  # RFC 9112 2.2: an empty line before a request line is ignored
            line = super().read_requestline()
        return line

    def read_request(self, raw_requestline: str) -> bool:
        """pywsgi's, on the request line parse_request_line checked (so one HTTP/1.0 or 1.1 line of three parts)
        and the fields RequestHeaders read (no Content-Length but digits, never one with Transfer-Encoding)."""
        line = parse_request_line(raw_requestline)
        self.requestline = raw_requestline.rstrip()
        self.command, self.path, self.request_version = line
        self.headers = self.MessageClass(self.rfile, 0)
        if self.headers.status:
            raise _InvalidClientRequest(f"Invalid headers status: {self.headers.status!r}")
        length = self.headers.get("content-length")
        self.content_length = None if length is None else int(length)
        if self.content_length and self.command == "HEAD":
            raise _InvalidClientRequest("Unexpected Content-Length")
        connection = self.headers.get("connection", "").lower()
        self.close_connection = connection == "close" if line.version == "HTTP/1.1" else connection != "keep-alive"
        self.path, host = resolve_target(line, self.headers.get("host"))
        if host is not None and host != self.headers.get("host"):
            self.headers.replace("Host", host)
        return True

    def MessageClass(self, fp: BinaryIO, *args: Any) -> RequestHeaders:  # pywsgi names it so
        try:
            return RequestHeaders.read(fp)
        except OSError:  # the head's deadline passed
            return RequestHeaders([], "Request header timeout")

    def get_environ(self) -> dict[str, Any]:
        environ = request_environ.build(
            self.server.get_environ(), self.command, self.path, self.request_version, self.headers, self.client_address
        )
        environ["gunicorn.sock"] = self.socket  # as gunicorn's handler
        expect = self.socket if environ.get("HTTP_EXPECT") == "100-continue" else None  # as pywsgi's Input
        chunked = "HTTP_TRANSFER_ENCODING" in environ  # RequestHeaders admits only "chunked"
        body = self.wsgi_input = Body(self.rfile, self.content_length, expect, chunked)
        body.connection = self
        environ["wsgi.input"], environ["wsgi.input_terminated"] = body, True  # no upgrade reads the raw socket
        environ[CONTEXT] = RequestContext(peer_gone=self.peer_gone)
        if logs.REQUEST is not None:  # JSON logs: this greenlet's lines name the request's server and principal
            logs.REQUEST.set(environ[CONTEXT])
        if body.whole:  # no body: nothing more to wait for from the client
            self.body_read()
        else:
            self.reader.body(self.limits.body, self.limits.body_rate)
        return environ

    def body_read(self) -> None:
        """The request's body, if any, is read whole: the connection waits on its client no more."""
        self.server.waiting.leave(self)
        self.reader.pausing(self.limits.body)

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        body: Body | None = getattr(self, "wsgi_input", None)
        if body is not None and not body.whole:  # answered before its body was read: closed after this reply
            self.server.waiting.leave(self)
            self.close_connection = True
            if not any(name.lower() == "connection" for name, _ in headers):
                headers = [*headers, ("Connection", "close")]
        if exc_info is None and self._started(status, headers):
            return self.write
        return super().start_response(status, headers, exc_info)

    def _started(self, status: str, headers: list[tuple[str, str]]) -> bool:
        """pywsgi's start_response in one pass over the headers, leaving the same state; False, with nothing
        changed, for anything pywsgi's would refuse (which then raises its own error): a name or value that is
        not a str, holds a CR or LF or is not latin-1, a status not "NNN ...", a 204 or 304 with a length."""
        if type(status) is not str or "\r" in status or "\n" in status:
            return False
        encoded: list[tuple[bytes, bytes]] = []
        connection = date = length = None
        try:
            for name, value in headers:
                if type(name) is not str or type(value) is not str:
                    return False
                if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                    return False
                encoded.append((name.encode("latin-1"), value.encode("latin-1")))
                lower = name.lower()
                if lower == "connection":
                    connection = value
                elif lower == "date":
                    date = value
                elif lower == "content-length":
                    length = value
            code = int(status.split(" ", 1)[0])
            raw_status = status.encode("latin-1")
        except (UnicodeEncodeError, ValueError):
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

    def _handle_client_error(self, ex: Exception) -> Any:  # pywsgi's hook for a request it refuses
        """A request refused by the worker (its head, or a body too slow or cut short): one line in gunicorn's error
        log, and 400 with a closed connection."""
        if not isinstance(ex, ValueError | _InvalidClientInput):  # not the client's doing: pywsgi's traceback
            return super()._handle_client_error(ex)
        self.log_refusal(getattr(ex, "formatted_message", None) or str(ex) or type(ex).__name__)
        return "400", BAD_REQUEST

    def log_request(self) -> None:
        if self.environ is None:  # refused before the application: the access log's fields from the request line
            if str(self.status).startswith("414"):  # pywsgi's own refusal, which it does not log
                self.log_refusal("Request line too long", 414)
            self.environ = refused_environ(self.requestline or "", self.client_address)
        if self.server.access_logged:  # none configured: nothing to gather
            super().log_request()

    def log_refusal(self, reason: str, status: int = 400) -> None:
        """One line in gunicorn's error log (as gunicorn's own workers word it), counted by kind for /metrics, and
        an audit line (observe/refusals.py)."""
        refusals.refused(refusals.client_error(reason), self.client_address, status)
        address = self.client_address[0] if isinstance(self.client_address, tuple) else self.client_address
        self.server.log.warning("Invalid request from ip=%s: %s", address or "-", printable(reason))

    def _write(self, data: bytes) -> None:  # pywsgi writes every piece of a body through it
        if self.command != "HEAD":
            super()._write(data)


LOGGED_CHARS = 200  # of a refused request line or error message in a log line


def printable(text: str) -> str:
    """`text` for a log line: control characters and non-ASCII escaped, at most LOGGED_CHARS characters."""
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= LOGGED_CHARS else escaped[:LOGGED_CHARS] + "..."


def refused_environ(requestline: str, address: Any) -> dict[str, str]:
    """What gunicorn's access log reads of a request refused before it had an environ."""
    parts = printable(requestline.rstrip("\r\n")).split(" ")
    method, target, version = parts if len(parts) == 3 else ("-", " ".join(parts) or "-", "-")
    path, _, query = target.partition("?")
    remote = str(address[0]) if isinstance(address, tuple) else str(address or "-")
    return {
        "REMOTE_ADDR": remote,
        "REQUEST_METHOD": method,
        "RAW_URI": target,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_PROTOCOL": version,
    }


def peer_gone(sock: socket.socket) -> bool:
    """Whether the client closed its connection: the socket reads as ended (never blocks; data waiting, such
    as a pipelined request, means it is still there)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class Server(PyWSGIServer):  # type: ignore[misc]
    """pywsgi's server, holding the set of open client connections its worker shares, and the budget."""

    def __init__(self, *args: Any, connections: set[socket.socket], limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections = connections
        self.limits = limits
        self.waiting = Waiting(limits.waiting)
        # gunicorn's access log is configured (its logger says so; pywsgi wraps it): else nothing is gathered for it
        self.access_logged = bool(getattr(self.log, "access_log_enabled", True))
        self.readers: set[TimedReader] = set()
        self._sweeper: gevent.Greenlet | None = None

    def start(self) -> None:
        super().start()
        if self._sweeper is None:
            self._sweeper = gevent.spawn(self.sweep_forever)

    def sweep_forever(self) -> None:
        while True:
            gevent.sleep(SWEEP_INTERVAL)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        """End every read that has waited past its deadline."""
        for reader in list(self.readers):
            reader.overran(now)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.kill(block=False)
        super().close()
