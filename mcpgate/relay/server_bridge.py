"""A 2026-07-28 (modern) host in front of a legacy-only upstream: the mirror of serve's MRTR bridge.

The bridge performs the upstream's initialize itself on the host's first request (declaring elicitation,
sampling and roots) and keeps that one session. Each modern request goes upstream under a minted id with the
per-request _meta removed (core.modern_rewrites.legacy_params); results come back stamped (resultType, cache hints,
serverInfo from initialize). server/discover is answered from the InitializeResult.

The upstream's own input requests (elicitation/create, sampling/createMessage, roots/list) reach the bridge
through the legacy transport's sink. They belong to the one *candidate* call: an MRTR call (tools/call,
prompts/get, resources/read) whose host declared an input capability runs alone among the calls that could ask
(others wait), so attribution never guesses. What becomes of them is each call's core/continuation.py machine;
this bridge performs its actions: the host gets an InputRequiredResult (a requestState sealed for a fixed
principal, bound to the call); its retry (a new id, inputResponses, the echoed state) answers upstream, and the
original call's result is the retry's. A call nobody resumes within `input_ttl` is cancelled upstream.

subscriptions/listen is served from the session's notifications: list_changed as they come, resources/updated
for the URIs asked (resources/subscribe upstream, counted across listens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import AsyncResult
from gevent.greenlet import Greenlet
from gevent.lock import Semaphore
from gevent.pool import Group

from mcpgate import __version__
from mcpgate.core import continuation, jsonrpc, modern, modern_rewrites, mrtr, versions, wire
from mcpgate.core.capabilities import INPUT_CAPABILITY, INPUT_METHODS, client_capabilities
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response
from mcpgate.core.request_state import Opened, StateSealer
from mcpgate.relay import errors
from mcpgate.relay.bridge_calls import Call, Gate, Outcome, arm, error, mint, response, resumed, route_progress
from mcpgate.relay.session_listens import SessionListens
from mcpgate.relay.transport import OneWay, Sink, Transport, Upstream

log = logging.getLogger("mcpgate.relay")

PRINCIPAL = "mcpgate-relay host"  # the one principal of a stdio relay: its requestState is bound to it
GATE_WAIT = 300.0  # seconds a call that could ask for input waits for the candidate before it fails
CACHE_TTL_MS = 0  # a legacy upstream gives no freshness hint: its results are not to be cached
TICK = 1.0  # seconds between checks while a host request waits


class ModernHostBridge:
    def __init__(self, make_legacy: Callable[[Sink], Transport], sink: Sink, *, input_ttl: float = 120.0) -> None:
        self.sink = sink
        self.limits = continuation.Limits(input_ttl)
        self.legacy = make_legacy(self._on_upstream)
        self.sealer = StateSealer(ttl=input_ttl)
        self.init_result: dict[str, Any] | None = None
        self.server_info: dict[str, Any] | None = None
        self.capabilities: dict[str, Any] = {}
        self._init_lock = Semaphore()
        self._gate = Gate()
        self._calls: dict[str, Call] = {}  # by minted id: in flight upstream
        self._by_host: dict[IdKey, Call] = {}  # by the id of the host request carrying it now
        self._resumable: dict[str, Call] = {}  # by continuation: asked for input, until the machine forgets it
        self._timed: set[Call] = set()  # calls whose machine has a timer (left-over input requests included)
        self._background = Group()
        self._listens = SessionListens(sink, self._resource_request, self._background)
        self.closing = False

    # -- the session --------------------------------------------------------------------------------------------
    def _ensure_session(self, req: Request) -> None:
        with self._init_lock:
            if self.init_result is not None:
                return
            meta = req.params.get("_meta") if isinstance(req.params, dict) else None
            info = meta.get(wire.META_CLIENT_INFO) if isinstance(meta, dict) else None
            params = {
                "protocolVersion": versions.LATEST_HANDSHAKE,
                "capabilities": dict(mrtr.BRIDGED_CAPABILITIES),
                "clientInfo": info if isinstance(info, dict) else {"name": "mcpgate-relay", "version": __version__},
            }
            reply = self.legacy.request(self._own("initialize", params)).full()
            result = reply.get("result")
            if not isinstance(result, dict):
                error = reply.get("error")
                why = error.get("message") if isinstance(error, dict) else "no result"
                raise errors.RelayError(f"the legacy upstream refused the relay's initialize: {why}")
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            self.legacy.send_oneway(Notification("notifications/initialized", None, initialized))
            self.capabilities = dict(result.get("capabilities") or {})
            info = result.get("serverInfo")
            self.server_info = info if isinstance(info, dict) else None
            if "logging" in self.capabilities:  # everything; each request's logLevel filters what the host sees
                self.legacy.request(self._own("logging/setLevel", {"level": "debug"}))
            self.init_result = result
            log.info("bridging a 2026-07-28 host to a %s upstream", versions.initialize_version(result))

    @staticmethod
    def _own(method: str, params: dict[str, Any]) -> Request:
        minted = mint()
        return Request(minted, method, params, {"jsonrpc": "2.0", "id": minted, "method": method, "params": params})

    # -- host requests ------------------------------------------------------------------------------------------
    def request(self, req: Request) -> Response:
        if req.method == "ping":
            return response(req.id, {"result": {}})
        self._ensure_session(req)
        params = req.params if isinstance(req.params, dict) else {}
        if req.method == "server/discover":
            result = modern_rewrites.discover_from_initialize(self.init_result or {}, versions.MODERN)
            stamped = modern_rewrites.stamp_result(
                req.method, result, ttl_ms=CACHE_TTL_MS, server_info=self.server_info
            )
            return response(req.id, {"result": stamped})
        if req.method == "subscriptions/listen":
            return self._listen(req, params)
        if req.method in modern.MRTR_METHODS and params.get("requestState") is not None:
            return self._resume(req, params)
        return self._call(req, params)

    def _call(self, req: Request, params: dict[str, Any]) -> Response:
        capabilities = client_capabilities(req)
        raw_meta = params.get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        ahead = params.get("inputResponses")
        call = Call(
            minted=mint(),
            method=req.method,
            binding=mrtr.state_binding(req.method, params),
            host_id=req.id,
            machine=continuation.Continuation(
                self.limits, capabilities, dict(ahead) if isinstance(ahead, dict) else None
            ),
            log_level=meta.get(wire.META_LOG_LEVEL),
            token=meta.get("progressToken"),
            sent_token=meta.get("progressToken"),  # kept upstream (legacy_params), the call's for its life
        )
        if req.method in modern.MRTR_METHODS:
            candidate = any(cap in capabilities for cap in INPUT_CAPABILITY.values())
            if not self._gate.enter(call, candidate, GATE_WAIT):
                raise errors.RelayError(f"{req.method} waited {GATE_WAIT:g}s for another call's input request")
            call.gated = True
        upstream_params = mrtr.without_mrtr(modern_rewrites.legacy_params(req.params))
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": call.minted, "method": req.method}
        if upstream_params is not None:
            message["params"] = upstream_params
        self._calls[call.minted] = call
        self._by_host[jsonrpc.id_key(req.id)] = call
        call.runner = self._background.spawn(
            self._run, call, Request(call.minted, req.method, upstream_params, message)
        )
        return self._await_turn(call, req)

    def _run(self, call: Call, upstream: Request) -> None:
        outcome: Outcome
        try:
            outcome = self.legacy.request(upstream)
        except errors.RelayError as exc:
            outcome = exc
        except Exception as exc:  # a bug must still answer the host
            log.exception("relay error on %s", call.method)
            outcome = errors.RelayError(f"relay internal error: {exc!r}"[:300])
        self._finish(call, outcome)

    def _finish(self, call: Call, outcome: Outcome) -> None:
        """The call is over upstream: its slot goes; the host gets the outcome now, or on its retry."""
        if call.finished:
            return
        call.finished = True
        self._calls.pop(call.minted, None)
        if call.gated:
            self._gate.leave(call)
        self._handle(call, continuation.Finished(outcome))

    def _forget(self, call: Call) -> None:
        self._resumable.pop(call.continuation, None)
        if self._by_host.get(jsonrpc.id_key(call.host_id)) is call:
            del self._by_host[jsonrpc.id_key(call.host_id)]

    def _await_turn(self, call: Call, req: Request) -> Response:
        """What the host gets for this request: the call's result, or its next InputRequiredResult."""
        try:
            while True:
                try:
                    kind, value = call.turn.get(timeout=TICK)
                    break
                except gevent.Timeout:
                    if self.closing:
                        raise errors.ShuttingDown("relay is shutting down") from None
        except BaseException:  # killed by the pump (the host cancelled) or shutting down
            if not call.finished and not call.parked:
                self._cancel(call, "the host cancelled the request")
            raise
        if kind == "input":
            return response(req.id, {"result": value})
        if isinstance(value, errors.RelayError):
            raise value
        return self._host_response(call, value, req.id)

    def _host_response(self, call: Call, reply: Response, host_id: Id) -> Response:
        obj = reply.full()
        result = obj.get("result")
        if isinstance(result, dict):
            stamped = modern_rewrites.stamp_result(
                call.method, result, ttl_ms=CACHE_TTL_MS, server_info=self.server_info
            )
            return response(host_id, {"result": stamped})
        return response(host_id, {key: value for key, value in obj.items() if key not in ("jsonrpc", "id")})

    def _cancel(self, call: Call, reason: str) -> None:
        self._handle(call, continuation.Cancelled(reason))

    def _cancel_upstream(self, call: Call, reason: str) -> None:
        """Cancel the call upstream; its reply stream is read for the wire's grace (other messages ride on it)."""
        if call.finished:
            return
        params = {"requestId": call.minted, "reason": reason}
        obj = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        self.legacy.send_oneway(Notification("notifications/cancelled", params, obj))  # before its input requests end
        cancelled = errors.RelayError(f"request cancelled: {reason}")
        self._finish(call, cancelled)
        if not call.turn.ready():  # a host request waits for it
            call.turn.set(("done", cancelled))
        runner = call.runner
        if runner is not None and not runner.dead:
            grace = self.legacy.cancel_grace(Request(call.minted, call.method, None, {}))
            self._background.spawn(_reap, runner, grace)

    # -- MRTR: the machine's actions -------------------------------------------------------------------------------
    def _handle(self, call: Call, event: continuation.Event[Outcome]) -> None:
        for action in call.machine.handle(event, time.monotonic()):
            self._perform(call, action)
        self._arm(call)

    def _perform(self, call: Call, action: continuation.Action[Outcome]) -> None:
        if isinstance(action, continuation.AnswerChild):
            self._answer_upstream(action.request_id, {"result": action.result})
        elif isinstance(action, continuation.RefuseChild):
            self._refuse_upstream(action.request_id, action.code, action.message, action.data)
        elif isinstance(action, continuation.AskClient):  # the host's request is answered: the call is parked
            state = self.sealer.seal(PRINCIPAL, call.continuation, action.round, binding=call.binding)
            result = mrtr.input_required_result(action.requests, state)
            result = modern_rewrites.stamp_result(call.method, result, ttl_ms=0, server_info=self.server_info)
            self._resumable[call.continuation] = call
            self._by_host.pop(jsonrpc.id_key(call.host_id), None)
            call.turn.set(("input", result))
        elif isinstance(action, continuation.Deliver):
            call.turn.set(("done", action.outcome))
        elif isinstance(action, continuation.CancelCall):
            self._cancel_upstream(call, action.reason)
        elif isinstance(action, continuation.Forget):
            self._forget(call)

    def _arm(self, call: Call) -> None:
        if arm(call, self._tick, self._background):
            self._timed.add(call)
        else:
            self._timed.discard(call)

    def _tick(self, call: Call) -> None:
        call.timer = None  # this greenlet ends here: _arm sets the next one
        for action in call.machine.handle(continuation.Tick(), time.monotonic()):
            if isinstance(action, continuation.CancelCall):
                log.info("abandoned a bridged %s: %s", call.method, action.reason)
            self._perform(call, action)
        self._arm(call)

    def _on_input_request(self, request: Request) -> None:
        call = self._gate.candidate
        if call is None:
            refusal = continuation.no_candidate(request)
            self._refuse_upstream(refusal.request_id, refusal.code, refusal.message, refusal.data)
        else:
            self._handle(call, continuation.Asked(request))

    def _resume(self, req: Request, params: dict[str, Any]) -> Response:
        opened = self.sealer.open(params.get("requestState"), PRINCIPAL, binding=mrtr.state_binding(req.method, params))
        if not isinstance(opened, Opened):
            return error(req.id, jsonrpc.INVALID_PARAMS, f"Invalid requestState: {opened.message}")
        call = self._resumable.get(opened.continuation)
        if call is None:
            return error(req.id, jsonrpc.INVALID_PARAMS, continuation.ENDED)
        held: list[Outcome] = []
        retried = continuation.Retried(opened.round, params.get("inputResponses"))
        for action in call.machine.handle(retried, time.monotonic()):
            if isinstance(action, continuation.RefuseRetry):
                return error(req.id, jsonrpc.INVALID_PARAMS, action.message)
            if isinstance(action, continuation.Resumed):  # what came meanwhile first, under the retry's token
                call.host_id, call.turn = req.id, AsyncResult()
                self._by_host[jsonrpc.id_key(req.id)] = call
                resumed(call, params, self.sink)
            elif isinstance(action, continuation.Deliver):  # the upstream answered while the call was parked
                held.append(action.outcome)
            else:
                self._perform(call, action)
        self._arm(call)
        if not held:
            return self._await_turn(call, req)
        if isinstance(held[0], errors.RelayError):
            raise held[0]
        return self._host_response(call, held[0], req.id)

    # -- subscriptions/listen -------------------------------------------------------------------------------------
    def _listen(self, req: Request, params: dict[str, Any]) -> Response:
        return self._listens.listen(req, params, self.capabilities, lambda: self.closing)

    def _resource_request(self, method: str, uri: str) -> bool:
        try:
            reply = self.legacy.request(self._own(method, {"uri": uri}))
        except errors.RelayError as exc:
            log.info("%s upstream failed: %s", method, exc.message)
            return False
        if reply.is_error:
            log.info("%s upstream refused: %s", method, reply.full().get("error"))
        return not reply.is_error

    # -- from the upstream ------------------------------------------------------------------------------------------
    def _on_upstream(self, message: Upstream) -> None:
        if isinstance(message, Request):
            if message.method == "ping":
                self._answer_upstream(message.id, {"result": {}})
            elif message.method in INPUT_METHODS:
                self._on_input_request(message)
            else:
                self._refuse_upstream(message.id, jsonrpc.METHOD_NOT_FOUND, f"the host cannot serve {message.method}")
        elif isinstance(message, Notification):
            self._on_notification(message)
        else:
            log.debug("dropped an upstream response nobody waits for")

    def _on_notification(self, message: Notification) -> None:
        params = message.params if isinstance(message.params, dict) else {}
        active = [call for call in self._calls.values() if not call.parked]
        if message.method == "notifications/progress":
            route_progress(self._calls.values(), message, self.sink)
        elif message.method == "notifications/message":
            if any(mrtr.level_allows(call.log_level, params.get("level")) for call in active):
                self.sink(message)
        elif message.method == "notifications/cancelled" and jsonrpc.is_valid_id(params.get("requestId")):
            self._withdraw(params["requestId"])
        elif self._listens.wants(message):
            self._listens.fan_out(message)
        else:
            log.debug("dropped %s from upstream", message.method)

    def _withdraw(self, request_id: Id) -> None:
        """The upstream cancelled one of its own input requests: nobody is to answer it."""
        for call in {*self._calls.values(), *self._timed}:
            self._handle(call, continuation.Withdrawn(request_id))

    def _answer_upstream(self, request_id: Id, body: dict[str, Any]) -> None:
        obj = {"jsonrpc": "2.0", "id": request_id, **body}
        self._background.spawn(self.legacy.send_oneway, Response(request_id, obj))

    def _refuse_upstream(self, request_id: Id, code: int, message: str, data: Any = None) -> None:
        error = jsonrpc.error_response(request_id, code, message, data)
        self._answer_upstream(request_id, {"error": error["error"]})

    # -- one-way messages from the host ---------------------------------------------------------------------------
    def send_oneway(self, message: OneWay) -> None:
        if isinstance(message, Response):
            log.debug("dropped a host response: a modern host is never sent requests")
            return
        params = message.params if isinstance(message.params, dict) else {}
        if message.method == "notifications/cancelled":
            target = params.get("requestId")
            key = jsonrpc.id_key(target) if jsonrpc.is_valid_id(target) else None
            call = self._by_host.get(key) if key is not None else None
            if key is not None and self._listens.end(key):
                pass
            elif call is not None:
                self._cancel(call, str(params.get("reason") or "the host cancelled the request"))
            return
        if self.init_result is None:
            log.info("dropped %s: the upstream session has not started", message.method)
            return
        legacy = modern_rewrites.legacy_params(message.params)
        obj: dict[str, Any] = {"jsonrpc": "2.0", "method": message.method}
        if legacy is not None:
            obj["params"] = legacy
        self.legacy.send_oneway(Notification(message.method, legacy, obj))

    def cancel_grace(self, req: Request) -> float:
        return self.legacy.cancel_grace(req)

    def close(self) -> None:
        self.closing = True
        for call in {*self._calls.values(), *self._resumable.values()}:
            self._cancel(call, "the relay is shutting down")
        self._listens.close()
        self._background.kill(block=True, timeout=1.0)
        self.legacy.close()


def _reap(runner: Greenlet, grace: float) -> None:
    """Let a cancelled call's reply stream be read for `grace` seconds, then close it."""
    runner.join(timeout=grace)
    runner.kill(block=False)
