"""A/B of gateway CPU per call: two mcpgate trees side by side, measured in interleaved slices, one run.

    git archive HEAD | tar -x -C /tmp/ab-base     # the base tree, before the change
    python bench/ab.py --base /tmp/ab-base --rounds 15 --calls 50 --slices 30
    python bench/ab.py --base /tmp/ab-base --new /tmp/ab-new --kinds 2026 --c16   # also 16 client processes

Each tree's gateway (gunicorn, mcpgate's worker, the bench's echo child) runs on its own port. A round is
`--slices` slices; a slice makes `--calls` sequential tools/call on every (gateway, kind) in a rotating order,
each on its own kept-alive http.client connection: as a 2025 session (initialize, Mcp-Session-Id) and as
2026-07-28 requests (no session, the pooled child). CPU per call is the gateway's own (master + worker, every
thread, the child excluded) from /proc schedstat around each slice, so both trees are measured over the same
stretch of a shared machine's noise; the ratio new/base is taken within each round, then the median. --c16
adds 16 client processes per gateway after the rounds (calls/s; one gateway at a time, so noisier).
Without --new the new tree is a copy of this checkout's mcpgate/ taken at the start (edits may go on).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways
import measure
import procs
from mcpclient import CLIENTS

KINDS = ("2025", "2026")  # the 2025 session and the 2026-07-28 pooled path
CLIENT_OF = {"2025": CLIENTS["legacy"], "2026": CLIENTS["modern"]}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def copy_tree(dest: Path) -> Path:
    """A copy of this checkout's mcpgate package (so edits made while the run goes on do not mix in)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(gateways.ROOT / "mcpgate", dest / "mcpgate", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def spec(name: str, tree: Path) -> gateways.Spec:
    env = {**gateways.mcpgate_env(), "PYTHONPATH": str(tree)}
    return gateways.Spec(name, f"mcpgate from {tree}", gateways._mcpgate_argv, env=env, cwd=tree)


def gateway_pids(run: gateways.Running) -> list[int]:
    """The gateway's own processes (master and worker, not the child), found once."""
    deadline = time.monotonic() + 30
    while len(pids := gateways._gateway_pids(run.proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


def cpu_ns(pids: list[int]) -> int:
    """CPU time (user + system, every thread) of `pids` so far, in ns (/proc schedstat)."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
    return total


def slices(sessions: dict[tuple[str, str], Any], pids: dict[str, list[int]], count: int, calls: int) -> dict:
    """`count` slices of `calls` sequential calls on every (gateway, kind), in a rotating order: each gateway's
    CPU per call over the same stretch of time as the other's (a shared machine's noise falls on both)."""
    used = dict.fromkeys(sessions, 0)
    done = dict.fromkeys(sessions, 0)
    keys = list(sessions)
    for n in range(count):
        order = keys[n % len(keys) :] + keys[: n % len(keys)]
        for key in order:
            began = cpu_ns(pids[key[0]])
            for _ in range(calls):
                sessions[key].echo()
            used[key] += cpu_ns(pids[key[0]]) - began
            done[key] += calls
    return {key: used[key] / done[key] / 1000.0 for key in sessions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (holds mcpgate/)")
    parser.add_argument("--new", type=Path, help="the new tree (default: a copy of this checkout's mcpgate/)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100, help="sequential calls per slice")
    parser.add_argument("--slices", type=int, default=20, help="slices per round (each gateway and kind)")
    parser.add_argument("--c16", action="store_true", help="also 16 client processes for --duration seconds")
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--kinds", default=",".join(KINDS), help="2025, 2026 or both")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    new = args.new or copy_tree(gateways.BENCH / "out" / "ab-new")
    procs.install_handlers()
    log_dir = gateways.BENCH / "out" / "logs"
    started = {}
    raw: dict[tuple[str, str], dict[str, list[float]]] = {}
    try:
        for name, tree in (("base", args.base.resolve()), ("new", new.resolve())):
            started[name] = gateways.start(spec(f"ab-{name}", tree), log_dir)
            log(f"{name}: {tree} on port {started[name].port}")
        pids = {name: gateway_pids(run) for name, run in started.items()}
        sessions = {
            (name, kind): CLIENT_OF[kind](run.port, "/mcp").initialize()
            for kind in kinds
            for name, run in started.items()
        }
        for session in sessions.values():
            for _ in range(200):  # warm: imports, caches, the pool's child
                session.echo()
        for rnd in range(args.rounds):
            figures = slices(sessions, pids, args.slices, args.calls)
            for key, value in figures.items():
                raw.setdefault(key, {}).setdefault("cpu_us", []).append(value)
            log(f"round {rnd + 1}/{args.rounds}: " + ", ".join(f"{n} {k} {v:.1f} us" for (n, k), v in figures.items()))
        if args.c16:
            for _ in range(args.rounds):
                for name, run in started.items():
                    for kind in kinds:
                        cpu = lambda run=run: gateways.tree_cpu_ns(run.proc.pid)  # noqa: E731
                        many = measure.concurrent_http(run.port, "/mcp", 16, args.duration, cpu, CLIENT_OF[kind])
                        row = raw.setdefault((name, kind), {})
                        row.setdefault("c16_calls_per_s", []).append(many["calls_per_s"])
                        row.setdefault("c16_cpu_us", []).append(many.get("cpu_us_per_call", float("nan")))
    finally:
        for run in started.values():
            gateways.stop(run)
    print(table(raw, kinds, args.c16))
    return 0


def table(raw: dict[tuple[str, str], dict[str, list[float]]], kinds: list[str], c16: bool) -> str:
    keys = ["cpu_us"] + (["c16_calls_per_s", "c16_cpu_us"] if c16 else [])
    lines = ["| path | figure | base | new | new/base (median of rounds) |", "|---|---|---|---|---|"]
    for kind in kinds:
        base, new = raw[("base", kind)], raw[("new", kind)]
        for key in keys:
            ratios = [n / b for n, b in zip(new[key], base[key], strict=True) if b]
            lines.append(
                f"| {kind} | {key} | {statistics.median(base[key]):.3f} | {statistics.median(new[key]):.3f} "
                f"| {statistics.median(ratios):.3f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
