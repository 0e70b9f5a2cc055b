"""/metrics (MCPGATE_METRICS) through gunicorn: scraped while traffic runs, its figures checked against what the
test sent and received (requests by server, method and status, latency counts, bytes in and out, sessions and
children, an SSE stream open and its bytes as they go, child exits by cause, a stream dropped, a write queue
closed); the bearer token, the guard's Origin check, and 404 when metrics are off."""

from __future__ import annotations

import http.client
import json
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcpgate.core.sse import encode_comment
from mcpgate.core.wire import SESSION_ID
from tests.support import (
    FIXTURES,
    HEADERS,
    Gateway,
    Reply,
    call,
    init_body,
    modern_body,
    post_modern,
    serving,
    wait_for,
)

TOKEN = "scrape-me-0123456789abcdef"
CALLS = 30  # tools/call per session while the scrapes run
SESSIONS = 3

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(gw: Gateway, token: str | None = TOKEN) -> Samples:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reply = gw.request("GET", "/metrics", headers=headers)
    assert reply.status == 200, reply
    assert reply.content_type.startswith("text/plain"), reply
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the samples of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= set(got))


class Traffic:
    """Requests to one gateway, with every byte sent and received (bodies) counted."""

    def __init__(self, gw: Gateway, path: str = "/mcp") -> None:
        self.gw, self.path = gw, path
        self.sent = self.received = 0
        self._lock = threading.Lock()

    def request(self, method: str, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
        data = body if isinstance(body, bytes | type(None)) else json.dumps(body).encode()
        reply = self.gw.request(method, self.path, body=data, headers=headers)
        with self._lock:
            self.sent += len(data or b"")
            self.received += len(reply.body)
        return reply

    def modern(self, body: dict[str, Any]) -> Reply:
        data = json.dumps(body).encode()
        reply = post_modern(self.gw, body)
        with self._lock:
            self.sent += len(data)
            self.received += len(reply.body)
        return reply

    def session(self, version: str = "2025-11-25") -> dict[str, str]:
        reply = self.request("POST", init_body(version), HEADERS)
        assert reply.status == 200, reply
        headers = {**HEADERS, SESSION_ID: reply.headers[SESSION_ID.lower()], "MCP-Protocol-Version": version}
        assert self.request("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers).status == 202
        return headers


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serving(
        {"MCPGATE_METRICS": "true", "MCPGATE_METRICS_TOKEN": TOKEN, "MCPGATE_KEEPALIVE": "600"}, behind=True
    ) as gw:
        yield gw


def test_the_figures_are_what_the_traffic_was(gw: Gateway) -> None:
    before = scrape(gw)
    traffic = Traffic(gw)
    sessions = [traffic.session() for _ in range(SESSIONS)]

    def drive(headers: dict[str, str]) -> None:
        for n in range(CALLS):
            reply = traffic.request("POST", call("echo", {"message": f"m{n}"}, msg_id=n + 10), headers)
            assert reply.status == 200, reply
        assert traffic.request("POST", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers).status == 200
        assert traffic.request("POST", {"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers).status == 200

    scraped: list[float] = []
    with ThreadPoolExecutor(SESSIONS) as pool:
        running = [pool.submit(drive, headers) for headers in sessions]
        while True:  # scrapes while the traffic runs: each a consistent, growing picture
            scraped.append(total(scrape(gw), "mcpgate_requests_total", method="tools/call"))
            if all(future.done() for future in running):
                break
        for future in running:
            future.result()
    assert scraped == sorted(scraped), scraped

    other = traffic.request("POST", {"jsonrpc": "2.0", "id": 3, "method": "vendor/thing"}, sessions[0])
    invalid = traffic.request("POST", b"{not json", sessions[0])
    stale = traffic.request("POST", call("echo", {"message": "?"}), {**sessions[0], SESSION_ID: "no-such-session"})
    modern = traffic.modern(modern_body(4, "tools/list"))
    assert (other.status, invalid.status, stale.status, modern.status) == (200, 400, 404, 200)

    after = scrape(gw)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "mcpgate_requests_total"
    assert grew(requests, server="default", method="initialize", status="200") == SESSIONS
    assert grew(requests, server="default", method="notifications/initialized", status="202") == SESSIONS
    assert grew(requests, server="default", method="tools/call", status="200") == SESSIONS * CALLS
    assert grew(requests, server="default", method="tools/list", status="200") == SESSIONS + 1  # and the modern one
    assert grew(requests, server="default", method="ping", status="200") == SESSIONS
    assert grew(requests, server="default", method="other", status="200") == 1
    assert grew(requests, server="default", method="invalid", status="400") == 1
    assert grew(requests, server="default", method="tools/call", status="404") == 1
    assert total(after, requests) - total(before, requests) == SESSIONS * (CALLS + 4) + 4
    seconds = "mcpgate_request_seconds_count"
    assert grew(seconds, server="default", method="tools/call") == SESSIONS * CALLS + 1
    assert grew("mcpgate_bytes_in_total", server="default") == traffic.sent
    assert grew("mcpgate_bytes_out_total", server="default") == traffic.received
    assert value(after, "mcpgate_sessions", server="default") == SESSIONS
    children = value(after, "mcpgate_children", server="default")  # the sessions' and the pooled ones
    assert SESSIONS + 1 <= children <= gw.request("GET", "/healthz").json()["children"]  # (a spare may start)
    assert scraped[-1] <= value(after, requests, server="default", method="tools/call", status="200")


def test_an_sse_stream_is_counted_while_it_is_open(gw: Gateway) -> None:
    traffic = Traffic(gw)
    headers = traffic.session("2025-06-18")  # its GET stream begins with a comment (no priming event)
    before = scrape(gw)
    get_headers = {k: v for k, v in headers.items() if k != "Content-Type"}
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("GET", "/mcp", headers={**get_headers, "Accept": "text/event-stream"})
        resp = conn.getresponse()
        assert resp.status == 200
        first = encode_comment("stream open")
        assert resp.read(len(first)) == first

        during = scrape(gw)  # the stream is open: it is counted, and so are the bytes it sent so far
        assert (
            value(during, "mcpgate_sse_streams_open", server="default")
            == value(before, "mcpgate_sse_streams_open", server="default") + 1
        )
        sent = value(during, "mcpgate_bytes_out_total", server="default")
        assert sent - value(before, "mcpgate_bytes_out_total", server="default") == len(first)
        assert (
            value(during, "mcpgate_requests_total", server="default", method="GET", status="200")
            == value(before, "mcpgate_requests_total", server="default", method="GET", status="200") + 1
        )

        deleted = traffic.request("DELETE", None, {SESSION_ID: headers[SESSION_ID]})
        assert deleted.status == 204, deleted
        resp.read()  # the stream ends with its session
    finally:
        conn.close()

    def settled() -> bool:
        now = scrape(gw)
        closed = value(now, "mcpgate_sse_streams_open", server="default") == value(
            before, "mcpgate_sse_streams_open", server="default"
        )
        stopped = value(now, "mcpgate_child_exits_total", server="default", cause="stopped") > value(
            before, "mcpgate_child_exits_total", server="default", cause="stopped"
        )
        return closed and stopped

    assert wait_for(settled), scrape(gw)
    now = scrape(gw)
    assert value(now, "mcpgate_requests_total", server="default", method="DELETE", status="204") >= 1
    assert value(now, "mcpgate_request_seconds_count", server="default", method="GET") >= 1


def test_the_token_guards_the_metrics_and_the_guard_applies(gw: Gateway) -> None:
    assert gw.request("GET", "/metrics").status == 401
    refused = gw.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"})
    assert refused.status == 401 and refused.headers["www-authenticate"].startswith("Bearer"), refused
    assert gw.request("GET", "/metrics", headers={"Authorization": f"Basic {TOKEN}"}).status == 401
    assert gw.request("GET", "/metrics", headers={"Authorization": f"bearer {TOKEN}"}).status == 200
    foreign = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
    assert gw.request("GET", "/metrics", headers=foreign).status == 403
    assert TOKEN not in gw.log()


def test_no_metrics_unless_asked(gateway_factory: Any) -> None:
    plain = gateway_factory({})
    assert plain.request("GET", "/metrics").status == 404


NO_READER = """\
import json, sys, time
line = sys.stdin.readline()
msg = json.loads(line)
result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {}, "serverInfo": {"name": "n"}}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\\n")
sys.stdout.flush()
time.sleep(600)  # and never read stdin again
"""


def test_exits_drops_and_closes_are_counted_per_server(gateway_factory: Any, tmp_path: Path) -> None:
    no_reader = tmp_path / "no_reader.py"
    no_reader.write_text(NO_READER)
    servers = {
        "demo": {"command": sys.executable, "args": ["-m", "mcpgate.demo_server"]},
        "crashy": {"command": sys.executable, "args": [str(FIXTURES / "crashy_server.py")]},
        "flood": {"command": sys.executable, "args": [str(FIXTURES / "flood_server.py")]},
        "stuck": {"command": sys.executable, "args": [str(no_reader)]},
    }
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    env = {
        "MCPGATE_CONFIG": str(config),
        "MCPGATE_METRICS": "true",
        "MCPGATE_STREAM_STALL_TIMEOUT": "1",
        "MCPGATE_WRITE_QUEUE_BYTES": "100000",
        "MCPGATE_CLOSE_TIMEOUT": "0.5",
        "MCPGATE_TERM_TIMEOUT": "0.5",
        "MCPGATE_KEEPALIVE": "600",
    }
    gw = gateway_factory(env)

    crashy = Traffic(gw, "/servers/crashy/mcp")
    crashy.request("POST", call("crash", {}), crashy.session())
    demo = Traffic(gw, "/servers/demo/mcp")
    demo.session()

    flood = Traffic(gw, "/servers/flood/mcp")
    flood_headers = flood.session()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    try:  # a GET stream nobody reads, flooded: ended for not being read
        get_headers = {k: v for k, v in flood_headers.items() if k != "Content-Type"}
        conn.request("GET", flood.path, headers={**get_headers, "Accept": "text/event-stream"})
        assert conn.getresponse().status == 200
        flood.request("POST", call("flood", {"count": 100, "size": 1024 * 1024}), flood_headers)
        assert wait_for(lambda: "a client stopped reading its stream" in gw.log(), timeout=60)
    finally:
        conn.close()

    stuck = Traffic(gw, "/servers/stuck/mcp")
    stuck_headers = stuck.session()
    big = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x" * 90_000}}
    for _ in range(3):  # the child reads none of it: its stdin queue overflows
        stuck.request("POST", big, stuck_headers)

    def counted() -> bool:
        now = scrape(gw, None)
        return (
            value(now, "mcpgate_child_exits_total", server="crashy", cause="crash") == 1
            and value(now, "mcpgate_write_queue_closes_total", server="stuck") == 1
            and total(now, "mcpgate_child_exits_total", server="stuck") == 1
        )

    assert wait_for(counted, timeout=30), scrape(gw, None)
    now = scrape(gw, None)
    assert value(now, "mcpgate_stream_queue_drops_total", server="flood") >= 1
    assert value(now, "mcpgate_sessions", server="crashy") == 0
    assert value(now, "mcpgate_sessions", server="demo") == 1
    assert value(now, "mcpgate_children", server="demo") == 1
    assert total(now, "mcpgate_child_exits_total", server="demo") == 0
    assert total(now, "mcpgate_requests_total", server="crashy", method="tools/call") == 1
    assert value(now, "mcpgate_requests_total", server="demo", method="initialize", status="200") == 1
    assert value(now, "mcpgate_bytes_in_total", server="demo") == demo.sent
    assert value(now, "mcpgate_bytes_out_total", server="demo") == demo.received
    assert value(now, "mcpgate_stream_queue_drops_total", server="demo") == 0
