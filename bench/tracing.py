"""What tracing costs: one gateway (gunicorn, one gevent worker, the bundled demo child) served to 16 clients
calling tools/call echo in 2025 sessions, with MCPGATE_TRACING off and on (100 % sampling, the OTLP/HTTP exporter
sending to a sink on loopback that decodes nothing and answers 200), in alternating rounds.

Prints, per setting, the median throughput (calls/s) and the worker's CPU time per call (its utime + stime from
/proc, the BatchSpanProcessor's export greenlet included), and the ratio on/off. The clients run in processes of
their own (4 x 4 threads) on the same machine, so on a small machine they compete with the gateway for CPU:
compare the two settings within one run only.

    python bench/tracing.py [--seconds 10] [--rounds 3] [--clients 16]
    python bench/tracing.py --profile /tmp/traced.txt   # one traced round under py-spy: the worker's top functions
    python bench/tracing.py --in-process   # CPU per traced request of the request path's hooks and of encoding
    python bench/tracing.py --together     # both gateways at once, 8 clients each: a busy machine loads both alike
    OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.01 python bench/tracing.py   # 1 % sampled
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def sink() -> tuple[str, list[int]]:
    """An OTLP/HTTP endpoint that takes every export (bytes counted, nothing decoded), on kept connections."""
    got = [0, 0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections kept, as a collector keeps them

        def do_POST(self) -> None:
            got[0] += len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            got[1] += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1/traces", got


def post(conn: http.client.HTTPConnection, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict, bytes]:
    conn.request("POST", "/mcp", json.dumps(body), headers)
    reply = conn.getresponse()
    return reply.status, dict(reply.getheaders()), reply.read()


def client(port: int, until: float, counts: Any, index: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    status, headers, _ = post(conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, HEADERS)
    session = {**HEADERS, "Mcp-Session-Id": headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
    post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    done, n = 0, 1
    while time.monotonic() < until:
        call = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "x"}},
        }
        status, _, _ = post(conn, call, session)
        done += status == 200
        n += 1
    counts[index] = done
    conn.request("DELETE", "/mcp", headers=session)
    conn.getresponse().read()


def process(port: int, until: float, counts: Any, first: int, threads: int) -> None:
    workers = [threading.Thread(target=client, args=(port, until, counts, first + i)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def worker_cpu(master: int) -> float:
    """The gunicorn worker's CPU seconds (utime + stime)."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    fields = Path(f"/proc/{children[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spy(worker: int, seconds: float, target: str) -> subprocess.Popen[bytes]:
    """py-spy (the venv's) sampling the worker for `seconds`, its raw (collapsed) stacks into `target`."""
    py_spy = Path(sys.executable).parent / "py-spy"
    args = [str(py_spy), "record", "--pid", str(worker), "--rate", "250", "--format", "raw"]
    return subprocess.Popen([*args, "--duration", str(int(seconds)), "-o", target], stdout=subprocess.DEVNULL)


def start(traced: bool, endpoint: str) -> tuple[subprocess.Popen[bytes], int, Any]:
    """A gateway (gunicorn, one worker) with tracing on or off, answering /healthz: its process, port, log."""
    port = gateways.free_port()
    env = {**os.environ, "MCPGATE_TRACING": "true" if traced else "false", "MCPGATE_MAX_SESSIONS": "200"}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    env.setdefault("OTEL_TRACES_SAMPLER", "always_on")  # 100 % unless the caller's OTEL_* say otherwise
    log = open(f"/tmp/mcpgate-bench-tracing-{port}.log", "wb")  # noqa: SIM115
    gw = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            return gw, port, log
        except OSError:
            if time.monotonic() > deadline:
                stop(gw, log)
                raise
            time.sleep(0.1)


def stop(gw: subprocess.Popen[bytes], log: Any) -> None:
    gw.send_signal(signal.SIGTERM)
    gw.wait(timeout=30)
    log.close()


def load(ports: list[int], seconds: float, clients: int) -> tuple[list[int], float]:
    """`clients` (4 a process) calling for `seconds`, spread evenly over `ports`: the calls each port served."""
    counts = multiprocessing.Array("i", clients)
    per = max(1, clients // 4)
    began = time.monotonic()
    until = began + seconds
    procs = [
        multiprocessing.Process(
            target=process, args=(ports[first // per % len(ports)], until, counts, first, min(per, clients - first))
        )
        for first in range(0, clients, per)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.monotonic() - began
    served = [0] * len(ports)
    for index in range(clients):
        served[index // per % len(ports)] += counts[index]
    return served, elapsed


def round_of(
    traced: bool, endpoint: str, seconds: float, clients: int, profile: str | None = None
) -> tuple[float, float]:
    gw, port, log = start(traced, endpoint)
    try:
        start_cpu = worker_cpu(gw.pid)
        worker = int(Path(f"/proc/{gw.pid}/task/{gw.pid}/children").read_text().split()[0])
        sampler = spy(worker, seconds, profile) if profile else None
        (calls,), elapsed = load([port], seconds, clients)
        cpu = worker_cpu(gw.pid) - start_cpu
        if sampler is not None:
            sampler.wait(timeout=60)
        return calls / elapsed, cpu / max(calls, 1) * 1e6
    finally:
        stop(gw, log)


def together(endpoint: str, seconds: float, clients: int) -> tuple[float, float]:
    """Both gateways at once, half the clients each: whatever else loads the machine loads both alike. The
    on/off ratios of calls served and of the worker's CPU per call."""
    (off, off_port, off_log), (on, on_port, on_log) = start(False, endpoint), start(True, endpoint)
    try:
        cpu = [worker_cpu(off.pid), worker_cpu(on.pid)]
        (off_calls, on_calls), _ = load([off_port, on_port], seconds, clients)
        off_cpu, on_cpu = worker_cpu(off.pid) - cpu[0], worker_cpu(on.pid) - cpu[1]
        return on_calls / max(off_calls, 1), (off_cpu / max(off_calls, 1)) / max(on_cpu / max(on_calls, 1), 1e-9)
    finally:
        stop(off, off_log)
        stop(on, on_log)


def in_process(repeats: int = 7, calls: int = 2000) -> None:
    """The tracing hooks a traced 2025 tools/call meets (begin, the guard's and the session's steps, to_child,
    finish), its spans' encoding, and an unsampled request's hooks: CPU per request, the best of `repeats`."""
    os.environ.setdefault("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    from mcpgate.core import jsonrpc
    from mcpgate.observe import otlp_wire, tracing

    tracing.setup(True, "bench")
    ended: list[Any] = []
    tracing.TRACER.on_end = lambda trace, spans: ended.append(trace)
    raw = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}}}'
    answer = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}],"isError":false}}'
    session = {"HTTP_MCP_SESSION_ID": "a" * 32, "REQUEST_METHOD": "POST"}
    unsampled = {**session, "HTTP_TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}

    def hooks(environ: dict[str, Any]) -> None:
        tracing.begin(environ, "default")
        with tracing.step(environ, "mcpgate.guard"):
            pass
        message = tracing.to_child(environ, jsonrpc.parse(raw))
        with tracing.step(environ, "mcpgate.session"):
            pass
        tracing.finish(environ, 200, answer, [jsonrpc.raw_bytes(message)])

    def parse_only(environ: dict[str, Any]) -> None:
        jsonrpc.raw_bytes(jsonrpc.parse(raw))

    def best(run: Any) -> float:
        times = []
        for _ in range(repeats):
            ended.clear()
            began = time.process_time()
            for _ in range(calls):
                run(dict(environ_of[run]))
            times.append((time.process_time() - began) / calls * 1e6)
        return min(times)

    environ_of: dict[Any, dict[str, Any]] = {hooks: session, parse_only: session}
    floor = best(parse_only)
    traced = best(hooks) - floor
    spans = list(ended)
    encode = []
    for _ in range(repeats):
        began = time.process_time()
        otlp_wire.request(tracing.TRACER.head, [trace.encoded() for trace in spans])
        encode.append((time.process_time() - began) / len(spans) * 1e6)
    environ_of[hooks] = unsampled
    quiet = best(hooks) - floor
    print(f"per traced request: {traced:.1f} us on the request path, {min(encode):.1f} us encoding (export greenlet)")
    print(f"per unsampled request: {quiet:.1f} us; the parse the hooks are measured against: {floor:.1f} us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--profile", metavar="FILE", help="one traced round under py-spy; its summary printed")
    parser.add_argument("--in-process", action="store_true", help="only the hooks' and the encoding's CPU, in process")
    parser.add_argument("--together", action="store_true", help="off and on served at once, half the clients each")
    args = parser.parse_args()
    if args.in_process:
        in_process()
        return 0
    endpoint, got = sink()
    if args.together:
        for _ in range(args.rounds):
            calls, cpu = together(endpoint, args.seconds, args.clients)
            print(f"together: calls on/off {calls:.1%}, worker CPU per call off/on {cpu:.1%}", flush=True)
        return 0
    if args.profile:
        rate, cpu = round_of(True, endpoint, args.seconds, args.clients, args.profile)
        print(f"tracing on : {rate:8.0f} calls/s, {cpu:6.0f} us worker CPU/call (under py-spy)")
        import report

        print(report.profile_summary(Path(args.profile), top=40))
        return 0
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for traced in (False, True):
            rate, cpu = round_of(traced, endpoint, args.seconds, args.clients)
            results[traced].append((rate, cpu))
            print(
                f"tracing {'on ' if traced else 'off'}: {rate:8.0f} calls/s, {cpu:6.0f} us worker CPU/call", flush=True
            )
    off = statistics.median(r for r, _ in results[False])
    on = statistics.median(r for r, _ in results[True])
    off_cpu = statistics.median(c for _, c in results[False])
    on_cpu = statistics.median(c for _, c in results[True])
    print(f"median off: {off:.0f} calls/s ({off_cpu:.0f} us/call); on: {on:.0f} calls/s ({on_cpu:.0f} us/call)")
    print(f"throughput on/off: {on / off:.1%}; exports received: {got[1]} ({got[0]} bytes)")
    pairs = [on_ / off_ for (off_, _), (on_, _) in zip(results[False], results[True], strict=True)]
    cpu = [off_ / on_ for (_, off_), (_, on_) in zip(results[False], results[True], strict=True)]
    print(  # each round's pair ran back to back: its ratio is less moved by the machine's other load
        f"per round, throughput on/off: {', '.join(f'{r:.1%}' for r in pairs)} "
        f"(median {statistics.median(pairs):.1%}); "
        f"worker CPU per call off/on: median {statistics.median(cpu):.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
