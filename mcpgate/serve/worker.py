"""The gunicorn worker: gunicorn's gevent_pywsgi worker with a stricter, lighter request reader, the
connection timeouts and budget pywsgi lacks, and the gateway's part of a shutdown.

Reading a request: the request line and header block are checked as request_headers says (a refusal is 400
and a closed connection, so nothing framed two ways is ever answered); an absolute-form target's authority
is the effective Host; a HEAD reply carries headers only (RFC 9110 9.3.2), whatever the app returns.

Timeouts, on the read side only (a reply or a stream being written is never cut): a connection has
MCPGATE_HEADER_TIMEOUT seconds from its start, or from the first byte of its next request, to send a whole
head; an idle keep-alive connection is closed after MCPGATE_KEEPALIVE_TIMEOUT; a request body may pause
MCPGATE_BODY_TIMEOUT between bytes (past it, 400 and closed).

The budget: connections waiting for a head (new, idle keep-alive, or still sending headers) are counted, oldest
first; when one more would pass MCPGATE_IDLE_CONNECTIONS (at most half of the worker's connections) the
longest-waiting one is closed. Sockets that send nothing can so never take the slots of requests in progress.

The worker tracks its client connections, and a graceful shutdown (SIGTERM) starts from its signal handling,
on a greenlet of its own, as gunicorn's gevent worker does with SIGQUIT. It drains first: the listener stays
open, /healthz answers 503 "draining" (balancers stop sending new sessions), every server refuses new sessions
and new 2026-07-28 calls with 503 + Retry-After; in a fleet this instance stays in the directory until the
drain ends (its sessions' requests are still forwarded here). Requests already being answered (sessions'
requests, pooled calls, a call parked for its client's input whose retry still comes here) go on, and open
sessions' next requests are served, until
none is in flight or the drain's time is up: MCPGATE_GRACEFUL_TIMEOUT less the children's stop ladder. Then
gunicorn stops accepting, every session of every server is ended (children go down the shutdown ladder), and
reading stops on every client connection so idle keep-alive ones close while replies still finish.
"""

from __future__ import annotations

import functools
import io
import select
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import gevent
from gevent.pywsgi import _InvalidClientInput
from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler, PyWSGIServer

from ..settings import Settings
from .http import PEER_GONE
from .request_headers import RequestHeaders, parse_request_line, resolve_target

if TYPE_CHECKING:  # the master loads this class; the gateway's modules load in the worker, with the app
    from .fleet import Fleet

LAST_CHANCE_TIMEOUT = 5.0  # seconds for children still alive when the worker's loop has ended
READ_BUFFER = io.DEFAULT_BUFFER_SIZE  # as socket.makefile's, which pywsgi uses
SWEEP_INTERVAL = 0.5  # seconds between checks of the read deadlines (how late a timeout may fire)
DRAIN_POLL = 0.1  # seconds between checks that nothing is in flight any more while draining
LADDER_GRACE = 2.0  # seconds kept beyond the children's stop ladder (close + term timeouts) after a drain


@dataclass(frozen=True)
class Limits:
    keepalive: float  # seconds an idle keep-alive connection waits for its next request
    header: float  # seconds to send a whole head
    body: float  # seconds a body may pause between bytes
    waiting: int  # connections waiting for a head before the oldest is closed

    @classmethod
    def of(cls, settings: Settings, worker_connections: int) -> Limits:
        waiting = min(settings.idle_connections, max(1, worker_connections // 2))
        return cls(settings.keepalive_timeout, settings.header_timeout, settings.body_timeout, waiting)


class ReadTimeout(_InvalidClientInput):  # type: ignore[misc]
    """A client too slow to read from: pywsgi closes the connection (with 400 when nothing was sent yet)."""


class TimedReader(io.RawIOBase):
    """A connection's read side, with a deadline on each wait: a head must arrive by its deadline (`within`), a
    body or an idle connection may pause `pausing` seconds. No timer per read: a read records when its wait
    must end, and the server's sweeper (`Server.sweep`, twice a second) ends the waits that overran by
    shutting the socket's read side; the read then fails, and every later one at once."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.pause: float | None = None
        self.deadline: float | None = None
        self.waiting_until: float | None = None  # while a read waits: when it must have ended
        self.failed = False

    def within(self, seconds: float) -> None:
        self.pause, self.deadline = None, time.monotonic() + seconds

    def pausing(self, seconds: float) -> None:
        self.pause, self.deadline = seconds, None

    def readable(self) -> bool:
        return True

    def overran(self, now: float) -> bool:
        """Called by the sweeper: a wait past its end is ended (True when this one was)."""
        if self.waiting_until is None or now < self.waiting_until or self.failed:
            return False
        self.failed = True
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        return True

    def readinto(self, buffer: Any) -> int:
        if self.failed:
            raise ReadTimeout("timed out")
        until = self.deadline if self.pause is None else time.monotonic() + self.pause
        if until is not None and until <= time.monotonic():
            self.failed = True
            raise ReadTimeout("timed out")
        self.waiting_until = until
        try:
            count = self.sock.recv_into(buffer)
        finally:
            self.waiting_until = None
        if self.failed:
            raise ReadTimeout("timed out")
        return count


class Waiting:
    """The connections waiting for a request head, longest-waiting first, at most `budget` of them."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.handlers: dict[Handler, None] = {}

    def enter(self, handler: Handler) -> None:
        self.handlers.pop(handler, None)
        while len(self.handlers) >= self.budget:
            oldest = next(iter(self.handlers))
            del self.handlers[oldest]
            oldest.evict()
        self.handlers[handler] = None

    def leave(self, handler: Handler) -> None:
        self.handlers.pop(handler, None)


class Handler(PyWSGIHandler):  # type: ignore[misc]
    """One client connection: read with deadlines and RequestHeaders, known to the server while it is open."""

    def __init__(self, sock: socket.socket, address: Any, server: Server) -> None:
        self.reader = TimedReader(sock)
        super().__init__(sock, address, server, rfile=io.BufferedReader(self.reader, READ_BUFFER))
        self.limits: Limits = server.limits
        self.requests = 0

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
        """Close a connection that waits for a request while newer ones need its place."""
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):  # already closed (pywsgi clears self.socket)
            pass

    def read_requestline(self) -> str:
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
        line = parse_request_line(raw_requestline)
        super().read_request(raw_requestline)
        self.path, host = resolve_target(line, self.headers.get("host"))
        if host is not None and host != self.headers.get("host"):
            self.headers.replace("Host", host)
        return True

    def MessageClass(self, fp: BinaryIO, *args: Any) -> RequestHeaders:  # pywsgi names it so
        try:
            return RequestHeaders.read(fp)
        except OSError:  # the head's deadline passed
            return RequestHeaders([], "Request header timeout")
        finally:
            self.server.waiting.leave(self)
            self.reader.pausing(self.limits.body)

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        environ[PEER_GONE] = functools.partial(peer_gone, self.socket)
        return environ

    def finalize_headers(self) -> None:
        super().finalize_headers()
        if self.command == "HEAD":
            self.response_use_chunked = False  # no body, so no last chunk either

    def _write(self, data: bytes) -> None:  # pywsgi writes every piece of a body through it
        if self.command != "HEAD":
            super()._write(data)


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


def drain_budget(graceful: float, ladder: float) -> float:
    """Seconds a graceful stop may drain: what gunicorn's graceful timeout leaves once the children's stop
    ladder (and a margin, in `ladder`) is kept for after it; never negative."""
    return max(0.0, graceful - ladder)


class GatewayWorker(GeventPyWSGIWorker):  # type: ignore[misc]
    """gunicorn's gevent_pywsgi worker with the header parser above and the gateway's shutdown."""

    wsgi_handler = Handler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        from . import cluster  # where other instances reach this one, when it joins a cluster (-b included)

        cluster.LISTENING[:] = [listening_address(listener) for listener in self.sockets]
        self._shutdown: gevent.Greenlet | None = None

    def fleet(self) -> Fleet | None:
        extensions = getattr(self.wsgi, "extensions", {})  # the Flask app create_app() built
        fleet: Fleet | None = extensions.get("mcpgate.fleet")
        return fleet

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: drain, then gunicorn stops accepting and the gateway stops the children (the module's
        docstring). Out of the signal handler, so the shutdown may block."""
        if self._shutdown is None:
            self._shutdown = gevent.spawn(self.drain_then_stop, sig, frame)

    def drain_then_stop(self, sig: int, frame: Any) -> None:
        graceful = float(self.cfg.graceful_timeout)
        started = time.monotonic()
        fleet = self.fleet()
        try:
            if fleet is not None:
                s = fleet.settings
                self.drain(fleet, drain_budget(graceful, s.close_timeout + s.term_timeout + LADDER_GRACE))
        finally:
            super().handle_exit(sig, frame)  # gunicorn stops accepting
            self.shut_down(max(1.0, graceful - 2.0 - (time.monotonic() - started)))

    def drain(self, fleet: Fleet, budget: float) -> None:
        """Refuse new work and wait (at most `budget` seconds) until no request is in flight."""
        from .app import DRAINING

        extensions = getattr(self.wsgi, "extensions", {})
        extensions[DRAINING] = True
        gateways = [gateway for _name, gateway in fleet.items()]
        for gateway in gateways:
            gateway.closing = True
        cluster = extensions.get("mcpgate.cluster")
        if cluster is not None:
            # it stays in the directory while it drains: its sessions' requests and its parked calls' retries
            # are still forwarded here (new sessions are refused); it leaves when the drain ends
            cluster.draining = True
        busy = sum(gateway.in_flight() for gateway in gateways)
        self.log.info("mcpgate: draining (%d requests in flight, at most %.1f s)", busy, budget)
        deadline = time.monotonic() + budget
        while busy and time.monotonic() < deadline:
            gevent.sleep(DRAIN_POLL)
            busy = sum(gateway.in_flight() for gateway in gateways)
        if busy:
            self.log.warning("mcpgate: drain time is up with %d requests in flight; stopping", busy)
        if cluster is not None:
            cluster.directory.stop()  # out of the directory: nothing more is forwarded here

    def shut_down(self, timeout: float) -> None:
        self.release_connections()
        fleet = self.fleet()
        if fleet is not None:
            fleet.close(timeout=timeout)

    def release_connections(self) -> None:
        """Stop reading from every client connection: idle keep-alive ones close, replies still finish."""
        for sock in list(self.connections):
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass

    def run(self) -> None:
        fleet = self.fleet()
        settings = fleet.settings if fleet is not None else Settings.from_env()
        limits = Limits.of(settings, self.worker_connections)
        self.server_class = functools.partial(Server, connections=self.connections, limits=limits)
        try:
            super().run()
        finally:
            fleet = self.fleet()
            if fleet is not None:  # a last chance for children still alive (bounded)
                fleet.close(timeout=LAST_CHANCE_TIMEOUT)


def listening_address(listener: Any) -> str:
    """A gunicorn listener as "host:port" ("unix:/path" for a Unix socket)."""
    name = listener.sock.getsockname()
    if isinstance(name, str):
        return f"unix:{name}"
    host, port = name[0], name[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
