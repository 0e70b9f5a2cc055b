"""One MCP server made of several: the hub's multiplexing state machine, sans-IO (serve/hub/child.py drives it).

The hub speaks 2025 JSON-RPC to one client (a session above it) and to each member server. Messages go in
through `from_client`, `from_member`, `member_gone` and `tick` (with the monotonic time), and every call returns
what to do, in order: `ToClient` (a message for the client), `ToMember` (bytes for a member), `CloseMember`,
`Wake` (call `tick` again after that many seconds), `Retry`, `StartMember`, `Back` and `Note` (a log line).
Names are the rules of core/hub_lists.py; what is asked of every member and answered as one (initialize, the
lists, the hub's own resources lists) is core/hub_fan.py's `Lists`, which also holds the state; a departed
member tried again is core/hub_retry.py's `Retries`; this module routes the rest.

- initialize: sent to every live member at once with the client's own params; answered once every member has
  answered or is gone (or `init_timeout` passed: the silent one is closed). Capabilities are the union; the
  protocol revision is the client's when every member accepted it, else the oldest a member answered (each
  member goes on with the revision it chose). A member that refuses initialize is closed. None answered at all:
  the client gets an error naming every member's reason. With a member not available, the hub says listChanged
  for tools, prompts and resources (it may come back with them).
- Lists (tools, prompts, resources, resource templates): asked of every member with that capability at once,
  merged in member order with namespaced names; a member's error or departure leaves its part out. Pagination:
  the hub cursor carries each member's own next cursor; its next page asks only those members.
- tools/call, prompts/get, completion/complete (ref/prompt): routed by the name's prefix, sent with the
  member's own name. resources/read, subscribe, unsubscribe, completion/complete (ref/resource): routed by URI
  (hub_lists.UriMap, filled from the members' resources/list answers, the hub's own included). An unknown
  prefix is -32602 "Unknown tool"; a known member that is gone is -32000 naming the server, why, that it is
  unreachable and when it is tried next (core/hub_retry.py). A URI no
  member is known to list, while the hub's own resources lists are still out (a read right after
  notifications/initialized, or after a resources list_changed), is held until they are answered (at most
  PRIME_WAIT seconds, and within `in_flight`), then routed or answered -32002.
- Ids: every request to a member gets a hub id (a counter); its answer goes back with the client's id. A
  member's request to the client (sampling, elicitation, roots) gets a hub id too, and the client's answer goes
  back to that member with the member's id; the member's notifications/cancelled for it is renamed likewise.
  The client's notifications/cancelled reaches the member(s) holding the request, under their hub ids; progress
  from a member is passed on only for a token of a request that member holds, and the client's progress on a
  member's request (whose token the hub renamed to its hub id) reaches that member alone. ping is answered here.
- list_changed from any member, and a member with a list that goes or comes back, make one list_changed per kind
  for the client, COALESCE seconds after the first (well within a second).
- Departures: a member that ends, refuses or never answers initialize, or cannot start is gone: its requests
  fail, its names vanish, and it is tried again with a bounded backoff (core/hub_retry.py).
- Bounds: at most `in_flight` requests to members (fan-outs count each member) and as many member requests to
  the client; past them the request is refused with an error, never queued. The URI map holds `uris` URIs.
"""

from __future__ import annotations

from typing import Any

from mcpgate.core import hub_lists, jsonrpc
from mcpgate.core.hub_fan import INIT_TIMEOUT as INIT_TIMEOUT  # the default, named here too
from mcpgate.core.hub_fan import OWN_LISTS, SERVER_GONE
from mcpgate.core.hub_lists import CHANGED, LISTS, Ambiguous
from mcpgate.core.hub_messages import (
    CloseMember,
    Fan,
    Note,
    Out,
    Pending,
    ToClient,
    ToMember,
    Wake,
    answer,
    encode_note,
    encode_request,
    error,
    jsonrpc_result,
    notification,
    renamed_response,
    why,
    with_id,
)
from mcpgate.core.hub_retry import JOINING, STARTING, Retries
from mcpgate.core.jsonrpc import Notification, Request, Response

COALESCE = 0.2  # seconds between a member's list_changed and the client's
PRIME_WAIT = 5.0  # seconds a request for a URI no member lists yet waits for the hub's own resources lists
RESOURCE_NOT_FOUND = -32002
ROUTED_BY_NAME = {"tools/call": "Unknown tool", "prompts/get": "Unknown prompt"}
ROUTED_BY_URI = ("resources/read", "resources/subscribe", "resources/unsubscribe")


class Hub(Retries):
    """See the module docstring."""

    # -- queries --------------------------------------------------------------------------------------------
    def live(self) -> list[str]:
        return [name for name, m in self.members.items() if m.gone is None]

    def oldest(self, member: str) -> float | None:
        """When the oldest request in flight on `member` was sent (its request timeout)."""
        return min((p.sent for p in self._pending.values() if p.member == member), default=None)

    def unavailable(self, member: str, reason: str, now: float) -> list[Out]:
        """A member that could not be started: absent until it is tried again (core/hub_retry.py)."""
        return self.member_gone(member, reason, now)

    # -- from the client ------------------------------------------------------------------------------------
    def from_client(self, message: Request | Notification | Response, now: float) -> list[Out]:
        if isinstance(message, Response):
            return self._client_answer(message)
        if isinstance(message, Notification):
            return self._client_notification(message)
        params = message.params if isinstance(message.params, dict) else {}
        method = message.method
        if jsonrpc.id_key(message.id) in self._by_client:
            return [error(message.id, jsonrpc.INVALID_REQUEST, "request id already in flight")]
        if method == "ping":
            return [answer(message.id, {})]
        if method == "initialize":  # once: a member would refuse a second one (and be left out for it)
            if self.handshake:
                return [error(message.id, jsonrpc.INVALID_REQUEST, "Invalid Request: already initialized")]
            self.handshake = True
            return self._fan(message.id, method, params, self.live(), now)
        if method in LISTS:
            return self._list(message, params, now)
        if method == "logging/setLevel":
            return self._fan(message.id, method, params, self._ready(None), now)
        if method in ROUTED_BY_NAME:
            return self._by_name(message, params, str(params.get("name", "")), now, ROUTED_BY_NAME[method])
        if method in ROUTED_BY_URI or method == "completion/complete":
            return self._by_resource(message, params, now)
        return [error(message.id, jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method}")]

    def _client_notification(self, message: Notification) -> list[Out]:
        params = message.params if isinstance(message.params, dict) else {}
        if message.method == "notifications/cancelled":
            request_id = params.get("requestId")
            if not jsonrpc.is_valid_id(request_id):
                return []
            self._held.pop(jsonrpc.id_key(request_id), None)  # held for the URI map: never sent
            out: list[Out] = []
            for hub_id in self._by_client.pop(jsonrpc.id_key(request_id), []):
                pending = self._release(hub_id)
                if pending is not None:
                    data = {**params, "requestId": hub_id}
                    out.append(ToMember(pending.member, encode_note(message.method, data)))
            return out
        if message.method == "notifications/initialized":
            self.initialized = True
            out = [ToMember(name, jsonrpc.raw_bytes(message)) for name in self._ready(None)]
            for name in self._ready("resources"):
                out += self._prime(name, 0.0)
            return out
        if message.method == "notifications/progress":  # on a member's request: to that member, its own token
            held = self._asked.progress(params.get("progressToken"))
            own = {**params, "progressToken": held[1]} if held is not None else {}
            return [ToMember(held[0], encode_note(message.method, own))] if held is not None else []
        return [ToMember(name, jsonrpc.raw_bytes(message)) for name in self._ready(None)]

    def _client_answer(self, message: Response) -> list[Out]:
        if message.id is None or not isinstance(message.id, int):
            return []
        held = self._asked.answered(message.id)
        return [ToMember(held[0], with_id(message, held[1]))] if held is not None else []

    # -- routing ----------------------------------------------------------------------------------------------
    def _by_name(
        self, message: Request, params: dict[str, Any], name: str, now: float, unknown: str, ref: Any = None
    ) -> list[Out]:
        parts = hub_lists.split(name)
        member = self.by_prefix.get(parts[0]) if parts is not None else None
        tools = self.members[member].tools if member is not None else None
        hidden = tools is not None and message.method == "tools/call" and not tools.visible(parts[1] if parts else "")
        if parts is None or member is None or hidden:  # a tool its server hides does not exist here either
            return [error(message.id, jsonrpc.INVALID_PARAMS, f"{unknown}: {name}")]
        named = {**ref, "name": parts[1]} if ref is not None else None
        params = {**params, "ref": named} if named is not None else {**params, "name": parts[1]}
        return self._route(message, member, params, now)

    def _by_resource(
        self, message: Request, params: dict[str, Any], now: float, hold: float | None = None
    ) -> list[Out]:
        """A request routed by its URI (a completion of a prompt argument: by the prompt's name). `hold`: since
        when it has been held (None: it is new); -1: it may not be held again."""
        if message.method != "completion/complete":
            return self._by_uri(message, params, params.get("uri"), now, hold)
        ref = params.get("ref") if isinstance(params.get("ref"), dict) else {}
        assert isinstance(ref, dict)
        if ref.get("type") == "ref/prompt":
            return self._by_name(message, params, str(ref.get("name", "")), now, "Unknown prompt", ref)
        return self._by_uri(message, params, ref.get("uri"), now, hold)

    def _by_uri(
        self, message: Request, params: dict[str, Any], uri: object, now: float, hold: float | None
    ) -> list[Out]:
        if not isinstance(uri, str):
            return [error(message.id, jsonrpc.INVALID_PARAMS, "Invalid params: a resource uri is required")]
        found = self.uris.resolve(uri, tuple(self._ready("resources")))
        if isinstance(found, Ambiguous):  # named in the file's order, whichever listed it first
            servers = [name for name in self.members if name in found.members]
            text = (
                f"Resource {uri} is served by more than one server of this endpoint ({', '.join(servers)}): ambiguous"
            )
            return [error(message.id, jsonrpc.INVALID_PARAMS, text, {"uri": uri, "servers": servers})]
        if found is None:
            if hold != -1 and self._hold(message, now if hold is None else hold):
                return [Wake(PRIME_WAIT)] if hold is None else []
            return [error(message.id, RESOURCE_NOT_FOUND, f"Resource not found: no server here lists {uri}")]
        return self._route(message, found, params, now)

    def _hold(self, message: Request, since: float) -> bool:
        """Hold a request for a URI nobody is known to list while the hub's own resources lists are out."""
        if not self._priming() or len(self._pending) + len(self._held) >= self.in_flight:
            return False
        key = jsonrpc.id_key(message.id)
        self._held[key] = (message, since)
        self._by_client[key] = []  # in flight: its id is taken, its cancel finds nothing to send
        return True

    def _priming(self) -> bool:
        return any(
            p.fan is not None and p.fan.client_id is None and p.fan.method in OWN_LISTS for p in self._pending.values()
        )

    def _release_held(self, now: float) -> list[Out]:
        """The held requests whose URI a member now lists routed; once the hub's own lists are answered (or
        after PRIME_WAIT), the others answered not found."""
        out: list[Out] = []
        for key, (message, since) in list(self._held.items()):
            del self._held[key]
            self._by_client.pop(key, None)
            params = message.params if isinstance(message.params, dict) else {}
            out += self._by_resource(message, params, now, since if now - since < PRIME_WAIT else -1)
        return out

    def _route(self, message: Request, member: str, params: dict[str, Any], now: float) -> list[Out]:
        state = self.members[member]
        if state.gone is not None:
            return [self.unreachable(message.id, member, now)]
        if len(self._pending) >= self.in_flight:
            return [error(message.id, SERVER_GONE, "Too many requests in flight (MCPGATE_HUB_IN_FLIGHT)")]
        hub_id = self._mint()
        token = jsonrpc.progress_token(message)
        key = jsonrpc.id_key(token) if token is not None else None
        self._pending[hub_id] = Pending(member, now, message.id, key)
        self._by_client[jsonrpc.id_key(message.id)] = [hub_id]
        if key is not None:
            self._tokens[(member, key)] = hub_id
        return [ToMember(member, encode_request(hub_id, message.method, params))]

    # -- from a member ------------------------------------------------------------------------------------
    def from_member(self, member: str, message: Request | Notification | Response, now: float) -> list[Out]:
        state = self.members[member]
        if state.gone is not None and not (state.phase == JOINING and isinstance(message, Response)):
            return []  # a member coming back is heard once it answered the hub's initialize
        if isinstance(message, Response):
            out = self._member_answer(member, message, now)
            return out + self._release_held(now) if self._held else out
        if isinstance(message, Request):
            return self._member_request(member, message)
        return self._member_notification(member, message)

    def _member_answer(self, member: str, message: Response, now: float) -> list[Out]:
        if not isinstance(message.id, int) or self._pending.get(message.id, None) is None:
            return []
        if self._pending[message.id].member != member:
            return [Note(f"server {member!r} answered a request it was not sent; dropped")]
        pending = self._release(message.id)
        assert pending is not None
        if pending.fan is None:
            assert pending.client_id is not None
            self._by_client.pop(jsonrpc.id_key(pending.client_id), None)
            return [ToClient(renamed_response(message, pending.client_id))]
        fan = pending.fan
        full = message.full()
        fan.answers[member] = full.get("result") if "result" in full else full.get("error")
        fan.waiting.discard(member)
        return self._answered(member, fan, full, now)

    def _answered(self, member: str, fan: Fan, full: dict[str, Any], now: float) -> list[Out]:
        out: list[Out] = []
        if fan.method == "initialize":
            if fan.client_id is None:  # a departed member's new child (core/hub_retry.py)
                return self._rejoin_answered(member, full, now)
            result = full.get("result")
            if isinstance(result, dict):
                caps = result.get("capabilities")
                self.members[member].capabilities = caps if isinstance(caps, dict) else {}
                self.members[member].joined = now
            else:
                refusal = why(full.get("error"))
                out += self._gone(member, f"it refused initialize ({refusal})", now)
                out.append(CloseMember(member, f"refused initialize ({refusal})"))
        if fan.client_id is None:
            return out + self._primed(member, fan, full.get("result"))
        if not fan.waiting:
            out += self._finish(fan)
        return out

    def _member_request(self, member: str, message: Request) -> list[Out]:
        if message.method == "ping":
            return [ToMember(member, jsonrpc.encode(jsonrpc_result(message.id, {})))]
        if len(self._asked) >= self.in_flight:
            text = "Too many requests to the client in flight (MCPGATE_HUB_IN_FLIGHT)"
            return [ToMember(member, jsonrpc.encode(jsonrpc.error_response(message.id, SERVER_GONE, text)))]
        hub_id = self._mint()
        return [ToClient(self._asked.add(hub_id, member, message))]

    def _member_notification(self, member: str, message: Notification) -> list[Out]:
        params = message.params if isinstance(message.params, dict) else {}
        method = message.method
        if method == "notifications/progress":
            token = params.get("progressToken")
            if not jsonrpc.is_valid_id(token) or (member, jsonrpc.id_key(token)) not in self._tokens:
                return []
            return [ToClient(message)]
        if method == "notifications/cancelled":
            hub_id = self._asked.withdrawn(member, params.get("requestId"))
            return [ToClient(notification(method, {**params, "requestId": hub_id}))] if hub_id is not None else []
        if method in CHANGED:
            out = self._changed_list(method)
            if method == "notifications/resources/list_changed":
                self.uris.forget(member)
                out += self._prime(member, 0.0)
            return out
        return [ToClient(message)]

    def _changed_list(self, method: str) -> list[Out]:
        first = not self._changed
        self._changed.add(method)
        return [Wake(COALESCE)] if first else []

    # -- time, departures ---------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Out]:
        """Send the coalesced list_changed; close members silent on initialize past `init_timeout`."""
        out: list[Out] = []
        late = {
            p.member
            for p in self._pending.values()
            if p.fan and p.fan.method == "initialize" and now - p.sent >= self.init_timeout
        }
        for member in late:
            reason = f"no answer to initialize within {self.init_timeout:g} s (MCPGATE_START_TIMEOUT)"
            out += [*self.member_gone(member, reason, now), CloseMember(member, reason)]
        if self.initialized:
            for method in sorted(self._changed):
                obj = {"jsonrpc": "2.0", "method": method}
                out.append(ToClient(Notification(method, None, obj)))
            self._changed.clear()
        return out + self._release_held(now)

    def member_gone(self, member: str, reason: str, now: float) -> list[Out]:
        """A member ended (or never started, or its new child did not come back): its requests fail, its lists
        vanish (list_changed), it is tried again."""
        state = self.members[member]
        if state.gone is not None and state.phase not in (STARTING, JOINING):
            return []
        out = self._gone(member, reason, now)
        return out + self._release_held(now) if self._held else out

    def _gone(self, member: str, reason: str, now: float) -> list[Out]:
        state = self.members[member]
        had = state.capabilities or {}
        state.gone, state.capabilities = reason, None
        retry = self._schedule(member, now)
        text = f"server {member!r} is no longer part of this endpoint: {reason}; tried again in {retry.delay:g} s"
        out: list[Out] = [Note(text), retry]
        for hub_id in [h for h, p in self._pending.items() if p.member == member]:
            pending = self._release(hub_id)
            assert pending is not None
            if pending.fan is not None:
                pending.fan.waiting.discard(member)
                if pending.fan.client_id is not None and not pending.fan.waiting:
                    out += self._finish(pending.fan)
            elif pending.client_id is not None:
                self._by_client.pop(jsonrpc.id_key(pending.client_id), None)
                text = f"Server {member!r} of this endpoint ended: {reason}"
                out.append(error(pending.client_id, SERVER_GONE, text, {"server": member}))
        for hub_id in self._asked.of(member):  # its requests to the client are withdrawn
            out.append(ToClient(notification("notifications/cancelled", {"requestId": hub_id, "reason": "it ended"})))
        self.uris.forget(member)
        for method, capability in CHANGED.items():
            if capability in had:
                out += self._changed_list(method)
        return out

    # -- helpers --------------------------------------------------------------------------------------------
    def _release(self, hub_id: int) -> Pending | None:
        pending = self._pending.pop(hub_id, None)
        if pending is not None and pending.token is not None:
            self._tokens.pop((pending.member, pending.token), None)
        return pending
