"""Slow clients against one gateway: the worker's RSS and a bystander session's call latency, without and with
200 slow clients connected (python bench/slow_clients.py [--clients 200] [--seconds 30]).

The slow clients, a third of each kind, reconnecting whenever the gateway closes them so that the count
stays up: slowloris heads (a header byte a second, never complete), slow bodies (a POST whose 1 MiB body
comes 1 KiB a second), and readers that never read (a 1 MB tools/call result each, receive window 4 KiB).
The bystander is one session making sequential echo calls over a keep-alive connection. The gateway runs
with its defaults (MCPGATE_HEADER_TIMEOUT 10 s, MCPGATE_BODY_TIMEOUT 30 s, MCPGATE_KEEPALIVE_TIMEOUT 5 s).
Figures are printed, never asserted (tests/serve/test_hostile.py asserts the behaviour).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ACCEPT = "application/json, text/event-stream"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gateway(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PORT", None)
    args = [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"slow-clients-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the gateway did not start")


def worker_rss_mib(master: int) -> float:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    total = 0
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


class Session:
    """One MCP session over one keep-alive connection."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        reply = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        self.headers["Mcp-Session-Id"] = reply.getheader("Mcp-Session-Id") or ""
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        reply.read()
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).read()

    def post(self, message: dict[str, Any]) -> http.client.HTTPResponse:
        self.conn.request("POST", "/mcp", json.dumps(message), self.headers)
        return self.conn.getresponse()

    def echo_ms(self, n: int) -> float:
        start = time.perf_counter()
        call = {"name": "echo", "arguments": {"message": "bystander"}}
        reply = self.post({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call})
        body = reply.read()
        if reply.status != 200 or b"bystander" not in body:
            raise RuntimeError(f"bystander call failed: {reply.status} {body[:200]!r}")
        return (time.perf_counter() - start) * 1000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def measure(session: Session, master: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    peak = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        latencies.append(session.echo_ms(len(latencies) + 1))
        if len(latencies) % 20 == 0:
            peak = max(peak, worker_rss_mib(master))
        time.sleep(0.01)
    peak = max(peak, worker_rss_mib(master))
    return {"calls": len(latencies), "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99), "rss": peak}


class SlowClients:
    """`count` slow clients on threads, each reconnecting when closed; counts how often the gateway closed one."""

    def __init__(self, port: int, count: int, session_headers: dict[str, str]) -> None:
        self.port, self.stop, self.closed_by_gateway = port, threading.Event(), 0
        self.session_headers = session_headers
        self.lock = threading.Lock()
        kinds = [self.slowloris, self.slow_body, self.never_reads]
        self.threads = [threading.Thread(target=self.run, args=(kinds[i % 3],), daemon=True) for i in range(count)]

    def __enter__(self) -> SlowClients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)

    def run(self, kind: Any) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    if kind(sock):
                        with self.lock:
                            self.closed_by_gateway += 1
            except OSError:
                with self.lock:
                    self.closed_by_gateway += 1
            self.stop.wait(0.5)

    def closed(self, sock: socket.socket) -> bool:
        sock.settimeout(0.001)
        try:
            return sock.recv(65536) == b""
        except TimeoutError:
            return False
        except OSError:
            return True

    def slowloris(self, sock: socket.socket) -> bool:
        head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n" + "X-Pad: slow\r\n" * 200
        for byte in head.encode():
            if self.stop.wait(1.0):
                return False
            sock.sendall(bytes([byte]))
            if self.closed(sock):
                return True
        return False

    def slow_body(self, sock: socket.socket) -> bool:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAccept: {ACCEPT}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {1024 * 1024}\r\n\r\n"
        )
        sock.sendall(head.encode())
        for _ in range(1024):
            if self.stop.wait(1.0):
                return False
            sock.sendall(b" " * 1024)
            if self.closed(sock):
                return True
        return False

    def never_reads(self, sock: socket.socket) -> bool:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        call = {"name": "bytes", "arguments": {"size": 1_000_000}}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode()
        fields = "".join(f"{k}: {v}\r\n" for k, v in self.session_headers.items())
        head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{fields}Content-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        self.stop.wait()  # never reads
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    port = free_port()
    gateway = start_gateway(port)
    try:
        bystander = Session(port)
        victims = Session(port)  # the session the readers that never read call
        bystander.echo_ms(0)
        quiet = measure(bystander, gateway.pid, args.seconds)
        with SlowClients(port, args.clients, victims.headers) as slow:
            time.sleep(2)  # let them connect
            loaded = measure(bystander, gateway.pid, args.seconds)
            closed = slow.closed_by_gateway
        time.sleep(3)
        after = worker_rss_mib(gateway.pid)
        print(
            f"bystander, no slow clients:  {quiet['calls']:.0f} calls, p50 {quiet['p50']:.2f} ms, "
            f"p99 {quiet['p99']:.2f} ms; worker RSS {quiet['rss']:.1f} MiB"
        )
        print(
            f"bystander, {args.clients} slow clients: {loaded['calls']:.0f} calls, p50 {loaded['p50']:.2f} ms, "
            f"p99 {loaded['p99']:.2f} ms; worker RSS peak {loaded['rss']:.1f} MiB"
        )
        print(
            f"slow connections closed by the gateway in {args.seconds:g} s: {closed}; "
            f"worker RSS 3 s after they left: {after:.1f} MiB"
        )
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        try:
            gateway.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(gateway.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
