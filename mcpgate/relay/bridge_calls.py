"""The parts of the relay's ModernHostBridge (relay/server_bridge.py) that hold no session: a host call in flight
upstream (its MRTR continuation is a core/continuation.py machine; its timer is set here), the gate that lets one
call that may ask for input run alone, and message builders."""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet
from gevent.pool import Group

from mcpgate.core import jsonrpc
from mcpgate.core.continuation import Continuation
from mcpgate.core.jsonrpc import Id, Notification, Response
from mcpgate.relay import errors

log = logging.getLogger("mcpgate.relay")
_minted = itertools.count(1)
MAX_WAITING = 256  # progress notifications kept for a parked call's retry; past it the oldest are dropped
Outcome = Response | errors.RelayError  # what the upstream's answer to a call came to


def mint(kind: str = "") -> str:
    return f"mcpgate-relay-{kind}{next(_minted)}"


@dataclass(eq=False)
class Call:
    """One host request in flight upstream (or parked: answered input_required, the upstream still on it)."""

    minted: str
    method: str
    binding: str
    host_id: Id
    machine: Continuation[Outcome]  # its MRTR continuation: the upstream's input requests, rounds, the held outcome
    log_level: object
    token: object  # the progress token of the host request the call answers now (a retry's may differ)
    turn: AsyncResult = field(default_factory=AsyncResult)  # ("input", result) or ("done", Outcome)
    runner: Greenlet | None = None
    gated: bool = False
    continuation: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    finished: bool = False  # over upstream (answered, failed or cancelled): its slot is free
    # the progress token sent upstream (the first request's), and the progress that came while parked
    sent_token: object = None
    waiting: deque[Notification] = field(default_factory=deque)
    timer: Greenlet | None = None  # at the machine's deadline
    armed: float | None = None  # that deadline

    @property
    def parked(self) -> bool:
        """Its host request was answered input_required; the upstream may still work on it."""
        return self.machine.parked


def arm(call: Call, due: Callable[[Call], None], group: Group) -> bool:
    """Set the call's timer (in `group`) at its machine's deadline, to run `due`: kept when set for it already,
    none when the machine needs none. Whether a timer is set."""
    deadline, timer = call.machine.deadline, call.timer
    if deadline == call.armed and timer is not None:
        return True
    if timer is not None:
        timer.kill(block=False)
    call.armed, call.timer = deadline, None
    if deadline is None:
        return False
    call.timer = gevent.spawn_later(max(0.0, deadline - time.monotonic()), due, call)
    group.add(call.timer)
    return True


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
