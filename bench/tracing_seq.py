"""What tracing costs a call, on a shared machine: the worker's CPU per call with sequential calls, every gateway
(each mode, from each tree) up at once and measured in turn, a rotating order each round.

bench/tracing.py's rounds load a gateway with 16 clients: on a machine other work loads, its calls/s and even its
CPU per call move with the load (a busier worker reads more per wake-up). Here one client calls one gateway at a
time (a 2025 session's tools/call echo, on one kept connection), and the worker's CPU is read from
/proc/<pid>/task/*/schedstat (nanoseconds on a CPU, its every thread) before and after: the CPU a call costs,
whatever else runs; the span export process's (mcpgate/observe/span_export.py) in brackets per round and apart in
the medians (a batch it posts after a slice ends counts in that gateway's next slice). Each round gives each
gateway's extra over head's off; the medians of those are printed.

    git archive HEAD | tar -x -C /tmp/ab-base       # before the change
    python bench/tracing_seq.py --base /tmp/ab-base [--head DIR] [--rounds 9] [--calls 2000] [--modes off,unsampled,on]
    python bench/tracing_seq.py --modes off,on --proc [--strace]   # what the CPU does not say, per call

--proc also prints, per gateway, the worker's minor page faults and context switches (voluntary, forced) per call
(from /proc; not load-sensitive, unlike the CPU), and --strace the worker's system calls per call (one block of
--calls calls per gateway under `strace -c -f`, after the rounds: strace slows the worker, not what it calls).
"""

from __future__ import annotations

import argparse
import http.client
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tracing as bench

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def on_cpu(master: int) -> int:
    """The gunicorn worker's nanoseconds on a CPU, all its threads."""
    worker = Path(f"/proc/{master}/task/{master}/children").read_text().split()[0]
    return sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{worker}/task").iterdir())


def export_on_cpu(master: int) -> int:
    """The nanoseconds on a CPU of the worker's span export process (mcpgate/observe/span_export.py; 0 for a tree
    that exports in the worker)."""
    worker = Path(f"/proc/{master}/task/{master}/children").read_text().split()[0]
    total = 0
    for child in Path(f"/proc/{worker}/task/{worker}/children").read_text().split():
        try:
            if b"mcpgate.observe.span_export" in Path(f"/proc/{child}/cmdline").read_bytes():
                total += sum(
                    int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{child}/task").iterdir()
                )
        except OSError:
            continue
    return total


def worker_of(master: int) -> int:
    return int(Path(f"/proc/{master}/task/{master}/children").read_text().split()[0])


def counted(master: int) -> tuple[int, int, int]:
    """The worker's minor page faults, voluntary and forced context switches so far (--proc)."""
    worker = worker_of(master)
    faults = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[7])
    switches = dict(line.split(":") for line in Path(f"/proc/{worker}/status").read_text().splitlines())
    return faults, int(switches["voluntary_ctxt_switches"]), int(switches["nonvoluntary_ctxt_switches"])


def syscalls(master: int, session: Session, calls: int, out: Path) -> dict[str, int]:
    """The worker's system calls (every thread) over `calls` calls, by name (--strace)."""
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(worker_of(master))])
    try:
        time.sleep(1.0)  # attached
        session.calls(calls)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
    made: dict[str, int] = {}
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            made[fields[-1]] = int(fields[3])
    return made


class Session:
    """A 2025 session on one kept connection to a gateway."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT}
        _, headers, _ = bench.post(self.conn, init, bench.HEADERS)
        self.headers = {**bench.HEADERS, "Mcp-Session-Id": headers["Mcp-Session-Id"]}
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        bench.post(self.conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, self.headers)
        self.next = 1

    def calls(self, count: int) -> None:
        """`count` calls on a new connection (the last one may have been closed idle: MCPGATE_KEEPALIVE_TIMEOUT)."""
        self.conn.close()
        self.conn = http.client.HTTPConnection(self.conn.host, self.conn.port, timeout=30)
        for _ in range(count):
            call = {"name": "echo", "arguments": {"message": "x"}}
            status, _, _ = bench.post(
                self.conn, {"jsonrpc": "2.0", "id": self.next, "method": "tools/call", "params": call}, self.headers
            )
            assert status == 200, status
            self.next += 1


def measure(args: argparse.Namespace, trees: dict[str, Path | None], endpoint: str) -> None:
    configs = [(tree, mode) for tree in trees for mode in bench.modes_of(args)]
    if any(mode == "burn" for _, mode in configs):
        raise SystemExit("--modes: burn is bench/tracing.py's (rounds)")
    first = configs.index(("head", "off")) if ("head", "off") in configs else 0
    started = [bench.start(mode, endpoint, trees[tree]) for tree, mode in configs]
    extra: list[list[float]] = [[] for _ in configs]
    per_call: list[list[float]] = [[] for _ in configs]
    exported: list[list[float]] = [[] for _ in configs]
    proc: list[list[tuple[float, ...]]] = [[] for _ in configs]
    try:
        sessions = [Session(port) for _, port, _ in started]
        for session in sessions:
            session.calls(args.calls // 4)  # warm: the child started, the caches filled
        for round_ in range(args.rounds):
            got: list[float] = [0.0] * len(configs)
            export: list[float] = [0.0] * len(configs)
            for n in [(round_ + k) % len(configs) for k in range(len(configs))]:
                master = started[n][0].pid
                before, export_before, seen = on_cpu(master), export_on_cpu(master), counted(master)
                sessions[n].calls(args.calls)
                got[n] = (on_cpu(master) - before) / args.calls / 1000
                proc[n].append(tuple((b - a) / args.calls for a, b in zip(seen, counted(master), strict=True)))
                export[n] = (export_on_cpu(master) - export_before) / args.calls / 1000
            for n, value in enumerate(got):
                per_call[n].append(value)
                extra[n].append(value - got[first])
                exported[n].append(export[n])
            print(
                " | ".join(f"{t} {m} {v:.1f} ({e:.1f})" for (t, m), v, e in zip(configs, got, export, strict=True)),
                flush=True,
            )
        if args.strace:
            for n, (tree, mode) in enumerate(configs):
                made = syscalls(started[n][0].pid, sessions[n], args.calls, Path(f"/tmp/tracing-seq-strace-{n}.txt"))
                listed = ", ".join(f"{name} {count / args.calls:.3f}" for name, count in sorted(made.items()))
                print(f"{tree} {mode} system calls per call: {sum(made.values()) / args.calls:.2f} ({listed})")
    finally:
        for gw, _, log in started:
            bench.stop(gw, log)
    for (tree, mode), values, diffs, export in zip(configs, per_call, extra, exported, strict=True):
        print(
            f"median {tree:4} {mode:9}: {statistics.median(values):6.1f} us CPU/call; against "
            f"{'/'.join(configs[first])} {statistics.median(diffs):+5.1f} us (rounds {min(diffs):+.1f} to "
            f"{max(diffs):+.1f}); export process {statistics.median(export):.1f} us/call",
            flush=True,
        )
    if args.proc:
        for (tree, mode), rows in zip(configs, proc, strict=True):
            faults, voluntary, forced = (statistics.median(row[k] for row in rows) for k in range(3))
            print(
                f"median {tree:4} {mode:9}: {faults:.3f} minor page faults, {voluntary:.2f} voluntary and {forced:.3f} "
                "forced context switches per call (the worker)",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--modes", default="off,unsampled,on")
    parser.add_argument("--base", metavar="DIR", type=Path, help="also run each mode from this source tree")
    parser.add_argument("--head", metavar="DIR", type=Path, help="the tree to measure (default: this checkout)")
    parser.add_argument("--proc", action="store_true", help="the worker's page faults, context switches per call")
    parser.add_argument("--strace", action="store_true", help="the worker's system calls per call (strace -c -f)")
    args = parser.parse_args()
    endpoint, _ = bench.sink()
    trees: dict[str, Path | None] = {"head": args.head.resolve() if args.head is not None else None}
    if args.base is not None:
        trees = {"base": args.base.resolve(), **trees}
    measure(args, trees, endpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
