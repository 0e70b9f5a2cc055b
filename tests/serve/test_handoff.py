"""Instances of a fleet on one machine hand each other client connections (MCPGATE_HANDOFF_DIR,
serve/front/handoff.py), through gunicorn on one Redis: a session opened on A and called on a connection kept to
B is answered by A, which then has that connection (B handed it once); the bytes B had read behind the head
(a body, a pipelined request) reach A whole; a GET stream and a DELETE go the same way; with A's socket absent or
A draining, B forwards over HTTP as without the handoff."""

from __future__ import annotations

import array
import concurrent.futures
import http.client
import io
import json
import os
import re
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Gateway, call, free_port, open_session, reply_message
from tests.support.fleet import redis_server
from tests.support.gateway import gunicorn_refusal, serving_together
from tests.support.waiting import wait_for

SECRET = "test-handoff-secret-0123456789abcdef"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture(scope="module")
def handoff_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="mcpgate-handoff-") as path:
        os.chmod(path, 0o700)
        yield path


def fleet_env(redis_url: str, directory: str, instance: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_INSTANCE_ID": instance,
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        "MCPGATE_HANDOFF_DIR": directory,
        "MCPGATE_METRICS": "true",
        "MCPGATE_POOL_SPARES": "0",
        "MCPGATE_LOG_LEVEL": "debug",
    }


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def pair(redis_url: str, handoff_dir: str) -> Iterator[tuple[Gateway, Gateway]]:
    with serving_together(fleet_env(redis_url, handoff_dir, "ha"), fleet_env(redis_url, handoff_dir, "hb")) as (a, b):
        yield a, b


def handoffs(gw: Gateway) -> dict[str, int]:
    text = gw.request("GET", "/metrics").body.decode()
    found = dict(re.findall(r'^mcpgate_handoffs_total\{outcome="(\w+)"\} (\S+)$', text, re.M))
    return {outcome: int(float(value)) for outcome, value in found.items()}


def moved(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def answered(conn: http.client.HTTPConnection, session: dict[str, str], body: dict[str, object]) -> dict[str, object]:
    conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers=session)
    reply = conn.getresponse()
    data = reply.read()
    assert reply.status == 200, data
    text = data.decode()
    if reply.getheader("Content-Type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)  # type: ignore[no-any-return]


def test_a_kept_connection_to_b_is_handed_to_a_once_then_served_there(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    session = open_session(a)
    before_a, before_b = handoffs(a), handoffs(b)
    conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=15)
    try:
        first = answered(conn, session, call("echo", {"message": "via b"}))
        assert first["result"]["content"][0]["text"] == "via b", first  # type: ignore[index]
        assert moved(before_b, handoffs(b)) == {"sent": 1}
        assert moved(before_a, handoffs(a)) == {"received": 1}
        second = answered(conn, session, call("add", {"a": 2, "b": 3}, msg_id=2))
        assert second["result"]["structuredContent"] == {"result": 5}, second  # type: ignore[index]
        assert moved(before_b, handoffs(b)) == {"sent": 1}  # served by A on its own, no second handoff
        assert moved(before_a, handoffs(a)) == {"received": 1}
        on_b = open_session(b)  # A now holds the connection: a call of B's session on it is forwarded, not handed back
        third = answered(conn, on_b, call("echo", {"message": "back to b"}, msg_id=3))
        assert third["result"]["content"][0]["text"] == "back to b", third  # type: ignore[index]
        assert moved(before_a, handoffs(a)) == {"received": 1}
        assert moved(before_b, handoffs(b)) == {"sent": 1}
    finally:
        conn.close()
    assert a.request("DELETE", headers=session).status == 204
    assert b.request("DELETE", headers=on_b).status == 204


def test_the_bytes_behind_the_head_arrive_whole(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    session = open_session(a)
    before_a = handoffs(a)
    heads = "".join(f"{name}: {value}\r\n" for name, value in session.items())
    requests = b""
    for msg_id, text in ((1, "first " * 200), (2, "second")):  # one write: the head, its body, the next request
        body = json.dumps(call("echo", {"message": text}, msg_id=msg_id)).encode()
        requests += (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{heads}Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
    with socket.create_connection(("127.0.0.1", b.port), timeout=15) as sock:
        sock.sendall(requests)
        reader = sock.makefile("rb")
        for text in ("first " * 200, "second"):
            status, content_type, data = read_reply(reader)
            assert status == 200, data
            assert reply_message_of(data, content_type)["result"]["content"][0]["text"] == text  # type: ignore[index]
    assert moved(before_a, handoffs(a)) == {"received": 1}
    assert a.request("DELETE", headers=session).status == 204


def read_reply(reader: io.BufferedReader) -> tuple[int, str, bytes]:
    """One reply with a Content-Length off a connection's reader: its status, Content-Type and body."""
    status = int(reader.readline().split()[1])
    fields = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        fields[name.strip().lower()] = value.strip()
    return status, fields.get("content-type", ""), reader.read(int(fields["content-length"]))


def reply_message_of(data: bytes, content_type: str) -> dict[str, object]:
    text = data.decode()
    if content_type.startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)  # type: ignore[no-any-return]


def test_a_get_stream_and_a_delete_are_handed(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    session = open_session(a)
    before_a = handoffs(a)
    stream = http.client.HTTPConnection("127.0.0.1", b.port, timeout=15)
    try:
        sent = {k: v for k, v in session.items() if k != "Content-Type"}
        stream.request("GET", "/mcp", headers={**sent, "Accept": "text/event-stream"})
        reply = stream.getresponse()
        assert reply.status == 200 and reply.getheader("Content-Type", "").startswith("text/event-stream")
        assert moved(before_a, handoffs(a)) == {"received": 1}
        assert a.request("POST", body=call("notify_change", {}, msg_id=4), headers=session).status == 200
        while not (line := reply.readline()).startswith(b"data:") or not line[5:].strip():  # (a priming event's empty)
            assert line, "the stream ended"
        assert json.loads(line[5:])["method"] == "notifications/tools/list_changed"
    finally:
        stream.close()
    gone = b.request("DELETE", headers=session)
    assert gone.status == 204
    assert moved(before_a, handoffs(a)) == {"received": 2}
    assert a.request("POST", body=call("echo", {"message": "x"}), headers=session).status == 404


@pytest.fixture(scope="module")
def plain(redis_url: str) -> Iterator[Gateway]:
    """An instance of the fleet that takes no handed connection (MCPGATE_HANDOFF_DIR empty), "hp"."""
    gw = Gateway(fleet_env(redis_url, "", "hp"))
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


@pytest.mark.parametrize("owner", ["absent", "refusing"])
def test_without_the_owners_handoff_b_forwards(
    pair: tuple[Gateway, Gateway], plain: Gateway, handoff_dir: str, owner: str
) -> None:
    """The owner's socket absent (an instance without the handoff), or one that takes no connection (as a
    draining or full instance's): B forwards over HTTP."""
    _, b = pair
    session = open_session(plain)
    before_b = handoffs(b)
    path = os.path.join(handoff_dir, "hp.sock")
    refusing = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        if owner == "refusing":
            refusing.bind(path)
            refusing.listen(1)
            refusing.settimeout(30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            asked = pool.submit(b.request, "POST", body=call("echo", {"message": "forwarded"}), headers=session)
            if owner == "refusing":  # the sender's message is read, its descriptor closed, no ack
                conn, _ = refusing.accept()
                with conn:
                    _, ancillary, _, _ = conn.recvmsg(16384, socket.CMSG_SPACE(4))
                    for _, _, fds in ancillary:
                        for fd in array.array("i", fds):
                            os.close(fd)
            echoed = reply_message(asked.result(timeout=30))
        assert echoed["result"]["content"][0]["text"] == "forwarded", echoed
    finally:
        refusing.close()
        if os.path.exists(path):
            os.unlink(path)
    assert moved(before_b, handoffs(b)) == {"declined": 1}
    assert plain.request("DELETE", headers=session).status == 204


def test_a_draining_owner_refuses_and_b_forwards(redis_url: str, handoff_dir: str) -> None:
    """A drains (SIGTERM, a slow call in flight): it takes no handed connection, and B forwards the request over
    HTTP to A, which still serves its sessions' requests."""
    a = Gateway({**fleet_env(redis_url, handoff_dir, "hd"), "MCPGATE_GRACEFUL_TIMEOUT": "30"})
    b = Gateway(fleet_env(redis_url, handoff_dir, "he"))
    slow = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
    try:
        a.wait_ready()
        b.wait_ready()
        session = open_session(a)
        before_b = handoffs(b)
        params = {"name": "slow", "arguments": {"seconds": 4, "steps": 8}, "_meta": {"progressToken": "p"}}
        slow.request("POST", "/mcp", body=json.dumps(call("slow", {}) | {"params": params}), headers=session)
        streaming = slow.getresponse()
        assert streaming.status == 200
        while not (line := streaming.readline()).startswith(b"data:") or not line[5:].strip():  # the first progress
            assert line, "the stream ended"
        a.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: a.request("GET", "/healthz").status == 503), a.log_tail()
        echoed = reply_message(b.request("POST", body=call("echo", {"message": "drained"}, msg_id=9), headers=session))
        assert echoed.get("result", {}).get("content", [{}])[0].get("text") == "drained", echoed
        assert moved(before_b, handoffs(b)) == {"declined": 1}
        assert "handed connection refused" in a.log(), a.log_tail()
        assert b"done after 4 s" in streaming.read()
    finally:
        slow.close()
        a.stop()
        b.stop()


def test_a_handoff_directory_others_may_write_stops_the_gateway(redis_url: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = fleet_env(redis_url, str(shared), "hx") | {"MCPGATE_INTERNAL_URL": "http://127.0.0.1:1"}
    out = gunicorn_refusal(env, "-b", f"127.0.0.1:{free_port()}")
    assert f"MCPGATE_HANDOFF_DIR: {shared} may be written by others" in out, out
    assert "Worker failed to boot" in out or "Reason: Worker failed to boot" in out, out
    assert list(shared.iterdir()) == []


def test_many_connections_handed_at_once(pair: tuple[Gateway, Gateway]) -> None:
    """More connections handed at once than the owner reads handoffs at once (RECEIVERS): each answered right."""
    a, b = pair
    session = open_session(a)
    before_a, before_b = handoffs(a), handoffs(b)

    def client(index: int) -> list[str]:
        conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=30)
        try:
            return [
                answered(conn, session, call("echo", {"message": f"{index}-{turn}"}, msg_id=100 * index + turn))[
                    "result"
                ]["content"][0]["text"]  # type: ignore[index]
                for turn in range(2)
            ]
        finally:
            conn.close()

    count = 24
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        texts = list(pool.map(client, range(1, count + 1)))
    assert texts == [[f"{index}-0", f"{index}-1"] for index in range(1, count + 1)]
    sent = moved(before_b, handoffs(b))
    # (one whose ack came later than handoff.TIMEOUT on a loaded machine is forwarded instead: answered all the same)
    assert sent.get("sent", 0) + sent.get("declined", 0) == count and sent.get("sent", 0) > 0, sent
    assert moved(before_a, handoffs(a)).get("received") == sent["sent"]
    assert a.request("DELETE", headers=session).status == 204
