"""A modern pooled child's `requestState`, carried to the client inside the gateway's sealed envelope.

A 2026-07-28 child answers `input_required` with a requestState of its own, meant for the retry. The child
cannot tell principals apart (it serves whatever the gateway sends it), so the gateway binds the state before
the client sees it: the envelope is a core/request_state token sealed with its own key (a fleet's instances
derive it from the cluster key), bound to the principal, to the request (the server, the method and what it
names) and short-lived (MCPGATE_INPUT_TTL), naming the instance and the child that issued the state and
carrying the state byte for byte.

On the retry the envelope is opened before any child is chosen: another principal's state, another request's,
an altered, expired or bare one is refused like a forged one (400 / -32602) and reaches no child. A valid one
gives back the child's own state, untouched, and the child that issued it: here; at the instance named in it
(Forward); or, when that child or instance is gone, none (the pool takes any child of the principal, which a
stateless server can resume from its own state).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpgate.core import jsonrpc, mrtr
from mcpgate.core.jsonrpc import Request
from mcpgate.core.request_state import Opened, StateSealer, carried, carry
from mcpgate.serve.cluster.forwarding import Forward
from mcpgate.serve.cluster.issuer import Issuer
from mcpgate.serve.front.http import Refusal

if TYPE_CHECKING:  # the fleet's modules only in a fleet's worker (REDIS_URL)
    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.pool")


@dataclass(frozen=True, slots=True)
class Carried:
    """What a retry's envelope gave back: the child's own requestState and the child that issued it ("" when it
    cannot be asked: its instance has gone)."""

    state: str
    holder: str


class ChildStates:
    """Wraps a modern child's requestState for one pool (`server`: what tells its pool from others), and opens it."""

    def __init__(self, server: str, ttl: float, max_chars: int, fleet: Cluster | None) -> None:
        self.server = server
        # its own key: neither a bridge's state nor a task id opens as one
        self.issuer = Issuer.of(fleet, b"mcpgate child requestState")
        self.sealer = StateSealer(self.issuer.key, ttl=ttl, max_chars=max_chars)

    def wrap(self, principal: str, holder: str, method: str, name: object, state: object) -> str | None:
        """The envelope the client gets for a child's `state`; None when it cannot be carried (not a string, or
        too long for a retry's body)."""
        if not isinstance(state, str):
            log.warning("pooled child %s: its requestState is not a string", holder)
            return None
        try:
            return self.sealer.seal(
                principal, carry(holder, state), 0, binding=self._binding(method, name), instance=self.issuer.instance
            )
        except ValueError as exc:
            log.warning("pooled child %s: its requestState cannot be carried: %s", holder, exc)
            return None

    def unwrap(self, principal: str, request: Request) -> Carried:
        """The child's state and holder from the envelope a retry carries: a Refusal (400 / -32602) for one this
        principal was not given for this request, Forward when another live instance issued it."""
        params = request.params if isinstance(request.params, dict) else {}
        binding = self._binding(request.method, mrtr.call_name(request.method, params))
        opened = self.sealer.open(params.get("requestState"), principal, binding=binding)
        parts = carried(opened.continuation) if isinstance(opened, Opened) else None
        if not isinstance(opened, Opened) or parts is None:
            message = opened.message if not isinstance(opened, Opened) else "requestState is not valid"
            raise Refusal(400, jsonrpc.INVALID_PARAMS, f"Invalid requestState: {message}", request.id)
        holder, state = parts
        home = self.issuer.home(opened.instance)
        if home == "forward":
            raise Forward(opened.instance)
        return Carried(state, holder if home == "here" else "")

    def _binding(self, method: str, name: object) -> str:
        return jsonrpc.encode([self.server, method, name if isinstance(name, str) else None]).decode("utf-8")
