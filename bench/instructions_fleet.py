"""Instructions per forwarded call, base tree against new: bench/cluster_instructions.py's fleet, rounds in turn.

    python bench/instructions_fleet.py --base /tmp/s1 --calls 200 --rounds 2
    python bench/instructions_fleet.py --base /tmp/a --new /tmp/b --keep     # dumps kept for callgrind_annotate

Per tree and round: Redis, two instances i1 and i2 (one worker each under callgrind, bench/instructions.py's
steering), a 2025 session opened on i1; its echo calls sent to i1 ("direct") and to i2, which forwards them to
i1 ("forwarded"). Counted per call: the owner's worker for a direct call, the owner's and the forwarder's for a
forwarded one. Each round starts fresh processes of each tree, base and new in turn; the least over the rounds
(and over each round's `--repeat` blocks) is each figure, as bench/instructions.py takes it; the medians of the
rounds follow (one process may be luckier than another by a few per cent). The new tree is by
default a copy of this checkout's mcpgate/ made at the start (edits made while the run goes on do not mix in).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster_instructions
import instructions
import procs
from ab import copy_tree, log

ROWS = ("direct owner", "forwarded owner", "forwarded forwarder")


def ratio(figures: dict[str, float]) -> float:
    """A forwarded call's instructions (owner and forwarder) over a direct one's."""
    return (figures["forwarded owner"] + figures["forwarded forwarder"]) / figures["direct owner"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (holds mcpgate/)")
    parser.add_argument("--new", type=Path, help="the new tree (default: a copy of this checkout's mcpgate/)")
    parser.add_argument("--calls", type=int, default=200, help="calls counted per block")
    parser.add_argument("--rounds", type=int, default=2, help="fleets per tree, base and new in turn")
    parser.add_argument("--repeat", type=int, default=3, help="blocks of --calls per path (the least is taken)")
    parser.add_argument("--warm", type=int, default=100, help="calls of each path made before counting")
    parser.add_argument("--keep", action="store_true", help="keep the callgrind dumps and print their paths")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or not Path(instructions.CALLGRIND_H).exists():
        print(f"needs valgrind, gcc and {instructions.CALLGRIND_H}", file=sys.stderr)
        return 2
    out_dir = Path(tempfile.mkdtemp(prefix="mcpgate-ir-fleet-"))
    trees = {"base": args.base.resolve(), "new": (args.new or copy_tree(out_dir / "new")).resolve()}
    procs.install_handlers()
    figures: dict[str, dict[str, float]] = {"base": {}, "new": {}}
    rounds: dict[str, dict[str, list[float]]] = {"base": {row: [] for row in ROWS}, "new": {row: [] for row in ROWS}}
    try:
        config = instructions.build(out_dir)
        for _ in range(args.rounds):
            for name, tree in trees.items():
                measured = cluster_instructions.measure_tree(tree, args, out_dir, config)
                log(f"{name}: " + ", ".join(f"{row} {measured[row]:,.0f}" for row in ROWS))
                for row in ROWS:
                    figures[name][row] = min(measured[row], figures[name].get(row, measured[row]))
                    rounds[name][row].append(measured[row])
    finally:
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    instructions.print_ab("worker, path", list(ROWS), figures)
    base, now = ratio(figures["base"]), ratio(figures["new"])
    print(f"| forwarded (both) / direct | {base:.2f}× | {now:.2f}× | |")
    medians = {name: {row: statistics.median(values) for row, values in rows.items()} for name, rows in rounds.items()}
    instructions.print_ab("worker, path (median of rounds)", list(ROWS), medians)
    print(f"| forwarded (both) / direct | {ratio(medians['base']):.2f}× | {ratio(medians['new']):.2f}× | |")
    if args.keep:
        print(f"\ndumps: {out_dir} (callgrind_annotate --inclusive=yes <file>; <tree>-i2 is the forwarder)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
