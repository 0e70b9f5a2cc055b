"""The Streamable HTTP GET stream: server-initiated messages outside any request.

Opened after `notifications/initialized`; 405 means the server offers none. It is
reopened with backoff when it ends or breaks, after the server's `retry` when it
gave one, with Last-Event-ID when its events carried ids (ids of the same session
only). A 404 means the session is gone: the owner starts a new one.

An upstream sends a server-initiated message on the GET stream it has registered, and drops one sent before (the
SDK server does). So the owner holds the host's next request until the first GET's response headers arrived
(`wait_open`, bounded by OPEN_WAIT: a server that sends no headers before its first event costs that once); a
405 releases it at once.
"""

from __future__ import annotations

import logging
from typing import Protocol

import gevent
from gevent import GreenletExit
from gevent.event import Event
from gevent.greenlet import Greenlet

from mcpgate.core import wire
from mcpgate.core.sse import SseDecoder
from mcpgate.relay import errors
from mcpgate.relay.http_client import SSE_TYPE, HttpClient, reconnect_delay
from mcpgate.relay.transport import Upstream, decode_upstream

log = logging.getLogger("mcpgate.relay")

OPEN_WAIT = 2.0  # seconds the host's next request waits for a new GET stream's response headers


class StreamOwner(Protocol):
    """What the GET stream needs from its Streamable HTTP transport."""

    url: str
    http: HttpClient
    session_id: str | None
    closing: bool

    def headers(self, accept: str | None, body: bool) -> dict[str, str]: ...

    def route(self, message: Upstream) -> None: ...

    def recover(self, dead_sid: str) -> None: ...


class GetStream:
    def __init__(self, owner: StreamOwner) -> None:
        self.owner: StreamOwner | None = owner  # None once stopped (it holds this stream: no cycle is left)
        self.offered = True  # until a 405 says otherwise
        self._greenlet: Greenlet | None = None
        self._opened = Event()  # the newest stream's first GET has its answer (or failed, or never will)
        self._opened.set()

    def start(self) -> None:
        if self.owner is None or self.owner.closing or not self.offered:
            return
        if self._greenlet is None or self._greenlet.dead:
            self._opened = Event()
            self._greenlet = gevent.spawn(self._run, self._opened)

    def wait_open(self, timeout: float = OPEN_WAIT) -> None:
        """Wait (bounded) until the stream started last has its first answer: what the upstream sends after
        that cannot be dropped for want of a stream. At once when it has, or no stream is offered."""
        opened = self._opened
        if not opened.wait(timeout=timeout):
            opened.set()  # waited once: later requests go on at once
            log.info("upstream did not answer the GET stream within %gs; going on without it", timeout)

    def restart(self) -> None:
        """Drop the current stream (it belonged to a dead session) and open a new one."""
        old, self._greenlet = self._greenlet, None
        if old is not None and old is not gevent.getcurrent():
            old.kill(block=False)
        self.start()

    def stop(self) -> None:
        """Kill the stream's greenlet; forget it and the owner (the greenlet's GreenletExit's frames hold this
        stream, and the owner holds it: no cycle is left)."""
        greenlet, self._greenlet = self._greenlet, None
        self.owner = None
        if greenlet is not None:
            greenlet.kill(block=True, timeout=1.0)

    def _run(self, opened: Event) -> None:
        try:
            self._loop(opened)
        except GreenletExit:  # stopped: it ends here, its exception (whose frames hold this stream) not kept
            return
        finally:
            opened.set()

    def _loop(self, opened: Event) -> None:
        owner = self.owner
        if owner is None:
            return
        failures, retry_ms = 0, None
        last_id, id_session = None, owner.session_id
        while not owner.closing:
            sid = owner.session_id
            if sid != id_session:
                last_id, id_session = None, sid  # event ids belong to a session
            headers = owner.headers(SSE_TYPE, False)
            if last_id is not None:
                headers[wire.LAST_EVENT_ID] = last_id
            decoder = owner.http.new_decoder()
            got = self._once(owner, headers, sid, decoder, opened)
            if got is None:
                return
            last_id = decoder.last_event_id or last_id
            retry_ms = decoder.retry_ms if decoder.retry_ms is not None else retry_ms
            failures = 0 if got else failures + 1
            gevent.sleep(reconnect_delay(failures, retry_ms))

    def _once(
        self, owner: StreamOwner, headers: dict[str, str], sid: str | None, decoder: SseDecoder, opened: Event
    ) -> int | None:
        """One GET: the number of events read, or None when the server offers no stream."""
        try:
            resp = owner.http.send("GET", owner.url, headers, replay_safe=True, tries=1)
        except errors.RelayError as exc:
            log.debug("GET stream: %s", exc.message)
            return 0
        finally:
            opened.set()
        if resp.status_code == 405:
            resp.close()
            self.offered = False
            log.info("upstream offers no GET stream (HTTP 405)")
            return None
        if resp.status_code == 404 and sid:
            resp.close()
            try:
                owner.recover(sid)
            except errors.RelayError as exc:
                log.warning("GET stream: %s", exc.message)
            return 0
        try:
            owner.http.expect_event_stream(resp, owner.url)
        except errors.RelayError as exc:
            log.warning("GET stream refused: %s", exc.message)
            return 0
        count = 0
        try:
            for event in owner.http.events(resp, decoder, owner.url):
                count += 1
                for message in decode_upstream(event.data.encode("utf-8")) if event.data else []:
                    owner.route(message)
        except errors.RelayError as exc:
            log.debug("GET stream ended: %s", exc.message)
        finally:
            resp.close()
        return count
