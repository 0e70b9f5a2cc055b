"""Loopback TCP connections for the tests of how the worker reads a client's socket (its probe, its reads): the
client's plain socket and the server's gevent one, and what a client may have done before the server looks. Each
such state returns once the server's side can read it (bytes, an end, a reset), so a test never races the loopback."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
from collections.abc import Iterator

from gevent import socket as gsocket

WAIT_MS = 10_000  # generous: loopback delivers at once


@contextlib.contextmanager
def connected() -> Iterator[tuple[socket.socket, gsocket.socket]]:
    """A loopback TCP connection: the client's plain socket and the server's gevent socket (both closed after)."""
    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname(), timeout=10)
    server, _ = listener.accept()
    listener.close()
    try:
        yield client, server
    finally:
        client.close()
        server.close()


def arrived(server: gsocket.socket) -> None:
    """Wait until something (bytes, an end, a reset) is there to read on the server's side."""
    probe = select.poll()
    probe.register(server.fileno(), select.POLLIN)
    assert probe.poll(WAIT_MS), "nothing arrived"


def quiet(client: socket.socket, server: gsocket.socket) -> None:
    """The client has sent nothing yet."""


def pending(client: socket.socket, server: gsocket.socket) -> None:
    """The start of a request is there to read."""
    client.sendall(b"POST")
    arrived(server)


def half_closed(client: socket.socket, server: gsocket.socket) -> None:
    """The client's FIN, the client still reading."""
    client.shutdown(socket.SHUT_WR)
    arrived(server)


def reset(client: socket.socket, server: gsocket.socket) -> None:
    """The client's RST (closed with a zero linger)."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    arrived(server)
