"""The Streamable HTTP endpoint (2025-03-26, 2025-06-18, 2025-11-25): POST, GET and DELETE."""

from __future__ import annotations

import logging
from typing import Any, Iterator

from ..spawn import ChildSpawnError
from ..core import jsonrpc, versions, wire
from ..core.jsonrpc import Batch, Invalid, Notification, Request, Response as RpcResponse
from ..core.routing import DuplicateRequestId
from ..core.sessions import SessionLimitReached
from ..core.sse import encode_comment, encode_event
from . import checks
from .gateway import Gateway
from .http import HttpRequest, HttpResponse, json_response, rpc_error
from .session import CLOSE, Session, Stream

log = logging.getLogger("mcpgate.http")

SESSION_HEADER = "Mcp-Session-Id"
UNSUPPORTED_PROTOCOL_VERSION = -32022
SSE_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}



def handle(gw: Gateway, request: HttpRequest) -> HttpResponse:
    """The MCP endpoint: dispatch on the method."""
    if request.method == "POST":
        return post(gw, request)
    if request.method == "GET":
        return get(gw, request)
    if request.method == "DELETE":
        return delete(gw, request)
    return rpc_error(405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", headers={"Allow": "GET, POST, DELETE"})


def find_session(gw: Gateway, request: HttpRequest) -> Session | HttpResponse:
    """The request's session, or the error response that refuses it."""
    session_id = request.header(SESSION_HEADER)
    if session_id is None:
        return rpc_error(400, jsonrpc.INVALID_REQUEST, f"Bad Request: the {SESSION_HEADER} header is required")
    session = gw.get(session_id)
    if session is None or session.ended:
        return rpc_error(404, jsonrpc.INVALID_REQUEST, "Session not found: initialize a new session")
    check = versions.check_header(request.header(wire.PROTOCOL_VERSION), session.version)
    if check.error:
        return rpc_error(400, jsonrpc.INVALID_REQUEST, f"Bad Request: {check.error}")
    return session


def post(gw: Gateway, request: HttpRequest) -> HttpResponse:
    problem = checks.post_accept_problem(request.header("Accept"))
    if problem:
        return rpc_error(406, jsonrpc.INVALID_REQUEST, problem)
    problem = checks.content_type_problem(request.header("Content-Type"))
    if problem:
        return rpc_error(415, jsonrpc.INVALID_REQUEST, problem)
    limit = gw.settings.max_body_bytes
    body = request.read_body(limit)
    if body is None:
        return rpc_error(413, jsonrpc.INVALID_REQUEST, f"Payload Too Large: the body exceeds {limit} bytes")
    message = jsonrpc.parse(body)
    if isinstance(message, Invalid):
        return rpc_error(400, message.code, message.reason, message.id)
    if isinstance(message, Request) and message.method == "initialize":
        return initialize(gw, request, message)
    session = find_session(gw, request)
    if isinstance(session, HttpResponse):
        return modern_probe_refusal(request) or session
    items: list[Any]
    if isinstance(message, Batch):
        if not versions.allows_batch(session.version):
            return rpc_error(400, jsonrpc.INVALID_REQUEST,
                             f"Invalid Request: batches are not allowed in protocol revision {session.version}")
        items = message.items
    else:
        items = [message]
    return exchange(gw, session, items)


def modern_probe_refusal(request: HttpRequest) -> HttpResponse | None:
    """A stateless-era request to this session-based endpoint: say which revisions are served."""
    requested = request.header(wire.PROTOCOL_VERSION)
    if requested is None or not versions.is_modern(requested.strip()) or request.header(SESSION_HEADER):
        return None
    data = {"supported": list(versions.STREAMABLE_SESSION), "requested": requested.strip()}
    return rpc_error(400, UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version {requested!r}",
                     data=data)


def initialize(gw: Gateway, request: HttpRequest, message: Request) -> HttpResponse:
    if request.header(SESSION_HEADER) is not None:
        return rpc_error(400, jsonrpc.INVALID_REQUEST,
                         f"Bad Request: initialize starts a new session and must not carry {SESSION_HEADER}",
                         message.id)
    if gw.closing:
        return rpc_error(503, jsonrpc.INTERNAL_ERROR, "The gateway is shutting down", message.id,
                         headers={"Retry-After": "5"})
    try:
        session = gw.open_session()
    except SessionLimitReached as exc:
        return rpc_error(503, jsonrpc.INTERNAL_ERROR, f"Service Unavailable: {exc}", message.id,
                         headers={"Retry-After": "30"})
    except ChildSpawnError as exc:
        log.error("cannot start the MCP server: %s", exc)
        return rpc_error(502, jsonrpc.INTERNAL_ERROR, f"Cannot start the MCP server: {exc}", message.id)
    return exchange(gw, session, [message], new_session=True)


def exchange(gw: Gateway, session: Session, items: list[Any], new_session: bool = False) -> HttpResponse:
    """Forward a POST's messages to the child; reply 202, JSON or SSE."""
    requests = [item for item in items if isinstance(item, Request)]
    early: list[bytes] = []  # answers the gateway gives itself (invalid batch members)
    try:
        stream = session.open_stream(requests) if requests else None
    except DuplicateRequestId as exc:
        return rpc_error(400, jsonrpc.INVALID_REQUEST, f"Invalid Request: {exc}", exc.request_id)
    for item in items:
        if isinstance(item, Invalid):
            early.append(jsonrpc.encode(jsonrpc.error_response(item.id, item.code, item.reason)))
            continue
        forward(session, item)
    if stream is None:
        if early:
            return json_response(b"[" + b",".join(early) + b"]", 400)
        return HttpResponse(202)
    headers = {SESSION_HEADER: session.id} if new_session else {}
    return reply(gw, session, stream, early, batch=len(items) > 1, headers=headers, new_session=new_session)


def forward(session: Session, item: Request | Notification | RpcResponse) -> None:
    if isinstance(item, Notification) and item.method == "notifications/cancelled":
        params = item.params if isinstance(item.params, dict) else {}
        if jsonrpc.is_valid_id(params.get("requestId")):
            session.cancel(params["requestId"])
    if not session.send(jsonrpc.raw_bytes(item)):
        log.warning("session %s: could not forward a message to the child (%s)", session.id[:8],
                    session.ended or "child not accepting input")


def reply(gw: Gateway, session: Session, stream: Stream, collected: list[bytes], *, batch: bool,
          headers: dict[str, str], new_session: bool) -> HttpResponse:
    """JSON when the child answers first and in time; otherwise SSE from the first other message."""
    settings = gw.settings
    collected = list(collected)
    timeout: float | None = settings.sse_after
    while stream.expected > 0:
        item = stream.next(timeout)
        if item is None or not item[1]:
            pending = collected + ([item[0]] if item is not None else [])
            events = sse_stream(session, stream, pending, new_session, settings.keepalive)
            return HttpResponse(200, events, "text/event-stream", {**SSE_HEADERS, **headers})
        collected.append(item[0])
        stream.expected -= 1
    session.close_stream(stream)
    if new_session:
        check_initialized(session)
    body = b"[" + b",".join(collected) + b"]" if batch else collected[0]
    return json_response(body, headers=headers)


def sse_stream(session: Session, stream: Stream, first: list[bytes], new_session: bool,
               keepalive: float) -> Iterator[bytes]:
    try:
        if not first:
            yield encode_comment("waiting")  # headers and a first byte now, so proxies keep the request
        for data in first:
            yield encode_event(data)
        while stream.expected > 0:
            item = stream.next(keepalive)
            if item is None:
                yield encode_comment("keepalive")
                continue
            data, done = item
            if data == CLOSE:
                break
            yield encode_event(data)
            if done:
                stream.expected -= 1
    finally:
        session.close_stream(stream)
        if new_session:
            check_initialized(session)


def check_initialized(session: Session) -> None:
    """A session whose initialize did not succeed ends at once."""
    if session.version is None:
        session.end("initialize did not succeed")


def get(gw: Gateway, request: HttpRequest) -> HttpResponse:
    problem = checks.get_accept_problem(request.header("Accept"))
    if problem:
        return rpc_error(406, jsonrpc.INVALID_REQUEST, problem)
    session = find_session(gw, request)
    if isinstance(session, HttpResponse):
        return session
    stream = session.open_get_stream()
    if stream is None:
        return rpc_error(409, jsonrpc.INVALID_REQUEST, "Conflict: this session already has a GET stream open")
    return HttpResponse(200, get_stream(gw, session, stream), "text/event-stream", SSE_HEADERS)


def get_stream(gw: Gateway, session: Session, stream: Stream) -> Iterator[bytes]:
    keepalive = gw.settings.keepalive
    try:
        yield encode_comment("stream open")
        while True:
            item = stream.next(keepalive)
            if item is None:
                yield encode_comment("keepalive")
                gw.touch(session)  # the write above succeeded: the client is still there
                continue
            if item[0] == CLOSE:
                break
            yield encode_event(item[0])
    finally:
        session.close_stream(stream)


def delete(gw: Gateway, request: HttpRequest) -> HttpResponse:
    session = find_session(gw, request)
    if isinstance(session, HttpResponse):
        return session
    session.end("the client ended the session")
    return HttpResponse(204)
