"""Instances of a fleet on one machine hand each other client connections (MCPGATE_HANDOFF_DIR): a request for
another instance's session is not forwarded over HTTP (serve/cluster/forward.py) when that instance listens in the
directory; its connection itself (the file descriptor, SCM_RIGHTS) and the bytes already read from it go to the
owner, which serves the connection as one it accepted from then on (its head read again, authentication and the
session's checks as for any request).

The sender (`Handoff.hands`, asked by the connection, serve/front/connection.py, once the head of the
connection's first request here is whole in its buffer, before the app or any body is read): a POST, GET or
DELETE whose Mcp-Session-Id names (its MAC checked: the cluster's `owner`) another instance, whose socket
`<dir>/<instance>.sock` takes one message, the descriptor and those bytes, and acknowledges it. Any failure
before the ack (no socket, refused, no ack in TIMEOUT) leaves the request here, served as without the handoff
(forwarded over HTTP, or taken over). After the ack this instance writes nothing more on the connection and only
closes its own descriptor (a shutdown would cut the owner's copy too). No loop: an instance keeps the requests
naming itself or no instance, and hands on only to the instance a request names.

A connection's first request only: its later requests naming another instance are forwarded over HTTP. A handoff
costs more CPU than one forward (bench/cluster.py, a quiet machine: 156 µs over a call on a new connection to the
owner, where a forward costs 96 µs over a direct call; in user-space instructions, bench/cluster_instructions.py
--handoff, 303k against 343k: the difference is the kernel's, passing the descriptor and watching it), so it pays
for a connection whose later requests stay with the owner (a client's own connection: after one handoff its
session's calls are direct), not for one a balancer shares between sessions of several instances, which a handoff
at every request would bounce between them.

The ack is decided once, at one place in the kernel: a sender whose wait ran out shuts its side for reading
before its last look for the ack, so the owner's ack is either in the sender's queue then (the owner has the
connection) or fails (the owner closes what it got): never both serving one connection.

The owner (`Listener`): one greenlet accepts on its SOCK_SEQPACKET socket (mode 0600, in a directory of this
user's that no one else may write); each sender's connection is checked (SO_PEERCRED: this same user), then read
one message at a time (at most MESSAGE_MOST bytes and one descriptor), each connection refused (no ack, the
descriptor closed, and the sender's connection with it) while the worker drains or has no room for one more
connection; else acknowledged and served by the worker's server as an accepted connection is (its open
connections, its budget, its pool). A sender keeps its connection to an owner for the next handoff (at most KEPT
idle to each; the owner closes one idle for IDLE seconds): a new unix connection for each handoff (a socket made,
connected, accepted, its peer checked, closed on both sides) cost more than the handoff itself. A kept connection
the owner closed meanwhile fails before anything is sent on it (or is closed with no ack: nothing was taken), and
the handoff is made on a new one.
Counted in /metrics (COUNTS: sent, received, refused, declined: a sender's handoff not taken).
"""

from __future__ import annotations

import array
import logging
import os
import socket
import stat
import struct
from collections.abc import Callable
from typing import Any

import gevent
import gevent.socket
from gevent.pool import Pool

from mcpgate.serve.front.reading import TimedReader

log = logging.getLogger("mcpgate.handoff")

ACK = b"+"
TIMEOUT = 1.0  # seconds for a sender's ack
KEPT = 4  # idle connections a sender keeps to each owner (one handoff at a time on each)
IDLE = 30.0  # seconds an owner keeps a sender's connection open between two handoffs
MESSAGE_MOST = 8192  # bytes a handoff carries: a connection's read buffer (connection.READ_BUFFER), no more
RECEIVERS = 256  # senders' connections the owner reads at once (the accepting greenlet waits past it)
BACKLOG = 64
METHODS = frozenset({"POST", "GET", "DELETE"})
PATHS_KEPT = 1024  # instances whose socket path (and idle connections) are remembered
SESSION_KEY = "HTTP_MCP_SESSION_ID"
FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)  # room for one descriptor
UCRED = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid

COUNTS: dict[str, int] = {"sent": 0, "received": 0, "refused": 0, "declined": 0}


class HandoffError(RuntimeError):
    """The handoff directory cannot be used (the worker does not start)."""


def directory_problem(path: str, uid: int | None = None) -> str | None:
    """Why `path` is no handoff directory (None: it is one): a directory, of this user (`uid`), that no one else
    may write (a socket there is reached by whoever may write the directory, to replace it)."""
    uid = os.getuid() if uid is None else uid
    try:
        found = os.stat(path)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if not stat.S_ISDIR(found.st_mode):
        return f"{path} is not a directory"
    if found.st_uid != uid:
        return f"{path} belongs to uid {found.st_uid}, not to this user ({uid})"
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} may be written by others (mode {stat.S_IMODE(found.st_mode):o}): chmod go-w it"
    return None


def prepared(path: str) -> str:
    """The handoff directory, made (mode 0700) when missing, checked (directory_problem) or HandoffError."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise HandoffError(f"MCPGATE_HANDOFF_DIR: cannot make {path}: {exc.strerror}") from None
    problem = directory_problem(path)
    if problem is not None:
        raise HandoffError(f"MCPGATE_HANDOFF_DIR: {problem}")
    return path


def socket_path(directory: str, instance: str) -> str:
    return os.path.join(directory, f"{instance}.sock")


def same_user(conn: Any, uid: int | None = None) -> bool:
    """Whether the process at the other end of a unix socket runs as this user (`uid`)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size)
    return bool(UCRED.unpack(creds)[1] == (os.getuid() if uid is None else uid))


def unpacked(data: bytes, ancillary: list[tuple[int, int, bytes]], flags: int) -> tuple[bytes, int | None]:
    """A handoff message's bytes and its descriptor (None: not one handoff). Every descriptor that came is closed
    but the one kept: a message with more than one, none, a cut one, or bytes past MESSAGE_MOST is refused."""
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    whole = not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) and len(data) <= MESSAGE_MOST
    if whole and len(fds) == 1 and data:
        return data, fds[0]
    for fd in fds:
        os.close(fd)
    return data, None


class Given(TimedReader):
    """A handed connection's reader: the bytes the sender had read already, then the socket's."""

    __slots__ = ("given",)

    def __init__(self, sock: socket.socket, given: bytes) -> None:
        super().__init__(sock)
        self.given = memoryview(given)

    def recv_into(self, buffer: Any) -> int:
        given = self.given
        if not given:
            return super().recv_into(buffer)
        count = min(len(buffer), len(given))
        buffer[:count] = given[:count]
        self.given = given[count:]
        return count


class Handoff:
    """The sender's side: `hands` a connection to the owner of the session its request names."""

    def __init__(self, directory: str, instance: str, owner: Callable[[str], str | None]) -> None:
        self.directory, self.instance, self.owner = directory, instance, owner
        self.paths: dict[str, str] = {}  # instance -> its socket's path
        self.idle: dict[str, list[Any]] = {}  # a socket's path -> connections to it, idle (at most KEPT)

    def hands(self, connection: Any, head: Any, buffered: bytes) -> bool:
        """Whether `connection` (serve/front/connection.py's Handler, its buffer holding `buffered`: its request's
        head first) went to the owner of the session its request (`head`) names; False: it stays here, nothing
        sent. Not a TLS connection (its state is this process's), nor once the worker stops; out of the budget
        and of the worker's open connections while it is handed (an eviction's shutdown, or a stop's that begins
        meanwhile, would cut the owner's copy too)."""
        if head.line.method not in METHODS:
            return False
        session = head.items.get(SESSION_KEY)
        if session is None:
            return False
        owner = self.owner(session)
        server = connection.server
        if owner is None or owner == self.instance or connection.raw is None or server.closing:
            return False
        path = self.paths.get(owner)
        if path is None:
            if len(self.paths) >= PATHS_KEPT:
                self.paths.clear()
                for conn in (conn for idle in self.idle.values() for conn in idle):
                    conn.close()
                self.idle.clear()
            path = self.paths[owner] = socket_path(self.directory, owner)
        sock = connection.socket
        server.waiting.leave(connection)
        server.connections.discard(sock)  # (a stop's release_connections would shut the owner's copy's reading)
        handed = self.send(path, sock.fileno(), buffered)
        if not handed:
            server.connections.add(sock)
            server.waiting.enter(connection)
        COUNTS["sent" if handed else "declined"] += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("connection %s to instance %s", "handed" if handed else "not handed", owner)
        return handed

    def send(self, path: str, fd: int, data: bytes) -> bool:
        """`send` on an idle connection to `path` kept from an earlier handoff (one the owner closed meanwhile, on
        which nothing was taken, is dropped for the next), else on a new one; a connection whose handoff was
        acknowledged is kept for the next (at most KEPT)."""
        idle = self.idle.setdefault(path, [])
        while idle:
            conn = idle.pop()
            taken, again = offer(conn, fd, data)
            if taken is not None:
                return self.done(idle, conn, taken, again)
            conn.close()
        conn = connected(path)
        if conn is None:
            return False
        taken, again = offer(conn, fd, data)
        return self.done(idle, conn, bool(taken), again)

    @staticmethod
    def done(idle: list[Any], conn: Any, taken: bool, again: bool) -> bool:
        if again and len(idle) < KEPT:
            idle.append(conn)
        else:
            conn.close()
        return taken


def room(server: Any) -> bool:
    """Whether the worker's `server` may serve one more connection (none once the worker's stop began)."""
    return not server.closing and server.pool is not None and not server.pool.full()


def adopt(server: Any, sock: Any, address: Any, given: bytes) -> None:
    """Serve a handed connection as the worker's `server` serves one it accepted, `given` read first."""
    server.pool.spawn(serve_handed, server, sock, address, given)


def serve_handed(server: Any, sock: Any, address: Any, given: bytes) -> None:
    server.handler_class(sock, address, server, given).handle()


def connected(path: str, timeout: float = TIMEOUT) -> Any:
    """A connection to the listener at `path` (None: none listens there)."""
    conn = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.settimeout(timeout)
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def offer(conn: Any, fd: int, data: bytes) -> tuple[bool | None, bool]:
    """Hand the descriptor `fd` and `data` on `conn`: (True: acknowledged, the receiver serves the connection;
    False: not, the caller still does; None: not, and nothing of it was seen: `conn` was closed without an ack),
    and whether `conn` may carry another handoff."""
    try:
        conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    except OSError:
        return None, False
    try:
        ack = conn.recv(1)
    except TimeoutError:
        # no more ack may come (the owner's send fails from now on), then the last look: taken or not, decided
        try:
            conn.shutdown(socket.SHUT_RD)
            return bool(conn._sock.recv(1, socket.MSG_DONTWAIT) == ACK), False
        except OSError:
            return False, False
    except OSError:
        return False, False
    if ack == ACK:
        return True, True
    return (None if not ack else False), False


def send(path: str, fd: int, data: bytes, timeout: float = TIMEOUT) -> bool:
    """Hand the descriptor `fd` and `data` to the listener at `path` on a new connection: True once acknowledged
    (the receiver serves the connection), False when it was not (the caller still does)."""
    conn = connected(path, timeout)
    if conn is None:
        return False
    try:
        return bool(offer(conn, fd, data)[0])
    finally:
        conn.close()


class Listener:
    """The owner's side: `<dir>/<instance>.sock`, bound when made (HandoffError: it cannot be), accepting handoffs
    once `start`ed while `room()` says one more connection may be served; `adopt(sock, address, given)` serves one.
    A socket already at that path is replaced (one of this name that did not end cleanly, or the worker this one
    replaces, which at its exit removes the path only while it is still its own)."""

    def __init__(self, directory: str, instance: str) -> None:
        self.path = socket_path(prepared(directory), instance)
        self.room: Callable[[], bool] = lambda: False
        self.adopt: Callable[[Any, Any, bytes], None] = lambda sock, address, given: None
        self.refusing = False  # set as the worker's drain begins
        if os.path.exists(self.path) and stat.S_ISSOCK(os.lstat(self.path).st_mode):
            os.unlink(self.path)
        self.sock = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.bind(self.path)
            os.chmod(self.path, 0o600)  # (between bind and chmod: the peer check stands guard)
            self.sock.listen(BACKLOG)
            found = os.lstat(self.path)
        except OSError as exc:
            self.sock.close()
            raise HandoffError(f"MCPGATE_HANDOFF_DIR: cannot listen on {self.path}: {exc.strerror}") from None
        self.own = (found.st_dev, found.st_ino)
        self.receivers = Pool(RECEIVERS)
        self.greenlet: gevent.Greenlet | None = None

    def start(self, room: Callable[[], bool], adopt: Callable[[Any, Any, bytes], None]) -> None:
        self.room, self.adopt = room, adopt
        self.greenlet = gevent.spawn(self.accept_forever)

    def accept_forever(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                if self.greenlet is None:  # closed
                    return
                gevent.sleep(0.1)  # (EMFILE and the like: try again soon, not in a tight loop)
                continue
            self.receivers.spawn(self.receive, conn)

    def receive(self, conn: Any) -> None:
        """A sender's connection: its user checked, then one handoff after another until it closes, stays idle
        IDLE seconds, or sends what is no handoff, or one is refused (the sender then sees it closed, no ack)."""
        try:
            try:
                ours = same_user(conn)
            except OSError:
                ours = False
            if not ours:
                log.warning("handoff refused: its sender runs as another user")
                COUNTS["refused"] += 1
                return
            conn.settimeout(IDLE)
            while (got := self.message(conn)) is not None:
                sock, data = got
                if sock is None:
                    COUNTS["refused"] += 1
                    return
                if not self.take(conn, sock, data):
                    return
        finally:
            conn.close()

    @staticmethod
    def message(conn: Any) -> tuple[Any, bytes] | None:
        """The connection a sender hands next (None in it: what came is no handoff, refused) and the bytes read
        from it already; None: the sender closed, or sent nothing for IDLE seconds."""
        try:
            data, ancillary, flags, _ = conn.recvmsg(MESSAGE_MOST + 1, FD_SPACE)
        except OSError:
            return None
        if not data and not ancillary:
            return None
        data, fd = unpacked(data, ancillary, flags)
        if fd is None:
            return None, b""
        try:
            return gevent.socket.socket(fileno=fd), data
        except OSError:
            os.close(fd)
            return None, b""

    def take(self, conn: Any, sock: Any, data: bytes) -> bool:
        """Acknowledge and serve the connection `sock`, or refuse it (closed, no ack): while the worker drains, with
        no room for one more connection, or once the sender gave up waiting (the ack fails: it still has it)."""
        served = False
        try:
            if not self.refusing and self.room():
                address = sock.getpeername()
                conn.sendall(ACK)
                self.adopt(sock, address, data)
                served = True
        except OSError:
            pass
        finally:
            COUNTS["received" if served else "refused"] += 1
            if not served:
                sock.close()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("handed connection %s", "served" if served else "refused")
        return served

    def close(self) -> None:
        greenlet, self.greenlet = self.greenlet, None
        try:
            if greenlet is not None:
                greenlet.kill(block=False)
            self.receivers.kill(block=False)  # the senders' connections
            self.sock.close()
        finally:
            try:
                found = os.lstat(self.path)
                if (found.st_dev, found.st_ino) == self.own:  # (not another worker's, bound at this path since)
                    os.unlink(self.path)
            except OSError:
                pass
