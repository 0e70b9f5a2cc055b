"""A fleet on this machine: mcpgate instances behind HAProxy (deploy/haproxy.cfg) sharing one Redis.

    python bench/cluster.py                    # ~6 min: the tables below, bench/out/cluster.json
    python bench/cluster.py --rounds 1 --duration 1 --levels 16   # a quick look
    python bench/cluster.py --instances 1,2    # fewer fleet sizes
    python bench/fleet_docs.py                 # the last run's figures and model into both READMEs
    python bench/fleet_docs.py --model         # the last run's model, printed

What it measures, each figure the median over rounds (configurations interleaved within a round):

- throughput (echo calls/s) at 16 and 64 client processes, each with its own 2025 session and connection:
  one instance spoken to directly (no HAProxy), then 1, 2 and 4 instances behind HAProxy (the recipe's sticky
  routing: each session pinned to its owner);
- the latency HAProxy adds: sequential echo calls on one session, direct vs through HAProxy to the same
  instance (p50 difference);
- the forwarded path: sequential calls on a session of instance i1 sent to instance i2, which forwards each to
  i1 over its pooled internal connection (p50 difference against sending them to i1);
- CPU per call (user + system of each process, every thread, from /proc as bench/measure.py reads it for
  serve; the bench child excluded), with --cpu-clients client processes for --duration s: a call sent to its
  session's owner i1 (i1's CPU), the same calls sent to an instance which forwards them over HTTP (f2, started
  without MCPGATE_HANDOFF_DIR: i1's + f2's), calls each handed between instances with their connection (the
  recipe's way, MCPGATE_HANDOFF_DIR: serve/front/handoff.py, which hands a connection's first request only: the
  same calls sent to i2 on a kept connection, which i2 handed to i1 at the session's first call there, before
  the measured ones; and every call on a new connection to i2, which hands each to i1, against the same calls
  each on a new connection to i1: i1's + i2's), the same
  calls through HAProxy to i1 (HAProxy's own process: its CPU per call), and Redis's CPU and commands per call in
  each (a forwarded call's nonce: one SET NX per forwarding connection, its later calls checked against that
  connection's series, serve/cluster/nonces.py). bench/fleet_docs.py turns these into the fleet's scaling model,
  printed at the end (per routing of deploy/haproxy.cfg and fleet size; `python bench/fleet_docs.py --model`
  prints it again from bench/out/cluster.json).

    python bench/cluster.py --rounds 3 --duration 3 --levels "" --instances 1,2   # the model's inputs only (~2 min)

Every instance is `gunicorn mcpgate.wsgi` with one worker (as deploy/Procfile.fleet runs them) in front of the
bench child (bench/child_server.py); Redis and HAProxy are the distribution's (redis-server, haproxy). This is
not part of bench/run.py's default run (it starts a fleet and takes the machine's cores).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways
import measure
import procs
from mcpclient import BenchError, HttpSession, stop_group

BENCH = gateways.BENCH
RECIPE = gateways.ROOT / "deploy" / "haproxy.cfg"
SECRET = "bench-cluster-secret-0123456789abcdef"
RECIPE_SERVERS = 4  # i1..i4 in deploy/haproxy.cfg


def binary(name: str, usual: str) -> str:
    found = shutil.which(name) or (usual if os.access(usual, os.X_OK) else None)
    if found is None:
        raise SystemExit(f"{name} is not installed (apt-get install {name}; .ci/run installs it)")
    return found


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited {proc.returncode}: {log.read_text(errors='replace')[-800:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port} within {timeout} s")


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return procs.register(
            subprocess.Popen(
                argv,
                cwd=gateways.ROOT,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        )


class Process:
    def __init__(self, name: str, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.name, self.port, self.proc = name, port, proc

    def stop(self) -> None:
        stop_group(self.proc, timeout=20.0)
        procs.forget(self.proc)


def start_redis(out: Path) -> Process:
    port = gateways.free_port()
    log = out / "cluster-redis.log"
    argv = [binary("redis-server", "/usr/bin/redis-server"), "--port", str(port), "--bind", "127.0.0.1"]
    proc = spawn([*argv, "--save", "", "--appendonly", "no"], log)
    wait_port(port, proc, "redis-server", log)
    return Process("redis", port, proc)


def start_instance(name: str, redis_port: int | None, out: Path, handoff: bool = True) -> Process:
    """One `gunicorn mcpgate.wsgi` (one worker) on its own port, in the fleet when `redis_port` is given (handing
    connections to the fleet's other instances as deploy/Procfile.fleet does, unless `handoff` is False)."""
    port = gateways.free_port()
    env = gateways.mcpgate_env(MCPGATE_BIND=f"127.0.0.1:{port}")
    if redis_port is not None:
        env |= {
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "MCPGATE_INSTANCE_ID": name,
            "MCPGATE_CLUSTER_SECRET": SECRET,
            "MCPGATE_INTERNAL_URL": f"http://127.0.0.1:{port}",
        }
        if handoff:
            env["MCPGATE_HANDOFF_DIR"] = str(out / f"cluster-handoff-{redis_port}")
    log = out / f"cluster-{name}.log"
    argv = [str(Path(sys.executable).parent / "gunicorn"), "-c", "python:mcpgate.gunicorn_config", "mcpgate.wsgi"]
    proc = spawn(argv, log, env)
    wait_port(port, proc, name, log)
    return Process(name, port, proc)


def start_haproxy(instances: list[Process], out: Path) -> Process:
    """The recipe, its servers i1..iN pointed at `instances` and the rest at a port nothing listens on; returns
    once HAProxy's health checks have marked exactly those up."""
    port, dead = gateways.free_port(), gateways.free_port()
    admin = out / f"cluster-haproxy-{port}.sock"
    env = {"HAPROXY_BIND": f"127.0.0.1:{port}", "HAPROXY_ADMIN": str(admin), "MCPGATE_ROUTING": "sticky"}
    for index in range(1, RECIPE_SERVERS + 1):
        target = instances[index - 1].port if index <= len(instances) else dead
        env[f"MCPGATE_I{index}"] = f"127.0.0.1:{target}"
    log = out / f"cluster-haproxy-{len(instances)}.log"
    proc = spawn([binary("haproxy", "/usr/sbin/haproxy"), "-db", "-f", str(RECIPE)], log, env)
    wait_port(port, proc, "haproxy", log)
    want = {f"i{index}" for index in range(1, len(instances) + 1)}
    deadline = time.monotonic() + 30
    while servers_up(admin) != want:
        if time.monotonic() > deadline:
            raise SystemExit(f"haproxy servers up: {servers_up(admin)}, wanted {want}")
        time.sleep(0.2)
    return Process(f"haproxy-{len(instances)}", port, proc)


def servers_up(admin: Path) -> set[str]:
    """The recipe's servers HAProxy has marked up (none while its admin socket is not there yet)."""
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(str(admin))
        except (FileNotFoundError, ConnectionRefusedError):
            return set()
        sock.sendall(b"show servers state sticky\n")
        text = b"".join(iter(lambda: sock.recv(65536), b"")).decode()
    rows = [line.split() for line in text.splitlines()[1:] if line and not line.startswith("#")]
    return {row[3] for row in rows if len(row) > 5 and row[5] == "2"}


# -- the figures -------------------------------------------------------------------------------------------


def sequential_p50(port: int, count: int, time_cap_s: float) -> float:
    return float(measure.sequential_http(port, "/mcp", count, time_cap_s)["p50_ms"])


class Steered(HttpSession):
    """A session opened on one instance whose calls go to another (which forwards them to the owner)."""

    def __init__(self, owner_port: int, other_port: int) -> None:
        super().__init__(owner_port)
        self.other_port = other_port

    def initialize(self) -> Steered:
        super().initialize()
        self.conn.close()
        self.conn = HttpSession(self.other_port).conn
        return self


def forwarded_p50(owner_port: int, other_port: int, count: int, time_cap_s: float) -> float:
    session = Steered(owner_port, other_port).initialize()
    try:
        return float(measure.timed_loop(session.echo, count, time_cap_s)["p50_ms"])
    finally:
        session.delete()
        session.close()


def record(into: dict[str, list[float]], name: str, errors: dict[str, int], measured: Callable[[], float]) -> None:
    """One latency figure of a round; a loop that fails is counted in `errors` (and said), not the end of the run."""
    try:
        into[name].append(measured())
    except (OSError, BenchError) as exc:
        errors[f"latency {name}"] = errors.get(f"latency {name}", 0) + 1
        print(f"  the {name} latency loop failed: {exc}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Clocks:
    """A CPU clock over several processes (measure.CpuClock: the total), each one's readings kept apart."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.readings: list[dict[str, int]] = []

    def __call__(self) -> int:
        reading = {name: gateways.tree_cpu_ns(pid) for name, pid in self.pids.items()}
        self.readings.append(reading)
        return sum(reading.values())

    def per_call_us(self, calls: int) -> dict[str, float]:
        """Each process's CPU between the first and the last reading, in µs per call."""
        first, last = self.readings[0], self.readings[-1]
        return {name: (last[name] - first[name]) / 1000.0 / max(calls, 1) for name in self.pids}


def steered_to(owner_port: int) -> measure.Client:
    """A client class for measure.concurrent_http: sessions opened on the owner, calls sent to `port`."""

    class SteeredHere(Steered):
        def __init__(self, port: int, path: str = "/mcp") -> None:
            super().__init__(owner_port, port)

    return SteeredHere


def fresh(base: measure.Client) -> measure.Client:
    """`base` with a new connection for every call (the session's own calls after its initialize): each one is the
    first request of its connection."""

    class Fresh(base):  # type: ignore[valid-type,misc]
        def post(self, body: bytes, msg_id: int | None, headers: dict[str, str] | None = None) -> dict[str, Any] | None:
            if self.session_id is not None and headers is None:
                self.conn.close()  # (http.client connects again for the request)
            return super().post(body, msg_id, headers)  # type: ignore[no-any-return]

    return Fresh


CpuSamples = dict[str, dict[str, list[float]]]  # path -> process -> µs per call, one per round


def redis_commands(port: int) -> int:
    """The commands Redis has processed so far (INFO stats' total_commands_processed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.sendall(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
        reply = b""
        while b"total_commands_processed:" not in reply or not reply.endswith(b"\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":", 1)[1])
    raise BenchError("redis INFO stats has no total_commands_processed")


def cpu_per_call(
    paths: dict[str, tuple[int, measure.Client, dict[str, int]]],
    clients: int,
    duration: float,
    into: CpuSamples,
    redis_port: int,
) -> None:
    """One round of every path: `clients` processes for `duration` s, each process's CPU per call, and the Redis
    commands per call (the INFO read itself, one command, excluded)."""
    for name, (port, client, pids) in paths.items():
        clocks = Clocks(pids)
        before = redis_commands(redis_port)
        result = measure.concurrent_http(port, "/mcp", clients, duration, cpu=clocks, client=client)
        commands = redis_commands(redis_port) - before - 1
        for process, value in clocks.per_call_us(int(result["calls"])).items():
            into.setdefault(name, {}).setdefault(process, []).append(value)
        into.setdefault(name, {}).setdefault("calls_per_s", []).append(float(result["calls_per_s"]))
        into[name].setdefault("redis_commands", []).append(commands / max(int(result["calls"]), 1))
        shares = ", ".join(
            f"{process} {value:.0f}" for process, value in clocks.per_call_us(int(result["calls"])).items()
        )
        print(f"  cpu per call, {name}: {shares} µs ({result['calls_per_s']:.0f} calls/s, {result['errors']} errors)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_average = os.getloadavg()[0]  # what else the machine was doing (the docs say it with the figures)
    out = BENCH / "out"
    out.mkdir(parents=True, exist_ok=True)
    started: list[Process] = []
    throughput: dict[str, dict[int, list[float]]] = {}
    errors: dict[str, int] = {}
    latency: dict[str, list[float]] = {"direct": [], "haproxy": [], "owner": [], "forwarded": []}
    cpu: CpuSamples = {}
    try:
        redis = start_redis(out)
        started.append(redis)
        solo = start_instance("solo", None, out)  # one instance as today: no Redis, no HAProxy
        started.append(solo)
        fleet: list[Process] = []
        for index in range(1, max(args.instances) + 1):  # each one stopped at the end even if a later one fails
            fleet.append(start_instance(f"i{index}", redis.port, out))
            started.append(fleet[-1])
        fleet_forwarder: Process | None = None
        if len(fleet) >= 2:  # the forwarder over HTTP: an instance without the handoff
            fleet_forwarder = start_instance("f2", redis.port, out, handoff=False)
            started.append(fleet_forwarder)
        fronts: dict[int, Process] = {}
        for size in args.instances:
            fronts[size] = start_haproxy(fleet[:size], out)
            started.append(fronts[size])
        targets = {"1 instance, direct": solo.port} | {
            f"{size} instance{'s' if size > 1 else ''}, HAProxy": front.port for size, front in fronts.items()
        }
        paths = cpu_paths(solo, fleet, fronts, redis, fleet_forwarder)
        for round_no in range(args.rounds):
            if args.cpu_clients:
                cpu_per_call(paths, args.cpu_clients, args.duration, cpu, redis.port)
            order = list(targets.items())
            order = order[round_no % len(order) :] + order[: round_no % len(order)]
            for label, port in order:
                for level in args.levels:
                    result = measure.concurrent_http(port, "/mcp", level, args.duration)
                    throughput.setdefault(label, {}).setdefault(level, []).append(result["calls_per_s"])
                    errors[label] = errors.get(label, 0) + int(result["errors"])
                    print(f"round {round_no + 1}: {label}, {level} clients: {result['calls_per_s']:.0f} calls/s")
                    if result["errors"]:
                        samples: Any = result.get("error_samples", [])
                        print(f"  {result['errors']} errors, e.g. {samples[:2]}")
            if 1 in fronts:
                record(latency, "direct", errors, lambda: sequential_p50(fleet[0].port, args.calls, 10.0))
                record(latency, "haproxy", errors, lambda: sequential_p50(fronts[1].port, args.calls, 10.0))
            if len(fleet) >= 2:
                record(latency, "owner", errors, lambda: sequential_p50(fleet[0].port, args.calls, 10.0))
                if fleet_forwarder is not None:
                    forwarding = functools.partial(forwarded_p50, fleet[0].port, fleet_forwarder.port, args.calls, 10.0)
                    record(latency, "forwarded", errors, forwarding)
    finally:
        for proc in reversed(started):
            proc.stop()
    return {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": load_average,
        },
        "settings": dict(vars(args)),
        "throughput": {label: {level: median(v) for level, v in by.items()} for label, by in throughput.items()},
        "errors": errors,
        "latency_p50_ms": {name: median(values) for name, values in latency.items()},
        "cpu_us_per_call": {path: {name: median(v) for name, v in by.items()} for path, by in cpu.items()},
    }


def cpu_paths(
    solo: Process, fleet: list[Process], fronts: dict[int, Process], redis: Process, forwarder: Process | None
) -> dict[str, tuple[int, measure.Client, dict[str, int]]]:
    """The paths whose CPU per call is measured: (the port called, the client class, the processes counted)."""
    paths: dict[str, tuple[int, measure.Client, dict[str, int]]] = {
        "solo": (solo.port, HttpSession, {"instance": solo.proc.pid})
    }
    if len(fleet) >= 2 and forwarder is not None:
        pair = {"owner": fleet[0].proc.pid, "forwarder": forwarder.proc.pid, "redis": redis.proc.pid}
        paths["direct"] = (fleet[0].port, HttpSession, pair)
        paths["forwarded"] = (forwarder.port, steered_to(fleet[0].port), pair)
        handing = {"owner": fleet[0].proc.pid, "forwarder": fleet[1].proc.pid, "redis": redis.proc.pid}
        paths["handed"] = (fleet[1].port, steered_to(fleet[0].port), handing)
        paths["connection each"] = (fleet[0].port, fresh(HttpSession), handing)
        paths["handed each"] = (fleet[1].port, fresh(steered_to(fleet[0].port)), handing)
    if 1 in fronts:
        by_haproxy = {"owner": fleet[0].proc.pid, "haproxy": fronts[1].proc.pid, "redis": redis.proc.pid}
        paths["haproxy"] = (fronts[1].port, HttpSession, by_haproxy)
    return paths


def table(results: dict[str, Any]) -> str:
    levels = sorted({level for by in results["throughput"].values() for level in by})
    base = results["throughput"].get("1 instance, direct", {})
    lines = [
        "| calls/s | " + " | ".join(f"{level} clients" for level in levels) + " |",
        "|---|" + "---:|" * len(levels),
    ]
    for label, by in results["throughput"].items():
        cells = []
        for level in levels:
            value, ref = by.get(level, float("nan")), base.get(level)
            ratio = f" ({value / ref:.2f}×)" if ref and label != "1 instance, direct" else ""
            cells.append(f"{value:,.0f}{ratio}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lat = results["latency_p50_ms"]
    lines += [
        "",
        "| sequential echo, p50 | ms |",
        "|---|---:|",
        f"| direct to an instance | {lat['direct']:.3f} |",
        f"| through HAProxy (1 instance) | {lat['haproxy']:.3f} (+{lat['haproxy'] - lat['direct']:.3f}) |",
        f"| to the session's owner | {lat['owner']:.3f} |",
        f"| to another instance (forwarded) | {lat['forwarded']:.3f} (+{lat['forwarded'] - lat['owner']:.3f}) |",
    ]
    lines += cpu_table(results.get("cpu_us_per_call", {}))
    if any(results["errors"].values()):
        lines += ["", f"errors: {results['errors']}"]
    return "\n".join(lines)


def cpu_table(cpu: dict[str, dict[str, float]]) -> list[str]:
    """CPU per call of each process on each path (µs), as measured (empty when it was not)."""
    if not {"direct", "forwarded"} <= cpu.keys():
        return []
    direct, forwarded = cpu["direct"], cpu["forwarded"]
    rows = [
        "",
        "| CPU per echo call, µs | owner | forwarder | HAProxy | Redis | total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, by in (
        ("one instance alone (no fleet)", {"owner": cpu.get("solo", {}).get("instance", float("nan"))}),
        ("sent to the session's owner", direct),
        ("sent to another instance (forwarded over HTTP)", forwarded),
        ("sent to another instance, which handed the connection to the owner", cpu.get("handed", {})),
        ("a new connection each call, to the owner", cpu.get("connection each", {})),
        ("a new connection each call, to another instance, which hands it", cpu.get("handed each", {})),
        ("through HAProxy to the owner", cpu.get("haproxy", {})),
    ):
        if not by:
            continue
        parts = [by.get(name) for name in ("owner", "forwarder", "haproxy", "redis")]
        cells = ["–" if value is None else f"{value:,.1f}" for value in parts]
        total = sum(value for value in parts if value is not None)
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {total:,.1f} |")
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=2.0, help="seconds each throughput window lasts")
    parser.add_argument(
        "--levels",
        type=lambda text: [int(v) for v in text.split(",") if v],
        default=[16, 64],
        help='client processes of the throughput figures ("": none, the CPU figures and latencies only)',
    )
    parser.add_argument("--instances", type=lambda text: [int(v) for v in text.split(",")], default=[1, 2, 4])
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per latency figure")
    parser.add_argument("--cpu-clients", type=int, default=8, help="client processes of the CPU figures (0: none)")
    args = parser.parse_args(argv)
    if max(args.instances) > RECIPE_SERVERS or min(args.instances) < 1:
        raise SystemExit(f"--instances: 1 to {RECIPE_SERVERS} (the recipe's servers)")
    procs.install_handlers()
    results = run(args)
    (BENCH / "out" / "cluster.json").write_text(json.dumps(results, indent=2))
    print()
    print(f"{results['machine']['cpus']} CPUs, {args.rounds} rounds of {args.duration} s; medians")
    print(table(results))
    import fleet_docs

    model = fleet_docs.model_table(results)
    if model:
        print("\n" + model)
    print(f"\n({shlex.join(['python', 'bench/cluster.py', *argv])}; bench/out/cluster.json)")
    print("README.md and deploy/README.md quote these figures: `python bench/fleet_docs.py` writes them there")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
