"""A/B of gateway CPU per call with many 2025 sessions calling in turn: the worker's memo of request heads.

    git archive HEAD | tar -x -C /tmp/heads-base     # the base tree, before the change
    python bench/heads_ab.py --base /tmp/heads-base --sessions 16,128,256,1000 --rounds 3 --calls 2000

Each 2025 session sends its own Mcp-Session-Id, so each session's request head is distinct bytes. Each tree's
gateway (gunicorn, mcpgate's worker, the bench's echo child) runs on its own port; for each N, N sessions are
opened on each gateway, each on its own kept-alive http.client connection, and a round makes `--calls`
sequential tools/call on each gateway in turn (the order rotating by round), going through the N sessions one
after another (session 0, 1, ..., N-1, 0, ...). CPU per call is the gateway's own (master + worker, every
thread, the children excluded) from /proc schedstat around each gateway's share of the round; the ratio
new/base is taken within each round, then the median. The sessions are deleted before the next N.
Without --new the new tree is a copy of this checkout's mcpgate/ taken at the start (edits may go on).
--micro times the memo alone instead, in one process per tree, interleaved: the worker's Heads.get of the head a
bench session sends, over N session ids in turn (ns per head; no gateway, so little of the machine's noise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab
import gateways
import procs
from mcpclient import HttpSession

ENV = {  # room for 1000 sessions on kept-alive connections, none closed while it waits its turn
    "MCPGATE_IDLE_CONNECTIONS": "2400",
    "MCPGATE_KEEPALIVE_TIMEOUT": "600",
    "MCPGATE_SESSION_IDLE_TTL": "3600",
}


def spec(name: str, tree: Path) -> gateways.Spec:
    made = ab.spec(name, tree)
    made.env.update(ENV)
    return made


def round_of(sessions: dict[str, list[HttpSession]], pids: dict[str, list[int]], calls: int, turn: int) -> dict:
    names = list(sessions)
    order = names[turn % len(names) :] + names[: turn % len(names)]
    used: dict[str, float] = {}
    for name in order:
        group = sessions[name]
        began = ab.cpu_ns(pids[name])
        for n in range(calls):
            group[n % len(group)].echo()
        used[name] = (ab.cpu_ns(pids[name]) - began) / calls / 1000.0
    return used


MICRO = """
import sys, time
from mcpgate.serve.front.heads import Heads
count, calls = int(sys.argv[1]), int(sys.argv[2])
line = b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:8000\\r\\nAccept-Encoding: identity\\r\\nContent-Length: 96\\r\\n"
tail = b"Accept: application/json, text/event-stream\\r\\nContent-Type: application/json\\r\\n"
raws = [line + tail + b"Mcp-Session-Id: %032x\\r\\nMCP-Protocol-Version: 2025-11-25\\r\\n\\r\\n" % (n * 7919)
        for n in range(count)]
memo = Heads()
for raw in raws:
    assert memo.get(raw) is not None
began = time.process_time_ns()
for n in range(calls):
    memo.get(raws[n % count])
print((time.process_time_ns() - began) / calls)
"""


def micro(trees: dict[str, Path], counts: list[int], rounds: int, calls: int) -> None:
    """Heads.get's ns per head over N sessions in turn, each tree in its own process, interleaved by round."""
    print("| sessions | base ns/head | new ns/head | new/base (median of rounds) |\n|---|---|---|---|")
    for count in counts:
        figures: dict[str, list[float]] = {name: [] for name in trees}
        for turn in range(rounds):
            for name in list(trees)[turn % 2 :] + list(trees)[: turn % 2]:
                env = {**os.environ, "PYTHONPATH": str(trees[name])}
                argv = [sys.executable, "-c", MICRO, str(count), str(calls)]
                out = subprocess.run(argv, env=env, cwd=trees[name], capture_output=True, text=True, check=True)
                figures[name].append(float(out.stdout))
        ratios = [n / b for n, b in zip(figures["new"], figures["base"], strict=True)]
        base, new = statistics.median(figures["base"]), statistics.median(figures["new"])
        print(f"| {count} | {base:.0f} | {new:.0f} | {statistics.median(ratios):.3f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (holds mcpgate/)")
    parser.add_argument("--new", type=Path, help="the new tree (default: a copy of this checkout's mcpgate/)")
    parser.add_argument("--sessions", default="16,128,256,1000", help="the numbers of sessions, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="sequential calls per gateway and round")
    parser.add_argument("--micro", action="store_true", help="time the memo alone (Heads.get), no gateway")
    args = parser.parse_args()
    new = args.new or ab.copy_tree(gateways.BENCH / "out" / "heads-new")
    counts = [int(n) for n in args.sessions.split(",") if n]
    if args.micro:
        micro({"base": args.base.resolve(), "new": new.resolve()}, counts, args.rounds, args.calls)
        return 0
    procs.install_handlers()
    log_dir = gateways.BENCH / "out" / "logs"
    started = {}
    rows = []
    try:
        for name, tree in (("base", args.base.resolve()), ("new", new.resolve())):
            started[name] = gateways.start(spec(f"heads-{name}", tree), log_dir)
            ab.log(f"{name}: {tree} on port {started[name].port}")
        pids = {name: ab.gateway_pids(run) for name, run in started.items()}
        for count in counts:
            sessions = {
                name: [HttpSession(run.port).initialize() for _ in range(count)] for name, run in started.items()
            }
            try:
                for group in sessions.values():
                    for session in group:  # warm: every session's first calls
                        session.echo()
                        session.echo()
                figures: dict[str, list[float]] = {name: [] for name in sessions}
                for turn in range(args.rounds):
                    for name, value in round_of(sessions, pids, args.calls, turn).items():
                        figures[name].append(value)
                    said = ", ".join(f"{k} {v[-1]:.1f} us" for k, v in figures.items())
                    ab.log(f"N={count} round {turn + 1}: {said}")
                ratios = [n / b for n, b in zip(figures["new"], figures["base"], strict=True) if b]
                rows.append(
                    f"| {count} | {statistics.median(figures['base']):.1f} | {statistics.median(figures['new']):.1f} "
                    f"| {statistics.median(ratios):.3f} |"
                )
            finally:
                for group in sessions.values():
                    for session in group:
                        session.delete()
                        session.close()
    finally:
        for run in started.values():
            gateways.stop(run)
    print("| sessions | base cpu us/call | new cpu us/call | new/base (median of rounds) |\n|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
