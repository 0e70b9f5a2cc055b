"""The Streamable HTTP endpoint (2025-03-26, 2025-06-18, 2025-11-25): POST, GET and DELETE.

Each refusal is raised as a Refusal where it is decided; the app's Endpoint (serve/front/app.py), in front of
every path, turns it into the HTTP error once, so the handlers below read as the path of a request that
is served.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from mcpgate.child.spawn import ChildSpawnError
from mcpgate.core import jsonrpc, modern, versions, wire
from mcpgate.core.jsonrpc import Batch, Invalid, Message, Notification, Request
from mcpgate.core.jsonrpc import Response as RpcResponse
from mcpgate.core.replay import MAX_ID_CHARS, CannotResume
from mcpgate.core.routing import DuplicateRequestId
from mcpgate.core.sessions import SessionLimitReached
from mcpgate.core.sse import encode_comment, encode_event, encode_priming
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.serve.front import auth, checks
from mcpgate.serve.front.http import MESSAGE, HttpRequest, HttpResponse, Refusal, json_response
from mcpgate.serve.modern import stateless
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions.session import END, Delivery, Session, Stream

log = logging.getLogger("mcpgate.http")

SSE_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
# What a caller learns when the command cannot be started; the reason (paths, PATH) goes to the log only.
CANNOT_START = "Cannot start the MCP server; the gateway log has the details"


def handle(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    """The MCP endpoint: the method's reply (a Refusal raised on the way is the caller's to answer)."""
    if request.method == "POST":
        return post(gw, request)
    if gw.settings.modern_only:  # 2026-07-28 has no GET stream and no session to delete
        raise Refusal(405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", headers={"Allow": "POST"})
    if request.method == "GET":
        return get(gw, request)
    if request.method == "DELETE":
        return delete(gw, request)
    raise Refusal(405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", headers={"Allow": "GET, POST, DELETE"})


def find_session(gw: PublishedServer, request: HttpRequest) -> Session:
    """The request's session (a Refusal when there is none or the version header does not match it)."""
    session_id = request.header(wire.SESSION_ID)
    if session_id is None:
        raise Refusal(400, jsonrpc.INVALID_REQUEST, f"Bad Request: the {wire.SESSION_ID} header is required")
    session = gw.get(session_id, auth.principal(request.environ))
    if session is None or session.ended:
        raise Refusal(404, jsonrpc.INVALID_REQUEST, "Session not found: initialize a new session")
    check = versions.check_header(request.header(wire.PROTOCOL_VERSION), session.version)
    if check.error:
        raise Refusal(400, jsonrpc.INVALID_REQUEST, f"Bad Request: {check.error}")
    return session


def post(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    checks.require_post_accept(request.header("Accept"))
    checks.require_json_content(request.header("Content-Type"))
    message = request.environ[MESSAGE] = jsonrpc.parse(read_body(request, gw.settings.max_body_bytes))
    if isinstance(message, Invalid):
        raise Refusal(400, message.code, message.reason, message.id)
    if gw.settings.modern_only and isinstance(message, Request) and message.method == "initialize":
        refuse_initialize(message)
    if isinstance(message, Request | Notification) and (gw.settings.modern_only or era_is_modern(request, message)):
        return stateless.post(gw, request, message)
    if gw.settings.modern_only:
        raise Refusal(400, jsonrpc.INVALID_REQUEST, "Invalid Request: a POST carries one request or notification")
    if isinstance(message, Request) and message.method == "initialize":
        return initialize(gw, request, message)
    session = find_session(gw, request)
    return exchange(gw, session, batch_items(session, message))


def read_body(request: HttpRequest, limit: int) -> bytes:
    body = request.read_body(limit)
    if body is None:
        raise Refusal(413, jsonrpc.INVALID_REQUEST, f"Payload Too Large: the body exceeds {limit} bytes")
    return body


def batch_items(session: Session, message: Message) -> list[Any]:
    """The messages a POST carries: a batch's members (where the session's revision allows them), or itself."""
    if not isinstance(message, Batch):
        return [message]
    if not versions.allows_batch(session.version):
        raise Refusal(
            400,
            jsonrpc.INVALID_REQUEST,
            f"Invalid Request: batches are not allowed in protocol revision {session.version}",
        )
    return message.items


def era_is_modern(request: HttpRequest, message: Request | Notification) -> bool:
    """A 2026-07-28 request, on positive evidence: its _meta (or method) says so, or it carries a modern
    MCP-Protocol-Version and no session id (a modern client whose _meta is missing: the ladder says what)."""
    if modern.is_modern(message):
        return True
    header = request.header(wire.PROTOCOL_VERSION)
    return header is not None and versions.is_modern(header.strip()) and request.header(wire.SESSION_ID) is None


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
        raise Refusal(
            400,
            jsonrpc.INVALID_REQUEST,
            f"Bad Request: initialize starts a new session and must not carry {wire.SESSION_ID}",
            message.id,
        )
    if gw.closing:
        raise Refusal(
            503, jsonrpc.INTERNAL_ERROR, "The gateway is shutting down", message.id, headers={"Retry-After": "5"}
        )
    return exchange(gw, open_session(gw, request, message.id), [message], new_session=True)


def open_session(gw: PublishedServer, request: HttpRequest, request_id: jsonrpc.Id | None) -> Session:
    try:
        session = gw.open_session(auth.principal(request.environ))
    except SessionLimitReached as exc:
        raise Refusal(
            503, jsonrpc.INTERNAL_ERROR, f"Service Unavailable: {exc}", request_id, headers={"Retry-After": "30"}
        ) from exc
    except ChildSpawnError as exc:
        log.error("cannot start the MCP server: %s", exc)
        raise Refusal(502, jsonrpc.INTERNAL_ERROR, CANNOT_START, request_id) from exc
    session.tools = ToolFilter.of(gw.settings.tools_allow, gw.settings.tools_deny)
    return session


def exchange(gw: PublishedServer, session: Session, items: list[Any], new_session: bool = False) -> HttpResponse:
    """Forward a POST's messages to the child; reply 202, JSON or SSE."""
    requests = [item for item in items if isinstance(item, Request)]
    early: list[bytes] = []  # answers the gateway gives itself (invalid batch members)
    try:
        stream = session.open_stream(requests) if requests else None
    except DuplicateRequestId as exc:
        raise Refusal(400, jsonrpc.INVALID_REQUEST, f"Invalid Request: {exc}", exc.request_id) from exc
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
    return reply(gw, session, stream, early, batch=len(items) > 1, headers=headers, new_session=new_session)


def forward(session: Session, item: Request | Notification | RpcResponse) -> None:
    if session.tools is not None and isinstance(item, Request) and answered_hidden(session, session.tools, item):
        return
    if isinstance(item, Notification) and item.method == "notifications/cancelled":
        params = item.params if isinstance(item.params, dict) else {}
        if jsonrpc.is_valid_id(params.get("requestId")):
            session.cancel(params["requestId"])
    if not session.send_message(item):
        log.warning(
            "session %s: could not forward a message to the child (%s)",
            session.label,
            session.ended or "child not accepting input",
        )


def answered_hidden(session: Session, tools: ToolFilter, item: Request) -> bool:
    """A tools/call of a hidden tool is answered here as a server answers an unknown tool, never forwarded."""
    hidden = tools.hidden_call(item)
    if hidden is not None:
        session.answer(item.id, tools.refusal(item.id, hidden))
    return hidden is not None


def reply(
    gw: PublishedServer,
    session: Session,
    stream: Stream,
    early: list[bytes],
    *,
    batch: bool,
    headers: dict[str, str],
    new_session: bool,
) -> HttpResponse:
    """JSON when the child answers first and in time; otherwise SSE from the first other message."""
    settings = gw.settings
    collected = [Delivery(data) for data in early]
    timeout: float | None = settings.sse_after
    while stream.expected > 0:
        item = stream.next(timeout)
        if not isinstance(item, Delivery) or not item.done:  # not answered in time, or another message first
            if isinstance(item, Delivery):
                collected.append(item)
            stream.expected += sum(1 for taken in collected if taken.done)
            stream.requeue(collected)  # the SSE reader sends them first, with event ids
            return sse_reply(gw, session, stream, headers, new_session)
        collected.append(item)
        stream.expected -= 1
    session.close_stream(stream)
    if new_session:
        check_initialized(session)
    body = b"[" + b",".join(item.data for item in collected) + b"]" if batch else collected[0].data
    return json_response(body, headers=headers)


def sse_reply(
    gw: PublishedServer, session: Session, stream: Stream, headers: dict[str, str], new_session: bool
) -> HttpResponse:
    if versions.resumable_streams(session.version):
        session.make_resumable(stream)
    events = sse_events(gw, session, stream, stream.reader, [], answers=True, new_session=new_session)
    return HttpResponse(200, events, "text/event-stream", {**SSE_HEADERS, **headers})


def sse_events(
    gw: PublishedServer,
    session: Session,
    stream: Stream,
    reader: int,
    missed: list[tuple[str, bytes]],
    *,
    answers: bool,
    after: str | None = None,
    new_session: bool = False,
) -> Iterator[bytes]:
    """`reader`'s SSE events of a stream: the priming event (2025-11-25; its id is `after`, the resumed
    event, or the stream's seq 0) or a first comment, what a resume missed, then the stream's messages
    (until every request is answered, when `answers`), keepalives between them."""
    keepalive = gw.settings.keepalive
    try:
        if stream.log is not None and versions.priming_event_supported(session.version):
            yield encode_priming(after or stream.id_prefix + "0", round(gw.settings.sse_retry * 1000))
        elif not answers:
            yield encode_comment("stream open")
        elif not (stream.unread[0] or missed):
            yield encode_comment("waiting")  # headers and a first byte now, so proxies keep the request
        for event_id, data in missed:
            yield encode_event(data, event_id=event_id)
        while not answers or stream.expected > 0:
            item = stream.next(keepalive, reader)
            if item is None:
                yield encode_comment("keepalive")
                if not answers:
                    gw.touch(session)  # the write above succeeded: the client is still there
                continue
            if item is END:
                break
            yield encode_event(item.data, event_id=stream.record(item))
            if answers and item.done:
                stream.expected -= 1
    finally:
        session.release_stream(stream, reader)
        if new_session:
            check_initialized(session)


def check_initialized(session: Session) -> None:
    """A session whose initialize did not succeed ends at once."""
    if session.version is None:
        session.end("initialize did not succeed")


def get(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    checks.require_get_accept(request.header("Accept"))
    session = find_session(gw, request)
    last_event_id = request.header(wire.LAST_EVENT_ID)
    if last_event_id is not None and versions.resumable_streams(session.version):
        return resume(gw, session, last_event_id)
    stream = session.open_get_stream()
    if stream is None:
        raise Refusal(409, jsonrpc.INVALID_REQUEST, "Conflict: this session already has a GET stream open")
    if versions.resumable_streams(session.version):
        session.make_resumable(stream)
    return HttpResponse(200, get_stream(gw, session, stream), "text/event-stream", SSE_HEADERS)


def get_stream(gw: PublishedServer, session: Session, stream: Stream) -> Iterator[bytes]:
    """The session's GET stream: its messages as SSE events, keepalive comments between them."""
    return sse_events(gw, session, stream, stream.reader, [], answers=False)


def resume(gw: PublishedServer, session: Session, last_event_id: str) -> HttpResponse:
    """A GET with Last-Event-ID: what the named stream sent after that event, then its live messages."""
    resumed = session.resume(last_event_id)
    if isinstance(resumed, CannotResume):
        status = 409 if resumed.conflict else 400
        data = {"lastEventId": last_event_id[:MAX_ID_CHARS], "expired": resumed.expired}
        raise Refusal(status, jsonrpc.INVALID_REQUEST, f"Cannot resume: {resumed.reason}", data=data)
    stream = resumed.stream
    log.info("session %s: resumed stream %d, replaying %d events", session.label, stream.number, len(resumed.missed))
    answers = not stream.get
    events = sse_events(gw, session, stream, resumed.reader, resumed.missed, answers=answers, after=resumed.after)
    return HttpResponse(200, events, "text/event-stream", SSE_HEADERS)


def delete(gw: PublishedServer, request: HttpRequest) -> HttpResponse:
    session = find_session(gw, request)
    session.end("the client ended the session")
    return HttpResponse(204)
