"""Resumable SSE streams on the Streamable HTTP endpoint: event ids naming their session and stream, the
2025-11-25 priming event and retry hint, GET with Last-Event-ID replaying a dropped POST or GET stream, and a
4xx JSON-RPC error for an id that cannot be resumed; then the official SDK client resuming by itself through
a proxy that cuts its stream mid-call."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client

from mcpgate.core.wire import LAST_EVENT_ID
from tests.support import Gateway, call, free_port, open_session

HANG_GUARD = 30
SETTINGS = {"MCPGATE_SSE_AFTER": "0.2", "MCPGATE_KEEPALIVE": "0.5", "MCPGATE_SSE_RETRY": "0.25"}


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    gateway = Gateway(SETTINGS)
    try:
        gateway.wait_ready()
        yield gateway
    finally:
        gateway.stop()


class Sse:
    """One streamed HTTP reply, read event by event (comments skipped)."""

    def __init__(self, gw: Gateway, method: str, headers: dict[str, str], body: Any = None) -> None:
        self.deadline = time.monotonic() + HANG_GUARD  # keepalives would keep a wrong stream open for ever
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        self.conn.request(method, "/mcp", body=json.dumps(body).encode() if body else None, headers=headers)
        self.resp = self.conn.getresponse()

    def event(self) -> dict[str, Any] | None:
        """The next event's fields (data parsed when not empty), None at the end of the body."""
        fields: dict[str, Any] = {}
        while True:
            assert time.monotonic() < self.deadline, f"the stream did not end within {HANG_GUARD} s"
            line = self.resp.readline().decode()
            if not line:
                return None
            line = line.rstrip("\n")
            if not line:
                if "data" in fields:
                    fields["message"] = json.loads(fields["data"]) if fields["data"] else None
                    return fields
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = value

    def message(self) -> dict[str, Any] | None:
        """The next event that carries a message (priming events skipped)."""
        while (event := self.event()) is not None and event["message"] is None:
            pass
        return event

    def rest(self) -> list[dict[str, Any]]:
        events = []
        while (event := self.event()) is not None:
            events.append(event)
        return events

    def close(self) -> None:
        self.conn.close()


def get_headers(headers: dict[str, str], last_event_id: str | None = None) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k != "Content-Type"}
    out["Accept"] = "text/event-stream"
    if last_event_id is not None:
        out[LAST_EVENT_ID] = last_event_id
    return out


def slow_call(steps: int, seconds: float, msg_id: int = 7) -> dict[str, Any]:
    request = call("slow", {"seconds": seconds, "steps": steps}, msg_id)
    request["params"]["_meta"] = {"progressToken": f"tok{msg_id}"}
    return request


def progress_of(events: list[dict[str, Any]]) -> list[int]:
    return [e["message"]["params"]["progress"] for e in events if e["message"] and "params" in e["message"]]


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2025-03-26"])
def test_every_event_has_an_id_naming_its_stream(gw: Gateway, version: str) -> None:
    headers = open_session(gw, version)
    reply = Sse(gw, "POST", headers, slow_call(3, 0.3))
    try:
        events = reply.rest()
    finally:
        reply.close()
    assert reply.resp.status == 200 and reply.resp.getheader("content-type") == "text/event-stream"
    if version == "2025-11-25":  # the priming event: an id, the retry hint, empty data
        priming = events.pop(0)
        assert priming["data"] == "" and priming["id"].endswith("-0") and priming["retry"] == "250", priming
    else:
        assert all(e["data"] and "retry" not in e for e in events), events
    assert progress_of(events) == [1, 2, 3] and events[-1]["message"]["id"] == 7
    ids = [e["id"] for e in events]
    assert len(set(ids)) == len(ids) and [i.rsplit("-", 1)[1] for i in ids] == ["1", "2", "3", "4"], ids
    assert len({i.rsplit("-", 1)[0] for i in ids}) == 1, ids  # one stream


def test_a_dropped_post_stream_resumes_where_the_client_stopped(gw: Gateway) -> None:
    headers = open_session(gw)
    reply = Sse(gw, "POST", headers, slow_call(6, 1.2))
    priming, first = reply.event(), reply.event()
    reply.close()  # the connection drops; the call goes on
    assert priming and first and progress_of([first]) == [1], (priming, first)

    resumed = Sse(gw, "GET", get_headers(headers, first["id"]))
    try:
        assert resumed.resp.status == 200, resumed.resp.read()
        events = [e for e in resumed.rest() if e["message"]]
    finally:
        resumed.close()
    assert progress_of(events) == [2, 3, 4, 5, 6], events  # nothing lost, nothing twice
    assert events[-1]["message"]["id"] == 7 and events[-1]["message"]["result"]["content"][0]["text"].startswith("done")
    seqs = [int(e["id"].rsplit("-", 1)[1]) for e in events]
    assert seqs == list(range(2, 8)), seqs

    again = Sse(gw, "GET", get_headers(headers, events[-2]["id"]))  # the answered stream is still kept
    try:
        assert [e["message"]["id"] for e in again.rest() if e["message"]] == [7]
    finally:
        again.close()


def test_a_dropped_get_stream_resumes_and_goes_on(gw: Gateway) -> None:
    headers = open_session(gw)
    notify = call("notify_change", {}, 3)
    stream = Sse(gw, "GET", get_headers(headers))
    try:
        assert stream.event()["data"] == ""  # type: ignore[index]  # priming
        assert gw.request("POST", body=notify, headers=headers).status == 200
        first = stream.event()
    finally:
        stream.close()
    assert first and first["message"]["method"] == "notifications/tools/list_changed", first

    resumed = Sse(gw, "GET", get_headers(headers, first["id"]))
    try:
        assert resumed.resp.status == 200
        got = [resumed.message()]  # what the dropped connection did not deliver
        assert gw.request("POST", body=notify, headers=headers).status == 200
        got += [resumed.message(), resumed.message()]  # then the stream goes on
    finally:
        resumed.close()
    methods = [e["message"]["method"] for e in got if e and e["message"]]
    assert methods == [f"notifications/{kind}/list_changed" for kind in ("resources", "tools", "resources")], got
    ids = [first["id"]] + [e["id"] for e in got if e]
    assert len(set(ids)) == len(ids) and len({i.rsplit("-", 1)[0] for i in ids}) == 1, ids


def test_ids_that_cannot_be_resumed_get_a_json_rpc_error(gw: Gateway) -> None:
    headers = open_session(gw)
    reply = Sse(gw, "POST", headers, slow_call(2, 0.3))
    try:
        known = [e["id"] for e in reply.rest()]
    finally:
        reply.close()
    tag, stream, _ = known[-1].split("-")
    other = open_session(gw)
    cases = {
        "not one of ours": (headers, "banana"),
        "an unknown stream": (headers, f"{tag}-{int(stream) + 40}-1"),
        "an event not sent yet": (headers, f"{tag}-{stream}-99"),
        "another session's": (other, known[-1]),
    }
    for what, (session_headers, last_event_id) in cases.items():
        reply = gw.request("GET", headers=get_headers(session_headers, last_event_id))
        assert reply.status == 400, (what, reply)  # never 404: that would tell the client its session is gone
        error = reply.json()["error"]
        assert error["code"] == -32600 and "Cannot resume" in error["message"], (what, error)
        assert error["data"] == {"lastEventId": last_event_id, "expired": False}, (what, error)
    assert gw.request("GET", headers=get_headers(headers, known[-2])).status == 200  # a good one still resumes


def test_an_id_past_the_replay_buffer_is_refused(gateway_factory: Any) -> None:
    gw = gateway_factory({**SETTINGS, "MCPGATE_REPLAY_EVENTS": "3"})
    headers = open_session(gw)
    reply = Sse(gw, "POST", headers, slow_call(10, 0.5))
    try:
        events = reply.rest()
    finally:
        reply.close()
    ids = [e["id"] for e in events]  # the priming event (seq 0), progress 1..10 and the response (seq 11)
    assert len(ids) == 12, ids
    expired = gw.request("GET", headers=get_headers(headers, ids[7]))
    assert expired.status == 400 and expired.json()["error"]["data"]["expired"] is True, expired
    kept = Sse(gw, "GET", get_headers(headers, ids[8]))
    try:
        assert [e["id"] for e in kept.rest() if e["message"]] == ids[9:]
    finally:
        kept.close()


class CuttingProxy:
    """A loopback TCP proxy that, once, drops the connection whose reply carries the `after`-th
    `marker` (after forwarding that event whole); every other connection passes untouched."""

    def __init__(self, upstream_port: int, marker: bytes, after: int) -> None:
        self.upstream_port, self.marker, self.after = upstream_port, marker, after
        self.port = free_port()
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, watch: bool) -> None:
        seen = b""
        try:
            while data := source.recv(65536):
                if watch and not self.cut.is_set():
                    seen += data
                    if seen.count(self.marker) >= self.after:
                        end = seen.find(b"\n\n", seen.rfind(self.marker)) + 2
                        sink.sendall(data[: len(data) - (len(seen) - end)] if end > 1 else data)
                        self.cut.set()
                        break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def test_the_sdk_client_resumes_a_cut_tool_call_by_itself(gw: Gateway) -> None:
    proxy = CuttingProxy(gw.port, b"notifications/progress", after=2)
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def main() -> Any:
        with anyio.fail_after(60):
            async with Client(f"http://127.0.0.1:{proxy.port}/mcp", mode="legacy") as client:
                return await client.call_tool("slow", {"seconds": 2.0, "steps": 8}, progress_callback=on_progress)

    try:
        result = anyio.run(main)
    finally:
        proxy.close()
    assert proxy.cut.is_set()  # the stream was cut mid-call
    assert result.content[0].text == "done after 2 s"
    assert progress == [1, 2, 3, 4, 5, 6, 7, 8]  # the events sent while it was cut were replayed
    assert "resumed stream" in gw.log()
