"""Per-call latency through mcpgate-relay versus the same calls made directly over HTTP.

    /work/venv/bin/python bench/bench_relay.py [--calls N] [--warmup N]

Starts the SDK Streamable HTTP fixture server (tests/relay/fixtures/upstream.py) on
a free loopback port, then times N sequential `tools/call add` requests two ways:

  relay   raw NDJSON written to `python -m mcpgate.relay URL` stdin, the reply line
          read from its stdout (no SDK on the host side);
  direct  http.client on one keep-alive connection to the upstream, the same
          session headers the relay sends, the reply read from the SSE body.

Prints the median, p90 and mean per call for each and the relay's overhead.
Figures only: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "relay" / "fixtures" / "upstream.py"
VERSION = "2025-11-25"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"upstream did not start on port {port}")


def message(msg_id: int | None, method: str, params: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if msg_id is not None:
        out["id"] = msg_id
    if params is not None:
        out["params"] = params
    return out


INIT_PARAMS = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
CALL_PARAMS = {"name": "add", "arguments": {"a": 2, "b": 3}}


def bench_relay(url: str, calls: int, warmup: int) -> list[float]:
    proc = subprocess.Popen([sys.executable, "-m", "mcpgate.relay", url], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def exchange(obj: dict[str, Any]) -> dict[str, Any]:
        stdin.write(json.dumps(obj).encode() + b"\n")
        stdin.flush()
        reply: dict[str, Any] = json.loads(stdout.readline())
        return reply

    try:
        exchange(message(0, "initialize", INIT_PARAMS))
        stdin.write(json.dumps(message(None, "notifications/initialized")).encode() + b"\n")
        times = []
        for i in range(1, warmup + calls + 1):
            started = time.perf_counter()
            reply = exchange(message(i, "tools/call", CALL_PARAMS))
            elapsed = time.perf_counter() - started
            assert reply["result"]["structuredContent"] == {"result": 5}, reply
            if i > warmup:
                times.append(elapsed)
        return times
    finally:
        stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _post(conn: http.client.HTTPConnection, path: str, obj: dict[str, Any],
          headers: dict[str, str]) -> tuple[http.client.HTTPResponse, bytes]:
    conn.request("POST", path, body=json.dumps(obj).encode(), headers={
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    return resp, resp.read()


def _sse_reply(body: bytes) -> dict[str, Any]:
    for line in body.decode().splitlines():
        if line.startswith("data:") and line[5:].strip():
            reply: dict[str, Any] = json.loads(line[5:])
            if "id" in reply:
                return reply
    return json.loads(body)  # type: ignore[no-any-return]


def bench_direct(port: int, calls: int, warmup: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        resp, _ = _post(conn, "/mcp", message(0, "initialize", INIT_PARAMS), {})
        session = {"Mcp-Session-Id": resp.headers["Mcp-Session-Id"], "MCP-Protocol-Version": VERSION}
        _post(conn, "/mcp", message(None, "notifications/initialized"), session)
        times = []
        for i in range(1, warmup + calls + 1):
            started = time.perf_counter()
            _, body = _post(conn, "/mcp", message(i, "tools/call", CALL_PARAMS), session)
            reply = _sse_reply(body)
            elapsed = time.perf_counter() - started
            assert reply["result"]["structuredContent"] == {"result": 5}, reply
            if i > warmup:
                times.append(elapsed)
        conn.request("DELETE", "/mcp", headers=session)
        conn.getresponse().read()
        return times
    finally:
        conn.close()


def summary(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return (f"{name:<7} median {statistics.median(times) * 1000:7.3f} ms   p90 {p90 * 1000:7.3f} ms   "
            f"mean {statistics.mean(times) * 1000:7.3f} ms   ({len(times)} calls)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        upstream = subprocess.Popen([sys.executable, str(UPSTREAM), "--port", str(port), "--state-dir", state],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            direct = bench_direct(port, args.calls, args.warmup)
            relay = bench_relay(f"http://127.0.0.1:{port}/mcp", args.calls, args.warmup)
        finally:
            os.kill(upstream.pid, signal.SIGTERM)
            upstream.wait(10)
    print("sequential tools/call add against the SDK Streamable HTTP server (127.0.0.1)")
    print(summary("direct", direct))
    print(summary("relay", relay))
    overhead = statistics.median(relay) - statistics.median(direct)
    print(f"relay overhead per call (median): {overhead * 1000:.3f} ms")


if __name__ == "__main__":
    main()
