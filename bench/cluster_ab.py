"""A/B of the fleet's CPU per call: two (or more) mcpgate trees, each its own Redis and instances i1 and i2, the
same calls on every tree in interleaved slices, one run.

    git archive <rev> | tar -x -C /tmp/fleet-base          # the base tree (its mcpgate/ is what runs)
    python bench/cluster_ab.py /tmp/fleet-base .            # sequential calls, 5 rounds
    python bench/cluster_ab.py /tmp/fleet-base . --clients 8 --seconds 3   # 8 client processes

A slice is one path on one tree: a call sent to its session's owner i1 ("direct"), or the same calls sent to i2,
which forwards them to i1 ("forwarded"); CPU per call of i1, i2 (gunicorn master and worker, every thread, the
bench child excluded) and Redis from /proc around it (bench/cluster.py's Clocks). The order of the slices rotates
every round; the first round warms up and is not counted. Printed: each tree's medians, and the median per round
of forwarded over direct (both instances' CPU and Redis's) with the owner's extra CPU on a forwarded call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster
import gateways
import measure
import procs
from mcpclient import HttpSession

KINDS = ("direct", "forwarded")
Fleet = tuple[cluster.Process, cluster.Process, cluster.Process]  # redis, i1, i2


def start_fleet(tree: Path, out: Path, started: list[cluster.Process]) -> Fleet:
    """Redis, i1 and i2 importing mcpgate from `tree` (their working directory and PYTHONPATH)."""
    usual_env, usual_root = gateways.mcpgate_env, gateways.ROOT
    gateways.mcpgate_env = lambda **extra: {**usual_env(**extra), "PYTHONPATH": str(tree)}
    gateways.ROOT = tree
    try:
        redis = cluster.start_redis(out)
        started.append(redis)
        owner = cluster.start_instance("i1", redis.port, out)
        started.append(owner)
        other = cluster.start_instance("i2", redis.port, out)
        started.append(other)
    finally:
        gateways.mcpgate_env, gateways.ROOT = usual_env, usual_root
    return redis, owner, other


def slice_of(fleet: Fleet, kind: str, args: argparse.Namespace) -> dict[str, float]:
    redis, owner, other = fleet
    clocks = cluster.Clocks({"owner": owner.proc.pid, "forwarder": other.proc.pid, "redis": redis.proc.pid})
    port, client = (owner.port, HttpSession) if kind == "direct" else (other.port, cluster.steered_to(owner.port))
    if args.clients == 1:
        result = measure.sequential_http(port, "/mcp", args.calls, 60.0, cpu=clocks, client=client)
        calls = int(result["n"])
    else:
        result = measure.concurrent_http(port, "/mcp", args.clients, args.seconds, cpu=clocks, client=client)
        calls = int(result["calls"])
    per_call = clocks.per_call_us(calls)
    per_call["total"] = sum(per_call.values())
    return per_call


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="mcpgate source trees (each holding mcpgate/)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per slice (--clients 1)")
    parser.add_argument("--clients", type=int, default=1, help="client processes (1: sequential calls)")
    parser.add_argument("--seconds", type=float, default=3.0, help="each slice's length with --clients above 1")
    args = parser.parse_args(argv)
    trees = [tree.resolve() for tree in args.trees]
    procs.install_handlers()
    out = gateways.BENCH / "out"
    out.mkdir(parents=True, exist_ok=True)
    started: list[cluster.Process] = []
    samples: dict[tuple[Path, str], list[dict[str, float]]] = {}
    try:
        fleets = {tree: start_fleet(tree, out, started) for tree in trees}
        time.sleep(1.0)
        slices = [(tree, kind) for tree in trees for kind in KINDS]
        for round_no in range(args.rounds + 1):
            turn = round_no % len(slices)
            for tree, kind in slices[turn:] + slices[:turn]:
                measured = slice_of(fleets[tree], kind, args)
                if round_no:  # the first round warms up
                    samples.setdefault((tree, kind), []).append(measured)
    finally:
        for process in reversed(started):
            process.stop()
    for (tree, kind), rounds in samples.items():
        medians = {name: round(statistics.median(r[name] for r in rounds)) for name in rounds[0]}
        print(f"{tree} {kind}: " + ", ".join(f"{name} {value} µs" for name, value in medians.items()))
    for tree in trees:
        pairs = list(zip(samples[(tree, "direct")], samples[(tree, "forwarded")], strict=True))
        ratio = statistics.median(f["total"] / d["total"] for d, f in pairs)
        extra = statistics.median(f["owner"] - d["owner"] for d, f in pairs)
        print(f"{tree}: forwarded / direct {ratio:.2f}×, the owner's extra on a forwarded call {extra:.0f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
