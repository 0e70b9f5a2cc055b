"""A request forwarded to a session's owner in the instant the owner's worker stops accepting (the end of a
graceful stop's drain, a rolling redeploy): the connection lands in the owner's accept queue, the whole request
is sent, and the listener closes before the worker accepts it. The kernel resets such a connection, its bytes
unread. The forwarding instance used to answer it as a request its owner died with ("the server restarted": it
may have run), which the rolling redeploy test met now and then; the client's call failed. Now the owner says in
the directory that it stops (serve/cluster/directory.py), a reset read as such says the request was never read
there (serve/cluster/forward.py, LostInFlight.unread), and the forwarding instance serves it, taking the session
over (serve/cluster/instances.py). A request its owner read whole before it went still gets "restarted": it may
have run, and is never sent twice.

In process: the Cluster's forward against a loopback owner that resets the request unread (its listener closed
with the connection queued, or the connection closed unread) or reads it and closes, with and without the mark.
With real gunicorn instances and Redis: the owner's drain held by a slow call, its worker stopped (SIGSTOP) so that
it accepts nothing, the forwarded request seen waiting unread in its accept queue (/proc/net/tcp), then the worker
killed: its master closed its copy of the listener as the graceful stop began, so this closes the last one, and
the kernel resets the queued connection as when the worker closes the listener itself.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mcpgate.config.settings import Settings
from mcpgate.serve.cluster.directory import STOPPING_PREFIX, Directory
from mcpgate.serve.cluster.forward import Forwarder
from mcpgate.serve.cluster.instances import Cluster
from mcpgate.serve.cluster.moved import RESTARTED
from mcpgate.serve.front.http import HttpRequest, HttpResponse
from tests.serve.test_takeover import call_body, instance_env, opened_on
from tests.support import Gateway, direct_children, wait_dead, wait_for
from tests.support.fleet import redis_server
from tests.support.http import HEADERS

SECRET = "stopping-test-secret-0123456789abcdef"


def unread_in_accept_queue(port: int) -> bool:
    """Whether a connection to loopback `port` waits in its listener's accept queue with bytes received: in the
    kernel's table a listening socket's rx_queue counts the connections not accepted yet, an established one's
    the bytes not read."""
    queued = unread = False
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, rx_queue = fields[1], fields[3], int(fields[4].split(":")[1], 16)
        if int(local.rsplit(":", 1)[1], 16) != port or not rx_queue:
            continue
        queued = queued or state == "0A"  # LISTEN
        unread = unread or state == "01"  # ESTABLISHED
    return queued and unread


# -- in process: the forward's reading of a reset, against a loopback owner --------------------------------------


class Owner:
    """A loopback listener standing for an owner; `how` ends the first forwarded request on it, in a thread."""

    def __init__(self, how: Callable[[Owner], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=how, args=(self,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


def whole(data: bytes) -> bool:
    """Whether `data` holds a whole request: its head and the body its Content-Length announces."""
    head, found, body = data.partition(b"\r\n\r\n")
    lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    return bool(found) and len(body) >= int(lengths[0] if lengths else 0)


def closes_its_listener(owner: Owner) -> None:
    """The worker stops accepting with the forwarded request in its accept queue: the kernel resets it."""
    assert wait_for(lambda: unread_in_accept_queue(owner.port), 10)
    owner.listener.close()


def closes_it_unread(owner: Owner) -> None:
    """The worker took the connection and closed it before reading the request: the kernel resets it."""
    conn, _ = owner.listener.accept()
    assert wait_for(lambda: whole(conn.recv(65536, socket.MSG_PEEK)), 10)
    conn.close()


def reads_it_then_dies(owner: Owner) -> None:
    """The worker read the whole request (it may have run) and died before answering: an orderly close."""
    conn, _ = owner.listener.accept()
    data = b""
    while not whole(data):
        data += conn.recv(65536)
    conn.close()


class FakeRedis:
    """The commands a lookup, a gone mark and the stopping mark's check send, from a dict."""

    def __init__(self, entries: dict[str, bytes]) -> None:
        self.entries = entries

    def get(self, key: str) -> bytes | None:
        return self.entries.get(key)

    def pttl(self, key: str) -> int:
        return 15_000 if key in self.entries else -2


def forwarded_to(owner: Owner, stopping: bool) -> HttpResponse:
    """A POST for owner "b"'s session served by instance "a": b's reply, or the handler's when a runs it again
    (as a takeover would) after the forward."""
    entries = {"mcpgate:instance:b": owner.url.encode()}
    if stopping:
        entries[STOPPING_PREFIX + "b"] = owner.url.encode()
    directory = Directory(FakeRedis(entries), "a", "http://a.internal")  # type: ignore[arg-type]
    forwarder = Forwarder(SECRET.encode(), Settings.from_env({}), "a")
    member = Cluster("a", SECRET.encode(), FakeRedis({}), directory, forwarder)  # type: ignore[arg-type]
    body = call_body(7, "echo", message="x")
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "PATH_INFO": "/mcp", "CONTENT_LENGTH": str(len(body))}
    environ["wsgi.input"] = io.BytesIO(body)
    environ["HTTP_MCP_SESSION_ID"] = "session-of-b"
    member.owner = lambda session_id: "b"  # type: ignore[method-assign]  # the id's MAC is not what is tested

    def handler(request: HttpRequest) -> HttpResponse:  # run again: b is gone from a's lookups now
        assert member.lookup("b") is None
        return HttpResponse(200, b"served here")

    try:
        return member.serve(environ, "mcp", handler)
    finally:
        forwarder.close()


@pytest.mark.parametrize("how", [closes_its_listener, closes_it_unread], ids=["accept-queue", "closed-unread"])
def test_a_request_a_stopping_owner_reset_unread_is_served_here(how: Callable[[Owner], None]) -> None:
    owner = Owner(how)
    try:
        response = forwarded_to(owner, stopping=True)
    finally:
        owner.close()
    assert (response.status, response.body) == (200, b"served here")


@pytest.mark.parametrize(
    ("how", "stopping"),
    [(closes_its_listener, False), (reads_it_then_dies, True), (reads_it_then_dies, False)],
    ids=["reset-without-the-mark", "read-then-closed-while-stopping", "read-then-closed"],
)
def test_a_request_its_owner_may_have_run_is_answered_restarted(how: Callable[[Owner], None], stopping: bool) -> None:
    owner = Owner(how)
    try:
        response = forwarded_to(owner, stopping)
    finally:
        owner.close()
    assert response.status == 200 and isinstance(response.body, bytes), response
    assert json.loads(response.body)["error"]["message"] == RESTARTED


# -- real instances: the owner's worker stops accepting with a forwarded request queued -------------------------


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def process_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_forward_queued_as_the_owner_stops_accepting_is_served_by_a_takeover(redis_url: str, tmp_path: Path) -> None:
    mark = tmp_path / "arrived"
    owner = Gateway(instance_env(redis_url, "i1", KEPT_MARK=str(mark), MCPGATE_PASS_ENV="KEPT_MARK"))
    other = Gateway(instance_env(redis_url, "i2"))
    held: socket.socket | None = None
    worker: int | None = None
    started: list[Gateway] = []
    try:
        owner.wait_ready()
        other.wait_ready()
        session_id = opened_on(owner)
        holding = opened_on(owner)  # its call in flight holds the owner's drain open
        held = socket.create_connection(("127.0.0.1", owner.port), timeout=30)
        slow = call_body(1, "slow", seconds=120)
        head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(slow)}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in {**HEADERS, "Mcp-Session-Id": holding}.items())
        held.sendall(head.encode() + b"\r\n" + slow)
        assert wait_for(mark.exists, 30), owner.log_tail()
        [worker] = direct_children(owner.proc.pid)
        kids = direct_children(worker)
        owner.proc.send_signal(signal.SIGTERM)  # a graceful stop: the master closes its listener, the worker drains
        assert wait_for(lambda: "mcpgate: draining (1 requests in flight" in owner.log(), 30), owner.log_tail()
        os.kill(worker, signal.SIGSTOP)  # it accepts nothing from now on
        directory = redis.Redis.from_url(redis_url)
        assert directory.get(STOPPING_PREFIX + "i1") == f"http://127.0.0.1:{owner.port}".encode()  # said as it began
        assert wait_for(lambda: process_state(worker) == "T", 10)
        replies: list[Any] = []
        headers = {**HEADERS, "Mcp-Session-Id": session_id}
        forwarded = threading.Thread(
            target=lambda: replies.append(
                other.request("POST", body=call_body(8, "echo", message="on"), headers=headers)
            )
        )
        forwarded.start()
        assert wait_for(lambda: unread_in_accept_queue(owner.port), 30), other.log_tail()
        os.kill(worker, signal.SIGKILL)  # its listener, the last copy, closes with the request queued
        forwarded.join(60)
        [reply] = replies
        assert reply.status == 200, (reply, other.log_tail())
        assert reply.json().get("result", {}).get("content", [{}])[0].get("text") == "on", (
            reply.json(),
            other.log_tail(),
        )
        log = other.log()
        assert "instance i1 stopped with a request forwarded there unread: served here" in log, other.log_tail()
        assert "taken over" in log, other.log_tail()
        assert not wait_dead([worker, *kids]), "the owner's worker or its children outlived it"
        owner.stop()
        again = Gateway(instance_env(redis_url, "i1"), port=owner.port)  # a later life at the same address
        started.append(again)
        again.wait_ready()
        assert directory.get(STOPPING_PREFIX + "i1") is None  # the earlier life's mark is not this one's
    finally:
        if worker is not None and process_state(worker) not in ("", "Z", "X"):
            os.kill(worker, signal.SIGKILL)
        if held is not None:
            held.close()
        for gw in [owner, other, *started]:
            gw.stop()
