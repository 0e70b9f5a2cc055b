"""The MRTR bridge: a legacy child's input requests as 2026-07-28 InputRequiredResults, and back.

While a legacy child works on a bridged call (tools/call, prompts/get, resources/read) it may ask the
client for input with its own requests (elicitation/create, sampling/createMessage, roots/list). The
pool lets such a child carry at most one candidate call, so the request belongs to that call for sure.
What becomes of the request is core/continuation.py's machine (one per call that asked); this module is its
I/O: it answers the client's HTTP request with an InputRequiredResult whose requestState is sealed (HMAC, bound
to the principal, the continuation and its round, short-lived), hands the client's retry (a new id,
`inputResponses`, the echoed state) to the machine and sends the child its answers, streams the original
call's result on the retry's response, and runs the machine's timer (the gather window, `input_ttl`, the grace
before left-over input requests are refused). A request the child withdraws (notifications/cancelled) is dropped:
never asked of the client, answered nor refused. A client that did not declare the capability is never asked: the
child's request is refused instead.

In a fleet (REDIS_URL) the state is sealed with a key every instance derives from the cluster key and names
the instance holding the continuation: a retry landing on another instance is forwarded to its owner (raise
Forward: the Endpoint sends it there); when the owner has left the directory the call cannot be resumed, and,
as the 2026-07-28 MRTR rules would have it (no error code: the server asks again for what it needs), the
retry is served as the original request, started afresh here, its input requests asked anew.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gevent

from mcpgate.core import jsonrpc, modern_rewrites, mrtr
from mcpgate.core.jsonrpc import Id, Request
from mcpgate.core.request_state import Opened, StateError, StateSealer
from mcpgate.serve.cluster.forwarding import Forward
from mcpgate.serve.cluster.issuer import Issuer, derived_key
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.modern.calls import resume as resume_call
from mcpgate.serve.modern.pooled_child import Call, PooledChild
from mcpgate.serve.sessions.stream import Stream

if TYPE_CHECKING:  # the fleet's modules only in a fleet's worker (REDIS_URL); the machine's where a call asks
    from mcpgate.core import continuation
    from mcpgate.core.continuation import Continuation as Machine
    from mcpgate.core.continuation import Event, RefuseChild
    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.bridge")

PURPOSE = b"mcpgate bridge requestState"  # what its key is derived for
Retry = tuple[Request, Stream]  # the retry that resumes a call, and its reply's stream


@dataclass(eq=False)
class Continuation:
    """A call that asked its client for input: its machine, and what performs the machine's actions."""

    id: str
    principal: str
    child: PooledChild
    call: Call
    machine: Machine[bytes]
    bridge: Bridge
    timer: gevent.Greenlet | None = None
    armed: float | None = None  # the deadline the timer is set for

    @property
    def parked(self) -> bool:
        """Its call's HTTP reply was an InputRequiredResult, and no retry has resumed it yet."""
        return self.machine.parked

    def finished(self, data: bytes) -> None:
        """The child answered the call (`data`, encoded for the client): delivered now, or held for the retry."""
        from mcpgate.core.continuation import Finished  # (imported once a call asks: see Bridge)

        self.bridge.handle(self, Finished(data))


class Bridge:
    def __init__(
        self,
        fleet: Cluster | None,
        wake: Callable[[str], None],
        input_ttl: float,
        clock: Callable[[], float],
    ) -> None:
        """`fleet`: the instances sharing the state's key (None: this one alone); `wake(principal)`: a child of the
        principal's has room again (the pool's waiters for one)."""
        self.wake, self.clock = wake, clock
        self.input_ttl = input_ttl  # each machine's Limits (made where core/continuation.py is imported)
        self.continuations: dict[str, Continuation] = {}  # those a retry may resume
        self.timed: set[Continuation] = set()  # those with a timer (a forgotten one may still hold left-overs)
        self.issuer = Issuer.of(fleet, PURPOSE)  # named in the state: where to resume it
        self.sealer = StateSealer(self.issuer.key, ttl=input_ttl)

    # -- from the child ---------------------------------------------------------------------------------
    def on_input_request(self, child: PooledChild, request: Request) -> None:
        # the machine's module is imported here, where a call first asks its client for input (or after, by what
        # such a call makes happen): a worker whose calls never ask holds none of its classes
        from mcpgate.core.continuation import Asked, Limits, no_candidate
        from mcpgate.core.continuation import Continuation as Machine

        call = child.candidate
        if call is None or call.finished:  # no call on the child whose client may be asked
            self._refuse(child, no_candidate(request))
            return
        cont = call.continuation
        if not isinstance(cont, Continuation):  # its first input request (only this bridge sets one)
            machine: Machine[bytes] = Machine(Limits(self.input_ttl), call.capabilities, call.input_responses)
            cont = Continuation(secrets.token_urlsafe(16), call.principal, child, call, machine, self)
            call.continuation = cont
            self.continuations[cont.id] = cont
        self.handle(cont, Asked(request))

    def on_input_withdrawn(self, child: PooledChild, request_id: Id) -> None:
        """The child cancelled one of its own input requests (pending, or left over by its ended call): nobody is
        to answer it, its client is not asked it, and it is not refused after the grace."""
        from mcpgate.core.continuation import Withdrawn

        for cont in [c for c in {*self.continuations.values(), *self.timed} if c.child is child]:
            self.handle(cont, Withdrawn(request_id))

    # -- the machine's actions ----------------------------------------------------------------------------
    def handle(self, cont: Continuation, event: Event[bytes], retry: Retry | None = None) -> None:
        """Feed the machine one event and perform what it answers; `retry`: the event is that retry's."""
        from mcpgate.core.continuation import (
            AnswerChild,
            AskClient,
            CancelCall,
            Deliver,
            Forget,
            RefuseChild,
            RefuseRetry,
            Resumed,
        )

        for action in cont.machine.handle(event, self.clock()):
            if isinstance(action, AnswerChild):
                cont.child.answer(action.request_id, action.result)
            elif isinstance(action, RefuseChild):
                self._refuse(cont.child, action)
            elif isinstance(action, AskClient):
                self._ask(cont, action)
            elif isinstance(action, Resumed) and retry is not None:
                resume_call(cont.call, *retry)  # what the child sent meanwhile first, then its result
            elif isinstance(action, Deliver):  # a result held while parked gets the retry's id
                data = _with_id(action.outcome, retry[0].id) if retry is not None else action.outcome
                cont.call.stream.deliver(data, done=True)
            elif isinstance(action, CancelCall):
                self._cancel(cont, action.reason)
            elif isinstance(action, Forget):
                self.continuations.pop(cont.id, None)
            elif isinstance(action, RefuseRetry) and retry is not None:
                raise Refusal(400, jsonrpc.INVALID_PARAMS, action.message, retry[0].id)
        self._arm(cont)

    def _ask(self, cont: Continuation, ask: continuation.AskClient) -> None:
        """Answer the call's current HTTP request with the input requests (the call is parked)."""
        call = cont.call
        state = self.sealer.seal(cont.principal, cont.id, ask.round, instance=self.issuer.instance)
        result = mrtr.input_required_result(ask.requests, state)
        result = modern_rewrites.stamp_result(call.method, result, ttl_ms=0, server_info=cont.child.server_info)
        call.stream.deliver(jsonrpc.encode({"jsonrpc": "2.0", "id": call.client_id, "result": result}), done=True)

    def _cancel(self, cont: Continuation, reason: str) -> None:
        """End the child's call (unless it is over already: the client went away and it was cancelled then)."""
        if cont.call.finished:
            return
        log.info("pooled child %s: abandoned a bridged %s: %s", cont.child.label, cont.call.method, reason)
        cont.child.cancel(cont.call, reason)
        self.wake(cont.principal)

    @staticmethod
    def _refuse(child: PooledChild, refusal: RefuseChild) -> None:
        child.refuse(refusal.request_id, refusal.code, refusal.message, refusal.data)

    def _arm(self, cont: Continuation) -> None:
        """The timer at the machine's deadline (none when it has none)."""
        deadline, timer = cont.machine.deadline, cont.timer
        if deadline == cont.armed and timer is not None:
            return
        if timer is not None:
            timer.kill(block=False)
        cont.armed, cont.timer = deadline, None
        if deadline is not None:
            cont.timer = gevent.spawn_later(max(0.0, deadline - self.clock()), self._tick, cont)
            self.timed.add(cont)
        else:
            self.timed.discard(cont)

    def _tick(self, cont: Continuation) -> None:
        from mcpgate.core.continuation import Cancelled, Tick

        cont.timer = None  # this greenlet ends here: _arm sets the next one
        if cont.call.finished and not cont.machine.finished:  # cancelled, not answered (nothing if ended already)
            self.handle(cont, Cancelled("the call has ended"))
        self.handle(cont, Tick())

    # -- the pool's -------------------------------------------------------------------------------------------
    def evict_oldest(self, principal: str) -> bool:
        """Abandon the principal's call that has waited longest for its client's input, freeing its child."""
        from mcpgate.core.continuation import Cancelled

        parked = [c for c in self.continuations.values() if c.principal == principal and c.machine.parked]
        if not parked:
            return False
        oldest = min(parked, key=lambda cont: cont.machine.parked_at or 0.0)
        log.warning("pooled child %s: evicting a call parked for input to make room", oldest.child.label)
        self.handle(oldest, Cancelled("evicted: every pooled child was taken"))
        self.wake(principal)
        return True

    def forget_child(self, child: PooledChild) -> None:
        for cont in [c for c in self.continuations.values() if c.child is child]:
            self.continuations.pop(cont.id, None)
            self.timed.discard(cont)
            if cont.timer is not None:
                cont.timer.kill(block=False)

    def call_ended(self, call: Call) -> None:
        """The call is over (answered or cancelled): its continuation goes."""
        if isinstance(call.continuation, Continuation):
            from mcpgate.core.continuation import Cancelled

            self.handle(call.continuation, Cancelled("the call has ended"))

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

    def resume(self, principal: str, request: Request, stream: Stream) -> Call | None:
        """Take a retry: answer the child's input requests and make the retry's stream the call's reply.

        A Refusal when the state is not one of ours, tampered, expired, used already or for another request;
        Forward when another live instance holds it; None when its instance is gone (start the call again)."""
        params = request.params if isinstance(request.params, dict) else {}
        opened = self.sealer.open(params.get("requestState"), principal)
        if not isinstance(opened, Opened):
            raise invalid_state(opened, request)
        home = self.issuer.home(opened.instance)
        if home == "forward":
            raise Forward(opened.instance)
        if home == "restart":
            log.info(
                "a bridged %s's input request was held by instance %s, gone: starting it again",
                request.method,
                opened.instance,
            )
            return None
        from mcpgate.core.continuation import ENDED, Retried

        cont = self.continuations.get(opened.continuation)
        if cont is None:
            raise Refusal(400, jsonrpc.INVALID_PARAMS, ENDED, request.id)
        call = cont.call
        same = request.method == call.method and mrtr.call_name(request.method, params) == call.name
        self.handle(cont, Retried(opened.round, params.get("inputResponses"), same), (request, stream))
        return call


def invalid_state(error: StateError, request: Request) -> Refusal:
    return Refusal(400, jsonrpc.INVALID_PARAMS, f"Invalid requestState: {error.message}", request.id)


def state_key(cluster_key: bytes) -> bytes:
    """The requestState key every instance of a fleet derives from the cluster key (its own purpose)."""
    return derived_key(cluster_key, PURPOSE)


def _with_id(data: bytes, request_id: Id) -> bytes:
    obj = jsonrpc.parse(data)
    assert isinstance(obj, jsonrpc.Response)
    return jsonrpc.encode({**obj.full(), "id": request_id})
