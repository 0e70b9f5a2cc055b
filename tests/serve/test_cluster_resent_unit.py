"""serve/cluster/resent.py in process (gevent greenlets, a clock of its own): a session's POST sent again after the
instance that forwarded it died is given the first copy's answer, whether that copy is still running or answered
already, also when the copy comes in before the first copy's connection reads as closed; never when that
connection is still there, nor when its answer became a stream."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import gevent
from gevent.event import Event

from mcpgate.serve.cluster.resent import KEPT_FOR, Resent
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpResponse

SESSION = "i1.session"
BODY = b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"slow","arguments":{}}}'


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(forwarded: bool, carrier_gone: Event | None = None, body: bytes = BODY) -> dict[str, Any]:
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(body))}
    environ["wsgi.input"] = io.BytesIO(body)
    ctx = context(environ)
    ctx.forwarded = forwarded
    if carrier_gone is not None:
        ctx.peer_gone = carrier_gone.is_set
    return environ


class Handler:
    """The session's handler: counts its runs, each answering once `release` is set (a call in flight)."""

    def __init__(self, stream: bool = False) -> None:
        self.runs = 0
        self.release = Event()
        self.stream = stream

    def __call__(self) -> HttpResponse:
        self.runs += 1
        self.release.wait()
        body: bytes | Iterator[bytes] = iter([b"data: x\n\n"]) if self.stream else f"answer {self.runs}".encode()
        return HttpResponse(200, body, "application/json")


def test_a_copy_sent_again_while_the_first_runs_gets_its_answer() -> None:
    resent, handler, gone = Resent(10_000, wait=5.0), Handler(), Event()
    first = gevent.spawn(resent.serve, request(True, gone), SESSION, handler)
    gevent.sleep(0)
    gone.set()  # the forwarding instance died
    again = gevent.spawn(resent.serve, request(False), SESSION, handler)  # straight to the owner this time
    gevent.sleep(0)
    handler.release.set()
    gevent.joinall([first, again], timeout=5)
    assert again.value is first.value and again.value.body == b"answer 1"
    assert handler.runs == 1


def test_a_copy_in_before_its_carrier_s_close_is_read_waits_for_it() -> None:
    """The balancer saw the carrier die and sent the copy before this process read the close of the carrier's
    connection here (both closed at its death, in no set order): the copy still gets the first copy's answer."""
    # a clock of its own, still: the carrier's grace (CARRIER_GRACE) never runs out, however slow the machine
    resent, handler, gone = Resent(10_000, wait=5.0, clock=Clock()), Handler(), Event()
    first = gevent.spawn(resent.serve, request(True, gone), SESSION, handler)
    gevent.sleep(0)  # the first copy runs, its handler waiting for `release`
    (running,) = resent._running.values()
    again = gevent.spawn(resent.serve, request(False), SESSION, handler)
    gevent.sleep(0)  # the copy runs up to its first look at the carrier's connection, still open
    assert running.taker is None and not again.ready()
    gone.set()  # read as closed only now
    deadline = time.monotonic() + 10.0
    while running.taker is None and time.monotonic() < deadline:  # the copy's next look takes the first copy over
        gevent.sleep(0.001)
    assert running.taker is not None
    handler.release.set()
    gevent.joinall([first, again], timeout=5)
    assert again.value is first.value and handler.runs == 1


def test_an_answer_ready_after_its_carrier_died_is_kept_for_the_copy() -> None:
    clock = Clock()
    resent, handler, gone = Resent(10_000, wait=5.0, clock=clock), Handler(), Event()
    handler.release.set()
    gone.set()
    first = resent.serve(request(True, gone), SESSION, handler)
    again = resent.serve(request(True, Event()), SESSION, handler)
    assert again is first and handler.runs == 1
    resent.serve(request(True, gone), SESSION, handler)  # kept again (its carrier had gone)
    clock.now += KEPT_FOR
    assert resent.serve(request(True, Event()), SESSION, handler).body == b"answer 3"  # expired: run
    assert handler.runs == 3


def test_no_takeover_while_the_first_copy_s_connection_is_there() -> None:
    resent, handler = Resent(10_000, wait=5.0), Handler()
    first = gevent.spawn(resent.serve, request(True, Event()), SESSION, handler)
    gevent.sleep(0)
    again = gevent.spawn(resent.serve, request(True, Event()), SESSION, handler)
    gevent.sleep(0)
    handler.release.set()
    gevent.joinall([first, again], timeout=5)
    assert handler.runs == 2 and again.value.body == b"answer 2"  # (the session itself refuses a duplicate id)


def test_a_stream_stays_the_first_copy_s() -> None:
    resent, handler, gone = Resent(10_000, wait=5.0), Handler(stream=True), Event()
    first = gevent.spawn(resent.serve, request(True, gone), SESSION, handler)
    gevent.sleep(0)
    gone.set()
    again = gevent.spawn(resent.serve, request(True, Event()), SESSION, handler)
    gevent.sleep(0)
    handler.release.set()
    gevent.joinall([first, again], timeout=5)
    assert handler.runs == 2 and again.value is not first.value


def test_other_bodies_and_sessions_are_not_taken() -> None:
    resent, handler, gone = Resent(10_000, wait=5.0), Handler(), Event()
    handler.release.set()
    gone.set()
    resent.serve(request(True, gone), SESSION, handler)
    resent.serve(request(True, Event(), body=BODY.replace(b"8", b"9")), SESSION, handler)
    resent.serve(request(True, Event()), "i1.other", handler)
    assert handler.runs == 3
