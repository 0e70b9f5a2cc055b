"""The 2026-07-28 (stateless) side of the MCP endpoint: one request per POST, served by the pool.

The ladder (core/modern.validate) refuses what is malformed; server/discover and subscriptions/listen
are answered by the gateway; every other request goes to a pooled child of the caller's principal
under a minted id. The reply is JSON when the child answers first and within MCPGATE_SSE_AFTER, else
an SSE stream scoped to the request (its progress and log messages, then the response). A stream the
client closes is the request's cancellation: the child is told as soon as the connection reads as ended (the
reply machine's watch on the socket, serve/front/reply.py), and what it sends later is dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

from mcpgate.core import jsonrpc, modern, modern_rewrites, mrtr, versions, wire
from mcpgate.core import tasks as core_tasks
from mcpgate.core.capabilities import INPUT_CAPABILITY
from mcpgate.core.jsonrpc import Notification, Request
from mcpgate.core.tool_filter import ToolFilter, pinned
from mcpgate.observe import audit, tracing
from mcpgate.serve.errors import ShuttingDown
from mcpgate.serve.front.auth import STATIC_PRINCIPAL
from mcpgate.serve.front.context import CONTEXT, RequestContext, context
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal, json_response
from mcpgate.serve.front.reply import SOCKET, SSE_HEADERS, Client, Turn, answer_or_switch, events
from mcpgate.serve.modern import tasks
from mcpgate.serve.modern.calls import new_call
from mcpgate.serve.modern.listen import ListenHub
from mcpgate.serve.modern.pool import Pool
from mcpgate.serve.modern.pooled_child import Call, Era, PooledChild
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions.stream import SPARES, Stream, StreamLimits
from mcpgate.serve.vault.errors import SlotsEmpty

log = logging.getLogger("mcpgate.http")

# The HTTP status of a JSON reply carrying one of these errors (else 200).
ERROR_STATUS = {jsonrpc.METHOD_NOT_FOUND: 404, modern.HEADER_MISMATCH: 400, modern.MISSING_CLIENT_CAPABILITY: 400}
ERROR_STATUS[jsonrpc.UNSUPPORTED_PROTOCOL_VERSION] = 400
_INPUT_CAPABILITIES = frozenset(INPUT_CAPABILITY.values())
# Enum members read once: a member read off its class (Era.LEGACY) costs a Python-level call in Python 3.11
# (EnumType's __getattr__ makes the class's attribute lookup the slow hook), about 1,000 instructions each time
_LEGACY, _GONE = Era.LEGACY, Turn.GONE
# The methods serve() answers other than by a call of its own: server/discover, subscriptions/listen, a task's.
_OWN_METHODS = frozenset({"server/discover", "subscriptions/listen", *core_tasks.METHODS})
_CAPABILITIES = wire.META_CLIENT_CAPABILITIES
# What an answered call points at once its stream is recycled for another request: closed, it takes nothing
SPENT = Stream(StreamLimits(0, 0, 0.0, 0, 0))
SPENT.close()


def post(
    gw: PublishedServer, request: HttpRequest, message: Request | Notification, meta: dict[str, Any] | None = None
) -> HttpResponse:
    """A 2026-07-28 POST: the ladder first (a Refusal carrying the request's id), then the reply. `meta`: the
    request's params._meta when the endpoint has seen the ladder pass already (modern.served_environ's)."""
    if not isinstance(message, Request) or (
        meta is None and (meta := modern.served_environ(message, request.environ)) is None
    ):
        failure = modern.validate(message, request.header)
        if failure is not None:
            refuse_on(failure, message.id if isinstance(message, Request) else None)
        if not isinstance(message, Request):
            return HttpResponse(202)  # 2026-07-28 defines no client notification over HTTP: accepted, dropped
        meta = modern.request_meta(message) or {}  # (the ladder passed: an object)
    if gw.closing and not is_retry(message):  # draining: a retry may still resume the call it names here
        raise shutting_down(message.id)
    if gw.child_spec.slots is not None:  # per-user credentials: a retry's answer to the vault's request dropped
        from mcpgate.serve.vault import elicit  # (only then: a plain worker holds none of the vault)

        message = elicit.retry_of(message)
        meta = modern.request_meta(message) or {}
    try:
        return serve(gw, request, message, meta)
    except SlotsEmpty as empty:  # the principal's child needs a slot it has not filled: sent to the vault's page
        from mcpgate.serve.vault import elicit

        return elicit.modern_answer(empty, message)
    except Refusal as refusal:  # the pool's refusals (busy, crashing, cannot start) carry the request's id too
        if refusal.id is None:
            refusal.id = message.id
        raise


def serve(gw: PublishedServer, request: HttpRequest, message: Request, meta: dict[str, Any]) -> HttpResponse:
    """The request, past the ladder (`meta`: its params._meta), answered by the gateway or a pooled child."""
    pool = gw.pool
    request_id = message.id
    principal, client = caller(request.environ)
    who = principal  # `who` for the audit; `principal` keys the pool
    s = gw.settings
    pins = gw.pins
    tools = ToolFilter.of(s.tools_allow, s.tools_deny, pins=pins) if s.tools_allow or s.tools_deny or pins else None
    if gw.views is not None:  # forwarded: the view its forwarder signed (views_file.ViewTable.key)
        tools = pinned(gw.views.tools(gw.name, s, request.environ), pins)
        principal = gw.pool_key(who, request.environ)  # a group's children: one per (principal, view)
    if gw.search is not None and (found := gw.search.response(pool, principal, tools, message, stamped=True)):
        if audit.LOG is not None:
            audit.LOG.here(message, who, gw.name, audit.MODERN, found)
        return json_response(jsonrpc.encode(found))  # the search view's (serve/servers/search_view.py)
    if tools is not None and (hidden := tools.hidden_call(message)) is not None:  # before any header or state check
        if audit.LOG is not None:
            audit.LOG.here(message, who, gw.name, audit.MODERN, tools.refusal(request_id, hidden))
        return json_response(jsonrpc.encode(tools.refusal(request_id, hidden)))
    if message.method == "tools/call":
        notes = pool.tool_notes(principal)
        name = message.params.get("name") if isinstance(message.params, dict) else None
        param_headers = notes.headers.get(name) if isinstance(name, str) else None
        if param_headers:  # the tool mirrors arguments into Mcp-Param-* headers: they are checked too
            refuse_on(modern.check_param_headers(message, request.header, param_headers), request_id)  # the rest passed
        if notes.task_required:  # a legacy child's task-only tool
            tasks.refuse_untasked(notes, message)
    method = message.method
    if method in _OWN_METHODS:  # (one test for the three kinds below: the usual call is none of them)
        if method == "server/discover":
            return discover(gw, pool.acquire(principal), message)
        if method == "subscriptions/listen":
            return listen(gw, pool.hub(principal), message, client)
        # a task method: to the child holding the task, wherever it is (modern/tasks.py)
        call = tasks.start(pool.tasks, pool.holder, principal, message, new_call, Stream(pool.limits, expected=1))
        if audit.LOG is not None:  # a task method's line (audit.NAMED)
            call.audit = audit.LOG.start(message, who, gw.name, audit.MODERN, None)
        return reply(gw, pool, call, client)
    listed = tools if method == "tools/list" else None
    trace = request.environ.get(tracing.KEY)
    if trace is not None:  # the pool's child, or an MRTR round's
        began = tracing.now()
        try:
            call = start(pool, principal, message, meta, listed, closing=gw.closing)
        finally:
            trace.append((tracing.step_name(tracing.POOL, message), began, tracing.now()))  # (to its list)
    else:
        call = start(pool, principal, message, meta, listed, closing=gw.closing)
    if audit.LOG is not None and call.audit is None and method in audit.NAMED:  # a retry's call has one
        call.audit = audit.LOG.start(message, who, gw.name, audit.MODERN, None)
    return reply(gw, pool, call, client)


def caller(environ: dict[str, Any]) -> tuple[str, Client]:
    """(auth.principal(environ), Client.of(environ)): the request's context read once, in place (context() only to
    make one)."""
    noted = environ.get(CONTEXT)
    if type(noted) is not RequestContext:
        noted = context(environ)
    principal = noted.principal
    return principal if principal is not None else STATIC_PRINCIPAL, Client(environ.get(SOCKET), noted.peer_gone)


def is_retry(message: Request) -> bool:
    """A retry, or a task method: either names what a child of this gateway holds (served while it drains)."""
    return message.method in core_tasks.METHODS or (
        isinstance(message.params, dict) and message.params.get("requestState") is not None
    )


def shutting_down(request_id: jsonrpc.Id | None) -> Refusal:
    return ShuttingDown(request_id)


def refuse_on(failure: modern.Failure | None, request_id: jsonrpc.Id | None) -> None:
    if failure is not None:
        raise Refusal(failure.status, failure.code, failure.message, request_id, failure.data)


def discover(gw: PublishedServer, child: PooledChild, message: Request) -> HttpResponse:
    """The gateway's DiscoverResult: the child's (or the one built from its InitializeResult), limited to the
    revisions this endpoint serves per request."""
    offered = child.discover.get("supportedVersions")
    supported = [v for v in offered if v in versions.MODERN] if isinstance(offered, list) else []
    result = {**child.discover, "supportedVersions": supported or list(versions.MODERN)}
    result = modern_rewrites.stamp_result(
        "server/discover", result, ttl_ms=gw.settings.cache_ttl_ms, server_info=child.server_info
    )
    return json_response(jsonrpc.encode({"jsonrpc": "2.0", "id": message.id, "result": result}))


def start(
    pool: Pool,
    principal: str,
    message: Request,
    meta: dict[str, Any],
    tools: ToolFilter | None = None,
    *,
    closing: bool = False,
) -> Call:
    """The call, on its way to a child: a retry resumes the call its requestState names (here, or at the
    instance holding it: Forward), or starts again when that instance is gone; a modern child's state (in the
    gateway's envelope) goes back to the child that issued it; `tools` filters a tools/list call's result.
    `meta`: the request's params._meta (its capabilities, log level and progress token are read from it).
    `closing`: the gateway drains, and takes no new call."""
    params = message.params if type(message.params) is dict or isinstance(message.params, dict) else {}
    capabilities = meta.get(_CAPABILITIES)  # client_capabilities(message), from the _meta at hand
    if type(capabilities) is not dict and not isinstance(capabilities, dict):
        capabilities = {}
    if SPARES:  # one a reply is done with, as a new one (Stream.recycle: reply's, or a 2025 session's)
        stream = SPARES.pop()
        stream.limits, stream.expected = pool.limits, 1
    else:
        stream = Stream(pool.limits, 1)  # expected=1, given by position: a class's keyword costs ~1,000 instructions
    state = params.get("requestState")
    holder: PooledChild | None = None
    if state is not None and (pool.group(principal).era is _LEGACY or pool.bridge.issued(state, principal)):
        resumed = pool.bridge.resume(principal, message, stream)
        if resumed is not None:
            return resumed
        params, state = mrtr.without_mrtr(params), None  # its instance is gone: the original request, afresh
        message = with_params(message, params)
    elif state is not None:  # a modern child's: opened (refused unless this principal's, for this request)
        carried = pool.states.unwrap(principal, message)
        params = {**params, "requestState": carried.state}  # the child's own state, untouched
        message, holder = with_params(message, params), pool.holder(principal, carried.holder)
    if closing:
        raise shutting_down(message.id)
    bridged = message.method in modern.MRTR_METHODS
    # its client may be asked for input (a client declaring no capability, no set operation)
    candidate = bridged and not _INPUT_CAPABILITIES.isdisjoint(capabilities) if capabilities else False
    child = holder or pool.acquire(principal, bridged, candidate)  # (by position: a keyword ~100 instructions)
    if state is not None and child.era is _LEGACY:  # a state the bridge did not seal (its own went above)
        raise pool.bridge.refusal(principal, message)
    responses = params.get("inputResponses")
    call = new_call(  # (by position: a keyword costs ~100 instructions)
        message,
        principal,
        capabilities,
        stream,
        meta,
        bridged and child.era is _LEGACY,  # bridged
        responses if isinstance(responses, dict) else None,  # input_responses
        tools,
    )
    stream.pump = child.pump  # its reader reads the child's answers while it waits
    if not child.start_call(message, call):
        raise Refusal(502, jsonrpc.INTERNAL_ERROR, "Bad Gateway: the MCP server is not taking requests", message.id)
    if call.bridged and candidate:
        child.candidate = call
        pool.prewarm(principal)
    return call


def with_params(message: Request, params: dict[str, Any]) -> Request:
    return dataclasses.replace(message, params=params, obj={**message.obj, "params": params}, raw=None)


def reply(gw: PublishedServer, pool: Pool, call: Call, client: Client) -> HttpResponse:
    """JSON when the child answers first and in time; otherwise SSE from the first other message (the reply
    machine's). The client's connection is watched all along: its close cancels the call at once."""
    stream = call.stream
    gone = functools.partial(finish, pool, call, stream)  # (a closure cost three cells and a function each call)
    client.watch(gone)
    answers = answer_or_switch(stream, gw.settings.sse_after, client)
    if not isinstance(answers, list) and answers is not _GONE:  # SSE from here
        return sse(gw, call, client, gone)
    client.stop()
    if type(answers) is list and call.finished and call.continuation is None and call.stream is stream:
        # answered, and nothing more can come for it (released by its child, never asked for input): its stream is
        # kept for the next request (Stream.recycle; closed unless as new), the call pointed at a spent one
        # (here alone: a watch's or an SSE reply's finish may run while the stream is still read)
        call.stream = SPENT
        stream.recycle()
    else:
        finish(pool, call, stream)
        if not isinstance(answers, list):  # GONE: the client went away (or the stream ended) before anything came
            return HttpResponse(204)
    return json_response(answers[0].data, ERROR_STATUS.get(call.error_code or 0, 200))


def sse(gw: PublishedServer, call: Call, client: Client, gone: Callable[[], None]) -> HttpResponse:
    """A reply turned SSE: the stream's events; their end, or the client's leaving, ends the call."""

    def done() -> None:
        client.stop()
        gone()

    sent = events(call.stream, keepalive=gw.settings.keepalive, client=client, on_gone=gone, on_end=done)
    return HttpResponse(200, sent, "text/event-stream", SSE_HEADERS)


def finish(pool: Pool, call: Call, stream: Stream) -> None:
    """The HTTP reply of `stream` is over: a call still in flight (not parked for input) is cancelled."""
    stream.close()
    if call.stream is not stream:
        return  # a retry carries the call now
    if not call.finished and not call.parked and call.child is not None:
        log.info("pooled child %s: the client closed its stream; cancelling %s", call.child.label, call.method)
        call.child.cancel(call, "the client closed the stream")
    if call.finished and call.continuation is not None and not call.parked:  # a parked call's result waits
        pool.bridge.call_ended(call)  # for the retry with its state; a call that never asked has nothing to end


def listen(gw: PublishedServer, hub: ListenHub, message: Request, client: Client) -> HttpResponse:
    params = message.params if isinstance(message.params, dict) else {}
    wanted = params.get("notifications")
    opened = hub.open(message.id, wanted if isinstance(wanted, dict) else {})
    if isinstance(opened, modern.Failure):
        raise Refusal(opened.status, opened.code, opened.message, message.id, opened.data)
    opened.expected = 1  # its final response (the hub's, when the listen ends)
    sent = events(opened, keepalive=gw.settings.keepalive, client=client, on_end=lambda: hub.close(opened))
    return HttpResponse(200, sent, "text/event-stream", SSE_HEADERS)
