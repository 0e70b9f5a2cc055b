"""How long an idle gateway takes to stop: SIGTERM to the master's exit, for this checkout and, with --base, another
tree, in alternating turns (a rolling redeploy pays it once a worker, the test suite once a gateway it stops).

    python bench/stop_time.py                          # this checkout, 5 stops
    python bench/stop_time.py --base /tmp/old --stops 5  # `git archive <rev> | tar -x -C /tmp/old` first

Each stop starts `gunicorn mcpgate.wsgi` (the bundled demo server, no session) from the tree on a free loopback
port, waits until it accepts a connection and answers /healthz, then signals the master by its PID and times its
exit. Prints each stop and the median per tree.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateways import free_port

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0


def ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
        conn.close()
        return status == 200
    except OSError:
        return False


def one_stop(tree: Path) -> float:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the gateway of {tree} did not start (exit {proc.poll()})")
            time.sleep(0.02)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(READY_TIMEOUT)
        return time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="another tree (holds mcpgate/), measured in turn with this one")
    parser.add_argument("--stops", type=int, default=5)
    args = parser.parse_args()
    trees = {"this checkout": ROOT}
    if args.base is not None:
        if not (args.base / "mcpgate").is_dir():
            raise SystemExit(f"{args.base} holds no mcpgate/")
        trees = {"base": args.base.resolve(), **trees}
    times: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.stops):
        for name, tree in trees.items():
            times[name].append(one_stop(tree))
            print(f"{name}: stopped in {times[name][-1]:.2f} s", flush=True)
    for name, taken in times.items():
        print(f"{name}: median {statistics.median(taken):.2f} s over {len(taken)} stops")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
