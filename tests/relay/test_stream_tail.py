"""A reply stream's end after the response (relay/http_client.EventStream, relay/fast_http.FastReply.ended_now):
read at once when it is already there, so the connection goes back without a greenlet of its own; otherwise read
on by the same stream, which keeps the events a read decoded after the response (none is lost)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mcpgate.core import http1
from mcpgate.core.sse import SseDecoder
from mcpgate.relay.fast_http import Connection, FastReply, Headers
from mcpgate.relay.http_client import EventStream
from mcpgate.relay.http_routes import HttpReply
from tests.support.relay import (
    INITIALIZED,
    Scripted,
    ScriptedServer,
    Seen,
    initialize,
    mcp_default,
    result,
    sse_event,
    sse_reply,
)

REPLY = b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
NOTE = b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"after"}}\n\n'
END = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Kept:
    def __init__(self) -> None:
        self.given: list[Connection] = []

    def give_back(self, conn: Connection) -> None:
        self.given.append(conn)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def stream_of(sock: socket.socket, headers: list[tuple[str, str]], owner: Kept) -> EventStream:
    framing = http1.framing(200, 1, headers, "POST")
    raw = FastReply(Connection(sock), owner, 200, "OK", Headers(headers), framing)
    return EventStream(HttpReply(raw), SseDecoder(max_event_bytes=1 << 20), "http://upstream/mcp")


CHUNKED = [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked")]

# (name, the reply's headers, its body's bytes sent before the response is read, ended_now then,
#  bytes sent after, ended_now then (None: not asked), the events read on after the response)
CASES: list[tuple[str, list[tuple[str, str]], bytes, bool, bytes, bool | None, int]] = [
    ("the end came with the response", CHUNKED, chunk(REPLY) + END, True, b"", None, 0),
    ("the end not sent yet", CHUNKED, chunk(REPLY), False, END, True, 0),
    ("half the end", CHUNKED, chunk(REPLY) + END[:3], False, END[3:], True, 0),
    ("an event in a chunk after", CHUNKED, chunk(REPLY) + chunk(NOTE) + END, False, b"", None, 1),
    ("an event after it in the same chunk", CHUNKED, chunk(REPLY + NOTE) + END, False, b"", None, 1),
    ("trailers after the last chunk", CHUNKED, chunk(REPLY) + b"0\r\nX-Trailer: 1\r\n\r\n", False, b"", None, 0),
    ("an extension on the last chunk", CHUNKED, chunk(REPLY) + b"0;x=1\r\n\r\n", False, b"", None, 0),
    ("a length read to its end", [("Content-Length", str(len(REPLY)))], REPLY, True, b"", None, 0),
]


@pytest.mark.parametrize(
    ("headers", "before", "ended", "after", "ended_after", "more"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_end_after_the_response(
    pair: tuple[socket.socket, socket.socket],
    headers: list[tuple[str, str]],
    before: bytes,
    ended: bool,
    after: bytes,
    ended_after: bool | None,
    more: int,
) -> None:
    ours, theirs = pair
    owner = Kept()
    stream = stream_of(ours, headers, owner)
    theirs.sendall(before)
    assert json.loads(next(stream).data) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert stream.ended_now() is ended
    if after:
        theirs.sendall(after)
    if ended_after is not None:
        assert stream.ended_now() is ended_after
        ended = ended_after
    if not ended:  # read on: every event after the response, then the body's end
        rest = list(stream)
        assert [json.loads(event.data)["method"] for event in rest] == ["notifications/message"] * more
    assert stream.resp.raw.isclosed()
    stream.resp.raw.release_conn()
    assert len(owner.given) == 1  # read to its end: the connection goes back for the next request


def test_a_body_to_the_connections_end_is_never_ended_now(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    stream = stream_of(ours, [("Content-Type", "text/event-stream")], Kept())
    theirs.sendall(REPLY)
    next(stream)
    assert stream.ended_now() is False  # only the connection's end says so, and it cannot be seen without waiting
    theirs.shutdown(socket.SHUT_WR)
    assert list(stream) == []


NOTE_MESSAGE = json.loads(NOTE[len(b"data: ") :])
ANSWER = {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}


def two_after_a_call(raw_relay: Any, reply: Callable[[Seen], bytes], version: str) -> list[dict[str, Any]]:
    """The first two messages the host gets after a tools/call the upstream answers with `reply(seen)` as an SSE
    stream (a session of `version` opened first)."""

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        return sse_reply(reply(seen)) if seen.rpc_method == "tools/call" else mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        relay.send(initialize(1, version))
        relay.read_reply(1)
        relay.send(INITIALIZED)
        relay.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x", "arguments": {}}})
        got = [relay.read(), relay.read()]
        relay.finish()
    return got


def test_an_event_after_the_response_in_the_same_write_reaches_the_host(raw_relay: Any) -> None:
    def reply(seen: Seen) -> bytes:
        return sse_event(result(seen.json, {"content": []})) + sse_event(NOTE_MESSAGE)  # one write

    # the note was lost before: the reader stopped at the response and dropped the rest of that read
    assert two_after_a_call(raw_relay, reply, "2025-11-25") == [ANSWER, NOTE_MESSAGE]


def test_a_batchs_message_after_the_response_reaches_the_host(raw_relay: Any) -> None:
    def reply(seen: Seen) -> bytes:  # a 2025-03-26 server may send a JSON-RPC batch as one event
        return b"data: " + json.dumps([result(seen.json, {"content": []}), NOTE_MESSAGE]).encode() + b"\n\n"

    # the note was lost before: the reader returned at the response, in the middle of the batch
    got = two_after_a_call(raw_relay, reply, "2025-03-26")
    assert ANSWER in got and NOTE_MESSAGE in got
