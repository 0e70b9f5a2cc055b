"""The Streamable HTTP endpoint (2025-03-26, 2025-06-18, 2025-11-25): POST, GET and DELETE.

Each refusal is raised as a Refusal where it is decided; the app's Endpoint (serve/front/app.py), in front of
every path, turns it into the HTTP error once, so the handlers below read as the path of a request that
is served.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from mcpgate.core import jsonrpc, modern, versions, wire
from mcpgate.core.jsonrpc import Batch, Invalid, Notification, Request
from mcpgate.core.replay import MAX_ID_CHARS, CannotResume
from mcpgate.observe import tracing
from mcpgate.serve.cluster import takeover
from mcpgate.serve.errors import BadRequest, MethodNotAllowed, SessionNotFound, ShuttingDown, answered
from mcpgate.serve.front import auth, checks, reply
from mcpgate.serve.front.checks import ACCEPT_PASSED, JSON_CONTENT_PASSED
from mcpgate.serve.front.context import CONTEXT, RequestContext, context
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal, header_text, json_response
from mcpgate.serve.front.reply import SSE_HEADERS, Client
from mcpgate.serve.kinds import EndCause
from mcpgate.serve.modern import stateless
from mcpgate.serve.modern.era_probe import Era
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions.inbound import batch_items, forward, open_session
from mcpgate.serve.sessions.session import Delivery, Session, Stream

log = logging.getLogger("mcpgate.http")
_CALLS = (Request, Notification)  # what a client sends to be answered or told (not a response, batch or error)
# Era's members read once: a member read off its class costs a Python-level call in Python 3.11 (EnumType's
# __getattr__ makes the class's attribute lookup the slow hook), about 1,000 instructions each time
_MODERN, _LEGACY = Era.MODERN, Era.LEGACY
# the headers a POST reads, by their environ keys (post_headers)
_ACCEPT, _CONTENT_TYPE = wire.environ_key("Accept"), wire.environ_key("Content-Type")
_SESSION_ID, _PROTOCOL_VERSION = wire.environ_key(wire.SESSION_ID), wire.environ_key(wire.PROTOCOL_VERSION)
_PLAIN = frozenset((str, type(None)))  # values HttpRequest.header gives as they are (a str subclass's is converted)


@answered
def handle(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    """The MCP endpoint: the method's reply (a Refusal raised on the way is the caller's to answer)."""
    if request.method == "POST":
        return post(gw, request)
    if gw.settings.modern_only:  # 2026-07-28 has no GET stream and no session to delete
        raise MethodNotAllowed("POST")
    if request.method == "GET":
        return get(gw, request)
    if request.method == "DELETE":
        return delete(gw, request)
    raise MethodNotAllowed("GET, POST, DELETE")


def post_headers(environ: dict[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """A POST's Accept, Content-Type, session id and protocol version, each as HttpRequest.header gives it, read
    in one call (a header's own call costs ~1,400 instructions; a POST read five)."""
    get = environ.get
    accept, content_type, session_id, version = (
        get(_ACCEPT),
        get(_CONTENT_TYPE),
        get(_SESSION_ID),
        get(_PROTOCOL_VERSION),
    )
    if (
        type(accept) in _PLAIN
        and type(content_type) in _PLAIN
        and type(session_id) in _PLAIN
        and type(version) in _PLAIN
    ):
        return accept, content_type, session_id, version
    return header_text(accept), header_text(content_type), header_text(session_id), header_text(version)


def find_session(gw: PublishedServer, request: HttpRequest) -> Session:
    """The request's session (a Refusal when there is none or the version header does not match it)."""
    session_id, header = request.header(wire.SESSION_ID), request.header(wire.PROTOCOL_VERSION)
    return session_of(gw, request, session_id, header, auth.principal(request.environ))


def session_of(
    gw: PublishedServer, request: HttpRequest, session_id: str | None, header: str | None, owner: str
) -> Session:
    """find_session's, with the request's session id, protocol version header and principal (`owner`) read."""
    if session_id is None:
        raise BadRequest(f"Bad Request: the {wire.SESSION_ID} header is required")
    session = gw.get(session_id, owner)
    if session is None and gw.keeper is not None:  # its process is gone: taken over here (cluster/takeover.py)
        session = takeover.revive(gw, request, session_id)
    if session is None or session.ended:
        raise SessionNotFound("Session not found: initialize a new session")
    if header is not None and header not in versions.HANDSHAKE:  # a revision a handshake gives passes as it is
        check = versions.check_header(header, session.version)
        if check.error:
            raise BadRequest(f"Bad Request: {check.error}")
    return session


def post(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    environ = request.environ
    accept, content_type, session_id, version = post_headers(environ)
    if ACCEPT_PASSED.get(accept) is not True:  # a value that passed before (the checks' memo) needs no call
        checks.require_post_accept(accept)
    if JSON_CONTENT_PASSED.get(content_type) is not True:
        checks.require_json_content(content_type)
    noted = environ.get(CONTEXT)  # context(environ)'s, its call only to make one
    if type(noted) is not RequestContext:
        noted = context(environ)
    body = request.read_body(gw.settings.max_body_bytes)  # checks.read_body's, without its call
    if body is None:
        raise checks.too_large(gw.settings.max_body_bytes)
    message = noted.message = jsonrpc.parse(body)
    if isinstance(message, Invalid):
        raise Refusal(400, message.code, message.reason, message.id)
    trace = environ.get(tracing.KEY)
    if trace is not None:  # its span; the child's request names the span of the wait for it
        message = tracing.to_child(environ, message)
    modern_only = gw.settings.modern_only  # read after the body (nothing waits between its three uses)
    if modern_only and isinstance(message, Request) and message.method == "initialize":
        refuse_initialize(message)
    if isinstance(message, _CALLS):
        if session_id is not None:  # era's answer for a session's request (the usual case): its first question alone
            if modern_only or modern.is_modern(message):
                return stateless.post(gw, request, message)
        else:  # a 2026-07-28 request the ladder passes (its usual case) is modern: its _meta, read once, goes on
            meta = modern.served_environ(message, environ) if type(message) is Request else None
            if meta is not None or modern_only or era(message, session_id, version) is _MODERN:
                return stateless.post(gw, request, message, meta)
    if modern_only:
        raise BadRequest("Invalid Request: a POST carries one request or notification")
    if isinstance(message, Request) and message.method == "initialize":
        return initialize(gw, request, message)
    owner = auth.principal(environ)  # whose session it must be: one decision, in auth
    if trace is not None:
        began = tracing.now()
        try:
            session = session_of(gw, request, session_id, version, owner)
        finally:
            trace.append((tracing.SESSION, began, tracing.now()))  # (tracing's step, appended to its list: no call)
    else:
        session = session_of(gw, request, session_id, version, owner)
    return exchange(gw, session, batch_items(session, message) if isinstance(message, Batch) else [message], environ)


handle_post = answered(post)  # handle's POST case itself, the table applied as to handle (serve/front/app.py)


def era(message: Request | Notification, session_id: str | None, header: str | None) -> Era:
    """MODERN (2026-07-28) on positive evidence: its _meta (or method) says so, or it carries a modern
    MCP-Protocol-Version (`header`) and no session id (a modern client whose _meta is missing: the ladder says
    what)."""
    if modern.is_modern(message):
        return _MODERN
    if session_id is not None:  # a session's request (the usual case: asked first)
        return _LEGACY
    return _MODERN if header is not None and versions.is_modern(header.strip()) else _LEGACY


def refuse_initialize(message: Request) -> None:
    """A modern-only endpoint refuses a legacy handshake, naming the revisions it serves."""
    params = message.params if isinstance(message.params, dict) else {}
    requested = params.get("protocolVersion")
    data = {"supported": list(versions.MODERN), "requested": requested if isinstance(requested, str) else None}
    raise Refusal(
        400,
        jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version: this endpoint serves only {', '.join(versions.MODERN)} (no initialize)",
        message.id,
        data,
    )


def initialize(gw: PublishedServer, request: HttpRequest, message: Request) -> HttpResponse:
    if request.header(wire.SESSION_ID) is not None:
        raise BadRequest(
            f"Bad Request: initialize starts a new session and must not carry {wire.SESSION_ID}", message.id
        )
    if gw.closing:
        raise ShuttingDown(message.id)
    session = open_session(gw, request)
    return exchange(gw, session, [message], request.environ, new_session=True)


def exchange(
    gw: PublishedServer, session: Session, items: list[Any], environ: dict[str, Any], new_session: bool = False
) -> HttpResponse:
    """Forward a POST's messages to the child; reply 202, JSON or SSE (the client's connection watched: `environ`'s,
    Client.of)."""
    if len(items) == 1:  # the usual POST: one message
        requests = items if isinstance(items[0], Request) else []
    else:
        requests = [item for item in items if isinstance(item, Request)]
    early: list[bytes] = []  # answers the gateway gives itself (invalid batch members)
    stream = session.open_stream(requests) if requests else None  # DuplicateRequestId: the endpoint's table
    for item in items:
        if isinstance(item, Invalid):
            early.append(jsonrpc.encode(jsonrpc.error_response(item.id, item.code, item.reason)))
            continue
        forward(session, item)
    if stream is None:
        if early:
            return json_response(b"[" + b",".join(early) + b"]", 400)
        return HttpResponse(202)
    headers = {wire.SESSION_ID: session.id} if new_session else {}
    if early:
        answers = reply.answer_or_switch(stream, gw.settings.sse_after, early=[Delivery(data) for data in early])
    else:  # the usual POST (no invalid member answered here): positional, a keyword's cost spared
        answers = reply.answer_or_switch(stream, gw.settings.sse_after)
    if isinstance(answers, reply.Turn):  # SSE from the first other message (the reply machine requeued it)
        return sse_reply(gw, session, stream, Client.of(environ), headers, new_session)
    session.reply_sent(stream)
    if new_session:
        check_initialized(session)
    body = b"[" + b",".join(item.data for item in answers) + b"]" if len(items) > 1 else answers[0].data
    return json_response(body, headers=headers)


def sse_reply(
    gw: PublishedServer, session: Session, stream: Stream, client: Client, headers: dict[str, str], new_session: bool
) -> HttpResponse:
    if versions.resumable_streams(session.version):
        session.make_resumable(stream)
    events = sse_events(gw, session, stream, stream.reader, [], client, answers=True, new_session=new_session)
    return HttpResponse(200, events, "text/event-stream", {**SSE_HEADERS, **headers})


def sse_events(
    gw: PublishedServer,
    session: Session,
    stream: Stream,
    reader: int,
    missed: list[tuple[str, bytes]],
    client: Client,
    *,
    answers: bool,
    after: str | None = None,
    new_session: bool = False,
) -> Iterator[bytes]:
    """`reader`'s SSE events of a stream (the reply machine's): the priming event (2025-11-25; its id is
    `after`, the resumed event, or the stream's seq 0) or a first comment, what a resume missed, then the
    stream's messages (until every request is answered, when `answers`), keepalives between them."""

    def ended() -> None:
        session.release_stream(stream, reader)
        if new_session:
            check_initialized(session)

    return reply.events(
        stream,
        keepalive=gw.settings.keepalive,
        client=client,
        reader=reader,
        opening=reply.opening(
            stream,
            priming=stream.log is not None and versions.priming_event_supported(session.version),
            retry=gw.settings.sse_retry,
            answers=answers,
            after=after,
            missed=missed,
        ),
        answers=answers,
        on_keepalive=None if answers else lambda: gw.touch(session),
        on_end=ended,
    )


def check_initialized(session: Session) -> None:
    """A session whose initialize did not succeed ends at once."""
    if session.version is None:
        session.end(EndCause.INITIALIZE_FAILED)
    elif session.keeper is not None and session.handshake is not None and session.bridge is None and not session.ended:
        session.keeper.opened(session.id, session.owner, *session.handshake, session.tag, session.view)  # kept.py


def get(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    checks.require_get_accept(request.header("Accept"))
    session = find_session(gw, request)
    last_event_id = request.header(wire.LAST_EVENT_ID)
    client = Client.of(request.environ)
    if last_event_id is not None and versions.resumable_streams(session.version):
        return resume(gw, session, last_event_id, client)
    stream = session.open_get_stream()
    if stream is None:
        raise Refusal(409, jsonrpc.INVALID_REQUEST, "Conflict: this session already has a GET stream open")
    if versions.resumable_streams(session.version):
        session.make_resumable(stream)
    return HttpResponse(200, get_stream(gw, session, stream, client), "text/event-stream", SSE_HEADERS)


def get_stream(gw: PublishedServer, session: Session, stream: Stream, client: Client) -> Iterator[bytes]:
    """The session's GET stream: its messages as SSE events, keepalive comments between them; it ends as soon
    as its client is gone."""
    return sse_events(gw, session, stream, stream.reader, [], client, answers=False)


def resume(gw: PublishedServer, session: Session, last_event_id: str, client: Client) -> HttpResponse:
    """A GET with Last-Event-ID: what the named stream sent after that event, then its live messages."""
    resumed = takeover.before_restart(session, last_event_id) or session.resume(last_event_id)
    if isinstance(resumed, CannotResume):
        status = 409 if resumed.conflict else 400
        data = {"lastEventId": last_event_id[:MAX_ID_CHARS], "expired": resumed.expired}
        raise Refusal(status, jsonrpc.INVALID_REQUEST, f"Cannot resume: {resumed.reason}", data=data)
    stream = resumed.stream
    log.info("session %s: resumed stream %d, replaying %d events", session.label, stream.number, len(resumed.missed))
    events = sse_events(
        gw, session, stream, resumed.reader, resumed.missed, client, answers=not stream.get, after=resumed.after
    )
    return HttpResponse(200, events, "text/event-stream", SSE_HEADERS)


def delete(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    session = find_session(gw, request)
    session.end(EndCause.CLIENT_DELETED)
    return HttpResponse(204)
