"""Instructions per forwarded call: two instances of a fleet (i1 owns the session, i2 forwards to it), each
worker under valgrind's callgrind, for one or more mcpgate trees; bench/instructions.py's steering, two workers.

    git archive <rev> | tar -x -C /tmp/fleet-base          # the base tree
    python bench/cluster_instructions.py /tmp/fleet-base /tmp/fleet-new --calls 200

Per tree: Redis, then i1 and i2 (each `gunicorn mcpgate.wsgi` with one worker under callgrind, the bench child
outside it). A session is opened on i1; after `--warm` calls of each path, counting is switched on in both
workers, `--calls` echo calls are made and both dump: the calls sent to i1 itself ("direct": i1's instructions)
and the same session's calls sent to i2, which forwards them ("forwarded": i1's and i2's). Of `--repeat` blocks
the least is each figure (what runs by the clock falls into a block with its wall time). Printed per tree: the
owner's instructions a call direct and forwarded, the forwarder's, and forwarded (both) over direct. With
`--handoff` the instances hand connections (MCPGATE_HANDOFF_DIR; the kept connection to i2 is then handed at its
first call and its calls are direct), and two more paths are counted: calls each on a new connection to i1, and
each on a new connection to i2, which hands it to i1 (both workers): their difference is one handoff.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster
import gateways
import instructions
import procs
from mcpclient import HttpSession


def start(
    tree: Path, name: str, redis_port: int, out_dir: Path, config: Path, handoff: bool = False
) -> gateways.Running:
    env = {
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "MCPGATE_INSTANCE_ID": name,
        "MCPGATE_CLUSTER_SECRET": cluster.SECRET,
    }
    if handoff:
        env["MCPGATE_HANDOFF_DIR"] = str(out_dir / f"handoff-{redis_port}")
    spec = instructions.spec(f"{tree.name}-{name}", tree, out_dir, config, env)
    return gateways.start(spec, out_dir / "logs", timeout=600.0)


def block(workers: list[tuple[str, int]], out_dir: Path, calls: int, call: object) -> list[float]:
    """Each worker's instructions a call over `calls` calls of `call`."""
    marker = out_dir / "marker"
    for _ in range(5):  # connections kept alive again (an idle one may have been closed while the tool steered)
        call()  # type: ignore[operator]
    before = {pid: set(out_dir.glob(f"{name}.{pid}.out*")) for name, pid in workers}
    for _, pid in workers:
        instructions.steer(pid, marker, 1)
    for _ in range(calls):
        call()  # type: ignore[operator]
    for _, pid in workers:
        instructions.steer(pid, marker, 2)
    return [instructions.dumped_total(out_dir, name, pid, before[pid]) / calls for name, pid in workers]


def measure_tree(tree: Path, args: argparse.Namespace, out_dir: Path, config: Path) -> dict[str, float]:
    started: list[cluster.Process] = []
    runs: list[gateways.Running] = []
    try:
        redis = cluster.start_redis(out_dir)
        started.append(redis)
        owner = start(tree, "i1", redis.port, out_dir, config, args.handoff)
        runs.append(owner)
        other = start(tree, "i2", redis.port, out_dir, config, args.handoff)
        runs.append(other)
        workers = [
            (f"{tree.name}-i1", instructions.worker_pid(owner.proc.pid)),
            (f"{tree.name}-i2", instructions.worker_pid(other.proc.pid)),
        ]
        direct = HttpSession(owner.port, "/mcp", timeout=600.0).initialize()
        steered = cluster.Steered(owner.port, other.port).initialize()
        for _ in range(args.warm):
            direct.echo()
            steered.echo()
        figures: dict[str, float] = {}
        paths = [("direct", direct), ("forwarded", steered)]
        if args.handoff:  # (the kept connection to i2 was handed at its first call: "forwarded" is then direct)
            each = cluster.fresh(HttpSession)(owner.port, "/mcp").initialize()
            handed = cluster.fresh(cluster.steered_to(owner.port))(other.port, "/mcp").initialize()
            paths += [("connection each", each), ("handed each", handed)]
        for path, session in paths:
            blocks = [block(workers, out_dir, args.calls, session.echo) for _ in range(args.repeat)]
            figures[f"{path} owner"] = min(b[0] for b in blocks)
            if path in ("forwarded", "handed each"):
                figures[f"{path} forwarder"] = min(b[1] for b in blocks)
        for _, session in paths:
            session.close()
        return figures
    finally:
        for run in reversed(runs):
            gateways.stop(run)
        for process in reversed(started):
            process.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="mcpgate source trees (each holding mcpgate/)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warm", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--handoff",
        action="store_true",
        help="the instances hand connections (MCPGATE_HANDOFF_DIR): also calls each on a new connection, to i1 "
        "and to i2 (which hands each to i1)",
    )
    args = parser.parse_args(argv)
    procs.install_handlers()
    out_dir = gateways.BENCH / "out" / f"cluster-ir-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    config = instructions.build(out_dir)
    for tree in (tree.resolve() for tree in args.trees):
        figures = measure_tree(tree, args, out_dir, config)
        both = figures["forwarded owner"] + figures["forwarded forwarder"]
        shown = ", ".join(f"{name} {value:,.0f}" for name, value in figures.items())
        print(f"{tree}: {shown}; forwarded / direct {both / figures['direct owner']:.2f}×", flush=True)
        if args.handoff:
            handed = figures["handed each owner"] + figures["handed each forwarder"]
            print(f"  one handoff: {handed - figures['connection each owner']:,.0f} instructions", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
