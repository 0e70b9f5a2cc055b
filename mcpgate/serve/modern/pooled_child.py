"""One pooled child: a stdio MCP server shared by the 2026-07-28 requests of one principal.

Its era is probed once (era_probe.py: server/discover; a legacy child then gets the gateway's own initialize).
Every client request is rewritten to a gateway-minted id (and progress token) on the way in and mapped back on the
way out, so clients that use the same ids never collide. What the child sends is routed here: responses and
progress to the call they belong to, input requests (a legacy child's elicitation, sampling, roots) and their
withdrawals (notifications/cancelled) to the MRTR bridge, list-changed and resource updates to the listen hub.
A call's answer is rewritten for its client by answers.py (the client's id, the stamp, a spliced result).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from mcpgate import __version__
from mcpgate.child.limits import ended_message
from mcpgate.core import jsonrpc, modern_rewrites, mrtr, versions, wire
from mcpgate.core.capabilities import INPUT_METHODS
from mcpgate.core.digest import sha256_hex
from mcpgate.core.jsonrpc import Id, Notification, Request, Response
from mcpgate.fast_json import msgspec  # loaded its way: fast_json says how
from mcpgate.observe import audit
from mcpgate.serve.modern import calls, era_probe
from mcpgate.serve.modern.answers import Answers
from mcpgate.serve.modern.calls import (
    Call as Call,  # re-exported: the pool, the bridge and the endpoint name it from here
)
from mcpgate.serve.modern.calls import mint
from mcpgate.serve.modern.era_probe import Era as Era  # re-exported: the pool and its endpoint name it from here
from mcpgate.serve.servers import watchdog
from mcpgate.serve.sessions.spec import ChildSpec, weakly
from mcpgate.serve.sessions.stream import Pump

if TYPE_CHECKING:  # views (MCPGATE_CONFIG's) are imported where they are configured
    from mcpgate.core.views import View

log = logging.getLogger("mcpgate.pool")
# A child request's params encoded by msgspec first (core/modern_rewrites.child_request says when json's are taken)
_FAST_PARAMS = msgspec.json.Encoder().encode


class PooledChild:
    """A child process of the pool, its era, and the calls it carries."""

    def __init__(
        self,
        spec: ChildSpec,
        *,
        label: str,
        probe_timeout: float,
        start_timeout: float,
        init_timeout: float,
        ttl_ms: int,
        on_exit: Callable[[PooledChild, str], None],
        on_input_request: Callable[[PooledChild, Request], None],
        on_input_withdrawn: Callable[[PooledChild, Id], None],
        on_listen_message: Callable[[PooledChild, Notification], bool],
        on_input_required: Callable[[PooledChild, Call, dict[str, Any]], dict[str, Any] | None],
        clock: Callable[[], float] = time.monotonic,
        principal: str | None = None,  # whose calls it serves: a child with user secrets gets that principal's
        view: View | None = None,  # whose view it serves (a group's HubChild: serve/hub/views.py)
    ) -> None:
        self.label = label
        viewed = {"view": view} if view is not None else {}
        self.child = spec.process(
            on_message=self._on_message,
            on_exit=self._on_exit,
            label=label,
            principal=principal,
            on_revoke=self.revoke,
            **viewed,
        )
        # its stdout read by a call's reply while it waits (ChildProcess.pump; None for a child without one), bound once
        self.pump: Pump | None = getattr(self.child, "pump", None)
        self.probe_timeout, self.init_timeout = probe_timeout, init_timeout
        self.start_timeout = start_timeout
        self.key = verdict_key(spec)  # its era is remembered per server command
        self._on_exit_cb, self._on_input_request = on_exit, on_input_request
        self._on_input_withdrawn = on_input_withdrawn
        self._on_listen_message = on_listen_message
        self.clock = clock
        self.ready = gevent.event.Event()
        self.era: Era | None = None
        self.modern = False  # the era is MODERN (the listen hub's ChildLink reads it)
        self.problem: str | None = None  # why the child cannot serve (set with ready)
        self.redo = False  # its era is in doubt: it is replaced (not a crash) by one started to be asked again
        self.discover: dict[str, Any] = {}  # the DiscoverResult the gateway serves for it
        self.capabilities: dict[str, Any] = {}  # the child's server capabilities
        self.server_info: dict[str, Any] | None = None
        self.calls: dict[str, Call] = {}  # by minted id
        self._tokens: dict[str, Call] = {}  # by minted progress token
        self._own: dict[str, Callable[[dict[str, Any]], None]] = {}  # the gateway's own requests, by minted id
        self.candidate: Call | None = None  # the one bridged call whose client may be asked for input
        self.bridged_calls = 0  # bridged calls in flight (a candidate needs the child to itself)
        self.last_used = clock()
        self.ended: str | None = None
        self.stopping = False  # stopped on purpose (idle, shutdown): its exit is not a crash
        self.on_release: Callable[[], None] = lambda: None  # a call's slot is free again, and someone waits
        # who waits for a slot (the pool's: its group's requests, the whole pool's), read as a call ends: on_release
        # runs only when one of the two lists holds a waiter (the usual release: no Python call)
        self.waiters: tuple[list[Any], list[Any]] = ([], [])
        self._on_input_required = on_input_required
        # the child's own Answers reach it weakly: a strong way back made every pooled child a reference cycle
        self.answers = Answers(label, ttl_ms, weakly(self._input_required))

    def _input_required(self, call: Call, result: dict[str, Any]) -> dict[str, Any] | None:
        return self._on_input_required(self, call, result)

    # -- start and probe ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process (ChildSpawnError) and probe its era on a greenlet; `ready` is set after."""
        self.child.start()
        watchdog.register(self.child, self.oldest_call)
        gevent.spawn(self._probe)

    def _probe(self) -> None:
        try:
            era_probe.run(self, self.key)
        except Exception as exc:  # the probe must always end in `ready`
            log.exception("pooled child %s: probe failed", self.label)
            self.problem = f"probe failed: {exc}"
        finally:
            self.last_used = self.clock()  # idle from now on, not from its start
            self.ready.set()

    @staticmethod
    def request_meta() -> dict[str, Any]:
        return {
            wire.META_PROTOCOL_VERSION: versions.V2026_07_28,
            wire.META_CLIENT_CAPABILITIES: {},
            wire.META_CLIENT_INFO: {"name": "mcpgate", "version": __version__},
        }

    def take_modern(self, message: dict[str, Any]) -> bool:
        """Whether `message` (an answer to server/discover) makes the child modern; if so, what it serves is kept."""
        result = message.get("result")
        if modern_rewrites.is_discover_result(result):
            assert isinstance(result, dict)
            self.era, self.modern = Era.MODERN, True
            self.discover = dict(result)
            self.capabilities = dict(result.get("capabilities") or {})
            meta = result.get("_meta")
            info = meta.get(wire.META_SERVER_INFO) if isinstance(meta, dict) else None
            self.server_info = info if isinstance(info, dict) else None
            log.info("pooled child %s speaks 2026-07-28", self.label)
            return True
        if modern_rewrites.recognised_modern_error(message.get("error")):
            self.era, self.modern = Era.MODERN, True
            self.problem = f"the MCP server does not support {versions.V2026_07_28}: {message['error'].get('message')}"
            return True
        return False

    @staticmethod
    def initialize_params() -> dict[str, Any]:
        return {
            "protocolVersion": versions.LATEST_HANDSHAKE,
            "capabilities": dict(mrtr.BRIDGED_CAPABILITIES),
            "clientInfo": {"name": "mcpgate", "version": __version__},
        }

    def take_legacy(self, result: dict[str, Any]) -> None:
        """The child answered initialize with `result`: it is legacy, and told it is initialized."""
        self.era = Era.LEGACY
        self.capabilities = dict(result.get("capabilities") or {})
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else None
        self.discover = modern_rewrites.discover_from_initialize(result, versions.MODERN)
        self.child.send(jsonrpc.encode({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        if "logging" in self.capabilities:  # everything; each call's logLevel filters what its client sees
            self.request("logging/setLevel", {"level": "debug"}, lambda _answer: None)
        log.info("pooled child %s speaks %s (bridged)", self.label, versions.initialize_version(result))

    def ask(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """A gateway-owned request and its answer within `timeout` (None: no answer)."""
        answered: gevent.event.AsyncResult = gevent.event.AsyncResult()
        minted = self.request(method, params, answered.set)
        if minted is None:
            return None
        try:
            response: dict[str, Any] = answered.get(timeout=timeout)
            return response
        except gevent.Timeout:
            self._own.pop(minted, None)
            return None

    def forget_requests(self, minted: list[str]) -> None:
        """Drop what may still come for these gateway-owned requests."""
        for key in minted:
            self._own.pop(key, None)

    # -- the link the pool, the bridge and the listen hub use ----------------------------------------
    @property
    def load(self) -> int:
        return len(self.calls)

    def oldest_call(self) -> float | None:
        """When the oldest call the child works on was made (a parked call waits for its client, not the child)."""
        return min((call.sent for call in self.calls.values() if not call.parked), default=None)

    def request(self, method: str, params: dict[str, Any], on_response: Callable[[dict[str, Any]], None]) -> str | None:
        """Send a gateway-owned request; `on_response` gets its answer. None when the child is gone."""
        minted = mint()
        self._own[minted] = on_response
        if not self.child.send(jsonrpc.encode({"jsonrpc": "2.0", "id": minted, "method": method, "params": params})):
            self._own.pop(minted, None)
            return None
        return minted

    def notify(self, method: str, params: dict[str, Any]) -> bool:
        return self.child.send(jsonrpc.encode({"jsonrpc": "2.0", "method": method, "params": params}))

    def answer(self, request_id: Id, result: Any) -> bool:
        """Answer one of the child's own requests."""
        return self.child.send(jsonrpc.encode({"jsonrpc": "2.0", "id": request_id, "result": result}))

    def refuse(self, request_id: Id, code: int, message: str, data: Any = None) -> bool:
        return self.child.send(jsonrpc.encode(jsonrpc.error_response(request_id, code, message, data)))

    # -- calls ------------------------------------------------------------------------------------------
    def start_call(self, request: Request, call: Call) -> bool:
        """Forward a client request under its minted id; False when the child does not take it."""
        params = request.params if isinstance(request.params, dict) else None
        if params is not None and not self.modern:
            params = modern_rewrites.legacy_params(params)  # a new dict when it changes anything
        if params is not None and call.client_token is not None:  # then params._meta is an object
            call.minted_token = mint("p")
            params = {**params, "_meta": {**(params.get("_meta") or {}), "progressToken": call.minted_token}}
            self._tokens[call.minted_token] = call
        self.calls[call.minted] = call
        call.child = self
        if call.bridged:
            self.bridged_calls += 1
        # (its last use is the call's release: a child with a call in flight is neither idle nor evicted)
        if not self.child.send(modern_rewrites.child_request(call.minted, request.method, params, _FAST_PARAMS)):
            self.release(call)
            return False
        return True

    def cancel(self, call: Call, reason: str) -> None:
        """The client is gone (its stream closed): tell the child, and drop what it still sends for the call."""
        if call.finished:
            return
        self.release(call)
        if call.audit is not None:
            audit.done(call.audit, jsonrpc.REQUEST_CANCELLED, 0, audit.CANCELLED)
        self.notify("notifications/cancelled", {"requestId": call.minted, "reason": reason})

    def release(self, call: Call) -> None:
        """The call is over for the child: its id and token map to nothing any more."""
        if call.finished:
            return
        call.finished = True
        self.calls.pop(call.minted, None)
        if call.minted_token is not None:
            self._tokens.pop(call.minted_token, None)
        if call.bridged:
            self.bridged_calls -= 1
        if self.candidate is call:
            self.candidate = None
        self.last_used = self.clock()
        group, pool = self.waiters
        if group or pool:
            self.on_release()

    # -- from the child ----------------------------------------------------------------------------------
    def _on_message(self, message: Request | Notification | Response) -> None:
        if type(message) is Response:  # the usual: a call's answer (a type check and one lookup; no call)
            key = message.id
            call = self.calls.get(key) if type(key) is str else None
            if call is not None:  # (minted ids are unique: one names a call or a request of the gateway's own)
                self._answered(call, self.answers.of(call, message, self.server_info))
            else:
                self._on_response(message)
        elif isinstance(message, Response):
            self._on_response(message)
        elif isinstance(message, Request):
            self._on_request(message)
        else:
            self._on_notification(message)

    def _on_response(self, message: Response) -> None:
        key = message.id if isinstance(message.id, str) else None
        if key is None:
            log.debug("pooled child %s: dropped a response with id %r", self.label, message.id)
            return
        own = self._own.pop(key, None)
        if own is not None:
            own(message.full())
            return
        call = self.calls.get(key)
        if call is None:
            log.debug("pooled child %s: dropped a late or unknown response", self.label)
            return
        self._answered(call, self.answers.of(call, message, self.server_info))

    def _answered(self, call: Call, data: bytes) -> None:
        self.release(call)
        if call.audit is not None:
            audit.done(call.audit, call.error_code, len(data), answer=data)  # isError: a tool error
        if call.continuation is not None:  # it asked for input: delivered now, or held for the retry while parked
            call.continuation.finished(data)
            return
        call.stream.deliver(data, True)  # (done: its last message)

    def _on_request(self, message: Request) -> None:
        if message.method == "ping":
            self.answer(message.id, {})
        elif message.method in INPUT_METHODS and not self.modern:
            self._on_input_request(self, message)
        else:
            self.refuse(message.id, jsonrpc.METHOD_NOT_FOUND, f"the gateway does not serve {message.method!r}")

    def _on_notification(self, message: Notification) -> None:
        if message.method == "notifications/progress":
            self._on_progress(message)
        elif message.method == "notifications/message":
            self._on_log(message)
        elif message.method == "notifications/cancelled" and not self.modern:
            self._on_withdrawn(message)
        elif not self._on_listen_message(self, message):
            log.debug("pooled child %s: dropped %s", self.label, message.method)

    def _on_withdrawn(self, message: Notification) -> None:
        """A legacy child cancelled one of its own input requests (its id is the child's): to the bridge."""
        params = message.params if isinstance(message.params, dict) else {}
        request_id = params.get("requestId")
        if jsonrpc.is_valid_id(request_id):
            self._on_input_withdrawn(self, request_id)
        else:
            log.debug("pooled child %s: dropped a notifications/cancelled naming no request", self.label)

    def _on_progress(self, message: Notification) -> None:
        params = message.params if isinstance(message.params, dict) else {}
        token = params.get("progressToken")
        call = self._tokens.get(token) if isinstance(token, str) else None
        if call is not None:
            self._for_call(call, message)

    def _on_log(self, message: Notification) -> None:
        """stdio ties a log message to no request: it goes to the one call in flight, when there is one
        and its client asked for that level (a request without logLevel gets none)."""
        if len(self.calls) != 1:
            return
        call = next(iter(self.calls.values()))
        params = message.params if isinstance(message.params, dict) else {}
        if mrtr.level_allows(call.log_level, params.get("level")):
            self._for_call(call, message)

    def _for_call(self, call: Call, message: Notification) -> None:
        if not calls.to_client(call, message):
            log.warning("pooled child %s: a parked call's oldest message dropped (too many kept)", self.label)

    def _on_exit(self, reason: str) -> None:
        self.ended = reason
        self.ready.set()
        for own in list(self._own.values()):
            own(jsonrpc.error_response(None, jsonrpc.CONNECTION_CLOSED, reason))
        self._own.clear()
        calls, message = list(self.calls.values()), ended_message(reason, "MCP server ended: ")
        for call in calls:
            self.release(call)
            if call.audit is not None:
                audit.done(call.audit, jsonrpc.CONNECTION_CLOSED, 0, audit.ENDED)
            error = jsonrpc.error_response(call.client_id, jsonrpc.CONNECTION_CLOSED, message)
            if not call.parked:
                call.stream.deliver(jsonrpc.encode(error), done=True, force=True)
        self._on_exit_cb(self, reason)

    def close(self, reason: str) -> None:
        self.stopping = True
        self.child.close(reason)

    def revoke(self, reason: str) -> None:
        """A user secret it holds changed (serve/vault): its calls fail now, naming why, before the child stops
        (whatever it answers them on its way out is dropped), and it takes no new call."""
        self.stopping = True
        message = f"MCP server stopped: {reason}"
        for call in list(self.calls.values()):
            self.release(call)
            if not call.parked:
                error = jsonrpc.error_response(call.client_id, jsonrpc.CONNECTION_CLOSED, message)
                call.stream.deliver(jsonrpc.encode(error), done=True, force=True)
        self.child.close(reason)


def verdict_key(spec: ChildSpec) -> era_probe.Key:
    """What a remembered era belongs to: the server's command, where it runs and its environment."""
    env = sorted(spec.env.items()) if spec.env is not None else None
    return (sha256_hex(repr((spec.argv, spec.cwd, env, spec.user)).encode()),)  # no copy of its env (core/digest.py)
