"""The parts of the relay's ModernHostBridge (relay/server_bridge.py) that hold no session: a host call in flight
upstream, the gate that lets one call that may ask for input run alone, and message builders."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Id, Notification, Request, Response
from mcpgate.relay import errors

_minted = itertools.count(1)


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
    token: object
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
