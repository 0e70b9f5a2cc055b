"""The MRTR continuation of one bridged call, as a machine: events in, actions out, no I/O, no clock.

A bridge (serve's for a legacy child, the relay's for a legacy upstream) carries a 2026-07-28 client's call
(tools/call, prompts/get, resources/read) to a legacy server that may ask that client for input with requests of
its own (elicitation/create, sampling/createMessage, roots/list: "the child's input requests"). This machine
decides what becomes of them; the bridge performs what it says (sends, seals the requestState, runs the timer)
and tells it what happened. `handle(event, now)` returns the actions in the order they are to be performed;
`now` is the caller's clock (seconds, any origin), never read here.

Phases: RUNNING (the client's current request waits for the call), PARKED (that request was answered with an
InputRequiredResult; the child may go on working; a retry carries the call on), ENDED.

Events and what they do:
- Asked(request): the child asks. Refused when the call has ended or finished (as if there were no candidate
  call) or when the client did not declare the capability it needs (core.capabilities.missing_for_input); answered at
  once when the call carried an answer under its key (stateless MRTR; each answer used once); refused when
  `max_pending` are pending already; else pending under its key (core.mrtr.input_key). A RUNNING call's first
  pending request opens the gather window: `gather` seconds later the client is asked for every pending one.
- Tick: time passed. The gather window over, with requests pending: AskClient (the next round), PARKED. A PARKED
  call nobody retried within `input_ttl` of its ask: CancelCall (unless the child had answered it), Forget.
- Retried(round, responses, same_request): a client's retry whose requestState the bridge opened (the round it
  names; `same_request`: it names the call's request, when the state does not bind that itself). Refused unless
  the call is PARKED at that round and the retry is the same request and `responses` is an object or absent;
  else Resumed (the retry is the client's current request from now on: what the child sends meanwhile is for
  it), each pending request it answers answered (AnswerChild, or RefuseChild for an answer that is not an
  object), then the outcome the child gave meanwhile (Deliver, Forget), or a new round at once for requests still
  pending (AskClient), or nothing (the call runs on).
  Answers carried ahead are forgotten at the first retry.
- Finished(outcome): the child answered the call. RUNNING: Deliver, Forget; PARKED: held for the retry.
- Cancelled(reason): the bridge ends the call (the client cancelled or went away, an eviction, a shutdown):
  CancelCall unless the child had answered, Forget.
- Withdrawn(request_id): the child cancelled one of its own input requests: nobody is to answer it.

When the call finishes or ends, requests still pending are "left over": the child was told of the end first and
may withdraw them; after `withdraw_grace` seconds (a Tick) each one left is refused (RefuseChild).
`deadline` is when the bridge must next send a Tick (None: no timer needed).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Union

from mcpgate.core import jsonrpc, modern, mrtr
from mcpgate.core.capabilities import INPUT_CAPABILITY, missing_for_input
from mcpgate.core.jsonrpc import Id, Request

GATHER = 0.05  # seconds to wait for more input requests of the same round (a child may ask several at once)
MAX_PENDING = 16  # input requests one call may have pending; past it the child's next ones are refused
WITHDRAW_GRACE = 1.0  # seconds an ended call's input requests are left for the child to withdraw

EXPIRED = "nobody answered its input request in time"
ENDED = "Invalid requestState: this input request was answered or has ended"
OTHER_REQUEST = "Invalid requestState: it belongs to another request"
BAD_RESPONSES = "Invalid params: inputResponses must be an object"
BAD_ANSWER = "the client's answer is not an object"
TOO_MANY = "too many input requests pending for one call"
LEFT_OVER = "the call it belonged to has ended"

T = TypeVar("T")


class Phase(enum.Enum):
    RUNNING = "running"
    PARKED = "parked"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class Limits:
    """The machine's bounds: `input_ttl` is the bridge's setting (serve's MCPGATE_INPUT_TTL, the relay's)."""

    input_ttl: float
    gather: float = GATHER
    max_pending: int = MAX_PENDING
    withdraw_grace: float = WITHDRAW_GRACE


# -- events ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asked:
    request: Request


@dataclass(frozen=True, slots=True)
class Withdrawn:
    request_id: Id


@dataclass(frozen=True, slots=True)
class Retried:
    round: int
    responses: object
    same_request: bool = True


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    outcome: T


@dataclass(frozen=True, slots=True)
class Cancelled:
    reason: str


@dataclass(frozen=True, slots=True)
class Tick:
    pass


Event = Union[Asked, Withdrawn, Retried, Finished[T], Cancelled, Tick]  # noqa: UP007  # a generic alias (Python 3.10)

# -- actions -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnswerChild:
    request_id: Id
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RefuseChild:
    request_id: Id
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class AskClient:
    """Answer the client's current request with an InputRequiredResult for `requests` (its state sealed for
    `round`: core.mrtr.input_required_result)."""

    round: int
    requests: Mapping[str, Request]


@dataclass(frozen=True, slots=True)
class Resumed:
    """The retry carries the call on: its request is the one the client waits on from now."""


@dataclass(frozen=True, slots=True)
class Deliver(Generic[T]):
    """Answer the client's current request with the call's outcome."""

    outcome: T


@dataclass(frozen=True, slots=True)
class CancelCall:
    """Tell the child the call is cancelled (it was not answered)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Forget:
    """The continuation is over: no retry resumes it (a timer may still be due for left-over requests)."""


@dataclass(frozen=True, slots=True)
class RefuseRetry:
    """Refuse the retry (invalid params); the continuation is unchanged."""

    message: str


Action = Union[AnswerChild, RefuseChild, AskClient, Resumed, Deliver[T], CancelCall, Forget, RefuseRetry]  # noqa: UP007


def no_candidate(request: Request) -> RefuseChild:
    """The refusal of an input request that belongs to no call whose client may be asked."""
    needed = INPUT_CAPABILITY.get(request.method, request.method)
    return undeclared(request, {needed: {}})


def undeclared(request: Request, missing: Mapping[str, Any]) -> RefuseChild:
    return RefuseChild(
        request.id,
        modern.MISSING_CLIENT_CAPABILITY,
        f"the client did not declare the {', '.join(missing)} capability for this request",
        {"requiredCapabilities": dict(missing)},
    )


@dataclass(eq=False)
class Continuation(Generic[T]):
    """One call's continuation. `capabilities`: what its client declared; `answers`: the inputResponses its
    request carried ahead (None: none)."""

    limits: Limits
    capabilities: Mapping[str, Any]
    answers: dict[str, Any] | None = None
    phase: Phase = Phase.RUNNING
    round: int = 0
    keys: int = 0  # the counter of minted keys
    pending: dict[str, Request] = field(default_factory=dict)  # by inputRequests key
    left_over: dict[str, Request] = field(default_factory=dict)  # pending when the call finished or ended
    parked_at: float | None = None
    finished: bool = False  # the child answered the call
    held: tuple[T] | None = None  # that answer (boxed: it may be any value), while the call is parked
    _gather_at: float | None = None
    _expires_at: float | None = None
    _refuse_at: float | None = None

    @property
    def parked(self) -> bool:
        return self.phase is Phase.PARKED

    @property
    def deadline(self) -> float | None:
        due = [at for at in (self._gather_at, self._expires_at, self._refuse_at) if at is not None]
        return min(due) if due else None

    def handle(self, event: Event[T], now: float) -> list[Action[T]]:
        if isinstance(event, Asked):
            return self._asked(event.request, now)
        if isinstance(event, Tick):
            return self._tick(now)
        if isinstance(event, Retried):
            return self._retried(event, now)
        if isinstance(event, Finished):
            return self._finished(event.outcome, now)
        if isinstance(event, Cancelled):
            return self._cancelled(event.reason, now)
        self._withdrawn(event.request_id)
        return []

    # -- the events ------------------------------------------------------------------------------------------------
    def _asked(self, request: Request, now: float) -> list[Action[T]]:
        if self.phase is Phase.ENDED or self.finished:
            return [no_candidate(request)]
        missing = missing_for_input(request.method, request.params, self.capabilities)
        if missing:
            return [undeclared(request, missing)]
        needed = INPUT_CAPABILITY[request.method]
        key, self.keys = mrtr.input_key(request, needed, self.pending, self.keys)
        given = mrtr.legacy_answer(self.answers.pop(key, None)) if self.answers else None
        if given is not None:
            return [AnswerChild(request.id, given)]
        if len(self.pending) >= self.limits.max_pending:
            return [RefuseChild(request.id, jsonrpc.INTERNAL_ERROR, TOO_MANY)]
        self.pending[key] = request
        if self.phase is Phase.RUNNING and self._gather_at is None:
            self._gather_at = now + self.limits.gather
        return []

    def _tick(self, now: float) -> list[Action[T]]:
        actions: list[Action[T]] = []
        if self._refuse_at is not None and now >= self._refuse_at:
            actions += [RefuseChild(r.id, jsonrpc.REQUEST_CANCELLED, LEFT_OVER) for r in self.left_over.values()]
            self.left_over.clear()
            self._refuse_at = None
        if self._gather_at is not None and now >= self._gather_at:
            self._gather_at = None
            if self.pending:
                actions.append(self._ask(now))
        if self._expires_at is not None and now >= self._expires_at:
            actions += self._cancelled(EXPIRED, now)
        return actions

    def _retried(self, retry: Retried, now: float) -> list[Action[T]]:
        if self.phase is not Phase.PARKED or retry.round != self.round:
            return [RefuseRetry(ENDED)]
        if not retry.same_request:
            return [RefuseRetry(OTHER_REQUEST)]
        if retry.responses is not None and not isinstance(retry.responses, dict):
            return [RefuseRetry(BAD_RESPONSES)]
        responses: dict[str, Any] = retry.responses or {}
        actions: list[Action[T]] = [Resumed()]
        for key in [key for key in self.pending if key in responses]:
            request, answer = self.pending.pop(key), mrtr.legacy_answer(responses[key])
            if answer is not None:
                actions.append(AnswerChild(request.id, answer))
            else:
                actions.append(RefuseChild(request.id, jsonrpc.INVALID_PARAMS, BAD_ANSWER))
        self.phase, self.parked_at, self._expires_at, self.answers = Phase.RUNNING, None, None, None
        if self.held is not None:
            (outcome,), self.held, self.phase = self.held, None, Phase.ENDED
            actions += [Deliver(outcome), Forget()]
        elif self.pending:  # still unanswered (or asked meanwhile): ask again, at once
            actions.append(self._ask(now))
        return actions

    def _finished(self, outcome: T, now: float) -> list[Action[T]]:
        if self.phase is Phase.ENDED or self.finished:
            return []
        self.finished = True
        self._leave_over(now)
        if self.phase is Phase.PARKED:
            self.held = (outcome,)
            return []
        self.phase = Phase.ENDED
        return [Deliver(outcome), Forget()]

    def _cancelled(self, reason: str, now: float) -> list[Action[T]]:
        if self.phase is Phase.ENDED:
            return []
        answered, self.phase, self.held, self._expires_at = self.finished, Phase.ENDED, None, None
        self._leave_over(now)
        return [Forget()] if answered else [CancelCall(reason), Forget()]

    def _withdrawn(self, request_id: Id) -> None:
        gone = jsonrpc.id_key(request_id)
        for table in (self.pending, self.left_over):
            for key in [key for key, request in table.items() if jsonrpc.id_key(request.id) == gone]:
                del table[key]
        if not self.left_over:
            self._refuse_at = None

    # -- steps -----------------------------------------------------------------------------------------------------
    def _ask(self, now: float) -> AskClient:
        self.round += 1
        self.phase, self.parked_at, self._gather_at = Phase.PARKED, now, None
        self._expires_at = now + self.limits.input_ttl
        return AskClient(self.round, dict(self.pending))

    def _leave_over(self, now: float) -> None:
        """Requests still pending are left for the child to withdraw, then refused."""
        self._gather_at = None
        if self.pending:
            self.left_over.update(self.pending)
            self.pending.clear()
            self._refuse_at = now + self.limits.withdraw_grace
