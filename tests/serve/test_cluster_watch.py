"""A forwarder's waits on an owner end by its Watch (serve/cluster/exchange.py), not by a timer per read: a wait
past its pause fails with TimeoutError (as the socket's own timeout failed it), a wait within it is left alone,
and a connection that timed out is not pooled again. The sweeps are called here by hand, at a chosen time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from mcpgate.serve.cluster.exchange import OwnerConnection, Watch, message

pytestmark = pytest.mark.fast

JSON = b'{"jsonrpc":"2.0","id":1,"result":{}}'
WHOLE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(JSON), JSON)


class Silent:
    """A loopback owner that reads its first connection's request and answers `answer` (None: nothing, ever)."""

    def __init__(self, answer: bytes | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answer = answer
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n{}" not in data:
                data += conn.recv(65536)
            if self.answer is not None:
                conn.sendall(self.answer)
            self.done.wait(30)

    def close(self) -> None:
        self.done.set()
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def owners() -> Iterator[list[Silent]]:
    made: list[Silent] = []
    yield made
    for owner in made:
        owner.close()


def watched(owner: Silent, watch: Watch, pause: float = 30.0) -> OwnerConnection:
    conn = OwnerConnection("127.0.0.1", owner.port, timeout=10)
    conn.pause = pause
    watch.add(conn)
    return conn


def request(conn: OwnerConnection) -> None:
    conn.send_request(message("POST", "/mcp", [("Host", "mcp.test"), ("Content-Length", "2")], b"{}"))


def waiting(conn: OwnerConnection) -> float:
    """When the connection's current wait must end, once it waits (a thread reads)."""
    deadline = time.monotonic() + 10
    while conn.until is None:
        assert time.monotonic() < deadline, "the read never began waiting"
        time.sleep(0.01)
    return conn.until


def test_a_wait_past_its_pause_fails_with_a_timeout(owners: list[Silent]) -> None:
    owner = Silent()
    owners.append(owner)
    watch = Watch()
    conn = watched(owner, watch)
    request(conn)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            conn.head("POST")
        except OSError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    until = waiting(conn)
    assert until > time.monotonic() + 20  # the connection's pause, not the connect timeout
    assert watch.sweep(until - 1.0) == 0  # not yet: left alone
    assert watch.sweep(until) == 1
    reader.join(10)
    assert not reader.is_alive()
    assert len(failed) == 1 and isinstance(failed[0], TimeoutError)
    assert conn.timed_out
    with pytest.raises(TimeoutError):  # every later read fails at once
        conn.body(1)
    conn.close()
    watch.stop()


def test_a_reply_within_its_pause_is_read_and_no_wait_is_left(owners: list[Silent]) -> None:
    owner = Silent(WHOLE)
    owners.append(owner)
    watch = Watch()
    conn = watched(owner, watch)
    request(conn)
    reply = conn.head("POST")
    assert (reply.status, conn.body(reply.length or 0)) == (200, JSON)
    assert conn.until is None and not conn.timed_out
    assert watch.sweep(time.monotonic() + 1000) == 0  # nothing waits: nothing to end
    assert conn.sock is not None and conn.sock.gettimeout() is None  # no timer per read once connected
    conn.close()
    watch.stop()


def test_a_connection_without_a_pause_keeps_its_socket_timeout(owners: list[Silent]) -> None:
    owner = Silent(WHOLE)
    owners.append(owner)
    conn = OwnerConnection("127.0.0.1", owner.port, timeout=7)
    request(conn)
    assert conn.sock is not None and conn.sock.gettimeout() == 7
    reply = conn.head("POST")
    assert conn.body(reply.length or 0) == JSON and conn.until is None
    conn.close()
