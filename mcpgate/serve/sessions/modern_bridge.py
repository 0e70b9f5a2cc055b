"""A 2025 session (Streamable HTTP or HTTP+SSE) in front of a child that speaks only 2026-07-28.

The session's `initialize` is answered from the child's DiscoverResult (core.mrtr.initialize_from_discover; the
client's capabilities, client info and logging/setLevel level are kept) and every later request goes to the child
with the 2026-07-28 `_meta` (core.modern_client.modern_params; its progressToken kept, so the child's progress
reaches the request's stream). `ping` and `logging/setLevel` are answered here. An InputRequiredResult becomes the
matching requests to the client (elicitation/create, sampling/createMessage, roots/list, under ids the bridge
mints, on the session's streams); once every one is answered, the request is retried under a minted id with
`inputResponses` and the echoed `requestState` (at most MAX_ROUNDS times), and the child's final answer goes to
the client under the client's id. A client's notifications/cancelled reaches the child under the id the child
knows the request by, and the input requests still open for it are cancelled toward the client.

resources/subscribe, resources/unsubscribe and the list-changed notifications are carried by one
subscriptions/listen on the child (serve/sessions/modern_listen.py).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpgate import __version__
from mcpgate.core import jsonrpc, modern, modern_client, modern_rewrites, mrtr, versions
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response
from mcpgate.serve.modern import era_probe
from mcpgate.serve.sessions.modern_listen import Listens

log = logging.getLogger("mcpgate.session")

MAX_ROUNDS = 8  # input_required answers to one request before it is failed (as the relay's bridge)
SERVER_INFO = {"name": "mcpgate", "version": __version__}  # when the child's DiscoverResult names none
SUBSCRIPTIONS = ("resources/subscribe", "resources/unsubscribe")
# Server commands whose children refused initialize (bounded as era_probe's verdicts): their next sessions start
# bridged. Not era_probe's MODERN verdict, which a dual-era server earns too (its 2025 sessions are its own).
_modern_only: OrderedDict[era_probe.Key, None] = OrderedDict()


def modern_only(key: era_probe.Key) -> bool:
    return key in _modern_only


def remember_modern_only(key: era_probe.Key, refused: bool) -> None:
    """Remember (`refused`: the child refused initialize) or forget that the command's server is modern-only."""
    _modern_only.pop(key, None)
    if refused:
        _modern_only[key] = None
        while len(_modern_only) > era_probe.REMEMBERED:
            _modern_only.popitem(last=False)


@dataclass(eq=False)
class _Call:
    """A client request on its way through the child: the id the child knows it by, the input requests open."""

    request: Request
    child_id: Id
    rounds: int = 0
    request_state: object = None
    asked: dict[str, Id] = field(default_factory=dict)  # inputRequests key -> the id the client was asked under
    answers: dict[str, Any] = field(default_factory=dict)


class Bridged(Protocol):
    """The session the bridge speaks for (serve/sessions/session.py): its child's input, its client's messages."""

    @property
    def label(self) -> str: ...
    @property
    def verdict(self) -> era_probe.Key | None: ...  # the server's command, when it is remembered

    def send(self, data: bytes) -> bool:
        """Bytes to the child (False: it takes no more input)."""

    def route(self, message: Request | Notification | Response) -> None:
        """A message for the client, delivered where it belongs."""

    def unbridge(self) -> None:
        """The child speaks the client's own era after all: the session speaks to it directly from now on."""


class ModernChildBridge:
    def __init__(self, session: Bridged) -> None:
        self.session = session
        self.version = versions.V2026_07_28
        self.capabilities: dict[str, Any] = {}
        self.client_info: dict[str, Any] | None = None
        self.log_level: str | None = None
        self._prefix = f"mcpgate-{secrets.token_hex(4)}-"  # the bridge's ids, apart from the client's
        self._count = itertools.count(1)
        self._initialize: tuple[Id, Request] | None = None  # server/discover's id, the client's initialize
        self._refused = False  # the child refused that initialize itself (found modern, not remembered so)
        self._calls: dict[IdKey, _Call] = {}  # by the id the child knows the call by
        self._by_client: dict[IdKey, _Call] = {}  # by the client's id
        self._asked: dict[IdKey, tuple[_Call, str]] = {}  # the client's input requests, by their id
        self.listens = Listens(
            session.label, self._mint, lambda i, m, p: self._send(i, m, self._meta(p)), self._cancel, session.route
        )

    def _mint(self, kind: str) -> str:
        return f"{self._prefix}{kind}-{next(self._count)}"

    # -- the client's messages ----------------------------------------------------------------------------------
    def from_client(self, message: Request | Notification | Response) -> bool:
        """Whether the message was taken (it always is; False only when the child takes no more input)."""
        if isinstance(message, Response):
            return self._answered(message)
        if isinstance(message, Notification):
            if message.method == "notifications/cancelled":
                return self._cancelled(message)
            if message.method == "notifications/initialized":
                self.listens.client_initialized()
                return True
            log.debug("session %s: %s not sent to a 2026-07-28 child", self.session.label, message.method)
            return True
        params = message.params if isinstance(message.params, dict) else {}
        if message.method == "initialize":
            return self.initialize(message)
        if message.method in ("ping", "logging/setLevel"):
            level = params.get("level") if message.method == "logging/setLevel" else self.log_level
            self.log_level = level if isinstance(level, str) else None
            self._reply(message.id, {"result": {}})
            return True
        if message.method in SUBSCRIPTIONS:
            self.listens.subscription(message)
            return True
        call = _Call(message, message.id)
        self._by_client[jsonrpc.id_key(message.id)] = call
        return self._send_call(call, message.params)

    def initialize(self, request: Request, *, refused: bool = False) -> bool:
        """The client's initialize: its capabilities kept, the child asked server/discover for the answer
        (`refused`: the child has refused this initialize already)."""
        self._refused = refused
        params = request.params if isinstance(request.params, dict) else {}
        capabilities, info = params.get("capabilities"), params.get("clientInfo")
        self.capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
        self.client_info = dict(info) if isinstance(info, dict) else None
        minted = self._mint("discover")
        self._initialize = (minted, request)
        return self._send(minted, "server/discover", {"_meta": self._meta({})["_meta"]})

    def _meta(self, params: object) -> dict[str, Any]:
        return modern_client.modern_params(
            params,
            version=self.version,
            capabilities=self.capabilities,
            client_info=self.client_info or SERVER_INFO,
            log_level=self.log_level,
        )

    def _send(self, msg_id: Id, method: str, params: dict[str, Any]) -> bool:
        obj = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        return self.session.send(jsonrpc.encode(obj))

    def _send_call(self, call: _Call, params: object) -> bool:
        self._calls[jsonrpc.id_key(call.child_id)] = call
        return self._send(call.child_id, call.request.method, self._meta(params))

    def _answered(self, message: Response) -> bool:
        """The client's answer to an input request; the retry once the round is answered."""
        found = self._asked.pop(jsonrpc.id_key(message.id), None) if message.id is not None else None
        if found is None:
            log.debug("session %s: dropped a client response nobody waits for", self.session.label)
            return True
        call, key = found
        answer = mrtr.answered_result(message.full())
        if isinstance(answer, str):
            self._fail(call, jsonrpc.INTERNAL_ERROR, f"the client answered {call.request.method}'s input: {answer}")
            return True
        call.answers[key] = answer
        return len(call.answers) < len(call.asked) or self._retry(call)

    def _retry(self, call: _Call) -> bool:
        """The request again, under a new id, with the round's answers and the echoed requestState."""
        retry = mrtr.retry_params(call.request.params, call.answers, call.request_state)
        call.asked, call.answers = {}, {}
        call.child_id = self._mint("retry")
        return self._send_call(call, retry)

    def _cancelled(self, message: Notification) -> bool:
        params = message.params if isinstance(message.params, dict) else {}
        request_id = params.get("requestId")
        call = self._by_client.get(jsonrpc.id_key(request_id)) if jsonrpc.is_valid_id(request_id) else None
        if call is None:
            return True
        waiting = bool(call.asked)  # the child answered (input_required): it has nothing to stop
        self._forget(call)
        return waiting or self._cancel(call.child_id, params.get("reason"))

    def _cancel(self, child_id: Id, reason: object = None) -> bool:
        params: dict[str, Any] = {"requestId": child_id}
        if isinstance(reason, str):
            params["reason"] = reason
        obj = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        return self.session.send(jsonrpc.encode(obj))

    # -- the child's messages -----------------------------------------------------------------------------------
    def from_child(self, message: Request | Notification | Response) -> None:
        """Route what the client gets of a child's message (through session.route)."""
        if isinstance(message, Notification) and self.listens.notification(message):
            return  # a listen's, passed on without its subscriptionId
        if not isinstance(message, Response) or message.id is None:
            self.session.route(message)  # progress and log messages carry the client's token; the rest as is
            return
        if self.listens.ended(message):
            return
        if self._initialize is not None and message.id == self._initialize[0]:
            self._discovered(message)
            return
        call = self._calls.pop(jsonrpc.id_key(message.id), None)
        if call is None:
            self.session.route(message)  # the router drops it (no request of the client's has that id)
            return
        full = message.full()
        result = full.get("result")
        if not mrtr.is_input_required(result):
            self._by_client.pop(jsonrpc.id_key(call.request.id), None)
            self._reply(call.request.id, {key: value for key, value in full.items() if key in ("result", "error")})
            return
        assert isinstance(result, dict)
        self._ask(call, result)

    def _discovered(self, message: Response) -> None:
        assert self._initialize is not None
        _discover_id, request = self._initialize
        self._initialize = None
        full = message.full()
        result = full.get("result")
        error = full.get("error")
        if (
            not modern_rewrites.is_discover_result(result)
            and not self._refused
            and not modern_rewrites.recognised_modern_error(error)
        ):
            self._legacy_after_all(request)
            return
        if not modern_rewrites.is_discover_result(result):
            code = error.get("code") if isinstance(error, dict) else None
            why = error.get("message") if isinstance(error, dict) else "no DiscoverResult"
            failed = jsonrpc.error_response(
                request.id, code if isinstance(code, int) else jsonrpc.INTERNAL_ERROR, f"server/discover failed: {why}"
            )
            self.session.route(Response(request.id, failed))
            return
        assert isinstance(result, dict)
        params = request.params if isinstance(request.params, dict) else {}
        answer = mrtr.initialize_from_discover(result, params.get("protocolVersion"), SERVER_INFO)
        self.listens.capabilities = answer["capabilities"]
        log.info("session %s: a %s client bridged to a 2026-07-28 child", self.session.label, answer["protocolVersion"])
        self._reply(request.id, {"result": answer})

    def _legacy_after_all(self, request: Request) -> None:
        """A child of a server remembered as 2026-07-28-only refused server/discover as a legacy one does: the
        verdict is forgotten and the client's initialize goes to it as it came (it has answered: nothing is late)."""
        log.info(
            "session %s: the child refused server/discover, though its server refused initialize before; "
            "sent the client's initialize",
            self.session.label,
        )
        if self.session.verdict is not None:
            remember_modern_only(self.session.verdict, refused=False)
        self.session.unbridge()
        self.session.send(jsonrpc.raw_bytes(request))

    def _ask(self, call: _Call, result: dict[str, Any]) -> None:
        """Every input request of an InputRequiredResult sent to the client at once."""
        asks = mrtr.input_requests(result)
        if asks is None:
            self._fail(call, jsonrpc.INTERNAL_ERROR, f"the server's input_required to {call.request.method} is bad")
            return
        missing = mrtr.missing_capability(asks, self.capabilities)
        if missing is not None:
            why = f"the server needs {missing[0]}, which needs a client capability the client did not declare"
            self._fail(call, modern.MISSING_CLIENT_CAPABILITY, why, {"requiredCapabilities": missing[1]})
            return
        call.rounds += 1
        if call.rounds > MAX_ROUNDS:
            self._fail(call, jsonrpc.INTERNAL_ERROR, f"the server asked for input more than {MAX_ROUNDS} times")
            return
        call.request_state = result.get("requestState")
        if not asks:  # it asks for nothing: retried at once (bounded by the rounds)
            self._retry(call)
            return
        for key, (method, params) in asks.items():
            minted = self._mint("input")
            call.asked[key] = minted
            self._asked[jsonrpc.id_key(minted)] = (call, key)
            obj: dict[str, Any] = {"jsonrpc": "2.0", "id": minted, "method": method}
            if params is not None:
                obj["params"] = params
            self.session.route(Request(minted, method, params, obj))

    # -- answering the client -----------------------------------------------------------------------------------
    def _reply(self, request_id: Id, body: dict[str, Any]) -> None:
        obj = {"jsonrpc": "2.0", "id": request_id, **body}
        self.session.route(Response(request_id, obj))

    def _fail(self, call: _Call, code: int, message: str, data: Any = None) -> None:
        self._forget(call)
        error = jsonrpc.error_response(call.request.id, code, message, data)
        self.session.route(Response(call.request.id, error))

    def _forget(self, call: _Call) -> None:
        """The call is over: its ids forgotten, its open input requests cancelled toward the client."""
        self._by_client.pop(jsonrpc.id_key(call.request.id), None)
        self._calls.pop(jsonrpc.id_key(call.child_id), None)
        for minted in call.asked.values():
            if self._asked.pop(jsonrpc.id_key(minted), None) is not None:
                params = {"requestId": minted, "reason": "the request it belonged to has ended"}
                obj = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
                self.session.route(Notification("notifications/cancelled", params, obj))
        call.asked = {}
