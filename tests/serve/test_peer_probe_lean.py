"""A client connection's probe, its shortcut against the full reading: peer_polled (a plain socket's own socket object
and a poll object its connection keeps) gives peer_gone's verdict (a poll object made for each probe, then a peek
through gevent's socket) over real TCP connections, probe after probe."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gevent import socket as gsocket

from mcpgate.serve.front.peer_probe import peer_gone, peer_polled
from tests.support.loopback import arrived, half_closed, pending, quiet, reset


def pending_then_closed(client: socket.socket, server: gsocket.socket) -> None:
    client.sendall(b"x")
    client.close()
    arrived(server)


def closed(client: socket.socket, server: gsocket.socket) -> None:
    client.close()  # FIN
    arrived(server)


def ours_half_closed(client: socket.socket, server: gsocket.socket) -> None:
    server.shutdown(socket.SHUT_WR)  # the gateway stopped writing; the client is still there


def read_to_the_end(client: socket.socket, server: gsocket.socket) -> None:
    client.sendall(b"y")
    arrived(server)
    assert server.recv(1) == b"y"  # read: nothing is left waiting


CASES: list[tuple[Callable[[socket.socket, gsocket.socket], None], bool]] = [
    (quiet, False),
    (pending, False),
    (pending_then_closed, False),  # a request still to read: not gone yet
    (closed, True),
    (half_closed, True),
    (reset, True),
    (ours_half_closed, False),
    (read_to_the_end, False),
]


@pytest.fixture
def listener() -> Iterator[gsocket.socket]:
    sock = gsocket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield sock
    finally:
        sock.close()


@pytest.mark.parametrize(("case", "gone"), CASES, ids=[case.__name__ for case, _ in CASES])
def test_the_peek_gives_the_polls_verdict(
    listener: gsocket.socket, case: Callable[[socket.socket, gsocket.socket], None], gone: bool
) -> None:
    client = socket.create_connection(listener.getsockname(), timeout=10)
    server, _ = listener.accept()
    try:
        case(client, server)
        raw = server._sock  # what the connection's reader holds as `raw` for a plain socket
        pollers: list[Any] = []
        assert (peer_polled(raw, pollers), peer_gone(server)) == (gone, gone)  # the poll object made
        assert (peer_polled(raw, pollers), peer_gone(server)) == (gone, gone)  # kept; a peek takes nothing
        assert len(pollers) == 1
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("probed", [False, True])
def test_a_closed_socket_reads_as_gone_both_ways_its_fd_taken_again_or_not(
    listener: gsocket.socket, probed: bool
) -> None:
    """Closed, its descriptor's number perhaps another open connection's: gone, whether its poll object was made."""
    client = socket.create_connection(listener.getsockname(), timeout=10)
    server, _ = listener.accept()
    raw, pollers = server._sock, []
    fd = server.fileno()
    again: list[Any] = []
    try:
        if probed:
            assert peer_polled(raw, pollers) is False
        server.close()
        assert (peer_polled(raw, pollers), peer_gone(server)) == (True, True)
        again.append(socket.create_connection(listener.getsockname(), timeout=10))
        again.append(listener.accept()[0])
        assert fd in [sock.fileno() for sock in again]  # the lowest free number, the closed one's: open and quiet
        assert (peer_polled(raw, pollers), peer_gone(server)) == (True, True)
    finally:
        client.close()
        for sock in again:
            sock.close()
