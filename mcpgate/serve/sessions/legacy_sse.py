"""The 2024-11-05 HTTP+SSE transport: GET on the SSE path opens a session's event stream, POST on the messages
path (?session_id=...) carries the client's messages.

Only the HTTP framing is this module's: the session, its child, the router, the limits and the guard (Host,
Origin, the bearer token, in the app's Endpoint) are those of the Streamable HTTP endpoint's sessions
(serve/sessions/inbound.py), the stream's reply is the reply machine's (serve/front/reply.py). The session's one event
stream is its GET stream, and every request a client POSTs is added to it, so the router sends every message of
the child (responses, progress, its own requests) there and nowhere else. A POST is answered 202; its reply comes
on the stream. When the stream closes, the session ends: the client's leaving is noticed as its connection reads
as ended (the reply machine's watch on the socket), not at the next keepalive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from urllib.parse import parse_qs, quote

from mcpgate.core import jsonrpc, versions, wire
from mcpgate.core.jsonrpc import Invalid, Request
from mcpgate.core.sse import encode_event
from mcpgate.serve.errors import BadRequest, MethodNotAllowed, SessionNotFound, ShuttingDown, answered
from mcpgate.serve.front import auth, checks, reply
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal
from mcpgate.serve.front.reply import SSE_HEADERS, Client
from mcpgate.serve.kinds import EndCause
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions.inbound import batch_items, forward, open_session
from mcpgate.serve.sessions.session import Session, Stream

log = logging.getLogger("mcpgate.legacy_sse")

SESSION_PARAM = wire.SESSION_PARAM
ENDPOINT_EVENT = "endpoint"


@answered
def open_stream(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    """GET on the SSE path: a new session, its child started, its event stream as the reply."""
    if request.method != "GET":
        raise MethodNotAllowed("GET")
    require_sse_accept(request.header("Accept"))
    if gw.closing:
        raise ShuttingDown()
    session = open_session(gw, request)
    stream = session.open_event_stream()
    if stream is None:  # a session just made has no stream open; never leave one without its stream
        session.end(EndCause.NO_EVENT_STREAM)
        raise Refusal(500, jsonrpc.INTERNAL_ERROR, "Internal Server Error")
    url = endpoint_url(request.environ.get("SCRIPT_NAME", ""), gw.settings.messages_path, session.id)
    log.info("session %s: HTTP+SSE stream opened", session.label)
    events = event_stream(gw, session, stream, url, Client.of(request.environ))
    return HttpResponse(200, events, "text/event-stream", SSE_HEADERS)


def require_sse_accept(header: str | None) -> None:
    """The revision asks for no Accept, but every client of it sends text/event-stream (an EventSource, the
    SDKs): a GET without it (an <img> of another site's page, whose */* would pass) opens no session."""
    checks.require_event_stream_accept(header)


def endpoint_url(script_name: str, messages_path: str, session_id: str) -> str:
    """The URI the `endpoint` event names: relative (the client resolves it against the SSE URL, so it holds
    whatever host and scheme the client reached), under the app's mount point."""
    return f"{script_name.rstrip('/')}{messages_path}?{SESSION_PARAM}={quote(session_id, safe='')}"


def event_stream(gw: PublishedServer, session: Session, stream: Stream, url: str, client: Client) -> Iterator[bytes]:
    """The `endpoint` event, then the session's stream as a GET stream (message events, keepalive comments);
    its end, for whatever reason (the client's leaving, noticed at once, included), ends the session."""

    def ended() -> None:
        session.release_stream(stream, stream.reader)
        session.end(EndCause.CLIENT_CLOSED_SSE)

    return reply.events(
        stream,
        keepalive=gw.settings.keepalive,
        client=client,
        reader=stream.reader,
        opening=[encode_event(url.encode(), ENDPOINT_EVENT), *reply.opening(stream, priming=False, answers=False)],
        answers=False,
        on_keepalive=lambda: gw.touch(session),
        on_end=ended,
    )


@answered
def post_message(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    """POST on the messages path: the message goes to the session's child; 202, the reply comes on the stream."""
    if request.method != "POST":
        raise MethodNotAllowed("POST")
    checks.require_json_content(request.header("Content-Type"))
    session, stream = find_session(gw, request)
    message = context(request.environ).message = jsonrpc.parse(checks.read_body(request, gw.settings.max_body_bytes))
    if isinstance(message, Invalid):
        raise Refusal(400, message.code, message.reason, message.id)
    items = batch_items(session, message)
    session.add_requests([item for item in items if isinstance(item, Request)], stream)  # DuplicateRequestId
    for item in items:
        if isinstance(item, Invalid):  # a batch member: its error goes where its reply would have gone
            stream.deliver(jsonrpc.encode(jsonrpc.error_response(item.id, item.code, item.reason)))
        else:
            forward(session, item)
    return HttpResponse(202)


def find_session(gw: PublishedServer, request: HttpRequest) -> tuple[Session, Stream]:
    """The session the query names and its open event stream (a Refusal when there is none)."""
    values = parse_qs(request.environ.get("QUERY_STRING", "")).get(SESSION_PARAM, [])
    if len(values) != 1:
        raise BadRequest(f"Bad Request: one {SESSION_PARAM} query parameter is required")
    session = gw.get(values[0], auth.principal(request.environ))
    stream = session.event_stream if session is not None and not session.ended else None
    if session is None or stream is None or stream.closed:
        raise SessionNotFound("Session not found: open a new stream")
    check = versions.check_header(request.header(wire.PROTOCOL_VERSION), session.version)
    if check.error:
        raise BadRequest(f"Bad Request: {check.error}")
    return session, stream
