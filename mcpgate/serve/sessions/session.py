"""A session: one child process, its router, its HTTP streams and its buffer.

Messages from the child are routed by the pure core (mcpgate.core.routing)
and delivered to Stream objects, each the reply of one HTTP request: a POST's
reply or the session's GET stream. Every queue is bounded.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpgate.child.limits import ended_message
from mcpgate.core import jsonrpc, modern_rewrites, replay, session_ids
from mcpgate.core.cancel import CancelTracker
from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.core.replay import CannotResume, ReplayLog
from mcpgate.core.routing import BUFFER, DROP, PROGRESS, Router
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.core.versions import initialize_version
from mcpgate.observe import audit
from mcpgate.serve.modern import era_probe
from mcpgate.serve.servers import watchdog
from mcpgate.serve.sessions.held import Held
from mcpgate.serve.sessions.modern_bridge import ModernChildBridge, modern_only, remember_modern_only
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.sessions.stream import END as END
from mcpgate.serve.sessions.stream import SPARES, Pump, StreamLimits
from mcpgate.serve.sessions.stream import Delivery as Delivery
from mcpgate.serve.sessions.stream import End as End
from mcpgate.serve.sessions.stream import Stream as Stream

if TYPE_CHECKING:
    from mcpgate.core.views import View
    from mcpgate.serve.sessions.kept import Keeper

log = logging.getLogger("mcpgate.session")
_LF, _CR = ord("\n"), ord("\r")  # searched as ints: one memchr each (core/jsonrpc.py)


class Session:
    """One MCP session: the child, its routing state and where its messages go."""

    def __init__(
        self,
        session_id: str,
        owner: str,
        child: ChildSpec,
        *,
        buffer_messages: int,
        buffer_bytes: int,
        limits: StreamLimits,
        replay_streams: int,
        on_end: Callable[[Session, str], None],
        clock: Callable[[], float] = time.monotonic,
        verdict: era_probe.Key | None = None,
        view: View | None = None,  # the caller's, for a child made per view (a group's HubChild: serve/hub)
    ) -> None:
        self.id = session_id
        self.owner = owner  # the principal that opened it; only its requests find it
        # What logs show: enough to tell sessions apart, too little to use (the id is a capability).
        self.label = child.label_prefix + session_ids.short(session_id)
        self.child = child.process(
            on_message=self.on_child_message,
            on_exit=self.on_child_exit,
            label=self.label,
            principal=owner,
            on_revoke=self.end,  # a user secret it holds changed: the session ends, its requests told why
            **({"view": view} if view is not None else {}),
        )
        self.router: Router[Stream] = watchdog.router(child.limits, CancelTracker(ttl=60.0))
        self.held = Held(buffer_messages, buffer_bytes, self.label)  # messages no stream takes yet (held.py)
        self._limits = limits
        # Resumable streams by number, oldest first; at most `replay_streams` of them without a reader.
        self.tag = secrets.token_hex(4)  # names this session in its event ids (not derived from its id)
        self._resumable: dict[int, Stream] = {}
        self._stream_numbers = 0
        self._replay_streams = replay_streams
        self.version: str | None = None
        self.ended: str | None = None
        self._init_key: jsonrpc.IdKey | None = None
        self._on_end = on_end
        self._clock = clock
        self.tools: ToolFilter | None = None  # the server's tool lists (serve/sessions/streamable.py sets it)
        self.view = ""  # its caller's view's token at open ("": no views), kept for a takeover (serve/sessions/kept.py)
        self._tool_lists: set[jsonrpc.IdKey] = set()  # tools/list requests in flight, while there is a filter
        # A child that speaks only 2026-07-28 (remembered for its command, or found when it refuses initialize)
        # is spoken to through the bridge; `verdict` names the command (serve/pooled_child.verdict_key).
        self.verdict = verdict
        modern_child = verdict is not None and modern_only(verdict)
        self.bridge: ModernChildBridge | None = ModernChildBridge(self) if modern_child else None
        self._init_request: Request | None = None
        # a child that takes a message as it is (serve/remote's RemoteChild: no encoding for a parse to undo)
        self._take_message: Callable[[Request | Notification | Response], bool] | None = getattr(
            self.child, "send_message", None
        )
        self._pump: Pump | None = getattr(self.child, "pump", None)  # a child process's stdout, read by who waits

    def start(self) -> None:
        """Start the child (ChildSpawnError when it cannot be executed)."""
        self.child.start()
        watchdog.watch_session(self.child, self.router)

    # -- from the child -------------------------------------------------------------------------
    def on_child_message(self, message: Request | Notification | Response) -> None:
        if self.bridge is not None:
            self.bridge.from_child(message)
        elif self._init_request is None or not self._refused_as_modern(message):  # None: no handshake to refuse
            self.route(message)

    def _refused_as_modern(self, message: Request | Notification | Response) -> bool:
        """Whether the child refused the client's initialize as only a 2026-07-28 server does: it has answered, so
        it is asked server/discover on the same connection and bridged from then on."""
        if not isinstance(message, Response) or not message.is_error or self._init_request is None:
            return False
        if message.id is None or jsonrpc.id_key(message.id) != self._init_key:
            return False
        if not modern_rewrites.recognised_modern_error(message.full().get("error")):
            return False
        log.info("session %s: the child refused initialize as a 2026-07-28 server does; bridged", self.label)
        if self.verdict is not None:
            remember_modern_only(self.verdict, refused=True)
        self.bridge = ModernChildBridge(self)
        self.bridge.initialize(self._init_request, refused=True)
        return True

    def route(self, message: Request | Notification | Response) -> None:
        """Deliver a message for the client (the child's, or the bridge's on its behalf) where it belongs."""
        if isinstance(message, Response):
            if audit.LOG is not None:  # an audited request's answer: its line
                audit.LOG.answered(self, message)
            if self._tool_lists:
                message = self._without_hidden_tools(message)
            if self._init_key is not None:  # only until the handshake is answered
                self._answered_initialize(message)
        router = self.router
        # the time matters to a response for no request in flight (is it a cancelled one's, late?): with nothing
        # cancelled (nearly always) none is due, the clock's read spared
        route = router.route(message, self._clock() if router.cancelled.deadlines else 0.0)
        target = route.target
        if target is DROP:
            log.debug("session %s: dropped a message from the child: %s", self.label, route.reason)
            return
        raw = message.raw  # what raw_bytes gives for bytes the splitter vouched for, without its call
        data = raw if raw is not None and raw is message.bare else jsonrpc.raw_bytes(message)
        if target is BUFFER:
            self.held.append(data)
            return
        if target.deliver(data, route.done) or not target.closed:
            return
        # The stream was ended for not being read: forget it now, so what follows goes elsewhere (a message
        # that belongs to no request too, to the next stream or the buffer; its requests' go nowhere).
        self.close_stream(target)
        if not isinstance(message, Response) and message.method != PROGRESS:
            general = self.router.general_target()
            if general is BUFFER:
                self.held.append(data)
            else:
                general.deliver(data)

    def _answered_initialize(self, message: Response) -> None:
        """The child's answer to the client's initialize: the session's revision and its handshake, once."""
        if message.id is None or jsonrpc.id_key(message.id) != self._init_key:
            return
        result = message.full().get("result")  # decoded once (a large answer is read by its head alone)
        self.handshake = (self._init_request.params if self._init_request else None, result)
        self._init_key, self._init_request, self.version = None, None, initialize_version(result)

    def on_child_exit(self, reason: str) -> None:
        try:
            self.end(ended_message(reason, "MCP server process ended: "))
        finally:  # the bridge and its listens point back at the session: no reference cycle is left
            bridge, self.bridge = self.bridge, None
            if bridge is not None:
                bridge.listens.detach()

    # -- from the client ------------------------------------------------------------------------
    def open_stream(self, requests: Iterable[Request]) -> Stream:
        """A reply stream owed one response per request; registers the requests with the router."""
        pending = requests if isinstance(requests, list) else list(requests)
        if SPARES:  # one a reply is done with, as a new one (Stream.recycle)
            stream = SPARES.pop()
            stream.limits, stream.expected = self._limits, len(pending)
        else:
            stream = Stream(self._limits, len(pending))
        stream.pump = self._pump  # its reader reads the child's answers itself while it waits (child/stdout.py)
        self.add_requests(pending, stream)  # DuplicateRequestId: refused, it leaves nothing to undo
        self.router.open_streams[stream] = None  # router.open_stream's, without its call
        if self.held.messages:
            self.held.flush_to(stream)
        return stream

    def add_requests(self, requests: Iterable[Request], stream: Stream) -> None:
        """Send the responses to these requests to `stream` (DuplicateRequestId: none of them is registered)."""
        if isinstance(requests, list) and len(requests) == 1:  # the usual POST: refused, it leaves nothing to undo
            request = requests[0]
            self.router.open_request(request, stream)
            if self.tools is not None or request.method == "initialize":
                self._note(request)
            opened: list[Request] = requests
        else:
            opened = []
            try:
                for request in requests:
                    self.router.open_request(request, stream)
                    opened.append(request)
                    self._note(request)
            except Exception:
                for request in opened:
                    self.router.cancel(request.id, self._clock())
                    self._tool_lists.discard(jsonrpc.id_key(request.id))
                raise
        if audit.LOG is not None:
            audit.LOG.opened(self, opened)

    def _note(self, request: Request) -> None:
        """What the session remembers of a request it sends: the handshake's, and a tools/list's while tools hide."""
        if request.method == "initialize":
            self._init_key = jsonrpc.id_key(request.id)
            self._init_request = request
        elif self.tools is not None and request.method == "tools/list":  # its result loses the hidden tools
            self._tool_lists.add(jsonrpc.id_key(request.id))

    def _without_hidden_tools(self, message: Response) -> Response:
        """The response to a tools/list request in flight, without the hidden tools (its id is forgotten as the
        router forgets it: answered here, cancelled in `cancel`, so an id used again is never taken for it)."""
        if message.id is None or (key := jsonrpc.id_key(message.id)) not in self._tool_lists:
            return message
        self._tool_lists.discard(key)
        shown = self.tools.response(message) if self.tools is not None else message
        if shown is None:
            log.warning("session %s: a tools/list result could not be read; passed unchanged", self.label)
            return message
        return shown

    # The 2024-11-05 HTTP+SSE transport's one stream, when the session is one of that transport's.
    event_stream: Stream | None = None
    server: str = "default"  # the published server's name (the audit log's; serve/sessions/inbound.py sets it)
    keeper: Keeper | None = None  # where what a takeover replays is kept (serve/sessions/kept.py); inbound sets it
    # the search view's answer to a request, None when it is not the view's (serve/servers/search_view.py)
    search: Callable[[Request], dict[str, Any] | None] | None = None
    handshake: tuple[Any, Any] | None = None  # the client's initialize params and the child's result, once answered

    def open_event_stream(self) -> Stream | None:
        """The 2024-11-05 transport's stream: the session's GET stream, to which its clients' requests are
        added (add_requests), so every message of the session goes there; None when a GET stream is open."""
        self.event_stream = self.open_get_stream()
        return self.event_stream

    def open_get_stream(self) -> Stream | None:
        """The session's GET stream, or None when one is already open."""
        if self.router.get_stream is not None:
            return None
        stream = Stream(self._limits, get=True)
        self.router.get_stream = stream
        self.held.flush_to(stream)
        return stream

    def close_stream(self, stream: Stream) -> None:
        """The stream is done for good: nothing more goes to it and it cannot be resumed."""
        stream.close()
        self.router.close_stream(stream)
        if stream.number and self._resumable.get(stream.number) is stream:  # 0: never resumable
            del self._resumable[stream.number]

    def reply_sent(self, stream: Stream) -> None:
        """A POST's reply went whole as JSON: close_stream's, the stream kept for another reply when it is as a new
        one (Stream.recycle; never resumable: its reply was not SSE)."""
        self.router.open_streams.pop(stream, None)  # router.close_stream's for a POST's stream (never the GET one)
        stream.recycle()

    # -- resumable streams (Last-Event-ID) ----------------------------------------------------------
    def make_resumable(self, stream: Stream) -> None:
        """Give the stream event ids and a replay log (its reply is SSE on the Streamable HTTP endpoint)."""
        self._stream_numbers += 1
        stream.number = self._stream_numbers
        stream.log = ReplayLog(self._limits.replay_events, self._limits.replay_bytes)
        stream.id_prefix = f"{self.tag}-{stream.number}-"
        self._resumable[stream.number] = stream

    def release_stream(self, stream: Stream, reader: int) -> None:
        """`reader`'s connection ended. A resumable stream stays resumable: messages for its requests wait
        for a resume (a GET stream's go to the session buffer, for whichever stream opens next)."""
        if stream.log is None or stream.closed:
            self.close_stream(stream)
            return
        if reader != stream.reader:
            return  # a resume took the stream over already
        stream.reader = 0
        self.router.close_stream(stream)
        if stream.get:  # its unread messages are older than the buffer's: they go first, within its bounds
            self.held.put_first([item.data for item in stream.take_pending()])
        idle = [number for number, kept in self._resumable.items() if not kept.reader]
        for number in idle[: max(0, len(idle) - self._replay_streams)]:
            forgotten = self._resumable.pop(number)
            if forgotten.expected:
                log.warning(
                    "session %s: forgot a dropped stream still owed %d responses", self.label, forgotten.expected
                )
            forgotten.close()

    def resume(self, last_event_id: str) -> Resumed | CannotResume:
        """Attach a new reader to the stream a Last-Event-ID names, with what it missed."""
        logs = {number: kept.log for number, kept in self._resumable.items() if kept.log is not None}
        found = replay.resolve(last_event_id, self.tag, logs)
        if isinstance(found, CannotResume):
            return found
        stream = self._resumable[found.stream]
        if stream.get and self.router.get_stream not in (None, stream):
            return CannotResume("this session already has another GET stream open", conflict=True)
        missed = [(stream.id_prefix + str(seq), data) for seq, data in logs[found.stream].after(found.seq)]
        reader = stream.attach()
        if stream.get:
            self.router.get_stream = stream
            self.held.flush_to(stream)
        elif stream.expected:
            self.router.open_stream(stream)
        return Resumed(stream, reader, stream.id_prefix + str(found.seq), missed)

    def send(self, data: bytes) -> bool:
        return self.child.send(data)

    def unbridge(self) -> None:
        """The child the bridge spoke to answered as a legacy server: the client's messages go to it as they come."""
        self.bridge = None

    def send_message(self, message: Request | Notification | Response) -> bool:
        """A client's message for the child: as it came, or through the bridge to a 2026-07-28 child."""
        if self.bridge is not None:
            return self.bridge.from_client(message)
        if self._take_message is not None:
            return self._take_message(message)
        raw = message.raw  # raw_bytes' usual answer, without its call: the bytes as they came, when one line
        if raw is None or (raw is not message.bare and (_LF in raw or _CR in raw)):
            raw = jsonrpc.raw_bytes(message)
        return self.child.send(raw)

    def cancel(self, request_id: jsonrpc.Id) -> None:
        """The client cancelled a request: answer its HTTP request now; drop the child's late reply."""
        stream = self.router.cancel(request_id, self._clock())
        self._tool_lists.discard(jsonrpc.id_key(request_id))
        if audit.LOG is not None:
            audit.LOG.closed(self, request_id, jsonrpc.REQUEST_CANCELLED, audit.CANCELLED)
        if stream is not None:
            error = jsonrpc.error_response(request_id, jsonrpc.REQUEST_CANCELLED, "Request cancelled by the client")
            stream.deliver(jsonrpc.encode(error), done=True)

    def answer(self, request_id: jsonrpc.Id, response: dict[str, object]) -> None:
        """Answer a client's request in the child's stead (it was never forwarded); never waits."""
        if audit.LOG is not None:
            audit.LOG.answered(self, Response(request_id, response))
        route = self.router.route(Response(request_id, response), self._clock())
        if isinstance(route.target, Stream):
            route.target.deliver(jsonrpc.encode(response), done=True, force=True)

    def end(self, reason: str) -> None:
        """End the session once: fail every waiting request, close streams, stop the child."""
        if self.ended is not None:
            return
        self.ended = reason
        log.info("session %s ended: %s", self.label, reason)
        for request_id, stream in self.router.abandon_all():
            error = jsonrpc.error_response(request_id, jsonrpc.CONNECTION_CLOSED, f"Session ended: {reason}")
            stream.deliver(jsonrpc.encode(error), done=True, force=True)
        if audit.LOG is not None:
            audit.LOG.ended(self)
        if self.router.get_stream is not None:
            self.router.get_stream.end()
        self._resumable.clear()
        self.child.close(reason)
        self._on_end(self, reason)


@dataclass(frozen=True, slots=True)
class Resumed:
    """A resumed stream: its new reader's token, the id it resumed after, and the events sent since."""

    stream: Stream
    reader: int
    after: str
    missed: list[tuple[str, bytes]]
