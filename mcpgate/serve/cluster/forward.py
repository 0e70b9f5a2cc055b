"""The forwarder: a request for another instance's session, sent to that instance's internal URL over a
kept-alive connection, and its reply streamed back as it comes.

The request goes as it came (method, path, query, body, end-to-end headers, the client's Host and Origin for
the owner's own checks) without its Authorization (the token does not travel) and with Mcpgate-Forwarded: the
principal this instance authenticated, the view the caller's verified identity selected here (its rule and the
views' fingerprint: the owner sees no token, so it applies this view, and refuses it when its own views differ)
and this instance's id, signed with the cluster key for this method, path, query, session and body, with a
nonce never used before (core/session_ids' value, made by serve/cluster/signing.py; the owner accepts each value
once). The nonce is the connection's: each connection to an owner draws a random channel when it connects, and
the values sent on it carry
`<channel>~0`, `<channel>~1`, ... The owner checks the first in Redis and each later one against the count of
that same connection (serve/cluster/nonces.py, Channels): one Redis command per connection, not per request.

Where the value goes: a connection's first request carries it in its head. The owner's reply to a forwarded
request says `Mcpgate-Forwarded: body` (kept here, never passed on), and from then on that connection's POSTs name
their sender alone in the head (still checked against the connection's address before any body is read) and lead
their body with the value and a line feed. Their heads are then the same bytes call after call, which the owner's
worker reads from its memo of heads as it reads a direct call's (a value in the head made every forwarded head
new: parsed again, each time). The value, its MAC over the body after it, its window and its nonce are checked as
in a head (serve/cluster/instances.py, forwarded_principal). An owner that does not say so (an older release, in
a rolling redeploy) keeps getting every value in the head. The head itself is made once per client's head
(`head_of`, serve/cluster/forward_heads.py) and the value appended.

A reply with a length is read whole and its connection goes back to the pool at once; any other (an SSE
stream, chunked) is passed on chunk by chunk, bounded reads, as the owner writes it, and its connection is
pooled again only once it was read to its end. Connecting has a timeout; a reply may pause no longer than the
owner's SSE switch and two keepalives (the owner writes keepalive comments on every live stream): each wait on the
owner records its end, which the forwarder's Watch enforces (exchange.py: no timer per read).

The exchange itself (the request's bytes, the reply's head and body read off the connection) is
serve/cluster/exchange.py's OwnerConnection.
"""

from __future__ import annotations

import http.client
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc, wire
from mcpgate.observe import tracing
from mcpgate.serve.cluster.exchange import OwnerConnection, Reply, Watch
from mcpgate.serve.cluster.forward_heads import (
    FORWARDED_FIELD,
    HEADS_KEPT,
    HOP_BY_HOP,
    NAMES_KEPT,
    end_to_end,
    head_of,
    plain_head,
)
from mcpgate.serve.cluster.relayed import Relayed
from mcpgate.serve.cluster.reply_heads import ReplyHeads
from mcpgate.serve.cluster.signing import Signer, body_digest
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import JSON_TYPE, HttpRequest, HttpResponse, Refusal, json_response

log = logging.getLogger("mcpgate.forward")

CONNECT_TIMEOUT = 5.0  # seconds to reach an owner
FORWARDED_NAME = wire.FORWARDED.lower()
# an owner's Mcpgate-Forwarded is the forwarder's; its Date too: the worker dates the reply it writes, as any other
NOT_RETURNED = HOP_BY_HOP | {"content-length", FORWARDED_NAME, "date"}
JSON_ONLY = dict([JSON_TYPE])  # a reply relayed with this header alone is written as json_response makes one
BODY_FORM = "body"  # an owner's reply saying: send the values of this connection's POSTs in their bodies
GONE_REPORTS = 256  # owners whose loss is logged once each, at most this many remembered


class LostInFlight(ConnectionError):
    """The owner closed a new connection after the whole request was sent, before any reply: it died with it.

    `unread`: the owner reset the connection (ECONNRESET) rather than closing it (an empty read). A kernel resets
    a connection that is closed while bytes it received are still unread: one still waiting in the accept queue
    of a listener that closes (an owner's worker stopping as a connection came in), or one its process closed
    before reading the whole request. Either way the request cannot have run there (the owner reads a request
    whole before it serves it, and a process that read it whole and then died closes its connections with no
    reset). Who reads it so (serve/cluster/instances.py) also checks that the owner said it stops gracefully
    (serve/cluster/directory.py): only then is the request served elsewhere rather than answered "restarted"."""

    def __init__(self, reason: str, unread: bool = False) -> None:
        super().__init__(reason)
        self.unread = unread


class Forwarder:
    """One per worker: idle connections per owner (at most MCPGATE_WORKER_CONNECTIONS each, newest first)."""

    def __init__(self, key: bytes, settings: Settings, instance: str) -> None:
        self.key, self.instance = key, instance  # the sender its Mcpgate-Forwarded values name
        self.signer = Signer(key)
        self.sender = instance.encode("ascii")  # valid_instance: ASCII letters, digits, - and _
        self.idle_per_owner = settings.worker_connections
        self.max_body = settings.max_body_bytes
        self.sse_after = settings.sse_after  # how long an owner's reply may stay whole (resent.py waits that)
        self.read_timeout = settings.sse_after + 2 * settings.keepalive + CONNECT_TIMEOUT
        self._idle: dict[str, list[OwnerConnection]] = {}
        self._gone: set[str] = set()
        self._origins: dict[str, str] = {}  # an owner's URL -> its host and port (urlsplit once per URL)
        self.heads = ReplyHeads()  # owners' reply heads remembered by shape (reply_heads.py)
        self._relayed: dict[bytes, RelayedHead] = {}  # a reply head's shape -> how it is relayed
        self.watch = Watch()  # ends a wait on an owner past read_timeout (no timer per read: exchange.py)
        self.relayed = Relayed()  # the GET streams relayed for others' sessions, which a drain ends

    def forward(
        self,
        environ: dict[str, Any],
        body: bytes | None,
        url: str,
        owner: str,
        session_id: str,
        principal: str,
        view: str | None = None,
    ) -> HttpResponse | None:
        """The owner's reply; None when the owner cannot be reached (logged once per owner). `view`: the view the
        caller's identity chose here, which the owner applies (None: read from the request's context)."""
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO", "")
        if body is None:
            body = read_body(environ, self.max_body)
        query = environ.get("QUERY_STRING", "")
        target = environ.get("SCRIPT_NAME", "") + path
        if tracing.KEY in environ:  # the forward's span: its context in the traceparent header
            headers = end_to_end(environ)
            tracing.forwarding(environ, headers, body, owner)
            head = head_of(method, target, query, headers)
        else:
            head = plain_head(method, target, query, environ)
        signed, digest = (method, path, query, session_id), body_digest(body)
        if view is None:
            view = context(environ).view or ""
        stamp = time.time()
        length = b"Content-Length: %d\r\n" % len(body) if body or method in ("POST", "PUT", "PATCH") else b""

        def signed_for(nonce: str, in_body: bool) -> bytes:  # the request as sent, its value signed with `nonce`
            value = self.signer.value(principal, self.instance, stamp, signed, digest, view, nonce)
            if in_body and method == "POST":  # the value leads the body; the head names the sender alone
                lead = b"%s\r\nContent-Length: %d\r\n\r\n%s\n" % (
                    self.sender,
                    len(value) + 1 + len(body),
                    value.encode(),
                )
                return b"".join((head, FORWARDED_FIELD, lead, body))
            return b"".join((head, FORWARDED_FIELD, value.encode("ascii"), b"\r\n", length, b"\r\n", body))

        origin = self._origins.get(url)
        if origin is None:
            origin = urlsplit(url).netloc
            if len(self._origins) >= NAMES_KEPT:
                self._origins.clear()
            self._origins[url] = origin
        try:
            conn, reply = self._exchange(origin, signed_for, method)
        except LostInFlight as lost:  # the owner died with the request, or reset it unread (instances.py decides)
            unread = "it reset a new connection, the request in it unread"
            self.report_gone(owner, unread if lost.unread else "it closed the connection with a request in flight")
            raise
        except OSError as exc:
            self.report_gone(owner, f"unreachable at {url}: {exc}")
            return None
        self._gone.discard(owner)
        return self._relay(origin, conn, reply, method, owner)

    def _exchange(
        self, origin: str, request: Callable[[str, bool], bytes], method: str
    ) -> tuple[OwnerConnection, Reply]:
        """Send the request on an idle connection (once more on a new one when the owner had closed it), signed
        with that connection's next nonce (its value in the body when the owner said it reads it there)."""
        while True:
            conn, reused = self._connection(origin)
            sent = False
            try:
                conn.send_request(request(conn.next_nonce(), conn.body_form))
                sent = True
                return conn, conn.head(method)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                if not reused and sent:  # RemoteDisconnected (a ConnectionResetError): an empty read, no reset
                    reset = not isinstance(exc, http.client.RemoteDisconnected)
                    raise LostInFlight(str(exc), unread=reset) from exc
                if not reused:
                    raise
            except BaseException:
                conn.close()
                raise

    def _connection(self, origin: str) -> tuple[OwnerConnection, bool]:
        idle = self._idle.get(origin)
        if idle:
            return idle.pop(), True
        host, _, port = origin.rpartition(":")
        conn = OwnerConnection(host.strip("[]"), int(port) if port else 80, timeout=CONNECT_TIMEOUT)
        conn.pause = self.read_timeout  # each wait on the owner, once connected
        conn.heads = self.heads
        self.watch.add(conn)
        return conn, False

    def _release(self, origin: str, conn: OwnerConnection, reply: Reply) -> None:
        idle = self._idle.setdefault(origin, [])
        if reply.will_close or conn.timed_out or len(idle) >= self.idle_per_owner:
            conn.close()
        else:
            idle.append(conn)

    def _relay(self, origin: str, conn: OwnerConnection, reply: Reply, method: str, owner: str) -> HttpResponse:
        relayed = self._relayed.get(reply.shape) if reply.shape is not None else None
        if relayed is None:
            relayed = returned(reply.headers)
            if reply.shape is not None:  # a remembered head's shape: its headers are relayed alike every time
                if len(self._relayed) >= HEADS_KEPT:
                    self._relayed.clear()
                self._relayed[reply.shape] = relayed
        headers, extra, body_form, json_only = relayed
        if body_form:  # the owner reads the values of this connection's POSTs in their bodies
            conn.body_form = True
        if reply.length is not None:
            try:
                data = conn.body(reply.length) if reply.length else b""
            except (OSError, http.client.HTTPException):
                conn.close()
                raise
            self._release(origin, conn, reply)
            if json_only:  # JSON alone: the reply's two headers as the worker takes them in one look (writing.py)
                return json_response(data, reply.status)
            response = HttpResponse(reply.status, data, headers=headers)
        else:
            stream = self._stream(origin, conn, reply, owner, standing=method == "GET")
            response = HttpResponse(reply.status, stream, headers=headers)
        response.headers.extend(extra)
        return response

    def _stream(
        self,
        origin: str,
        conn: OwnerConnection,
        reply: Reply,
        owner: str,
        standing: bool = False,
    ) -> Iterator[bytes]:
        """The reply's body as the owner writes it; closing it (the client went away) closes the connection.
        A `standing` stream (a session's GET stream) is counted in `relayed`: a drain ends it cleanly. An owner
        that stops mid-reply ends it too, in one line naming the owner."""
        done = False
        counted = standing and self.relayed.begin(conn)
        try:
            if standing and not counted:  # draining: ended as soon as it has begun (its client opens it again)
                return
            yield from conn.chunks(reply)
            done = not self.relayed.ending or not counted
        except (OSError, http.client.HTTPException) as exc:  # IncompleteRead: the owner's chunked reply cut short
            if not (counted and self.relayed.ending):
                log.warning("a stream relayed from instance %s was cut: %s", owner, describe(exc))
        finally:
            if counted:
                self.relayed.finish(conn)
            if done:
                self._release(origin, conn, reply)
            else:
                conn.close()

    def report_gone(self, owner: str, reason: str) -> None:
        """An owner that cannot be reached: its kept sessions are taken over (serve/cluster/takeover.py); said once."""
        if owner in self._gone:
            return
        if len(self._gone) >= GONE_REPORTS:
            self._gone.clear()
        self._gone.add(owner)
        log.warning("instance %s is gone (%s): its kept sessions are taken over where asked for", owner, reason)

    def close(self) -> None:
        self.watch.stop()
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


# a reply's headers relayed: the first of each name, the repeated ones, whether the owner reads POSTs' values in
# their bodies, whether the headers are JSON_ONLY's and none repeated
RelayedHead = tuple[dict[str, str], list[tuple[str, str]], bool, bool]


def returned(received: list[tuple[str, str]]) -> RelayedHead:
    """An owner's reply headers as relayed: the first of each name, the repeated ones (Set-Cookie) after them,
    whether the owner said it reads a POST's value in its body (its Mcpgate-Forwarded: body, never relayed), and
    whether they are its Content-Type of JSON alone."""
    headers: dict[str, str] = {}
    extra: list[tuple[str, str]] = []
    body_form = False
    for name, value in received:
        lowered = name.lower()
        if lowered in NOT_RETURNED:
            if lowered == FORWARDED_NAME and value == BODY_FORM:
                body_form = True
            continue
        if name in headers:  # a repeated header stays repeated
            extra.append((name, value))
        else:
            headers[name] = value
    return headers, extra, body_form, headers == JSON_ONLY and not extra


def describe(exc: BaseException) -> str:
    """An error in a few words (IncompleteRead's own repr holds the bytes read so far)."""
    if isinstance(exc, http.client.IncompleteRead):
        return f"the owner closed the connection mid-reply ({len(exc.partial)} bytes of a chunk read)"
    return f"{type(exc).__name__}: {exc}"


def read_body(environ: dict[str, Any], limit: int) -> bytes:
    """The body of a request no handler has read (a forward is decided before one runs), at most `limit`
    bytes (413 past it, as the owner would answer); the raw message a handler parsed when one already read it."""
    message = context(environ).message
    if message is not None:
        raw = getattr(message, "raw", None)
        return raw if isinstance(raw, bytes) else b""
    return unread_body(environ, limit)


def unread_body(environ: dict[str, Any], limit: int) -> bytes:
    """The body of a request nothing has read yet (the guard's check of a forwarded one, a forward decided before
    the handler), at most `limit` bytes (413 past it, as the owner would answer)."""
    body = HttpRequest(environ).read_body(limit)
    if body is None:
        raise Refusal(413, jsonrpc.INVALID_REQUEST, f"Payload Too Large: the body exceeds {limit} bytes")
    return body
