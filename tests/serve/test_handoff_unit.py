"""The connection handoff between instances on one machine (serve/front/handoff.py), in one process: the
directory's checks, the peer's, the message's bounds, the ack decided once (a sender that gave up is never also
the owner's), a listener that refuses while draining or full, and the sender's choice of what it hands."""

from __future__ import annotations

import array
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import gevent.socket
import pytest

from mcpgate.serve.front import handoff
from mcpgate.serve.front.handoff import MESSAGE_MOST, Handoff, HandoffError, Listener, directory_problem, send
from mcpgate.serve.front.reading import Waiting


@pytest.mark.parametrize(
    ("kind", "mode", "other_uid", "problem"),
    [
        ("dir", 0o700, False, None),
        ("dir", 0o755, False, None),  # read by others: a socket needs write permission to be reached
        ("dir", 0o770, False, "may be written by others"),
        ("dir", 0o703, False, "may be written by others"),
        ("dir", 0o700, True, "belongs to uid"),
        ("file", 0o600, False, "is not a directory"),
        ("missing", 0, False, "cannot read"),
    ],
)
def test_the_directory_checks(tmp_path: Path, kind: str, mode: int, other_uid: bool, problem: str | None) -> None:
    path = tmp_path / "handoff"
    if kind == "dir":
        path.mkdir()
        path.chmod(mode)
    elif kind == "file":
        path.write_text("")
    uid = os.getuid() + (1 if other_uid else 0)
    found = directory_problem(str(path), uid)
    assert found is None if problem is None else problem in (found or ""), found


def test_a_missing_directory_is_made_private_and_a_shared_one_refused(tmp_path: Path) -> None:
    made = handoff.prepared(str(tmp_path / "new"))
    assert stat.S_IMODE(os.stat(made).st_mode) & 0o077 == 0
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(HandoffError, match=r"MCPGATE_HANDOFF_DIR: .* may be written by others"):
        handoff.prepared(str(shared))


def test_the_peer_check_reads_the_senders_user() -> None:
    one, two = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with one, two:
        assert handoff.same_user(one)
        assert not handoff.same_user(one, os.getuid() + 1)


def fds_open(count: int) -> list[int]:
    pipes = [os.pipe() for _ in range((count + 1) // 2)]
    return [fd for pair in pipes for fd in pair][:count]


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("fds", "size", "flags", "kept"),
    [
        (1, 100, 0, True),
        (1, MESSAGE_MOST, 0, True),
        (1, MESSAGE_MOST + 1, 0, False),  # more than a read buffer: no handoff
        (2, 100, 0, False),  # two descriptors: none kept
        (0, 100, 0, False),
        (1, 0, 0, False),  # no bytes: no request
        (1, 100, socket.MSG_CTRUNC, False),  # descriptors cut off
        (1, 100, socket.MSG_TRUNC, False),
    ],
)
def test_the_message_bounds(fds: int, size: int, flags: int, kept: bool) -> None:
    given = fds_open(fds)
    opened = list(given)
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", given).tobytes())] if given else []
    _, fd = handoff.unpacked(b"x" * size, ancillary, flags)
    try:
        assert (fd is not None) is kept
        assert [is_open(each) for each in opened] == [kept] * len(opened)
    finally:
        for each in opened:
            if is_open(each):
                os.close(each)


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "h"
    path.mkdir(mode=0o700)
    yield str(path)


class Owner:
    """A Listener whose adopted connections are kept in a list (room and refusing set by the test)."""

    def __init__(self, directory: str, room: bool = True) -> None:
        self.adopted: list[tuple[Any, bytes]] = []
        self.has_room = room
        self.listener = Listener(directory, "own")
        self.listener.start(lambda: self.has_room, self.adopt)

    def adopt(self, sock: Any, address: Any, given: bytes) -> None:
        self.adopted.append((sock, given))

    def close(self) -> None:
        self.listener.close()
        for sock, _ in self.adopted:
            sock.close()


@pytest.mark.parametrize(
    ("room", "refusing", "taken"),
    [(True, False, True), (False, False, False), (True, True, False)],
)
def test_the_owner_takes_a_connection_only_with_room_and_not_draining(
    directory: str, room: bool, refusing: bool, taken: bool
) -> None:
    owner = Owner(directory, room)
    owner.listener.refusing = refusing
    before = dict(handoff.COUNTS)
    client, served = socket.socketpair()
    try:
        handed = gevent.spawn(send, owner.listener.path, served.fileno(), b"GET / HTTP/1.1\r\n\r\n").get(timeout=5)
        assert handed is taken
        assert [given for _, given in owner.adopted] == ([b"GET / HTTP/1.1\r\n\r\n"] if taken else [])
        moved = {k: handoff.COUNTS[k] - before[k] for k in before if handoff.COUNTS[k] != before[k]}
        assert moved == {"received" if taken else "refused": 1}
        if taken:  # the owner's copy is the same connection
            owner.adopted[0][0].sendall(b"from the owner")
            assert client.recv(100) == b"from the owner"
        served.sendall(b"still the sender's")  # refused or not, the sender's own copy works on
        assert client.recv(100) == b"still the sender's"
    finally:
        owner.close()
        client.close()
        served.close()
    assert not os.path.exists(owner.listener.path)


def test_no_socket_no_handoff(directory: str) -> None:
    client, served = socket.socketpair()
    with client, served:
        assert not send(os.path.join(directory, "nobody.sock"), served.fileno(), b"x")


def test_a_sender_that_gave_up_is_never_acked_after(directory: str) -> None:
    """The sender's wait ran out: it shut its side, so an owner that acks late fails to (and keeps nothing)."""
    path = os.path.join(directory, "slow.sock")
    slow = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    slow.bind(path)
    slow.listen(1)
    client, served = socket.socketpair()
    try:
        sending = gevent.spawn(send, path, served.fileno(), b"x", 0.05)
        conn, _ = slow.accept()
        data, ancillary, _, _ = conn.recvmsg(100, handoff.FD_SPACE)
        got = handoff.unpacked(data, ancillary, 0)[1]
        assert sending.get(timeout=5) is False
        with pytest.raises(BrokenPipeError):
            conn.send(handoff.ACK)
        conn.close()
        if got is not None:
            os.close(got)
    finally:
        slow.close()
        client.close()
        served.close()


def head(method: str, session: str | None) -> Any:
    items = {} if session is None else {"HTTP_MCP_SESSION_ID": session}
    return SimpleNamespace(line=SimpleNamespace(method=method), items=items)


class Connection:
    """What the sender reads of a connection (connection.py's Handler)."""

    def __init__(self, server: Any, raw: Any, sock: socket.socket) -> None:
        self.server, self.raw, self.socket = server, raw, sock

    def evict(self) -> None:
        raise AssertionError("not evicted")


@pytest.mark.parametrize(
    ("method", "session", "tls", "closing", "tried"),
    [
        ("POST", "other.abc.mac", False, False, True),
        ("GET", "other.abc.mac", False, False, True),
        ("DELETE", "other.abc.mac", False, False, True),
        ("PUT", "other.abc.mac", False, False, False),
        ("POST", None, False, False, False),  # no session: this instance's
        ("POST", "self.abc.mac", False, False, False),  # its own
        ("POST", "forged", False, False, False),  # no owner (the MAC fails): served here, as without the handoff
        ("POST", "other.abc.mac", True, False, False),  # a TLS connection's state is this process's
        ("POST", "other.abc.mac", False, True, False),  # the worker stops
    ],
)
def test_what_the_sender_hands(
    directory: str, method: str, session: str | None, tls: bool, closing: bool, tried: bool
) -> None:
    owners = {"other.abc.mac": "other", "self.abc.mac": "self"}
    sender = Handoff(directory, "self", owners.get)
    before = handoff.COUNTS["declined"]
    client, served = socket.socketpair()
    waiting = Waiting(4)
    open_connections = {served}
    server = SimpleNamespace(closing=closing, waiting=waiting, connections=open_connections)
    connection = Connection(server, None if tls else 1, served)
    waiting.enter(connection)
    with client, served:
        assert not sender.hands(connection, head(method, session), b"x")  # nobody listens for "other"
    assert handoff.COUNTS["declined"] - before == (1 if tried else 0)
    assert list(waiting.connections) == [connection]  # still counted in the budget, as it was
    assert open_connections == {served}  # and among the worker's open connections


@pytest.mark.parametrize("acked", [True, False])
def test_a_connection_in_flight_is_out_of_the_workers_open_connections(directory: str, acked: bool) -> None:
    """A stop that begins while the owner's ack is awaited shuts the reading of the worker's open connections
    (worker.release_connections): one being handed is not among them then, and is again when not handed."""
    seen: list[bool] = []
    client, served = socket.socketpair()
    open_connections = {served}
    waiting = Waiting(4)
    connection = Connection(SimpleNamespace(closing=False, waiting=waiting, connections=open_connections), 1, served)

    class Sender(Handoff):
        def send(self, path: str, fd: int, data: bytes) -> bool:
            seen.append(served in open_connections or connection in waiting.connections)
            return acked

    waiting.enter(connection)
    with client, served:
        assert (
            Sender(directory, "self", {"other.abc.mac": "other"}.get).hands(
                connection, head("POST", "other.abc.mac"), b"x"
            )
            is acked
        )
    assert seen == [False]
    assert (served in open_connections) is not acked


def test_a_listener_replaces_a_socket_of_its_name_and_removes_only_its_own(directory: str) -> None:
    old = Listener(directory, "same")
    new = Listener(directory, "same")  # (a worker replacing another: the path is the new one's)
    old.close()
    assert os.path.exists(new.path)  # the old one leaves it
    client, served = socket.socketpair()
    new.start(lambda: True, lambda sock, address, given: sock.close())
    with client, served:
        assert gevent.spawn(send, new.path, served.fileno(), b"x").get(timeout=5)
    new.close()
    assert not os.path.exists(new.path)


def test_a_path_that_is_no_socket_is_refused(directory: str) -> None:
    Path(directory, "taken.sock").write_text("")
    with pytest.raises(HandoffError, match="cannot listen on"):
        Listener(directory, "taken")


def test_a_sender_keeps_its_connection_and_drops_one_the_owner_closed(directory: str) -> None:
    owner = Owner(directory)
    sender = Handoff(directory, "self", lambda session: None)
    client, served = socket.socketpair()
    try:
        for _ in range(3):  # one connection, kept between handoffs
            assert gevent.spawn(sender.send, owner.listener.path, served.fileno(), b"x").get(timeout=5)
        assert len(sender.idle[owner.listener.path]) == 1
        assert len(owner.listener.receivers) == 1
        owner.listener.receivers.kill(block=True)  # the owner closes it (its IDLE passed, or it restarted)
        assert gevent.spawn(sender.send, owner.listener.path, served.fileno(), b"x").get(timeout=5)
        assert len(owner.adopted) == 4 and len(sender.idle[owner.listener.path]) == 1
    finally:
        owner.close()
        client.close()
        served.close()
