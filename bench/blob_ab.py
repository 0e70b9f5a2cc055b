"""A/B of big results: two mcpgate trees and the child over direct pipes, one blob after another in one run.

    git archive HEAD | tar -x -C /tmp/blob-base          # the base tree, before the change
    python bench/blob_ab.py --base /tmp/blob-base --size 4194304 --reps 40
    python bench/blob_ab.py --base /tmp/blob-base --new /tmp/blob-new --kinds 2026

Each tree's gateway (gunicorn, mcpgate's worker, the bench's child) runs on its own port, as in bench/ab.py. A rep
asks each (tree, kind) and the child over direct pipes for one blob of `--size` bytes, in a rotating order, so a
shared machine's noise falls on all of them; the figures are medians over reps of the wall time, the ratio to
direct pipes taken within each rep, and the worker's CPU, page faults and context switches per blob (/proc).
bench/run.py's big-results row measures one blob per size in one round: too few to tell 5 % on a busy machine.

Page faults: glibc gives a freed heap back to the system past its trim threshold (2x the largest block it ever
unmapped), and the next big result faults the pages in again (about 2,000 per 4 MiB). Whether the worker's heap
lands on that side is a matter of its layout (a 300 KB module constant flips it), so compare with `--fixed-malloc`
too, which sets glibc's thresholds for both trees (GLIBC_TUNABLES) and leaves only the code's difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab
import gateways
from mcpclient import PipeSession

FIXED_MALLOC = "glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=33554432"


def worker_counts(pid: int) -> tuple[int, int]:
    """The worker's minor page faults and context switches (voluntary and not) so far."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        minflt = int(f.read().rsplit(b")", 1)[1].split()[7])
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            switches += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
    return minflt, switches


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run(trees: dict[str, Path], kinds: list[str], size: int, reps: int) -> dict[str, Any]:
    log_dir = Path(__file__).resolve().parent / "out" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    running = {name: gateways.start(ab.spec(name, tree), log_dir) for name, tree in trees.items()}
    direct = None
    try:
        workers = {name: max(ab.gateway_pids(r)) for name, r in running.items()}
        sessions = {(n, k): ab.CLIENT_OF[k](r.port, "/mcp").initialize() for n, r in running.items() for k in kinds}
        direct = PipeSession(gateways.CHILD).initialize()
        keys: list[Any] = [*sessions, "direct"]
        figures: dict[Any, dict[str, list[float]]] = {key: {} for key in keys}
        for session in [*sessions.values(), direct]:
            session.blob(size)  # warm the path
        for rep in range(reps):
            for key in keys[rep % len(keys) :] + keys[: rep % len(keys)]:
                session = direct if key == "direct" else sessions[key]
                pid = None if key == "direct" else workers[key[0]]
                before = (ab.cpu_ns([pid]), *worker_counts(pid)) if pid else None
                began = time.perf_counter()
                session.blob(size)
                figures[key].setdefault("wall_ms", []).append((time.perf_counter() - began) * 1000.0)
                if pid and before:
                    after = (ab.cpu_ns([pid]), *worker_counts(pid))
                    figures[key].setdefault("cpu_ms", []).append((after[0] - before[0]) / 1e6)
                    figures[key].setdefault("faults", []).append(after[1] - before[1])
                    figures[key].setdefault("switches", []).append(after[2] - before[2])
        return figures
    finally:
        if direct is not None:
            direct.close()
        for r in running.values():
            gateways.stop(r)


def table(figures: dict[Any, dict[str, list[float]]], trees: list[str], kinds: list[str]) -> str:
    direct = figures["direct"]["wall_ms"]
    rows = ["| kind | tree | wall ms | vs direct pipes | worker CPU ms | page faults | context switches |"]
    rows.append("|---|---|---|---|---|---|---|")
    for kind in kinds:
        for tree in trees:
            f = figures[(tree, kind)]
            ratio = median([w / d for w, d in zip(f["wall_ms"], direct, strict=True)])
            rows.append(
                f"| {kind} | {tree} | {median(f['wall_ms']):.1f} | {ratio:.3f}x | {median(f['cpu_ms']):.2f} "
                f"| {median(f['faults']):.0f} | {median(f['switches']):.0f} |"
            )
        for tree in trees[1:]:
            new, base = figures[(tree, kind)], figures[(trees[0], kind)]
            wall = median([a / b for a, b in zip(new["wall_ms"], base["wall_ms"], strict=True)])
            cpu = median([a / b for a, b in zip(new["cpu_ms"], base["cpu_ms"], strict=True)])
            rows.append(f"| {kind} | {tree}/{trees[0]} | {wall:.3f} | | {cpu:.3f} | | |")
    rows.append(f"| | direct pipes | {median(direct):.1f} | 1.000x | | | |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (holds mcpgate/)")
    parser.add_argument("--new", type=Path, help="the new tree (default: a copy of this checkout's mcpgate/)")
    parser.add_argument("--size", type=int, default=4 * 1024 * 1024, help="the blob's bytes")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--kinds", default=",".join(ab.KINDS), help="2025, 2026 or both (comma-separated)")
    parser.add_argument("--fixed-malloc", action="store_true", help=f"GLIBC_TUNABLES={FIXED_MALLOC} for every tree")
    args = parser.parse_args()
    new = args.new or ab.copy_tree(Path(__file__).resolve().parent / "out" / "blob-ab-new")
    if args.fixed_malloc:
        os.environ["GLIBC_TUNABLES"] = FIXED_MALLOC  # inherited by each gateway (and the direct child)
    trees = {"base": args.base, "new": new}
    kinds = [k for k in args.kinds.split(",") if k]
    figures = run(trees, kinds, args.size, args.reps)
    print(f"{args.size} bytes, {args.reps} reps{', fixed malloc thresholds' if args.fixed_malloc else ''}")
    print(table(figures, list(trees), kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
