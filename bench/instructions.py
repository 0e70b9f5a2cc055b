"""Instructions per call: two mcpgate trees' workers run under valgrind's callgrind, counted call by call.

    git archive HEAD | tar -x -C /tmp/ir-base                 # the base tree, before the change
    python bench/instructions.py --base /tmp/ir-base --kinds 2025,2026 --calls 300
    python bench/instructions.py --base /tmp/a --new /tmp/b --env MCPGATE_TRACING=1 --keep   # dumps kept

CPU time on a shared two-core machine varies by several percent from one minute to the next; the number of
instructions a worker runs for the same calls varies far less (see below for how far). Each tree's
gateway is started under `valgrind --tool=callgrind --instr-atstart=no` (the master and the worker it forks are
under the tool; the bench's echo child, exec'd, runs natively and is not counted). callgrind_control cannot
reach a forked worker (vgdb serves the first process only), so the worker is steered from inside: a gunicorn
config of the bench's (mcpgate's own plus one hook) loads a small library built here with gcc from valgrind's
callgrind.h and gives the worker two signal handlers. After `--warm` calls of a kind on a kept-alive connection,
SIGRTMIN+1 switches instrumentation on and zeroes the counters, `--calls` more are made, SIGRTMIN+2 dumps the
counters and switches it off: the dump's total over the calls is the figure (the worker's whole process: its
greenlets, the hub, the heartbeat; not the master nor the child). What the worker does by the clock (its
heartbeat, timers) falls into a block in proportion to the block's wall time, which a busy machine stretches: of
`--repeat` blocks the least is the figure. Processes of one tree differ by up to ~2 % (where objects land in
memory decides some hashing): each of `--rounds` rounds starts a fresh process of each tree, base and new in
turn, and the least over all rounds is the figure (two runs of one tree then agree within ~1 %).
`--keep` leaves the dumps (callgrind_annotate <file> shows where the instructions went) and prints their paths.

Two regimes, and `--pause`. Under callgrind the worker runs ~50x slower than the client and the child, so by the
time it looks for the next request (or the child's answer) the bytes are often there already: a block can run 200
calls with a handful of greenlet switches and no failed read, where a native worker waits on the hub twice a call.
Which regime a block lands in follows the host's load (one process of one tree read 203k a call in one, 219k in the
other), and a change to the waits (how the worker waits for a socket) shows only in the native one. `--pause S`
makes the client sleep S seconds after each call (0.01 is enough), so that every counted call meets a worker that
waits for it as a native one does (a 2025 call's blocks agreed within 1 % on 2026-12-03). Compare one regime
with itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways
import procs
from ab import copy_tree, log
from mcpclient import CLIENTS

KINDS = {"2025": CLIENTS["legacy"], "2026": CLIENTS["modern"]}
CALLGRIND_H = "/usr/include/valgrind/callgrind.h"
STEER_S = 120.0  # the worker handles a signal (and writes a dump) within this


LIBRARY_C = r"""
#include <valgrind/callgrind.h>
void ir_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void ir_dump(const char *tag) { CALLGRIND_DUMP_STATS_AT(tag); CALLGRIND_STOP_INSTRUMENTATION; }
"""
# The bench's gunicorn config: mcpgate's own, and in the worker two signal handlers that steer callgrind. Each
# handler writes its signal's number to the marker file once done, which the bench waits for.
CONFIG_PY = """
import ctypes, os, signal
import gevent
from mcpgate.gunicorn_config import *  # noqa: F403
from mcpgate.gunicorn_config import post_worker_init as _mcpgate_post_worker_init

_LIB = ctypes.CDLL({library!r})
_MARKER = {marker!r}


def _done(number):
    with open(_MARKER + ".tmp", "w") as f:
        f.write(str(number))
    os.replace(_MARKER + ".tmp", _MARKER)


def _on():
    _LIB.ir_on()
    _done(1)


def _dump():
    _LIB.ir_dump(b"calls")
    _done(2)


def post_worker_init(worker):
    _mcpgate_post_worker_init(worker)
    gevent.signal_handler(signal.SIGRTMIN + 1, _on)
    gevent.signal_handler(signal.SIGRTMIN + 2, _dump)
"""


def build(out_dir: Path) -> Path:
    """The steering library and the gunicorn config that loads it, in out_dir; returns the config's path."""
    source, library = out_dir / "ir.c", out_dir / "ir.so"
    source.write_text(LIBRARY_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    config = out_dir / "ir_gunicorn_config.py"
    config.write_text(CONFIG_PY.format(library=str(library), marker=str(out_dir / "marker")))
    return config


def spec(name: str, tree: Path, out_dir: Path, config: Path, env: dict[str, str]) -> gateways.Spec:
    def argv(port: int) -> list[str]:
        return [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_dir}/{name}.%p.out",
            str(gateways._python_tool("gunicorn")),
            "-c",
            str(config),
            "-b",
            f"127.0.0.1:{port}",
            "mcpgate.wsgi",
        ]

    full_env = {
        **gateways.mcpgate_env(MCPGATE_LOG_LEVEL="ERROR"),
        "PYTHONPATH": str(tree),
        "PYTHONHASHSEED": "0",
        **env,
    }
    return gateways.Spec(name, f"mcpgate from {tree} under callgrind", argv, env=full_env, cwd=tree)


def worker_pid(root: int) -> int:
    """The worker the master forked (the gateway's pids other than the master)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        others = [pid for pid in gateways._gateway_pids(root) if pid != root]
        if len(others) == 1:
            return others[0]
        time.sleep(0.2)
    raise RuntimeError(f"no single worker under {root}: {gateways._gateway_pids(root)}")


def steer(pid: int, marker: Path, number: int) -> None:
    """Signal SIGRTMIN+number to the worker and wait until its handler has run (it writes the marker)."""
    marker.unlink(missing_ok=True)
    os.kill(pid, signal.SIGRTMIN + number)
    deadline = time.monotonic() + STEER_S
    while not (marker.exists() and marker.read_text() == str(number)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker {pid} did not handle SIGRTMIN+{number} within {STEER_S} s")
        time.sleep(0.05)


def dumped_total(out_dir: Path, name: str, pid: int, before: set[Path]) -> int:
    """The instruction total of the dump written since `before` for this worker."""
    deadline = time.monotonic() + STEER_S
    while time.monotonic() < deadline:
        for path in sorted(set(out_dir.glob(f"{name}.{pid}.out*")) - before):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith(("totals:", "summary:")):
                    return int(line.split()[1])
        time.sleep(0.1)
    raise RuntimeError(f"no dump from {name} worker {pid} in {out_dir}")


def measure_tree(
    name: str, tree: Path, kinds: list[str], args: argparse.Namespace, out_dir: Path, config: Path
) -> dict[str, float]:
    env = dict(item.split("=", 1) for item in args.env)
    run = gateways.start(spec(name, tree, out_dir, config, env), out_dir / "logs", timeout=600.0)
    marker = out_dir / "marker"
    figures: dict[str, float] = {}
    try:
        pid = worker_pid(run.proc.pid)
        for kind in kinds:
            session = KINDS[kind](run.port, "/mcp", timeout=600.0).initialize()
            for _ in range(args.warm):
                session.echo()
            blocks = []
            for _ in range(args.repeat):
                before = set(out_dir.glob(f"{name}.{pid}.out*"))
                steer(pid, marker, 1)
                for _ in range(args.calls):
                    session.echo()
                    if args.pause:
                        time.sleep(args.pause)  # the worker waits for the next request, as a native one does
                steer(pid, marker, 2)
                blocks.append(dumped_total(out_dir, name, pid, before) / args.calls)
            figures[kind] = min(blocks)
            session.close()
            spread = ", ".join(f"{block:,.0f}" for block in blocks)
            log(f"{name} {kind}: least {figures[kind]:,.0f} instructions a call (blocks: {spread})")
    finally:
        gateways.stop(run)
    return figures


def print_ab(heading: str, rows: list[str], figures: dict[str, dict[str, float]]) -> None:
    """The table of a base/new run: each row's least instructions a call in each tree, and their ratio."""
    print(f"\n| {heading} | base Ir/call | new Ir/call | new/base |\n|---|---:|---:|---:|")
    for row in rows:
        base, now = figures["base"][row], figures["new"][row]
        print(f"| {row} | {base:,.0f} | {now:,.0f} | {now / base:.3f}× |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (holds mcpgate/)")
    parser.add_argument("--new", type=Path, help="the new tree (default: a copy of this checkout's mcpgate/)")
    parser.add_argument("--kinds", default="2025,2026", help="2025 (a session), 2026 (the pooled path) or both")
    parser.add_argument("--calls", type=int, default=300, help="calls counted per kind")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree, base and new in turn")
    parser.add_argument("--repeat", type=int, default=5, help="blocks of --calls per kind (the least is taken)")
    parser.add_argument("--warm", type=int, default=200, help="calls made before counting (caches, the pool's child)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for both gateways (repeatable)")
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds the client sleeps after each counted call (0.01: paced)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the callgrind dumps and print their paths")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("gcc") is None or not Path(CALLGRIND_H).exists():
        print(f"needs valgrind, gcc and {CALLGRIND_H}: apt-get install valgrind gcc", file=sys.stderr)
        return 2
    kinds = [kind for kind in args.kinds.split(",") if kind]
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        parser.error(f"--kinds takes {', '.join(KINDS)}")
    out_dir = Path(tempfile.mkdtemp(prefix="mcpgate-ir-"))
    new = args.new or copy_tree(out_dir / "new-tree")
    procs.install_handlers()
    try:
        config = build(out_dir)
        figures: dict[str, dict[str, float]] = {"base": {}, "new": {}}
        for _ in range(args.rounds):  # each round a fresh process of each tree: the least over all
            for name, tree in (("base", args.base), ("new", new)):
                for kind, value in measure_tree(name, tree.resolve(), kinds, args, out_dir, config).items():
                    figures[name][kind] = min(value, figures[name].get(kind, value))
    finally:
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    print_ab("kind", kinds, figures)
    if args.keep:
        print(f"\ndumps: {out_dir} (callgrind_annotate --inclusive=yes <file>)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
