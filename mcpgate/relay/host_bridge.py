"""A legacy host (initialize, sessions) in front of a 2026-07-28-only upstream.

The host's initialize is answered from the upstream's server/discover (its own revision when a handshake
revision, else the latest); its capabilities, client info and logging/setLevel level are kept and sent on
every later request in the modern _meta (core.modern_client.modern_params). ping and logging/setLevel are answered
here. An InputRequiredResult becomes the matching requests to the host (elicitation/create,
sampling/createMessage, roots/list, under ids the bridge mints; the host's answers are intercepted), then the
original request is retried under a new id with `inputResponses` and the echoed `requestState`, at most
`max_rounds` times.

Change notifications: a legacy host is sent list_changed whenever the server declares listChanged, and
resources/updated for what it subscribed to. The bridge keeps ONE subscriptions/listen open upstream for that
(its own greenlet; opened after notifications/initialized, re-opened when the subscribed URIs change: the new
one is acknowledged before the old one is closed) and forwards its notifications without the subscriptionId. A
listen that ended is opened again after a backoff; what changed meanwhile went nowhere, so once the new one is
acknowledged the host is told that everything it hears of may have changed (a list_changed per honoured kind, a
resources/updated per honoured URI): a spurious change costs a re-read, a missed one a stale list.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import gevent
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet
from gevent.pool import Group

from mcpgate import __version__
from mcpgate.core import jsonrpc, modern, modern_client, mrtr, subscriptions, wire
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response
from mcpgate.core.subscriptions import ACKNOWLEDGED, LIST_KINDS, RESOURCES_FIELD
from mcpgate.relay import errors
from mcpgate.relay.bridge_calls import notification
from mcpgate.relay.transport import OneWay, Sink, Upstream

log = logging.getLogger("mcpgate.relay")

CLIENT_INFO = {"name": "mcpgate-relay", "version": __version__}
HOST_ANSWER_TIMEOUT = 600.0  # seconds the host has to answer an input request (a person may be typing)
LISTEN_READY_WAIT = 5.0  # seconds a request waits for a new listen's acknowledgment (no change is missed)
LISTEN_BACKOFF = (1.0, 30.0)  # first and longest wait before a listen that ended is opened again
_minted = itertools.count(1)


def mint(kind: str) -> str:
    return f"mcpgate-relay-{kind}-{next(_minted)}"


class ModernWire(Protocol):
    """What the bridge uses of relay/modern.py's ModernTransport (its sink is taken over by the bridge)."""

    sink: Sink
    version: str

    def discover(self) -> dict[str, Any]: ...

    def request(self, req: Request) -> Response: ...

    def send_oneway(self, message: OneWay) -> None: ...

    def cancel_grace(self, req: Request) -> float: ...

    def close(self) -> None: ...


@dataclass(eq=False)
class _Listen:
    filter: dict[str, Any]
    id: Id = ""
    greenlet: Greenlet | None = None
    acked: Event = field(default_factory=Event)  # acknowledged upstream (or failed): requests may go on
    opened: int = 0  # times sent upstream: from the second on, changes may have gone unheard in between


def _request(msg_id: Id, method: str, params: Any) -> Request:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        obj["params"] = params
    return Request(msg_id, method, params, obj)


def _result(msg_id: Id, result: dict[str, Any]) -> Response:
    return Response(msg_id, {"jsonrpc": "2.0", "id": msg_id, "result": result})


def _error(msg_id: Id, code: int, message: str, data: Any = None) -> Response:
    return Response(msg_id, jsonrpc.error_response(msg_id, code, message, data))


class LegacyHostBridge:
    def __init__(self, modern: ModernWire, sink: Sink, *, max_rounds: int = 8) -> None:
        self.modern = modern
        self.sink = sink
        self.max_rounds = max_rounds
        modern.sink = self._on_upstream  # the listen's notifications lose their subscriptionId here
        self.capabilities: dict[str, Any] = {}  # the host's, from its initialize
        self.client_info: dict[str, Any] | None = None
        self.log_level: str | None = None
        self.initialized = False
        self._asked: dict[IdKey, AsyncResult] = {}  # the bridge's requests to the host, by minted id
        self._uris: dict[str, None] = {}  # resources the host subscribed to, in order
        self._listen: _Listen | None = None  # the newest listen opened upstream
        self._live: dict[IdKey, _Listen] = {}  # every listen still open, by its id (the subscription id)
        self._background = Group()
        self.closing = False

    # -- host requests ------------------------------------------------------------------------------------------
    def request(self, req: Request) -> Response:
        params = req.params if isinstance(req.params, dict) else {}
        if req.method == "initialize":
            return self._initialize(req, params)
        if req.method == "ping":
            return _result(req.id, {})
        if req.method == "logging/setLevel":
            level = params.get("level")
            self.log_level = level if isinstance(level, str) else None
            return _result(req.id, {})
        if req.method in ("resources/subscribe", "resources/unsubscribe"):
            return self._subscription(req, params)
        self.modern.discover()  # the revision to speak (cached after the first time)
        self._await_listen()
        return self._relay(req)

    def _initialize(self, req: Request, params: dict[str, Any]) -> Response:
        discovered = self.modern.discover()  # a ModernRefused is the host's answer
        capabilities = params.get("capabilities")
        info = params.get("clientInfo")
        self.capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
        self.client_info = dict(info) if isinstance(info, dict) else None
        result = mrtr.initialize_from_discover(discovered, params.get("protocolVersion"), CLIENT_INFO)
        log.info("bridging a legacy host (%s) to a %s upstream", result["protocolVersion"], self.modern.version)
        return _result(req.id, result)

    def _subscription(self, req: Request, params: dict[str, Any]) -> Response:
        uri = params.get("uri")
        if not isinstance(uri, str):
            return _error(req.id, jsonrpc.INVALID_PARAMS, f"{req.method}: uri must be a string")
        before = list(self._uris)
        if req.method == "resources/subscribe":
            self._uris[uri] = None
        else:
            self._uris.pop(uri, None)
        if list(self._uris) != before and self.initialized:
            self._relisten()
            self._await_listen()
        return _result(req.id, {})

    def _modern(self, msg_id: Id, method: str, params: Any) -> Request:
        shaped = modern_client.modern_params(
            params,
            version=self.modern.version,
            capabilities=self.capabilities,
            client_info=self.client_info or CLIENT_INFO,
            log_level=self.log_level,
        )
        return _request(msg_id, method, shaped)

    def _relay(self, req: Request) -> Response:
        """The request in modern form; input_required answered by asking the host, then retried."""
        message = self._modern(req.id, req.method, req.params)
        for _round in range(self.max_rounds + 1):
            reply = self.modern.request(message)
            result = reply.full().get("result") if not reply.is_error else None
            if not isinstance(result, dict) or not mrtr.is_input_required(result):
                return reply if reply.id == req.id else Response(req.id, {**reply.full(), "id": req.id})
            asks = mrtr.input_requests(result)
            if asks is None:
                return _error(req.id, jsonrpc.INTERNAL_ERROR, f"upstream's input_required to {req.method} is malformed")
            answers = self._ask_host(asks, req)
            if isinstance(answers, Response):
                return answers
            retry = mrtr.retry_params(req.params, answers, result.get("requestState"))
            message = self._modern(mint("retry"), req.method, retry)
        return _error(
            req.id, jsonrpc.INTERNAL_ERROR, f"upstream asked for input more than {self.max_rounds} times ({req.method})"
        )

    def _ask_host(self, asks: dict[str, tuple[str, dict[str, Any] | None]], req: Request) -> dict[str, Any] | Response:
        """Every input request sent to the host at once; their results by key, or the error the host gets."""
        missing = mrtr.missing_capability(asks, self.capabilities)
        if missing is not None:
            return _error(
                req.id,
                modern.MISSING_CLIENT_CAPABILITY,
                f"upstream needs {missing[0]}, which needs a client capability the host did not declare",
                {"requiredCapabilities": missing[1]},
            )
        waiting: dict[str, tuple[str, AsyncResult]] = {}
        try:
            for key, (method, params) in asks.items():
                minted = mint("input")
                waiting[key] = (minted, AsyncResult())
                self._asked[jsonrpc.id_key(minted)] = waiting[key][1]
                self.sink(_request(minted, method, params))
            answers: dict[str, Any] = {}
            for key, (_minted_id, answered) in waiting.items():
                try:
                    answer: dict[str, Any] = answered.get(timeout=HOST_ANSWER_TIMEOUT)
                except gevent.Timeout:
                    return _error(req.id, jsonrpc.REQUEST_TIMEOUT, f"the host did not answer {asks[key][0]} in time")
                result = mrtr.answered_result(answer)
                if isinstance(result, str):
                    return _error(req.id, jsonrpc.INTERNAL_ERROR, f"the host answered {asks[key][0]} with: {result}")
                answers[key] = result
            return answers
        finally:
            for minted, answered in waiting.values():
                self._asked.pop(jsonrpc.id_key(minted), None)
                if not answered.ready():  # cancelled, timed out or failed: the host need not answer any more
                    params = {"requestId": minted, "reason": "the request it belonged to has ended"}
                    obj = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
                    self.sink(Notification("notifications/cancelled", params, obj))

    # -- the listen upstream ----------------------------------------------------------------------------------------
    def _wanted(self) -> dict[str, Any]:
        """Every list kind whose feature the server has (the upstream's acknowledgment says what it honours), and
        the subscribed URIs."""
        return subscriptions.bridged_filter(self.modern.discover().get("capabilities"), self._uris)

    def _relisten(self) -> None:
        """Open a listen for what the host wants now; the one before it closes once the new one is acknowledged
        (at once when nothing is wanted any more)."""
        try:
            wanted = self._wanted()
        except errors.RelayError as exc:
            log.warning("cannot listen for changes upstream: %s", exc.message)
            return
        if self._listen is not None and self._listen.filter == wanted:
            return
        if not wanted:
            self._listen = None
            self._retire(keep=None)
            return
        listen = _Listen(wanted)
        self._listen = listen
        listen.greenlet = self._background.spawn(self._run_listen, listen)

    def _await_listen(self) -> None:
        """Wait (bounded) until the newest listen is acknowledged, so what follows cannot miss a change."""
        listen = self._listen
        if listen is not None:
            listen.acked.wait(timeout=LISTEN_READY_WAIT)

    def _run_listen(self, listen: _Listen) -> None:
        delay = LISTEN_BACKOFF[0]
        while not self.closing and self._listen is listen:
            listen.id = mint("listen")
            listen.opened += 1
            key = jsonrpc.id_key(listen.id)
            self._live[key] = listen
            try:
                reply = self.modern.request(
                    self._modern(listen.id, "subscriptions/listen", {"notifications": listen.filter})
                )
                log.info("upstream ended the listen stream%s", " with an error" if reply.is_error else "")
            except errors.RelayError as exc:
                log.warning("the listen stream upstream failed: %s", exc.message)
            finally:
                self._live.pop(key, None)
                listen.acked.set()  # ended or failed: nobody waits for it any more
            gevent.sleep(delay)
            delay = min(delay * 2, LISTEN_BACKOFF[1])

    def _retire(self, keep: _Listen | None) -> None:
        for listen in {id(item): item for item in self._live.values()}.values():
            if listen is not keep and listen.greenlet is not None:
                listen.greenlet.kill(block=False)  # closing its stream is its cancellation

    # -- from the upstream ------------------------------------------------------------------------------------------
    def _on_upstream(self, message: Upstream) -> None:
        if not isinstance(message, Notification):
            log.debug("dropped an upstream message that is not a notification")
            return
        params = message.params if isinstance(message.params, dict) else {}
        meta = params.get("_meta")
        subscription = meta.get(wire.META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        if not jsonrpc.is_valid_id(subscription):
            self.sink(message)  # progress and log messages of a request
            return
        listen = self._live.get(jsonrpc.id_key(subscription))
        if listen is None:  # not the bridge's (a modern host sharing the wire listens itself): as it came
            self.sink(message)
            return
        if message.method == ACKNOWLEDGED:
            listen.acked.set()
            if listen is self._listen:
                self._retire(keep=listen)
            honoured = params.get("notifications")
            log.info("listening upstream for %s", honoured)
            if listen.opened > 1:
                self._maybe_missed(honoured if isinstance(honoured, dict) else listen.filter)
            return
        plain = subscriptions.without_subscription_id(message.params) or None  # params left empty: none
        obj: dict[str, Any] = {"jsonrpc": "2.0", "method": message.method}
        if plain is not None:
            obj["params"] = plain
        self.sink(Notification(message.method, plain, obj))

    def _maybe_missed(self, honoured: dict[str, Any]) -> None:
        """A listen opened again: every change it carries may have happened while none was open."""
        for kind, (_, method) in LIST_KINDS.items():
            if honoured.get(kind) is True:
                self.sink(notification({"jsonrpc": "2.0", "method": method}))
        uris = honoured.get(RESOURCES_FIELD)
        for uri in uris if isinstance(uris, list) else []:
            if isinstance(uri, str):
                updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}
                self.sink(notification(updated))

    # -- one-way messages from the host, shutdown ---------------------------------------------------------------------
    def send_oneway(self, message: OneWay) -> None:
        if isinstance(message, Response):
            answered = self._asked.get(jsonrpc.id_key(message.id)) if message.id is not None else None
            if answered is not None and not answered.ready():
                answered.set(message.full())
            else:
                log.debug("dropped a host response nobody waits for (id %r)", message.id)
            return
        if message.method == "notifications/initialized":
            self.initialized = True
            self._relisten()
            return
        self.modern.send_oneway(message)  # the modern wire carries none: logged, dropped (a cancel closes a stream)

    def cancel_grace(self, req: Request) -> float:
        return self.modern.cancel_grace(req)

    def close(self) -> None:
        self.closing = True
        self._listen = None
        self._background.kill(block=True, timeout=1.0)
        for answered in list(self._asked.values()):
            if not answered.ready():
                answered.set_exception(errors.ShuttingDown("relay is shutting down"))
        self.modern.close()
