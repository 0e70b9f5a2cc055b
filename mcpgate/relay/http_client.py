"""The relay's HTTP plumbing: the client's headers and routes, retries, bounded bodies, SSE reading.

Both transports send through HttpClient.send(), which owns the retry policy:
a request that failed before it was sent is retried with exponential backoff and
jitter; one that may have reached the server only when the caller says it is
replay-safe; 429 and 503 honour Retry-After up to a cap. Bodies are read in raw
chunks as they arrive (never line by line) and fed to the core's SseDecoder.

Each attempt goes to the relay's own HTTP/1.1 client for a plain-HTTP URL without a proxy, or
else to the urllib3 pool requests would use for its URL (relay/http_routes.py, relay/fast_http.py):
requests is loaded only for a route that needs it, for cookies, or to sign in (relay/oauth).
"""

from __future__ import annotations

import collections
import logging
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import gevent

from mcpgate.config.relay_settings import RelaySettings
from mcpgate.core.sse import Event, SseDecoder
from mcpgate.relay import errors
from mcpgate.relay.fast_http import FastReply
from mcpgate.relay.http_routes import HttpReply as HttpReply  # the transports name it from here
from mcpgate.relay.http_routes import Routes

log = logging.getLogger("mcpgate.relay")

TRACING = "mcpgate.observe.tracing"  # imported (and switched on) by --tracing only (cli.py): else never loaded
CHUNK_BYTES = 64 * 1024
ERROR_BODY_BYTES = 4096
JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"
POOL_SPARE = 8  # pooled connections beyond one per request in flight: the GET stream, DELETEs
MAX_RENEWALS = 3  # a request is sent again at most this often after a 401/403 renewed its token


class Authorizer(Protocol):
    """Where an exchange's Authorization comes from when the relay signs in (relay/oauth/session.py)."""

    def covers(self, url: str) -> bool: ...
    def authorization(self) -> str | None: ...
    def accepted(self, sent: str | None) -> None: ...
    def on_unauthorized(self, www_authenticate: str | None, sent: str | None = None) -> bool: ...
    def on_forbidden(self, www_authenticate: str | None, sent: str | None = None) -> bool: ...


@dataclass(frozen=True)
class HttpOptions:
    """Every limit of the relay's HTTP side. Those the user sets have no default here: their
    defaults are RelaySettings' (see from_settings); the rest are declared here only."""

    connect_timeout: float
    read_timeout: float
    max_message_bytes: int
    pool_size: int
    cancel_grace: float  # how long a cancelled request's reply stream is still read (2025 Streamable HTTP)
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token: str | None = None
    user_agent: str = "mcpgate-relay"
    tries: int = 3
    backoff_base: float = 0.25
    backoff_cap: float = 4.0
    retry_after_cap: float = 30.0

    @classmethod
    def from_settings(cls, settings: RelaySettings) -> HttpOptions:
        """The options for the relay's settings; the bearer token replaces any Authorization header."""
        token = settings.bearer_token or None
        headers = {name: value for name, value in settings.header if not (token and name.lower() == "authorization")}
        return cls(
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            max_message_bytes=settings.max_message_bytes,
            pool_size=settings.max_inflight + POOL_SPARE,
            cancel_grace=settings.cancel_grace,
            headers=headers,
            bearer_token=token,
        )


class HttpClient:
    """The relay's headers, timeouts, routes (connection pools) and retry policy. `url`: the upstream's, whose
    proxies from the environment (read once) every exchange goes through; None: no proxy."""

    def __init__(self, options: HttpOptions, url: str | None = None) -> None:
        self.options = options
        self.headers = session_headers(options)
        self._timeout = (options.connect_timeout, options.read_timeout)
        self._routes = Routes(self.headers, url, options.pool_size)
        self.auth: Authorizer | None = None  # set when the relay may sign in (cli.py)

    @property
    def token_set(self) -> bool:
        return bool(self.options.bearer_token)

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        replay_safe: bool = False,
        tries: int | None = None,
        timeout: tuple[float, float] | None = None,
    ) -> HttpReply:
        """One HTTP exchange up to the response headers, retried per the policy; the body is not read.
        Tracing on, a host's request goes in its span (mcpgate.observe.tracing.relayed)."""
        tracing = sys.modules.get(TRACING)
        if tracing is None or tracing.TRACER is None or not body:
            return self._send_signed(method, url, headers, body, replay_safe, tries, timeout)
        return tracing.relayed(  # type: ignore[no-any-return]
            body, headers, lambda sent: self._send_signed(method, url, sent, body, replay_safe, tries, timeout)
        )

    def _send_signed(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        replay_safe: bool,
        tries: int | None,
        timeout: tuple[float, float] | None,
    ) -> HttpReply:
        """When the relay signs in, the token goes along (to the server's own origin only) and a 401 or
        a 403 insufficient_scope sends the request again once the token is renewed."""
        auth = self.auth
        if auth is None or not auth.covers(url):
            return self._send(method, url, headers, body, replay_safe, tries, timeout)
        for renewals in range(MAX_RENEWALS + 1):
            sent = auth.authorization()
            resp = self._send(
                method, url, {**headers, "Authorization": sent} if sent else headers, body, replay_safe, tries, timeout
            )
            if resp.status_code not in (401, 403):
                auth.accepted(sent)
                return resp
            if renewals == MAX_RENEWALS:
                break
            challenge = resp.headers.get("WWW-Authenticate")
            renew = auth.on_unauthorized if resp.status_code == 401 else auth.on_forbidden
            try:
                retry = renew(challenge, sent)
            except BaseException:
                resp.close()
                raise
            if not retry:
                break
            self.done(resp)
        return resp

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        replay_safe: bool,
        tries: int | None,
        timeout: tuple[float, float] | None,
    ) -> HttpReply:
        tries = self.options.tries if tries is None else tries
        limits = self._timeout if timeout is None else timeout
        for attempt in range(1, tries + 1):
            last = attempt >= tries
            try:
                resp = self._routes.exchange(method, url, headers, body, limits)
            except errors.RelayError as exc:
                if last or not exc.retryable or (exc.maybe_sent and not replay_safe):
                    raise
                delay = self.backoff(attempt)
                log.info(
                    "%s %s failed (%s); retry %d in %.2fs", method, errors.redact(url), exc.message, attempt, delay
                )
                gevent.sleep(delay)
                continue
            if resp.status_code in (429, 503) and not last:
                wait = self._retry_delay(resp, attempt)
                if wait is not None:
                    resp.close()
                    log.info(
                        "%s %s got HTTP %d; retry %d in %.2fs",
                        method,
                        errors.redact(url),
                        resp.status_code,
                        attempt,
                        wait,
                    )
                    gevent.sleep(wait)
                    continue
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    def backoff(self, attempt: int) -> float:
        """Exponential backoff for the attempt-th retry (1-based), jittered over its upper half."""
        ceiling = min(self.options.backoff_cap, self.options.backoff_base * 2.0 ** (attempt - 1))
        return _jitter(ceiling)

    def _retry_delay(self, resp: HttpReply, attempt: int) -> float | None:
        """The wait a 429/503 asks for, or None when it asks for longer than the cap."""
        asked = errors.retry_after_seconds(resp.headers.get("Retry-After"))
        if asked is None:
            return self.backoff(attempt)
        if asked > self.options.retry_after_cap:
            return None
        return asked

    def read_body(self, resp: HttpReply, url: str) -> bytes:
        """The whole body, bounded by max_message_bytes."""
        limit = self.options.max_message_bytes
        length = resp.headers.get("Content-Length", "")
        if length.isascii() and length.isdigit() and "Content-Encoding" not in resp.headers:
            # The size is known before reading (and cannot grow in decoding): one read, when it fits.
            if int(length) > limit:
                raise errors.InvalidUpstream(f"upstream reply exceeded {limit} bytes")
            with errors.mapped(url):
                body: bytes = resp.raw.read(decode_content=True)
            return body
        parts: list[bytes] = []
        size = 0
        with errors.mapped(url):
            while True:
                chunk = resp.raw.read1(CHUNK_BYTES, decode_content=True)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise errors.InvalidUpstream(f"upstream reply exceeded {limit} bytes")
                parts.append(chunk)
        return b"".join(parts)

    def error_body(self, resp: HttpReply, url: str) -> bytes:
        """The first few KiB of an error reply's body; the response is closed."""
        try:
            with errors.mapped(url):
                body: bytes = resp.raw.read(ERROR_BODY_BYTES, decode_content=True) or b""
        except errors.RelayError:
            body = b""
        finally:
            resp.close()
        return body

    def error_for(self, resp: HttpReply, url: str, body: bytes | None = None) -> errors.HttpStatusError:
        """The error naming an HTTP error status and a short excerpt of its body."""
        if body is None:
            body = self.error_body(resp, url)
        resp.close()
        return errors.status_error(
            resp.status_code, resp.reason or "", body, self.token_set, resp.headers.get("WWW-Authenticate")
        )

    def expect_event_stream(self, resp: HttpReply, url: str) -> None:
        """A GET that opens a stream must answer 200 with text/event-stream: the error (the response
        closed) when it did not."""
        if resp.status_code != 200:
            raise self.error_for(resp, url)
        kind = content_type(resp)
        if kind != SSE_TYPE:
            resp.close()
            raise errors.InvalidUpstream(
                f"upstream GET {errors.redact(url)} did not open an SSE stream (Content-Type {kind!r})"
            )

    def events(self, resp: HttpReply, decoder: SseDecoder, url: str) -> EventStream:
        """SSE events as their bytes arrive; ends when the server ends the body."""
        return EventStream(resp, decoder, url)

    def done(self, resp: HttpReply) -> None:
        """Finish with a response: when its body is (or, being short, can be) read to the end the
        connection goes back to the pool; otherwise it is closed."""
        raw = resp.raw
        length = resp.headers.get("Content-Length", "")
        if not raw.isclosed() and length.isascii() and length.isdigit() and int(length) <= ERROR_BODY_BYTES:
            try:
                with errors.mapped(""):
                    raw.read(decode_content=False)
            except errors.RelayError:
                pass
        if raw.isclosed():
            raw.release_conn()
        else:
            resp.close()

    def new_decoder(self) -> SseDecoder:
        return SseDecoder(max_event_bytes=self.options.max_message_bytes)

    def close(self) -> None:
        self._routes.close()


class EventStream:
    """A reply stream's SSE events as their bytes arrive (an iterator, ended by the body's end). The events one
    read decoded are handed out one at a time and the rest kept, so a reader that stops at the response leaves
    what came after it, even in the same read, to whoever reads on (the same object)."""

    __slots__ = ("decoder", "pending", "resp", "url")

    def __init__(self, resp: HttpReply, decoder: SseDecoder, url: str) -> None:
        self.resp, self.decoder, self.url = resp, decoder, url
        self.pending: collections.deque[Event] = collections.deque()

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> Event:
        pending = self.pending
        while not pending:
            with errors.mapped(self.url):
                chunk = self.resp.raw.read1(CHUNK_BYTES, decode_content=True)
                if not chunk:
                    raise StopIteration
                pending.extend(self.decoder.feed(chunk))
        return pending.popleft()

    def ended_now(self) -> bool:
        """Nothing is left to read: no event kept, and the body's end already here (fast_http's reply, which can
        tell without waiting; urllib3's cannot: False)."""
        raw = self.resp.raw
        return not self.pending and isinstance(raw, FastReply) and raw.ended_now()


def session_headers(options: HttpOptions) -> dict[str, str]:
    """Every exchange's headers: the options', the User-Agent, the bearer token's Authorization; a later name
    replaces an earlier one whatever its case, in the earlier one's place (as requests' session headers do)."""
    merged: dict[str, tuple[str, str]] = {}
    named = [*options.headers.items(), ("User-Agent", options.user_agent)]
    if options.bearer_token:
        named.append(("Authorization", f"Bearer {options.bearer_token}"))
    for name, value in named:
        merged[name.lower()] = (name, value)
    return dict(merged.values())


def content_type(resp: HttpReply) -> str:
    """The media type of a response, lower case, without parameters."""
    return resp.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


RECONNECT_BASE = 0.5
RECONNECT_CAP = 30.0


def reconnect_delay(failures: int, retry_ms: int | None) -> float:
    """Wait before reopening a stream: the server's `retry` after a good stream, else growing backoff."""
    base = retry_ms / 1000 if retry_ms is not None else RECONNECT_BASE
    if failures == 0:
        return base
    return _jitter(min(RECONNECT_CAP, max(base, RECONNECT_BASE) * 2.0 ** min(failures, 16)))


def _jitter(ceiling: float) -> float:
    return ceiling / 2 + random.uniform(0.0, ceiling / 2)
