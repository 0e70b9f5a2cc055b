"""The forwarder's and the owner's per-call work made lighter (issue 24), each the same as before in what it says:

- an owner's reply head whole in the connection's buffer is parsed in one go (exchange.py, whole_head), and reads
  as the same status and headers as the line-by-line reading, which still takes any other (a bare LF, a head in
  pieces, one past the line bound);
- a forward's head is remembered by what it is made of (forward.py, head_of), the same bytes as exchange.message
  makes, and a header that would break the framing is still refused;
- a forwarded value's MAC is still the HMAC-SHA256 of the same JSON array (core/session_ids);
- the owner's probe of a forwarded POST's connection (the worker's peer_gone, serve/front/connection.py) never
  yields to the hub (gevent's select did, a whole turn of the loop on every forwarded call) and reads any
  descriptor (select.select refuses one past 1023).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import resource
import socket
from collections.abc import Iterator

import gevent
import pytest

from mcpgate.core import session_ids
from mcpgate.serve.cluster import exchange as exchange_module
from mcpgate.serve.cluster.exchange import OwnerConnection, message
from mcpgate.serve.cluster.forward_heads import head_of
from mcpgate.serve.front.peer_probe import peer_gone as closed
from tests.serve.test_cluster_forward_exchange import Owner, exchange, send

REPLIES = [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Folded: one\r\n two\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.0 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\nX-Bare: lf\r\nContent-Length: 2\r\n\r\n{}",  # a bare LF: read a line at a time
    b"HTTP/1.1 200 OK\r\n\r\n",
]


@pytest.fixture
def connect() -> Iterator[list[Owner]]:
    owners: list[Owner] = []
    yield owners
    for owner in owners:
        owner.close()


@pytest.mark.parametrize("reply", REPLIES)
def test_a_whole_head_reads_as_its_lines_read(
    connect: list[Owner], reply: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_once = exchange(connect, reply)
    whole = send(at_once)
    monkeypatch.setattr(OwnerConnection, "whole_head", lambda self: None)
    by_lines = exchange(connect, reply)
    lines = send(by_lines)
    assert whole == lines
    assert whole.status in (200, 202, 404)
    for conn in (at_once, by_lines):
        conn.close()


def test_a_head_past_the_line_bound_is_read_by_lines(connect: list[Owner], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange_module, "MAX_LINE", 64)
    conn = exchange(connect, b"HTTP/1.1 200 OK\r\n" + b"X-A: 12345678\r\n" * 8 + b"Content-Length: 0\r\n\r\n")
    assert send(conn).status == 200  # each line within the bound, the head past it
    conn.close()


def test_a_remembered_head_is_the_message_head() -> None:
    headers = [("Host", "mcp.test"), ("Accept", "application/json"), ("Mcp-Session-Id", "i1.x.y")]
    first = head_of("POST", "/a b/mcp", "session_id=1", headers)
    assert first == message("POST", "/a%20b/mcp?session_id=1", headers, b"")[:-2]
    assert head_of("POST", "/a b/mcp", "session_id=1", list(headers)) is first
    with pytest.raises(ValueError):
        head_of("POST", "/mcp", "", [("X-A", "1\r\nX-Injected: 2")])


def test_the_forwarded_mac_is_the_same_hmac_of_the_same_array() -> None:
    key = b"k" * 32
    request = session_ids.ForwardedRequest("POST", "/mcp/é", 'a="b"', "i1.s.m", b'{"id":1}')
    value = session_ids.forwarded("user@example.com", "i2", 1_700_000_000.7, request, key, "3~ab", "ch~7")
    principal, sender, stamp, nonce, view, mac = value.split(".")
    digest = base64.urlsafe_b64encode(hashlib.sha256(request.body).digest()).rstrip(b"=").decode()
    array = ["mcpgate-forwarded-3", principal, sender, stamp, nonce, view, "POST", "/mcp/é", 'a="b"', "i1.s.m", digest]
    text = json.dumps(array, separators=(",", ":"))
    expected = base64.urlsafe_b64encode(hmac.new(key, text.encode(), hashlib.sha256).digest()[:16]).rstrip(b"=")
    assert mac == expected.decode()
    assert (sender, stamp, nonce, view) == ("i2", "1700000000", "ch~7", "3~ab")
    checked = session_ids.forwarded_check(value, 1_700_000_001, request, key)
    assert checked is not None and checked.principal == "user@example.com"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("i1", True),
        ("a" * 32, True),
        ("a" * 33, False),
        ("", False),
        ("i-1_x", True),
        ("i.1", False),
        ("i1\n", False),
        ("\u0661", False),
        ("\u00e9", False),
    ],
)
def test_an_instance_name_is_still_ascii_letters_digits_dash_underscore(name: str, valid: bool) -> None:
    assert session_ids.valid_instance(name) is valid


def test_the_carrier_probe_never_yields_to_the_hub() -> None:
    ours, theirs = socket.socketpair()
    ran: list[bool] = []
    other = gevent.spawn(ran.append, True)  # runs only when this greenlet yields
    try:
        assert closed(ours) is False
        theirs.sendall(b"P")  # a pipelined request: still there
        assert closed(ours) is False
        assert not ran, "the probe yielded to the hub"
        theirs.close()
        assert ours.recv(1) == b"P"
        assert closed(ours) is True
    finally:
        other.kill()
        ours.close()


def test_the_probe_reads_a_descriptor_past_select_s_bound() -> None:
    """select.select refuses a descriptor of 1024 or more (FD_SETSIZE): a worker holding 2,000 streams has them."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= 1100:
        pytest.skip(f"the descriptor limit here ({soft}) allows no descriptor past 1024")
    ours, theirs = socket.socketpair()
    high = socket.socket(fileno=fcntl.fcntl(ours.fileno(), fcntl.F_DUPFD, 1100))
    try:
        assert high.fileno() >= 1100
        assert closed(high) is False
        theirs.close()
        assert closed(high) is True
    finally:
        high.close()
        ours.close()
