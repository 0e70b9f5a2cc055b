"""The walk of one tools/call through the gateway: which mcpgate modules it touches and how often it crosses
from one module into another, for a 2025 session and for a 2026-07-28 request (issue 23's house figures).

    python bench/walk.py                      # this tree, both eras
    python bench/walk.py --src /tmp/old       # another tree (e.g. `git archive <rev> | tar -x -C /tmp/old`)
    python bench/walk.py --calls              # also print the cross-module calls in order

The gateway runs as always (gunicorn, the gevent worker, the bench's echo child); a profile function installed in
the worker records every call into an mcpgate module while a switch (a signal sent by this script) is on. The
switch is turned on after a warm-up, around exactly one tools/call, so start-up and first-call work are left out.
A call counts as a crossing when the caller's module is another mcpgate module; calls from gevent, Flask or the
standard library into mcpgate are entries and are counted apart. Figures are counts, not times: the same on a
busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways
import procs
from mcpclient import HttpSession, StatelessSession

SWITCH = signal.SIGRTMIN + 5

PROBE = """
import json, signal, sys
from mcpgate.gunicorn_config import *  # noqa: F403 (the gateway's own settings and hooks)
from mcpgate import gunicorn_config as _base

_records = []
_on = [False]

def _profile(frame, event, arg):
    if event != "call" or not _on[0]:
        return
    module = frame.f_globals.get("__name__", "")
    if module.startswith("mcpgate"):
        back = frame.f_back
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        _records.append((caller, module, frame.f_code.co_name))

def _switch(signum, frame):
    if not _on[0]:
        _records.clear()
        _on[0] = True
        open({out!r} + ".on", "w").close()
    else:
        _on[0] = False
        with open({out!r} + ".tmp", "w") as f:
            json.dump(_records, f)
        import os
        os.replace({out!r} + ".tmp", {out!r})

def post_worker_init(worker):
    _base.post_worker_init(worker)
    sys.setprofile(_profile)
    signal.signal({signum}, _switch)
"""


def worker_pid(master: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{master}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise RuntimeError("the gunicorn worker did not start")


def wait_file(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {path.name} from the worker")
        time.sleep(0.01)


def walk(era: str, src: Path | None, tmp: Path) -> list[tuple[str, str, str]]:
    out = tmp / f"walk-{era}.json"
    conf = tmp / f"walk-{era}.conf.py"
    conf.write_text(PROBE.format(out=str(out), signum=int(SWITCH)))
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    env = gateways.mcpgate_env()
    if src is not None:
        env["PYTHONPATH"] = str(src)
    spec = gateways.Spec(
        f"walk-{era}",
        era,
        lambda port: [gunicorn, "-c", str(conf), "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"],
        env,
        cwd=src,  # gunicorn puts its working directory first on sys.path
    )
    running = gateways.start(spec, tmp, timeout=120.0)
    try:
        session = (StatelessSession if era == "modern" else HttpSession)(running.port).initialize()
        for _ in range(5):
            session.echo()
        pid = worker_pid(running.proc.pid)
        os.kill(pid, SWITCH)
        wait_file(Path(f"{out}.on"))
        session.echo()
        os.kill(pid, SWITCH)
        wait_file(out)
        session.close()
        return [(r[0], r[1], r[2]) for r in json.loads(out.read_text())]
    finally:
        gateways.stop(running)


def summary(records: list[tuple[str, str, str]]) -> dict[str, object]:
    modules = sorted({callee for _, callee, _ in records})
    crossings = [r for r in records if r[0].startswith("mcpgate") and r[0] != r[1]]
    entries = [r for r in records if not r[0].startswith("mcpgate")]
    return {"calls": len(records), "modules": modules, "crossings": crossings, "entries": len(entries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, help="measure the mcpgate package of this tree")
    parser.add_argument("--calls", action="store_true", help="print the cross-module calls in order")
    args = parser.parse_args()
    procs.install_handlers()
    with tempfile.TemporaryDirectory() as tmp:
        for era in ("legacy", "modern"):
            s = summary(walk(era, args.src, Path(tmp)))
            label = "2025 session tools/call" if era == "legacy" else "2026-07-28 tools/call (pooled child)"
            crossings = s["crossings"]
            assert isinstance(crossings, list) and isinstance(s["modules"], list)
            print(f"{label}: {len(s['modules'])} modules, {len(crossings)} crossings, {s['entries']} entries")
            print("  " + ", ".join(m.removeprefix("mcpgate.") for m in s["modules"]))
            if args.calls:
                for caller, callee, name in crossings:
                    print(f"    {caller.removeprefix('mcpgate.')} -> {callee.removeprefix('mcpgate.')}.{name}")


if __name__ == "__main__":
    main()
