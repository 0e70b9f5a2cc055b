"""What tracing costs: one gateway (gunicorn, one gevent worker, the bundled demo child) served to 16 clients
calling tools/call echo in 2025 sessions, with MCPGATE_TRACING off and on (100 % sampling, the OTLP/HTTP exporter
sending to a sink on loopback that decodes nothing and answers 200), in alternating rounds.

A mode is off, on (100 % sampled), unsampled (on, OTEL_TRACES_SAMPLER=always_off: the hooks alone) or burn (a
control: off, and a process of its own spending --burn ms of CPU every 40 ms, 1.5 by default: about 10 us a call
at 3,500 calls/s, the order of what tracing adds, on no process of the request's path). With
--base, every mode also runs a gateway importing mcpgate from that tree, in the same rounds (A/B in one run).
With --together, every gateway is served at once (the clients split evenly), so that whatever else loads the
machine loads them alike. bench/tracing_seq.py measures the worker's CPU per call with sequential calls instead.

Prints, per setting, the median throughput (calls/s) and the worker's CPU time per call (its utime + stime from
/proc), the span export process's, and the CPU per call of every process of the round (the worker, the MCP
children, the export process, the clients, this process with the sink), each round's against head's off. The
clients run in processes of their own (4 x 4 threads) on the same machine, so on a small machine they compete
with the gateway for CPU: compare the settings within one run only. A round that saturates the machine serves
cores / (every process's CPU per call) calls/s, so that figure says where a lost call per second went even when
other work on the machine moves the calls/s.

A worker's CPU per call falls as its calls/s rise (its hub reads more requests per wake-up): in one run of
2026-12-04 a traced worker took 108 us a call at 3,214 calls/s and 84 at 4,808, an untraced one 77 at 4,785. So a
median of CPU per call over rounds that served different calls/s (and --together's, where the gateways' shares of
the clients' calls differed from 980 to 13,880 in one 8 s round) mixes tracing's cost with batching's: compare rounds
of like calls/s, or the sequential calls of bench/tracing_seq.py (CPU, page faults, context switches and system
calls per call), or instructions (bench/instructions.py).

    python bench/tracing.py [--seconds 10] [--rounds 3] [--clients 16] [--modes off,unsampled,on]
    python bench/tracing.py --base /tmp/base   # each mode from that source tree too (`git archive HEAD | tar -x`)
    python bench/tracing.py --profile /tmp/traced.txt [--profile-mode unsampled]   # one round under py-spy
    python bench/tracing.py --in-process   # CPU per traced request of the request path's hooks and of encoding
    python bench/tracing.py --gc [--modes off,on]   # the worker's cyclic collections per 1,000 calls, and their CPU
    python bench/tracing.py --together [--base /tmp/base]   # every gateway at once, the clients split evenly
    OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.01 python bench/tracing.py   # 1 % sampled
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import resource
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


def children_cpu(master: int) -> tuple[float, float]:
    """The CPU seconds (utime + stime) of the worker's children: the MCP children's (those that ended and were
    waited for, and those running), and the span export process's (mcpgate/observe/span_export.py; none in a tree
    that encodes and posts in the worker)."""
    worker = Path(f"/proc/{master}/task/{master}/children").read_text().split()[0]
    waited = Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()
    found = [(int(waited[13]) + int(waited[14])) / os.sysconf("SC_CLK_TCK"), 0.0]
    for child in Path(f"/proc/{worker}/task/{worker}/children").read_text().split():
        try:
            export = b"mcpgate.observe.span_export" in Path(f"/proc/{child}/cmdline").read_bytes()
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[export] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found[0], found[1]


def spy(worker: int, seconds: float, target: str) -> subprocess.Popen[bytes]:
    """py-spy (the venv's) sampling the worker for `seconds`, its raw (collapsed) stacks into `target`: only while
    it holds the GIL (a gevent hub waiting in its C loop does not, and would count as busy)."""
    py_spy = Path(sys.executable).parent / "py-spy"
    args = [str(py_spy), "record", "--pid", str(worker), "--rate", "250", "--format", "raw", "--gil"]
    return subprocess.Popen([*args, "--duration", str(int(seconds)), "-o", target], stdout=subprocess.DEVNULL)


MODES = ("off", "unsampled", "on", "burn")
BURN = """
import sys, time
burst, data = float(sys.argv[1]) / 1000, list(range(20000))
while True:
    began = time.perf_counter()
    while time.perf_counter() - began < burst:
        sum(data[i] for i in range(0, 20000, 7))
    time.sleep(0.04)
"""  # a burst of CPU every 40 ms, touching nothing of the gateway's (mode burn)


def burner(milliseconds: float) -> subprocess.Popen[bytes]:
    """A process spending `milliseconds` of CPU every 40 ms, apart from the gateway (mode burn: tracing off)."""
    return subprocess.Popen([sys.executable, "-c", BURN, str(milliseconds)])


GC_HOOKS = """
import mcpgate.gunicorn_config as _gateway
from mcpgate.gunicorn_config import *  # noqa: F403

_SEEN = {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0], "began": 0.0}


def _noted(phase, info):
    import time

    if phase == "start":
        _SEEN["began"] = time.thread_time()
    else:
        _SEEN["collections"][info["generation"]] += 1
        _SEEN["seconds"][info["generation"]] += time.thread_time() - _SEEN["began"]


def _written(signum, frame):
    import json, os

    with open(%r + ".tmp", "w") as f:
        json.dump(_SEEN, f)
    os.replace(%r + ".tmp", %r)


def post_worker_init(worker):
    _gateway.post_worker_init(worker)
    import gc, signal

    gc.callbacks.append(_noted)
    signal.signal(signal.SIGUSR2, _written)
"""  # (--gc) the worker's collections by generation and the CPU they took; SIGUSR2 writes them to a file


def collections_of(worker: int, written: Path) -> dict[str, list[float]]:
    """The worker's collections so far (--gc): by generation, how many and their CPU seconds."""
    written.unlink(missing_ok=True)
    os.kill(worker, signal.SIGUSR2)
    deadline = time.monotonic() + 20
    while not written.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the worker wrote no collections")
        time.sleep(0.05)
    return json.loads(written.read_text())  # type: ignore[no-any-return]


def start(
    mode: str | bool, endpoint: str, tree: Path | None = None, config: Path | None = None
) -> tuple[subprocess.Popen[bytes], int, Any]:
    """A gateway (gunicorn, one worker) in a mode (True: on, False: off), mcpgate imported from `tree` (None: this
    checkout), with gunicorn's `config` (None: mcpgate's), answering /healthz: its process, port, log."""
    mode = {True: "on", False: "off"}.get(mode, mode) if isinstance(mode, bool) else mode
    port = gateways.free_port()
    env = {**os.environ, "MCPGATE_TRACING": str(mode in ("on", "unsampled")).lower(), "MCPGATE_MAX_SESSIONS": "200"}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    env.setdefault("OTEL_TRACES_SAMPLER", "always_on")  # 100 % unless the caller's OTEL_* say otherwise
    if mode == "unsampled":
        env["OTEL_TRACES_SAMPLER"] = "always_off"
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    log = open(f"/tmp/mcpgate-bench-tracing-{port}.log", "wb")  # noqa: SIM115
    hooks = ["-c", str(config)] if config is not None else []
    gw = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *hooks, "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"],
        cwd=tree or ROOT,
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
            break
        except OSError:
            if time.monotonic() > deadline:
                stop(gw, log)
                raise
            time.sleep(0.1)
    if mode in ("on", "unsampled"):  # the export process's start (its imports) left out of the rounds
        export, deadline = -1.0, time.monotonic() + 15
        while export != children_cpu(gw.pid)[1] and time.monotonic() < deadline:
            export = children_cpu(gw.pid)[1]
            time.sleep(0.3)
    return gw, port, log


def stop(gw: subprocess.Popen[bytes], log: Any) -> None:
    gw.send_signal(signal.SIGTERM)
    gw.wait(timeout=30)
    log.close()


def load(ports: list[int], seconds: float, clients: int) -> tuple[list[int], float]:
    """`clients` calling for `seconds`, spread evenly over `ports` (processes of at most 4 threads, each calling
    one port): the calls each port served."""
    each = max(1, clients // len(ports))
    groups = [(port, first, min(4, each - first)) for port in ports for first in range(0, each, 4)]
    counts = multiprocessing.Array("i", each * len(ports))
    began = time.monotonic()
    until = began + seconds
    procs = [
        multiprocessing.Process(target=process, args=(port, until, counts, ports.index(port) * each + first, threads))
        for port, first, threads in groups
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.monotonic() - began
    served = [sum(counts[n * each : (n + 1) * each]) for n in range(len(ports))]
    return served, elapsed


def own_cpu() -> tuple[float, float]:
    """CPU seconds of this process (the sink's threads, the rounds' loop) and of its children waited for (the
    clients' processes)."""
    used = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return used[0].ru_utime + used[0].ru_stime, used[1].ru_utime + used[1].ru_stime


def round_of(
    mode: str | bool,
    endpoint: str,
    seconds: float,
    clients: int,
    profile: str | None = None,
    tree: Path | None = None,
    burn: float = 1.5,
) -> tuple[float, float, float, float]:
    """A round of one gateway: calls/s, its worker's CPU per call and its export process's, and the CPU per call of
    every process of the round (us): the worker, the MCP children, the export process, the clients, this process
    (the sink). On a machine the round saturates, calls/s follow the last: cores / CPU per call."""
    gw, port, log = start(mode, endpoint, tree)
    try:
        start_cpu, (start_child, start_export) = worker_cpu(gw.pid), children_cpu(gw.pid)
        start_own = own_cpu()
        worker = int(Path(f"/proc/{gw.pid}/task/{gw.pid}/children").read_text().split()[0])
        sampler = spy(worker, seconds, profile) if profile else None
        burning = burner(burn) if mode == "burn" else None
        try:
            (calls,), elapsed = load([port], seconds, clients)
        finally:
            if burning is not None:
                burning.kill()
        time.sleep(0.5)  # the export process's last frames read (a partial batch waits), the ended child waited for
        cpu, (child, export) = worker_cpu(gw.pid) - start_cpu, children_cpu(gw.pid)
        sink, clients_cpu = (now - before for now, before in zip(own_cpu(), start_own, strict=True))
        if burning is not None:  # waited only now: its CPU is none of the round's processes'
            burning.wait()
        if sampler is not None:
            sampler.wait(timeout=60)
        per = 1e6 / max(calls, 1)
        child, export = (child - start_child) * per, (export - start_export) * per
        total = cpu * per + child + export + (clients_cpu + sink) * per
        print(
            f"    the MCP child {child:.0f} us/call, clients {clients_cpu * per:.0f}, this process (the sink) "
            f"{sink * per:.0f}; every process {total:.0f} us/call",
            flush=True,
        )
        return calls / elapsed, cpu * per, export, total
    finally:
        stop(gw, log)


def gc_round(mode: str, endpoint: str, seconds: float, clients: int, tree: Path | None) -> tuple[float, list[float]]:
    """A round with the worker's collections noted (--gc): calls/s, and per 1,000 calls the collections of each
    generation, then the collector's CPU per call (us)."""
    folder = Path(f"/tmp/mcpgate-bench-tracing-gc-{os.getpid()}")
    folder.mkdir(exist_ok=True)
    written, config = folder / "collections.json", folder / "gc_hooks.py"
    config.write_text(GC_HOOKS % ((str(written),) * 3))
    gw, port, log = start(mode, endpoint, tree, config)
    try:
        worker = int(Path(f"/proc/{gw.pid}/task/{gw.pid}/children").read_text().split()[0])
        before = collections_of(worker, written)
        (calls,), elapsed = load([port], seconds, clients)
        after = collections_of(worker, written)
    finally:
        stop(gw, log)
    per = 1000 / max(calls, 1)
    made = [(a - b) * per for a, b in zip(after["collections"], before["collections"], strict=True)]
    cpu = sum(after["seconds"]) - sum(before["seconds"])
    return calls / elapsed, [*made, cpu * 1e3 * per]


def gc_rounds(endpoint: str, args: argparse.Namespace, trees: dict[str, Path | None]) -> None:
    for _ in range(args.rounds):
        for tree, path in trees.items():
            for mode in modes_of(args):
                rate, (gen0, gen1, gen2, cpu) = gc_round(mode, endpoint, args.seconds, args.clients, path)
                print(
                    f"{tree:4} {mode:9}: {rate:8.0f} calls/s; collections per 1,000 calls: generation 0 {gen0:.1f}, "
                    f"1 {gen1:.2f}, 2 {gen2:.2f}; the collector {cpu:.2f} us CPU/call",
                    flush=True,
                )


def together(
    endpoint: str, seconds: float, clients: int, configs: list[tuple[str, Path | None]]
) -> list[tuple[float, float]]:
    """Every (mode, tree) gateway at once, the clients split evenly: whatever else loads the machine loads them
    alike. Each one's calls served and its worker's CPU per call (us)."""
    started = [start(mode, endpoint, tree) for mode, tree in configs]
    try:
        cpu = [worker_cpu(gw.pid) for gw, _, _ in started]
        calls, _ = load([port for _, port, _ in started], seconds, clients)
        spent = [worker_cpu(gw.pid) - before for (gw, _, _), before in zip(started, cpu, strict=True)]
        return [(n, used / max(n, 1) * 1e6) for n, used in zip(calls, spent, strict=True)]
    finally:
        for gw, _, log in started:
            stop(gw, log)


def in_process(repeats: int = 7, calls: int = 2000) -> None:
    """The tracing hooks a traced 2025 tools/call meets (begin, the guard's and the session's steps, to_child,
    finish), its spans' encoding, and an unsampled request's hooks: CPU per request, the best of `repeats`."""
    os.environ.setdefault("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    from mcpgate.core import jsonrpc
    from mcpgate.observe import otlp_wire, span_pipe, tracing

    tracing.setup(True, "bench")
    export = tracing.TRACER
    kept: list[tuple[Any, int]] = []  # the ended Traces, with their spans
    if hasattr(span_pipe, "Kept"):  # Trace.end queues them itself: a stand-in's queue keeps them
        tracing.TRACER = span_pipe.Kept()
        kept = tracing.TRACER.queue
    else:  # a tree before that: its on_end
        export.on_end = lambda trace, spans: kept.append((trace, spans))
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
            kept.clear()
            began = time.process_time()
            for _ in range(calls):
                run(dict(environ_of[run]))
            times.append((time.process_time() - began) / calls * 1e6)
        return min(times)

    environ_of: dict[Any, dict[str, Any]] = {hooks: session, parse_only: session}
    floor = best(parse_only)
    traced = best(hooks) - floor
    spans = [trace for trace, _ in kept]
    piped, encode = [], []
    if hasattr(export, "head"):  # a tree that encodes in the worker (before the export process)
        for _ in range(repeats):
            began = time.process_time()
            parts: list[bytes] = []
            for trace in spans:
                trace.encode_into(parts)
            otlp_wire.request(export.head, [b"".join(parts)])
            encode.append((time.process_time() - began) / len(spans) * 1e6)
        piped = encode
    else:  # the worker writes records (observe/span_pipe.py), the export process encodes them (span_export.py)
        import marshal

        from mcpgate.observe import span_export

        try:
            from mcpgate.observe.span_records import record
        except ImportError:  # a tree before observe/span_records.py
            record = span_pipe.record

        from mcpgate.observe import span_records

        head = span_export.resource_head("bench")
        payload = b""
        for _ in range(repeats):
            began = time.process_time()
            if hasattr(span_records, "payload"):  # packed records, their shapes numbered (once per export process)
                shapes = span_records.Shapes()
                payload = span_records.payload([(trace, 4) for trace in spans], shapes)[0]
            else:  # a tree before them: a record of each Trace's fields
                payload = marshal.dumps([record(trace) for trace in spans])
            piped.append((time.process_time() - began) / len(spans) * 1e6)
            began = time.process_time()
            span_export.encoded_batch(head, payload)
            encode.append((time.process_time() - began) / len(spans) * 1e6)
    environ_of[hooks] = unsampled
    quiet = best(hooks) - floor
    export.shutdown()
    print(f"per traced request: {traced:.1f} us on the request path, {min(piped):.1f} us its batch in the worker")
    print(f"    {min(encode):.1f} us encoding (the export process; before it, the worker's export greenlet)")
    print(f"per unsampled request: {quiet:.1f} us; the parse the hooks are measured against: {floor:.1f} us")


def rounds(endpoint: str, args: argparse.Namespace, trees: dict[str, Path | None]) -> None:
    """Each round runs every (tree, mode) once, back to back; the medians, and each round's ratio to its own off."""
    modes = modes_of(args)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {(t, m): [] for t in trees for m in modes}
    exported: dict[tuple[str, str], list[float]] = {(t, m): [] for t in trees for m in modes}
    every: dict[tuple[str, str], list[float]] = {(t, m): [] for t in trees for m in modes}
    for _ in range(args.rounds):
        for tree, path in trees.items():
            for mode in modes:
                rate, cpu, export, total = round_of(
                    mode, endpoint, args.seconds, args.clients, tree=path, burn=args.burn
                )
                results[tree, mode].append((rate, cpu))
                exported[tree, mode].append(export)
                every[tree, mode].append(total)
                print(
                    f"{tree:4} {mode:9}: {rate:8.0f} calls/s, {cpu:6.0f} us worker CPU/call, {export:4.0f} us export "
                    "process",
                    flush=True,
                )
    base = ("head", "off") if ("head", "off") in results else next(iter(results))
    for (tree, mode), got in results.items():
        rate = statistics.median(r for r, _ in got)
        cpu = statistics.median(c for _, c in got)
        pairs = [r / b for (r, _), (b, _) in zip(got, results[base], strict=True)]
        extra = [c - b for (_, c), (_, b) in zip(got, results[base], strict=True)]
        total = [c - b for c, b in zip(every[tree, mode], every[base], strict=True)]
        print(
            f"median {tree:4} {mode:9}: {rate:6.0f} calls/s, {cpu:4.0f} us/call; against {'/'.join(base)} per round: "
            f"throughput {statistics.median(pairs):.1%} ({', '.join(f'{r:.0%}' for r in pairs)}), "
            f"CPU {statistics.median(extra):+.0f} us/call, export process "
            f"{statistics.median(exported[tree, mode]):.0f} us/call; every process "
            f"{statistics.median(every[tree, mode]):.0f} us/call, {statistics.median(total):+.0f} "
            f"({', '.join(f'{d:+.0f}' for d in total)})",
            flush=True,
        )


def served_together(endpoint: str, args: argparse.Namespace, trees: dict[str, Path | None]) -> None:
    """Rounds of every (tree, mode) served at once; per round and in the median, each one's calls and CPU per call
    against the first's (head's off when there is one)."""
    configs = [(tree, mode) for tree in trees for mode in modes_of(args)]
    if any(mode == "burn" for _, mode in configs):
        raise SystemExit("--together: a burner would load every gateway alike (mode burn is for rounds)")
    first = configs.index(("head", "off")) if ("head", "off") in configs else 0
    got: list[list[tuple[float, float]]] = [[] for _ in configs]
    for _ in range(args.rounds):
        served = together(endpoint, args.seconds, args.clients, [(mode, trees[tree]) for tree, mode in configs])
        for n, result in enumerate(served):
            got[n].append(result)
        print(
            " | ".join(f"{t} {m}: {c:.0f} calls, {u:.0f} us" for (t, m), (c, u) in zip(configs, served, strict=True)),
            flush=True,
        )
    for (tree, mode), results in zip(configs, got, strict=True):
        calls = [c / max(b, 1) for (c, _), (b, _) in zip(results, got[first], strict=True)]
        cpu = [u - b for (_, u), (_, b) in zip(results, got[first], strict=True)]
        print(
            f"median {tree:4} {mode:9}: {statistics.median(u for _, u in results):4.0f} us/call; against "
            f"{'/'.join(configs[first])}: calls {statistics.median(calls):.1%} "
            f"({', '.join(f'{r:.0%}' for r in calls)}), CPU {statistics.median(cpu):+.1f} us/call "
            f"({', '.join(f'{d:+.0f}' for d in cpu)})",
            flush=True,
        )


def modes_of(args: argparse.Namespace) -> list[str]:
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if any(mode not in MODES for mode in modes):
        raise SystemExit(f"--modes: each one of {', '.join(MODES)}")
    return modes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--modes", default="off,on", help=f"a comma list of {', '.join(MODES)} (default off,on)")
    parser.add_argument("--base", metavar="DIR", type=Path, help="also run each mode from this source tree")
    parser.add_argument("--head", metavar="DIR", type=Path, help="the tree to measure (default: this checkout)")
    parser.add_argument("--burn", type=float, default=1.5, help="mode burn's ms of CPU each 40 ms (default 1.5)")
    parser.add_argument("--profile", metavar="FILE", help="one round under py-spy; its summary printed")
    parser.add_argument("--profile-mode", default="on", choices=MODES, help="the profiled round's mode (on)")
    parser.add_argument("--in-process", action="store_true", help="only the hooks' and the encoding's CPU, in process")
    parser.add_argument("--together", action="store_true", help="every tree and mode served at once, clients split")
    parser.add_argument("--gc", action="store_true", help="the worker's cyclic collections per 1,000 calls, by mode")
    args = parser.parse_args()
    if args.in_process:
        in_process()
        return 0
    endpoint, got = sink()
    if args.profile:
        mode = args.profile_mode
        rate, cpu, export, _ = round_of(mode, endpoint, args.seconds, args.clients, args.profile, args.base)
        print(f"tracing {mode}: {rate:8.0f} calls/s, {cpu:6.0f} us worker CPU/call, {export:.0f} us export (py-spy)")
        import report

        print(report.profile_summary(Path(args.profile), top=40))
        return 0
    head = args.head.resolve() if args.head is not None else None
    trees: dict[str, Path | None] = {"head": head}
    if args.base is not None:
        trees = {"base": args.base.resolve(), "head": head}
    if args.gc:
        gc_rounds(endpoint, args, trees)
    elif args.together:
        served_together(endpoint, args, trees)
    else:
        rounds(endpoint, args, trees)
    print(f"exports received: {got[1]} ({got[0]} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
