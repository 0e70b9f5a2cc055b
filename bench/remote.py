"""A remote server's cost: a tools/call through the gateway's remote server (an MCPGATE_CONFIG entry with `url`)
against the client calling the same upstream directly.

    python bench/remote.py [--calls 500] [--rounds 3] [--seconds 5] [--clients 16]
    python bench/remote.py --profile /tmp/remote.txt   # one through-gateway round under py-spy: the worker's top
    python bench/remote.py --base /tmp/ab-base   # a second gateway run from another tree: A/B in one run

The upstream is an mcpgate (gunicorn, the gevent worker) fronting the bench's stdio echo child
(bench/child_server.py) at /mcp; the gateway is a second gunicorn whose MCPGATE_CONFIG publishes that upstream as
the url entry `up` (/servers/up/mcp, 2025 Streamable HTTP, one upstream session per client session). Each round
makes `calls` sequential tools/call echo on a 2025 session straight to the upstream, then as many on a session of
the gateway's remote server, each on one kept-alive http.client connection (bench/mcpclient.py), the rounds
interleaved so both see the same machine. Printed: p50/p90 of each, the added p50, the gateway worker's CPU per
relayed call (utime + stime from /proc of the worker, over the through-gateway calls only) and the upstream
worker's (for each way), then `clients` concurrent clients (4 a process) for `seconds` each way: calls/s.
Everything started is stopped by its process group (started with start_new_session).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import procs  # noqa: E402 - bench/ is the import path of the bench's own modules
from gateways import CHILD, ROOT, free_port  # noqa: E402
from mcpclient import BenchError, HttpSession, echo_body, stop_group  # noqa: E402

UPSTREAM_PATH, GATEWAY_PATH = "/mcp", "/servers/up/mcp"


def gunicorn(env: dict[str, str], log: Path, src: Path = ROOT) -> tuple[subprocess.Popen[bytes], int]:
    """A gunicorn (mcpgate's config: one gevent worker) running mcpgate from `src` on a free port, answering
    /healthz."""
    port = free_port()
    full = {**os.environ, "MCPGATE_LOG_LEVEL": "warning", "MCPGATE_MAX_SESSIONS": "200", **env}
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:mcpgate.gunicorn_config", "-b", f"127.0.0.1:{port}"]
    with open(log, "ab") as out:
        proc = procs.register(
            subprocess.Popen([*argv, "mcpgate.wsgi"], cwd=src, env=full, stdout=out, stderr=out, start_new_session=True)
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            session = HttpSession(port, "/healthz", timeout=5)
            session.conn.request("GET", "/healthz")
            if session.conn.getresponse().status in (200, 503):
                session.close()
                return proc, port
        except OSError:
            time.sleep(0.1)
    stop_group(proc)
    raise RuntimeError(f"gunicorn did not start: {log.read_text(errors='replace')[-600:]}")


def worker_of(master: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise RuntimeError(f"gunicorn {master} has no worker")


def cpu_seconds(pid: int) -> float:
    """A process's CPU seconds (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_calls(port: int, path: str, calls: int, workers: list[int]) -> tuple[list[float], list[float]]:
    """`calls` sequential echoes on a new 2025 session: each one's time, and each worker's CPU seconds over them
    (the session's start, its warm-up and its end left out: an upstream session starts a child process)."""
    session = HttpSession(port, path).initialize()
    try:
        for _ in range(50):  # warm: the session's child (upstream session) started, the code paths loaded
            session.echo("hi")
        took = []
        began_cpu = [cpu_seconds(worker) for worker in workers]
        for msg_id in range(1000, 1000 + calls):
            began = time.perf_counter()
            reply = session.post(echo_body(msg_id, "hi"), msg_id)
            took.append(time.perf_counter() - began)
            if reply is None or "result" not in reply:
                raise BenchError(f"{path}: {reply}")
        return took, [cpu_seconds(worker) - cpu for worker, cpu in zip(workers, began_cpu, strict=True)]
    finally:
        session.delete()
        session.close()


def client_loop(port: int, path: str, until: float, counts: Any, index: int) -> None:
    session = HttpSession(port, path).initialize()
    done = 0
    try:
        while time.monotonic() < until:
            session.echo("x")
            done += 1
    finally:
        counts[index] = done
        session.delete()
        session.close()


def client_process(port: int, path: str, until: float, counts: Any, first: int, threads: int) -> None:
    workers = [
        threading.Thread(target=client_loop, args=(port, path, until, counts, first + i)) for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def throughput(port: int, path: str, seconds: float, clients: int) -> float:
    """Calls/s of `clients` concurrent sessions (4 threads a process) over `seconds`."""
    counts = multiprocessing.Array("i", clients)
    until = time.monotonic() + 1.0 + seconds  # a second for the processes to start and the sessions to open
    began = until - seconds
    runners = [
        multiprocessing.Process(target=client_process, args=(port, path, until, counts, first, min(4, clients - first)))
        for first in range(0, clients, 4)
    ]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    return sum(counts) / max(time.monotonic() - began, 1e-9)


def spy(worker: int, seconds: float, target: str) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).parent / "py-spy"
    argv = [str(py_spy), "record", "--pid", str(worker), "--rate", "500", "--format", "raw", "--nonblocking"]
    return subprocess.Popen([*argv, "--duration", str(int(seconds)), "-o", target], stdout=subprocess.DEVNULL)


def ms(values: list[float], q: float = 0.5) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="each throughput run (0: none)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--profile", metavar="FILE", help="py-spy the gateway's worker over through-gateway calls")
    parser.add_argument("--base", metavar="DIR", help="also a gateway run from this source tree (A/B in one run)")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="mcpgate-bench-remote-"))
    upstream, up_port = gunicorn({"MCPGATE_COMMAND": shlex.join(CHILD)}, logs / "upstream.log")
    started = [upstream]
    try:
        config = logs / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"up": {"url": f"http://127.0.0.1:{up_port}{UPSTREAM_PATH}"}}}))
        trees = {"gateway": ROOT}
        if args.base:
            trees["base"] = Path(args.base).resolve()
        ports: dict[str, tuple[int, int]] = {}
        for name, src in trees.items():
            env = {"MCPGATE_CONFIG": str(config), "PYTHONPATH": str(src)}
            proc, port = gunicorn(env, logs / f"{name}.log", src)
            started.append(proc)
            ports[name] = (port, worker_of(proc.pid))
        up_worker = worker_of(upstream.pid)
        if args.profile:
            return profile(*ports["gateway"], args)
        return measure(args, (up_port, up_worker), ports, logs)
    finally:
        for proc in reversed(started):
            stop_group(proc)


def measure(args: argparse.Namespace, upstream: tuple[int, int], ports: dict[str, tuple[int, int]], logs: Path) -> int:
    up_port, up_worker = upstream
    times: dict[str, list[float]] = {"direct": [], **{name: [] for name in ports}}
    cpu: dict[str, list[float]] = {name: [0.0, 0.0] for name in times}  # (its own worker, the upstream's)
    for _ in range(args.rounds):
        took, (used,) = timed_calls(up_port, UPSTREAM_PATH, args.calls, [up_worker])
        times["direct"] += took
        cpu["direct"][1] += used
        for name, (port, worker) in ports.items():
            took, (own, up) = timed_calls(port, GATEWAY_PATH, args.calls, [worker, up_worker])
            times[name] += took
            cpu[name][0] += own
            cpu[name][1] += up
    calls = args.rounds * args.calls
    per = 1e6 / calls
    direct = ms(times["direct"])
    print(f"{calls} sequential tools/call each way, {args.rounds} interleaved rounds (logs in {logs})")
    print(f"direct to the upstream:  p50 {direct:.3f} ms  p90 {ms(times['direct'], 0.9):.3f} ms")
    print(f"   upstream worker CPU/call {cpu['direct'][1] * per:.0f} us")
    for name in ports:
        p50 = ms(times[name])
        print(f"through {name + ':':<16} p50 {p50:.3f} ms  p90 {ms(times[name], 0.9):.3f} ms")
        print(
            f"   added p50 {p50 - direct:.3f} ms ({p50 / direct:.2f}x direct); CPU/call: gateway worker "
            f"{cpu[name][0] * per:.0f} us, upstream worker {cpu[name][1] * per:.0f} us"
        )
    if args.seconds > 0:
        rates = {"direct": throughput(up_port, UPSTREAM_PATH, args.seconds, args.clients)}
        for name, (port, _) in ports.items():
            rates[name] = throughput(port, GATEWAY_PATH, args.seconds, args.clients)
        shown = ", ".join(f"{name} {rate:.0f} calls/s" for name, rate in rates.items())
        print(f"{args.clients} clients: {shown}")
    return 0


def profile(port: int, worker: int, args: argparse.Namespace) -> int:
    """Through-gateway calls for `seconds` (at least 3) under py-spy; the summary of the worker's stacks."""
    seconds = max(3.0, args.seconds)
    session = HttpSession(port, GATEWAY_PATH).initialize()
    try:
        for _ in range(50):
            session.echo("hi")
        sampler = spy(worker, seconds, args.profile)
        time.sleep(0.5)  # py-spy attached
        began_cpu, count = cpu_seconds(worker), 0
        until = time.monotonic() + seconds - 1.0
        while time.monotonic() < until:
            session.echo("hi")
            count += 1
        used = cpu_seconds(worker) - began_cpu
        sampler.wait(timeout=60)
    finally:
        session.delete()
        session.close()
    print(f"{count} calls under py-spy, gateway worker {used / max(count, 1) * 1e6:.0f} us CPU/call")
    import report

    print(report.profile_summary(Path(args.profile), top=50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
