"""Serve's refusals: the root, the named ones, and the one table from domain exceptions to refusals.

Every refusal of the MCP endpoints is a Refusal (serve/front/http.py), the root: it carries the HTTP status,
the JSON-RPC error and the extra headers, and the app's Endpoint answers it once. The named refusals below
carry their decisions (status, code, headers) as class attributes, as relay/errors.py's RelayError does.

The code below serve (core, child) knows nothing of HTTP: it raises its own exceptions (a session limit
reached, a request id already in flight, a command that cannot be started). REFUSALS maps each of them to
its refusal, in one place, applied once at the endpoint by `answered`, around every handler the app routes a
request to: the handlers read as the path of a request that is served.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from mcpgate.child.spawn import ChildSpawnError
from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request
from mcpgate.core.routing import DuplicateRequestId
from mcpgate.core.sessions import SessionLimitReached
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal
from mcpgate.serve.vault.errors import URL_ELICITATION_REQUIRED, SlotsEmpty  # (not the vault: vault/errors.py)

log = logging.getLogger("mcpgate.http")

# What a caller learns when the command cannot be started; the reason (paths, PATH) goes to the log only.
CANNOT_START: Final = "Cannot start the MCP server; the gateway log has the details"


class NamedRefusal(Refusal):
    """A refusal whose status, code and headers are its class's: only the message (and the request's id,
    data) vary."""

    status = 500
    code = jsonrpc.INTERNAL_ERROR
    extra_headers: ClassVar[dict[str, str]] = {}

    def __init__(self, message: str, id: Any = None, data: Any = None) -> None:
        super().__init__(type(self).status, type(self).code, message, id, data, type(self).extra_headers)


class ShuttingDown(NamedRefusal):
    """The gateway drains: no new session, no new call; a client tries again (elsewhere) in a moment."""

    status = 503
    extra_headers: ClassVar[dict[str, str]] = {"Retry-After": "5"}

    def __init__(self, id: Any = None) -> None:
        super().__init__("The gateway is shutting down", id)


class MethodNotAllowed(NamedRefusal):
    status = 405
    code = jsonrpc.INVALID_REQUEST

    def __init__(self, allow: str) -> None:
        super().__init__("Method Not Allowed")
        self.headers["Allow"] = allow


class BadRequest(NamedRefusal):
    status = 400
    code = jsonrpc.INVALID_REQUEST


class SessionNotFound(NamedRefusal):
    """A session id this gateway does not hold (never made, ended, or another principal's)."""

    status = 404
    code = jsonrpc.INVALID_REQUEST


@dataclass(frozen=True, slots=True)
class Rule:
    """How one domain exception is refused: the status, the JSON-RPC code, the message (from the exception),
    extra headers; `logged` names what the log says (the caller's message may say less); `own_id` takes the
    request id from the exception (else it is the id of the request the endpoint parsed)."""

    status: int
    code: int
    message: Callable[[Exception], str]
    headers: dict[str, str] = field(default_factory=dict)
    logged: str | None = None
    own_id: Callable[[Exception], jsonrpc.Id | None] | None = None
    data: Callable[[Exception], Any] | None = None  # the error's data, from the exception


def _request_id(exc: Exception) -> jsonrpc.Id | None:
    return exc.request_id if isinstance(exc, DuplicateRequestId) else None


def _elicitations(exc: Exception) -> Any:
    from mcpgate.serve.vault import elicit  # only a server with per-user credentials raises SlotsEmpty

    return elicit.error_data(exc)


# The one table: a domain exception (or a subclass: PrincipalLimitReached is a SessionLimitReached) -> its refusal.
REFUSALS: Final[dict[type[Exception], Rule]] = {
    SessionLimitReached: Rule(
        503, jsonrpc.INTERNAL_ERROR, lambda exc: f"Service Unavailable: {exc}", {"Retry-After": "30"}
    ),
    ChildSpawnError: Rule(502, jsonrpc.INTERNAL_ERROR, lambda exc: CANNOT_START, logged="cannot start the MCP server"),
    DuplicateRequestId: Rule(400, jsonrpc.INVALID_REQUEST, lambda exc: f"Invalid Request: {exc}", own_id=_request_id),
    SlotsEmpty: Rule(200, URL_ELICITATION_REQUIRED, str, data=_elicitations),  # a user's slot (serve/vault)
}
DOMAIN: Final = tuple(REFUSALS)


def refusal(exc: Exception, request_id: jsonrpc.Id | None = None) -> Refusal:
    """The refusal the table gives `exc` (its class's rule, or its nearest mapped base's)."""
    rule = next(REFUSALS[kind] for kind in type(exc).__mro__ if kind in REFUSALS)
    if rule.logged is not None:
        log.error("%s: %s", rule.logged, exc)
    answer_id = rule.own_id(exc) if rule.own_id is not None else request_id
    data = rule.data(exc) if rule.data is not None else None
    return Refusal(rule.status, rule.code, rule.message(exc), answer_id, data, headers=rule.headers)


Handler = Callable[[Any, HttpRequest], HttpResponse]


def answered(handler: Handler) -> Handler:
    """`handler` with the table applied: a domain exception raised on the way becomes its Refusal, carrying the
    id of the request the handler parsed (its context's `message`) unless the exception names its own."""

    @functools.wraps(handler)
    def serve(gw: Any, request: HttpRequest) -> HttpResponse:
        try:
            return handler(gw, request)
        except DOMAIN as exc:
            message = context(request.environ).message
            raise refusal(exc, message.id if isinstance(message, Request) else None) from exc

    return serve
