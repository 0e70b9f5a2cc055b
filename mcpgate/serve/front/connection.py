"""A client connection in the gateway's worker (mcpgate.serve.front.worker): a keep-alive loop of its own over
pywsgi's handler, with a stricter, lighter request reader and the read deadlines, and pywsgi's server holding the
open connections, the budget and the memo of request heads.

A request whose head is whole in the connection's buffer is read in one look: its bytes name a head already
checked (serve/front/heads.py), or are checked as a whole and remembered; the environ is a copy of the server's
keys and the head's (merged once for a remembered head), with the connection's. Any other head (not whole yet,
refused, past the memo's bounds) is read a line at a time, as pywsgi reads it. What the application gives whole
goes out with its head in one send (writing.py).

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
import socket
import time
from typing import Any, BinaryIO

import gevent
from gevent.pywsgi import _REQUEST_TOO_LONG_RESPONSE, MAX_REQUEST_LINE, _InvalidClientInput
from gunicorn.workers.ggevent import PyWSGIHandler, PyWSGIServer

from mcpgate.observe import logs, refusals
from mcpgate.serve.front import environ as request_environ
from mcpgate.serve.front.context import CONTEXT, RequestContext
from mcpgate.serve.front.handoff import Given, Handoff
from mcpgate.serve.front.heads import Head, Heads, checked
from mcpgate.serve.front.peer_probe import peer_gone, peer_polled, polling
from mcpgate.serve.front.reading import Body, TimedReader, Waiting
from mcpgate.serve.front.reading import Limits as Limits
from mcpgate.serve.front.request_headers import RequestHeaders, parse_request_line
from mcpgate.serve.front.writing import LeanWrites

BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-length: 0\r\n\r\n"  # as pywsgi's
READ_BUFFER = io.DEFAULT_BUFFER_SIZE  # as socket.makefile's, which pywsgi uses
SWEEP_INTERVAL = 0.5  # seconds between checks of the read deadlines (how late a timeout may fire)


class Handler(LeanWrites, PyWSGIHandler):  # type: ignore[misc]
    """One client connection: its own keep-alive loop (pywsgi's, with a head read in one look when its bytes are
    whole in the buffer: heads.py), reading with deadlines and RequestHeaders, known to the server while it is open,
    counted in the server's budget while it waits on its client (reading: the module's docstring). pywsgi's
    handler answers what is rare: its refusals, errors, and replies that are not one piece (writing.py)."""

    # The connection's own attributes are slots: with pywsgi's per-request ones in the instance dict they passed the
    # 30 names an instance keeps inline (CPython 3.11), and every attribute of the handler was then looked up in a
    # dict of its own.
    __slots__ = ("handed", "handoff", "head", "limits", "logged", "own", "peer_gone", "raw", "reader", "requests")

    environ: dict[str, Any] | None  # pywsgi's, for the request being answered
    response_headers: list[tuple[bytes, bytes]]

    def __init__(self, sock: socket.socket, address: Any, server: Server, given: bytes = b"") -> None:
        # `given`: a connection another instance handed here, the bytes it had read from it (serve/front/handoff.py)
        self.reader = Given(sock, given) if given else TimedReader(sock)
        self.raw = self.reader.raw  # writing.py's send (None: a TLS socket, written through gevent's)
        super().__init__(sock, address, server, rfile=io.BufferedReader(self.reader, READ_BUFFER))
        self.limits: Limits = server.limits
        self.requests = 0
        self.handoff = server.handoff  # a request for another instance's session hands it the connection (None: off)
        self.handed = False  # the connection went to another instance: this one writes nothing more on it
        # every request's probe of this connection (a plain socket's keeps its poll object, which its reader asks too
        # before the first read of a kept-alive connection's next request: reading.py; a TLS socket's makes one)
        raw = self.raw
        if raw is None:
            self.peer_gone = functools.partial(peer_gone, sock)
        else:
            pollers = [polling(raw)]
            self.reader.poller = pollers[0]
            self.peer_gone = functools.partial(peer_polled, raw, pollers)
        self.logged: bool = server.access_logged
        self.application = server.application
        self.head: Head | None = None  # the request being answered
        self.own: dict[str, Any] | None = None  # the environ's keys of the connection (made on its first request)

    def handle(self) -> None:
        server: Server = self.server
        sock = self.socket  # pywsgi clears self.socket when the connection ends
        server.connections.add(sock)
        server.readers.add(self.reader)
        self.reader.within(self.limits.header)
        server.waiting.enter(self)
        try:
            self.serve()
        except OSError:  # the client went away (or was closed) while being answered
            pass
        finally:
            server.waiting.leave(self)
            server.readers.discard(self.reader)
            server.connections.discard(sock)
            self.release()

    def serve(self) -> None:
        """pywsgi's keep-alive loop (WSGIHandler.handle): a request after another until one ends the connection;
        a request refused before the application gets its canned answer and ends it."""
        while self.socket is not None:
            if self.logged:
                self.time_start, self.time_finish = time.time(), 0
            result = self.handle_one_request()
            if result is True:
                continue
            if not isinstance(result, tuple):
                return
            self.status, answer = result
            self.socket.sendall(answer)
            if self.time_finish == 0:
                self.time_finish = time.time()
            self.log_request()
            return

    def release(self) -> None:
        """pywsgi's end of a connection (the rest of WSGIHandler.handle): what the client still sent is read
        once, so closing does not reset the connection, then the socket is closed. A connection handed to another
        instance is only closed here: its descriptor is this process's copy, the connection the owner's."""
        if self.socket is not None:
            raw = None if self.handed else getattr(self.socket, "_sock", None)
            try:
                if raw:
                    try:
                        raw.recv(16384)
                    finally:
                        raw.close()
                self.socket.close()
            except OSError:
                pass
        self.__dict__.pop("socket", None)
        self.__dict__.pop("rfile", None)
        self.__dict__.pop("wsgi_input", None)

    def evict(self) -> None:
        """Close a connection that waits on its client while newer ones need its place: a read in progress (a
        body's) fails as a timeout does, counted as the budget's (refusals.EVICTED), not as a slow client."""
        self.reader.fail(refusals.EVICTED)
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):  # already closed (pywsgi clears self.socket)
            pass

    def handle_one_request(self) -> tuple[str, bytes] | bool | None:
        """pywsgi's: True when the connection goes on, None when it ends, a canned answer for a refusal."""
        rfile = self.rfile
        reader = self.reader
        if reader.shut:  # rfile.closed (its raw reader's), read as a flag
            return None
        self.environ, self.response_headers = None, []  # the access log of a request refused before it has them
        if self.requests:  # keep-alive: wait for the next request's first byte, then give it a whole head
            if self.server.closing:  # none after the worker's stop began (Server.closing)
                return None
            limits = self.limits
            # reader.pausing(keepalive), then reader.within(header) once a byte came: their fields set here (two calls
            # spared a request); idle: the client was just answered, its next request likely not there yet (reading.py)
            reader.pause, reader.deadline, reader.rate, reader.idle = limits.keepalive, None, 0.0, True
            waiting = self.server.waiting  # waiting.enter(self), its usual case (room in the budget) without its call
            if len(waiting.connections) < waiting.budget and self not in waiting.connections:
                waiting.connections[self] = None
            else:
                waiting.enter(self)
            try:
                if not rfile.peek(1):
                    return None
            except OSError:
                return None
            # (idle cleared too: a request the buffer held already was taken without a read)
            reader.pause, reader.deadline, reader.rate, reader.idle = None, time.monotonic() + limits.header, 0.0, False
        self.requests += 1
        self.response_length = 0
        head = self.whole_head()
        if head is None:  # read a line at a time, as pywsgi does (a refusal says which line and why)
            if self.handed:
                return None
            try:
                line = self.read_requestline()
            except OSError:
                return None
            if not line:
                return None
            self.requestline = line
            if len(line) >= MAX_REQUEST_LINE:
                return ("414", _REQUEST_TOO_LONG_RESPONSE)
            try:
                head = self.read_head(line)
            except Exception as ex:  # noqa: BLE001 -- as pywsgi: any failure to read a head is the client's 400
                return self._handle_client_error(ex)  # type: ignore[no-any-return]
        # the request being answered is `head`'s: pywsgi's attributes, which its handler and the access log read
        self.head, self.requestline, self.headers = head, head.requestline, head.headers
        self.command, self.path, self.request_version = head.line.method, head.path, head.line.version
        self.content_length, self.close_connection = head.length, head.close
        self.environ = self.get_environ()
        self.handle_one_response()
        if self.close_connection or reader.shut:
            return None
        return True

    def whole_head(self) -> Head | None:
        """The next request's head when its bytes are whole in the buffer and pass (heads.py), consumed; else None,
        with nothing consumed."""
        try:
            buffered: bytes = self.rfile.peek(1)
        except OSError:
            return None
        end = buffered.find(b"\r\n\r\n") + 4
        if end < 4 or buffered.startswith(b"\r\n"):
            return None
        head: Head | None = self.server.heads.get(buffered[:end])
        if head is not None:
            if self.handoff is not None and self.requests == 1 and self.handoff.hands(self, head, buffered):
                self.handed = True  # (nothing consumed: the owner has every byte the buffer held)
                return None
            self.rfile.read(end)
        return head

    def read_requestline(self) -> str:
        line: str = self.rfile.readline(MAX_REQUEST_LINE).decode("latin-1")
        if line == "\r\n":  # RFC 9112 2.2: an empty line before a request line is ignored
            line = self.rfile.readline(MAX_REQUEST_LINE).decode("latin-1")
        return line

    def read_head(self, raw_requestline: str) -> Head:
        """The request line parse_request_line checks (one HTTP/1.0 or 1.1 line of three parts) and the fields
        RequestHeaders reads, as a Head (heads.checked: the refusals pywsgi answers with 400)."""
        line = parse_request_line(raw_requestline)
        self.requestline = raw_requestline.rstrip()
        self.command, self.path, self.request_version = line
        self.headers = self.MessageClass(self.rfile, 0)
        return checked(raw_requestline, line, self.headers)

    def MessageClass(self, fp: BinaryIO, *args: Any) -> RequestHeaders:  # pywsgi names it so
        try:
            return RequestHeaders.read(fp)
        except OSError:  # the head's deadline passed
            return RequestHeaders([], "Request header timeout")

    def get_environ(self) -> dict[str, Any]:
        head = self.head
        assert head is not None
        own = self.own
        if own is None:  # the client's address and socket: the same for each request of the connection
            own = self.own = request_environ.connection_items({}, self.client_address)
            own["gunicorn.sock"] = self.socket  # as gunicorn's handler
        keys = head.environ  # the server's keys and the head's, merged once for each head the memo holds
        if keys is None:  # (no upgrade reads the raw socket: the input is terminated)
            keys = {**self.server.get_environ(), "wsgi.input_terminated": True, **head.items}
            if head.kept:
                head.environ = keys
        environ = keys.copy()
        environ.update(own)
        expect = self.socket if head.expect else None  # as pywsgi's Input
        body = self.wsgi_input = Body(self.rfile, head.length, expect, head.chunked)
        body.connection = self
        body.done = not head.chunked and not head.length  # Body.whole at once for a request without a body
        environ["wsgi.input"] = body
        environ[CONTEXT] = made = RequestContext(self.peer_gone)
        if logs.REQUEST is not None:  # JSON logs: this greenlet's lines name the request's server and principal
            logs.REQUEST.set(made)
        if body.done:  # no body: nothing more to wait for
            self.body_read()
        else:  # self.reader.body(pause, rate), its fields set here (a call spared)
            reader, limits = self.reader, self.limits
            reader.pause, reader.deadline, reader.rate = limits.body, time.monotonic() + limits.body, limits.body_rate
        return environ

    def body_read(self) -> None:
        """The request's body, if any, is read whole: the connection waits on its client no more."""
        self.server.waiting.connections.pop(self, None)  # waiting.leave(self), without its call
        reader = self.reader  # reader.pausing(body), its fields set here (every request; a call spared)
        reader.pause, reader.deadline, reader.rate = self.limits.body, None, 0.0

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        body: Body | None = self.wsgi_input  # pywsgi's class default None until a request has one
        unread = body is not None and not body.done  # answered before its body was read: closed after this reply
        if unread:
            self.server.waiting.leave(self)
        if unread or self.server.closing:  # or the worker stops: the connection's last reply (Server.closing)
            self.close_connection = True
            if not any(name.lower() == "connection" for name, _ in headers):
                headers = [*headers, ("Connection", "close")]
        if exc_info is None and self._started(status, headers):
            return self.write
        return super().start_response(status, headers, exc_info)

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
        self.heads = Heads()  # the request heads its connections read, remembered by their bytes
        self.handoff: Handoff | None = None  # MCPGATE_HANDOFF_DIR's sender (the worker sets it)
        # the worker stops (worker.release_connections): a reply says Connection: close and its connection ends,
        # also one accepted after the known connections were released, before gunicorn closes the listener
        self.closing = False
        self._sweeper: gevent.Greenlet | None = None

    def update_environ(self) -> None:
        """pywsgi's, without its reverse DNS lookup: SERVER_NAME is the listening address as it is. pywsgi asks
        socket.getfqdn, which starts gevent's resolver and its thread and waits on DNS as each worker starts (a
        resolver that does not answer holds the worker's start); nothing here reads SERVER_NAME (a request's
        Host header names the host)."""
        address = self.address
        if isinstance(address, tuple):
            self.environ.setdefault("SERVER_NAME", str(address[0]))
        super().update_environ()

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
