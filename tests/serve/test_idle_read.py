"""The first read of a kept-alive connection's next request (TimedReader.idle): its poll object asked before the
socket is tried, so a socket with nothing yet is waited for without a failed try (no BlockingIOError), and whatever
is there (bytes, an end, a reset, a deadline's shutdown) reads as the same read without `idle` reads it, over real
TCP connections."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket

from mcpgate.serve.front.peer_probe import polling
from mcpgate.serve.front.reading import ReadTimeout, TimedReader

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


@contextlib.contextmanager
def connected() -> Iterator[tuple[socket.socket, gsocket.socket]]:
    """A loopback TCP connection: the client's plain socket and the server's gevent socket."""
    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    try:
        yield client, server
    finally:
        client.close()
        server.close()


def arrived(server: gsocket.socket) -> None:
    assert polling(server._sock).poll(WAIT * 1000), "nothing arrived"


def nothing(client: socket.socket, server: gsocket.socket) -> None:
    pass


def data(client: socket.socket, server: gsocket.socket) -> None:
    client.sendall(b"POST /mcp")
    arrived(server)


def ended(client: socket.socket, server: gsocket.socket) -> None:
    client.shutdown(socket.SHUT_WR)  # FIN
    arrived(server)


def reset(client: socket.socket, server: gsocket.socket) -> None:
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # RST
    arrived(server)


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
    (data, None),
    (ended, None),
    (reset, None),
    (nothing, later_data),
    (nothing, later_end),
    (nothing, later_deadline),
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
@pytest.mark.parametrize(
    ("before", "during"), CASES, ids=[f"{b.__name__}-{d.__name__ if d else 'now'}" for b, d in CASES]
)
def test_idle_read_never_fails_a_try(before: Before, during: During) -> None:
    with connected() as pair:
        outcome, calls, failed = read_once(pair, before, during, idle=True)
    assert failed == 0  # never a failed try: nothing there is waited for first
    assert calls == (0 if outcome[0] == "timeout" else 1)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("before", "during"), CASES, ids=[f"{b.__name__}-{d.__name__ if d else 'now'}" for b, d in CASES]
)
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
    assert plain_failed == (1 if before is nothing else 0)
