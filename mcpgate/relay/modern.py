"""The 2026-07-28 client wire: one stateless POST per request, no session, no GET stream.

Each request goes with the request-metadata headers (core.modern_client.request_headers): MCP-Protocol-Version,
Mcp-Method, Mcp-Name and the Mcp-Param-* headers mirrored from the arguments a tool's inputSchema annotates
with x-mcp-header, learned from the tools/list replies that pass through. Tools whose annotations are invalid
are dropped from the list the host sees (an HTTP client must); a list with nothing dropped is forwarded byte
for byte. A -32020 (HeaderMismatch) to a tools/call re-lists the tools once and retries once.

The reply is JSON or an SSE stream scoped to the request: its notifications go to the sink; a server request
on it breaks the protocol (logged, dropped). Closing the stream is the request's cancellation, so a request
whose greenlet is killed closes its response at once (cancel_grace 0).
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
from gevent.lock import Semaphore
from gevent.pool import Group

from mcpgate import __version__
from mcpgate.core import jsonrpc, modern, modern_client, modern_rewrites, versions, wire
from mcpgate.relay import errors
from mcpgate.relay.http_client import JSON_TYPE, SSE_TYPE, EventStream, HttpClient, HttpReply, content_type
from mcpgate.relay.transport import OneWay, Sink, decode_upstream, is_reply_to, json_reply

log = logging.getLogger("mcpgate.relay")

ACCEPT_BOTH = f"{JSON_TYPE}, {SSE_TYPE}"
CLIENT_INFO = {"name": "mcpgate-relay", "version": __version__}
TAIL_SECONDS = 5.0  # how long the end of a reply stream is awaited after its response, off the request's path
MAX_LIST_PAGES = 100  # tools/list pages read when re-listing after a -32020
OWN_ID_PREFIX = "mcpgate-"  # the ids of the relay's own requests (server/discover, a re-list)


class ModernRefused(errors.RelayError):
    """server/discover did not answer a DiscoverResult naming a revision the relay speaks. `recognised` says
    whether the refusal was a modern-era error (the upstream is modern, but will not serve this relay)."""

    routine = True

    def __init__(self, message: str, *, recognised: bool, data: Any = None) -> None:
        super().__init__(message, data)
        self.recognised = recognised


class ModernTransport:
    def __init__(self, url: str, http: HttpClient, sink: Sink) -> None:
        self.url, self.http, self.sink = url, http, sink
        self.version = versions.V2026_07_28  # the newest both speak, once discover() has answered
        self._discovered: dict[str, Any] | None = None
        self._discover_lock = Semaphore()
        self._param_headers: dict[str, dict[str, str]] = {}  # tool name -> {argument path key: header}
        self._dropped: set[str] = set()  # tools whose invalid annotations were logged
        self._relist_lock = Semaphore()
        self._lists = 0  # complete re-lists done (a request that waited for another's re-list reuses it)
        self._ids = 0
        self._tails = Group()
        self._warned_oneway: set[str] = set()

    # -- requests ---------------------------------------------------------------------------

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        lists = self._lists
        reply = self._exchange(req)
        if req.method == "tools/call" and _error_code(reply) == modern.HEADER_MISMATCH:
            log.info("upstream refused the headers of tools/call (id %r); re-listing the tools once", req.id)
            self._relist(req, lists)
            reply = self._exchange(req)
        if req.method == "tools/list" and not reply.is_error:
            reply = self._learn(reply)
        elif req.method == "server/discover" and self._discovered is None:
            self._adopt(reply.obj.get("result"))
        return reply

    def _exchange(self, req: jsonrpc.Request) -> jsonrpc.Response:
        """A POST and its reply; a -32022 naming a revision the relay speaks is retried once in that revision."""
        reply = self._post(req)
        if _error_code(reply) != jsonrpc.UNSUPPORTED_PROTOCOL_VERSION:
            return reply
        retry = _in_version(req, _supported(reply))
        if retry is None:
            return reply
        log.info("upstream refused the protocol version of %s (id %r); retrying once", req.method, req.id)
        return self._post(retry)

    def _post(self, req: jsonrpc.Request) -> jsonrpc.Response:
        """One POST and its reply (a JSON-RPC error in an HTTP error reply is the reply, with the caller's id)."""
        body = jsonrpc.raw_bytes(req)
        resp = self.http.send("POST", self.url, self._headers(req), body, replay_safe=errors.is_replay_safe(req.method))
        finished = False
        try:
            reply = self._reply(req, resp)
            finished = True
            return reply
        finally:
            if not finished:  # an error, or the greenlet killed (the host cancelled): closing is the cancel
                resp.close()

    def _headers(self, req: jsonrpc.Request) -> dict[str, str]:
        params = req.params if isinstance(req.params, dict) else {}
        name = params.get("name")
        mirrored = self._param_headers.get(name) if isinstance(name, str) else None
        headers = modern_client.request_headers(req, mirrored)
        headers["Accept"] = ACCEPT_BOTH
        headers["Content-Type"] = JSON_TYPE
        return headers

    def _reply(self, req: jsonrpc.Request, resp: HttpReply) -> jsonrpc.Response:
        status = resp.status_code
        if not 200 <= status < 300:
            return self._refusal(req, resp)
        if status == 202:
            raise errors.InvalidUpstream(f"upstream accepted {req.method} (HTTP 202) without answering it")
        kind = content_type(resp)
        if kind == SSE_TYPE:
            return self._read_stream(req, resp)
        if kind != JSON_TYPE:
            raise errors.InvalidUpstream(f"upstream replied with unexpected Content-Type {kind!r}")
        body = self.http.read_body(resp, self.url)
        self.http.done(resp)
        return self._read_json(req, body)

    def _refusal(self, req: jsonrpc.Request, resp: HttpReply) -> jsonrpc.Response:
        """An HTTP error: a JSON-RPC error body is the host's answer (a -32022 names the versions, a -32021 the
        capabilities); the relay's own problems (credentials, rate limits) and bodies without one are errors."""
        body = self.http.error_body(resp, self.url)
        parsed = jsonrpc.parse(body) if body.strip() else None
        if resp.status_code not in errors.CONFIG_STATUSES and isinstance(parsed, jsonrpc.Response) and parsed.is_error:
            return _with_id(parsed, req.id)
        raise self.http.error_for(resp, self.url, body)

    def _read_json(self, req: jsonrpc.Request, body: bytes) -> jsonrpc.Response:
        return json_reply(req, body, lambda message: self._route(req, message))

    def _read_stream(self, req: jsonrpc.Request, resp: HttpReply) -> jsonrpc.Response:
        stream = self.http.events(resp, self.http.new_decoder(), self.url)
        try:
            for event in stream:
                for message in decode_upstream(event.data.encode("utf-8")) if event.data else []:
                    if isinstance(message, jsonrpc.Response) and is_reply_to(message, req.id):
                        if stream.ended_now():  # the usual end, here with the response: the connection goes back
                            self.http.done(resp)
                        else:
                            self._tails.spawn(self._read_tail, req, resp, stream)
                        return message
                    self._route(req, message)
        except errors.MaybeSent as broken:
            raise errors.ReplyLost(f"the reply stream for {req.method} broke: {broken.message}") from None
        raise errors.ReplyLost(f"upstream ended the reply stream for {req.method} without answering")

    def _read_tail(self, req: jsonrpc.Request, resp: HttpReply, stream: EventStream) -> None:
        """After the response the server ends the stream: read on to that end, so the connection is reused."""
        try:
            with gevent.Timeout(TAIL_SECONDS, False):
                for event in stream:
                    if event.data and decode_upstream(event.data.encode("utf-8")):
                        log.info("dropped what upstream sent after its response to %s", req.method)
        except errors.RelayError:
            pass
        finally:
            self.http.done(resp)

    def _route(self, req: jsonrpc.Request, message: jsonrpc.Request | jsonrpc.Notification | jsonrpc.Response) -> None:
        """A message on a request's reply other than its response: a notification goes to the host."""
        if isinstance(message, jsonrpc.Notification):
            self.sink(message)
        elif isinstance(message, jsonrpc.Request):
            log.warning(
                "dropped the server request %s (id %r) on the reply to %s: the 2026-07-28 wire has none",
                message.method,
                message.id,
                req.method,
            )
        else:
            log.warning("dropped a response (id %r) on the reply to %s (id %r)", message.id, req.method, req.id)

    # -- tools/list: the x-mcp-header annotations -------------------------------------------

    def _learn(self, reply: jsonrpc.Response) -> jsonrpc.Response:
        """Remember each listed tool's mirrored arguments; a tool with invalid annotations is dropped from the
        reply (which is otherwise forwarded as it came)."""
        result = reply.full().get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return reply
        kept = [tool for tool in tools if self._learn_tool(tool)]
        if len(kept) == len(tools):
            return reply
        assert isinstance(result, dict)
        obj = {**reply.full(), "result": {**result, "tools": kept}}
        return jsonrpc.Response(reply.id, obj)

    def _learn_tool(self, tool: object) -> bool:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return True  # not the relay's business: the host judges it
        name: str = tool["name"]
        headers = modern.tool_header_params(tool.get("inputSchema"))
        if headers is None:
            self._param_headers.pop(name, None)
            if name not in self._dropped:
                self._dropped.add(name)
                log.warning("dropped tool %r from tools/list: its x-mcp-header annotations are invalid", name)
            return False
        self._param_headers[name] = headers
        return True

    def _relist(self, req: jsonrpc.Request, lists: int) -> None:
        """tools/list, every page, in the failed request's name (its version, capabilities, client info)."""
        with self._relist_lock:
            if self._lists != lists:
                return  # another request re-listed since this one was sent
            meta = req.params.get("_meta") if isinstance(req.params, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            cursor: object = None
            for _ in range(MAX_LIST_PAGES):
                params = {} if cursor is None else {"cursor": cursor}
                listing = self._exchange(self._own_request("tools/list", self._with_meta(params, meta)))
                if listing.is_error:
                    log.warning("re-listing the tools failed: %s", errors.excerpt(jsonrpc.raw_bytes(listing)))
                    break
                self._learn(listing)
                result = listing.obj.get("result")
                cursor = result.get("nextCursor") if isinstance(result, dict) else None
                if not cursor:
                    break
            self._lists += 1

    def _with_meta(self, params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        capabilities = meta.get(wire.META_CLIENT_CAPABILITIES)
        info = meta.get(wire.META_CLIENT_INFO)
        return modern_client.modern_params(
            params,
            version=meta.get(wire.META_PROTOCOL_VERSION) or self.version,
            capabilities=capabilities if isinstance(capabilities, dict) else {},
            client_info=info if isinstance(info, dict) else CLIENT_INFO,
        )

    def _own_request(self, method: str, params: dict[str, Any]) -> jsonrpc.Request:
        self._ids += 1
        msg_id = f"{OWN_ID_PREFIX}{method}-{self._ids}"
        obj = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        return jsonrpc.Request(msg_id, method, params, obj)

    # -- server/discover --------------------------------------------------------------------

    def discover(self) -> dict[str, Any]:
        """The upstream's DiscoverResult (asked once, then cached); ModernRefused when it is not one."""
        with self._discover_lock:
            if self._discovered is None:
                params = self._with_meta({}, {wire.META_PROTOCOL_VERSION: versions.V2026_07_28})
                reply = self._exchange(self._own_request("server/discover", params))
                if reply.is_error:
                    error = reply.obj.get("error")
                    raise ModernRefused(
                        f"upstream refused server/discover: {errors.excerpt(jsonrpc.raw_bytes(reply))}",
                        recognised=modern_rewrites.recognised_modern_error(error),
                        data=error.get("data") if isinstance(error, dict) else None,
                    )
                if not self._adopt(reply.obj.get("result")):
                    raise ModernRefused(
                        f"upstream's server/discover answer is not a DiscoverResult the relay can use: "
                        f"{errors.excerpt(jsonrpc.raw_bytes(reply))}",
                        recognised=False,
                    )
            assert self._discovered is not None
            return self._discovered

    def _adopt(self, result: object) -> bool:
        """Cache a DiscoverResult that names a revision the relay speaks (and speak the newest of those)."""
        if not modern_rewrites.is_discover_result(result):
            return False
        assert isinstance(result, dict)
        mutual = [v for v in result["supportedVersions"] if v in versions.MODERN]
        if not mutual:
            return False
        self.version, self._discovered = max(mutual), result
        return True

    # -- one-way messages and shutdown ------------------------------------------------------

    def send_oneway(self, message: OneWay) -> None:
        """The 2026-07-28 HTTP wire has no client notifications or responses: logged, dropped (a cancel is
        carried by closing the request's stream instead)."""
        what = message.method if isinstance(message, jsonrpc.Notification) else "response"
        level = logging.DEBUG if what == "notifications/cancelled" or what in self._warned_oneway else logging.INFO
        self._warned_oneway.add(what)
        log.log(level, "not sent upstream: %s (the 2026-07-28 HTTP wire carries none)", what)

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        return 0.0

    def close(self) -> None:
        self._tails.kill(block=True, timeout=1.0)


def _error_code(reply: jsonrpc.Response) -> int | None:
    error = reply.obj.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


def _supported(reply: jsonrpc.Response) -> list[str]:
    error = reply.obj.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    supported = data.get("supported") if isinstance(data, dict) else None
    return [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else []


def _in_version(req: jsonrpc.Request, supported: list[str]) -> jsonrpc.Request | None:
    """The request again in the newest revision both speak (its own when the upstream lists it); None when
    there is none, or the request has no _meta to carry one."""
    mutual = [v for v in supported if v in versions.MODERN]
    params = req.params if isinstance(req.params, dict) else None
    meta = params.get("_meta") if params is not None else None
    if not mutual or not isinstance(meta, dict):
        return None
    version = max(mutual)
    if meta.get(wire.META_PROTOCOL_VERSION) == version:
        return req
    params = {**req.params, "_meta": {**meta, wire.META_PROTOCOL_VERSION: version}}
    return jsonrpc.Request(req.id, req.method, params, {**req.obj, "params": params})


def _with_id(reply: jsonrpc.Response, msg_id: jsonrpc.Id) -> jsonrpc.Response:
    """The response as the caller's: an intermediary's error may carry a null id."""
    if reply.id is not None and jsonrpc.id_key(reply.id) == jsonrpc.id_key(msg_id):
        return reply
    return jsonrpc.Response(msg_id, {**reply.obj, "id": msg_id})
