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
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
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
    try:
        sessions = [Session(port) for _, port, _ in started]
        for session in sessions:
            session.calls(args.calls // 4)  # warm: the child started, the caches filled
        for round_ in range(args.rounds):
            got: list[float] = [0.0] * len(configs)
            export: list[float] = [0.0] * len(configs)
            for n in [(round_ + k) % len(configs) for k in range(len(configs))]:
                master = started[n][0].pid
                before, export_before = on_cpu(master), export_on_cpu(master)
                sessions[n].calls(args.calls)
                got[n] = (on_cpu(master) - before) / args.calls / 1000
                export[n] = (export_on_cpu(master) - export_before) / args.calls / 1000
            for n, value in enumerate(got):
                per_call[n].append(value)
                extra[n].append(value - got[first])
                exported[n].append(export[n])
            print(
                " | ".join(f"{t} {m} {v:.1f} ({e:.1f})" for (t, m), v, e in zip(configs, got, export, strict=True)),
                flush=True,
            )
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--modes", default="off,unsampled,on")
    parser.add_argument("--base", metavar="DIR", type=Path, help="also run each mode from this source tree")
    parser.add_argument("--head", metavar="DIR", type=Path, help="the tree to measure (default: this checkout)")
    args = parser.parse_args()
    endpoint, _ = bench.sink()
    trees: dict[str, Path | None] = {"head": args.head.resolve() if args.head is not None else None}
    if args.base is not None:
        trees = {"base": args.base.resolve(), **trees}
    measure(args, trees, endpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
