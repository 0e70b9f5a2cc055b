"""The first read of a kept-alive connection's next request (TimedReader.idle): its poll object asked before the
socket is tried, so a socket with nothing yet is waited for without a failed try (no BlockingIOError), and whatever
is there (bytes, an end, a reset, a deadline's shutdown) reads as the same read without `idle` reads it, over real
TCP connections."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket

from mcpgate.serve.front.peer_probe import polling
from mcpgate.serve.front.reading import ReadTimeout, TimedReader
from tests.support.loopback import connected, half_closed, pending, quiet, reset

WAIT = 10.0  # generous: loopback delivers at once


class Counted:
    """A plain socket's own socket object, its recv_into calls counted (and the failed ones apart)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.calls = 0
        self.failed = 0

    def recv_into(self, buffer: Any) -> int:
        self.calls += 1
        try:
            return self.raw.recv_into(buffer)  # type: ignore[no-any-return]
        except BlockingIOError:
            self.failed += 1
            raise


def later_data(client: socket.socket, reader: TimedReader) -> None:
    client.sendall(b"POST /mcp")


def later_end(client: socket.socket, reader: TimedReader) -> None:
    client.shutdown(socket.SHUT_WR)


def later_deadline(client: socket.socket, reader: TimedReader) -> None:
    reader.fail()  # the sweeper ends a wait past its deadline so


Before = Callable[[socket.socket, gsocket.socket], None]
During = Callable[[socket.socket, TimedReader], None] | None

# what is there before the read, what happens while it waits (None: it must not wait)
CASES: list[tuple[Before, During]] = [
    (pending, None),
    (half_closed, None),
    (reset, None),
    (quiet, later_data),
    (quiet, later_end),
    (quiet, later_deadline),
]
IDS = [f"{before.__name__}-{during.__name__ if during else 'now'}" for before, during in CASES]


def read_once(pair: tuple[socket.socket, gsocket.socket], before: Before, during: During, idle: bool) -> Any:
    """One readinto of a fresh TimedReader on the server side: (outcome, recv_into calls, failed tries)."""
    client, server = pair
    reader = TimedReader(server)
    counted = reader.raw = Counted(reader.raw)
    reader.poller = polling(server._sock)  # as the connection gives it
    reader.pausing(WAIT)
    reader.idle = idle
    before(client, server)
    buffer = bytearray(64)

    def read() -> Any:
        try:
            count = reader.readinto(buffer)
        except ReadTimeout as exc:
            return ("timeout", str(exc))
        except OSError as exc:
            return ("error", type(exc).__name__)
        return ("read", bytes(buffer[:count]))

    if during is None:
        outcome = read()  # no wait: this greenlet would otherwise block on a socket nothing will write to
    else:
        reading = gevent.spawn(read)
        gevent.idle()  # the read runs until it waits for the socket
        assert not reading.dead, "the read did not wait"
        assert reader.waiting_until is not None
        during(client, reader)
        outcome = reading.get(timeout=WAIT)
    assert reader.idle is False  # a read clears it, whatever it found
    return outcome, counted.calls, counted.failed


@pytest.mark.fast
@pytest.mark.parametrize(("before", "during"), CASES, ids=IDS)
def test_idle_read_never_fails_a_try(before: Before, during: During) -> None:
    with connected() as pair:
        outcome, calls, failed = read_once(pair, before, during, idle=True)
    assert failed == 0  # never a failed try: nothing there is waited for first
    assert calls == (0 if outcome[0] == "timeout" else 1)


@pytest.mark.fast
@pytest.mark.parametrize(("before", "during"), CASES, ids=IDS)
def test_idle_and_plain_reads_agree(before: Before, during: During) -> None:
    """The same case read with and without `idle` (two fresh connections): the same outcome; the plain read of a
    socket with nothing yet tried it first (a failed try), the idle one did not."""
    outcomes = []
    for idle in (True, False):
        with connected() as fresh:
            outcomes.append(read_once(fresh, before, during, idle))
    (idle_outcome, _, idle_failed), (plain_outcome, _, plain_failed) = outcomes
    assert idle_outcome == plain_outcome
    assert idle_failed == 0
    assert plain_failed == (1 if before is quiet else 0)
