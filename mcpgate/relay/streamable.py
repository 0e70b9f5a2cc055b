"""Streamable HTTP client transport (2025-03-26 .. 2025-11-25 sessions).

Each host request is its own POST; the reply is one JSON object or an SSE
stream that may carry notifications and server requests before the response.
The session id from the initialize reply goes on every later request, and
MCP-Protocol-Version too when versions.sends_version_header() says so. After
`notifications/initialized` a GET stream carries server-initiated messages (the host's next
request waits, bounded, until it is open: get_stream.py says why). A
404 on a request that carried a session id starts a new session by replaying the
host's initialize and initialized; the failed request is then sent once more.
"""

from __future__ import annotations

import logging

import gevent
from gevent.event import AsyncResult
from gevent.lock import Semaphore
from gevent.pool import Group

from mcpgate.core import jsonrpc, versions, wire
from mcpgate.core.sessions import is_valid_session_id
from mcpgate.core.sse import SseDecoder
from mcpgate.relay import errors
from mcpgate.relay.get_stream import GetStream
from mcpgate.relay.handshake import Handshake, check_replayed, is_initialized
from mcpgate.relay.http_client import JSON_TYPE, SSE_TYPE, EventStream, HttpClient, HttpReply, content_type
from mcpgate.relay.transport import (
    OneWay,
    ReplyWaiters,
    Sink,
    Upstream,
    decode_upstream,
    is_reply_to,
    json_reply,
    should_fall_back,
)

log = logging.getLogger("mcpgate.relay")

ACCEPT_BOTH = f"{JSON_TYPE}, {SSE_TYPE}"
MAX_RESUMES = 10
TAIL_SECONDS = 5.0
DELETE_TIMEOUT = 3.0


class StreamableTransport:
    def __init__(self, url: str, http: HttpClient, sink: Sink, probe: bool = False) -> None:
        self.url, self.http, self.sink = url, http, sink
        self.probe = probe
        self.session_id: str | None = None
        self.version: str | None = None
        self.started = False  # an initialize has succeeded: a session (or a stateless server's "none") exists
        self._host_handshake = Handshake()
        self._recovery = Semaphore()
        self._waiters = ReplyWaiters()
        self._get_stream = GetStream(self)
        # Short-lived helpers (reply tails, DELETEs of replaced sessions, recoveries), killed at close.
        self._background = Group()
        self.closing = False

    def headers(self, accept: str | None, body: bool) -> dict[str, str]:
        headers: dict[str, str] = {}
        if accept:
            headers["Accept"] = accept
        if body:
            headers["Content-Type"] = JSON_TYPE
        if self.session_id:
            headers[wire.SESSION_ID] = self.session_id
        if self.version is not None and versions.sends_version_header(self.version):
            headers[wire.PROTOCOL_VERSION] = self.version
        return headers

    # -- requests ---------------------------------------------------------------------------

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        if req.method == "initialize":
            self._host_handshake.remember(req)
            return self._handshake(req)
        try:
            return self._exchange(req)
        except errors.SessionExpired as expired:
            self.recover(expired.session_id)
            log.info("resending %s (id %r) on the new session", req.method, req.id)
            return self._exchange(req)

    def _exchange(self, req: jsonrpc.Request) -> jsonrpc.Response:
        """POST a request and read its reply; a lost reply is retried only when replay-safe."""
        safe = errors.is_replay_safe(req.method)
        attempts = self.http.options.tries if safe else 1
        for attempt in range(1, attempts + 1):
            try:
                return self._post_request(req, safe)
            except errors.ReplyLost as lost:
                if attempt >= attempts:
                    raise
                log.info("%s reply lost (%s); sending it again", req.method, lost.message)
                gevent.sleep(self.http.backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _post_request(self, req: jsonrpc.Request, safe: bool) -> jsonrpc.Response:
        with self._waiters.expect(req.id) as waiter:
            sid = self.session_id
            resp = self.http.send(
                "POST", self.url, self.headers(ACCEPT_BOTH, True), jsonrpc.raw_bytes(req), replay_safe=safe
            )
            return self._reply(req, resp, sid, waiter)

    def _reply(self, req: jsonrpc.Request, resp: HttpReply, sid: str | None, waiter: AsyncResult) -> jsonrpc.Response:
        status = resp.status_code
        if status == 404 and sid:
            resp.close()
            raise errors.SessionExpired(sid)
        if not 200 <= status < 300:
            error = self.http.error_for(resp, self.url)
            raise error.refused_before_session() if sid is None and not self.started else error
        if status == 202:
            resp.close()
            return self._await_elsewhere(req, waiter)
        kind = content_type(resp)
        if kind == SSE_TYPE:
            return self._read_stream(req, resp, waiter)
        try:
            if kind != JSON_TYPE:
                raise errors.InvalidUpstream(f"upstream replied with unexpected Content-Type {kind!r}")
            return self._read_json(req, self.http.read_body(resp, self.url))
        finally:
            self.http.done(resp)

    def _read_json(self, req: jsonrpc.Request, body: bytes) -> jsonrpc.Response:
        return json_reply(req, body, self.route)

    def _await_elsewhere(self, req: jsonrpc.Request, waiter: AsyncResult) -> jsonrpc.Response:
        """202 to a request: its reply will come on the GET stream."""
        self._get_stream.start()
        try:
            reply: jsonrpc.Response = waiter.get(timeout=self.http.options.read_timeout)
        except gevent.Timeout:
            raise errors.MaybeSent(
                f"upstream accepted {req.method} (HTTP 202) but no reply arrived "
                f"within {self.http.options.read_timeout:g}s"
            ) from None
        return reply

    def _read_stream(self, req: jsonrpc.Request, resp: HttpReply, waiter: AsyncResult) -> jsonrpc.Response:
        stream = self.http.events(resp, self.http.new_decoder(), self.url)
        reply = None
        try:
            reply = self._consume(req, resp, stream, waiter)
        finally:
            if reply is None or waiter.ready():  # no reply, or it came on another stream: this one is cut
                resp.close()
            elif stream.ended_now():  # the usual end, here with the response: the connection goes back now
                self.http.done(resp)
            else:
                self._background.spawn(self._read_tail, resp, stream)
        return reply if reply is not None else self._resume(req, stream.decoder, waiter)

    def _read_tail(self, resp: HttpReply, stream: EventStream) -> None:
        """After the response the server ends the stream: read on to that end (routing anything else that
        comes, what came with the response first), so the connection goes back to the pool instead of being
        closed."""
        try:
            with gevent.Timeout(TAIL_SECONDS, False):
                for event in stream:
                    for message in decode_upstream(event.data.encode("utf-8")) if event.data else []:
                        self.route(message)
        except errors.RelayError:
            pass
        finally:
            self.http.done(resp)

    def _consume(
        self, req: jsonrpc.Request, resp: HttpReply, stream: EventStream, waiter: AsyncResult
    ) -> jsonrpc.Response | None:
        """Read a reply stream until the response; None when it ended resumably first. When another stream
        hands the response over (the GET stream: routed to the waiter), this one is closed and that one taken."""

        def handed_over(_: AsyncResult) -> None:
            resp.close()  # the read under way ends (an error or the body's end): the waiter is looked at then

        decoder = stream.decoder
        waiter.rawlink(handed_over)
        try:
            for event in stream:
                if not event.data:
                    continue  # a priming event: it only carries an id
                messages = decode_upstream(event.data.encode("utf-8"))
                for index, message in enumerate(messages):
                    if is_reply_to(message, req.id):
                        assert isinstance(message, jsonrpc.Response)
                        for later in messages[index + 1 :]:  # a batch's messages after the response: not lost
                            self.route(later)
                        return message
                    self.route(message)
        except errors.MaybeSent as broken:
            if decoder.last_event_id is None and not waiter.ready():
                raise errors.ReplyLost(f"the reply stream for {req.method} broke: {broken.message}") from None
        finally:
            waiter.unlink(handed_over)
        if waiter.ready():
            handed: jsonrpc.Response = waiter.get()
            return handed
        if decoder.last_event_id is None:
            raise errors.ReplyLost(f"upstream ended the reply stream for {req.method} without answering")
        return None

    def _resume(self, req: jsonrpc.Request, previous: SseDecoder, waiter: AsyncResult) -> jsonrpc.Response:
        """SSE polling / resumability: GET with Last-Event-ID until the reply arrives, on that stream or on
        another one (the GET stream hands it to the waiter: taken between two resumptions)."""
        decoder = previous
        for attempt in range(1, MAX_RESUMES + 1):
            last_id = decoder.last_event_id
            delay = decoder.retry_ms / 1000 if decoder.retry_ms is not None else self.http.backoff(attempt)
            waiter.wait(timeout=delay)
            if waiter.ready():
                handed: jsonrpc.Response = waiter.get()
                return handed
            decoder = _continue(self.http.new_decoder(), decoder)
            headers = self.headers(SSE_TYPE, False)
            headers[wire.LAST_EVENT_ID] = str(last_id)
            sid = self.session_id
            resp = self.http.send("GET", self.url, headers, replay_safe=True)
            if resp.status_code == 404 and sid:
                resp.close()
                raise errors.SessionExpired(sid)
            self.http.expect_event_stream(resp, self.url)
            try:
                reply = self._consume(req, resp, self.http.events(resp, decoder, self.url), waiter)
            finally:
                resp.close()
            if reply is not None:
                return reply
        raise errors.ReplyLost(f"gave up resuming the reply stream for {req.method} after {MAX_RESUMES} tries")

    def route(self, message: Upstream) -> None:
        """A message that is not the awaited reply: a waiting request's reply, or one for the host."""
        if not self._waiters.deliver(message):
            self.sink(message)

    # -- the handshake and session recovery -------------------------------------------------

    def _handshake(self, req: jsonrpc.Request) -> jsonrpc.Response:
        """POST an initialize without a session; adopt the session id and version it returns."""
        old = self.session_id
        self.session_id, self.version = None, None
        if old:
            self._background.spawn(self._delete, old, None)
        resp = self.http.send(
            "POST", self.url, self.headers(ACCEPT_BOTH, True), jsonrpc.raw_bytes(req), replay_safe=True
        )
        if not 200 <= resp.status_code < 300:
            body = self.http.error_body(resp, self.url)
            if self.probe and should_fall_back(resp.status_code, body):
                raise errors.FallbackToSse(resp.status_code, errors.excerpt(body))
            raise self.http.error_for(resp, self.url, body)
        sid = resp.headers.get(wire.SESSION_ID)
        if sid is not None:
            if not is_valid_session_id(sid, max_length=None):
                resp.close()
                raise errors.InvalidUpstream("upstream sent a session id with characters outside 0x21-0x7E")
            self.session_id = sid
        reply = self._reply(req, resp, None, AsyncResult())
        if not reply.is_error:
            self.version = versions.initialize_version(reply.obj.get("result"))
            self.probe, self.started = False, True
        log.info(
            "upstream session %s, protocol %s", "started" if self.session_id else "none", self.version or "unknown"
        )
        return reply

    def recover(self, dead_sid: str) -> None:
        """Start a new session after a 404 (once, however many requests saw the 404)."""
        if not self._host_handshake.known:
            raise errors.HttpStatusError(
                "upstream session expired (HTTP 404) before an initialize could be replayed", 404
            )
        worker = self._background.spawn(self._recover_now, dead_sid)
        budget = 2 * (self.http.options.connect_timeout + self.http.options.read_timeout) + 5
        try:
            worker.get(timeout=budget)
        except gevent.Timeout:
            worker.kill(block=False)
            raise errors.MaybeSent("session recovery timed out") from None

    def _recover_now(self, dead_sid: str) -> None:
        with self._recovery:
            if self.session_id != dead_sid:
                return  # another request already started the new session
            log.warning("upstream session expired (HTTP 404); starting a new session")
            self.session_id = None
            try:
                check_replayed(self._handshake(self._host_handshake.initialize()))
            except errors.RelayError as exc:
                exc.message = f"upstream session expired and a new one could not be started: {exc.message}"
                raise
            self._post_oneway(self._host_handshake.initialized(), "initialized", recover=False)
            self._get_stream.restart()
            self._get_stream.wait_open()  # the requests resent on the new session go after it

    # -- one-way messages -------------------------------------------------------------------

    def send_oneway(self, message: OneWay) -> None:
        initialized = is_initialized(message)
        self._host_handshake.remember(message)
        what = message.method if isinstance(message, jsonrpc.Notification) else f"response {message.id!r}"
        self._post_oneway(jsonrpc.raw_bytes(message), what, recover=True)
        if initialized:
            self._get_stream.start()
            self._get_stream.wait_open()  # the host's next requests wait behind this message (the pump's barrier)

    def _post_oneway(self, body: bytes, what: str, recover: bool) -> None:
        """POST a notification or response (202 expected); failures are logged: there is no one to answer."""
        sid = self.session_id
        try:
            resp = self.http.send("POST", self.url, self.headers(ACCEPT_BOTH, True), body)
        except errors.RelayError as exc:
            log.warning("could not deliver %s upstream: %s", what, exc.message)
            return
        if resp.status_code == 404 and sid and recover:
            resp.close()
            try:
                self.recover(sid)  # the message belonged to the dead session: not resent
            except errors.RelayError as exc:
                log.warning("could not deliver %s upstream: %s", what, exc.message)
            return
        if resp.status_code >= 300:
            log.warning("upstream refused %s: %s", what, self.http.error_for(resp, self.url).message)
        self.http.done(resp)

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        """A 2025 server may put other messages (list_changed, logs, server requests) on a cancelled
        request's stream, and closing it is no cancel there: keep reading it for a while."""
        return self.http.options.cancel_grace

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        self.closing = True
        self._get_stream.stop()
        self._background.kill(block=True, timeout=1.0)
        self._waiters.fail_all(lambda: errors.ShuttingDown("relay is shutting down"))
        if self.session_id:
            self._delete(self.session_id, self.version)
            self.session_id = None

    def _delete(self, sid: str, version: str | None) -> None:
        """End a session with DELETE (405 means the server does not allow it)."""
        headers = {wire.SESSION_ID: sid}
        if version is not None and versions.sends_version_header(version):
            headers[wire.PROTOCOL_VERSION] = version
        timeout = (self.http.options.connect_timeout, DELETE_TIMEOUT)
        try:
            resp = self.http.send("DELETE", self.url, headers, tries=1, timeout=timeout)
        except errors.RelayError as exc:
            log.info("could not end the upstream session: %s", exc.message)
            return
        log.info("ended the upstream session (HTTP %d)", resp.status_code)
        self.http.done(resp)


def _continue(decoder: SseDecoder, previous: SseDecoder) -> SseDecoder:
    """A fresh decoder for a reconnection that keeps the stream's last event id and retry."""
    decoder.last_event_id, decoder.retry_ms = previous.last_event_id, previous.retry_ms
    return decoder
