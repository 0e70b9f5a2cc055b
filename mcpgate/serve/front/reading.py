"""A client connection's read side in the gateway's worker (mcpgate.serve.front.worker): the read deadlines, the
request body, and the budget of connections that wait on their client.

Deadlines (TimedReader): a head must arrive whole by its deadline; an idle keep-alive connection may pause so
long; a body may pause MCPGATE_BODY_TIMEOUT between bytes and must arrive whole within MCPGATE_BODY_TIMEOUT
plus a second per MCPGATE_BODY_MIN_RATE bytes received (so a body trickled a byte at a time ends, whatever its
declared length). A read past its deadline fails with ReadTimeout, which pywsgi answers with 400 (when nothing
was sent yet) and a closed connection.

The body (Body, the environ's wsgi.input): pywsgi's reader of a Content-Length or chunked body, which tells
its connection when the body has been read whole, and never drains one the application left unread: that
connection is closed after its reply instead (a refusal is never held open by the body it refused).

The budget (Waiting): the connections waiting on their client (for a head, or for the rest of a body) are
counted, longest-waiting first; one more past the budget closes the longest-waiting one, so sockets that send
slowly or nothing never take the slots of requests being answered and streams.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gevent.pywsgi import Input, _InvalidClientInput
from gevent.socket import socket as PLAIN_SOCKET

from mcpgate.config.settings import Settings
from mcpgate.observe import refusals


@dataclass(frozen=True)
class Limits:
    """A connection's read limits (the deadlines and the budget above), from the settings."""

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


class ReadTimeout(_InvalidClientInput):  # type: ignore[misc]
    """A client too slow to read from: pywsgi closes the connection (with 400 when nothing was sent yet)."""


class BodyEnded(_InvalidClientInput):  # type: ignore[misc]
    """The client closed its connection (or was closed) before its body was whole: one log line, not a trace."""


def _ended(exc: OSError) -> OSError:
    """What a body's read raises for an OSError: a socket's own error (an errno) as it is, pywsgi knows those;
    pywsgi's "unexpected end of file" (no errno), the client gone mid-body, as BodyEnded."""
    return exc if exc.errno is not None else BodyEnded(str(exc))


class TimedReader(io.RawIOBase):
    """A connection's read side, with a deadline on each wait: a head must arrive by its deadline (`within`), an
    idle connection may pause `pausing` seconds, a body both (`body`). No timer per read: a read records when its
    wait must end, and the server's sweeper (twice a second) ends the waits that overran by shutting the
    socket's read side; the read then fails, and every later one at once."""

    # slots: an attribute of an io.RawIOBase subclass is read and set through its C base's dict at about ten times
    # the cost of a slot's (CPython 3.11 does not specialize it), and a request reads and sets a dozen
    __slots__ = (
        "deadline",
        "failed",
        "idle",
        "pause",
        "poller",
        "rate",
        "raw",
        "reason",
        "shut",
        "sock",
        "waiting_until",
    )

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        # gevent's plain socket: its own non-blocking socket is read directly, gevent's wait only when nothing is
        # there (what gevent's recv_into does, without its frames); any other (TLS) is read through its own methods
        self.raw: Any = sock._sock if type(sock) is PLAIN_SOCKET else None  # type: ignore[attr-defined]
        self.shut = False  # closed (IOBase.closed asks the MRO for a private name: a flag is read at once)
        self.pause: float | None = None
        self.deadline: float | None = None
        self.rate = 0.0  # bytes a second: each byte received moves the deadline 1/rate s later (0: it stays)
        self.waiting_until: float | None = None  # while a read waits: when it must have ended
        self.failed = False
        self.reason = "timed out"  # what a failed read says (an evicted connection's: refusals.EVICTED)
        # The first read of a kept-alive connection's next request (`idle`, set by its keep-alive loop right after a
        # reply and cleared by that read) asks `poller` (the connection's poll object of the socket, when it has
        # one: connection.py) whether anything is there before trying the socket: most often nothing is yet (the
        # client has just been answered), and the socket's try would fail with a BlockingIOError (a system call and
        # an exception made and caught: ~8,000 instructions against a poll's ~1,850, callgrind). Ready or not, what
        # is read and when is as without it (tests/serve/test_idle_read.py).
        self.idle = False
        self.poller: Any = None

    # within and pausing set the three fields a read's deadline is made of; the connection's keep-alive loop sets
    # them itself as these do (connection.py: handle_one_request, body_read), a call less each on every request
    def within(self, seconds: float) -> None:
        self.pause, self.deadline, self.rate = None, time.monotonic() + seconds, 0.0

    def pausing(self, seconds: float) -> None:
        self.pause, self.deadline, self.rate = seconds, None, 0.0

    def body(self, pause: float, rate: float) -> None:
        """A body: `pause` seconds between bytes, and whole within `pause` plus a second per `rate` bytes."""
        self.pause, self.deadline, self.rate = pause, time.monotonic() + pause, rate

    def readable(self) -> bool:
        return True

    def fail(self, reason: str = "timed out") -> None:
        """End the current wait and every later read (a timeout, or the connection evicted)."""
        if not self.failed:
            self.reason = reason
        self.failed = True
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def recv_into(self, buffer: Any) -> int:
        """The socket's recv_into: gevent's, for a plain socket without its Python frames (try, wait while the
        socket has nothing, try again; a socket in non-blocking mode raises instead of waiting, as gevent's)."""
        raw = self.raw
        if raw is None:
            return self.sock.recv_into(buffer)
        if self.idle:
            self.idle = False
            if self.poller is not None and not self.poller.poll(0):  # nothing there: wait first (gevent's after a try)
                sock: Any = self.sock
                if sock.timeout != 0.0:
                    sock._wait(sock._read_event)
        while True:
            try:
                return raw.recv_into(buffer)  # type: ignore[no-any-return]
            except BlockingIOError:
                sock = self.sock
                if sock.timeout == 0.0:
                    raise
            sock._wait(sock._read_event)

    def close(self) -> None:
        self.shut = True
        super().close()

    def overran(self, now: float) -> bool:
        """Called by the sweeper: a wait past its end is ended (True when this one was)."""
        if self.waiting_until is None or now < self.waiting_until or self.failed:
            return False
        self.fail()
        return True

    def readinto(self, buffer: Any) -> int:
        if self.failed:
            raise ReadTimeout(self.reason)
        now = time.monotonic()
        until = self.deadline
        if self.pause is not None and (until is None or now + self.pause < until):
            until = now + self.pause
        if until is not None and until <= now:
            self.failed = True
            raise ReadTimeout(self.reason)
        self.waiting_until = until
        try:
            count = self.recv_into(buffer)
        except OSError:  # gevent cancels the wait when `fail` shuts the read side (cancel_wait_ex, EBADF)
            if self.failed:
                raise ReadTimeout(self.reason) from None
            raise
        finally:
            self.waiting_until = None
        if self.failed:
            raise ReadTimeout(self.reason)
        if self.rate and self.deadline is not None:
            self.deadline += count / self.rate
        return count


class Reading(Protocol):
    """What a Body tells its connection (the worker's Handler)."""

    close_connection: bool

    def body_read(self) -> None: ...


class Body(Input):  # type: ignore[misc]
    """wsgi.input: pywsgi's body reader (Content-Length or chunked, 100-continue on the first read) that tells its
    connection once the body is whole, and leaves a body the application did not read whole unread: pywsgi's
    drain (`_discard`) closes the connection after the reply instead. Built as pywsgi's Input is; its
    `connection` is set right after."""

    __slots__ = ("connection", "done")
    connection: Reading
    done: bool  # `whole` as last seen: set by the connection when the body is made, then by each read

    @property
    def whole(self) -> bool:
        """Whether every byte of the body has been read (a request without one: at once)."""
        if self.chunked_input:  # the last chunk and its trailer are read (an error ends at 0 too)
            return self.chunk_length == 0 and not self._chunked_input_error
        return self.position >= (self.content_length or 0)  # type: ignore[no-any-return]

    def read(self, length: int | None = None) -> bytes:
        if self.chunked_input or self.socket is not None or length is None or length < 0:
            return self._read_any(length)
        # pywsgi's read of a Content-Length body with no 100-continue to send (Input._do_read), `whole` with it
        data = b""
        content_length = self.content_length
        if content_length is not None:
            length = min(length, content_length - self.position)
            if length > 0:
                try:
                    data = self.rfile.read(length)
                except _InvalidClientInput:
                    raise
                except OSError as exc:
                    raise _ended(exc) from None
                self.position += len(data)
                if len(data) < length:
                    raise BodyEnded(f"unexpected end of file while reading request at position {self.position}")
        if self.position >= (content_length or 0):
            self.done = True
            self.connection.body_read()
        return data

    def _read_any(self, length: int | None) -> bytes:
        """read() of any body: a chunked one, one with 100-continue to send, or read to its end."""
        return self._through_pywsgi(super().read, length)

    def readline(self, size: int | None = None) -> bytes:
        return self._through_pywsgi(super().readline, size)

    def _through_pywsgi(self, reading: Callable[[int | None], bytes], size: int | None) -> bytes:
        """pywsgi's own read or readline, its end of file mid-body told as BodyEnded, `whole` noted after it."""
        try:
            data = reading(size)
        except _InvalidClientInput:
            raise
        except OSError as exc:
            raise _ended(exc) from None
        if self.whole:
            self.done = True
            self.connection.body_read()
        return data

    def _discard(self) -> None:
        """After the reply: a body not read whole is never read on (pywsgi would read it to its end, at the
        client's pace); the connection closes instead."""
        if not self.done:
            self.connection.close_connection = True


class Evictable(Protocol):
    def evict(self) -> None: ...


class Waiting:
    """The connections waiting on their client (a head, or the rest of a body), longest-waiting first, at most
    `budget` of them: one more closes the longest-waiting."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.connections: dict[Evictable, None] = {}

    def enter(self, connection: Evictable) -> None:
        self.connections.pop(connection, None)
        while len(self.connections) >= self.budget:
            oldest = next(iter(self.connections))
            del self.connections[oldest]
            oldest.evict()
            refusals.refused(refusals.CONNECTION_BUDGET, getattr(oldest, "client_address", None), None)
        self.connections[connection] = None

    def leave(self, connection: Evictable) -> None:
        self.connections.pop(connection, None)
