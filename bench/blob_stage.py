"""The big-results stage of bench/run.py: each row's session kept from one round to the next; also run alone.

    python bench/blob_stage.py --rounds 8                    # run.py's stage alone: 2025 session, 2026-07-28, pipes
    python bench/blob_stage.py --rounds 8 --fresh            # a new session each round, as run.py did before
    python bench/blob_stage.py --base /tmp/b0 --new /tmp/x   # two trees, each with its 2025 and 2026-07-28 gateway

Why a kept session: a 2025 session has a child of its own, and the child of a session opened for the round is a
young process. Its allocator has not yet seen a result of megabytes, so every 4 MiB result has its buffers mapped
afresh (about 2,000 page faults and 4 ms of the child's CPU more per result: issue 24); the pooled child of the
2026-07-28 row and the child over direct pipes live through every round and pay that once. A session opened each
round so measured the child's youth, not the gateway. Kept across rounds, the rows' children have carried the same
results before each round. A kept session the gateway has dropped since (an idle timeout) is replaced.

Run alone, the stage starts one gateway per tree and kind (as run.py does per row) and the child over direct pipes,
then per round each of them in a rotating order, as run.py's speed rounds do; `--fresh-pipes` adds the child over
direct pipes started afresh each round (the young child without a gateway). Figures: the median of every run and
its ratio to direct pipes' (run.py's table), the median of the runs after a size's first in a round, and per
result the CPU and page faults of the gateway's worker (for a size's first result in a round, and after it) and
of the children (/proc).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcpclient import HttpSession, PipeSession

SIZES = [64 * 1024, 1024 * 1024, 4 * 1024 * 1024, 8 * 1024 * 1024]  # run.py's big results (report.py's columns)


class BlobSessions:
    """Each row's big-results session, kept across rounds (the module's docstring); `fresh`: a new one each round."""

    def __init__(self, fresh: bool = False) -> None:
        self.fresh = fresh
        self.kept: dict[str, HttpSession] = {}

    def times(
        self, name: str, make: Callable[[], HttpSession], run: Callable[[Any], dict[str, list[float]]]
    ) -> dict[str, Any]:
        """`run`'s figures on `name`'s session, or {"error": ...}: the kept one, else (none yet, or it failed) a
        new one, kept for the next round."""
        session = self.kept.pop(name, None)
        if session is not None:
            try:
                value = run(session)
            except Exception:  # noqa: BLE001 - dropped by the gateway since the last round: a new session
                _end(session)
            else:
                self._keep(name, session)
                return value
        session = make()
        try:
            value = run(session.initialize())
        except Exception as exc:  # noqa: BLE001 - one failed measurement must not end the run
            _end(session)
            return {"error": repr(exc)[:300]}
        self._keep(name, session)
        return value

    def _keep(self, name: str, session: HttpSession) -> None:
        if self.fresh:
            _end(session)
        else:
            self.kept[name] = session

    def close(self) -> None:
        for session in self.kept.values():
            _end(session)
        self.kept.clear()


def _end(session: HttpSession) -> None:
    session.delete()
    session.close()


# -- run alone ----------------------------------------------------------------------------------------------------


def _counts(pids: list[int]) -> tuple[int, int]:
    """CPU ns (every thread) and minor page faults of `pids` so far (a pid gone counts nothing)."""
    cpu = faults = 0
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    cpu += int(f.read().split()[0])
            with open(f"/proc/{pid}/stat", "rb") as f:
                faults += int(f.read().rsplit(b")", 1)[1].split()[7])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return cpu, faults


def _sizes(session: Any, reps: int, worker: list[int], children: list[int], out: dict) -> dict[str, list[float]]:
    """measure.blob_times with each result's worker and child CPU and faults noted in `out` by (size, rep)."""
    session.blob(65536)  # warm the path (measure.blob_times's)
    times: dict[str, list[float]] = {}
    for size in SIZES:
        for rep in range(reps if size <= (1 << 20) else max(1, reps - 1)):
            before = (*_counts(worker), *_counts(children))
            began = time.perf_counter()
            session.blob(size)
            wall = (time.perf_counter() - began) * 1000.0
            after = (*_counts(worker), *_counts(children))
            times.setdefault(str(size), []).append(wall)
            used = [(b - a) for a, b in zip(before, after, strict=True)]
            out.setdefault((size, rep), []).append((wall, used[0] / 1e6, used[1], used[2] / 1e6, used[3]))
    return times


def _children(pid: int) -> list[int]:
    import gateways

    return list(gateways.servers_cpu_ns(pid))


def run_alone(trees: dict[str, Path], rounds: int, reps: int, fresh: bool, fresh_pipes: bool) -> dict:
    import ab
    import gateways

    log_dir = Path(__file__).resolve().parent / "out" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    running: dict[tuple[str, str], Any] = {}
    sessions, direct, figures = BlobSessions(fresh), None, {}
    try:
        for tree_name, tree in trees.items():
            for kind in ab.KINDS:
                running[(tree_name, kind)] = gateways.start(ab.spec(f"blobs-{tree_name}-{kind}", tree), log_dir)
        workers = {key: [max(ab.gateway_pids(r))] for key, r in running.items()}
        direct = PipeSession(gateways.CHILD).initialize()
        keys: list[Any] = [*running, "pipes", *(["fresh pipes"] if fresh_pipes else [])]
        figures = {key: {} for key in keys}
        for rnd in range(rounds):
            for key in keys[rnd % len(keys) :] + keys[: rnd % len(keys)]:
                if key == "pipes":
                    _sizes(direct, reps, [], [direct.proc.pid], figures[key])
                elif key == "fresh pipes":
                    young = PipeSession(gateways.CHILD).initialize()
                    try:
                        _sizes(young, reps, [], [young.proc.pid], figures[key])
                    finally:
                        young.close()
                else:
                    r, worker = running[key], workers[key]
                    sessions.times(
                        "-".join(key),
                        lambda r=r, kind=key[1]: ab.CLIENT_OF[kind](r.port, "/mcp"),
                        lambda s, w=worker, pid=r.proc.pid, k=key: _sizes(s, reps, w, _children(pid), figures[k]),
                    )
    finally:
        sessions.close()
        if direct is not None:
            direct.close()
        for r in running.values():
            gateways.stop(r)
    return figures


def table(figures: dict) -> list[str]:
    med = statistics.median
    head = (
        "| row | ms (all runs) | vs pipes | ms (after the first) | worker CPU ms / faults (first) "
        "| worker CPU ms / faults | children CPU ms / faults |"
    )
    rows = []
    for size in SIZES:
        pipes = med([run[0] for (s, _), runs in figures["pipes"].items() if s == size for run in runs])
        rows += ["", f"{size} bytes", head, "|---|---|---|---|---|---|---|"]
        for key, by_rep in figures.items():
            every = [run for (s, _), runs in by_rep.items() if s == size for run in runs]
            later = [run for (s, rep), runs in by_rep.items() if s == size and rep > 0 for run in runs] or every
            wall, gateway = med([run[0] for run in every]), isinstance(key, tuple)
            first = [run for (s, rep), runs in by_rep.items() if s == size and rep == 0 for run in runs]
            worker = f"{med([r[1] for r in later]):.2f} / {med([r[2] for r in later]):.0f}" if gateway else "–"
            cold = f"{med([r[1] for r in first]):.2f} / {med([r[2] for r in first]):.0f}" if gateway else "–"
            rows.append(
                f"| {' '.join(key) if gateway else key} | {wall:.1f} | {wall / pipes:.2f}x "
                f"| {med([r[0] for r in later]):.1f} | {cold} | {worker} "
                f"| {med([r[3] for r in later]):.2f} / {med([r[4] for r in later]):.0f} |"
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="a tree (holds mcpgate/); default: this checkout")
    parser.add_argument("--new", type=Path, help="a second tree")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=4, help="runs per size (one fewer past 1 MiB), as run.py's")
    parser.add_argument("--fresh", action="store_true", help="a new session each round (run.py before issue 24)")
    parser.add_argument("--fresh-pipes", action="store_true", help="also the child over pipes, new each round")
    args = parser.parse_args()
    trees = {"base": args.base or Path(__file__).resolve().parent.parent}
    if args.new:
        trees["new"] = args.new
    figures = run_alone(trees, args.rounds, args.reps, args.fresh, args.fresh_pipes)
    print(f"{args.rounds} rounds, {'a new session each round' if args.fresh else 'sessions kept across rounds'}")
    print("\n".join(table(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
