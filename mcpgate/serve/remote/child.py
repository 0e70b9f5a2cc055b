"""RemoteChild: one upstream connection of a remote server, in the worker, with a ChildProcess's surface.

Sessions and the pool talk to a child through send() (one encoded message), on_message (each message it sends)
and on_exit (its end, once); a session hands a message it has parsed to send_message(), which skips the
encoding and the parse again when the relay's reader waits. A RemoteChild runs the relay's pump for a host in
the same process (relay/in_process.py's InProcessRelay) over a pair of in-memory pipes instead of stdio: what
send() queues is the relay's stdin, every message the relay writes is handed to on_message. So the relay's rules
hold unchanged: a greenlet per request in flight, at most max_inflight at once (more wait in a bounded queue,
and while it is full the input is not read), notifications in order, a cancelled request's late reply dropped,
the upstream's 404 answered by a new session (the client's initialize replayed). One RemoteChild is one upstream
session (a 2025 client session's own; a pooled child's for 2026-07-28 calls, stateless when the upstream speaks
2026-07-28).

There is no process: `pid` is None and nothing is ever signalled; `limits` is None (a remote server's
request_timeout is the transport's: serve/remote/transport.py). send() never blocks: past
max_write_queue_bytes unread, the child ends ("write queue full"), as a stdio child does. close() ends the
input and stops the relay: it drains (at most the server's close_timeout), ends the upstream session (DELETE on 2025
Streamable HTTP), and on_exit runs once; then the owner's callbacks, the pipes' way back and the relay are
dropped, so an ended child and its owner leave no reference cycle.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

import gevent
import gevent.event

from mcpgate.child.limits import Usage
from mcpgate.child.process import WRITE_QUEUE_FULL, OnMessage
from mcpgate.child.waits import wait_set
from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Batch, Notification, Request, Response
from mcpgate.relay import errors
from mcpgate.relay.host_writer import Out
from mcpgate.relay.http_client import HttpClient
from mcpgate.relay.in_process import InProcessRelay
from mcpgate.relay.pump import PumpOptions
from mcpgate.relay.transport import Sink, Transport, Upstream
from mcpgate.serve.servers.remote_entry import RemoteEntry

log = logging.getLogger("mcpgate.remote")


class Source(Protocol):
    """What a RemoteChild is made from (serve/remote/spec.py's RemoteSpec), read-only."""

    @property
    def remote(self) -> RemoteEntry: ...
    @property
    def close_timeout(self) -> float: ...
    @property
    def close_grace(self) -> float: ...
    @property
    def max_line_bytes(self) -> int: ...
    @property
    def max_write_queue_bytes(self) -> int: ...
    @property
    def pump_options(self) -> PumpOptions: ...

    def http_client(self) -> HttpClient: ...

    def transport(self, http: HttpClient, sink: Sink) -> Transport: ...


class MemoryPipes:
    """The relay's stdin and stdout in memory: `put` feeds the input; what the relay writes goes to `deliver` as
    messages (write_messages: the relay's MessagePipes), or lines parsed (write_all)."""

    def __init__(self, deliver: Callable[[Upstream], None]) -> None:
        self._input: deque[bytes] = deque()
        self._arrived = gevent.event.Event()
        self._ended = False
        self._waiting = False  # the relay's reader waits in read() on empty input
        self.queued = 0  # bytes put and not read yet
        self._deliver = deliver

    @property
    def idle(self) -> bool:
        """Whether the relay's reader waits for input with none unread (a line may go to InProcessRelay.take_line)."""
        return self._waiting and not self._input and not self._ended

    def put(self, data: bytes) -> None:
        self._input.append(data)
        self.queued += len(data)
        self._arrived.set()

    def end(self) -> None:
        self._ended = True
        self._arrived.set()

    def read(self) -> bytes:
        while not self._input:
            if self._ended:
                return b""
            self._arrived.clear()
            self._waiting = True
            try:
                self._arrived.wait()
            finally:
                self._waiting = False
        data = b"".join(self._input)
        self._input.clear()
        self.queued = 0
        return data

    def write_all(self, data: bytes) -> None:
        bare = 13 not in data  # CR as an int: one memchr for every line (LineDecoder.bare's word: passed on unsearched)
        for line in data.split(b"\n")[:-1]:  # the relay writes whole lines only
            self._lines(line, bare)

    def write_messages(self, items: list[Out]) -> None:
        for item in items:
            if isinstance(item, bytes):
                self._lines(item, 13 not in item and 10 not in item)  # CR, LF as ints
            else:
                self._deliver(item)

    def _lines(self, line: bytes, bare: bool) -> None:
        """A line the relay made (its own errors; `bare`: it holds no CR or LF): its message(s)."""
        message = jsonrpc.parse_line(line, bare=bare)
        for member in message.items if isinstance(message, Batch) else [message]:
            if isinstance(member, (Request, Notification, Response)):
                self._deliver(member)
            else:
                log.warning("remote: dropped an invalid message from the relay")

    def restore(self) -> None:
        pass

    def release(self) -> None:
        """The relay has ended: drop the way to the owner and what is unread (no reference cycle is left)."""
        self._deliver = _dropped
        self._input.clear()
        self.queued = 0


class RemoteChild:
    """One upstream session of a remote server; see the module docstring."""

    pid: int | None = None
    returncode: int | None = None
    limits = None  # no process limits: a remote server's request_timeout is its transport's
    user = None

    def __init__(self, spec: Source, *, on_message: OnMessage, on_exit: Callable[[str], None], label: str) -> None:
        self.spec, self.label = spec, label
        self.argv = [spec.remote.url]
        self.close_timeout, self.term_timeout = spec.close_timeout, 0.0  # the drain at its end; no signal ladder
        self.max_line_bytes, self.max_write_queue_bytes = spec.max_line_bytes, spec.max_write_queue_bytes
        self._on_message, self._on_exit = on_message, on_exit
        self.usage = Usage()
        self.exit_reason: str | None = None
        self.end_cause = ""  # "stopped" (ended on purpose) or "crash" (its relay failed, its queue overflowed)
        self._pipes = MemoryPipes(self._message)
        self._relay: InProcessRelay | None = None
        self._greenlet: gevent.Greenlet | None = None
        self._closing = False
        self._reason: str | None = None
        self._cause = "stopped"
        self._done = gevent.event.Event()

    @property
    def alive(self) -> bool:
        """Started and not shutting down (send() would accept)."""
        return self._greenlet is not None and not self._closing

    def start(self) -> None:
        """Start relaying (the upstream is first reached by the first message sent)."""
        if self._greenlet is not None or self._closing:
            raise RuntimeError("RemoteChild can be started once, and not after close()")
        http = self.spec.http_client()
        self._relay = InProcessRelay(lambda sink: self.spec.transport(http, sink), self.spec.pump_options)
        self._greenlet = gevent.spawn(self._run, self._relay, http)
        log.info("child[%s] started: remote %s", self.label, errors.redact(self.spec.remote.url))

    def send(self, data: bytes) -> bool:
        """Queue one encoded message (no trailing newline); never blocks. False if refused."""
        if not self._room_for(data):
            return False
        relay = self._relay
        if relay is not None and self._pipes.idle and relay.take_line(data):
            return True  # handled as the relay's reader would, without waking it
        self._pipes.put(data + b"\n")
        return True

    def send_message(self, message: Request | Notification | Response) -> bool:
        """send() of a message the session has parsed: to the relay as it is when its reader waits (neither
        encoded nor parsed again), else its bytes queued."""
        data = jsonrpc.raw_bytes(message)
        if not self._room_for(data):
            return False
        relay = self._relay
        if relay is not None and self._pipes.idle and relay.take_message(message, len(data)):
            return True
        self._pipes.put(data + b"\n")
        return True

    def _room_for(self, data: bytes) -> bool:
        """Whether send() may take `data`: the child is alive and its unread input stays within
        max_write_queue_bytes (past it, the child ends)."""
        if not self.alive:
            return False
        if self._pipes.queued + len(data) + 1 > self.spec.max_write_queue_bytes:
            log.warning("child[%s] remote: write queue full (%d bytes unread); closing", self.label, self._pipes.queued)
            self.close(WRITE_QUEUE_FULL, cause="crash")
            return False
        return True

    def close(self, reason: str, cause: str = "stopped") -> None:
        """End the upstream session in a greenlet; idempotent, never blocks."""
        if self._closing:
            return
        self._closing = True
        self._reason, self._cause = reason, cause
        if self._greenlet is None:
            self.exit_reason, self.end_cause = reason, cause
            self._release()
            self._done.set()
            return
        log.info("child[%s] closing remote: %s", self.label, reason)
        self._pipes.end()
        if self._relay is not None:  # at once, even with its input reader waiting for a place (a full queue)
            self._relay.stop()

    def stop(self, reason: str, timeout: float | None = None, cause: str = "stopped") -> bool:
        """close() and wait until finished; True if on_exit ran."""
        self.close(reason, cause)
        if timeout is None:
            timeout = self.spec.pump_options.shutdown_grace + self.spec.close_grace
        return self.join(timeout)

    def join(self, timeout: float) -> bool:
        return wait_set(self._done, timeout)

    def _run(self, relay: InProcessRelay, http: HttpClient) -> None:
        try:
            relay.serve(self._pipes)
        except Exception as exc:  # the relay's own failure: the child ends as a crashed one does
            log.exception("child[%s] remote relay failed", self.label)
            if self._reason is None:
                self._reason, self._cause = f"the remote relay failed: {exc!r}"[:300], "crash"
        finally:
            self._closing = True
            http.close()
            self._finish()

    def _finish(self) -> None:
        reason = self._reason if self._reason is not None else "the remote relay ended"
        self.exit_reason, self.end_cause = reason, self._cause
        log.info("child[%s] remote ended (reason: %s)", self.label, reason)
        try:
            self._on_exit(reason)
        except Exception:  # a callback's failure must not stop the end
            log.exception("child[%s] on_exit callback failed", self.label)
        finally:
            self._release()
            self._done.set()

    def _release(self) -> None:
        """Ended (on_exit has run) or closed before it started: drop the owner's callbacks, the pipes' way back
        to this child and the relay, so the child and its owner (a session, a hub's member) leave no reference
        cycle."""
        self._on_message, self._on_exit = _dropped, _dropped
        self._pipes.release()
        self._relay = None

    def _message(self, message: Upstream) -> None:
        """One message the relay wrote, to on_message."""
        try:
            self._on_message(message)
        except Exception:  # a callback's failure must not stop the relay's writer
            log.exception("child[%s] on_message callback failed", self.label)


def _dropped(_what: object) -> None:
    """An ended child's on_message and on_exit, and its pipes' way back: it has no owner any more."""
