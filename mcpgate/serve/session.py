"""A session: one child process, its router, its HTTP streams and its buffer.

Messages from the child are routed by the pure core (mcpgate.core.routing)
and delivered to Stream objects, each the reply of one HTTP request: a POST's
reply or the session's GET stream. Every queue is bounded.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import gevent.queue

from ..child import ChildProcess, OnMessage
from ..core import jsonrpc
from ..core.cancel import CancelTracker
from ..core.jsonrpc import Notification, Request, Response
from ..core.routing import BUFFER, DROP, Router
from ..core.versions import initialize_version

log = logging.getLogger("mcpgate.session")


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message for a stream's reader."""

    data: bytes
    done: bool = False  # a response: one of the stream's requests is answered


class End(enum.Enum):
    """The stream's reader is asked to finish (a sentinel, so it can never be taken for a message)."""

    END = "end"


END: Final = End.END


@dataclass(frozen=True)
class ChildSpec:
    """What a session's child is started from: the command, where it runs, and its limits."""

    argv: tuple[str, ...]
    env: dict[str, str] | None
    cwd: str | None
    stderr: str
    max_line_bytes: int
    max_write_queue_bytes: int
    close_timeout: float
    term_timeout: float

    def process(self, *, on_message: OnMessage, on_exit: Callable[[str], None], label: str) -> ChildProcess:
        """A ChildProcess for this spec, not started yet."""
        return ChildProcess(
            list(self.argv),
            on_message=on_message,
            on_exit=on_exit,
            env=self.env,
            cwd=self.cwd,
            stderr=self.stderr,
            label=label,
            max_line_bytes=self.max_line_bytes,
            max_write_queue_bytes=self.max_write_queue_bytes,
            close_timeout=self.close_timeout,
            term_timeout=self.term_timeout,
        )


class Stream:
    """The reply channel of one HTTP request (a POST's reply or the GET stream)."""

    __slots__ = ("closed", "expected", "put_timeout", "queue")

    def __init__(self, maxsize: int, expected: int = 0, put_timeout: float = 30.0) -> None:
        self.queue: gevent.queue.Queue = gevent.queue.Queue(maxsize)
        self.expected = expected  # responses still owed to this stream
        self.closed = False
        self.put_timeout = put_timeout

    def deliver(self, data: bytes, done: bool = False) -> bool:
        """Queue one message; waits while the client reads too slowly, then gives up on the stream."""
        if self.closed:
            return False
        try:
            self.queue.put(Delivery(data, done), timeout=self.put_timeout)
            return True
        except gevent.queue.Full:
            log.warning("a client stopped reading its stream; closing the stream")
            self.closed = True
            return False

    def end(self) -> None:
        """Ask the stream's reader to finish (never blocks)."""
        if not self.closed:
            try:
                self.queue.put_nowait(END)
            except gevent.queue.Full:
                self.closed = True

    def next(self, timeout: float | None) -> Delivery | End | None:
        """The next message, END when the stream is ended, or None when `timeout` passes first."""
        try:
            return self.queue.get(timeout=timeout)  # type: ignore[no-any-return]
        except gevent.queue.Empty:
            return None


class Session:
    """One MCP session: the child, its routing state and where its messages go."""

    def __init__(
        self,
        session_id: str,
        child: ChildSpec,
        *,
        buffer_messages: int,
        stream_queue: int,
        on_end: Callable[[Session, str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.id = session_id
        # What logs show: enough to tell sessions apart, too little to use (the id is a capability).
        self.label = session_id[:8]
        self.child = child.process(on_message=self.on_child_message, on_exit=self.on_child_exit, label=self.label)
        self.router: Router[Stream] = Router(CancelTracker(ttl=60.0))
        self.buffer: deque[bytes] = deque(maxlen=buffer_messages)
        # Room for a whole flushed buffer on top of the stream's own bound, so a flush never waits.
        self._stream_bound = stream_queue + buffer_messages
        self.version: str | None = None
        self.ended: str | None = None
        self._init_key: jsonrpc.IdKey | None = None
        self._on_end = on_end
        self._clock = clock

    def start(self) -> None:
        """Start the child (ChildSpawnError when it cannot be executed)."""
        self.child.start()

    # -- from the child -------------------------------------------------------------------------
    def on_child_message(self, message: Request | Notification | Response) -> None:
        if (
            isinstance(message, Response)
            and self._init_key is not None
            and message.id is not None
            and jsonrpc.id_key(message.id) == self._init_key
        ):
            self._init_key = None
            self.version = initialize_version(message.full().get("result"))
        route = self.router.route(message, self._clock())
        if route.target is DROP:
            log.debug("session %s: dropped a message from the child: %s", self.label, route.reason)
            return
        data = jsonrpc.raw_bytes(message)
        if route.target is BUFFER:
            if len(self.buffer) == self.buffer.maxlen:
                log.warning(
                    "session %s: no stream open and the buffer is full; dropping its oldest message", self.label
                )
            self.buffer.append(data)
            return
        route.target.deliver(data, route.done)

    def on_child_exit(self, reason: str) -> None:
        self.end(f"MCP server process ended: {reason}")

    # -- from the client ------------------------------------------------------------------------
    def open_stream(self, requests: Iterable[Request]) -> Stream:
        """A reply stream owed one response per request; registers the requests with the router."""
        pending = list(requests)
        stream = Stream(self._stream_bound, expected=len(pending))
        self.add_requests(pending, stream)
        self.router.open_stream(stream)
        self._flush_buffer_to(stream)
        return stream

    def add_requests(self, requests: Iterable[Request], stream: Stream) -> None:
        """Send the responses to these requests to `stream` (DuplicateRequestId: none of them is registered)."""
        opened: list[Request] = []
        try:
            for request in requests:
                self.router.open_request(request, stream)
                opened.append(request)
                if request.method == "initialize":
                    self._init_key = jsonrpc.id_key(request.id)
        except Exception:
            for request in opened:
                self.router.cancel(request.id, self._clock())
            raise

    # The 2024-11-05 HTTP+SSE transport's one stream, when the session is one of that transport's.
    event_stream: Stream | None = None

    def open_event_stream(self) -> Stream | None:
        """The 2024-11-05 transport's stream: the session's GET stream, to which its clients' requests are
        added (add_requests), so every message of the session goes there; None when a GET stream is open."""
        self.event_stream = self.open_get_stream()
        return self.event_stream

    def open_get_stream(self) -> Stream | None:
        """The session's GET stream, or None when one is already open."""
        if self.router.get_stream is not None:
            return None
        stream = Stream(self._stream_bound)
        self.router.get_stream = stream
        self._flush_buffer_to(stream)
        return stream

    def close_stream(self, stream: Stream) -> None:
        stream.closed = True
        self.router.close_stream(stream)

    def send(self, data: bytes) -> bool:
        return self.child.send(data)

    def cancel(self, request_id: jsonrpc.Id) -> None:
        """The client cancelled a request: answer its HTTP request now; drop the child's late reply."""
        stream = self.router.cancel(request_id, self._clock())
        if stream is not None:
            error = jsonrpc.error_response(request_id, jsonrpc.REQUEST_CANCELLED, "Request cancelled by the client")
            stream.deliver(jsonrpc.encode(error), done=True)

    def end(self, reason: str) -> None:
        """End the session once: fail every waiting request, close streams, stop the child."""
        if self.ended is not None:
            return
        self.ended = reason
        log.info("session %s ended: %s", self.label, reason)
        for request_id, stream in self.router.abandon_all():
            error = jsonrpc.error_response(request_id, jsonrpc.CONNECTION_CLOSED, f"Session ended: {reason}")
            stream.deliver(jsonrpc.encode(error), done=True)
        if self.router.get_stream is not None:
            self.router.get_stream.end()
        self.child.close(reason)
        self._on_end(self, reason)

    def _flush_buffer_to(self, stream: Stream) -> None:
        while self.buffer:
            stream.deliver(self.buffer.popleft())
