"""The MRTR bridge: a legacy child's input requests as 2026-07-28 InputRequiredResults, and back.

While a legacy child works on a bridged call (tools/call, prompts/get, resources/read) it may ask the
client for input with its own requests (elicitation/create, sampling/createMessage, roots/list). The
pool lets such a child carry at most one candidate call, so the request belongs to that call for sure.
The bridge keeps the child's request pending and answers the client's HTTP request with an
InputRequiredResult whose requestState is sealed (HMAC, bound to the principal, the continuation and its
round, short-lived). The client's retry (a new id, `inputResponses`, the echoed state) answers the child,
and the original call's result streams on the retry's response. A continuation nobody resumes within
`input_ttl` ends the child's call (cancelled). A client that did not declare the capability is never
asked: the child's request is refused instead.

In a fleet (REDIS_URL) the state is sealed with a key every instance derives from the cluster key and names
the instance holding the continuation: a retry landing on another instance is forwarded to its owner (raise
Forward: the Endpoint sends it there); when the owner has left the directory the call cannot be resumed, and,
as the 2026-07-28 MRTR rules would have it (no error code: the server asks again for what it needs), the
retry is served as the original request, started afresh here, its input requests asked anew.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import gevent

from mcpgate.core import jsonrpc, modern, mrtr
from mcpgate.core.jsonrpc import Id, Request
from mcpgate.core.request_state import Opened, StateError, StateSealer
from mcpgate.serve.cluster import instances
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.modern.calls import resume as resume_call
from mcpgate.serve.modern.pooled_child import Call, PooledChild

if TYPE_CHECKING:
    from mcpgate.serve.modern.pool import Pool

log = logging.getLogger("mcpgate.bridge")

GATHER = 0.05  # seconds to wait for more input requests of the same round (a child may ask several at once)
MAX_PENDING = 16  # input requests one call may have pending; past it the child's next ones are refused
Home = Literal["here", "forward", "restart"]


@dataclass(eq=False)
class Continuation:
    id: str
    principal: str
    child: PooledChild
    call: Call
    pending: dict[str, Request] = field(default_factory=dict)  # by inputRequests key
    round: int = 0
    keys: int = 0
    emitter: gevent.Greenlet | None = None
    parked_at: float = 0.0
    expiry: gevent.Greenlet | None = None


class Bridge:
    def __init__(self, pool: Pool, input_ttl: float, clock: Callable[[], float]) -> None:
        self.pool, self.clock = pool, clock
        self.ttl = input_ttl
        self.continuations: dict[str, Continuation] = {}
        fleet = instances.current()
        self.instance = fleet.instance if fleet is not None else ""  # named in the state: where to resume it
        self.lookup: Callable[[str], str | None] = fleet.lookup if fleet is not None else lambda _instance: None
        self.sealer = StateSealer(state_key(fleet.key) if fleet is not None else None, ttl=input_ttl)

    # -- from the child ---------------------------------------------------------------------------------
    def on_input_request(self, child: PooledChild, request: Request) -> None:
        call = child.candidate
        needed = modern.INPUT_CAPABILITY[request.method]
        if call is None or call.finished or needed not in call.capabilities:
            # no call on the child whose client declared it (a client that declared nothing is no candidate)
            missing: dict[str, Any] = {needed: {}}
            child.refuse(
                request.id,
                modern.MISSING_CLIENT_CAPABILITY,
                f"the client did not declare the {needed} capability",
                {"requiredCapabilities": missing},
            )
            return
        cont = call.continuation
        if cont is None:
            cont = Continuation(secrets.token_urlsafe(16), call.principal, child, call)
            call.continuation = cont
            self.continuations[cont.id] = cont
        key, cont.keys = mrtr.input_key(request, needed, cont.pending, cont.keys)
        given = mrtr.legacy_answer(call.input_responses.get(key)) if call.input_responses else None
        if given is not None:  # answered ahead, on the request itself (stateless MRTR)
            child.answer(request.id, given)
            return
        if len(cont.pending) >= MAX_PENDING:
            child.refuse(request.id, jsonrpc.INTERNAL_ERROR, "too many input requests pending for one call")
            return
        cont.pending[key] = request
        if not call.parked and (cont.emitter is None or cont.emitter.dead):
            cont.emitter = gevent.spawn_later(GATHER, self._emit, cont)

    def _emit(self, cont: Continuation) -> None:
        """Answer the call's current HTTP request with the pending input requests (the call is parked)."""
        call = cont.call
        if call.finished or call.parked or not cont.pending:
            return
        cont.round += 1
        result = mrtr.input_required_result(
            cont.pending, self.sealer.seal(cont.principal, cont.id, cont.round, instance=self.instance)
        )
        result = modern.stamp_result(call.method, result, ttl_ms=0, server_info=cont.child.server_info)
        call.parked = True
        cont.parked_at = self.clock()
        call.stream.deliver(jsonrpc.encode({"jsonrpc": "2.0", "id": call.client_id, "result": result}), done=True)
        self._arm_expiry(cont)

    def _arm_expiry(self, cont: Continuation) -> None:
        if cont.expiry is not None:
            cont.expiry.kill(block=False)
        cont.expiry = gevent.spawn_later(self.ttl, self.abandon, cont, "nobody answered its input request in time")

    def abandon(self, cont: Continuation, reason: str) -> None:
        """End the child's call: refuse its pending input requests, cancel the call, forget the state."""
        self.continuations.pop(cont.id, None)
        for request in cont.pending.values():
            cont.child.refuse(request.id, jsonrpc.REQUEST_CANCELLED, f"request cancelled: {reason}")
        cont.pending.clear()
        if cont.expiry is not None:
            cont.expiry.kill(block=False)
        log.info("pooled child %s: abandoned a bridged %s: %s", cont.child.label, cont.call.method, reason)
        cont.child.cancel(cont.call, reason)
        self.pool.group(cont.principal).wake()

    def evict_oldest(self, principal: str) -> bool:
        """Abandon the principal's call that has waited longest for its client's input, freeing its child."""
        parked = [c for c in self.continuations.values() if c.principal == principal and c.call.parked]
        if not parked:
            return False
        oldest = min(parked, key=lambda cont: cont.parked_at)
        log.warning("pooled child %s: evicting a call parked for input to make room", oldest.child.label)
        self.abandon(oldest, "evicted: every pooled child was taken")
        return True

    def forget_child(self, child: PooledChild) -> None:
        for cont in [c for c in self.continuations.values() if c.child is child]:
            self.continuations.pop(cont.id, None)
            if cont.expiry is not None:
                cont.expiry.kill(block=False)

    def call_ended(self, call: Call) -> None:
        """The call is over (answered or cancelled): its continuation goes."""
        cont = call.continuation
        if cont is None:
            return
        self.continuations.pop(cont.id, None)
        if cont.expiry is not None:
            cont.expiry.kill(block=False)

    # -- from the client's retry ----------------------------------------------------------------------------
    def issued(self, state: object, principal: str) -> bool:
        """Whether `state` is a requestState this bridge's key sealed (here or, in a fleet, on another instance)."""
        opened = self.sealer.open(state, principal)
        return not isinstance(opened, StateError) or opened.reason not in ("malformed", "tampered")

    def refusal(self, principal: str, request: Request) -> Refusal:
        """Why the state a request carries is refused (for a state this bridge did not seal)."""
        params = request.params if isinstance(request.params, dict) else {}
        opened = self.sealer.open(params.get("requestState"), principal)
        return invalid_state(opened if isinstance(opened, StateError) else StateError("foreign", "not here"), request)

    def resume(self, principal: str, request: Request, stream: Any) -> Call | None:
        """Take a retry: answer the child's input requests and make the retry's stream the call's reply.

        A Refusal when the state is not one of ours, tampered, expired, used already or for another request;
        Forward when another live instance holds it; None when its instance is gone (start the call again)."""
        params = request.params if isinstance(request.params, dict) else {}
        opened = self.sealer.open(params.get("requestState"), principal)
        if not isinstance(opened, Opened):
            raise invalid_state(opened, request)
        home = where(opened.instance, self.instance, self.lookup)
        if home == "forward":
            raise instances.Forward(opened.instance)
        if home == "restart":
            log.info(
                "a bridged %s's input request was held by instance %s, gone: starting it again",
                request.method,
                opened.instance,
            )
            return None
        cont = self.continuations.get(opened.continuation)
        if cont is None or cont.round != opened.round or not cont.call.parked:
            raise Refusal(
                400,
                jsonrpc.INVALID_PARAMS,
                "Invalid requestState: this input request was answered or has ended",
                request.id,
            )
        call = cont.call
        if request.method != call.method or mrtr.call_name(request.method, params) != call.name:
            raise Refusal(
                400, jsonrpc.INVALID_PARAMS, "Invalid requestState: it belongs to another request", request.id
            )
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise Refusal(400, jsonrpc.INVALID_PARAMS, "Invalid params: inputResponses must be an object", request.id)
        for key in list(cont.pending):
            if responses and key in responses:
                answer = mrtr.legacy_answer(responses[key])
                child_request = cont.pending.pop(key)
                if answer is not None:
                    cont.child.answer(child_request.id, answer)
                else:
                    cont.child.refuse(child_request.id, jsonrpc.INVALID_PARAMS, "the client's answer is not an object")
        if cont.expiry is not None:
            cont.expiry.kill(block=False)
        resume_call(call, request, stream)  # what the child sent meanwhile first, then its result
        call.input_responses = None  # answers given once are not reused for a later ask
        if call.held is not None:  # the child answered while the call was parked
            held, call.held = call.held, None
            stream.deliver(_with_id(held, request.id), done=True)
            self.call_ended(call)
        elif cont.pending:  # still unanswered (or asked meanwhile): ask again, at once
            self._emit(cont)
        return call


def invalid_state(error: StateError, request: Request) -> Refusal:
    return Refusal(400, jsonrpc.INVALID_PARAMS, f"Invalid requestState: {error.message}", request.id)


def where(issuer: str, here: str, lookup: Callable[[str], str | None]) -> Home:
    """Where a retry's continuation is: on this instance, on another live one (forward the retry), or on one
    gone from the directory (its pending input request died with it: start the call again)."""
    if issuer == here:
        return "here"
    return "forward" if lookup(issuer) is not None else "restart"


def state_key(cluster_key: bytes) -> bytes:
    """The requestState key every instance of a fleet derives from the cluster key (its own purpose)."""
    return hmac.new(cluster_key, b"mcpgate bridge requestState", hashlib.sha256).digest()


def _with_id(data: bytes, request_id: Id) -> bytes:
    obj = jsonrpc.parse(data)
    assert isinstance(obj, jsonrpc.Response)
    return jsonrpc.encode({**obj.full(), "id": request_id})
