"""HTTP+SSE client transport (2024-11-05).

A GET opens the event stream; its first `endpoint` event names (relative URLs
resolved, same origin only, as requests reads the URL: see `same_origin`) where
every client message is POSTed. Replies come back on the stream and are matched
to waiting requests by id. When the stream
drops, every request still waiting gets a JSON-RPC error, the stream is opened
again with backoff (honouring `retry`), and because a new stream is a new server
session, the host's initialize and initialized are replayed before anything else
is sent on it.
"""

from __future__ import annotations

import itertools
import logging
import re
from urllib.parse import urljoin

import gevent
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet
from gevent.pool import Group

from mcpgate.core import jsonrpc, wire
from mcpgate.core.sse import SseDecoder
from mcpgate.relay import errors
from mcpgate.relay.handshake import Handshake, check_replayed
from mcpgate.relay.http_client import JSON_TYPE, SSE_TYPE, HttpClient, HttpReply, content_type, reconnect_delay
from mcpgate.relay.transport import OneWay, ReplyWaiters, Sink, Upstream, decode_upstream

log = logging.getLogger("mcpgate.relay")

REINIT_ID_PREFIX = "mcpgate-relay-reinit-"


DEFAULT_PORTS = {"http": 80, "https": 443}
# What URL parsers read differently: a backslash (WHATWG and urllib3 end the authority there, RFC 3986's
# urlsplit keeps it in the userinfo), control characters and spaces (stripped by some, kept by others).
_AMBIGUOUS = re.compile(r"[\\\x00-\x20\x7f]")
Origin = tuple[str, str, int]


def request_origin(url: str) -> tuple[Origin, bool] | None:
    """(scheme, host, port) of where requests sends a request for `url` (requests' own preparation, then
    urllib3's parser, the one the connection is made with), and whether the URL carries userinfo; None when
    it cannot be sent. requests is loaded here: a relay that never falls back to HTTP+SSE does without it."""
    import requests
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        prepared = requests.models.PreparedRequest()
        prepared.prepare_url(url, None)
        parts = parse_url(prepared.url or "")
    except (requests.RequestException, LocationParseError, ValueError):
        return None
    scheme, host = (parts.scheme or "").lower(), (parts.host or "").lower()
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return (scheme, host, parts.port or DEFAULT_PORTS[scheme]), parts.auth is not None


def same_origin(endpoint: str, base: str) -> bool:
    """Whether a request for `endpoint` goes where one for `base` goes, as the HTTP stack reads both URLs;
    an endpoint that parsers may read differently (a backslash, a control character, a space) or that
    carries userinfo is never the same origin (the static token and -H headers are sent to it)."""
    if _AMBIGUOUS.search(endpoint):
        return False
    ours, theirs = request_origin(base), request_origin(endpoint)
    return ours is not None and theirs is not None and not theirs[1] and theirs[0] == ours[0]


def described_origin(url: str) -> str:
    """Where a request for `url` would go, for a message: never its userinfo, path or query."""
    found = request_origin(url)
    shown = "a URL requests cannot send" if found is None else "{}://{}:{}".format(*found[0])
    suspect = _AMBIGUOUS.search(url) or (found is not None and found[1])
    return shown + (" (the URL has userinfo, a backslash, a control character or a space)" if suspect else "")


class LegacySseTransport:
    def __init__(self, url: str, http: HttpClient, sink: Sink) -> None:
        self.url, self.http, self.sink = url, http, sink
        self.endpoint: str | None = None
        self._pending = ReplyWaiters()
        # The outcome (the endpoint, or the error) of the connection attempt in progress or next.
        self._attempt = AsyncResult()
        self._wake = Event()
        self._stream: Greenlet | None = None
        self._resp: HttpReply | None = None
        self._closing = False
        self._host_handshake = Handshake()
        self._reinit_ids = itertools.count(1)
        self._background = Group()  # handshake replays, killed at close

    @property
    def _connect_budget(self) -> float:
        options = self.http.options
        return options.tries * (options.connect_timeout + options.backoff_cap) + options.read_timeout

    # -- host messages ----------------------------------------------------------------------

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        endpoint = self._connection()
        self._host_handshake.remember(req)  # an initialize is replayed on the next stream
        return self._exchange(endpoint, req)

    def send_oneway(self, message: OneWay) -> None:
        self._host_handshake.remember(message)
        what = message.method if isinstance(message, jsonrpc.Notification) else f"response {message.id!r}"
        try:
            self._post(self._connection(), jsonrpc.raw_bytes(message), False, None)
        except errors.RelayError as exc:
            log.warning("could not deliver %s upstream: %s", what, exc.message)

    def _exchange(self, endpoint: str, req: jsonrpc.Request) -> jsonrpc.Response:
        with self._pending.expect(req.id) as waiter:
            self._post(endpoint, jsonrpc.raw_bytes(req), errors.is_replay_safe(req.method), req)
            while True:
                try:
                    reply: jsonrpc.Response = waiter.get(timeout=self.http.options.read_timeout)
                    return reply
                except gevent.Timeout:
                    if self._closing or self.endpoint != endpoint:
                        raise errors.MaybeSent(f"no reply to {req.method} from the upstream SSE stream") from None

    def _post(self, endpoint: str, body: bytes, safe: bool, req: jsonrpc.Request | None) -> None:
        """POST one message to the endpoint; the reply (if any) arrives on the stream."""
        resp = self.http.send("POST", endpoint, {"Content-Type": JSON_TYPE}, body, replay_safe=safe)
        if not 200 <= resp.status_code < 300:
            raise self.http.error_for(resp, endpoint)
        try:
            if resp.status_code == 200 and content_type(resp) == JSON_TYPE:
                # Not what 2024-11-05 servers do (they answer 202), but harmless to accept.
                for message in decode_upstream(self.http.read_body(resp, endpoint)):
                    self._route(message)
        finally:
            self.http.done(resp)

    def _route(self, message: Upstream) -> None:
        if not self._pending.deliver(message):
            self.sink(message)

    # -- the stream -------------------------------------------------------------------------

    def _connection(self) -> str:
        """The POST endpoint of a live, initialized stream; connects (or waits for it) first."""
        endpoint = self.endpoint
        if endpoint is not None:
            return endpoint
        if self._closing:
            raise errors.ShuttingDown("relay is shutting down")
        if self._stream is None or self._stream.dead:
            self._stream = gevent.spawn(self._stream_loop)
        attempt = self._attempt
        self._wake.set()
        try:
            result: str = attempt.get(timeout=self._connect_budget)
        except gevent.Timeout:
            raise errors.MaybeSent("timed out waiting for the upstream SSE stream's endpoint event") from None
        return result

    def _stream_loop(self) -> None:
        failures, retry_ms, last_id = 0, None, None
        while not self._closing:
            self._wake.clear()
            attempt = self._attempt
            decoder = self.http.new_decoder()
            decoder.last_event_id = last_id
            count = self._stream_once(attempt, decoder)
            last_id = decoder.last_event_id
            retry_ms = decoder.retry_ms if decoder.retry_ms is not None else retry_ms
            failures = 0 if count else failures + 1
            if not self._closing:
                self._wake.wait(timeout=reconnect_delay(failures, retry_ms))

    def _stream_once(self, attempt: AsyncResult, decoder: SseDecoder) -> int:
        """One stream connection: the number of events it delivered."""
        count = 0
        try:
            resp = self._open(decoder.last_event_id)
            self._resp = resp
            for event in self.http.events(resp, decoder, self.url):
                count += 1
                if event.event == "endpoint":
                    self._on_endpoint(event.data.strip(), attempt)
                elif event.data:
                    for message in decode_upstream(event.data.encode("utf-8")):
                        self._route(message)
            log.warning("upstream SSE stream ended")
        except errors.RelayError as exc:
            log.warning("upstream SSE stream: %s", exc.message)
            if not attempt.ready():
                attempt.set_exception(exc)
        finally:
            if self._resp is not None:
                self._resp.close()
                self._resp = None
            self._on_drop(attempt)
        return count

    def _open(self, last_id: str | None) -> HttpReply:
        headers = {"Accept": SSE_TYPE}
        if last_id is not None:
            headers[wire.LAST_EVENT_ID] = last_id
        resp = self.http.send("GET", self.url, headers, replay_safe=True)
        self.http.expect_event_stream(resp, self.url)
        return resp

    def _on_endpoint(self, data: str, attempt: AsyncResult) -> None:
        try:
            endpoint = urljoin(self.url, data)
        except ValueError:
            endpoint = data
        if not same_origin(endpoint, self.url):
            raise errors.InvalidUpstream(f"upstream endpoint event names another origin: {described_origin(endpoint)}")
        if attempt.ready():
            log.warning("ignored a second endpoint event")
            return
        log.info("upstream SSE endpoint %s", errors.redact(endpoint))
        if not self._host_handshake.known:
            self.endpoint = endpoint
            attempt.set(endpoint)
        else:
            self._background.spawn(self._reinitialize, endpoint, attempt)

    def _reinitialize(self, endpoint: str, attempt: AsyncResult) -> None:
        """A new stream is a new server session: replay the host's handshake before anything else."""
        init = self._host_handshake.initialize(f"{REINIT_ID_PREFIX}{next(self._reinit_ids)}")
        try:
            check_replayed(self._exchange(endpoint, init))
            self._post(endpoint, self._host_handshake.initialized(), False, None)
        except errors.RelayError as exc:
            exc.message = f"could not start a new upstream session: {exc.message}"
            log.warning("%s", exc.message)
            if not attempt.ready():
                attempt.set_exception(exc)
            resp = self._resp
            if resp is not None:
                resp.close()
            return
        log.info("upstream SSE session re-initialized")
        self.endpoint = endpoint
        if not attempt.ready():
            attempt.set(endpoint)

    def _on_drop(self, attempt: AsyncResult) -> None:
        """The stream is gone: nothing waiting on it will be answered."""
        self.endpoint = None
        self._attempt = AsyncResult()
        lost = errors.MaybeSent(
            "the upstream SSE stream dropped before the reply arrived; the request may or may not have run upstream"
        )
        if not attempt.ready():
            attempt.set_exception(lost)
        closing = self._closing
        self._pending.fail_all(lambda: errors.ShuttingDown("relay is shutting down") if closing else lost)

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        """Replies ride the one event stream, not per-request streams: nothing to keep reading."""
        return 0.0

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._stream is not None:
            self._stream.kill(block=True, timeout=1.0)
        self._background.kill(block=True, timeout=1.0)
        self._on_drop(self._attempt)
