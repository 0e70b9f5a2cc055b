"""The hub's naming side: what is asked of every member at once and answered as one message under namespaced
names (core/hub_lists.py's rules): initialize (the union of capabilities, one protocol revision), the lists
(fanned out, merged in member order, paginated by a cursor carrying each member's own), and the hub's own
resources lists that fill the URI map. It holds the hub's state; core/hub.py's `Hub` adds the routing of
single requests, answers, notifications and departures on top of it. Sans-IO, as the hub.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcpgate.core import hub_lists, jsonrpc
from mcpgate.core.hub_lists import LISTS, UriMap
from mcpgate.core.hub_messages import (
    Fan,
    Member,
    MemberState,
    Note,
    Out,
    Pending,
    ServerRequests,
    ToClient,
    ToMember,
    Wake,
    encode_request,
    error,
    response,
)
from mcpgate.core.jsonrpc import Id, IdKey, Request

INIT_TIMEOUT = 60.0  # seconds a member may take to answer initialize before it is closed (by default)
PRIME_PAGES = 10  # pages of a member's resources/list the hub reads itself to fill the URI map
SERVER_GONE = -32000
OWN_LISTS = ("resources/list", "resources/templates/list")


class Lists:
    """The hub's state, and its fan-outs: initialize and the lists asked of every member, merged."""

    def __init__(
        self, members: Sequence[Member], *, in_flight: int, uris: int, init_timeout: float = INIT_TIMEOUT
    ) -> None:
        self.init_timeout = init_timeout
        self.members = {m.name: MemberState(m.prefix, tools=m.tools) for m in members}
        self.by_prefix = {m.prefix: m.name for m in members}
        self.in_flight, self.uris = in_flight, UriMap(uris)
        self._next = 0
        self._pending: dict[int, Pending] = {}
        self._by_client: dict[IdKey, list[int]] = {}
        self._tokens: dict[tuple[str, IdKey], int] = {}
        self._asked = ServerRequests()  # the members' requests to the client
        self._held: dict[IdKey, tuple[Request, float]] = {}  # URI-routed requests waiting for the URI map
        self._changed: set[str] = set()
        self.handshake = False  # initialize was asked
        self.init_params: dict[str, Any] | None = None  # the client's initialize (a member coming back is asked it)
        self.initialized = False  # notifications/initialized came

    # -- what is asked of every member, answered as one (initialize, the lists) --------------------------
    def _ready(self, capability: str | None) -> list[str]:
        return [
            n
            for n, m in self.members.items()
            if m.gone is None and m.capabilities is not None and (capability is None or capability in m.capabilities)
        ]

    def _mint(self) -> int:
        self._next += 1
        return self._next

    def _list(self, message: Request, params: dict[str, Any], now: float) -> list[Out]:
        capability = LISTS[message.method][1]
        if "cursor" not in params:
            return self._fan(message.id, message.method, params, self._ready(capability), now)
        parts = hub_lists.decode_cursor(message.method, params["cursor"])
        if parts is None:
            return [error(message.id, jsonrpc.INVALID_PARAMS, "Invalid params: invalid cursor")]
        ready = self._ready(capability)
        cursors = {name: parts[name] for name in ready if name in parts}
        return self._fan(message.id, message.method, params, list(cursors), now, cursors)

    def _fan(
        self,
        client_id: Id | None,
        method: str,
        params: dict[str, Any],
        members: list[str],
        now: float,
        cursors: dict[str, str] | None = None,
    ) -> list[Out]:
        if client_id is not None and len(self._pending) + len(members) > self.in_flight:
            return [error(client_id, SERVER_GONE, "Too many requests in flight (MCPGATE_HUB_IN_FLIGHT)")]
        sent = {k: v for k, v in params.items() if k != "cursor"}
        meta = sent.get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:  # one token, several members: not passed on
            sent["_meta"] = {k: v for k, v in meta.items() if k != "progressToken"}
        fan = Fan(method, client_id, sent, set(members))
        if method == "initialize" and client_id is not None:
            self.init_params = sent
        out: list[Out] = []
        ids = []
        for name in members:
            hub_id = self._mint()
            ids.append(hub_id)
            self._pending[hub_id] = Pending(name, now, fan=fan)
            own = {**sent, "cursor": cursors[name]} if cursors and name in cursors else sent
            out.append(ToMember(name, encode_request(hub_id, method, own)))
        if client_id is not None:
            self._by_client[jsonrpc.id_key(client_id)] = ids
        if method == "initialize" and members:
            out.append(Wake(self.init_timeout))
        return out + (self._finish(fan) if not members else [])

    def _finish(self, fan: Fan) -> list[Out]:
        assert fan.client_id is not None
        self._by_client.pop(jsonrpc.id_key(fan.client_id), None)
        if fan.method == "initialize":
            return self._initialized(fan)
        if fan.method in LISTS:
            if fan.method in OWN_LISTS:  # what the client is told of URIs, the URI map learns too
                for name, answer in fan.answers.items():
                    self.uris.take(name, fan.method, answer)
            order = [(n, self.members[n].prefix, self._shown(n, fan)) for n in self.members if n in fan.answers]
            page = hub_lists.merge_page(fan.method, order)
            notes: list[Out] = [
                Note(f"server {n!r}: its next cursor is too long to carry; listing cut") for n in page.cut
            ]
            return [*notes, ToClient(response(fan.client_id, page.result))]
        return [ToClient(response(fan.client_id, {}))]

    def _shown(self, member: str, fan: Fan) -> object:
        """A member's part of a list, without the tools its server hides."""
        answer, tools = fan.answers.get(member), self.members[member].tools
        return tools.result(answer) if tools is not None and fan.method == "tools/list" else answer

    def _initialized(self, fan: Fan) -> list[Out]:
        assert fan.client_id is not None
        ready = [n for n in self.members if self.members[n].capabilities is not None and self.members[n].gone is None]
        if not ready:
            why = "; ".join(f"{n}: {m.gone}" for n, m in self.members.items() if m.gone) or "none answered"
            text = f"No server of this endpoint could be initialized ({why})"
            return [error(fan.client_id, jsonrpc.INTERNAL_ERROR, text)]
        answers = [(self.members[n].prefix, fan.answers.get(n)) for n in ready]
        result = hub_lists.initialize_result(fan.params.get("protocolVersion"), answers)
        if any(m.gone is not None for m in self.members.values()):  # it may come back, its lists with it
            hub_lists.every_list_may_change(result["capabilities"])
        return [ToClient(response(fan.client_id, result))]

    # -- the hub's own resource lists (the URI map) -------------------------------------------------------
    def _prime(
        self, member: str, now: float, method: str = "resources/list", cursor: str | None = None, pages: int = 1
    ) -> list[Out]:
        if len(self._pending) >= self.in_flight:
            return []
        out: list[Out] = []
        for kind in (method,) if cursor is not None else OWN_LISTS:
            hub_id = self._mint()
            params: dict[str, Any] = {"cursor": cursor} if cursor is not None else {}
            self._pending[hub_id] = Pending(member, now, fan=Fan(kind, None, {}, {member}, pages=pages))
            out.append(ToMember(member, encode_request(hub_id, kind, params)))
        return out

    def _primed(self, member: str, fan: Fan, result: object) -> list[Out]:
        following = self.uris.take(member, fan.method, result)
        return (
            self._prime(member, 0.0, fan.method, following, fan.pages + 1)
            if following and fan.pages < PRIME_PAGES
            else []
        )
