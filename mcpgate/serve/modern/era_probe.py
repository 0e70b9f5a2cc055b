"""A pooled child's era, found from its answers, never from its silence.

A fresh server is asked `server/discover`. A DiscoverResult (or an error only a 2026-07-28 peer sends) makes it
modern; any other answer makes it legacy, and since it has answered, `initialize` follows on the same connection
with nothing of the probe left to arrive late. No answer yet means the child is still starting: after
`probe_timeout` it is also sent a `ping` (which every era answers, legacy servers before `initialize` too), and
the wait goes on until `start_timeout` from its start. A child that answers the ping but not `server/discover`
within `probe_timeout` more is up and ignoring the requests it does not know: that is the one doubtful case, and
the child is restarted (`redo`) to be sent `initialize` alone on a fresh connection. No answer at all within
`start_timeout` is a failed start.

The verdict is remembered per server command (in the worker, bounded): the next child of a legacy server is sent
`initialize` straight away, and of a modern one waits for its DiscoverResult without the ping. A child that
contradicts the remembered verdict corrects it: a remembered-legacy child refusing `initialize` as only a
2026-07-28 server does is asked `server/discover` (it has answered, so nothing is late), a remembered-modern child
answering `server/discover` with another error is initialized; any other refusal forgets the verdict, so the next
child is probed afresh.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import gevent.event

from mcpgate.core import modern_rewrites

log = logging.getLogger("mcpgate.pool")


class Era(enum.Enum):
    MODERN = "2026-07-28"
    LEGACY = "initialize"


REMEMBERED = 256  # server commands whose verdict a worker keeps (least recently decided forgotten first)
Key = tuple[Any, ...]
Answer = dict[str, Any] | str | None
_verdicts: OrderedDict[Key, Era] = OrderedDict()


def remembered(key: Key) -> Era | None:
    return _verdicts.get(key)


def remember(key: Key, era: Era) -> None:
    _verdicts[key] = era
    _verdicts.move_to_end(key)
    while len(_verdicts) > REMEMBERED:
        _verdicts.popitem(last=False)


def forget(key: Key) -> None:
    _verdicts.pop(key, None)


class Probed(Protocol):
    """The child whose era the probe finds (modern/pooled_child.py): what it asks through it, and what it sets."""

    problem: str | None  # why it cannot serve
    redo: bool  # its era is in doubt: restarted to be asked again

    @property
    def label(self) -> str: ...
    @property
    def ended(self) -> str | None: ...
    @property
    def start_timeout(self) -> float: ...
    @property
    def probe_timeout(self) -> float: ...
    @property
    def init_timeout(self) -> float: ...

    def request(self, method: str, params: dict[str, Any], on_response: Callable[[dict[str, Any]], None]) -> str | None:
        """Send a request; `on_response` gets its answer. None when the child is gone."""

    def forget_requests(self, minted: list[str]) -> None: ...
    def ask(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any] | None: ...
    def request_meta(self) -> dict[str, Any]: ...
    def initialize_params(self) -> dict[str, Any]: ...
    def take_modern(self, message: dict[str, Any]) -> bool: ...
    def take_legacy(self, result: dict[str, Any]) -> None: ...


class Answers:
    """The answers to the probe's own requests, each kept once, and one event for "something arrived"."""

    def __init__(self, child: Probed) -> None:
        self.child = child
        self.got: dict[str, dict[str, Any]] = {}
        self.arrived = gevent.event.Event()
        self.minted: list[str] = []

    def send(self, method: str, params: dict[str, Any]) -> None:
        def keep(answer: dict[str, Any]) -> None:
            self.got[method] = answer
            self.arrived.set()

        minted = self.child.request(method, params, keep)
        if minted is None:  # the child is gone: its exit answers
            self.arrived.set()
        else:
            self.minted.append(minted)

    def close(self) -> None:
        """Whatever still comes for the probe's requests is dropped."""
        self.child.forget_requests(self.minted)

    def wait(self, method: str, until: float, *, also: str = "") -> bool:
        """Whether `method` (or `also`) has its answer, waiting until the monotonic time `until`."""
        while method not in self.got and (not also or also not in self.got):
            left = until - time.monotonic()
            if left <= 0 or self.child.ended:
                return method in self.got
            self.arrived.clear()
            self.arrived.wait(left)
        return True


def run(child: Probed, key: Key) -> None:
    """Find the child's era (child.era / child.problem / child.redo are set); never raises on an answer."""
    deadline = time.monotonic() + child.start_timeout
    verdict = remembered(key)
    if verdict is Era.LEGACY:
        _as_remembered_legacy(child, key, deadline)
        return
    answers = Answers(child)
    try:
        discovered = _discover(child, answers, verdict, deadline)
    finally:
        answers.close()
    if isinstance(discovered, str):
        _ignores_discover(child, key)
        return
    if discovered is None or child.ended:
        child.problem = _no_answer(child)
        return
    if child.take_modern(discovered):
        remember(key, Era.MODERN)
        return
    if verdict is not None:
        log.info("pooled child %s: refused server/discover, though its server spoke 2026-07-28 before", child.label)
    forget(key)
    _initialize(child, key, time.monotonic() + child.init_timeout)


def _discover(child: Probed, answers: Answers, verdict: Era | None, deadline: float) -> Answer:
    """The answer to server/discover; None when none came by `deadline`; "ignored" when the child answered ping
    but not server/discover."""
    answers.send("server/discover", {"_meta": child.request_meta()})
    first = deadline if verdict is Era.MODERN else min(deadline, time.monotonic() + child.probe_timeout)
    if answers.wait("server/discover", first) or verdict is not None or child.ended:
        return answers.got.get("server/discover")
    answers.send("ping", {})  # still starting, or up and ignoring server/discover: the ping tells which
    pinged = answers.wait("server/discover", deadline, also="ping") and "server/discover" not in answers.got
    if pinged and not answers.wait("server/discover", time.monotonic() + child.probe_timeout):
        return "ignored"
    return answers.got.get("server/discover")


def _as_remembered_legacy(child: Probed, key: Key, deadline: float) -> None:
    log.info("pooled child %s: its server spoke only initialize before: sent initialize alone", child.label)
    answer = child.ask("initialize", child.initialize_params(), max(0.0, deadline - time.monotonic()))
    if answer is None or child.ended:
        child.problem = _no_answer(child)
        return
    result = answer.get("result")
    if isinstance(result, dict):
        child.take_legacy(result)
        return
    forget(key)
    if modern_rewrites.recognised_modern_error(
        answer.get("error")
    ):  # it speaks 2026-07-28 now: it has answered, ask it
        log.info("pooled child %s: refused initialize as a 2026-07-28 server does; asked server/discover", child.label)
        again = child.ask("server/discover", {"_meta": child.request_meta()}, child.init_timeout)
        if again is not None and child.take_modern(again):
            remember(key, Era.MODERN)
            return
    child.problem = f"the MCP server refused initialize ({_why(answer)})"


def _initialize(child: Probed, key: Key, until: float) -> None:
    """The legacy handshake, on a connection whose server/discover was answered."""
    answer = child.ask("initialize", child.initialize_params(), max(0.0, until - time.monotonic()))
    result = answer.get("result") if answer is not None else None
    if isinstance(result, dict) and not child.ended:
        child.take_legacy(result)
        remember(key, Era.LEGACY)
        return
    if answer is None or child.ended:
        child.problem = _no_answer(child)
    else:
        child.problem = f"the MCP server answered neither server/discover nor initialize ({_why(answer)})"


def _ignores_discover(child: Probed, key: Key) -> None:
    log.info(
        "pooled child %s answered ping but not server/discover within MCPGATE_PROBE_TIMEOUT: a server that ignores "
        "requests it does not know; restarted to be sent initialize alone",
        child.label,
    )
    remember(key, Era.LEGACY)
    child.redo = True
    child.problem = "it ignores server/discover (restarted to be sent initialize alone)"


def _no_answer(child: Probed) -> str:
    if child.ended:
        return f"the MCP server ended before answering: {child.ended}"
    return f"the MCP server gave no answer within MCPGATE_START_TIMEOUT ({child.start_timeout:g} s) of its start"


def _why(answer: dict[str, Any]) -> str:
    error = answer.get("error")
    return str(error.get("message", "an error")) if isinstance(error, dict) else "no result"
