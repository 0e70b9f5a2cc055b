"""The parts of the relay's ModernHostBridge (relay/server_bridge.py) that hold no session: a host call in flight
upstream, the gate that lets one call that may ask for input run alone, and message builders."""

from __future__ import annotations

import itertools
import logging
import secrets
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Id, Notification, Request, Response
from mcpgate.relay import errors

log = logging.getLogger("mcpgate.relay")
_minted = itertools.count(1)
MAX_WAITING = 256  # progress notifications kept for a parked call's retry; past it the oldest are dropped


def mint(kind: str = "") -> str:
    return f"mcpgate-relay-{kind}{next(_minted)}"


@dataclass(eq=False)
class Call:
    """One host request in flight upstream (or parked: answered input_required, the upstream still on it)."""

    minted: str
    method: str
    binding: str
    host_id: Id
    capabilities: dict[str, Any]
    log_level: object
    token: object  # the progress token of the host request the call answers now (a retry's may differ)
    input_responses: dict[str, Any] | None
    turn: AsyncResult = field(default_factory=AsyncResult)  # ("input", result) or ("done", Response | RelayError)
    runner: Greenlet | None = None
    gated: bool = False
    pending: dict[str, Request] = field(default_factory=dict)  # the upstream's input requests, by key
    continuation: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    round: int = 0
    keys: int = 0
    parked: bool = False
    finished: bool = False
    held: Response | errors.RelayError | None = None  # the outcome that came while parked
    # the progress token sent upstream (the first request's), and the progress that came while parked
    sent_token: object = None
    waiting: deque[Notification] = field(default_factory=deque)
    emitter: Greenlet | None = None
    expiry: Greenlet | None = None


class Gate:
    """One candidate call at a time, alone among the calls that could ask for input."""

    def __init__(self) -> None:
        self.candidate: Call | None = None
        self.others = 0
        self._waiters: list[Event] = []

    def enter(self, call: Call, candidate: bool, timeout: float) -> bool:
        with gevent.Timeout(timeout, False):
            while True:
                if self.candidate is None and (not candidate or self.others == 0):
                    if candidate:
                        self.candidate = call
                    else:
                        self.others += 1
                    return True
                event = Event()
                self._waiters.append(event)
                event.wait()
        return False

    def leave(self, call: Call) -> None:
        if self.candidate is call:
            self.candidate = None
        else:
            self.others -= 1
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()


def response(msg_id: Id | None, obj: dict[str, Any]) -> Response:
    return Response(msg_id, {**obj, "jsonrpc": "2.0", "id": msg_id})


def error(msg_id: Id, code: int, message: str, data: Any = None) -> Response:
    return response(msg_id, jsonrpc.error_response(msg_id, code, message, data))


def notification(obj: dict[str, Any]) -> Notification:
    return Notification(obj["method"], obj.get("params"), obj)


def route_progress(calls: Iterable[Call], message: Notification, sink: Callable[[Notification], None]) -> None:
    """The upstream's progress for a call (found by the token sent upstream): to the host under its current
    request's token, or, while the call is parked (the host is being asked for input), kept for the retry."""
    token = message.params.get("progressToken") if isinstance(message.params, dict) else None
    call = next((c for c in calls if c.sent_token is not None and c.sent_token == token), None)
    if call is None:
        return
    if call.parked:
        if len(call.waiting) >= MAX_WAITING:
            call.waiting.popleft()
            log.warning("a parked %s's oldest progress dropped (more than %d kept)", call.method, MAX_WAITING)
        call.waiting.append(message)
        return
    out = progress_for_host(call, message)
    if out is not None:
        sink(out)


def resumed(call: Call, params: dict[str, Any], sink: Callable[[Notification], None]) -> None:
    """A retry carries the parked call on: its progress token is the call's from now on, and the progress that
    came meanwhile goes to the host first, under it."""
    meta = params.get("_meta")
    call.token = meta.get("progressToken") if isinstance(meta, dict) else None
    while call.waiting:
        out = progress_for_host(call, call.waiting.popleft())
        if out is not None:
            sink(out)


def progress_for_host(call: Call, message: Notification) -> Notification | None:
    """The upstream's progress for `call` under the token of the host request the call answers now (None when
    that request asked for none)."""
    if not jsonrpc.is_valid_id(call.token):
        return None
    params = {**(message.params if isinstance(message.params, dict) else {}), "progressToken": call.token}
    return Notification(message.method, params, {"jsonrpc": "2.0", "method": message.method, "params": params})
